/* ir_infer.h: what the inference files (ir_infer.c, ir_infer_shape.c) share; ir_infer (ir.h) is the entry. */
#ifndef GRACE_IR_INFER_H
#define GRACE_IR_INFER_H

#include "ir/ir.h"

/* "[2, 3]": t's sizes as the error messages write shapes. */
const char *ir_shape_str(const ir_type *t, char *buf, size_t n);
#define IR_SHAPE(t) ir_shape_str((t), (char[128]){0}, 128)
/* PyTorch's result type of the inputs present (NULL entries are skipped). */
grace_dtype ir_result_type(int n, const ir_type *const *in);
/* The broadcast shape of the inputs present; a result dim keeps the symbol of an input of its full size. */
grace_status ir_broadcast(grace_vm *vm, const char *op, int n, const ir_type *const *in, ir_type *out);

/* cat's legacy rule: a 1-d input of size 0 is skipped (as vm_cat_skips of a tensor). */
static inline int ir_cat_skips(const ir_type *t) { return t->ndim == 1 && t->sizes[0] == 0; }

/* The VIEW, MOVE and CREATE kinds (ir_infer_shape.c). */
grace_status ir_infer_view(grace_vm *vm, grace_op op, const ir_type *x, const grace_attrs *a, ir_type *o);
grace_status ir_infer_move(grace_vm *vm, grace_op op, int nin, const ir_type *const *in, const grace_attrs *a, ir_type *o);
grace_status ir_infer_index_put(grace_vm *vm, int nin, const ir_type *const *in, ir_type *o);
grace_status ir_infer_create(grace_vm *vm, grace_op op, const grace_attrs *a, ir_type *o);

#endif
