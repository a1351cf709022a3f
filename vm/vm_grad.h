/* vm_grad.h: reverse-mode autograd. grace_run records a node for every op it runs on a tensor that requires
 * grad (vm_grad.c: the tape, backward, the public grace_*grad* functions); each op family's derivatives are
 * in vm_grad_<family>.c, written as ops run through grace_run, so that a backward run while tracing records
 * the backward program too. The helpers below (gx_*) are what the derivative rules compute with. */
#ifndef GRACE_VM_GRAD_H
#define GRACE_VM_GRAD_H

#include "base/base.h"

typedef struct vm_gnode vm_gnode;

/* Where an input's gradient goes: the node that made it (its output slot), a leaf (its .grad), or nowhere. */
typedef struct vm_gedge {
  vm_gnode *node;
  int slot;
  grace_tensor *leaf;            /* a leaf that requires grad (retained) */
} vm_gedge;

struct vm_gnode {
  int refcount;
  uint64_t seq;                  /* order of recording: a node's inputs' nodes have smaller seq */
  grace_op op;
  grace_attrs attrs;
  int nin, nout;
  vm_gedge *next;                /* nin */
  grace_tensor **in;             /* nin saved inputs, retained (NULL where an optional input was) */
  uint64_t *in_ver;              /* their storages' versions when saved */
  /* nout outputs, not retained (an output holds its node: a reference back would be a cycle); an output that dies
   * clears its entry. NULL also for outputs that are not floating-point (no gradient). */
  grace_tensor **out;
  uint64_t *out_ver;
  grace_tensor **gout;           /* nout: gradients summed into the outputs, during one backward */
  int mark;                      /* during one backward: reached */
};

/* A derivative rule's context: temporaries (released after the rule) and the first error. */
typedef struct vm_gctx {
  grace_vm *vm;
  const vm_gnode *n;
  grace_status st;
  int ntmp, cap;
  grace_tensor **tmp;
} vm_gctx;

/* grace_run's part (vm_dispatch.c): before an op, an in-place op touching a tensor that requires grad is an error
 * while grad mode is on; after it, the op is recorded as a node when grad mode is on and an input requires grad. */
grace_status vm_grad_check(grace_vm *vm, grace_op op, int nin, grace_tensor *const *in);
grace_status vm_grad_record(grace_vm *vm, grace_op op, int nin, grace_tensor *const *in, const grace_attrs *a,
                            int nout, grace_tensor **out);
/* The release hook of base/: t (dying) had a grad_fn. */
void vm_grad_drop(grace_tensor *t);

/* The rules of each family: gin[i] (borrowed temporaries of c, NULL: no gradient) for the inputs that need one
 * (vm_gneeds), from gout[] (NULL: zero). GRACE_EUNSUPPORTED with the op's name where there is no rule. */
grace_status vm_vjp_pointwise(vm_gctx *c, grace_tensor *const *gout, grace_tensor **gin);
grace_status vm_vjp_reduce(vm_gctx *c, grace_tensor *const *gout, grace_tensor **gin);
grace_status vm_vjp_shape(vm_gctx *c, grace_tensor *const *gout, grace_tensor **gin);
grace_status vm_vjp_nn(vm_gctx *c, grace_tensor *const *gout, grace_tensor **gin);
grace_status vm_vjp_none(vm_gctx *c);

/* ---- helpers of the rules: each returns a temporary of c (NULL once c has an error; NULL arguments give NULL) */
static inline int vm_gneeds(const vm_gnode *n, int i) { return n->next[i].node || n->next[i].leaf; }
grace_tensor *gx_keep(vm_gctx *c, grace_tensor *t);   /* t (a new reference, may be NULL) as a temporary */
grace_tensor *gx_in(vm_gctx *c, int i);               /* saved input i, its version checked */
grace_tensor *gx_out(vm_gctx *c, int j);              /* output j, its version checked */
grace_tensor *gx_op(vm_gctx *c, grace_op op, int nin, grace_tensor *const *in, const grace_attrs *a);
grace_tensor *gx_un(vm_gctx *c, grace_op op, grace_tensor *x);
grace_tensor *gx_bin(vm_gctx *c, grace_op op, grace_tensor *a, grace_tensor *b);
grace_tensor *gx_num(vm_gctx *c, double v);           /* a wrapped number (keeps the other operand's dtype) */
grace_tensor *gx_muln(vm_gctx *c, grace_tensor *x, double v);
grace_tensor *gx_addn(vm_gctx *c, grace_tensor *x, double v);
grace_tensor *gx_full(vm_gctx *c, const grace_tensor *like, double v);   /* like's shape, dtype and device */
grace_tensor *gx_cast(vm_gctx *c, grace_tensor *x, grace_dtype dt);
grace_tensor *gx_where(vm_gctx *c, grace_tensor *cond, grace_tensor *a, grace_tensor *b);
grace_tensor *gx_reshape(vm_gctx *c, grace_tensor *x, int ndim, const int64_t *sizes);
grace_tensor *gx_expand(vm_gctx *c, grace_tensor *x, int ndim, const int64_t *sizes);
grace_tensor *gx_transpose(vm_gctx *c, grace_tensor *x, int d0, int d1);
grace_tensor *gx_unsqueeze(vm_gctx *c, grace_tensor *x, int d);
/* Sum over dims[0..ndims) (ndims 0: all). */
grace_tensor *gx_sum(vm_gctx *c, grace_tensor *x, int ndims, const int64_t *dims, int keepdim);
grace_tensor *gx_sum1(vm_gctx *c, grace_tensor *x, int dim, int keepdim);
/* g (of a broadcast result) summed down to like's shape and cast to its dtype. */
grace_tensor *gx_sum_to(vm_gctx *c, grace_tensor *g, const grace_tensor *like);
/* g of a reduction of x over a's dims (keepdim or not) broadcast back to x's shape. */
grace_tensor *gx_unreduce(vm_gctx *c, grace_tensor *g, const grace_tensor *x, const grace_attrs *a);
/* Zeros shaped as like with values added at the index tensors' positions (index_put_ with accumulate). */
grace_tensor *gx_index_add(vm_gctx *c, const grace_tensor *like, grace_tensor *values, int nidx,
                           grace_tensor *const *idx);
grace_status gx_fail(vm_gctx *c, grace_status st, const char *fmt, ...) __attribute__((format(printf, 3, 4)));

#endif
