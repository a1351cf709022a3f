/* ir.c: building IR functions: growable arrays through the VM's allocator, inputs of each kind, op
 * instructions (types from ir_infer), outputs, locations, and the op names shared by printer and parser. */
#include <stdio.h>
#include <string.h>
#include "ir/ir.h"
#include "ir/ir_sym.h"

static const char *extra_names[] = {
#define IR_EXTRA_NAME(e, name) name,
  IR_EXTRA_OPS(IR_EXTRA_NAME)
#undef IR_EXTRA_NAME
};


const char *ir_op_name(int op) {
  if (op >= 0 && op < GRACE_NOPS) return grace_op_name((grace_op)op);
  if (op >= GRACE_NOPS && op < IR_NOPS) return extra_names[op - GRACE_NOPS];
  return "?";
}

int ir_op_from_name(const char *name) {
  for (int op = 0; op < IR_NOPS; op++)
    if (!strcmp(ir_op_name(op), name)) return op;
  return -1;
}

int ir_op_results(int op, const grace_attrs *a) {
  if (op >= GRACE_NOPS) return 1;
  if (grace_op_kind((grace_op)op) == GRACE_KIND_INPLACE) return 1;
  (void)a;
  return grace_op_noutputs((grace_op)op);
}

int ir_attrs_equal(const grace_attrs *x, const grace_attrs *y) {
  if (x->ndims != y->ndims || x->nshape != y->nshape || x->has_a != y->has_a || x->has_b != y->has_b ||
      x->exact != y->exact || x->i0 != y->i0 || x->i1 != y->i1 || x->keepdim != y->keepdim || x->flag != y->flag ||
      x->has_dtype != y->has_dtype || (x->has_dtype && x->dtype != y->dtype) || x->device != y->device)
    return 0;
  if (memcmp(x->dims, y->dims, sizeof(int64_t) * (size_t)x->ndims) || memcmp(x->shape, y->shape, sizeof(int64_t) * (size_t)x->nshape))
    return 0;
  if (memcmp(&x->a, &y->a, sizeof x->a) || memcmp(&x->b, &y->b, sizeof x->b) || memcmp(&x->c, &y->c, sizeof x->c)) return 0;
  return (!(x->exact & 1) || x->ia == y->ia) && (!(x->exact & 2) || x->ib == y->ib) && (!(x->exact & 4) || x->ic == y->ic);
}

int32_t ir_view_base(const grace_ir *ir, int32_t v) {
  while (v >= 0) {
    const ir_inst *k = &ir->insts[ir->vals[v].inst];
    if (k->op >= GRACE_NOPS || grace_op_kind((grace_op)k->op) != GRACE_KIND_VIEW) break;
    v = ir->args[k->first_arg];
  }
  return v;
}

int32_t ir_input_value(const grace_ir *ir, int index) {
  for (int i = 0; i < ir->ninst; i++)
    if (ir->insts[i].op == IR_OP_INPUT && ir->insts[i].input_index == index) return ir->insts[i].first_result;
  return -1;
}

int64_t ir_type_numel(const ir_type *t) {
  int64_t n = 1;
  for (int d = 0; d < t->ndim; d++) n *= t->sizes[d];
  return n;
}

int ir_type_equal(const ir_type *a, const ir_type *b, int with_wrapped) {
  if (a->dtype != b->dtype || a->ndim != b->ndim || a->device != b->device || (with_wrapped && a->wrapped != b->wrapped))
    return 0;
  return !memcmp(a->sizes, b->sizes, sizeof(int64_t) * (size_t)a->ndim);
}

