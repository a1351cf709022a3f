/* test_fuse_random.c: random programs through fusion and both executors. Each program (a fixed seed: the same
 * programs every run) mixes matmuls, pointwise ops, reductions with and without keepdim, views (transpose,
 * select, unsqueeze), bfloat16 cast round trips and composite ops (softmax, layer_norm, gelu, some in
 * bfloat16), is decomposed and grouped, and then:
 *   - every instruction that computes something is in exactly one group, and groups come after the groups whose
 *     values they read;
 *   - on the CPU, the fused run equals the unfused one (each op on its own), within float32 rounding;
 *   - on the device every group runs as one generated kernel (grace_ir_graph_info counts groups that went an op
 *     at a time: none may), and on a GPU the results are the CPU's; without one, on the fake CUDA driver
 *     (tests/c/fake_cuda.h: kernels do nothing, so only statuses are checked).
 * FUSE_RANDOM_N sets how many programs (default 60). Groups no kernel could run once went an op at a time (and one
 * of them failed on the device, "value used before it is computed"); ir_fuse now forms only groups the generators
 * lower (ir_fuse.h: what a kernel can read of its own values). */
#include <math.h>
#include <stdlib.h>
#include <string.h>
#include "grace.h"
#include "ir/ir_fuse.h"
#include "tap.h"
#include "c/fake_cuda.h"

static uint64_t rs;
static uint32_t rnd(void) { rs ^= rs << 13; rs ^= rs >> 7; rs ^= rs << 17; return (uint32_t)(rs >> 11); }
static int pick(int n) { return (int)(rnd() % (uint32_t)n); }

typedef struct val { grace_value v; int nd; int64_t s[2]; } val;

static int is88(const val *a) { return a->nd == 2 && a->s[0] == 8 && a->s[1] == 8; }

/* One op appended to ir over the values so far (v[0..*nv)): 1 when added, 0 when the draw did not fit (nothing
 * added), -1 when building it failed. */
static int add_op(grace_vm *vm, grace_ir *ir, val *v, int *nv) {
  const val *p = &v[*nv > 4 && pick(3) == 0 ? *nv - 1 - pick(3) : pick(*nv)], *q = &v[pick(*nv)];
  grace_attrs a;
  memset(&a, 0, sizeof a);
  val y = {.v = -1, .nd = p->nd, .s = {p->s[0], p->s[1]}};
  grace_value in[3] = {p->v, q->v, -1};
  grace_status st = GRACE_OK;
  switch (pick(12)) {
  case 0: case 1: {   /* matmul of two [8,8] values */
    const val *l = NULL, *r = NULL;
    for (int t = 0; t < 20 && !(l && r); t++) {
      const val *c = &v[pick(*nv)];
      if (!is88(c)) continue;
      if (!l) l = c; else r = c;
    }
    if (!l || !r) return 0;
    in[0] = l->v; in[1] = r->v;
    st = grace_ir_op(ir, GRACE_OP_MATMUL, 2, in, NULL, 1, &y.v);
    y.nd = 2; y.s[0] = y.s[1] = 8;
    break;
  }
  case 2: case 3: {
    static const grace_op u[] = {GRACE_OP_NEG, GRACE_OP_TANH, GRACE_OP_SIGMOID, GRACE_OP_EXP, GRACE_OP_SIN};
    st = grace_ir_op(ir, u[pick(5)], 1, in, NULL, 1, &y.v);
    break;
  }
  case 4: case 5: case 6: {   /* binary, broadcasting */
    static const grace_op b[] = {GRACE_OP_ADD, GRACE_OP_MUL, GRACE_OP_SUB};
    const int64_t *ss[2] = {p->s, q->s};
    int nds[2] = {p->nd, q->nd}, nd;
    int64_t o[GRACE_MAX_DIMS];
    if (grace_broadcast_shapes(vm, "add", 2, nds, ss, &nd, o) != GRACE_OK) return 0;
    st = grace_ir_op(ir, b[pick(3)], 2, in, NULL, 1, &y.v);
    y.nd = nd; y.s[0] = o[0]; y.s[1] = nd > 1 ? o[1] : 0;
    break;
  }
  case 7: {   /* sum or max over a dim of an [8,8], keepdim or not */
    if (!is88(p)) return 0;
    int which = pick(3), mx = pick(2);
    a.ndims = 1; a.dims[0] = which == 2 ? 0 : -1; a.keepdim = which != 1;
    grace_value r[2];
    st = grace_ir_op(ir, mx ? GRACE_OP_MAX : GRACE_OP_SUM, 1, in, &a, mx ? 2 : 1, r);
    y.v = r[0];
    y.nd = which == 1 ? 1 : 2; y.s[0] = which == 2 ? 1 : 8; y.s[1] = which == 0 ? 1 : which == 2 ? 8 : 0;
    break;
  }
  case 8: {   /* views */
    if (is88(p)) {
      int tr = pick(2);
      a.ndims = tr ? 2 : 1; a.dims[0] = 0; a.dims[1] = 1; a.i0 = pick(8);
      st = grace_ir_op(ir, tr ? GRACE_OP_TRANSPOSE : GRACE_OP_SELECT, 1, in, &a, 1, &y.v);
      if (!tr) { y.nd = 1; y.s[1] = 0; }
    } else if (p->nd == 1) {
      int d = pick(2);
      a.ndims = 1; a.dims[0] = d;
      st = grace_ir_op(ir, GRACE_OP_UNSQUEEZE, 1, in, &a, 1, &y.v);
      y.nd = 2; y.s[0] = d ? 8 : 1; y.s[1] = d ? 1 : 8;
    } else return 0;
    break;
  }
  case 9: {   /* a bfloat16 round trip */
    grace_value t;
    a.has_dtype = 1; a.dtype = GRACE_BFLOAT16;
    st = grace_ir_op(ir, GRACE_OP_CAST, 1, in, &a, 1, &t);
    a.dtype = GRACE_FLOAT32;
    if (st == GRACE_OK) st = grace_ir_op(ir, GRACE_OP_CAST, 1, &t, &a, 1, &y.v);
    break;
  }
  default: {   /* softmax, layer_norm or gelu over an [8,8], in float32 or bfloat16 */
    if (!is88(p)) return 0;
    int op = pick(3), half = pick(2);
    grace_attrs c = {.has_dtype = 1, .dtype = GRACE_BFLOAT16};
    if (half) st = grace_ir_op(ir, GRACE_OP_CAST, 1, &p->v, &c, 1, &in[0]);
    if (st == GRACE_OK) {
      a.ndims = op == 0; a.dims[0] = -1; a.a = 1e-5; a.has_a = op == 1;
      in[1] = in[2] = -1;
      st = grace_ir_op(ir, op == 0 ? GRACE_OP_SOFTMAX : op == 1 ? GRACE_OP_LAYER_NORM : GRACE_OP_GELU, op == 1 ? 3 : 1, in,
                       &a, 1, &y.v);
    }
    c.dtype = GRACE_FLOAT32;
    grace_value t = y.v;
    if (st == GRACE_OK && half) st = grace_ir_op(ir, GRACE_OP_CAST, 1, &t, &c, 1, &y.v);
    break;
  }
  }
  if (st != GRACE_OK) return -1;
  v[(*nv)++] = y;
  return 1;
}

