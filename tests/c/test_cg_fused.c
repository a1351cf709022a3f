/* test_cg_fused.c: CUDA code generation for fused POINTWISE and ROW groups (codegen/cg_fused.c) and its runner
 * (gpu/gpu_fused.c). Without a GPU: programs are built with the IR builder and fused (ir_fuse), every group is
 * lowered with fixed layouts, key fragments of the sources are checked (the vector path, the strided and scalar
 * loads, the row reductions, the indirect parameters), sources are deterministic, and every source compiles with
 * NVRTC for sm_90 (SKIP when libnvrtc cannot load). With a GPU: the same programs run on CUDA tensors through
 * grace_ir_run and are compared with the CPU backend (integers exact, floats within a dtype's tolerance). */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include "grace.h"
#include "ir/ir.h"
#include "ir/ir_fuse.h"
#include "codegen/cg_fused.h"
#include "cuda/cuda_api.h"
#include "pdl_check.h"
#include "tap.h"
#include "c/ir_build.h"

static grace_vm *vm;
static ir_build bld = {.quiet = 1};   /* bld.ir: the program being built; bld.dev: its inputs' device (a dtype
                                         an op refuses is skipped, not reported) */
static int have_nvrtc, have_gpu;

static grace_value input(grace_dtype dt, int ndim, const int64_t *sizes) { return irb_input(&bld, dt, ndim, sizes); }
static grace_value lit(double x, int is_int) { return irb_lit(&bld, x, is_int); }
static grace_value opk(grace_op op, int n, grace_value a, grace_value b, grace_value c, const grace_attrs *at, int nout,
                       grace_value *second) {
  return irb_op(&bld, op, n, a, b, c, at, nout, second);
}
#define op1(op, a) opk(GRACE_OP_##op, 1, a, -1, -1, NULL, 1, NULL)
#define op2(op, a, b) opk(GRACE_OP_##op, 2, a, b, -1, NULL, 1, NULL)
static void output(grace_value v) { irb_output(&bld, v); }
static void begin(void) { irb_begin(&bld, "t"); }

/* ---- lowering every fused group of bld.ir ---- */
typedef struct lowered {
  int ngroups, compiled, failed;
  char *src;            /* the first group's source (owned) */
  size_t src_len;
  cg_fused_spec spec;   /* the first group's */
} lowered;

/* Layout overrides for inputs: strides by input index (NULL: contiguous). */
static const int64_t *input_strides[8];

static void contiguous(int nd, const int64_t *sizes, int64_t *st) {
  int64_t c = 1;
  for (int d = nd - 1; d >= 0; d--) { st[d] = c; c *= sizes[d]; }
}

static void lowered_free(lowered *L) {
  if (L->src) grace_realloc(vm, L->src, L->src_len + 1, 0);
  memset(L, 0, sizeof *L);
}

static int lower(const char *what, int indirect, lowered *L) {
  memset(L, 0, sizeof *L);
  if (bld.err || grace_ir_verify(bld.ir) != GRACE_OK) { ok(0, "%s: builds and verifies (%s)", what, grace_last_error(vm)); return 0; }
  ir_fusion f;
  if (ir_fuse(bld.ir, &f) != GRACE_OK) { ok(0, "%s: fuses (%s)", what, grace_last_error(vm)); return 0; }
  for (int g = 0; g < f.ngroup; g++) {
    if (f.groups[g].kind != IR_FUSE_POINTWISE && f.groups[g].kind != IR_FUSE_ROW) continue;
    L->ngroups++;
    cg_group_io io;
    cg_tensor ext[CG_MAX_ARGS];
    cg_fused_spec spec;
    cg_fused_geom geom;
    cg_kernel k;
    grace_status st = cg_fused_io(vm, bld.ir, &f, g, &io);
    for (int e = 0; st == GRACE_OK && e < io.next; e++) {
      const ir_type *t = &bld.ir->vals[io.ext[e]].type;
      const ir_inst *in = &bld.ir->insts[bld.ir->vals[io.ext[e]].inst];
      memset(&ext[e], 0, sizeof ext[e]);
      ext[e].ptr = 0x10000u * (uint64_t)(e + 1);
      ext[e].ndim = t->ndim;
      ext[e].dtype = t->dtype;
      memcpy(ext[e].sizes, t->sizes, sizeof t->sizes);
      contiguous(t->ndim, t->sizes, ext[e].strides);
      if (in->op == IR_OP_INPUT && in->input_index < 8 && input_strides[in->input_index])
        memcpy(ext[e].strides, input_strides[in->input_index], sizeof(int64_t) * (size_t)t->ndim);
    }
    if (st == GRACE_OK) st = cg_fused_plan(vm, bld.ir, &f, g, &io, ext, indirect, 132, &spec, &geom);
    if (st == GRACE_OK) st = cg_fused_generate(vm, bld.ir, &f, g, &io, &spec, &k);
    if (st != GRACE_OK) { L->failed++; printf("# %s: group %d: %s\n", what, g, grace_last_error(vm)); continue; }
    if (!pdl_enters_first(k.src)) { L->failed++; printf("# %s: group %d does not wait on entry\n", what, g); }
    if (have_nvrtc) {
      char *out = NULL;
      size_t n = 0;
      if (cuda_nvrtc_compile(vm, k.src, 90, 1, &out, &n) == GRACE_OK) { L->compiled++; grace_realloc(vm, out, n, 0); }
      else { L->failed++; printf("# %s: group %d does not compile: %s\n", what, g, grace_last_error(vm)); }
    }
    if (getenv("CGF_DUMP") && strstr(what, getenv("CGF_DUMP"))) printf("%s\n", k.src);
    if (!L->src) { L->src = k.src; L->src_len = k.src_len; L->spec = spec; k.src = NULL; }
    cg_kernel_free(vm, &k);
  }
  ir_fuse_free(bld.ir, &f);
  return 1;
}

