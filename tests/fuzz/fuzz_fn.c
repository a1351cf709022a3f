/* fuzz_fn.c: compiled functions (grace_fn) on random programs. The input is a small program of ops (the host
 * function, run over the table of tensors it made so far, which starts with its arguments: two tensors and a
 * number) and a series of calls with argument shapes and numbers chosen from the input, so that calls hit the
 * cache, miss a guard and retrace, grow dynamic scalars and run eagerly past the cache limit. Each call's results
 * are compared with the host function run directly (eagerly) on copies of the same arguments; the programs have no
 * random ops, so both must agree (up to float rounding of fused kernels) whenever both succeed. */
#include "fuzz.h"

#define PROG 12
#define POOL 16
#define CALLS 6

typedef struct step { grace_op op; int nin; uint8_t in[8]; grace_attrs a; int nout; } step;
typedef struct prog { grace_vm *vm; int n; step s[PROG]; uint8_t nres; } prog;

static void release_all(grace_tensor **t, int n) { for (int k = 0; k < n; k++) grace_tensor_release(t[k]); }

static grace_status host_call(void *ud, int nargs, const grace_arg *args, int *nres, grace_arg *res, int maxres) {
  prog *p = ud;
  grace_vm *vm = p->vm;
  grace_tensor *pool[POOL];
  int n = 0;
  for (int k = 0; k < nargs && k < 2; k++) { grace_tensor_retain(args[k].t); pool[n++] = args[k].t; }
  grace_status st = grace_tensor_scalar(vm, args[2].f, 0, &pool[n]);
  if (st == GRACE_OK) n++;
  for (int k = 0; k < p->n && st == GRACE_OK; k++) {
    const step *s = &p->s[k];
    grace_tensor *in[8], *out[2] = {0};
    for (int j = 0; j < s->nin; j++) in[j] = s->in[j] == 255 ? NULL : pool[s->in[j] % n];
    st = grace_run(vm, s->op, s->nin, in, &s->a, s->nout, out);
    if (st != GRACE_OK) break;
    for (int j = 0; j < s->nout; j++) {
      if (n < POOL) pool[n++] = out[j];
      else grace_tensor_release(out[j]);
    }
  }
  if (st != GRACE_OK) { release_all(pool, n); return st; }
  int want = 1 + p->nres % 2;
  if (want > maxres) want = maxres;
  *nres = want;
  for (int k = 0; k < want; k++) {
    grace_tensor *t = pool[n - 1 - k];
    grace_tensor_retain(t);
    res[k] = (grace_arg){.kind = GRACE_ARG_TENSOR, .t = t};
  }
  release_all(pool, n);
  return GRACE_OK;
}

static void read_program(fz *f, prog *p) {
  p->n = 1 + fz_u8(f) % PROG;
  p->nres = fz_u8(f);
  for (int k = 0; k < p->n; k++) {
    step *s = &p->s[k];
    s->op = (grace_op)(fz_u8(f) % GRACE_NOPS);
    if (s->op == GRACE_OP_RAND || s->op == GRACE_OP_RANDN || s->op == GRACE_OP_RANDINT) s->op = GRACE_OP_FULL;
    s->nin = grace_op_ninputs(s->op);
    if (s->nin < 0) s->nin = 1 + fz_u8(f) % 4;
    for (int j = 0; j < s->nin; j++) s->in[j] = fz_u8(f);
    grace_attrs *a = &s->a;
    memset(a, 0, sizeof *a);
    uint8_t has = fz_u8(f);
    if (has & 1) { a->ndims = fz_u8(f) % 3; for (int j = 0; j < a->ndims; j++) a->dims[j] = fz_sub(fz_int(f), 2); }
    if (has & 2) { a->nshape = fz_u8(f) % 4; for (int j = 0; j < a->nshape; j++) a->shape[j] = fz_sub(fz_int(f), fz_u8(f) & 1); }
    if (has & 4) { a->a = fz_num(f); a->has_a = 1; a->b = fz_num(f); a->has_b = fz_u8(f) & 1; a->c = fz_num(f); }
    if (has & 8) { a->i0 = fz_int(f); a->i1 = fz_int(f); }
    if (has & 16) { a->keepdim = fz_u8(f) & 1; a->flag = fz_u8(f) & 3; }
    if (has & 32) { a->has_dtype = 1; a->dtype = fz_dtype(f); }
    s->nout = grace_op_noutputs(s->op);
  }
}

