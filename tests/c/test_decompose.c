/* test_decompose.c: the `decompose` pass. Golden IR text written by hand for softmax, layer_norm/rms_norm and gelu
 * (with a break before it); every decomposition run against the original op through grace_ir_run on random inputs
 * (middle dims, keepdim both ways, rows of -inf and +inf where eager defines a result); float16/bfloat16 ops
 * expanded in float32 between two casts; ops outside the table and shapes an expansion cannot express left
 * unchanged. */
#include <math.h>
#include <stdlib.h>
#include "grace.h"
#include "tap.h"

static grace_vm *vm;

/* Parses src, runs decompose alone (other passes would change the output too), compares the text with want. */
static void golden(const char *src, const char *want, const char *what) {
  grace_ir *ir = NULL, *out = NULL;
  if (!ok(grace_ir_parse(vm, src, &ir) == GRACE_OK, "%s: parses", what)) { printf("# %s\n", grace_last_error(vm)); return; }
  grace_status st = grace_ir_pass(ir, "decompose", &out);
  ok(st == GRACE_OK, "%s: decompose runs: %s", what, st == GRACE_OK ? "" : grace_last_error(vm));
  if (out) is_str(grace_ir_text(out), want, "%s: golden output", what);
  grace_ir_free(out);
  grace_ir_free(ir);
}