/* Lowers bld.ir and checks every group generated (and compiled where NVRTC loads). */
static void lower_check(const char *what, int indirect, lowered *L) {
  if (!lower(what, indirect, L)) return;
  if (have_nvrtc)
    ok(L->ngroups > 0 && L->failed == 0 && L->compiled == L->ngroups, "%s: %d kernel(s) generated and compiled by NVRTC",
       what, L->ngroups);
  else ok(L->ngroups > 0 && L->failed == 0, "%s: %d kernel(s) generated (NVRTC not loaded)", what, L->ngroups);
}
static void lower_only(const char *what) {
  lowered L;
  lower_check(what, 0, &L);
  lowered_free(&L);
}

static const grace_dtype all_dt[] = {GRACE_FLOAT32, GRACE_FLOAT64, GRACE_FLOAT16, GRACE_BFLOAT16, GRACE_INT32,
                                     GRACE_INT64, GRACE_UINT8, GRACE_BOOL};
enum { NDT = 8 };

/* ---- the programs (built for device bld.dev) ---- */
static void build_chain(int64_t n) {
  int64_t s[1] = {n};
  begin();
  grace_value x = input(GRACE_FLOAT32, 1, s), y = input(GRACE_FLOAT32, 1, s), z = input(GRACE_FLOAT32, 1, s);
  grace_value a = x;
  grace_attrs cl = {0};
  cl.a = -5; cl.b = 5; cl.has_a = cl.has_b = 1;
  for (int i = 0; i < 8; i++) {
    a = op2(MUL, a, lit(0.5 + i * 0.125, 0));
    a = op2(ADD, a, y);
    a = opk(GRACE_OP_CLAMP, 1, a, -1, -1, &cl, 1, NULL);
    a = op1(TANH, a);
    a = op2(SUB, a, op2(MUL, z, lit(0.25, 0)));
  }
  output(a);   /* 8 * 5 + 8 = 48 ops */
}

static void build_unary(grace_op op, grace_dtype dt, int64_t n, const grace_attrs *at) {
  int64_t s[1] = {n};
  begin();
  grace_value x = input(dt, 1, s);
  output(opk(op, 1, x, -1, -1, at, 1, NULL));
}
static void build_binary(grace_op op, grace_dtype da, grace_dtype db, int64_t n) {
  int64_t s[2] = {3, n}, s1[1] = {n};
  begin();
  grace_value a = input(da, 2, s), b = input(db, 1, s1);
  output(opk(op, 2, a, b, -1, NULL, 1, NULL));
}
static void build_where(grace_dtype dt, int64_t n) {
  int64_t s[2] = {4, n}, s1[1] = {n};
  begin();
  grace_value c = input(GRACE_BOOL, 2, s), a = input(dt, 2, s), b = input(dt, 1, s1);
  output(opk(GRACE_OP_WHERE, 3, c, a, b, NULL, 1, NULL));
}
static void build_masked_fill(grace_dtype dt, int64_t n) {
  int64_t s[2] = {4, n}, s1[1] = {n};
  begin();
  grace_value x = input(dt, 2, s), m = input(GRACE_BOOL, 1, s1), v = input(dt, 0, NULL);
  output(opk(GRACE_OP_MASKED_FILL, 3, x, m, v, NULL, 1, NULL));
}
/* op over dims (ndims 0: all) of x[rows, inner]; two outputs where the op gives them */
static void build_reduce(grace_op op, grace_dtype dt, int64_t rows, int64_t inner, int ndims, int keepdim, int nout,
                         int flag) {
  int64_t s[2] = {rows, inner};
  begin();
  grace_value x = input(dt, 2, s), second = -1;
  grace_attrs at = {0};
  at.ndims = ndims;
  at.dims[0] = -1;
  at.keepdim = keepdim;
  at.flag = flag;
  grace_value r = opk(op, 1, x, -1, -1, &at, nout, &second);
  output(r);
  if (nout == 2) output(second);
}
/* softmax over the last dim, decomposed: max, sub, exp, sum, div */
static void build_softmax(grace_dtype dt, int64_t rows, int64_t inner) {
  int64_t s[2] = {rows, inner};
  begin();
  grace_value x = input(dt, 2, s);
  grace_attrs at = {0};
  at.ndims = 1; at.dims[0] = -1; at.keepdim = 1;
  grace_value m = opk(GRACE_OP_MAX, 1, x, -1, -1, &at, 1, NULL);
  grace_value e = op1(EXP, op2(SUB, x, m));
  grace_value z = opk(GRACE_OP_SUM, 1, e, -1, -1, &at, 1, NULL);
  output(op2(DIV, e, z));
}
/* layer_norm decomposed: mean, sub, mul, mean, add eps, rsqrt, mul, mul weight, add bias */
static void build_layer_norm(grace_dtype dt, int64_t rows, int64_t inner) {
  int64_t s[2] = {rows, inner}, w[1] = {inner};
  begin();
  grace_value x = input(dt, 2, s), wt = input(dt, 1, w), bs = input(dt, 1, w);
  grace_attrs at = {0};
  at.ndims = 1; at.dims[0] = -1; at.keepdim = 1;
  grace_value mu = opk(GRACE_OP_MEAN, 1, x, -1, -1, &at, 1, NULL);
  grace_value d = op2(SUB, x, mu);
  grace_value var = opk(GRACE_OP_MEAN, 1, op2(MUL, d, d), -1, -1, &at, 1, NULL);
  grace_value r = op1(RSQRT, op2(ADD, var, lit(1e-5, 0)));
  output(op2(ADD, op2(MUL, op2(MUL, d, r), wt), bs));
}
/* broadcasting: x[r,1] * y[1,c] + s (0-d) */
static void build_bcast(int64_t r, int64_t c) {
  int64_t sx[2] = {r, 1}, sy[2] = {1, c};
  begin();
  grace_value x = input(GRACE_FLOAT32, 2, sx), y = input(GRACE_FLOAT32, 2, sy), s = input(GRACE_FLOAT32, 0, NULL);
  output(op2(ADD, op2(MUL, x, y), s));
}
/* a transposed and a narrowed view read by one kernel: transpose(x[c,r]) + narrow(y[r, c+5], 1, 2, c) */
static void build_views(int64_t r, int64_t c) {
  int64_t sx[2] = {c, r}, sy[2] = {r, c + 5};
  begin();
  grace_value x = input(GRACE_FLOAT32, 2, sx), y = input(GRACE_FLOAT32, 2, sy);
  grace_attrs tr = {0}, nr = {0};
  tr.ndims = 2; tr.dims[0] = 0; tr.dims[1] = 1;
  nr.ndims = 1; nr.dims[0] = 1; nr.i0 = 2; nr.i1 = c;
  grace_value xt = opk(GRACE_OP_TRANSPOSE, 1, x, -1, -1, &tr, 1, NULL);
  grace_value yn = opk(GRACE_OP_NARROW, 1, y, -1, -1, &nr, 1, NULL);
  output(op1(EXP, op2(MUL, op2(ADD, xt, yn), lit(0.01, 0))));
}

