/* test_canon.c: the canonicalizing passes (fold, simplify, cse, views) on IR text: golden outputs written by
 * hand, cases that must stay as they are, and the optimized program computing bit for bit what the original
 * computes on random inputs (NaN, inf and -0.0 among them). Only these passes and dce run, by name. */
#include <mimalloc.h>
#include <stdlib.h>
#include "grace.h"
#include "ir/ir.h"
#include "tap.h"

static grace_vm *vm;

/* The host allocator counts live blocks, so the test can tell that the passes free all they allocate. */
static long live_blocks;
static void *counting_alloc(void *ud, void *ptr, size_t osize, size_t nsize, size_t align) {
  (void)ud; (void)osize;
  if (nsize == 0) { if (ptr) { live_blocks--; mi_free(ptr); } return NULL; }
  void *p = mi_realloc_aligned(ptr, nsize, align);
  if (p && !ptr) live_blocks++;
  return p;
}

/* Parses src, runs passes, and compares the printed result with want (NULL: the input's own text). */
static grace_ir *golden(const char *passes, const char *src, const char *want, const char *what) {
  grace_ir *ir = NULL, *out = NULL;
  if (!ok(grace_ir_parse(vm, src, &ir) == GRACE_OK, "%s: parses", what)) { printf("# %s\n", grace_last_error(vm)); return NULL; }
  grace_status st = grace_ir_pass(ir, passes, &out);
  ok(st == GRACE_OK, "%s: %s runs: %s", what, passes, st == GRACE_OK ? "" : grace_last_error(vm));
  if (out) is_str(grace_ir_text(out), want ? want : src, "%s: golden output", what);
  grace_ir_free(ir);
  return out;
}

static void unchanged(const char *passes, const char *src, const char *what) { grace_ir_free(golden(passes, src, NULL, what)); }

/* ---- numeric comparison ---- */

static double special(void) {
  static const double sp[] = {0.0, -0.0, 1.0 / 0.0, -1.0 / 0.0, 0.0 / 0.0, 1.0, -1.0};
  return sp[rand() % 7];
}

/* A tensor of type t with random values; floats include the special values. */
static grace_tensor *random_tensor(const ir_type *t) {
  int64_t n = 1;
  for (int d = 0; d < t->ndim; d++) n *= t->sizes[d];
  double *data = malloc(sizeof(double) * (size_t)(n ? n : 1));
  for (int64_t i = 0; i < n; i++) {
    if (t->dtype == GRACE_BOOL) data[i] = rand() % 2;
    else if (!grace_dtype_is_float(t->dtype)) data[i] = rand() % 21 - 10;
    else data[i] = rand() % 4 == 0 ? special() : ((double)rand() / RAND_MAX - 0.5) * 8;
  }
  grace_tensor *x = NULL;
  grace_tensor_from_data(vm, t->dtype, t->ndim, t->sizes, GRACE_FLOAT64, data, &x);
  free(data);
  return x;
}

static grace_tensor *clone(grace_tensor *x) {
  grace_tensor *y = NULL;
  grace_run(vm, GRACE_OP_CLONE, 1, &x, NULL, 1, &y);
  return y;
}

/* Same dtype, shape and bytes. */
static int same_bits(grace_tensor *a, grace_tensor *b) {
  if (!a || !b || grace_tensor_dtype(a) != grace_tensor_dtype(b) || grace_tensor_ndim(a) != grace_tensor_ndim(b)) return 0;
  for (int d = 0; d < grace_tensor_ndim(a); d++) if (grace_tensor_sizes(a)[d] != grace_tensor_sizes(b)[d]) return 0;
  size_t n = (size_t)grace_tensor_numel(a) * grace_dtype_size(grace_tensor_dtype(a));
  char *x = malloc(n ? n : 1), *y = malloc(n ? n : 1);
  int same = grace_tensor_read(vm, a, grace_tensor_dtype(a), x) == GRACE_OK &&
             grace_tensor_read(vm, b, grace_tensor_dtype(b), y) == GRACE_OK && !memcmp(x, y, n);
  free(x);
  free(y);
  return same;
}

/* Runs a and b (same interface) on the same random inputs with the same seed, 20 times; 1 when outputs and
 * written-back inputs agree bit for bit every time (and outputs share storage with inputs or each other alike), 0 when they differ, -1 when a run fails. */
