/* vm_grad.c: reverse-mode autograd's engine. grace_run (vm_dispatch.c) records a node per op whose input requires
 * grad; backward walks the nodes reachable from its roots in reverse recording order, calls each op family's
 * derivative rule (vm_grad_<family>.c) and sums the gradients into the nodes' inputs: into the leaves' .grad
 * (grace_backward) or into the results of grace_grad. The rules compute with grace_run, so a backward while tracing
 * is recorded like any other code; the engine itself only adds, casts and copies through grace_run too. */
#include <stdio.h>
#include <stdlib.h>
#include "vm/vm_grad.h"

static int wants_grad(const grace_tensor *t) { return t && (t->requires_grad || t->grad_fn); }

/* ---- nodes ---- */
static void node_unref(grace_vm *vm, vm_gnode *n);

static void node_free(grace_vm *vm, vm_gnode *n) {
  for (int i = 0; i < n->nin; i++) {
    grace_tensor_release(n->in[i]);
    if (n->next[i].node) node_unref(vm, n->next[i].node);
    grace_tensor_release(n->next[i].leaf);
  }
  for (int j = 0; j < n->nout; j++) grace_tensor_release(n->gout[j]);
  size_t ni = (size_t)n->nin;
  vm_free(vm, n->next, sizeof *n->next * ni);
  vm_free(vm, n->in, sizeof *n->in * ni);
  vm_free(vm, n->in_ver, sizeof *n->in_ver * ni);
  vm_free(vm, n->out, sizeof *n->out * (size_t)n->nout);
  vm_free(vm, n->out_ver, sizeof *n->out_ver * (size_t)n->nout);
  vm_free(vm, n->gout, sizeof *n->gout * (size_t)n->nout);
  vm_free(vm, n, sizeof *n);
}

/* Freeing recurses into the inputs' nodes whose count reaches zero: as deep as the graph's longest chain of ops. */
static void node_unref(grace_vm *vm, vm_gnode *n) {
  if (--n->refcount == 0) node_free(vm, n);
}

void vm_grad_drop(grace_tensor *t) {
  vm_gnode *n = t->grad_fn;
  if (n->out[t->grad_slot] == t) n->out[t->grad_slot] = NULL;
  t->grad_fn = NULL;
  node_unref(t->vm, n);
}

static const char *what_of(const grace_tensor *t) {
  return t->grad_fn ? "a result of an op that requires grad" : "a tensor that requires grad";
}

/* Before an op runs: an in-place write has no derivative, so it may not take a value that requires grad (the
 * gradient would be lost) nor overwrite a result of a recorded op (its node would describe a value it no longer
 * holds). Overwriting a leaf that requires grad (loading weights) is allowed: a backward that needs the old value
 * finds the version changed. */
grace_status vm_grad_check(grace_vm *vm, grace_op op, int nin, grace_tensor *const *in) {
  if (vm->no_grad || grace_op_kind(op) != GRACE_KIND_INPLACE) return GRACE_OK;
  for (int i = 0; i < nin; i++)
    if (i == 0 ? in[i] && in[i]->grad_fn : wants_grad(in[i]))
      return vm_err(vm, GRACE_EUNSUPPORTED, "%s: input %d (shape %s) is %s: autograd has no derivative of an in-place "
                    "write; write under grace.no_grad (an optimizer's update), or use an op that makes a new tensor",
                    grace_op_name(op), i + 1, VM_SHAPE(in[i]), what_of(in[i]));
  return GRACE_OK;
}

/* Whether result t of an op gets a node: a floating-point tensor, not one of the inputs handed back. */
static int differentiable(const grace_tensor *t, int nin, grace_tensor *const *in) {
  if (!t || !grace_dtype_is_float(t->dtype)) return 0;
  for (int i = 0; i < nin; i++)
    if (t == in[i]) return 0;
  return 1;
}