int grace_ir_literal_diff(const grace_ir *a, const grace_ir *b, int *lits, int max) {
  if (!a || !b) return -1;
  if (!lits) max = 0;   /* counting is not asked for: any differing literal is a difference */
  if (a->ninst != b->ninst || a->nout != b->nout || a->nwrite != b->nwrite || a->nbreak != b->nbreak || a->nconst != b->nconst)
    return -1;
  if (a->nout && memcmp(a->outputs, b->outputs, sizeof *a->outputs * (size_t)a->nout)) return -1;   /* NULL when none */
  for (int i = 0; i < a->nwrite; i++)
    if (a->writes[i].target != b->writes[i].target || a->writes[i].value != b->writes[i].value) return -1;
  for (int i = 0; i < a->nconst; i++) if (a->consts[i].t != b->consts[i].t) return -1;
  int n = 0;
  for (int i = 0; i < a->ninst; i++) {
    const ir_inst *x = &a->insts[i], *y = &b->insts[i];
    if (x->op != y->op || x->nin != y->nin || x->nout != y->nout || x->input_index != y->input_index ||
        !ir_attrs_equal(&x->attrs, &y->attrs) ||
        (x->nin && memcmp(&a->args[x->first_arg], &b->args[y->first_arg], sizeof(int32_t) * (size_t)x->nin)))
      return -1;
    for (int r = 0; r < x->nout; r++)
      if (!ir_type_equal(&a->vals[x->first_result + r].type, &b->vals[y->first_result + r].type, 1)) return -1;
    /* a region's sub-programs must be the same, literals included: a literal there is no input of the region */
    for (int j = 0; ir_is_region(x->op) && j < 2; j++)
      if (grace_ir_literal_diff(a->subs[x->sub + j], b->subs[y->sub + j], NULL, 0) != 0) return -1;
    if (x->op == IR_OP_LITERAL && (memcmp(&x->literal, &y->literal, sizeof x->literal) || x->iliteral != y->iliteral)) {
      if (n == max) return -1;
      lits[n++] = i;
    }
  }
  return n;
}

grace_status grace_ir_literal_value(const grace_ir *ir, int k, double *v, int64_t *iv, int *is_int) {
  if (!ir) return GRACE_EARG;
  if (!v || !iv || !is_int) return grace_set_error(ir->vm, GRACE_EARG, "literal: a NULL argument");
  if (k < 0 || k >= ir->ninst || ir->insts[k].op != IR_OP_LITERAL)
    return grace_set_error(ir->vm, GRACE_EARG, "literal: instruction %d is not a literal", k);
  *v = ir->insts[k].literal;
  *iv = ir->insts[k].iliteral;
  *is_int = ir->vals[ir->insts[k].first_result].type.dtype == GRACE_INT64;
  return GRACE_OK;
}

grace_status grace_ir_literal_to_scalar(grace_ir *ir, int k) {
  if (!ir) return GRACE_EARG;
  if (k < 0 || k >= ir->ninst || ir->insts[k].op != IR_OP_LITERAL)
    return grace_set_error(ir->vm, GRACE_EARG, "literal: instruction %d is not a literal", k);
  ir->insts[k].op = IR_OP_SCALAR;
  ir->insts[k].input_index = ir->nscalars++;
  return GRACE_OK;   /* its type stays the literal's: a wrapped number */
}

/* Grows *arr (of *cap elements of size es) to hold need elements. */
static int grow(grace_ir *ir, void **arr, int *cap, int need, size_t es) {
  if (need <= *cap) return 1;
  int nc = *cap ? *cap * 2 : 16;
  while (nc < need) nc *= 2;
  void *p = grace_realloc(ir->vm, *arr, (size_t)*cap * es, (size_t)nc * es);
  if (!p) { grace_set_error(ir->vm, GRACE_ENOMEM, "ir: out of host memory"); return 0; }
  *arr = p;
  *cap = nc;
  return 1;
}
#define GROW(ir, field, capf, need) grow((ir), (void **)&(ir)->field, &(ir)->capf, (need), sizeof *(ir)->field)

grace_ir *grace_ir_new(grace_vm *vm, const char *name) {
  if (!vm) return NULL;
  grace_ir *ir = grace_realloc(vm, NULL, 0, sizeof *ir);
  if (!ir) { grace_set_error(vm, GRACE_ENOMEM, "ir: out of host memory"); return NULL; }
  memset(ir, 0, sizeof *ir);
  ir->vm = vm;
  ir->cur_loc = -1;
  snprintf(ir->name, sizeof ir->name, "%s", name && *name ? name : "f");
  return ir;
}