/* What a kernel reads and stores of the values it computes itself (ir_fuse.h's rules), by `which`:
 * 0: a = exp(w[c]) returned beside x[r,c] * a: one pointwise kernel stores a from its first row only;
 * 1: the same in a row kernel: y = x * exp(w), y - max(y) (keepdim), exp(w) returned;
 * 2: x - mean(x, dim 1) (keepdim=0: [c] lines up with the kept dim, a column mean);
 * 3: x - unsqueeze(mean(x, -1), -1) (keepdim=0 reshaped to [r,1]: a view of a per-row value);
 * 4: (x - max(x, -1, keepdim)) + sum(x, -1) (r == c: the keepdim=0 sum broadcasts across rows);
 * 5: exp(x) + transpose(exp(x)) (a transposed view of a value of the kernel). */
static void build_own(int which, int64_t r, int64_t c) {
  int64_t sx[2] = {r, c}, sw[1] = {c};
  begin();
  grace_value x = input(GRACE_FLOAT32, 2, sx);
  grace_attrs last = {0}, first = {0}, keep = {0}, un = {0}, tr = {0};
  last.ndims = 1; last.dims[0] = -1;
  first.ndims = 1; first.dims[0] = 0;
  keep = last; keep.keepdim = 1;
  un.ndims = 1; un.dims[0] = -1;
  tr.ndims = 2; tr.dims[0] = 0; tr.dims[1] = 1;
  if (which <= 1) {
    grace_value w = input(GRACE_FLOAT32, 1, sw), a = op1(EXP, w), y = op2(MUL, x, a);
    if (which == 1) y = op2(SUB, y, opk(GRACE_OP_MAX, 1, y, -1, -1, &keep, 1, NULL));
    output(y);
    output(a);
  } else if (which == 2) {
    output(op2(SUB, x, opk(GRACE_OP_MEAN, 1, x, -1, -1, &first, 1, NULL)));
  } else if (which == 3) {
    grace_value m = opk(GRACE_OP_MEAN, 1, x, -1, -1, &last, 1, NULL);
    output(op2(SUB, x, opk(GRACE_OP_UNSQUEEZE, 1, m, -1, -1, &un, 1, NULL)));
  } else if (which == 4) {
    grace_value m = opk(GRACE_OP_MAX, 1, x, -1, -1, &keep, 1, NULL), s = opk(GRACE_OP_SUM, 1, x, -1, -1, &last, 1, NULL);
    output(op2(ADD, op2(SUB, x, m), s));
  } else {
    grace_value e = op1(EXP, x);
    output(op2(ADD, e, opk(GRACE_OP_TRANSPOSE, 1, e, -1, -1, &tr, 1, NULL)));
  }
}