static int same_results(grace_ir *a_ir, grace_ir *b_ir) {
  int nin = a_ir->ninputs + a_ir->nscalars, nout = a_ir->nout, same = 1, runs = 1;
  grace_tensor *a[16] = {0}, *b[16] = {0}, *oa[8] = {0}, *ob[8] = {0};
  for (int trial = 0; trial < 20 && same && runs; trial++) {
    for (int k = 0; k < a_ir->ninst; k++) {
      const ir_inst *in = &a_ir->insts[k];
      if (in->op != IR_OP_INPUT && in->op != IR_OP_SCALAR) continue;
      int slot = in->op == IR_OP_INPUT ? in->input_index : a_ir->ninputs + in->input_index;
      a[slot] = random_tensor(&a_ir->vals[in->first_result].type);
      b[slot] = clone(a[slot]);
    }
    grace_manual_seed(vm, 1234 + (uint64_t)trial);
    runs = grace_ir_run(a_ir, nin, a, nout, oa) == GRACE_OK;
    grace_manual_seed(vm, 1234 + (uint64_t)trial);
    runs = runs && grace_ir_run(b_ir, nin, b, nout, ob) == GRACE_OK;
    for (int i = 0; runs && i < nout; i++) same = same && same_bits(oa[i], ob[i]);
    /* an output shares storage with an input or another output exactly where the original's does */
#define SID(t) grace_tensor_storage_id(t)
    for (int i = 0; runs && i < nout; i++) {
      for (int j = 0; j < i; j++) same = same && (SID(oa[i]) == SID(oa[j])) == (SID(ob[i]) == SID(ob[j]));
      for (int j = 0; j < nin; j++) same = same && (SID(oa[i]) == SID(a[j])) == (SID(ob[i]) == SID(b[j]));
    }
#undef SID
    for (int i = 0; runs && i < nin; i++) same = same && same_bits(a[i], b[i]);   /* writes to inputs */
    for (int i = 0; i < nin; i++) { grace_tensor_release(a[i]); grace_tensor_release(b[i]); a[i] = b[i] = NULL; }
    for (int i = 0; i < nout; i++) { grace_tensor_release(oa[i]); grace_tensor_release(ob[i]); oa[i] = ob[i] = NULL; }
  }
  if (!runs) printf("# %s\n", grace_last_error(vm));
  return runs ? same : -1;
}

/* The program src and src after passes compute the same bits. */
static void numeric(const char *passes, const char *src, const char *what) {
  grace_ir *ir = NULL, *opt = NULL;
  if (grace_ir_parse(vm, src, &ir) != GRACE_OK || grace_ir_pass(ir, passes, &opt) != GRACE_OK) {
    ok(0, "%s: numeric: %s", what, grace_last_error(vm));
    grace_ir_free(ir);
    return;
  }
  ok(same_results(ir, opt) == 1, "%s: %s gives the same bits as the original", what, passes);
  grace_ir_free(ir);
  grace_ir_free(opt);
}

/* The comparison can fail: x + 0 is not x (-0.0), which the random inputs must show. */
static void test_harness(void) {
  grace_ir *a = NULL, *b = NULL;
  grace_ir_parse(vm, "func @a {\n  %0 = input #0 : f32[8]\n  %1 = literal 0 : i64[]\n  %2 = add %0, %1 : f32[8]\n"
                     "  %3 = exp %2 : f32[8]\n  %4 = div %3, %2 : f32[8]\n  return %4\n}\n", &a);
  grace_ir_parse(vm, "func @b {\n  %0 = input #0 : f32[8]\n  %1 = exp %0 : f32[8]\n  %2 = div %1, %0 : f32[8]\n"
                     "  return %2\n}\n", &b);
  ok(a && b && same_results(a, b) == 0, "numeric check tells x + 0 from x");
  grace_ir_free(a);
  grace_ir_free(b);
}

/* ---- fold ---- */

static const char *fold_src =
    "func @f {\n"
    "  %0 = input #0 : f32[4]\n"
    "  %1 = literal 2 : i64[]\n"
    "  %2 = literal 3 : i64[]\n"
    "  %3 = add %1, %2 : i64[]\n"
    "  %4 = literal 4 : i64[]\n"
    "  %5 = mul %3, %4 : i64[]\n"
    "  %6 = mul %0, %5 : f32[4]\n"
    "  %7 = literal 1.5 : f64[]\n"
    "  %8 = neg %7 : f64[]  @\"a.lua:2\"\n"
    "  %9 = add %0, %8 : f32[4]\n"
    "  return %6, %9\n"
    "}\n";