static void test_golden(void) {
  golden("func @f {\n"
         "  %0 = input #0 : f32[2,3,4]\n"
         "  break  @\"a.lua:1\"\n"
         "  %1 = softmax %0 {dims=[1]} : f32[2,3,4]  @\"a.lua:2\"\n"
         "  %2 = neg %1 : f32[2,3,4]\n"
         "  %3 = softmax %0 : f32[2,3,4]\n"
         "  return %2, %3\n"
         "}\n",
         "func @f {\n"
         "  %0 = input #0 : f32[2,3,4]\n"
         "  break  @\"a.lua:1\"\n"
         "  %1 = max %0 {dims=[1], keepdim=1} : f32[2,1,4]  @\"a.lua:2\"\n"
         "  %2 = sub %0, %1 : f32[2,3,4]  @\"a.lua:2\"\n"
         "  %3 = exp %2 : f32[2,3,4]  @\"a.lua:2\"\n"
         "  %4 = sum %3 {dims=[1], keepdim=1} : f32[2,1,4]  @\"a.lua:2\"\n"
         "  %5 = div %3, %4 : f32[2,3,4]  @\"a.lua:2\"\n"
         "  %6 = neg %5 : f32[2,3,4]\n"
         "  %7 = max %0 {dims=[-1], keepdim=1} : f32[2,3,1]\n"
         "  %8 = sub %0, %7 : f32[2,3,4]\n"
         "  %9 = exp %8 : f32[2,3,4]\n"
         "  %10 = sum %9 {dims=[-1], keepdim=1} : f32[2,3,1]\n"
         "  %11 = div %9, %10 : f32[2,3,4]\n"
         "  return %6, %11\n"
         "}\n",
         "softmax over a middle dim and over the default last dim, keeping locations and the break");

  /* a float64 bias of a float32 layer_norm is cast: eager computes it in float32 */
  golden("func @ln {\n"
         "  %0 = input #0 : f32[2,8]\n"
         "  %1 = input #1 : f32[8]\n"
         "  %2 = input #2 : f64[8]\n"
         "  %3 = layer_norm %0, %1, %2 {a=1e-05} : f32[2,8]\n"
         "  %4 = rms_norm %0, _ {a=1e-06} : f32[2,8]\n"
         "  %5 = layer_norm %0, _, _ {a=1e-05} : f32[2,8]\n"
         "  return %3, %4, %5\n"
         "}\n",
         "func @ln {\n"
         "  %0 = input #0 : f32[2,8]\n"
         "  %1 = input #1 : f32[8]\n"
         "  %2 = input #2 : f64[8]\n"
         "  %3 = mean %0 {dims=[-1], keepdim=1} : f32[2,1]\n"
         "  %4 = sub %0, %3 : f32[2,8]\n"
         "  %5 = mul %4, %4 : f32[2,8]\n"
         "  %6 = mean %5 {dims=[-1], keepdim=1} : f32[2,1]\n"
         "  %7 = literal 1.0000000000000001e-05 : f64[]\n"
         "  %8 = add %6, %7 : f32[2,1]\n"
         "  %9 = rsqrt %8 : f32[2,1]\n"
         "  %10 = mul %4, %9 : f32[2,8]\n"
         "  %11 = mul %10, %1 : f32[2,8]\n"
         "  %12 = cast %2 {dtype=f32} : f32[8]\n"
         "  %13 = add %11, %12 : f32[2,8]\n"
         "  %14 = mul %0, %0 : f32[2,8]\n"
         "  %15 = mean %14 {dims=[-1], keepdim=1} : f32[2,1]\n"
         "  %16 = literal 9.9999999999999995e-07 : f64[]\n"
         "  %17 = add %15, %16 : f32[2,1]\n"
         "  %18 = rsqrt %17 : f32[2,1]\n"
         "  %19 = mul %0, %18 : f32[2,8]\n"
         "  %20 = mean %0 {dims=[-1], keepdim=1} : f32[2,1]\n"
         "  %21 = sub %0, %20 : f32[2,8]\n"
         "  %22 = mul %21, %21 : f32[2,8]\n"
         "  %23 = mean %22 {dims=[-1], keepdim=1} : f32[2,1]\n"
         "  %24 = literal 1.0000000000000001e-05 : f64[]\n"
         "  %25 = add %23, %24 : f32[2,1]\n"
         "  %26 = rsqrt %25 : f32[2,1]\n"
         "  %27 = mul %21, %26 : f32[2,8]\n"
         "  return %13, %19, %27\n"
         "}\n",
         "layer_norm with weight and a cast bias, rms_norm and layer_norm without parameters");

  /* an expansion that begins with a literal still puts it after the break that precedes the op */
  golden("func @g {\n"
         "  %0 = input #0 : f64[3]\n"
         "  %1 = exp %0 : f64[3]\n"
         "  break  @\"b.lua:5\"\n"
         "  %2 = gelu %1 : f64[3]  @\"b.lua:6\"\n"
         "  %3 = literal 2 : i64[]\n"
         "  %4 = var %1 {flag=1} : f64[]\n"
         "  return %2, %4\n"
         "}\n",
         "func @g {\n"
         "  %0 = input #0 : f64[3]\n"
         "  %1 = exp %0 : f64[3]\n"
         "  break  @\"b.lua:5\"\n"
         "  %2 = literal 0.70710678118654757 : f64[]  @\"b.lua:6\"\n"
         "  %3 = mul %1, %2 : f64[3]  @\"b.lua:6\"\n"
         "  %4 = erf %3 : f64[3]  @\"b.lua:6\"\n"
         "  %5 = literal 1 : f64[]  @\"b.lua:6\"\n"
         "  %6 = add %4, %5 : f64[3]  @\"b.lua:6\"\n"
         "  %7 = mul %1, %6 : f64[3]  @\"b.lua:6\"\n"
         "  %8 = literal 0.5 : f64[]  @\"b.lua:6\"\n"
         "  %9 = mul %7, %8 : f64[3]  @\"b.lua:6\"\n"
         "  %10 = literal 2 : i64[]\n"
         "  %11 = mean %1 {keepdim=1} : f64[1]\n"
         "  %12 = sub %1, %11 : f64[3]\n"
         "  %13 = mul %12, %12 : f64[3]\n"
         "  %14 = sum %13 : f64[]\n"
         "  %15 = literal 2 : i64[]\n"
         "  %16 = div %14, %15 : f64[]\n"
         "  return %9, %16\n"
         "}\n",
         "gelu after a break, and unbiased var over all dims divided by N - 1 = 2");

  /* float16/bfloat16: expanded in float32 (eager computes them so and rounds once), the input cast once, the
   * result cast back; a bfloat16 weight joins the float32 product as it is */
  golden("func @h {\n"
         "  %0 = input #0 : f16[3,4]\n"
         "  %1 = input #1 : bf16[3,4]\n"
         "  %2 = input #2 : bf16[4]\n"
         "  %3 = softmax %0 {dims=[1]} : f16[3,4]\n"
         "  %4 = layer_norm %1, %2, _ {a=1.0000000000000001e-05} : bf16[3,4]\n"
         "  return %3, %4\n"
         "}\n",
         "func @h {\n"
         "  %0 = input #0 : f16[3,4]\n"
         "  %1 = input #1 : bf16[3,4]\n"
         "  %2 = input #2 : bf16[4]\n"
         "  %3 = cast %0 {dtype=f32} : f32[3,4]\n"
         "  %4 = max %3 {dims=[1], keepdim=1} : f32[3,1]\n"
         "  %5 = sub %3, %4 : f32[3,4]\n"
         "  %6 = exp %5 : f32[3,4]\n"
         "  %7 = sum %6 {dims=[1], keepdim=1} : f32[3,1]\n"
         "  %8 = div %6, %7 : f32[3,4]\n"
         "  %9 = cast %8 {dtype=f16} : f16[3,4]\n"
         "  %10 = cast %1 {dtype=f32} : f32[3,4]\n"
         "  %11 = mean %10 {dims=[-1], keepdim=1} : f32[3,1]\n"
         "  %12 = sub %10, %11 : f32[3,4]\n"
         "  %13 = mul %12, %12 : f32[3,4]\n"
         "  %14 = mean %13 {dims=[-1], keepdim=1} : f32[3,1]\n"
         "  %15 = literal 1.0000000000000001e-05 : f64[]\n"
         "  %16 = add %14, %15 : f32[3,1]\n"
         "  %17 = rsqrt %16 : f32[3,1]\n"
         "  %18 = mul %12, %17 : f32[3,4]\n"
         "  %19 = mul %18, %2 : f32[3,4]\n"
         "  %20 = cast %19 {dtype=bf16} : bf16[3,4]\n"
         "  return %9, %20\n"
         "}\n",
         "float16 softmax and bfloat16 layer_norm with a bfloat16 weight, in float32");
}