grace_status vm_grad_record(grace_vm *vm, grace_op op, int nin, grace_tensor *const *in, const grace_attrs *a,
                            int nout, grace_tensor **out) {
  int any = 0, anyf = 0;
  for (int i = 0; i < nin; i++) any |= wants_grad(in[i]);
  if (!any || vm->no_grad || grace_op_kind(op) == GRACE_KIND_INPLACE) return GRACE_OK;
  for (int j = 0; j < nout; j++) anyf |= differentiable(out[j], nin, in);
  if (!anyf) return GRACE_OK;
  vm_gnode *n = vm_calloc(vm, sizeof *n);
  size_t ni = (size_t)nin, no = (size_t)nout;   /* both at least 1 here */
  if (n) {
    n->next = vm_calloc(vm, sizeof *n->next * ni);
    n->in = vm_calloc(vm, sizeof *n->in * ni);
    n->in_ver = vm_calloc(vm, sizeof *n->in_ver * ni);
    n->out = vm_calloc(vm, sizeof *n->out * no);
    n->out_ver = vm_calloc(vm, sizeof *n->out_ver * no);
    n->gout = vm_calloc(vm, sizeof *n->gout * no);
  }
  if (!n || !n->next || !n->in || !n->in_ver || !n->out || !n->out_ver || !n->gout) {
    if (n) {
      vm_free(vm, n->next, sizeof *n->next * ni); vm_free(vm, n->in, sizeof *n->in * ni);
      vm_free(vm, n->in_ver, sizeof *n->in_ver * ni); vm_free(vm, n->out, sizeof *n->out * no);
      vm_free(vm, n->out_ver, sizeof *n->out_ver * no); vm_free(vm, n->gout, sizeof *n->gout * no);
      vm_free(vm, n, sizeof *n);
    }
    return vm_err(vm, GRACE_ENOMEM, "%s: out of host memory recording it for autograd", grace_op_name(op));
  }
  n->nin = nin;
  n->nout = nout;
  n->seq = ++vm->grad_seq;
  n->op = op;
  if (a) n->attrs = *a;
  for (int i = 0; i < nin; i++) {
    if (!in[i]) continue;
    grace_tensor_retain(in[i]);
    n->in[i] = in[i];
    n->in_ver[i] = in[i]->storage->version;
    if (in[i]->grad_fn) {
      n->next[i].node = in[i]->grad_fn;
      n->next[i].slot = in[i]->grad_slot;
      in[i]->grad_fn->refcount++;
    } else if (in[i]->requires_grad) {
      grace_tensor_retain(in[i]);
      n->next[i].leaf = in[i];
    }
  }
  for (int j = 0; j < nout; j++) {
    if (!differentiable(out[j], nin, in)) continue;
    n->out[j] = out[j];
    n->out_ver[j] = out[j]->storage->version;
    out[j]->grad_fn = n;
    out[j]->grad_slot = j;
    n->refcount++;
  }
  return GRACE_OK;
}

/* ---- the rules' context ---- */
grace_status gx_fail(vm_gctx *c, grace_status st, const char *fmt, ...) {
  if (c->st != GRACE_OK) return c->st;
  va_list ap;
  va_start(ap, fmt);
  char msg[VM_ERRLEN];
  vsnprintf(msg, sizeof msg, fmt, ap);
  va_end(ap);
  c->st = vm_err(c->vm, st, "%s", msg);
  return c->st;
}

grace_tensor *gx_keep(vm_gctx *c, grace_tensor *t) {
  if (!t) return NULL;
  if (c->ntmp == c->cap) {
    int cap = c->cap ? c->cap * 2 : 32;
    grace_tensor **p = grace_realloc(c->vm, c->tmp, sizeof *p * (size_t)c->cap, sizeof *p * (size_t)cap);
    if (!p) {
      grace_tensor_release(t);
      gx_fail(c, GRACE_ENOMEM, "backward: out of host memory");
      return NULL;
    }
    c->tmp = p;
    c->cap = cap;
  }
  c->tmp[c->ntmp++] = t;
  return t;
}

static grace_tensor *saved(vm_gctx *c, grace_tensor *t, uint64_t ver, const char *what, int k) {
  const char *op = grace_op_name(c->n->op);
  if (c->st != GRACE_OK) return NULL;
  if (!t) {
    gx_fail(c, GRACE_EINTERNAL, "backward of %s: its %s %d is no longer alive", op, what, k + 1);
    return NULL;
  }
  if (t->storage->version != ver) {
    gx_fail(c, GRACE_EARG, "backward of %s: its %s %d (shape %s), saved for the gradient, was modified in place "
            "after %s ran (version %llu, saved at version %llu); clone it before writing to it, or write under "
            "grace.no_grad after backward", op, what, k + 1, VM_SHAPE(t), op, (unsigned long long)t->storage->version,
            (unsigned long long)ver);
    return NULL;
  }
  return t;
}
grace_tensor *gx_in(vm_gctx *c, int i) { return saved(c, c->n->in[i], c->n->in_ver[i], "input", i); }
grace_tensor *gx_out(vm_gctx *c, int j) { return saved(c, c->n->out[j], c->n->out_ver[j], "result", j); }