static void test_fold(void) {
  /* (2 + 3) * 4: the inner sum is a 0-d tensor to the product, not a wrapped number; both fold */
  grace_ir_free(golden("fold,dce", fold_src,
      "func @f {\n"
      "  %0 = input #0 : f32[4]\n"
      "  %1 = literal 20 : i64[]\n"
      "  %2 = mul %0, %1 : f32[4]\n"
      "  %3 = literal -1.5 : f64[]  @\"a.lua:2\"\n"
      "  %4 = add %0, %3 : f32[4]\n"
      "  return %2, %4\n"
      "}\n",
      "fold: literal arithmetic becomes literals"));
  numeric("fold,dce", fold_src, "fold");

  /* f16 * neg(2.0): folded, and the product stays f16 */
  grace_ir_free(golden("fold,dce",
      "func @h {\n"
      "  %0 = input #0 : f16[3]\n"
      "  %1 = literal 2 : f64[]\n"
      "  %2 = neg %1 : f64[]\n"
      "  %3 = mul %0, %2 : f16[3]\n"
      "  return %3\n"
      "}\n",
      "func @h {\n"
      "  %0 = input #0 : f16[3]\n"
      "  %1 = literal -2 : f64[]\n"
      "  %2 = mul %0, %1 : f16[3]\n"
      "  return %2\n"
      "}\n",
      "fold: f16 * neg(2.0) keeps f16"));

  /* folding stops where a consumer's type would change, and the fold below it stays */
  static const char *partial =
      "func @g {\n"
      "  %0 = scalar #0 : i32[]\n"
      "  %1 = literal 2 : i64[]\n"
      "  %2 = literal 3 : i64[]\n"
      "  %3 = add %1, %2 : i64[]\n"
      "  %4 = neg %3 : i64[]\n"
      "  %5 = mul %0, %4 : i64[]\n"
      "  return %5\n"
      "}\n";
  grace_ir_free(golden("fold,dce", partial,
      "func @g {\n"
      "  %0 = scalar #0 : i32[]\n"
      "  %1 = literal 5 : i64[]\n"
      "  %2 = neg %1 : i64[]\n"
      "  %3 = mul %0, %2 : i64[]\n"
      "  return %3\n"
      "}\n",
      "fold: partial chain"));
  numeric("fold,dce", partial, "fold partial chain");

  /* contiguous of a literal runs as the wrapped number itself though it is typed as a 0-d tensor: nothing
   * that reads it is folded or simplified */
  static const char *through =
      "func @p {\n"
      "  %0 = literal 2 : f64[]\n"
      "  %1 = contiguous %0 : f64[]\n"
      "  %2 = abs %0 : f64[]\n"
      "  %3 = div %2, %1 : f64[]\n"
      "  %4 = literal 1 : i64[]\n"
      "  %5 = mul %1, %4 : f64[]\n"
      "  %6 = add %3, %5 : f64[]\n"
      "  return %6\n"
      "}\n";
  unchanged("fold,simplify", through, "fold, simplify: not through contiguous of a literal");
  numeric("default", through, "contiguous of a literal");

  /* a 0-d f32 scalar times a 0-d f64 tensor is f64, times a wrapped f64 it would be f32: not folded */
  unchanged("fold",
      "func @s {\n"
      "  %0 = scalar #0 : f32[]\n"
      "  %1 = literal 1.5 : f64[]\n"
      "  %2 = neg %1 : f64[]\n"
      "  %3 = mul %0, %2 : f64[]\n"
      "  return %3\n"
      "}\n",
      "fold: not where the consumer's type would change");
  /* exp of an integer is float32 and a comparison is bool: no literal holds them; wrapped 1.0 + 1.0 is f32 */
  unchanged("fold",
      "func @e {\n"
      "  %0 = literal 2 : i64[]\n"
      "  %1 = exp %0 : f32[]\n"
      "  %2 = lt %0, %0 : bool[]\n"
      "  %3 = literal 1 : f64[]\n"
      "  %4 = add %3, %3 : f32[]\n"
      "  return %1, %2, %4\n"
      "}\n",
      "fold: results a literal cannot hold stay");
  /* a captured constant may change between runs; a random op is not pointwise; an output stays a tensor */
  unchanged("fold",
      "func @c {\n"
      "  %0 = const #0 : f64[]\n"
      "  %1 = neg %0 : f64[]\n"
      "  %2 = rand {shape=[]} : f32[]\n"
      "  %3 = neg %2 : f32[]\n"
      "  %4 = literal 3 : i64[]\n"
      "  %5 = neg %4 : i64[]\n"
      "  return %1, %3, %5\n"
      "}\n",
      "fold: consts, random values and outputs are not folded");
}

/* ---- simplify ---- */

