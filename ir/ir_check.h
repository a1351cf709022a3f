/* ir_check.h: argument checks and layout helpers that both backends' ops use (ir_check.c), so the CPU and the
 * device give the same errors with the same words. */
#ifndef GRACE_IR_CHECK_H
#define GRACE_IR_CHECK_H

#include "base/base.h"

/* ir_infer on the tensors' types (dtype, device, shape, wrapped number): the result types of op and the argument
 * checks and messages that eager execution on every backend and the IR share. out has room for nout types. */
typedef struct ir_type ir_type;
enum { VM_INFER_MAXIN = 64 };   /* more inputs than this are typed in allocated memory */
grace_status vm_infer_tensors(grace_vm *vm, grace_op op, int nin, grace_tensor *const *in, const grace_attrs *a,
                              int nout, ir_type *out);

/* vm_infer_tensors for the checks alone (the result types are not wanted). */
grace_status vm_check_types(grace_vm *vm, grace_op op, int nin, grace_tensor *const *in, const grace_attrs *a);

/* An index tensor (what names it: "index", "ids") must be int64 or int32. */
grace_status vm_check_index_dtype(grace_vm *vm, const char *op, const grace_tensor *idx, const char *what);
/* gather and scatter: same rank for x, index (and src), index no larger than x outside dim, no larger than src. */
grace_status vm_check_gather_shapes(grace_vm *vm, const char *op, const grace_tensor *x, const grace_tensor *idx,
                                    const grace_tensor *src, int dim);
/* An in-place destination must not have expanded (overlapping) elements. */
grace_status vm_check_writable(grace_vm *vm, const char *name, const grace_tensor *dst);
/* copy_'s checks (dst writable, src broadcastable to dst) and what the copy needs: *empty when there is nothing
 * to copy, *overlap when src and dst share storage in overlapping ranges (then src must be read from a copy). */
grace_status vm_check_copy(grace_vm *vm, const char *op, const grace_tensor *dst, const grace_tensor *src, int *empty,
                           int *overlap);
/* A new dense tensor on dev whose dims are laid out in base's stride order (a transposed base gives a transposed
 * result), so later views of it have the layout eager execution gives them. NULL with the error set. */
grace_tensor *vm_dense_like(grace_vm *vm, grace_device dev, const char *op, const grace_tensor *base);
/* A creation op's dtype and shape from its attributes (arange's length, eye's n x m, ...), with its argument
 * checks; shape has room for GRACE_MAX_DIMS sizes. */
grace_status vm_create_shape(grace_vm *vm, grace_op op, const grace_attrs *a, grace_dtype *dtype, int *ndim,
                             int64_t *shape);

/* cat: PyTorch's rules (a 0-d input is an error; [0]-shaped inputs are skipped, the legacy rule), which are
 * ir_infer's (infer_cat in ir_infer_shape.c); the result's dtype, ndim and sizes, and the normalized dim. Inputs
 * to copy are those with !vm_cat_skips(t) (ir_cat_skips on types). */
grace_status vm_check_cat(grace_vm *vm, int nin, grace_tensor *const *in, int64_t dim_attr, grace_dtype *dt,
                          int *ndim, int64_t *sizes, int *dim);
static inline int vm_cat_skips(const grace_tensor *t) { return t->ndim == 1 && t->sizes[0] == 0; }
/* stack (ir_infer's rules, infer_stack): the new dim's place (anywhere from before the first dim to after the last), every input of one shape;
 * the result's dtype, ndim (inputs' + 1) and sizes, and the normalized dim. */
grace_status vm_check_stack(grace_vm *vm, int nin, grace_tensor *const *in, int64_t dim_attr, grace_dtype *dt,
                            int *ndim, int64_t *sizes, int *dim);
/* repeat (ir_infer's rules, infer_repeat): at least one count per dim of x, none negative; x viewed with nr = a->nshape dims (leading size-1 dims
 * of stride 0 added) as xs / xst, and the result's sizes osz (xs times the counts). */
grace_status vm_check_repeat(grace_vm *vm, const grace_tensor *x, const grace_attrs *a, int64_t *xs, int64_t *xst,
                             int64_t *osz);

/* index_select: dim in range, index int64/int32 and 1-d or 0-d, one index for a 0-d x; *dim normalized, *n the
 * number of indices. */
grace_status vm_check_index_select(grace_vm *vm, const grace_tensor *x, const grace_tensor *idx, int64_t dim_attr,
                                   int *dim, int64_t *n);

/* index_copy_: dim in range, index int64/int32 and 1-d or 0-d, src dst's shape with dim resized to the number of
 * indices (0-d tensors count as [1]); *dim normalized, *n the number of indices. */
grace_status vm_check_index_copy(grace_vm *vm, const grace_tensor *dst, const grace_tensor *idx,
                                 const grace_tensor *src, int64_t dim_attr, int *dim, int64_t *n);

/* attention's layout for one run: the checks (ir_infer's, on the tensors' types), the result's dtype and shape
 * (batch dims, then M, Dv), and every operand's strides over the broadcast batch dims (0 where it is broadcast)
 * and over its two matrix dims (the mask's over M and N; 0 where it has size 1 there or is absent). */
typedef struct vm_attn {
  int nb;                                /* batch dims of the result */
  int64_t bsize[GRACE_MAX_DIMS];
  int64_t qb[GRACE_MAX_DIMS], kb[GRACE_MAX_DIMS], vb[GRACE_MAX_DIMS], mb[GRACE_MAX_DIMS];
  int64_t rows, M, N, D, Dv;             /* rows: batch elements times M */
  int64_t qm, qd, kd, kn, vn, vd, mm, mn;
  grace_dtype odt;
  int ndim;
  int64_t osizes[GRACE_MAX_DIMS];
} vm_attn;
grace_status vm_check_attention(grace_vm *vm, grace_tensor *const *in, const grace_attrs *a, vm_attn *p);

#endif