void grace_ir_free(grace_ir *ir) {
  if (!ir) return;
  grace_vm *vm = ir->vm;
  for (int i = 0; i < ir->nconst; i++) grace_tensor_release(ir->consts[i].t);
  for (int i = 0; i < ir->nloc; i++) grace_realloc(vm, ir->locs[i], strlen(ir->locs[i]) + 1, 0);
  for (int i = 0; i < ir->nsub; i++) grace_ir_free(ir->subs[i]);
#define FREE(field, capf) grace_realloc(vm, ir->field, (size_t)ir->capf * sizeof *ir->field, 0)
  FREE(insts, cap_inst); FREE(vals, cap_val); FREE(args, cap_arg); FREE(outputs, cap_out);
  FREE(consts, cap_const); FREE(locs, cap_loc); FREE(writes, cap_write); FREE(breaks, cap_break); FREE(subs, cap_sub);
  FREE(syms, cap_sym);
#undef FREE
  if (ir->exec && ir->exec_free) ir->exec_free(ir);
  if (ir->text) grace_realloc(vm, ir->text, ir->text_len, 0);
  if (ir->plan) grace_realloc(vm, ir->plan, sizeof *ir->plan * (size_t)ir->ninst, 0);
  if (ir->plan_members) grace_realloc(vm, ir->plan_members, sizeof *ir->plan_members * (size_t)ir->nplan_members, 0);
  if (ir->direct) grace_realloc(vm, ir->direct, (size_t)ir->ndirect, 0);
  grace_realloc(vm, ir, sizeof *ir, 0);
}

int32_t ir_append(grace_ir *ir, int op, int nin, const int32_t *in, const grace_attrs *a, int nout,
                  const ir_type *types) {
  static const grace_attrs none = {0};
  if (!GROW(ir, insts, cap_inst, ir->ninst + 1) || !GROW(ir, vals, cap_val, ir->nval + nout) ||
      !GROW(ir, args, cap_arg, ir->narg + nin))
    return -1;
  ir_inst *k = &ir->insts[ir->ninst];
  memset(k, 0, sizeof *k);
  k->op = op; k->nin = nin; k->nout = nout;
  k->first_arg = ir->narg;
  k->first_result = ir->nval;
  k->attrs = a ? *a : none;
  k->input_index = -1;
  k->sub = -1;
  k->loc = ir->cur_loc;
  for (int i = 0; i < nin; i++) ir->args[ir->narg++] = in[i];
  for (int i = 0; i < nout; i++) {
    ir->vals[ir->nval] = (ir_value){.type = types[i], .inst = ir->ninst, .result = i, .root = -1};
    ir->nval++;
  }
  ir->ninst++;
  return k->first_result;
}

static grace_status check_value(grace_ir *ir, const char *op, grace_value v) {
  if (v < 0 || v >= ir->nval)
    return grace_set_error(ir->vm, GRACE_EARG, "%s: value %%%d is not defined in IR '%s'", op, (int)v, ir->name);
  return GRACE_OK;
}

grace_status grace_ir_input(grace_ir *ir, grace_dtype dt, grace_device dev, int ndim, const int64_t *sizes,
                            grace_value *out) {
  if (!ir) return GRACE_EARG;
  if (!out || (ndim > 0 && !sizes)) return grace_set_error(ir->vm, GRACE_EARG, "input: a NULL argument");
  if (ndim < 0 || ndim > GRACE_MAX_DIMS || (unsigned)dt >= GRACE_NDTYPES)
    return grace_set_error(ir->vm, GRACE_EARG, "input: invalid type (%d dims)", ndim);
  ir_type t = {.dtype = dt, .device = dev, .ndim = ndim};
  for (int d = 0; d < ndim; d++) {
    if (sizes[d] < 0) return grace_set_error(ir->vm, GRACE_EARG, "input: negative size %lld", (long long)sizes[d]);
    t.sizes[d] = sizes[d];
  }
  int32_t v = ir_append(ir, IR_OP_INPUT, 0, NULL, NULL, 1, &t);
  if (v < 0) return GRACE_ENOMEM;
  ir->insts[ir->ninst - 1].input_index = ir->ninputs++;
  *out = v;
  return GRACE_OK;
}