static const char *simplify_src =
    "func @f {\n"
    "  %0 = input #0 : f32[4]\n"
    "  %1 = input #1 : i32[4]\n"
    "  %2 = literal 1 : i64[]\n"
    "  %3 = literal 0 : i64[]\n"
    "  %4 = mul %0, %2 : f32[4]\n"
    "  %5 = sub %4, %3 : f32[4]\n"
    "  %6 = neg %5 : f32[4]\n"
    "  %7 = neg %6 : f32[4]\n"
    "  %8 = add %7, %3 : f32[4]\n"
    "  %9 = div %8, %2 : f32[4]\n"
    "  %10 = add %1, %3 : i32[4]\n"
    "  %11 = mul %10, %2 : i32[4]\n"
    "  %12 = exp %0 : f32[4]\n"
    "  %13 = contiguous %12 : f32[4]\n"
    "  return %9, %11, %13\n"
    "}\n";

static const char *chain_src =
    "func @t {\n"
    "  %0 = input #0 : f32[2,3]\n"
    "  %1 = transpose %0 {dims=[0,1]} : f32[3,2]\n"
    "  %2 = transpose %1 {dims=[1,0]} : f32[2,3]\n"
    "  %3 = exp %2 : f32[2,3]\n"
    "  %4 = reshape %3 {shape=[6]} : f32[6]\n"
    "  %5 = reshape %4 {shape=[3,-1]} : f32[3,2]\n"
    "  return %5\n"
    "}\n";

static void test_simplify(void) {
  /* x*1, x-0, neg(neg x), x/1 and int x+0 go; float x+0 stays (-0.0 + 0 is +0.0); the i32 output would be
   * the input itself, so its x*1 stays; contiguous of a fresh result goes */
  grace_ir_free(golden("simplify,dce", simplify_src,
      "func @f {\n"
      "  %0 = input #0 : f32[4]\n"
      "  %1 = input #1 : i32[4]\n"
      "  %2 = literal 1 : i64[]\n"
      "  %3 = literal 0 : i64[]\n"
      "  %4 = add %0, %3 : f32[4]\n"
      "  %5 = mul %1, %2 : i32[4]\n"
      "  %6 = exp %0 : f32[4]\n"
      "  return %4, %5, %6\n"
      "}\n",
      "simplify: identities"));
  numeric("simplify,dce", simplify_src, "simplify");

  grace_ir_free(golden("simplify,dce", chain_src,
      "func @t {\n"
      "  %0 = input #0 : f32[2,3]\n"
      "  %1 = exp %0 : f32[2,3]\n"
      "  %2 = reshape %1 {shape=[3,2]} : f32[3,2]\n"
      "  return %2\n"
      "}\n",
      "simplify: transpose pair and reshape chain"));
  numeric("simplify,dce", chain_src, "simplify chains");

  /* x + (-0.0) is x for floats, x + 0 is not; int x * 1.0 is float32; bool * 1 is int64; f16 * 2.0 stays */
  grace_ir_free(golden("simplify,dce",
      "func @z {\n"
      "  %0 = input #0 : f32[4]\n"
      "  %1 = literal -0 : f64[]\n"
      "  %2 = add %0, %1 : f32[4]\n"
      "  %3 = exp %2 : f32[4]\n"
      "  return %3\n"
      "}\n",
      "func @z {\n"
      "  %0 = input #0 : f32[4]\n"
      "  %1 = exp %0 : f32[4]\n"
      "  return %1\n"
      "}\n",
      "simplify: x + (-0.0)"));
  unchanged("simplify",
      "func @n {\n"
      "  %0 = input #0 : f32[4]\n"
      "  %1 = input #1 : i32[4]\n"
      "  %2 = input #2 : bool[4]\n"
      "  %3 = input #3 : f16[4]\n"
      "  %4 = literal 0 : f64[]\n"
      "  %5 = add %0, %4 : f32[4]\n"
      "  %6 = literal 1 : f64[]\n"
      "  %7 = mul %1, %6 : f32[4]\n"
      "  %8 = literal 1 : i64[]\n"
      "  %9 = mul %2, %8 : i64[4]\n"
      "  %10 = literal 2 : f64[]\n"
      "  %11 = mul %3, %10 : f16[4]\n"
      "  %12 = sub %0, %1 : f32[4]\n"
      "  %13 = literal -0 : f64[]\n"
      "  %14 = sub %0, %13 : f32[4]\n"
      "  %15 = div %1, %8 : f32[4]\n"
      "  %16 = add %5, %14 : f32[4]\n"
      "  return %16, %7, %9, %11, %12, %15\n"
      "}\n",
      "simplify: float + 0, x - (-0.0), promotions and f16 * 2.0 stay");
  /* an output that is a view of x * 1 would share the input's storage */
  static const char *escape =
      "func @o {\n"
      "  %0 = input #0 : f32[2,3]\n"
      "  %1 = literal 1 : i64[]\n"
      "  %2 = mul %0, %1 : f32[2,3]\n"
      "  %3 = reshape %2 {shape=[6]} : f32[6]\n"
      "  %4 = exp %0 : f32[2,3]\n"
      "  %5 = exp %0 : f32[2,3]\n"
      "  %6 = transpose %4 {dims=[0,1]} : f32[3,2]\n"
      "  %7 = contiguous %5 : f32[2,3]\n"
      "  return %3, %6, %7\n"
      "}\n";
  /* contiguous of a fresh result is that result; the two exps stay two, since each reaches the host */
  grace_ir_free(golden("simplify,cse", escape,
      "func @o {\n"
      "  %0 = input #0 : f32[2,3]\n"
      "  %1 = literal 1 : i64[]\n"
      "  %2 = mul %0, %1 : f32[2,3]\n"
      "  %3 = reshape %2 {shape=[6]} : f32[6]\n"
      "  %4 = exp %0 : f32[2,3]\n"
      "  %5 = exp %0 : f32[2,3]\n"
      "  %6 = transpose %4 {dims=[0,1]} : f32[3,2]\n"
      "  return %3, %6, %5\n"
      "}\n",
      "simplify, cse: what reaches the host keeps storage of its own"));
  numeric("default", escape, "storage of outputs");
  /* a value a `view` reads must stay contiguous: x*1 of a transposed input is not the transposed input */
  unchanged("simplify",
      "func @v {\n"
      "  %0 = input #0 : f32[2,3]\n"
      "  %1 = transpose %0 {dims=[0,1]} : f32[3,2]\n"
      "  %2 = literal 1 : i64[]\n"
      "  %3 = mul %1, %2 : f32[3,2]\n"
      "  %4 = view %3 {shape=[6]} : f32[6]\n"
      "  return %4\n"
      "}\n",
      "simplify: not where a view needs the contiguous result");
}

