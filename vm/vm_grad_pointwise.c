/* vm_grad_pointwise.c: the derivatives of the pointwise ops (unary, binary, ternary of include/grace_ops.h), one
 * case per op, as formulas over the upstream gradient g, the inputs and the result y; a binary op's gradients are
 * summed down to each operand's shape (broadcasting). Comparisons and logical ops give bool results, which carry no
 * gradient (autograd never records them). */
#include <math.h>
#include "vm/vm_grad.h"

#define G(op, a, b) gx_bin(c, GRACE_OP_##op, a, b)
#define U(op, a) gx_un(c, GRACE_OP_##op, a)
/* the saved inputs, fetched (and their versions checked) only by the formulas that read them */
#define X gx_in(c, 0)
#define A gx_in(c, 0)
#define B gx_in(c, 1)

static grace_tensor *gelu_grad(vm_gctx *c, grace_tensor *x, int tanh_form) {
  if (!tanh_form) {   /* d/dx x Phi(x) = Phi(x) + x phi(x) */
    grace_tensor *cdf = gx_muln(c, gx_addn(c, U(ERF, gx_muln(c, x, M_SQRT1_2)), 1.0), 0.5);
    grace_tensor *pdf = gx_muln(c, U(EXP, gx_muln(c, G(MUL, x, x), -0.5)), 0.3989422804014327);
    return G(ADD, cdf, G(MUL, x, pdf));
  }
  /* 0.5 x (1 + tanh(u)), u = k (x + 0.044715 x^3): 0.5 (1 + t) + 0.5 x (1 - t^2) k (1 + 3 0.044715 x^2) */
  const double k = 0.7978845608028654;
  grace_tensor *x2 = G(MUL, x, x);
  grace_tensor *u = gx_muln(c, G(ADD, x, gx_muln(c, G(MUL, x2, x), 0.044715)), k);
  grace_tensor *t = U(TANH, u);
  grace_tensor *dt = gx_addn(c, gx_muln(c, G(MUL, t, t), -1.0), 1.0);
  grace_tensor *du = gx_muln(c, gx_addn(c, gx_muln(c, x2, 3 * 0.044715), 1.0), k);
  return G(ADD, gx_muln(c, gx_addn(c, t, 1.0), 0.5), gx_muln(c, G(MUL, x, G(MUL, dt, du)), 0.5));
}

/* dy/dx of the unary op (times g by the caller), NULL with an error where there is none. */
static grace_tensor *unary(vm_gctx *c, grace_tensor *g) {
  const grace_attrs *a = &c->n->attrs;
  switch (c->n->op) {
  case GRACE_OP_NEG: return U(NEG, g);
  case GRACE_OP_ABS: return G(MUL, g, U(SIGN, X));
  case GRACE_OP_EXP: return G(MUL, g, gx_out(c, 0));
  case GRACE_OP_LOG: return G(DIV, g, X);
  case GRACE_OP_LOG1P: return G(DIV, g, gx_addn(c, X, 1.0));
  case GRACE_OP_SQRT: return G(DIV, gx_muln(c, g, 0.5), gx_out(c, 0));
  case GRACE_OP_RSQRT: {   /* -1/2 X^-3/2 = -1/2 y^3 */
    grace_tensor *y = gx_out(c, 0);
    return G(MUL, g, gx_muln(c, G(MUL, G(MUL, y, y), y), -0.5));
  }
  case GRACE_OP_SIN: return G(MUL, g, U(COS, X));
  case GRACE_OP_COS: return G(MUL, g, U(NEG, U(SIN, X)));
  case GRACE_OP_TAN: {
    grace_tensor *y = gx_out(c, 0);
    return G(MUL, g, gx_addn(c, G(MUL, y, y), 1.0));
  }
  case GRACE_OP_TANH: {
    grace_tensor *y = gx_out(c, 0);
    return G(MUL, g, gx_addn(c, gx_muln(c, G(MUL, y, y), -1.0), 1.0));
  }
  case GRACE_OP_SIGMOID: {
    grace_tensor *y = gx_out(c, 0);
    return G(MUL, g, G(MUL, y, gx_addn(c, gx_muln(c, y, -1.0), 1.0)));
  }
  case GRACE_OP_RELU: return gx_where(c, G(GT, X, gx_num(c, 0)), g, gx_num(c, 0));
  case GRACE_OP_GELU: return G(MUL, g, gelu_grad(c, X, a->flag));
  case GRACE_OP_SILU: {   /* s + X s (1 - s) */
    grace_tensor *s = U(SIGMOID, X);
    return G(MUL, g, G(MUL, s, gx_addn(c, G(MUL, X, gx_addn(c, gx_muln(c, s, -1.0), 1.0)), 1.0)));
  }
  case GRACE_OP_ERF: return G(MUL, g, gx_muln(c, U(EXP, U(NEG, G(MUL, X, X))), 1.1283791670955126));
  /* piecewise constant: zero almost everywhere, as PyTorch */
  case GRACE_OP_FLOOR: case GRACE_OP_CEIL: case GRACE_OP_ROUND: case GRACE_OP_SIGN: return gx_full(c, g, 0);
  case GRACE_OP_CLAMP: {   /* 1 inside [min, max], bounds included */
    grace_tensor *in = NULL;
    if (a->has_a) in = G(GE, X, gx_num(c, a->a));
    if (a->has_b) { grace_tensor *le = G(LE, X, gx_num(c, a->b)); in = in ? G(LOGICAL_AND, in, le) : le; }
    return in ? gx_where(c, in, g, gx_num(c, 0)) : g;
  }
  case GRACE_OP_CAST: return g;   /* cast back to the input's dtype by the engine */
  default: vm_vjp_none(c); return NULL;
  }
}