/* ---- numeric checks on the device ---- */
static uint64_t rng = 88172645463325252ull;
static int nonzero_ints;   /* integer inputs avoid 0 (divisors: the CPU raises an error on integer division by 0) */
static double urand(void) {
  rng ^= rng << 13; rng ^= rng >> 7; rng ^= rng << 17;
  return (double)(rng >> 11) / 9007199254740992.0;
}
/* A CPU tensor of bld.ir's input k's type with values in [lo, hi) (integers: rounded; bool: 0/1). */
static grace_tensor *make_input(int k, double lo, double hi) {
  for (int i = 0; i < bld.ir->ninst; i++) {
    const ir_inst *in = &bld.ir->insts[i];
    if (in->op != IR_OP_INPUT || in->input_index != k) continue;
    const ir_type *t = &bld.ir->vals[in->first_result].type;
    int64_t n = 1;
    for (int d = 0; d < t->ndim; d++) n *= t->sizes[d];
    double *buf = malloc(sizeof(double) * (size_t)(n > 0 ? n : 1));
    if (!buf) return NULL;
    for (int64_t j = 0; j < n; j++) {
      double v = lo + (hi - lo) * urand();
      if (grace_dtype_is_int(t->dtype)) v = t->dtype == GRACE_BOOL ? (double)(urand() < 0.5) : (double)(int64_t)v;
      if (nonzero_ints && grace_dtype_is_int(t->dtype) && v == 0) v = 1;
      buf[j] = v;
    }
    grace_tensor *x = NULL;
    grace_tensor_from_data(vm, t->dtype, t->ndim, t->sizes, GRACE_FLOAT64, buf, &x);
    free(buf);
    return x;
  }
  return NULL;
}

static double tol_of(grace_dtype dt) {
  switch (dt) {
  case GRACE_FLOAT32: return 1e-5;
  case GRACE_FLOAT64: return 1e-12;
  case GRACE_FLOAT16: return 1e-2;
  case GRACE_BFLOAT16: return 2e-2;
  default: return 0;
  }
}

/* Builds with build() for the CPU and for CUDA, runs both on the same values, compares every output. */
static double red_atol;   /* extra absolute tolerance, per unit of the float tolerance (sums: terms cancel) */
static void gpu_compare(const char *what, void (*build)(void *), void *ctx, double lo, double hi) {
  if (!have_gpu) { skip("no CUDA device", ""); return; }
  grace_tensor *cin[8] = {0}, *gin[8] = {0}, *cout[4] = {0}, *gout[4] = {0};
  bld.dev = GRACE_CPU;
  build(ctx);
  int nin = grace_ir_count(bld.ir, "inputs"), nout = grace_ir_count(bld.ir, "outputs");
  for (int k = 0; k < nin && k < 8; k++) {
    cin[k] = make_input(k, lo, hi);
    grace_attrs to = {0};
    to.device = GRACE_CUDA;
    if (!cin[k] || grace_run(vm, GRACE_OP_TO_DEVICE, 1, &cin[k], &to, 1, &gin[k]) != GRACE_OK) {
      ok(0, "%s: inputs copied to the device (%s)", what, grace_last_error(vm));
      goto done;
    }
  }
  grace_status st = grace_ir_run(bld.ir, nin, cin, nout, cout);
  if (!ok(st == GRACE_OK, "%s: runs on the CPU", what)) { printf("# %s\n", grace_last_error(vm)); goto done; }
  bld.dev = GRACE_CUDA;
  build(ctx);
  st = grace_ir_run(bld.ir, nin, gin, nout, gout);
  if (!ok(st == GRACE_OK, "%s: runs on the device", what)) { printf("# %s\n", grace_last_error(vm)); goto done; }
  for (int o = 0; o < nout; o++) {
    int64_t n = grace_tensor_numel(cout[o]);
    grace_dtype dt = grace_tensor_dtype(cout[o]);
    double *a = malloc(sizeof(double) * (size_t)(n + 1)), *b = malloc(sizeof(double) * (size_t)(n + 1));
    int same = a && b && grace_tensor_numel(gout[o]) == n && grace_tensor_dtype(gout[o]) == dt &&
               grace_tensor_read(vm, cout[o], GRACE_FLOAT64, a) == GRACE_OK &&
               grace_tensor_read(vm, gout[o], GRACE_FLOAT64, b) == GRACE_OK;
    int64_t bad = 0, first = -1;
    double tol = tol_of(dt);
    for (int64_t i = 0; same && i < n; i++) {
      int good = a[i] == b[i] || (a[i] != a[i] && b[i] != b[i]) ||
                 (tol > 0 && fabs(a[i] - b[i]) <= tol * fabs(a[i]) + (dt == GRACE_FLOAT32 ? 1e-6 : tol * 1e-3) + tol * red_atol);
      if (!good && first < 0) first = i;
      bad += !good;
    }
    if (!ok(same && bad == 0, "%s: output %d matches the CPU (%lld elements, %s)", what, o, (long long)n, grace_dtype_name(dt)))
      if (first >= 0) printf("# %lld differ; first at %lld: cpu %.17g gpu %.17g\n", (long long)bad, (long long)first, a[first], b[first]);
    free(a); free(b);
  }
done:
  for (int k = 0; k < 8; k++) { grace_tensor_release(cin[k]); grace_tensor_release(gin[k]); }
  for (int o = 0; o < 4; o++) { grace_tensor_release(cout[o]); grace_tensor_release(gout[o]); }
  bld.dev = GRACE_CPU;
}