/* ---- numeric equivalence: the decomposed program against the original on random inputs ---- */

typedef struct ncase {
  const char *what;
  grace_op op;
  grace_dtype dt;
  int ndim;
  int64_t sizes[4];
  grace_attrs a;
  int params;          /* norms: 1 weight, 2 bias */
  grace_dtype pdt;     /* their dtype */
  int special;         /* 1: scattered -inf, whole rows of -inf, +inf at the start of other rows; 2: all -inf */
} ncase;

static uint64_t rng = 0x9e3779b97f4a7c15ull;
static double uniform(void) {   /* xorshift64*: in [-3, 3) */
  rng ^= rng >> 12; rng ^= rng << 25; rng ^= rng >> 27;
  return (double)((rng * 0x2545f4914f6cdd1dull) >> 11) / 9007199254740992.0 * 6.0 - 3.0;
}

/* Whether dim d is reduced by the case's op: softmax-like ops use dims[0] (default last), reductions dims
 * (none: all), the norms the last dim. */
static int reduced(const ncase *c, int d) {
  grace_opkind k = grace_op_kind(c->op);
  if (k == GRACE_KIND_SCAN || k == GRACE_KIND_NORM) {
    int64_t r = k == GRACE_KIND_SCAN && c->a.ndims ? c->a.dims[0] : -1;
    return d == (r < 0 ? r + c->ndim : r);
  }
  if (!c->a.ndims) return 1;
  for (int i = 0; i < c->a.ndims; i++)
    if (d == (c->a.dims[i] < 0 ? c->a.dims[i] + c->ndim : c->a.dims[i])) return 1;
  return 0;
}

