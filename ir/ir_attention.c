/* ir_attention.c: the attention pass. softmax(matmul(q, kt) [* or / scale] [masked], last dim) read by a matmul
 * with v becomes one attention op (include/grace_ops.h): one kernel on either back end, the scores and the
 * probabilities never stored. It fires only where nothing else reads the scores, the scaled or masked scores or
 * the probabilities, no break lies inside the chain, and the op's inferred result is the product's type; the
 * scale is a 0-d value (a literal, dynamic scalar or 0-d tensor), the mask a bool tensor with a literal fill,
 * as masked_fill(s, mask, fill) or where(mask, s, fill) / where(mask, fill, s). It runs before decompose, which
 * would split the softmax. Results change in rounding only (no scores rounded to the dtype, sums in another
 * order): compiled programs are judged against eager by tolerance, as fused kernels are.
 * On the device the op is cg_ops.c's tiled kernel (a block per few query rows, keys and values staged in shared
 * memory) with a host scale passed by value. */
#include <string.h>
#include "ir/ir_pass.h"

typedef struct attn_match {
  int32_t q, kt, v, scale, mask;
  grace_attrs attrs;
} attn_match;

/* The instruction computing v, or -1 for an input, capture, scalar or literal. */
static int producer(const grace_ir *ir, int32_t v) {
  int k = ir->vals[v].inst;
  return ir->insts[k].op < GRACE_NOPS ? k : -1;
}
static int32_t arg(const grace_ir *ir, int k, int i) { return ir->args[ir->insts[k].first_arg + i]; }
static int literal_of(const grace_ir *ir, int32_t v, double *out) {
  const ir_inst *k = &ir->insts[ir->vals[v].inst];
  if (k->op != IR_OP_LITERAL) return 0;
  *out = k->literal;
  return 1;
}

enum { KEEP, DROP, FUSE };   /* per instruction: copied, a member of a fused chain, the product that becomes the op */

/* Whether product k (the one with v) closes an attention chain: its members marked DROP, the op's inputs in m. */
static int match(const grace_ir *ir, const int32_t *uses, int k, char *mark, attn_match *m) {
  memset(m, 0, sizeof *m);
  m->scale = m->mask = -1;
  int32_t p = arg(ir, k, 0), x;
  int sm = producer(ir, p), first = k;
  if (sm < 0 || ir->insts[sm].op != GRACE_OP_SOFTMAX || uses[p] != 1) return 0;
  const ir_type *pt = &ir->vals[p].type;
  const grace_attrs *sa = &ir->insts[sm].attrs;
  if (sa->has_dtype || (sa->ndims && sa->dims[0] != -1 && sa->dims[0] != pt->ndim - 1)) return 0;
  int members[4] = {sm, -1, -1, -1}, nm = 1;
  x = arg(ir, sm, 0);
  int op = producer(ir, x);
  double fill;
  if (op >= 0 && uses[x] == 1) {   /* the mask */
    const ir_inst *in = &ir->insts[op];
    if (in->op == GRACE_OP_MASKED_FILL && literal_of(ir, arg(ir, op, 2), &fill)) {
      m->mask = arg(ir, op, 1);
      x = arg(ir, op, 0);
    } else if (in->op == GRACE_OP_WHERE && literal_of(ir, arg(ir, op, 2), &fill)) {
      m->mask = arg(ir, op, 0);
      m->attrs.flag |= GRACE_ATTN_KEEP;
      x = arg(ir, op, 1);
    } else if (in->op == GRACE_OP_WHERE && literal_of(ir, arg(ir, op, 1), &fill)) {
      m->mask = arg(ir, op, 0);
      x = arg(ir, op, 2);
    }
    if (m->mask >= 0) {
      if (ir->vals[m->mask].type.dtype != GRACE_BOOL) return 0;
      m->attrs.a = fill;
      m->attrs.has_a = 1;
      members[nm++] = op;
      op = producer(ir, x);
    }
  }
  if (op >= 0 && uses[x] == 1 && (ir->insts[op].op == GRACE_OP_MUL || ir->insts[op].op == GRACE_OP_DIV)) {   /* scale */
    int32_t a0 = arg(ir, op, 0), a1 = arg(ir, op, 1);
    int div = ir->insts[op].op == GRACE_OP_DIV;
    int32_t s = ir->vals[a1].type.ndim == 0 ? a1 : !div && ir->vals[a0].type.ndim == 0 ? a0 : -1;
    if (s >= 0 && ir->vals[s].type.dtype != GRACE_BOOL) {
      m->scale = s;
      if (div) m->attrs.flag |= GRACE_ATTN_DIV;
      members[nm++] = op;
      x = s == a1 ? a0 : a1;
      op = producer(ir, x);
    }
  }
  /* (a scores product that closes an earlier chain stays that chain's op: its inputs are gone) */
  if (op < 0 || ir->insts[op].op != GRACE_OP_MATMUL || uses[x] != 1 || mark[op] == FUSE) return 0;
  members[nm++] = op;
  m->q = arg(ir, op, 0);
  m->kt = arg(ir, op, 1);
  m->v = arg(ir, k, 1);
  /* every value of the chain keeps q's dtype (no promotion hidden in the scale or the fill) */
  grace_dtype dt = ir->vals[m->q].type.dtype;
  for (int i = 0; i < nm; i++) {
    if (ir->vals[ir->insts[members[i]].first_result].type.dtype != dt) return 0;
    if (members[i] < first) first = members[i];
  }
  for (int i = 0; i < ir->nbreak; i++)
    if (ir->breaks[i].after >= first && ir->breaks[i].after < k) return 0;
  /* the op must give exactly the product's type: shapes, broadcasting and dtypes as the chain has them */
  const ir_type *tys[5] = {&ir->vals[m->q].type, &ir->vals[m->kt].type, &ir->vals[m->v].type,
                           m->scale >= 0 ? &ir->vals[m->scale].type : NULL, m->mask >= 0 ? &ir->vals[m->mask].type : NULL};
  ir_type o;   /* (a refusal leaves ir_infer's message as the VM's last error; the pass still succeeds) */
  if (ir_infer(ir->vm, GRACE_OP_ATTENTION, 5, tys, &m->attrs, 1, &o) != GRACE_OK) return 0;
  if (!ir_type_equal(&o, &ir->vals[ir->insts[k].first_result].type, 0)) return 0;
  for (int i = 0; i < nm; i++) mark[members[i]] = DROP;
  return 1;
}