/* FUZZ_VERBOSE=1 in the environment: the program on stderr (to turn a crashing input into a test) */
static void print_program(const prog *p) {
  for (int k = 0; k < p->n; k++) {
    const step *s = &p->s[k];
    const grace_attrs *a = &s->a;
    fprintf(stderr, "step %d: %s in", k, grace_op_name(s->op));
    for (int j = 0; j < s->nin; j++) fprintf(stderr, " %d", s->in[j]);
    fprintf(stderr, " dims[%d] %lld %lld shape[%d] %lld %lld %lld a=%g(%d) b=%g(%d) c=%g i0=%lld i1=%lld keep=%d flag=%d "
            "dtype=%s(%d)\n", a->ndims, (long long)a->dims[0], (long long)a->dims[1], a->nshape, (long long)a->shape[0],
            (long long)a->shape[1], (long long)a->shape[2], a->a, a->has_a, a->b, a->has_b, a->c, (long long)a->i0,
            (long long)a->i1, a->keepdim, a->flag, grace_dtype_name(a->dtype), a->has_dtype);
  }
}

/* Two argument tensors of one of a few shapes (the same choice again is a cache hit), elements from the input. */
static grace_status make_args(grace_vm *vm, fz *f, grace_tensor **t) {
  static const int64_t shapes[][3] = {{2, 3, 0}, {3, 2, 0}, {4, 0, 0}, {1, 3, 0}, {2, 2, 2}, {0, 3, 0}, {5, 0, 0}};
  static const int ndims[] = {2, 2, 1, 2, 3, 2, 1};
  grace_status st = GRACE_OK;
  for (int k = 0; k < 2 && st == GRACE_OK; k++) {
    int c = fz_u8(f) % 7;
    grace_dtype dt = fz_u8(f) < 200 ? GRACE_FLOAT32 : fz_dtype(f);
    double v[8];
    for (int j = 0; j < 8; j++) v[j] = fz_num(f);
    st = grace_tensor_from_data(vm, dt, ndims[c], shapes[c], GRACE_FLOAT64, v, &t[k]);
    if (getenv("FUZZ_VERBOSE"))
      fprintf(stderr, "arg %d: %s shape #%d = %g %g %g %g %g %g %g %g\n", k, grace_dtype_name(dt), c, v[0], v[1], v[2],
              v[3], v[4], v[5], v[6], v[7]);
  }
  return st;
}

static grace_status clone2(grace_vm *vm, grace_tensor **src, grace_tensor **dst) {
  grace_status st = grace_run(vm, GRACE_OP_CLONE, 1, &src[0], NULL, 1, &dst[0]);
  if (st == GRACE_OK) st = grace_run(vm, GRACE_OP_CLONE, 1, &src[1], NULL, 1, &dst[1]);
  return st;
}

static int close_enough(double a, double b) {
  if (isnan(a) || isnan(b)) return isnan(a) && isnan(b);
  if (isinf(a) || isinf(b)) return a == b || fabs(a) > 1e30 || fabs(b) > 1e30;
  return fabs(a - b) <= 1e-3 * (1 + fabs(b)) || (fabs(a) > 1e30 && fabs(b) > 1e30);
}