grace_status vm_vjp_none(vm_gctx *c) {
  return gx_fail(c, GRACE_EUNSUPPORTED, "backward: %s has no derivative (a tensor that requires grad reached it)",
                 grace_op_name(c->n->op));
}

/* ---- backward ---- */
typedef struct bw {
  grace_vm *vm;
  vm_gnode **nodes;
  int n, cap;
  int ninputs;                   /* grace_grad: gradients of these tensors, into res; 0: into leaves' .grad */
  grace_tensor *const *inputs;
  grace_tensor **res;
} bw;

static int cmp_seq(const void *a, const void *b) {
  uint64_t x = (*(vm_gnode *const *)a)->seq, y = (*(vm_gnode *const *)b)->seq;
  return x < y ? 1 : x > y ? -1 : 0;
}

static grace_status push_node(bw *b, vm_gnode *n) {
  if (!n || n->mark) return GRACE_OK;
  if (b->n == b->cap) {
    int cap = b->cap ? b->cap * 2 : 64;
    vm_gnode **p = grace_realloc(b->vm, b->nodes, sizeof *p * (size_t)b->cap, sizeof *p * (size_t)cap);
    if (!p) return vm_err(b->vm, GRACE_ENOMEM, "backward: out of host memory");
    b->nodes = p;
    b->cap = cap;
  }
  n->mark = 1;
  b->nodes[b->n++] = n;
  return GRACE_OK;
}

/* Every node reachable from the roots, latest first (a node comes after all nodes that use its results). */
static grace_status collect(bw *b, int nroots, grace_tensor *const *roots) {
  grace_status st;
  for (int r = 0; r < nroots; r++)
    if ((st = push_node(b, roots[r]->grad_fn)) != GRACE_OK) return st;
  for (int k = 0; k < b->n; k++)   /* the array is the worklist */
    for (int i = 0; i < b->nodes[k]->nin; i++)
      if ((st = push_node(b, b->nodes[k]->next[i].node)) != GRACE_OK) return st;
  if (b->n > 1) qsort(b->nodes, (size_t)b->n, sizeof *b->nodes, cmp_seq);   /* none when the roots are leaves */
  return GRACE_OK;
}

static grace_status run1(grace_vm *vm, grace_op op, int nin, grace_tensor *const *in, const grace_attrs *a,
                         grace_tensor **out) {
  return grace_run(vm, op, nin, in, a, 1, out);
}

/* *acc += g (g: a new reference, taken), out of place: a gradient handed to two inputs is never changed under one. */
static grace_status accumulate(grace_vm *vm, grace_tensor **acc, grace_tensor *g) {
  if (!*acc) { *acc = g; return GRACE_OK; }
  grace_tensor *in[2] = {*acc, g}, *s = NULL;
  grace_status st = run1(vm, GRACE_OP_ADD, 2, in, NULL, &s);
  grace_tensor_release(g);
  if (st != GRACE_OK) return st;
  grace_tensor_release(*acc);
  *acc = s;
  return GRACE_OK;
}

/* g as the gradient of t: its dtype (a rule of a mixed-dtype op may give the result's) and a tensor of its own. */
static grace_status conform(grace_vm *vm, const grace_tensor *t, grace_tensor **g, int own) {
  grace_status st = GRACE_OK;
  grace_tensor *r = NULL;
  if ((*g)->ndim != t->ndim || memcmp((*g)->sizes, t->sizes, sizeof *t->sizes * (size_t)t->ndim))
    return vm_err(vm, GRACE_EINTERNAL, "backward: a gradient of shape %s for a tensor of shape %s", VM_SHAPE(*g),
                  VM_SHAPE(t));
  if ((*g)->dtype != t->dtype) {
    grace_attrs a = {0};
    a.dtype = t->dtype;
    a.has_dtype = 1;
    st = run1(vm, GRACE_OP_CAST, 1, g, &a, &r);
  } else if (own && ((*g)->refcount > 1 || (*g)->storage->refcount > 1 || !vm_is_contiguous(*g)))
    st = run1(vm, GRACE_OP_CLONE, 1, g, NULL, &r);
  if (r) { grace_tensor_release(*g); *g = r; }
  return st;
}