/* ---- cse ---- */

static const char *cse_src =
    "func @c {\n"
    "  %0 = input #0 : f32[4]\n"
    "  %1 = input #1 : f32[4]\n"
    "  %2 = literal 2 : i64[]\n"
    "  %3 = literal 2 : i64[]\n"
    "  %4 = literal 2 : f64[]\n"
    "  %5 = mul %0, %2 : f32[4]\n"
    "  %6 = mul %0, %3 : f32[4]\n"
    "  %7 = mul %0, %4 : f32[4]\n"
    "  %8 = rand {shape=[4]} : f32[4]\n"
    "  %9 = rand {shape=[4]} : f32[4]\n"
    "  %10 = add %5, %6 : f32[4]\n"
    "  %11 = add %7, %8 : f32[4]\n"
    "  %12 = add %11, %9 : f32[4]\n"
    "  %13 = sum %10 {dims=[0]} : f32[]\n"
    "  %14 = sum %10 {dims=[0]} : f32[]\n"
    "  %15 = sum %10 {dims=[0], keepdim=1} : f32[1]\n"
    "  %16 = add %13, %14 : f32[]\n"
    "  %17 = fill_ %1 {a=1} : f32[4]\n"
    "  %18 = fill_ %1 {a=1} : f32[4]\n"
    "  %19 = add %17, %18 : f32[4]\n"
    "  %20 = exp %0 : f32[4]\n"
    "  %21 = exp %0 : f32[4]\n"
    "  return %12, %16, %15, %19, %20, %21\n"
    "}\n";