static void fill(const ncase *c, double *x, int64_t n) {
  for (int64_t i = 0; i < n; i++) {
    x[i] = uniform();
    if (c->special == 2) { x[i] = -INFINITY; continue; }
    if (c->special != 1) continue;
    /* the first non-reduced coordinate picks the row kind: 0 all -inf, 1 +inf at the row's first element */
    int64_t rem = i, key = -1;
    int first = 1;
    for (int d = c->ndim - 1; d >= 0; d--) {
      int64_t coord = rem % c->sizes[d];
      rem /= c->sizes[d];
      if (reduced(c, d)) first = first && coord == 0;
      else key = coord;   /* ends as the outermost non-reduced coordinate */
    }
    if (key == 0) x[i] = -INFINITY;
    else if (key == 1 && first) x[i] = INFINITY;
    else if (i % 5 == 2) x[i] = -INFINITY;
  }
}

static int close_enough(double got, double want, double rtol, double atol) {
  if (isnan(got) || isnan(want)) return isnan(got) && isnan(want);
  if (isinf(got) || isinf(want)) return got == want;
  return fabs(got - want) <= atol + rtol * fabs(want);
}

/* Whether the program still has an instruction of op (" = name " in its text). */
static int has_op(grace_ir *ir, grace_op op) {
  char pat[40];
  snprintf(pat, sizeof pat, " = %s ", grace_op_name(op));
  const char *t = grace_ir_text(ir);
  return !t || strstr(t, pat) != NULL;
}