/* A leaf's gradient: into res (grace_grad) or its .grad, in place once it has one (so that a compiled training
 * step writes it back like any other in-place update). */
static grace_status to_leaf(bw *b, grace_tensor *leaf, grace_tensor *g) {
  grace_vm *vm = b->vm;
  grace_status st;
  if (b->ninputs) {
    for (int k = 0; k < b->ninputs; k++)
      if (b->inputs[k] == leaf) {
        grace_tensor_retain(g);
        if ((st = accumulate(vm, &b->res[k], g)) != GRACE_OK) return st;
      }
    return GRACE_OK;
  }
  grace_tensor_retain(g);
  if ((st = conform(vm, leaf, &g, !leaf->grad)) != GRACE_OK) { grace_tensor_release(g); return st; }
  if (!leaf->grad) { leaf->grad = g; return GRACE_OK; }
  grace_tensor *in[2] = {leaf->grad, g}, *s = NULL;
  st = run1(vm, GRACE_OP_ADD, 2, in, NULL, &s);
  grace_tensor_release(g);
  if (st == GRACE_OK) {
    in[1] = s;
    st = grace_run(vm, GRACE_OP_COPY_, 2, in, NULL, 0, NULL);
  }
  grace_tensor_release(s);
  return st;
}

static grace_status step(bw *b, vm_gnode *n) {
  grace_vm *vm = b->vm;
  grace_tensor *gin_static[8], **gin = gin_static;
  vm_gctx c = {.vm = vm, .n = n};
  grace_status st = GRACE_OK;
  int any = 0;
  for (int j = 0; j < n->nout; j++) any |= n->gout[j] != NULL;
  if (!any) return GRACE_OK;
  for (int k = 0; k < b->ninputs; k++)   /* grace_grad of a non-leaf: the sum reaching it */
    if (b->inputs[k]->grad_fn == n && n->gout[b->inputs[k]->grad_slot]) {
      grace_tensor_retain(n->gout[b->inputs[k]->grad_slot]);
      if ((st = accumulate(vm, &b->res[k], n->gout[b->inputs[k]->grad_slot])) != GRACE_OK) return st;
    }
  if (n->nin > 8 && !(gin = vm_calloc(vm, sizeof *gin * (size_t)n->nin)))
    return vm_err(vm, GRACE_ENOMEM, "backward: out of host memory");
  for (int i = 0; i < n->nin; i++) gin[i] = NULL;
  switch (grace_op_kind(n->op)) {
  case GRACE_KIND_UNARY: case GRACE_KIND_BINARY: case GRACE_KIND_TERNARY: case GRACE_KIND_COMPARE:
    st = vm_vjp_pointwise(&c, n->gout, gin); break;
  case GRACE_KIND_REDUCE: case GRACE_KIND_SCAN:
    st = n->op == GRACE_OP_ATTENTION ? vm_vjp_nn(&c, n->gout, gin) : vm_vjp_reduce(&c, n->gout, gin); break;
  case GRACE_KIND_VIEW: case GRACE_KIND_MOVE:
    st = n->op == GRACE_OP_EMBEDDING ? vm_vjp_nn(&c, n->gout, gin) : vm_vjp_shape(&c, n->gout, gin); break;
  case GRACE_KIND_MATMUL: case GRACE_KIND_NORM:
    st = vm_vjp_nn(&c, n->gout, gin); break;
  default:
    st = vm_vjp_none(&c); break;
  }
  if (st == GRACE_OK) st = c.st;
  /* the gradients kept, the rule's temporaries and the outputs' gradients dropped: a gradient only this step holds
   * becomes a leaf's grad as it is, without a copy (to_leaf) */
  for (int i = 0; i < n->nin; i++) {
    if (st == GRACE_OK && gin[i] && vm_gneeds(n, i)) grace_tensor_retain(gin[i]);
    else gin[i] = NULL;
  }
  for (int k = 0; k < c.ntmp; k++) grace_tensor_release(c.tmp[k]);
  grace_realloc(vm, c.tmp, sizeof *c.tmp * (size_t)c.cap, 0);
  for (int j = 0; j < n->nout; j++) { grace_tensor_release(n->gout[j]); n->gout[j] = NULL; }
  for (int i = 0; i < n->nin; i++) {
    grace_tensor *g = gin[i];
    if (!g) continue;
    if (st == GRACE_OK) st = conform(vm, n->in[i], &g, 0);
    if (st != GRACE_OK) { grace_tensor_release(g); continue; }   /* after an error: only releases */
    if (n->next[i].node) st = accumulate(vm, &n->next[i].node->gout[n->next[i].slot], g);
    else {
      st = to_leaf(b, n->next[i].leaf, g);
      grace_tensor_release(g);
    }
  }
  if (gin != gin_static) vm_free(vm, gin, sizeof *gin * (size_t)n->nin);
  return st;
}