static void test_cse(void) {
  /* equal literals and equal ops merge; an f64 2 is not an i64 2; random and in-place ops never merge; two
   * outputs stay two tensors */
  grace_ir_free(golden("cse,dce", cse_src,
      "func @c {\n"
      "  %0 = input #0 : f32[4]\n"
      "  %1 = input #1 : f32[4]\n"
      "  %2 = literal 2 : i64[]\n"
      "  %3 = literal 2 : f64[]\n"
      "  %4 = mul %0, %2 : f32[4]\n"
      "  %5 = mul %0, %3 : f32[4]\n"
      "  %6 = rand {shape=[4]} : f32[4]\n"
      "  %7 = rand {shape=[4]} : f32[4]\n"
      "  %8 = add %4, %4 : f32[4]\n"
      "  %9 = add %5, %6 : f32[4]\n"
      "  %10 = add %9, %7 : f32[4]\n"
      "  %11 = sum %8 {dims=[0]} : f32[]\n"
      "  %12 = sum %8 {dims=[0], keepdim=1} : f32[1]\n"
      "  %13 = add %11, %11 : f32[]\n"
      "  %14 = fill_ %1 {a=1} : f32[4]\n"
      "  %15 = fill_ %1 {a=1} : f32[4]\n"
      "  %16 = add %14, %15 : f32[4]\n"
      "  %17 = exp %0 : f32[4]\n"
      "  %18 = exp %0 : f32[4]\n"
      "  return %10, %13, %12, %16, %17, %18\n"
      "}\n",
      "cse: merges what is equal"));
  numeric("cse,dce", cse_src, "cse");

  /* unbound captures (just parsed) have no identity to compare: they stay apart */
  unchanged("cse",
      "func @k {\n"
      "  %0 = const #0 : f32[2]\n"
      "  %1 = const #1 : f32[2]\n"
      "  %2 = add %0, %1 : f32[2]\n"
      "  return %2\n"
      "}\n",
      "cse: unbound captures stay");

  /* one tensor captured twice merges, another tensor does not */
  grace_ir *ir = grace_ir_new(vm, "k"), *out = NULL;
  grace_tensor *w = NULL, *u = NULL;
  grace_tensor_from_data(vm, GRACE_FLOAT32, 1, (int64_t[]){2}, GRACE_FLOAT64, (double[]){1.5, -2}, &w);
  grace_tensor_from_data(vm, GRACE_FLOAT32, 1, (int64_t[]){2}, GRACE_FLOAT64, (double[]){1.5, -2}, &u);
  grace_value c0, c1, c2, s01, s2;
  grace_ir_const(ir, w, &c0);
  grace_ir_const(ir, w, &c1);
  grace_ir_const(ir, u, &c2);
  grace_ir_op(ir, GRACE_OP_ADD, 2, (grace_value[]){c0, c1}, NULL, 1, &s01);
  grace_ir_op(ir, GRACE_OP_ADD, 2, (grace_value[]){s01, c2}, NULL, 1, &s2);
  grace_ir_output(ir, s2);
  grace_status st = grace_ir_pass(ir, "cse,dce", &out);
  ok(st == GRACE_OK, "cse on captures runs: %s", st == GRACE_OK ? "" : grace_last_error(vm));
  if (out) {
    is_int(grace_ir_count(out, "consts"), 2, "cse: a tensor captured twice is one capture");
    ok(grace_ir_const_tensor(out, 0) == w && grace_ir_const_tensor(out, 1) == u, "cse: captures keep their tensors");
    grace_tensor *ra = NULL, *rb = NULL;
    ok(grace_ir_run(ir, 0, NULL, 1, &ra) == GRACE_OK && grace_ir_run(out, 0, NULL, 1, &rb) == GRACE_OK && same_bits(ra, rb),
       "cse: captures merged compute the same");
    grace_tensor_release(ra);
    grace_tensor_release(rb);
  }
  grace_ir_free(out);
  grace_ir_free(ir);
  grace_tensor_release(w);
  grace_tensor_release(u);
}

/* ---- views ---- */

static const char *views_src =
    "func @v {\n"
    "  %0 = input #0 : f32[2,3]\n"
    "  %1 = unsqueeze %0 {dims=[0]} : f32[1,2,3]\n"
    "  %2 = squeeze %1 {dims=[0]} : f32[2,3]\n"
    "  %3 = exp %2 : f32[2,3]\n"
    "  %4 = reshape %3 {shape=[6]} : f32[6]\n"
    "  %5 = unsqueeze %4 {dims=[1]} : f32[6,1]\n"
    "  %6 = view %5 {shape=[3,2]} : f32[3,2]\n"
    "  %7 = reshape %0 {shape=[3,2]} : f32[3,2]\n"
    "  %8 = view %7 {shape=[6]} : f32[6]\n"
    "  %9 = unsqueeze %3 {dims=[0]} : f32[1,2,3]\n"
    "  %10 = add %9, %9 : f32[1,2,3]\n"
    "  %11 = squeeze %9 : f32[2,3]\n"
    "  return %6, %8, %10, %11\n"
    "}\n";