typedef struct un_case { grace_op op; grace_dtype dt; int64_t n; grace_attrs at; } un_case;
static void b_unary(void *p) { un_case *c = p; build_unary(c->op, c->dt, c->n, &c->at); }
typedef struct bin_case { grace_op op; grace_dtype a, b; int64_t n; } bin_case;
static void b_binary(void *p) { bin_case *c = p; build_binary(c->op, c->a, c->b, c->n); }
typedef struct red_case { grace_op op; grace_dtype dt; int64_t rows, inner; int ndims, keep, nout, flag; } red_case;
static void b_reduce(void *p) { red_case *c = p; build_reduce(c->op, c->dt, c->rows, c->inner, c->ndims, c->keep, c->nout, c->flag); }
typedef struct sz_case { grace_dtype dt; int64_t a, b; } sz_case;
static void b_chain(void *p) { sz_case *c = p; build_chain(c->a); }
static void b_softmax(void *p) { sz_case *c = p; build_softmax(c->dt, c->a, c->b); }
static void b_layer_norm(void *p) { sz_case *c = p; build_layer_norm(c->dt, c->a, c->b); }
static void b_bcast(void *p) { sz_case *c = p; build_bcast(c->a, c->b); }
static void b_views(void *p) { sz_case *c = p; build_views(c->a, c->b); }
typedef struct own_case { int which; int64_t r, c; } own_case;
static const char *const own_what[] = {"exp(w) stored beside x * exp(w)", "exp(w) stored by a row kernel",
  "x - column mean (keepdim=0)", "x - unsqueeze(row mean)", "mixed keepdim: (x - max) + sum", "exp(x) + exp(x)^T"};
static void b_own(void *p) { own_case *c = p; build_own(c->which, c->r, c->c); }
static void b_where(void *p) { sz_case *c = p; build_where(c->dt, c->a); }
static void b_masked_fill(void *p) { sz_case *c = p; build_masked_fill(c->dt, c->a); }

static int has(const char *src, const char *frag) { return src && strstr(src, frag) != NULL; }