/* The seed of root r: given, or ones for a one-element root. */
static grace_status seed(grace_vm *vm, grace_tensor *root, grace_tensor *given, grace_tensor **out) {
  if (given) {
    if (given->ndim != root->ndim || memcmp(given->sizes, root->sizes, sizeof *root->sizes * (size_t)root->ndim))
      return vm_err(vm, GRACE_ESHAPE, "backward: the gradient given has shape %s, the tensor has shape %s",
                    VM_SHAPE(given), VM_SHAPE(root));
    grace_tensor_retain(given);
    *out = given;
    return GRACE_OK;
  }
  if (vm_numel(root->ndim, root->sizes) != 1)
    return vm_err(vm, GRACE_EARG, "backward: a tensor of shape %s needs its gradient given (only a one-element "
                  "tensor is seeded with 1)", VM_SHAPE(root));
  grace_attrs a = {0};
  a.nshape = root->ndim;
  for (int d = 0; d < root->ndim; d++) a.shape[d] = root->sizes[d];
  a.dtype = root->dtype;
  a.has_dtype = 1;
  a.device = root->storage->device;
  a.a = 1;
  return grace_run(vm, GRACE_OP_FULL, 0, NULL, &a, 1, out);
}

static grace_status backward(bw *b, int nroots, grace_tensor *const *roots, grace_tensor *const *grads) {
  grace_vm *vm = b->vm;
  grace_status st = GRACE_OK;
  if (nroots < 1 || !roots) return vm_err(vm, GRACE_EARG, "backward: no tensor given");
  for (int r = 0; r < nroots; r++) {
    if (!roots[r]) return vm_err(vm, GRACE_EARG, "backward: tensor %d is NULL", r + 1);
    if (!wants_grad(roots[r]))
      return vm_err(vm, GRACE_EARG, "backward: tensor %d (shape %s) does not require grad: no input of the ops that "
                    "made it requires grad, it was made under grace.no_grad, or it is a result of a compiled call "
                    "(call backward inside the compiled function)", r + 1, VM_SHAPE(roots[r]));
  }
  int was = vm->no_grad;
  vm->no_grad = 1;   /* the derivatives' own ops are not recorded */
  st = collect(b, nroots, roots);
  for (int r = 0; r < nroots && st == GRACE_OK; r++) {
    grace_tensor *g = NULL;
    if ((st = seed(vm, roots[r], grads ? grads[r] : NULL, &g)) != GRACE_OK) break;
    if ((st = conform(vm, roots[r], &g, 0)) != GRACE_OK) { grace_tensor_release(g); break; }
    if (roots[r]->grad_fn) st = accumulate(vm, &roots[r]->grad_fn->gout[roots[r]->grad_slot], g);
    else { st = to_leaf(b, roots[r], g); grace_tensor_release(g); }
  }
  for (int k = 0; k < b->n && st == GRACE_OK; k++) st = step(b, b->nodes[k]);
  for (int k = 0; k < b->n; k++) {   /* after an error too */
    vm_gnode *n = b->nodes[k];
    n->mark = 0;
    for (int j = 0; j < n->nout; j++) { grace_tensor_release(n->gout[j]); n->gout[j] = NULL; }
  }
  grace_realloc(vm, b->nodes, sizeof *b->nodes * (size_t)b->cap, 0);
  vm->no_grad = was;
  return st;
}

/* ---- the public API ---- */
grace_status grace_backward(grace_vm *vm, int n, grace_tensor *const *outputs, grace_tensor *const *grads) {
  if (!vm) return GRACE_EARG;
  bw b = {.vm = vm};
  return backward(&b, n, outputs, grads);
}