grace_status grace_ir_const(grace_ir *ir, grace_tensor *t, grace_value *out) {
  if (!ir) return GRACE_EARG;
  if (!t || !out) return grace_set_error(ir->vm, GRACE_EARG, "const: a NULL argument");
  ir_type ty = {.dtype = grace_tensor_dtype(t), .device = grace_tensor_device(t), .ndim = grace_tensor_ndim(t)};
  memcpy(ty.sizes, grace_tensor_sizes(t), sizeof(int64_t) * (size_t)ty.ndim);
  if (!GROW(ir, consts, cap_const, ir->nconst + 1)) return GRACE_ENOMEM;
  int32_t v = ir_append(ir, IR_OP_CONST, 0, NULL, NULL, 1, &ty);
  if (v < 0) return GRACE_ENOMEM;
  ir->insts[ir->ninst - 1].input_index = ir->nconst;
  grace_tensor_retain(t);
  ir->consts[ir->nconst++] = (ir_const){t, grace_tensor_version(t), 0};
  *out = v;
  return GRACE_OK;
}

grace_status grace_ir_bind_const(grace_ir *ir, int index, grace_tensor *t) {
  if (!ir) return GRACE_EARG;
  if (!t) return grace_set_error(ir->vm, GRACE_EARG, "bind_const: a NULL tensor");
  if (index < 0 || index >= ir->nconst)
    return grace_set_error(ir->vm, GRACE_EARG, "bind_const: no captured tensor %d (the IR has %d)", index, ir->nconst);
  for (int i = 0; i < ir->ninst; i++) {
    const ir_inst *k = &ir->insts[i];
    if (k->op != IR_OP_CONST || k->input_index != index) continue;
    const ir_type *ty = &ir->vals[k->first_result].type;
    int same = grace_tensor_dtype(t) == ty->dtype && grace_tensor_ndim(t) == ty->ndim;
    for (int d = 0; same && d < ty->ndim; d++) same = grace_tensor_sizes(t)[d] == ty->sizes[d];
    if (!same) {
      char b[160];
      return grace_set_error(ir->vm, GRACE_ESHAPE, "bind_const: tensor %d must be %s", index, ir_type_str(ty, b, sizeof b));
    }
  }
  grace_tensor_retain(t);
  grace_tensor_release(ir->consts[index].t);
  ir->consts[index] = (ir_const){t, grace_tensor_version(t), ir->consts[index].local};
  return GRACE_OK;
}

grace_tensor *grace_ir_const_tensor(const grace_ir *ir, int k) { return ir && k >= 0 && k < ir->nconst ? ir->consts[k].t : NULL; }
int grace_ir_const_is_local(const grace_ir *ir, int k) { return ir && k >= 0 && k < ir->nconst && ir->consts[k].local; }

int grace_ir_consts_current(const grace_ir *ir) {
  if (!ir) return 0;   /* no IR has nothing current to run */
  for (int k = 0; k < ir->nconst; k++)
    if (ir->consts[k].t && grace_tensor_version(ir->consts[k].t) != ir->consts[k].version) return 0;
  return 1;
}

void grace_ir_recapture(grace_ir *ir) {
  if (!ir) return;
  for (int k = 0; k < ir->nconst; k++)
    if (ir->consts[k].t) ir->consts[k].version = grace_tensor_version(ir->consts[k].t);
}

grace_status grace_ir_scalar(grace_ir *ir, grace_dtype dt, grace_value *out) {
  if (!ir) return GRACE_EARG;
  if (!out) return grace_set_error(ir->vm, GRACE_EARG, "scalar: a NULL argument");
  if ((unsigned)dt >= GRACE_NDTYPES) return grace_set_error(ir->vm, GRACE_EARG, "scalar: invalid dtype");
  ir_type t = {.dtype = dt, .device = GRACE_CPU, .ndim = 0};
  int32_t v = ir_append(ir, IR_OP_SCALAR, 0, NULL, NULL, 1, &t);
  if (v < 0) return GRACE_ENOMEM;
  ir->insts[ir->ninst - 1].input_index = ir->nscalars++;
  *out = v;
  return GRACE_OK;
}

