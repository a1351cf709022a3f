/* cpu_kernels.h: the CPU backend: its table (cpu_backend.c), its op families, each running the ops of its kinds
 * (see include/grace_ops.h; arity and devices were checked by vm_route), and its IR interpreter. */
#ifndef GRACE_CPU_KERNELS_H
#define GRACE_CPU_KERNELS_H

#include "base/base.h"

typedef vm_op_fn cpu_op_fn;

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
/* MASKED_SELECT, NONZERO, INDEX_PUT_ (cpu_index.c) */
grace_status cpu_index_run(grace_vm *vm, grace_op op, int nin, grace_tensor *const *in,
                           const grace_attrs *a, int nout, grace_tensor **out);
/* CREATE (cpu_create.c) */
grace_status cpu_create_run(grace_vm *vm, grace_op op, int nin, grace_tensor *const *in,
                            const grace_attrs *a, int nout, grace_tensor **out);

/* The backend's table, registered by grace_vm_new. */
extern const vm_backend cpu_backend;
/* Runs a verified IR program on the CPU (cpu_interp.c): grace_ir_run's host executor. */
grace_status cpu_ir_run(grace_ir *ir, int nin, grace_tensor *const *in, int nout, grace_tensor **out);

/* Shared by families: copies src (broadcast to dst's shape, converted to dst's dtype) into dst. */
grace_status cpu_copy_into(grace_vm *vm, const char *op, grace_tensor *dst, const grace_tensor *src);
/* A contiguous tensor with src's contents (src itself, retained, when it already is contiguous). */
grace_status cpu_contiguous(grace_vm *vm, const char *op, grace_tensor *src, grace_tensor **out);

#endif