/* A random program over inputs on `device`; NULL when building it failed (reported). */
static grace_ir *random_program(grace_vm *vm, unsigned seed, grace_device device) {
  rs = 0x9e3779b97f4a7c15ull * (seed + 1) + 12345;
  for (int i = 0; i < 4; i++) rnd();
  grace_ir *ir = grace_ir_new(vm, "random");
  val v[64];
  int nv = 0, nin = 2 + pick(3);
  for (int i = 0; i < nin; i++) {
    int k = pick(4);
    val x = {.nd = k == 2 ? 1 : 2, .s = {8, k == 2 ? 0 : k == 3 ? 1 : 8}};
    if (grace_ir_input(ir, GRACE_FLOAT32, device, x.nd, x.s, &x.v) != GRACE_OK) { grace_ir_free(ir); return NULL; }
    v[nv++] = x;
  }
  for (int n = 5 + pick(20); n > 0 && nv < 60;)
    switch (add_op(vm, ir, v, &nv)) {
    case -1: ok(0, "program %u: builds: %s", seed, grace_last_error(vm)); grace_ir_free(ir); return NULL;
    case 1: n--; break;
    default: break;
    }
  for (int o = 0, nout = 1 + pick(2); o < nout; o++) grace_ir_output(ir, v[o == 0 ? nv - 1 : nin + pick(nv - nin)].v);
  grace_ir *dec = NULL;
  grace_status st = grace_ir_pass(ir, "decompose", &dec);
  grace_ir_free(ir);
  if (st != GRACE_OK) { ok(0, "program %u: decomposes: %s", seed, grace_last_error(vm)); return NULL; }
  return dec;
}

/* Grouping: every computing instruction in one group, groups after the groups they read. */
static int grouping_ok(grace_ir *ir) {
  ir_fusion f;
  if (ir_fuse(ir, &f) != GRACE_OK) return 0;
  int good = 1, members = 0, computing = 0;
  for (int g = 0; g < f.ngroup; g++) members += f.groups[g].n;
  for (int k = 0; k < ir->ninst; k++) {
    int op = ir->insts[k].op, gk = f.inst_group[k];
    int free_ = op >= GRACE_NOPS || grace_op_kind((grace_op)op) == GRACE_KIND_VIEW;
    computing += !free_;
    if (free_ != (gk < 0)) good = 0;
    for (int j = 0; gk >= 0 && j < ir->insts[k].nin; j++) {
      int32_t b = ir_view_base(ir, ir->args[ir->insts[k].first_arg + j]);
      if (b >= 0 && f.inst_group[ir->vals[b].inst] > gk) good = 0;
    }
  }
  ir_fuse_free(ir, &f);
  return good && members == computing;
}