static void test_views(void) {
  /* squeeze(unsqueeze x) is x; a chain over a fresh result is one reshape; a chain over an input that may
   * have copied stays (its result's layout is returned); a view with another use stays */
  grace_ir_free(golden("views,dce", views_src,
      "func @v {\n"
      "  %0 = input #0 : f32[2,3]\n"
      "  %1 = exp %0 : f32[2,3]\n"
      "  %2 = reshape %1 {shape=[3,2]} : f32[3,2]\n"
      "  %3 = reshape %0 {shape=[3,2]} : f32[3,2]\n"
      "  %4 = view %3 {shape=[6]} : f32[6]\n"
      "  %5 = unsqueeze %1 {dims=[0]} : f32[1,2,3]\n"
      "  %6 = add %5, %5 : f32[1,2,3]\n"
      "  %7 = squeeze %5 : f32[2,3]\n"
      "  return %2, %4, %6, %7\n"
      "}\n",
      "views: chains fold"));
  numeric("views,dce", views_src, "views");
  /* views of an input that never copy fold into one reshape of it */
  grace_ir_free(golden("views,dce",
      "func @w {\n"
      "  %0 = input #0 : f32[2,3]\n"
      "  %1 = view %0 {shape=[6]} : f32[6]\n"
      "  %2 = unsqueeze %1 {dims=[0]} : f32[1,6]\n"
      "  %3 = view %2 {shape=[3,2]} : f32[3,2]\n"
      "  return %3\n"
      "}\n",
      "func @w {\n"
      "  %0 = input #0 : f32[2,3]\n"
      "  %1 = reshape %0 {shape=[3,2]} : f32[3,2]\n"
      "  return %1\n"
      "}\n",
      "views: view chains of an input"));
}

/* ---- all passes over a traced-looking program ---- */

static const char *traced_src =
    "func @t {\n"
    "  %0 = input #0 : f32[4]\n"
    "  %1 = input #1 : f32[4]\n"
    "  %2 = literal 2 : i64[]\n"
    "  %3 = literal 3 : i64[]\n"
    "  %4 = mul %2, %3 : i64[]  @\"m.lua:1\"\n"
    "  %5 = mul %0, %4 : f32[4]  @\"m.lua:2\"\n"
    "  %6 = mul %0, %4 : f32[4]  @\"m.lua:3\"\n"
    "  break  @\"m.lua:4\"\n"
    "  %7 = add %5, %6 : f32[4]  @\"m.lua:5\"\n"
    "  %8 = literal 1 : i64[]\n"
    "  %9 = mul %7, %8 : f32[4]  @\"m.lua:6\"\n"
    "  %10 = copy_ %1, %9 : f32[4]  @\"m.lua:7\"\n"
    "  write %1, %10\n"
    "  return %9\n"
    "}\n";

static void test_traced(void) {
  grace_ir_free(golden("fold,simplify,cse,views,dce", traced_src,
      "func @t {\n"
      "  %0 = input #0 : f32[4]\n"
      "  %1 = input #1 : f32[4]\n"
      "  %2 = literal 6 : i64[]  @\"m.lua:1\"\n"
      "  %3 = mul %0, %2 : f32[4]  @\"m.lua:2\"\n"
      "  break  @\"m.lua:4\"\n"
      "  %4 = add %3, %3 : f32[4]  @\"m.lua:5\"\n"
      "  %5 = copy_ %1, %4 : f32[4]  @\"m.lua:7\"\n"
      "  write %1, %5\n"
      "  return %4\n"
      "}\n",
      "traced program: breaks, writes and locations survive"));
  numeric("fold,simplify,cse,views,dce", traced_src, "traced program");
  /* every pass of the registry, in its default order, keeps the program's meaning */
  numeric("default", traced_src, "default passes");
  numeric("default", views_src, "default passes on views");
}


/* ---- random programs: every pass over programs made of the ops these passes rewrite ---- */