static void check_numeric(const ncase *c) {
  grace_ir *ir = grace_ir_new(vm, "n"), *out = NULL;
  grace_tensor *in[3] = {NULL, NULL, NULL}, *ya = NULL, *yb = NULL;
  double *buf = NULL, *ra = NULL, *rb = NULL;
  int nin = 1;
  grace_value v[3] = {-1, -1, -1}, y;
  int64_t D = c->sizes[c->ndim - 1], n = 1;
  for (int d = 0; d < c->ndim; d++) n *= c->sizes[d];
  grace_status st = ir ? grace_ir_input(ir, c->dt, GRACE_CPU, c->ndim, c->sizes, &v[0]) : GRACE_ENOMEM;
  for (int i = 1; i <= 2 && st == GRACE_OK; i++)
    if (c->params & i) st = grace_ir_input(ir, c->pdt, GRACE_CPU, 1, &D, &v[i]);
  if (st == GRACE_OK) st = grace_ir_op(ir, c->op, grace_op_ninputs(c->op), v, &c->a, 1, &y);
  if (st == GRACE_OK) st = grace_ir_output(ir, y);
  if (!ok(st == GRACE_OK, "%s: builds", c->what)) { printf("# %s\n", grace_last_error(vm)); goto done; }
  st = grace_ir_pass(ir, "decompose", &out);
  if (!ok(st == GRACE_OK, "%s: decompose runs", c->what)) { printf("# %s\n", grace_last_error(vm)); goto done; }
  ok(!has_op(out, c->op) && has_op(ir, c->op), "%s: %s is decomposed", c->what, grace_op_name(c->op));

  buf = malloc(sizeof *buf * (size_t)(n > D ? n : D));
  if (!ok(buf != NULL, "%s: host memory", c->what)) goto done;
  fill(c, buf, n);
  st = grace_tensor_from_data(vm, c->dt, c->ndim, c->sizes, GRACE_FLOAT64, buf, &in[0]);
  for (int i = 1; i <= 2 && st == GRACE_OK; i++)
    if (c->params & i) {
      for (int64_t j = 0; j < D; j++) buf[j] = uniform();
      st = grace_tensor_from_data(vm, c->pdt, 1, &D, GRACE_FLOAT64, buf, &in[nin++]);
    }
  if (st == GRACE_OK) st = grace_ir_run(ir, nin, in, 1, &ya);
  if (!ok(st == GRACE_OK, "%s: original runs", c->what)) { printf("# %s\n", grace_last_error(vm)); goto done; }
  st = grace_ir_run(out, nin, in, 1, &yb);
  if (!ok(st == GRACE_OK, "%s: decomposed runs", c->what)) { printf("# %s\n", grace_last_error(vm)); goto done; }
  int64_t m = grace_tensor_numel(ya);
  int same = grace_tensor_ndim(ya) == grace_tensor_ndim(yb) && grace_tensor_dtype(ya) == grace_tensor_dtype(yb) &&
             m == grace_tensor_numel(yb) &&
             !memcmp(grace_tensor_sizes(ya), grace_tensor_sizes(yb), sizeof(int64_t) * (size_t)grace_tensor_ndim(ya));
  if (!ok(same, "%s: same result type", c->what)) goto done;
  ra = malloc(sizeof *ra * (size_t)(m ? m : 1));
  rb = malloc(sizeof *rb * (size_t)(m ? m : 1));
  if (!ok(ra && rb, "%s: host memory", c->what)) goto done;
  grace_tensor_read(vm, ya, GRACE_FLOAT64, ra);
  grace_tensor_read(vm, yb, GRACE_FLOAT64, rb);
  /* float16/bfloat16: both round a float32 result once, so they may differ by the half type's ulp (2^-10, 2^-7
   * relative) where the float32 values fall either side of a rounding boundary */
  double rtol = c->dt == GRACE_FLOAT64 ? 1e-12 : c->dt == GRACE_FLOAT16 ? 0x1p-10 : c->dt == GRACE_BFLOAT16 ? 0x1p-7 : 1e-5;
  double atol = c->dt == GRACE_FLOAT64 ? 1e-12 : 1e-6;
  int64_t bad = -1, nonfinite = 0;
  for (int64_t i = 0; i < m; i++) {
    if (!isfinite(ra[i])) nonfinite++;
    if (bad < 0 && !close_enough(rb[i], ra[i], rtol, atol)) bad = i;
  }
  if (!ok(bad < 0, "%s: decomposed equals original (%lld values, %lld not finite)", c->what, (long long)m, (long long)nonfinite))
    printf("#   at %lld: decomposed %.17g, original %.17g\n", (long long)bad, rb[bad], ra[bad]);
  /* the special inputs exist to produce -inf/+inf/NaN results: make sure they did */
  if (c->special) ok(nonfinite > 0, "%s: special rows give non-finite results", c->what);
done:
  free(buf); free(ra); free(rb);
  for (int i = 0; i < 3; i++) if (in[i]) grace_tensor_release(in[i]);
  if (ya) grace_tensor_release(ya);
  if (yb) grace_tensor_release(yb);
  grace_ir_free(out);
  grace_ir_free(ir);
}

#define F32 GRACE_FLOAT32
#define F64 GRACE_FLOAT64
#define F16 GRACE_FLOAT16
#define BF16 GRACE_BFLOAT16
#define DIMS(...) .ndims = (int)(sizeof((int64_t[]){__VA_ARGS__}) / sizeof(int64_t)), .dims = {__VA_ARGS__}
#define EPS .a = 1e-5, .has_a = 1