/* The inputs of ir: random values on the CPU; on the fake device, whose kernels compute nothing, empty tensors. */
static int make_inputs(grace_vm *vm, grace_ir *ir, grace_device device, grace_tensor **in) {
  int n = 0;
  for (int k = 0; k < ir->ninst; k++) {
    if (ir->insts[k].op != IR_OP_INPUT) continue;
    const ir_type *t = &ir->vals[ir->insts[k].first_result].type;
    double x[64];
    for (int i = 0; i < 64; i++) x[i] = (double)(rnd() % 20001) / 10000.0 - 1.0;
    grace_tensor **slot = &in[ir->insts[k].input_index];
    grace_status st = device == GRACE_CPU ? grace_tensor_from_data(vm, t->dtype, t->ndim, t->sizes, GRACE_FLOAT64, x, slot)
                                          : grace_tensor_empty(vm, t->dtype, GRACE_CUDA, t->ndim, t->sizes, slot);
    if (st != GRACE_OK) return -1;
    n++;
  }
  return n;
}

/* Runs program `seed` on the CPU (ya: outputs) and on a real device (yb), the same input values on both. */
static grace_status run_both(grace_vm *vm, unsigned seed, grace_ir **irs, grace_tensor **ya, grace_tensor **yb) {
  grace_tensor *cin[8] = {0}, *gin[8] = {0};
  irs[0] = random_program(vm, seed, GRACE_CPU);
  int ni = irs[0] ? make_inputs(vm, irs[0], GRACE_CPU, cin) : -1;
  irs[1] = random_program(vm, seed, GRACE_CUDA);
  grace_status st = ni < 0 || !irs[1] ? GRACE_EARG : GRACE_OK;
  for (int i = 0; i < 8 && st == GRACE_OK; i++) {
    grace_attrs to = {0};
    to.device = GRACE_CUDA;
    if (cin[i]) st = grace_run(vm, GRACE_OP_TO_DEVICE, 1, &cin[i], &to, 1, &gin[i]);
  }
  if (st == GRACE_OK) st = grace_ir_run(irs[0], ni, cin, irs[0]->nout, ya);
  if (st == GRACE_OK) st = grace_ir_run(irs[1], ni, gin, irs[1]->nout, yb);
  for (int i = 0; i < 8; i++) { grace_tensor_release(cin[i]); grace_tensor_release(gin[i]); }
  return st;
}

/* Whether two runs' outputs agree within tol relative to 1 + |reference| (equal infinities and NaN match). */
static int outputs_agree(grace_vm *vm, int nout, grace_tensor **ya, grace_tensor **yb, double tol) {
  for (int o = 0; o < nout; o++) {
    double ra[64], rb[64];
    int64_t m = grace_tensor_numel(ya[o]);
    if (m != grace_tensor_numel(yb[o]) || m > 64 || grace_tensor_read(vm, ya[o], GRACE_FLOAT64, ra) != GRACE_OK ||
        grace_tensor_read(vm, yb[o], GRACE_FLOAT64, rb) != GRACE_OK)
      return 0;
    for (int64_t i = 0; i < m; i++)
      if (ra[i] != rb[i] && !(isnan(ra[i]) && isnan(rb[i])) && !(fabs(ra[i] - rb[i]) <= tol * (1 + fabs(ra[i])))) return 0;
  }
  return 1;
}

/* float32 computed two ways differs in its last bits; where a program rounds to bfloat16 on the way, such a
 * difference can flip a rounding (2^-8 relative) */
static double tol_of(grace_ir *ir) { return strstr(grace_ir_text(ir), "bf16") ? 2e-2 : 1e-4; }