/* A literal of value v, and iv exactly when it is an integer (an int64 past 2^53 is not its double). */
static grace_status add_literal(grace_ir *ir, double v, int64_t iv, int is_integer, grace_value *out) {
  ir_type t = {.dtype = is_integer ? GRACE_INT64 : GRACE_FLOAT64, .device = GRACE_CPU, .ndim = 0, .wrapped = 1};
  int32_t id = ir_append(ir, IR_OP_LITERAL, 0, NULL, NULL, 1, &t);
  if (id < 0) return GRACE_ENOMEM;
  ir->insts[ir->ninst - 1].literal = v;
  ir->insts[ir->ninst - 1].iliteral = is_integer ? iv : 0;
  *out = id;
  return GRACE_OK;
}

grace_status grace_ir_literal(grace_ir *ir, double v, int is_integer, grace_value *out) {
  if (!ir) return GRACE_EARG;
  if (!out) return grace_set_error(ir->vm, GRACE_EARG, "literal: a NULL argument");
  /* [-2^63, 2^63): the doubles that convert to int64 (NaN and the rest would be undefined behaviour) */
  if (is_integer && !(v >= -9223372036854775808.0 && v < 9223372036854775808.0 && v == (double)(int64_t)v))
    return grace_set_error(ir->vm, GRACE_EARG, "literal: %g is no int64 integer", v);
  return add_literal(ir, v, is_integer ? (int64_t)v : 0, is_integer, out);
}

grace_status grace_ir_literal_int(grace_ir *ir, int64_t v, grace_value *out) {
  if (!ir) return GRACE_EARG;
  if (!out) return grace_set_error(ir->vm, GRACE_EARG, "literal: a NULL argument");
  return add_literal(ir, (double)v, v, 1, out);
}

grace_status grace_ir_op(grace_ir *ir, grace_op op, int nin, const grace_value *in, const grace_attrs *attrs,
                         int nout, grace_value *out) {
  static const grace_attrs none = {0};
  if (!ir) return GRACE_EARG;
  if ((nin > 0 && !in) || !out) return grace_set_error(ir->vm, GRACE_EARG, "ir: a NULL argument");
  if ((unsigned)op >= GRACE_NOPS) return grace_set_error(ir->vm, GRACE_EARG, "ir: invalid op %d", (int)op);
  if (!attrs) attrs = &none;
  const char *name = grace_op_name(op);
  int want = grace_op_ninputs(op), nres = ir_op_results(op, attrs);
  if (want >= 0 ? nin != want : nin < 1)
    return grace_set_error(ir->vm, GRACE_EARG, "%s: expected %d inputs, got %d", name, want, nin);
  if (nin > 64) return grace_set_error(ir->vm, GRACE_EARG, "%s: too many inputs (%d)", name, nin);
  if (nout < 1 || nout > nres)
    return grace_set_error(ir->vm, GRACE_EARG, "%s: %d results requested, the op gives %d", name, nout, nres);
  const ir_type *types[64];
  for (int i = 0; i < nin; i++) {
    if (in[i] < 0) { types[i] = NULL; continue; }   /* an optional input left out */
    grace_status st = check_value(ir, name, in[i]);
    if (st != GRACE_OK) return st;
    types[i] = &ir->vals[in[i]].type;
  }
  ir_type res[2];
  grace_status st = ir_infer(ir->vm, op, nin, types, attrs, nout, res);
  if (st == GRACE_OK) st = ir_sym_settle(ir, op, nin, types, attrs, nout, res);
  if (st != GRACE_OK) return st;
  int32_t v = ir_append(ir, op, nin, in, attrs, nout, res);
  if (v < 0) return GRACE_ENOMEM;
  for (int i = 0; i < nout; i++) out[i] = v + i;
  return GRACE_OK;
}