/* maximum/minimum: the gradient goes to the chosen operand, half to each on a tie (as PyTorch). */
static void select2(vm_gctx *c, grace_tensor *g, grace_tensor *a, grace_tensor *b, grace_op win, grace_tensor **ga,
                    grace_tensor **gb) {
  grace_tensor *half = gx_muln(c, g, 0.5), *zero = gx_num(c, 0);
  grace_tensor *eq = G(EQ, a, b), *wa = gx_bin(c, win, a, b), *wb = gx_bin(c, win, b, a);
  *ga = gx_where(c, wa, g, gx_where(c, eq, half, zero));
  *gb = gx_where(c, wb, g, gx_where(c, eq, half, zero));
}

static grace_status binary(vm_gctx *c, grace_tensor *g, grace_tensor **gin) {
  grace_tensor *ga = NULL, *gb = NULL;
  int na = vm_gneeds(c->n, 0), nb = vm_gneeds(c->n, 1);
  switch (c->n->op) {
  case GRACE_OP_ADD: ga = g; gb = g; break;
  case GRACE_OP_SUB: ga = g; gb = nb ? U(NEG, g) : NULL; break;
  case GRACE_OP_MUL: ga = na ? G(MUL, g, B) : NULL; gb = nb ? G(MUL, g, A) : NULL; break;
  case GRACE_OP_DIV:   /* a / b: g / B, -g a / b^2 = -g y / b */
    ga = na ? G(DIV, g, B) : NULL;
    gb = nb ? U(NEG, G(DIV, G(MUL, g, gx_out(c, 0)), B)) : NULL;
    break;
  case GRACE_OP_REM:   /* a - floor(a / B) b */
    ga = g;
    gb = nb ? G(MUL, U(NEG, g), U(FLOOR, G(DIV, A, B))) : NULL;
    break;
  case GRACE_OP_POW:   /* b a^(b-1); y log(A), 0 where a is 0 (the limit PyTorch takes) */
    ga = na ? G(MUL, g, G(MUL, B, G(POW, A, gx_addn(c, B, -1.0)))) : NULL;
    if (nb) {
      grace_tensor *pos = G(NE, A, gx_num(c, 0));
      grace_tensor *safe = gx_where(c, pos, A, gx_num(c, 1));
      gb = gx_where(c, pos, G(MUL, g, G(MUL, gx_out(c, 0), U(LOG, safe))), gx_num(c, 0));
    }
    break;
  case GRACE_OP_MAXIMUM: select2(c, g, A, B, GRACE_OP_GT, &ga, &gb); break;
  case GRACE_OP_MINIMUM: select2(c, g, A, B, GRACE_OP_LT, &ga, &gb); break;
  default: return vm_vjp_none(c);
  }
  if (na) gin[0] = gx_sum_to(c, ga, c->n->in[0]);
  if (nb) gin[1] = gx_sum_to(c, gb, c->n->in[1]);
  return c->st;
}

static grace_status ternary(vm_gctx *c, grace_tensor *g, grace_tensor **gin) {
  grace_tensor *zero = gx_num(c, 0);
  if (c->n->op == GRACE_OP_WHERE) {   /* cond, a, b */
    grace_tensor *cond = gx_in(c, 0);
    if (vm_gneeds(c->n, 1)) gin[1] = gx_sum_to(c, gx_where(c, cond, g, zero), c->n->in[1]);
    if (vm_gneeds(c->n, 2)) gin[2] = gx_sum_to(c, gx_where(c, cond, zero, g), c->n->in[2]);
    return c->st;
  }
  if (c->n->op == GRACE_OP_MASKED_FILL) {   /* x, mask, value */
    grace_tensor *mask = gx_in(c, 1);
    if (vm_gneeds(c->n, 0)) gin[0] = gx_sum_to(c, gx_where(c, mask, zero, g), c->n->in[0]);
    if (vm_gneeds(c->n, 2)) gin[2] = gx_sum_to(c, gx_where(c, mask, g, zero), c->n->in[2]);
    return c->st;
  }
  return vm_vjp_none(c);
}

grace_status vm_vjp_pointwise(vm_gctx *c, grace_tensor *const *gout, grace_tensor **gin) {
  switch (grace_op_kind(c->n->op)) {
  case GRACE_KIND_UNARY: {
    grace_tensor *d = unary(c, gout[0]);
    if (d) gin[0] = gx_sum_to(c, d, c->n->in[0]);
    return c->st;
  }
  case GRACE_KIND_BINARY: return binary(c, gout[0], gin);
  case GRACE_KIND_TERNARY: return ternary(c, gout[0], gin);
  default: return vm_vjp_none(c);
  }
}