int main(void) {
  char dir[] = "/tmp/grace-fuse-random-XXXXXX";
  if (mkdtemp(dir)) setenv("GRACE_CACHE_DIR", dir, 1);
  const char *np = getenv("FUSE_RANDOM_N");   /* more programs than the 60 the suite runs */
  const unsigned nprogs = np && atoi(np) > 0 ? (unsigned)atoi(np) : 60;
  grace_config cfg = {0};
  cfg.device = "cpu";
  char err[256];
  grace_vm *vm = grace_vm_new(&cfg, err, sizeof err);
  if (!vm) { printf("not ok 1 - grace_vm_new: %s\n1..1\n", err); return 1; }
  int grouped = 0, same = 0, ran = 0, unfused_programs = 0, nprog = 0;
  /* the CPU: grouping and fused against unfused results */
  for (unsigned s = 0; s < nprogs; s++) {
    grace_ir *ir = random_program(vm, s, GRACE_CPU), *ref = NULL;
    if (!ir) continue;
    nprog++;
    grouped += grouping_ok(ir);
    grace_tensor *in[8] = {0}, *ya[2] = {0}, *yb[2] = {0};
    int ni = make_inputs(vm, ir, GRACE_CPU, in);
    grace_status sa = GRACE_EARG, sb = GRACE_EARG;
    if (ni >= 0 && grace_ir_parse(vm, grace_ir_text(ir), &ref) == GRACE_OK) {
      ref->planned = 1;   /* each op on its own */
      sa = grace_ir_run(ir, ni, in, ir->nout, ya);
      sb = grace_ir_run(ref, ni, in, ref->nout, yb);
    }
    int agree = sa == GRACE_OK && sb == GRACE_OK && outputs_agree(vm, ir->nout, yb, ya, tol_of(ir));
    if (!agree) printf("# program %u differs (statuses %d %d):\n%s", s, sa, sb, grace_ir_text(ir));
    same += agree;
    for (int o = 0; o < 2; o++) { grace_tensor_release(ya[o]); grace_tensor_release(yb[o]); }
    for (int i = 0; i < 8; i++) grace_tensor_release(in[i]);
    grace_ir_free(ref);
    grace_ir_free(ir);
  }
  is_int(grouped, nprog, "%d random programs: every computing op in one group, groups in dependency order", nprog);
  is_int(same, nprog, "%d random programs: the fused CPU run equals the unfused one", nprog);
  /* the device (the fake driver where there is no GPU): every group runs as one kernel; on a GPU, the results
     are the CPU's */
  const char *why = cuda_nvrtc_why(vm);
  int real = cuda_usable(vm);
  if (why) {
    printf("# no NVRTC to compile the kernels (%s): the device half is skipped\n", why);
  } else {
    if (!real) install_fake(vm);
    grace_set_graphs(vm, "off");
    if (!real) grace_set_matmul(vm, "grace");   /* cuBLASLt is a real library: the fake context is no place for it */
    nprog = 0;
    int agree = 0;
    for (unsigned s = 0; s < nprogs; s++) {
      grace_ir *irs[2] = {0};
      grace_tensor *in[8] = {0}, *ya[2] = {0}, *yb[2] = {0};
      grace_status st;
      if (real) st = run_both(vm, s, irs, ya, yb);
      else {
        irs[1] = random_program(vm, s, GRACE_CUDA);
        int ni = irs[1] ? make_inputs(vm, irs[1], GRACE_CUDA, in) : -1;
        st = ni < 0 ? GRACE_EARG : grace_ir_run(irs[1], ni, in, irs[1]->nout, yb);
      }
      if (!irs[1]) { grace_ir_free(irs[0]); continue; }
      nprog++;
      if (st != GRACE_OK) printf("# program %u on the device: %s\n%s", s, grace_last_error(vm), grace_ir_text(irs[1]));
      ran += st == GRACE_OK;
      int match = real && st == GRACE_OK && outputs_agree(vm, irs[1]->nout, ya, yb, tol_of(irs[1]));
      if (real && st == GRACE_OK && !match) printf("# program %u: the device's results differ from the CPU's:\n%s", s, grace_ir_text(irs[1]));
      agree += match;
      grace_graph_info gi;
      grace_ir_graph_info(irs[1], &gi);
      if (gi.unfused) printf("# program %u: %d group(s) an op at a time: %s\n%s", s, gi.unfused, gi.unfused_why, grace_ir_text(irs[1]));
      unfused_programs += gi.unfused > 0;
      for (int o = 0; o < 2; o++) { grace_tensor_release(ya[o]); grace_tensor_release(yb[o]); }
      for (int i = 0; i < 8; i++) grace_tensor_release(in[i]);
      grace_ir_free(irs[0]);
      grace_ir_free(irs[1]);
    }
    is_int(ran, nprog, "%d random programs run on the %s device", nprog, real ? "CUDA" : "fake");
    is_int(unfused_programs, 0, "every fused group of them runs as one kernel (grace_ir_graph_info.unfused)");
    if (real) is_int(agree, nprog, "%d random programs: the device's results are the CPU's", nprog);
    else skip("no CUDA device", "the device's results against the CPU's");
  }
  grace_vm_free(vm);
  char cmd[sizeof dir + 16];
  snprintf(cmd, sizeof cmd, "rm -rf %s", dir);
  if (system(cmd)) {}
  return tap_done();
}