int main(void) {
  char err[256];
  vm = grace_vm_new(NULL, err, sizeof err);
  bld.vm = vm;
  if (!vm) { printf("Bail out! %s\n", err); return 1; }
  have_nvrtc = cuda_nvrtc_why(vm) == NULL;
  if (!have_nvrtc) printf("# NVRTC not loaded (%s): compile checks are skipped\n", cuda_nvrtc_why(vm));
  have_gpu = cuda_usable(vm);
  if (!have_gpu) printf("# no CUDA device (%s): numeric checks are skipped\n", cuda_why(vm));
  bld.dev = GRACE_CPU;
  lowered L, L2;

  /* a long pointwise chain: one kernel with the vector path */
  build_chain(1 << 20);
  lower_check("chain of 48 ops", 0, &L);
  ok(L.ngroups == 1 && L.spec.kind == CG_POINTWISE && L.spec.vec == 4, "chain: one pointwise kernel, 4 floats per access");
  ok(has(L.src, "uint4") && has(L.src, "__ldg((const uint4 *)") && has(L.src, "q += nth") && has(L.src, "i += nth"),
     "chain: vector loads, a grid-stride vector loop and the scalar tail");
  ok(has(L.src, "typedef unsigned IDX") && !has(L.src, "typedef long long IDX"), "chain: 32-bit indices below 2^31 elements");
  ok(has(L.src, "extern \"C\" __global__ void __launch_bounds__(256) GRACE_KNAME(const GRACE_KNAME_p p)") &&
     has(L.src, "#define GRACE_KNAME grace_pw_"), "chain: one struct parameter, a hashed kernel name");
  build_chain(1 << 20);
  lower(("chain again"), 0, &L2);
  ok(L.src && L2.src && L.src_len == L2.src_len && !memcmp(L.src, L2.src, L.src_len), "chain: the same group gives the same source");
  lowered_free(&L2);
  lower_check("chain, indirect", 1, &L2);
  ok(has(L2.src, "const *a0;") && has(L2.src, "= *p.a0;"), "chain, indirect: T** parameters dereferenced once at entry");
  ok(L.src && L2.src && strcmp(L.src, L2.src) != 0, "chain: indirect and direct kernels differ");
  lowered_free(&L); lowered_free(&L2);
  build_chain((int64_t)3 << 30);
  lower_check("chain over 3G elements", 0, &L);
  ok(has(L.src, "typedef long long IDX"), "chain over 3G elements: 64-bit indices");
  lowered_free(&L);

  /* broadcasting and strided operands */
  build_bcast(64, 128);
  lower_check("broadcast x[64,1] * y[1,128] + s", 0, &L);
  ok(L.spec.layout[0] == CG_STRIDED && L.spec.layout[1] == CG_STRIDED && L.spec.layout[2] == CG_SCALAR && L.spec.vec == 1,
     "broadcast: two strided operands and a scalar, no vector path");
  ok(has(L.src, "a2[0]") && has(L.src, "r % (IDX)p.w["), "broadcast: the scalar read once, strided indices decomposed");
  lowered_free(&L);
  /* tan (a row of ir/ir_pointwise.h): fused with the ops around it; float registers call tanf, double ones tan,
   * an int32 input computes in float32 */
  {
    static const grace_dtype tdt[] = {GRACE_FLOAT32, GRACE_FLOAT64, GRACE_INT32};
    static const char *const want[] = {"= (float)(tanf(e0));", "= (double)(tan(e0));", "tanf((float)"};
    for (int i = 0; i < 3; i++) {
      int64_t n[1] = {4096};
      char what[64];
      begin();
      grace_value x = input(tdt[i], 1, n);
      output(op2(ADD, op2(MUL, op1(TAN, x), lit(2, 0)), lit(1, 0)));
      snprintf(what, sizeof what, "tan(x) * 2 + 1, x %s", grace_dtype_name(tdt[i]));
      lower_check(what, 0, &L);
      ok(L.ngroups == 1 && has(L.src, want[i]), "%s: one kernel holding %s", what, want[i]);
      lowered_free(&L);
    }
  }
  build_views(256, 96);
  lower_check("transposed + narrowed views", 0, &L);
  lowered_free(&L);
  {
    static const int own_groups[] = {1, 1, 1, 1, 2, 2};
    for (int w = 0; w < 6; w++) {
      build_own(w, 64, 64);
      lower_check(own_what[w], 0, &L);
      ok(L.ngroups == own_groups[w], "%s: %d kernel(s) (got %d)", own_what[w], own_groups[w], L.ngroups);
      if (w == 0) ok(L.spec.layout[2 + 1] == CG_PARTIAL && has(L.src, "if ((p.w[5] != 0 || i0 == 0) && (p.w[6] != 0 || i1 == 0)) a3["),
                     "%s: the [c] value stored from the elements at row 0 only", own_what[w]);
      if (w == 1) ok(L.spec.kind == CG_ROW && L.spec.layout[2 + 1] == CG_PARTIAL && has(L.src, "on1 &="),
                     "%s: the [c] value stored from row 0 only", own_what[w]);
      lowered_free(&L);
    }
    build_own(1, 4, 1 << 16);   /* few long rows: split over blocks that wait for each other */
    lower_check("exp(w) stored by a split row kernel", 0, &L);
    ok(L.spec.strategy == CG_ROW_SYNC && L.spec.layout[2 + 1] == CG_PARTIAL, "exp(w) stored by a split row kernel: CG_ROW_SYNC");
    lowered_free(&L);
  }
  {
    int64_t t[1] = {2};   /* input 0 every other element of its storage */
    input_strides[0] = t;
    build_chain(1 << 20);
    lower_check("chain with a step-2 input", 0, &L);
    input_strides[0] = NULL;
    ok(L.spec.layout[0] == CG_STRIDED && L.spec.layout[1] == CG_LINEAR && L.spec.vec == 1 && has(L.src, "a0[o0]"),
       "step-2 input: strided, the others linear, no vector path");
    lowered_free(&L);
  }
  build_unary(GRACE_OP_EXP, GRACE_FLOAT32, 0, NULL);
  lower_check("empty tensor", 0, &L);
  lowered_free(&L);

  /* every pointwise op on every dtype it takes */
  static const grace_op unary[] = {GRACE_OP_NEG, GRACE_OP_ABS, GRACE_OP_EXP, GRACE_OP_LOG, GRACE_OP_LOG1P, GRACE_OP_SQRT,
    GRACE_OP_RSQRT, GRACE_OP_SIN, GRACE_OP_COS, GRACE_OP_TANH, GRACE_OP_SIGMOID, GRACE_OP_RELU, GRACE_OP_GELU,
    GRACE_OP_SILU, GRACE_OP_ERF, GRACE_OP_FLOOR, GRACE_OP_CEIL, GRACE_OP_ROUND, GRACE_OP_SIGN, GRACE_OP_LOGICAL_NOT,
    GRACE_OP_CLAMP, GRACE_OP_CAST};
  static const grace_op binary[] = {GRACE_OP_ADD, GRACE_OP_SUB, GRACE_OP_MUL, GRACE_OP_DIV, GRACE_OP_REM, GRACE_OP_POW,
    GRACE_OP_MAXIMUM, GRACE_OP_MINIMUM, GRACE_OP_LOGICAL_AND, GRACE_OP_LOGICAL_OR, GRACE_OP_EQ, GRACE_OP_NE,
    GRACE_OP_LT, GRACE_OP_LE, GRACE_OP_GT, GRACE_OP_GE};
  int nun = (int)(sizeof unary / sizeof unary[0]), nbin = (int)(sizeof binary / sizeof binary[0]);
  for (int i = 0; i < nun; i++)
    for (int d = 0; d < NDT; d++) {
      int variants = unary[i] == GRACE_OP_CAST ? NDT : unary[i] == GRACE_OP_GELU || unary[i] == GRACE_OP_CLAMP ? 2 : 1;
      for (int v = 0; v < variants; v++) {
        un_case c = {unary[i], all_dt[d], 1023, {0}};
        if (unary[i] == GRACE_OP_CAST) { c.at.dtype = all_dt[v]; c.at.has_dtype = 1; }
        if (unary[i] == GRACE_OP_GELU) c.at.flag = v;
        if (unary[i] == GRACE_OP_CLAMP) { c.at.a = v ? -0.5 : -3; c.at.b = v ? 2.5 : 3; c.at.has_a = 1; c.at.has_b = 1; }
        build_unary(c.op, c.dt, c.n, &c.at);
        if (bld.err) continue;   /* not defined for this dtype (the CPU refuses it too) */
        char what[96];
        snprintf(what, sizeof what, "%s %s%s%s", grace_op_name(c.op), grace_dtype_name(c.dt),
                 unary[i] == GRACE_OP_CAST ? " to " : "", unary[i] == GRACE_OP_CAST ? grace_dtype_name(all_dt[v]) : "");
        lower_only(what);
        c.n = v == 0 ? 65537 : 3;
        gpu_compare(what, b_unary, &c, -4, 4);
      }
    }
  for (int i = 0; i < nbin; i++)
    for (int d = 0; d < NDT; d++)
      for (int e = 0; e < NDT; e++) {
        if (d != e && !(e == (d + 3) % NDT)) continue;   /* same dtypes, and one mixed pair per dtype */
        bin_case c = {binary[i], all_dt[d], all_dt[e], 1023};
        if (c.op == GRACE_OP_SUB && (c.a == GRACE_BOOL || c.b == GRACE_BOOL)) continue;   /* refused, as by PyTorch */
        build_binary(c.op, c.a, c.b, c.n);
        if (bld.err) continue;
        char what[96];
        snprintf(what, sizeof what, "%s %s, %s", grace_op_name(c.op), grace_dtype_name(c.a), grace_dtype_name(c.b));
        lower_only(what);
        nonzero_ints = c.op == GRACE_OP_REM;
        gpu_compare(what, b_binary, &c, c.op == GRACE_OP_POW ? 0 : -20, c.op == GRACE_OP_POW ? 4 : 20);
        nonzero_ints = 0;
      }
  for (int d = 0; d < NDT; d++) {
    sz_case c = {all_dt[d], 1023, 0};
    char what[96];
    build_where(c.dt, c.a);
    snprintf(what, sizeof what, "where %s", grace_dtype_name(c.dt));
    if (!bld.err) { lower_only(what); gpu_compare(what, b_where, &c, -9, 9); }
    build_masked_fill(c.dt, c.a);
    snprintf(what, sizeof what, "masked_fill %s", grace_dtype_name(c.dt));
    if (!bld.err) { lower_only(what); gpu_compare(what, b_masked_fill, &c, -9, 9); }
  }

  /* reductions */
  static const grace_op reds[] = {GRACE_OP_SUM, GRACE_OP_MEAN, GRACE_OP_PROD, GRACE_OP_MAX, GRACE_OP_MIN, GRACE_OP_ARGMAX,
    GRACE_OP_ARGMIN, GRACE_OP_VAR, GRACE_OP_STD, GRACE_OP_LOGSUMEXP, GRACE_OP_ALL, GRACE_OP_ANY};
  int nred = (int)(sizeof reds / sizeof reds[0]);
  for (int i = 0; i < nred; i++)
    for (int d = 0; d < NDT; d++)
      for (int shape = 0; shape < 4; shape++) {
        red_case c = {reds[i], all_dt[d], 37, 1023, 1, shape == 0, 1, 1};
        if (shape == 1) { c.rows = 3; c.inner = 65537; }
        if (shape == 3) { c.rows = 150; c.inner = 3001; }
        if (shape == 2) { c.ndims = 0; c.rows = 4; c.inner = 1000; }
        if ((c.op == GRACE_OP_MAX || c.op == GRACE_OP_MIN) && shape != 2) c.nout = 2;
        build_reduce(c.op, c.dt, c.rows, c.inner, c.ndims, c.keep, c.nout, c.flag);
        if (bld.err) continue;
        char what[96];
        snprintf(what, sizeof what, "%s %s [%lld, %lld] %s", grace_op_name(c.op), grace_dtype_name(c.dt), (long long)c.rows,
                 (long long)c.inner, shape == 2 ? "all dims" : shape == 0 ? "dim -1 keepdim" : "dim -1");
        if (shape == 2) { c.rows = 4096; c.inner = 4099; }   /* 16M elements, all reduced: one row split over blocks */
        snprintf(what, sizeof what, "%s %s [%lld, %lld] %s", grace_op_name(c.op), grace_dtype_name(c.dt), (long long)c.rows,
                 (long long)c.inner, shape == 2 ? "all dims" : shape == 0 ? "dim -1 keepdim" : "dim -1");
        build_reduce(c.op, c.dt, c.rows, c.inner, c.ndims, c.keep, c.nout, c.flag);
        lowered R;
        lower_check(what, 0, &R);
        if (i == 0 && d == 0 && shape == 0)
          ok(R.spec.kind == CG_ROW && R.spec.strategy == CG_ROW_WARP && has(R.src, "__shfl_xor_sync") && has(R.src, "j += tstep"),
             "sum over 1023: a warp per row, a butterfly reduction");
        if (i == 0 && d == 0 && shape == 3)
          ok(R.spec.strategy == CG_ROW_BLOCK && has(R.src, "__shared__") && has(R.src, "__syncthreads()"),
             "sum of 150 rows of 3001: a block per row through shared memory");
        if (i == 0 && d == 0 && (shape == 1 || shape == 2))
          ok(R.spec.strategy == CG_ROW_SPLIT && has(R.src, "atomicAdd(&ws[row], 1ULL)") && has(R.src, "if (__syncthreads_or(cgf_mine))") &&
             !has(R.src, "__nanosleep"),
             "sum of %s: rows split over blocks, the last block combines", shape == 1 ? "3 rows of 65537" : "16M elements");
        lowered_free(&R);
        /* float sums round differently in float (device) and double (CPU): the error grows with the terms'
           magnitude (3) and the square root of their count, not with the (cancelling) result */
        red_atol = 3 * sqrt((double)c.inner * (c.ndims ? 1 : (double)c.rows));
        gpu_compare(what, b_reduce, &c, c.op == GRACE_OP_PROD ? 0.9 : -3, c.op == GRACE_OP_PROD ? 1.1 : 3);
        red_atol = 0;
      }

  /* decomposed softmax and layer_norm: one row kernel each */
  static const grace_dtype fdt[] = {GRACE_FLOAT32, GRACE_FLOAT64, GRACE_FLOAT16, GRACE_BFLOAT16};
  static const int64_t sm_shapes[][2] = {{64, 1000}, {7, 5000}, {3, 65537}, {1, 1 << 22}};
  for (int d = 0; d < 4; d++)
    for (int shape = 0; shape < (d == 0 ? 4 : 3); shape++) {
      sz_case c = {fdt[d], sm_shapes[shape][0], sm_shapes[shape][1]};
      char what[96];
      snprintf(what, sizeof what, "softmax %s [%lld, %lld]", grace_dtype_name(c.dt), (long long)c.a, (long long)c.b);
      build_softmax(c.dt, c.a, c.b);
      lowered R;
      lower_check(what, 0, &R);
      if (d == 0 && shape == 0)
        ok(R.ngroups == 1 && R.spec.kind == CG_ROW && has(R.src, "/* pass 2 */") && has(R.src, "/* stores over the row */"),
           "softmax: one row kernel, two reduction passes then the stores");
      /* few long rows: split over blocks that wait for each other at each pass */
      if (d == 0 && shape >= 2)
        ok(R.spec.strategy == CG_ROW_SYNC && has(R.src, "atomicAdd(&ws[row], 1ULL)") && has(R.src, "__nanosleep") &&
           has(R.src, "(unsigned long long)nchunk * 2") && has(R.src, "#pragma unroll"),
           "softmax over %lld rows of %lld: rows split over blocks that wait for each other", (long long)c.a,
           (long long)c.b);
      lowered_free(&R);
      gpu_compare(what, b_softmax, &c, -5, 5);
      snprintf(what, sizeof what, "layer_norm %s [%lld, %lld]", grace_dtype_name(c.dt), (long long)c.a, (long long)c.b);
      build_layer_norm(c.dt, c.a, c.b);
      lower_check(what, 0, &R);
      if (d == 0 && shape == 0) ok(R.ngroups == 1 && R.spec.kind == CG_ROW, "layer_norm: one row kernel");
      if (d == 0 && shape >= 2)
        ok(R.spec.strategy == CG_ROW_SYNC, "layer_norm over %lld rows of %lld: rows split over blocks", (long long)c.a,
           (long long)c.b);
      lowered_free(&R);
      gpu_compare(what, b_layer_norm, &c, -5, 5);
    }
  build_softmax(GRACE_FLOAT32, 64, 1000);
  lower_check("softmax, indirect", 1, &L);
  ok(has(L.src, "= *p.a0;"), "softmax, indirect: pointers dereferenced at entry");
  lowered_free(&L);

  /* the rest on the device: odd sizes, broadcasting, views, empty tensors */
  static const int64_t sizes[] = {1, 3, 1023, 65537, 1 << 22};
  for (int i = 0; i < 5; i++) {
    sz_case c = {GRACE_FLOAT32, sizes[i], 0};
    char what[64];
    snprintf(what, sizeof what, "chain over %lld elements", (long long)sizes[i]);
    gpu_compare(what, b_chain, &c, -2, 2);
  }
  sz_case bc = {GRACE_FLOAT32, 300, 77};
  gpu_compare("broadcast [300,1] * [1,77] + 0-d", b_bcast, &bc, -2, 2);
  gpu_compare("transposed + narrowed views", b_views, &bc, -2, 2);
  {
    for (int w = 0; w < 6; w++) {
      /* absolute error: a row sum of c terms in [-2, 2] (3 sqrt(c) units, as the reductions above), or
         x * exp(w) - max over terms up to 2 e^2 (15 units) */
      own_case oc = {w, w >= 4 ? 96 : 300, w >= 4 ? 96 : 77};   /* 4 and 5 need a square x */
      red_atol = w == 4 ? 3 * sqrt((double)oc.c) : w == 1 ? 15 : 0;
      gpu_compare(own_what[w], b_own, &oc, -2, 2);
      own_case big = {w, w >= 4 ? 2000 : 40, w >= 4 ? 2000 : 5000};   /* long rows: a block a row */
      red_atol = w == 4 ? 3 * sqrt((double)big.c) : w == 1 ? 15 : 0;
      char what[96];
      snprintf(what, sizeof what, "%s, [%lld, %lld]", own_what[w], (long long)big.r, (long long)big.c);
      gpu_compare(what, b_own, &big, -2, 2);
    }
    own_case split = {1, 4, 1 << 16};
    red_atol = 15;
    gpu_compare("exp(w) stored by a split row kernel, [4, 65536]", b_own, &split, -2, 2);
    red_atol = 0;
  }
  un_case empty = {GRACE_OP_EXP, GRACE_FLOAT32, 0, {0}};
  gpu_compare("exp of an empty tensor", b_unary, &empty, -2, 2);
  static const grace_op empty_reds[] = {GRACE_OP_SUM, GRACE_OP_MEAN, GRACE_OP_PROD, GRACE_OP_ALL, GRACE_OP_ANY};
  for (int i = 0; i < 5; i++) {
    red_case c = {empty_reds[i], GRACE_FLOAT32, 5, 0, 1, 0, 1, 0};
    char what[64];
    snprintf(what, sizeof what, "%s over an empty dim", grace_op_name(c.op));
    build_reduce(c.op, c.dt, c.rows, c.inner, c.ndims, c.keep, c.nout, c.flag);
    lower_only(what);
    gpu_compare(what, b_reduce, &c, -2, 2);
  }

  grace_ir_free(bld.ir);
  grace_vm_free(vm);
  return tap_done();
}