grace_status ir_pass_attention(grace_ir *src, grace_ir **out) {
  int32_t *uses = ir_count_uses(src);
  if (!uses) return GRACE_ENOMEM;
  size_t n = (size_t)(src->ninst ? src->ninst : 1);
  char *mark = grace_realloc(src->vm, NULL, 0, n);
  attn_match *found = grace_realloc(src->vm, NULL, 0, sizeof *found * n);
  grace_status st = mark && found ? GRACE_OK : grace_set_error(src->vm, GRACE_ENOMEM, "attention: out of host memory");
  if (st == GRACE_OK) {
    memset(mark, KEEP, n);
    for (int k = 0; k < src->ninst; k++)   /* a chain's product comes after its members: marks never change back */
      if (src->insts[k].op == GRACE_OP_MATMUL && match(src, uses, k, mark, &found[k])) mark[k] = FUSE;
  }
  ir_rewriter rw;
  if (st == GRACE_OK) st = ir_rw_begin(&rw, src);
  if (st == GRACE_OK) {
    for (int k = 0; k < src->ninst && st == GRACE_OK; k++) {
      if (mark[k] == DROP) continue;
      if (mark[k] == KEEP) { st = ir_rw_copy(&rw, k); continue; }
      const attn_match *m = &found[k];
      int32_t in[5] = {ir_rw_value(&rw, m->q), ir_rw_value(&rw, m->kt), ir_rw_value(&rw, m->v),
                       ir_rw_value(&rw, m->scale), ir_rw_value(&rw, m->mask)}, v;
      if ((st = ir_rw_op(&rw, k, GRACE_OP_ATTENTION, 5, in, &m->attrs, 1, &v)) == GRACE_OK)
        ir_rw_set(&rw, src->insts[k].first_result, v);
    }
    if (st != GRACE_OK) ir_rw_abort(&rw);
    else st = ir_rw_finish(&rw, out);
  }
  grace_realloc(src->vm, uses, sizeof *uses * (size_t)(src->nval ? src->nval : 1), 0);
  grace_realloc(src->vm, mark, n, 0);
  grace_realloc(src->vm, found, sizeof *found * n, 0);
  return st;
}