/* One random program over two f32[2,3] inputs, an i32[2,3] input and an f32 scalar; NULL if it came out empty. */
static grace_ir *random_program(void) {
  grace_ir *ir = grace_ir_new(vm, "r");
  grace_value pool[64];
  int n = 0;
  const int64_t sz[2] = {2, 3};
  grace_ir_input(ir, GRACE_FLOAT32, GRACE_CPU, 2, sz, &pool[n++]);
  grace_ir_input(ir, GRACE_FLOAT32, GRACE_CPU, 2, sz, &pool[n++]);
  grace_ir_input(ir, GRACE_INT32, GRACE_CPU, 2, sz, &pool[n++]);
  grace_ir_scalar(ir, GRACE_FLOAT32, &pool[n++]);
  static const grace_op bin[] = {GRACE_OP_ADD, GRACE_OP_SUB, GRACE_OP_MUL, GRACE_OP_DIV, GRACE_OP_MAXIMUM};
  static const grace_op un[] = {GRACE_OP_NEG, GRACE_OP_EXP, GRACE_OP_ABS, GRACE_OP_CONTIGUOUS};
  static const double lits[] = {0.0, -0.0, 1.0, 1.0, 2.0, 0.5};
  for (int step = 0; step < 24 && n < 60; step++) {
    grace_value v = -1, in[2];
    grace_attrs a = {0};
    int pick = rand() % 10;
    if (pick < 2) {   /* a literal (integer or float) */
      int isint = rand() % 2;
      double x = lits[rand() % 6];
      if (isint && x != (double)(int64_t)x) x = 1;
      if (grace_ir_literal(ir, x, isint, &v) != GRACE_OK) v = -1;
    } else if (pick < 5) {
      in[0] = pool[rand() % n];
      in[1] = pool[rand() % n];
      if (grace_ir_op(ir, bin[rand() % 5], 2, in, NULL, 1, &v) != GRACE_OK) v = -1;
    } else if (pick < 7) {
      in[0] = pool[rand() % n];
      if (grace_ir_op(ir, un[rand() % 4], 1, in, NULL, 1, &v) != GRACE_OK) v = -1;
    } else {   /* a view */
      in[0] = pool[rand() % n];
      grace_op op;
      int r = rand() % 6;
      if (r < 2) {
        static const int64_t shapes[3][2] = {{6, 0}, {3, 2}, {2, 3}};
        int k = rand() % 3;
        op = r == 0 ? GRACE_OP_RESHAPE : GRACE_OP_VIEW;
        a.nshape = k == 0 ? 1 : 2;
        memcpy(a.shape, shapes[k], sizeof shapes[k]);
      } else if (r == 2) { op = GRACE_OP_UNSQUEEZE; a.ndims = 1; a.dims[0] = rand() % 2; }
      else if (r == 3) op = GRACE_OP_SQUEEZE;
      else { op = GRACE_OP_TRANSPOSE; a.ndims = 2; a.dims[0] = 0; a.dims[1] = 1; }
      if (grace_ir_op(ir, op, 1, in, &a, 1, &v) != GRACE_OK) v = -1;
    }
    if (v >= 0) pool[n++] = v;
  }
  int outs = 0;
  for (int i = n - 1; i >= 4 && outs < 3; i -= 1 + rand() % 3)
    if (ir->insts[ir->vals[pool[i]].inst].op != IR_OP_LITERAL && grace_ir_output(ir, pool[i]) == GRACE_OK) outs++;
  if (!outs) { grace_ir_free(ir); return NULL; }
  return ir;
}

static void test_random_programs(void) {
  int compared = 0, same = 1, passes_ok = 1, before = 0, after = 0;
  for (int i = 0; i < 400 && same && passes_ok; i++) {
    grace_ir *ir = random_program(), *opt = NULL;
    if (!ir) continue;
    grace_tensor *in[4] = {0}, *out[3] = {0};
    /* programs the interpreter rejects (a view of a transposed value) say nothing about the passes */
    for (int k = 0; k < 4; k++) in[k] = random_tensor(&ir->vals[ir->insts[k].first_result].type);
    int runs = grace_ir_run(ir, 4, in, ir->nout, out) == GRACE_OK;
    for (int k = 0; k < 4; k++) grace_tensor_release(in[k]);
    for (int k = 0; k < ir->nout; k++) grace_tensor_release(out[k]);
    const char *which = i % 2 ? "fold,simplify,cse,views,dce" : "simplify,views,cse,fold,simplify,dce";
    if (grace_ir_pass(ir, which, &opt) != GRACE_OK) {
      passes_ok = 0;
      printf("# %s\n# %s", grace_last_error(vm), grace_ir_text(ir));
    } else if (runs) {
      int r = same_results(ir, opt);
      if (r != 1) { same = 0; printf("# original:\n%s# optimized:\n%s", grace_ir_text(ir), grace_ir_text(opt)); }
      compared++;
      before += grace_ir_count(ir, "insts");
      after += grace_ir_count(opt, "insts");
    }
    grace_ir_free(opt);
    grace_ir_free(ir);
  }
  ok(passes_ok, "random programs: the passes verify");
  ok(same, "random programs: optimized programs give the same bits");
  ok(compared > 100 && after < before, "random programs: %d compared, %d instructions became %d", compared, before, after);
}

int main(void) {
  char err[256];
  vm = grace_vm_new(&(grace_config){.device = "cpu", .alloc = counting_alloc}, err, sizeof err);
  if (!vm) { printf("Bail out! %s\n", err); return 1; }
  srand(7);
  test_harness();
  test_fold();
  test_simplify();
  test_cse();
  test_views();
  test_traced();
  test_random_programs();
  grace_vm_free(vm);
  is_int(live_blocks, 0, "every host allocation was freed");
  return tap_done();
}