static void test_numeric(void) {
  static const ncase cases[] = {
    {"softmax f32 last dim, -inf rows", GRACE_OP_SOFTMAX, F32, 2, {4, 7}, {DIMS(-1)}, 0, F32, 1},
    {"softmax f32 middle dim, -inf rows", GRACE_OP_SOFTMAX, F32, 3, {3, 5, 4}, {DIMS(1)}, 0, F32, 1},
    {"softmax f32 first dim", GRACE_OP_SOFTMAX, F32, 3, {3, 5, 4}, {DIMS(0)}, 0, F32, 0},
    {"softmax f64 middle dim, -inf rows", GRACE_OP_SOFTMAX, F64, 3, {3, 5, 4}, {DIMS(1)}, 0, F64, 1},
    {"softmax f64 default dim", GRACE_OP_SOFTMAX, F64, 1, {6}, {0}, 0, F64, 0},
    {"softmax f32 all -inf", GRACE_OP_SOFTMAX, F32, 2, {2, 3}, {DIMS(1)}, 0, F32, 2},
    {"log_softmax f32 last dim, -inf rows", GRACE_OP_LOG_SOFTMAX, F32, 2, {4, 7}, {DIMS(-1)}, 0, F32, 1},
    {"log_softmax f32 middle dim", GRACE_OP_LOG_SOFTMAX, F32, 3, {3, 5, 4}, {DIMS(1)}, 0, F32, 0},
    {"log_softmax f64 last dim, -inf rows", GRACE_OP_LOG_SOFTMAX, F64, 3, {3, 5, 4}, {DIMS(2)}, 0, F64, 1},
    {"logsumexp f32 middle dim, -inf/+inf rows", GRACE_OP_LOGSUMEXP, F32, 3, {3, 5, 4}, {DIMS(1)}, 0, F32, 1},
    {"logsumexp f32 middle dim keepdim, -inf/+inf rows", GRACE_OP_LOGSUMEXP, F32, 3, {3, 5, 4}, {DIMS(1), .keepdim = 1}, 0, F32, 1},
    {"logsumexp f32 dims 0 and 2, -inf/+inf rows", GRACE_OP_LOGSUMEXP, F32, 3, {3, 5, 4}, {DIMS(0, 2)}, 0, F32, 1},
    {"logsumexp f32 dims 0 and 2 keepdim", GRACE_OP_LOGSUMEXP, F32, 3, {3, 5, 4}, {DIMS(2, 0), .keepdim = 1}, 0, F32, 0},
    {"logsumexp f32 all dims", GRACE_OP_LOGSUMEXP, F32, 3, {3, 5, 4}, {0}, 0, F32, 0},
    {"logsumexp f32 all dims keepdim", GRACE_OP_LOGSUMEXP, F32, 2, {3, 5}, {.keepdim = 1}, 0, F32, 0},
    {"logsumexp f32 all -inf", GRACE_OP_LOGSUMEXP, F32, 2, {4, 3}, {DIMS(-1)}, 0, F32, 2},
    {"logsumexp f64 middle dim, -inf/+inf rows", GRACE_OP_LOGSUMEXP, F64, 3, {3, 5, 4}, {DIMS(1)}, 0, F64, 1},
    {"logsumexp f64 last dim keepdim", GRACE_OP_LOGSUMEXP, F64, 3, {3, 5, 4}, {DIMS(-1), .keepdim = 1}, 0, F64, 0},
    {"layer_norm f32 weight and bias", GRACE_OP_LAYER_NORM, F32, 2, {4, 16}, {EPS}, 3, F32, 0},
    {"layer_norm f32 3-d, weight only", GRACE_OP_LAYER_NORM, F32, 3, {2, 3, 8}, {EPS}, 1, F32, 0},
    {"layer_norm f32 bias only", GRACE_OP_LAYER_NORM, F32, 3, {2, 3, 8}, {EPS}, 2, F32, 0},
    {"layer_norm f32 no parameters", GRACE_OP_LAYER_NORM, F32, 2, {5, 8}, {EPS}, 0, F32, 0},
    {"layer_norm f64 weight and bias", GRACE_OP_LAYER_NORM, F64, 2, {3, 8}, {EPS}, 3, F64, 0},
    {"layer_norm f32 with f64 weight and bias", GRACE_OP_LAYER_NORM, F32, 2, {3, 8}, {EPS}, 3, F64, 0},
    {"rms_norm f32 weight", GRACE_OP_RMS_NORM, F32, 2, {4, 16}, {EPS}, 1, F32, 0},
    {"rms_norm f32 no weight", GRACE_OP_RMS_NORM, F32, 3, {2, 3, 8}, {.a = 1e-6, .has_a = 1}, 0, F32, 0},
    {"rms_norm f64 weight", GRACE_OP_RMS_NORM, F64, 3, {2, 3, 8}, {EPS}, 1, F64, 0},
    {"gelu f32 exact", GRACE_OP_GELU, F32, 2, {5, 9}, {0}, 0, F32, 0},
    {"gelu f32 tanh", GRACE_OP_GELU, F32, 2, {5, 9}, {.flag = 1}, 0, F32, 0},
    {"gelu f64 exact", GRACE_OP_GELU, F64, 2, {5, 9}, {0}, 0, F64, 0},
    {"gelu f64 tanh", GRACE_OP_GELU, F64, 2, {5, 9}, {.flag = 1}, 0, F64, 0},
    {"silu f32", GRACE_OP_SILU, F32, 2, {5, 9}, {0}, 0, F32, 0},
    {"silu f64", GRACE_OP_SILU, F64, 1, {17}, {0}, 0, F64, 0},
    {"var f32 middle dim unbiased", GRACE_OP_VAR, F32, 3, {3, 5, 4}, {DIMS(1), .flag = 1}, 0, F32, 0},
    {"var f32 dims 0 and 2 biased keepdim", GRACE_OP_VAR, F32, 3, {3, 5, 4}, {DIMS(0, -1), .keepdim = 1}, 0, F32, 0},
    {"var f32 all dims unbiased", GRACE_OP_VAR, F32, 3, {3, 5, 4}, {.flag = 1}, 0, F32, 0},
    {"var f64 middle dim unbiased keepdim", GRACE_OP_VAR, F64, 3, {3, 5, 4}, {DIMS(1), .flag = 1, .keepdim = 1}, 0, F64, 0},
    {"std f32 middle dim unbiased", GRACE_OP_STD, F32, 3, {3, 5, 4}, {DIMS(1), .flag = 1}, 0, F32, 0},
    {"std f32 all dims biased keepdim", GRACE_OP_STD, F32, 2, {6, 4}, {.keepdim = 1}, 0, F32, 0},
    {"std f64 last dim unbiased", GRACE_OP_STD, F64, 3, {3, 5, 4}, {DIMS(2), .flag = 1}, 0, F64, 0},
    {"softmax f16 middle dim, -inf rows", GRACE_OP_SOFTMAX, F16, 3, {3, 5, 4}, {DIMS(1)}, 0, F16, 1},
    {"softmax bf16 last dim", GRACE_OP_SOFTMAX, BF16, 2, {4, 33}, {DIMS(-1)}, 0, BF16, 0},
    {"log_softmax bf16 last dim, -inf rows", GRACE_OP_LOG_SOFTMAX, BF16, 2, {4, 7}, {DIMS(-1)}, 0, BF16, 1},
    {"logsumexp f16 middle dim, -inf/+inf rows", GRACE_OP_LOGSUMEXP, F16, 3, {3, 5, 4}, {DIMS(1)}, 0, F16, 1},
    {"layer_norm bf16 bf16 weight and bias", GRACE_OP_LAYER_NORM, BF16, 2, {4, 16}, {EPS}, 3, BF16, 0},
    {"layer_norm f16 f32 weight and bias", GRACE_OP_LAYER_NORM, F16, 3, {2, 3, 8}, {EPS}, 3, F32, 0},
    {"layer_norm f16 f64 weight", GRACE_OP_LAYER_NORM, F16, 2, {3, 8}, {EPS}, 1, F64, 0},
    {"rms_norm bf16 weight", GRACE_OP_RMS_NORM, BF16, 2, {4, 16}, {EPS}, 1, BF16, 0},
    {"gelu bf16 exact", GRACE_OP_GELU, BF16, 2, {5, 9}, {0}, 0, BF16, 0},
    {"gelu f16 tanh", GRACE_OP_GELU, F16, 2, {5, 9}, {.flag = 1}, 0, F16, 0},
    {"silu bf16", GRACE_OP_SILU, BF16, 1, {17}, {0}, 0, BF16, 0},
    {"var f16 middle dim unbiased", GRACE_OP_VAR, F16, 3, {3, 5, 4}, {DIMS(1), .flag = 1}, 0, F16, 0},
    {"std bf16 all dims biased keepdim", GRACE_OP_STD, BF16, 2, {6, 4}, {.keepdim = 1}, 0, BF16, 0},
  };
  for (size_t i = 0; i < sizeof cases / sizeof *cases; i++) check_numeric(&cases[i]);
}