grace_status grace_ir_set_location(grace_ir *ir, const char *where) {
  if (!ir) return GRACE_EARG;
  if (!where) { ir->cur_loc = -1; return GRACE_OK; }
  for (int i = ir->nloc - 1; i >= 0; i--)
    if (!strcmp(ir->locs[i], where)) { ir->cur_loc = i; return GRACE_OK; }
  if (!GROW(ir, locs, cap_loc, ir->nloc + 1)) return GRACE_ENOMEM;
  size_t n = strlen(where) + 1;
  char *s = grace_realloc(ir->vm, NULL, 0, n);
  if (!s) return grace_set_error(ir->vm, GRACE_ENOMEM, "ir: out of host memory");
  memcpy(s, where, n);
  ir->locs[ir->nloc] = s;
  ir->cur_loc = ir->nloc++;
  return GRACE_OK;
}

grace_status grace_ir_output(grace_ir *ir, grace_value v) {
  if (!ir) return GRACE_EARG;
  grace_status st = check_value(ir, "output", v);
  if (st != GRACE_OK) return st;
  if (!GROW(ir, outputs, cap_out, ir->nout + 1)) return GRACE_ENOMEM;
  ir->outputs[ir->nout++] = v;
  return GRACE_OK;
}

grace_status grace_ir_write(grace_ir *ir, grace_value target, grace_value value) {
  if (!ir) return GRACE_EARG;
  grace_status st;
  if ((st = check_value(ir, "write", target)) != GRACE_OK || (st = check_value(ir, "write", value)) != GRACE_OK) return st;
  int op = ir->insts[ir->vals[target].inst].op;
  if (op != IR_OP_INPUT && op != IR_OP_CONST)
    return grace_set_error(ir->vm, GRACE_EARG, "write: %%%d is not an input or a captured tensor", (int)target);
  if (!GROW(ir, writes, cap_write, ir->nwrite + 1)) return GRACE_ENOMEM;
  ir->writes[ir->nwrite++] = (ir_write){target, value, 1};
  return GRACE_OK;
}

grace_status grace_ir_break(const grace_ir *ir, int k, int *after, const char **where) {
  if (!ir) return GRACE_EARG;
  if (!after || !where) return grace_set_error(ir->vm, GRACE_EARG, "break: a NULL argument");
  if (k < 0 || k >= ir->nbreak) return grace_set_error(ir->vm, GRACE_EARG, "break %d: the IR has %d", k, ir->nbreak);
  *after = ir->breaks[k].after;
  *where = ir->breaks[k].loc >= 0 ? ir->locs[ir->breaks[k].loc] : NULL;
  return GRACE_OK;
}

grace_status ir_add_break(grace_ir *ir) {
  if (ir->nbreak && ir->breaks[ir->nbreak - 1].after == ir->ninst - 1) {   /* one per point */
    ir->breaks[ir->nbreak - 1].nread++;
    return GRACE_OK;
  }
  if (!GROW(ir, breaks, cap_break, ir->nbreak + 1)) return GRACE_ENOMEM;
  ir->breaks[ir->nbreak++] = (ir_break){.after = ir->ninst - 1, .loc = ir->cur_loc, .kind = IR_BRK_READ, .cmp = -1,
                                        .nread = 1, .value = -1, .why = -1};
  return GRACE_OK;
}

int32_t ir_intern(grace_ir *ir, const char *s) {
  int32_t keep = ir->cur_loc;
  grace_status st = grace_ir_set_location(ir, s);
  int32_t k = ir->cur_loc;
  ir->cur_loc = keep;
  return st == GRACE_OK ? k : -1;
}

const char *ir_cmp_name(int cmp) {
  static const char *const names[] = {"lt", "le", "gt", "ge", "eq", "ne", "truth"};
  return cmp >= 0 && cmp <= GRACE_CMP_TRUTH ? names[cmp] : NULL;
}

int grace_ir_count(const grace_ir *ir, const char *what) {
  if (!ir || !what) return 0;
  if (!strcmp(what, "breaks")) return ir->nbreak;
  if (!strcmp(what, "values")) return ir->nval;
  if (!strcmp(what, "writes")) return ir->nwrite;
  if (!strcmp(what, "inputs")) return ir->ninputs;
  if (!strcmp(what, "scalars")) return ir->nscalars;
  if (!strcmp(what, "consts")) return ir->nconst;
  if (!strcmp(what, "outputs")) return ir->nout;
  if (!strcmp(what, "insts")) return ir->ninst;
  return -1;
}