static void compare(grace_vm *vm, grace_tensor *c, grace_tensor *e, int k) {
  int nd = grace_tensor_ndim(c);
  if (nd != grace_tensor_ndim(e) || grace_tensor_dtype(c) != grace_tensor_dtype(e) ||
      memcmp(grace_tensor_sizes(c), grace_tensor_sizes(e), sizeof(int64_t) * (size_t)nd)) {
    fprintf(stderr, "fuzz: result %d: compiled and eager differ in dtype or shape\n", k);
    abort();
  }
  int64_t n = grace_tensor_numel(c);
  if (n <= 0 || n > (1 << 18)) return;
  double *x = malloc(sizeof *x * (size_t)n), *y = malloc(sizeof *y * (size_t)n);
  if (x && y && grace_tensor_read(vm, c, GRACE_FLOAT64, x) == GRACE_OK &&
      grace_tensor_read(vm, e, GRACE_FLOAT64, y) == GRACE_OK) {
    for (int64_t i = 0; i < n; i++)
      if (!close_enough(x[i], y[i])) {
        fprintf(stderr, "fuzz: result %d element %lld: compiled %.9g, eager %.9g\n", k, (long long)i, x[i], y[i]);
        abort();
      }
  }
  free(x);
  free(y);
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size) {
  fz f = {data, size, 0};
  grace_vm *vm = fuzz_vm(0);
  prog p = {.vm = vm};
  grace_fn_options opts = {.cache_limit = 1 + fz_u8(&f) % 4, .dynamic = fz_u8(&f) & 1};
  read_program(&f, &p);
  if (getenv("FUZZ_VERBOSE")) print_program(&p);
  grace_host host = {.call = host_call};
  grace_fn *fn = NULL;
  grace_status st = grace_fn_new(vm, "fuzz", &host, &p, &opts, &fn);
  fuzz_status(vm, st, "grace_fn_new");
  for (int call = 0; call < CALLS && st == GRACE_OK && fz_more(&f); call++) {
    grace_tensor *base[2] = {0}, *ca[2] = {0}, *ea[2] = {0};
    double num = fz_num(&f);
    if (getenv("FUZZ_VERBOSE")) fprintf(stderr, "call %d: number %g\n", call, num);
    grace_status s = make_args(vm, &f, base);
    if (s == GRACE_OK) s = clone2(vm, base, ca);
    if (s == GRACE_OK) s = clone2(vm, base, ea);
    fuzz_status(vm, s, "arguments");
    if (s == GRACE_OK) {
      grace_arg args[3] = {{.kind = GRACE_ARG_TENSOR, .t = ca[0]}, {.kind = GRACE_ARG_TENSOR, .t = ca[1]},
                           {.kind = GRACE_ARG_FLOAT, .f = num}};
      grace_arg cres[2] = {0}, eres[2] = {0};
      int cn = 0, en = 0;
      grace_status cs = grace_fn_call(fn, 3, args, &cn, cres, 2);
      fuzz_status(vm, cs, "grace_fn_call");
      args[0].t = ea[0], args[1].t = ea[1];
      grace_status es = host_call(&p, 3, args, &en, eres, 2);
      fuzz_status(vm, es, "eager");
      if (cs == GRACE_OK && es == GRACE_OK) {
        if (cn != en) { fprintf(stderr, "fuzz: %d results compiled, %d eager\n", cn, en); abort(); }
        for (int k = 0; k < cn; k++) compare(vm, cres[k].t, eres[k].t, k);
        compare(vm, ca[0], ea[0], 100);   /* in-place writes to the arguments too */
        compare(vm, ca[1], ea[1], 101);
      }
      for (int k = 0; k < cn; k++) if (cres[k].kind == GRACE_ARG_TENSOR) grace_tensor_release(cres[k].t);
      for (int k = 0; k < en; k++) if (eres[k].kind == GRACE_ARG_TENSOR) grace_tensor_release(eres[k].t);
      if (fz_u8(&f) == 1) {
        char buf[4096];
        args[0].t = ca[0], args[1].t = ca[1];
        fuzz_status(vm, grace_fn_explain(fn, 3, args, buf, sizeof buf), "grace_fn_explain");
      }
    }
    release_all(base, 2); release_all(ca, 2); release_all(ea, 2);
  }
  grace_fn_free(fn);
  fuzz_vm_done(vm);
  return 0;
}