/* Programs the pass must give back as they are. */
static void unchanged(const char *src, const char *what) {
  grace_ir *ir = NULL, *out = NULL;
  if (!ok(grace_ir_parse(vm, src, &ir) == GRACE_OK, "%s: parses", what)) { printf("# %s\n", grace_last_error(vm)); return; }
  grace_status st = grace_ir_pass(ir, "decompose", &out);
  ok(st == GRACE_OK, "%s: decompose runs: %s", what, st == GRACE_OK ? "" : grace_last_error(vm));
  if (out) is_str(grace_ir_text(out), src, "%s: unchanged", what);
  grace_ir_free(out);
  grace_ir_free(ir);
}

static void test_unchanged(void) {
  unchanged("func @u {\n"
            "  %0 = input #0 : f32[3,4]\n"
            "  %1 = exp %0 : f32[3,4]\n"
            "  %2 = cumsum %0 {dims=[1]} : f32[3,4]\n"
            "  %3, %4 = max %0 {dims=[1]} : f32[3], i64[3]\n"
            "  %5 = sum %0 {dims=[0], keepdim=1} : f32[1,4]\n"
            "  %6 = transpose %0 {dims=[0,1]} : f32[4,3]\n"
            "  %7 = matmul %0, %6 : f32[3,3]\n"
            "  return %1, %2, %3, %4, %5, %7\n"
            "}\n",
            "ops outside the table");
  unchanged("func @e {\n"
            "  %0 = input #0 : bf16[3,0]\n"
            "  %1 = softmax %0 {dims=[1]} : bf16[3,0]\n"
            "  return %1\n"
            "}\n",
            "a bfloat16 op that cannot expand (empty rows) emits no cast");
  unchanged("func @d {\n"
            "  sym s1 hint=5 min=2\n"
            "  %0 = input #0 : f32[3,4]\n"
            "  %1 = input #1 : i64[3,4]\n"
            "  %2 = input #2 : f32[s1=5,4]\n"
            "  %3 = input #3 : f32[3,0]\n"
            "  %4 = gelu %1 : f32[3,4]\n"
            "  %5 = var %2 {dims=[0], flag=1} : f32[4]\n"
            "  %6 = softmax %3 {dims=[1]} : f32[3,0]\n"
            "  %7 = logsumexp %3 {dims=[1]} : f32[3]\n"
            "  return %4, %5, %6, %7\n"
            "}\n",   /* (an integer weight of layer_norm is refused by inference, as eager refuses it) */
            "table ops it cannot decompose: integer input, symbolic count, empty row");
}

int main(void) {
  char err[256];
  vm = grace_vm_new(&(grace_config){.device = "cpu"}, err, sizeof err);
  if (!vm) { printf("Bail out! %s\n", err); return 1; }
  test_golden();
  test_numeric();
  test_unchanged();
  grace_vm_free(vm);
  return tap_done();
}