grace_status grace_grad(grace_vm *vm, int nout, grace_tensor *const *outputs, grace_tensor *const *grads, int nin,
                        grace_tensor *const *inputs, grace_tensor **out) {
  if (!vm) return GRACE_EARG;
  if (nin < 1 || !inputs || !out) return vm_err(vm, GRACE_EARG, "grad: no inputs given");
  for (int k = 0; k < nin; k++) {
    out[k] = NULL;
    if (!inputs[k]) return vm_err(vm, GRACE_EARG, "grad: input %d is NULL", k + 1);
    if (!wants_grad(inputs[k]))
      return vm_err(vm, GRACE_EARG, "grad: input %d (shape %s) does not require grad", k + 1, VM_SHAPE(inputs[k]));
  }
  bw b = {.vm = vm, .ninputs = nin, .inputs = inputs, .res = out};
  grace_status st = backward(&b, nout, outputs, grads);
  for (int k = 0; k < nin && st == GRACE_OK; k++)
    if (out[k] && (st = conform(vm, inputs[k], &out[k], 0)) != GRACE_OK) break;
  if (st != GRACE_OK)
    for (int k = 0; k < nin; k++) { grace_tensor_release(out[k]); out[k] = NULL; }
  return st;
}

int grace_grad_enabled(const grace_vm *vm) { return vm && !vm->no_grad; }

int grace_set_grad_enabled(grace_vm *vm, int on) {
  if (!vm) return 0;
  int was = !vm->no_grad;
  vm->no_grad = !on;
  return was;
}

int grace_tensor_requires_grad(const grace_tensor *t) { return wants_grad(t); }
int grace_tensor_is_leaf(const grace_tensor *t) { return t && !t->grad_fn; }
const char *grace_tensor_grad_fn(const grace_tensor *t) {
  return t && t->grad_fn ? grace_op_name(t->grad_fn->op) : NULL;
}
grace_tensor *grace_tensor_grad(const grace_tensor *t) { return t ? t->grad : NULL; }

grace_status grace_tensor_set_requires_grad(grace_tensor *t, int on) {
  if (!t) return GRACE_EARG;
  if (t->grad_fn) {
    if (on) return GRACE_OK;
    return vm_err(t->vm, GRACE_EARG, "requires_grad_: a tensor made by %s from a tensor that requires grad is not a "
                  "leaf; use detach() for a tensor that does not require grad", grace_op_name(t->grad_fn->op));
  }
  if (on && !grace_dtype_is_float(t->dtype))
    return vm_err(t->vm, GRACE_EDTYPE, "requires_grad_: only floating-point tensors can require grad, got %s",
                  grace_dtype_name(t->dtype));
  t->requires_grad = on != 0;
  return GRACE_OK;
}

grace_status grace_tensor_set_grad(grace_tensor *t, grace_tensor *g) {
  if (!t) return GRACE_EARG;
  if (g == t) return vm_err(t->vm, GRACE_EARG, "grad: a tensor cannot be its own gradient (clone it)");
  if (g && (g->ndim != t->ndim || memcmp(g->sizes, t->sizes, sizeof *t->sizes * (size_t)t->ndim)))
    return vm_err(t->vm, GRACE_ESHAPE, "grad: a gradient of shape %s for a tensor of shape %s", VM_SHAPE(g),
                  VM_SHAPE(t));
  if (g && g->dtype != t->dtype)
    return vm_err(t->vm, GRACE_EDTYPE, "grad: a gradient of dtype %s for a tensor of dtype %s",
                  grace_dtype_name(g->dtype), grace_dtype_name(t->dtype));
  grace_tensor_retain(g);
  grace_tensor_release(t->grad);
  t->grad = g;
  return GRACE_OK;
}

grace_status grace_detach(grace_vm *vm, grace_tensor *t, grace_tensor **out) {
  if (!vm) return GRACE_EARG;
  if (!t || !out) return vm_err(vm, GRACE_EARG, "detach: a NULL argument");
  grace_attrs a = {0};
  a.nshape = t->ndim;
  for (int d = 0; d < t->ndim; d++) a.shape[d] = t->sizes[d];
  int was = vm->no_grad;
  vm->no_grad = 1;   /* a view that shares t's storage and is no result of a recorded op */
  grace_status st = grace_run(vm, GRACE_OP_RESHAPE, 1, &t, &a, 1, out);
  vm->no_grad = was;
  return st;
}
