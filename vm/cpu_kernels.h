/* cpu_kernels.h: the CPU backend's op families behind grace_run. Each family runs the ops of its kinds
 * (see include/grace_ops.h); grace_run has already checked arity and devices. */
#ifndef GRACE_CPU_KERNELS_H
#define GRACE_CPU_KERNELS_H

#include "vm/vm.h"

typedef grace_status (*cpu_op_fn)(grace_vm *vm, grace_op op, int nin, grace_tensor *const *in,
                                  const grace_attrs *a, int nout, grace_tensor **out);

/* UNARY, BINARY, COMPARE, TERNARY, and COPY_, FILL_, CONTIGUOUS, CLONE (cpu_pointwise.c) */
grace_status cpu_pointwise_run(grace_vm *vm, grace_op op, int nin, grace_tensor *const *in,
                               const grace_attrs *a, int nout, grace_tensor **out);
/* REDUCE, SCAN, NORM (cpu_reduce.c) */
grace_status cpu_reduce_run(grace_vm *vm, grace_op op, int nin, grace_tensor *const *in,
                            const grace_attrs *a, int nout, grace_tensor **out);
/* ATTENTION (cpu_attention.c) */
grace_status cpu_attention_run(grace_vm *vm, grace_op op, int nin, grace_tensor *const *in,
                               const grace_attrs *a, int nout, grace_tensor **out);
/* MATMUL (cpu_matmul.c) */
grace_status cpu_matmul_run(grace_vm *vm, grace_op op, int nin, grace_tensor *const *in,
                            const grace_attrs *a, int nout, grace_tensor **out);
/* MOVE except CONTIGUOUS/CLONE/TO_DEVICE, and INDEX_COPY_ (cpu_shape.c) */
grace_status cpu_shape_run(grace_vm *vm, grace_op op, int nin, grace_tensor *const *in,
                           const grace_attrs *a, int nout, grace_tensor **out);
/* CREATE (cpu_create.c) */
grace_status cpu_create_run(grace_vm *vm, grace_op op, int nin, grace_tensor *const *in,
                            const grace_attrs *a, int nout, grace_tensor **out);
/* VIEW (vm_view.c): backend independent */
grace_status vm_view_run(grace_vm *vm, grace_op op, int nin, grace_tensor *const *in,
                         const grace_attrs *a, int nout, grace_tensor **out);

/* Shared by families: copies src (broadcast to dst's shape, converted to dst's dtype) into dst. */
grace_status cpu_copy_into(grace_vm *vm, const char *op, grace_tensor *dst, const grace_tensor *src);
/* A contiguous tensor with src's contents (src itself, retained, when it already is contiguous). */
grace_status cpu_contiguous(grace_vm *vm, const char *op, grace_tensor *src, grace_tensor **out);

#endif
