/* region_progs.h: programs with regions (cond, while_loop) built through the IR API, and a driver for their calls,
 * shared by the fake-driver tests of the region lowerings (test_cond_fake.c: conditional nodes, test_pred_fake.c:
 * predication). Include after grace.h, tap.h and fake_cuda.h, in one test file. */
#ifndef GRACE_TEST_REGION_PROGS_H
#define GRACE_TEST_REGION_PROGS_H

enum { N = 256 };

/* A device tensor holding v (dtype dt, 0-d when n == 0, else n copies). */
static grace_tensor *dev_value(grace_vm *vm, grace_dtype dt, int64_t n, double v) {
  double data[N];
  for (int i = 0; i < N; i++) data[i] = v;
  grace_tensor *h = NULL, *d = NULL;
  int64_t sz = n;
  if (grace_tensor_from_data(vm, dt, n ? 1 : 0, &sz, GRACE_FLOAT64, data, &h) == GRACE_OK)
    grace_run(vm, GRACE_OP_TO_DEVICE, 1, &h, &(grace_attrs){.device = GRACE_CUDA}, 1, &d);
  grace_tensor_release(h);
  return d;
}

/* A sub-program of one float32 [N] input x (and, with extra, a bool 0-d input after it) returning op(x) (with lit). */
static grace_ir *unary(grace_vm *vm, const char *name, grace_op op, double lit, int extra) {
  grace_ir *ir = grace_ir_new(vm, name);
  int64_t n = N;
  grace_value x, b, l, y;
  grace_status st = grace_ir_input(ir, GRACE_FLOAT32, GRACE_CUDA, 1, &n, &x);
  if (st == GRACE_OK && extra) st = grace_ir_input(ir, GRACE_BOOL, GRACE_CUDA, 0, NULL, &b);
  if (st == GRACE_OK) st = grace_ir_literal(ir, lit, 0, &l);
  if (st == GRACE_OK) st = grace_ir_op(ir, op, 2, (grace_value[]){x, l}, NULL, 1, &y);
  if (st == GRACE_OK && op == GRACE_OP_ADD) {   /* exp(x) + lit: a fused kernel */
    grace_value e, z;
    st = grace_ir_op(ir, GRACE_OP_EXP, 1, &y, NULL, 1, &e);
    if (st == GRACE_OK) st = grace_ir_op(ir, GRACE_OP_ADD, 2, (grace_value[]){e, l}, NULL, 1, &z);
    y = z;
  }
  if (st == GRACE_OK) st = grace_ir_output(ir, y);
  if (st != GRACE_OK) { printf("# building %s: %s\n", name, grace_last_error(vm)); grace_ir_free(ir); return NULL; }
  return ir;
}

/* r = cond(p, x): then exp(x + 1) + 1, else x * 2; inputs x (float32 [N]) and p (bool 0-d), both on the device. */
static grace_ir *cond_prog(grace_vm *vm) {
  grace_ir *ir = grace_ir_new(vm, "cond_prog"), *t = unary(vm, "then", GRACE_OP_ADD, 1, 0),
           *e = unary(vm, "else", GRACE_OP_MUL, 2, 0);
  int64_t n = N;
  grace_value x, p, r;
  grace_status st = t && e ? GRACE_OK : GRACE_EARG;
  if (st == GRACE_OK) st = grace_ir_input(ir, GRACE_FLOAT32, GRACE_CUDA, 1, &n, &x);
  if (st == GRACE_OK) st = grace_ir_input(ir, GRACE_BOOL, GRACE_CUDA, 0, NULL, &p);
  if (st == GRACE_OK) st = grace_ir_cond(ir, p, 1, &x, t, e, 1, &r);
  else { grace_ir_free(t); grace_ir_free(e); }
  if (st == GRACE_OK) st = grace_ir_output(ir, r);
  if (st != GRACE_OK) { printf("# building cond_prog: %s\n", grace_last_error(vm)); grace_ir_free(ir); return NULL; }
  return ir;
}

/* A while body over (x, b) holding a cond on b: then x * 3, else exp(x + 1) + 1. */
static grace_ir *cond_body(grace_vm *vm) {
  grace_ir *ir = grace_ir_new(vm, "body"), *t = unary(vm, "then", GRACE_OP_MUL, 3, 0), *e = unary(vm, "else", GRACE_OP_ADD, 1, 0);
  int64_t n = N;
  grace_value x, b, r;
  grace_status st = t && e ? GRACE_OK : GRACE_EARG;
  if (st == GRACE_OK) st = grace_ir_input(ir, GRACE_FLOAT32, GRACE_CUDA, 1, &n, &x);
  if (st == GRACE_OK) st = grace_ir_input(ir, GRACE_BOOL, GRACE_CUDA, 0, NULL, &b);
  if (st == GRACE_OK) st = grace_ir_cond(ir, b, 1, &x, t, e, 1, &r);
  else { grace_ir_free(t); grace_ir_free(e); }
  if (st == GRACE_OK) st = grace_ir_output(ir, r);
  if (st != GRACE_OK) { printf("# building the body: %s\n", grace_last_error(vm)); grace_ir_free(ir); return NULL; }
  return ir;
}

/* x = while go: x * 3, with go an invariant bool 0-d input (the cond sub-program returns it as it is: a loop whose
 * length the device decides, here from a value the test wrote, so the host branch of the first calls ends). */
static grace_ir *while_prog(grace_vm *vm, int nested, int64_t max_iters) {
  grace_ir *ir = grace_ir_new(vm, "while_prog"), *body = nested ? cond_body(vm) : unary(vm, "body", GRACE_OP_MUL, 3, 1),
           *cond = grace_ir_new(vm, "go");
  int64_t n = N;
  grace_value x, go, cx, cgo, r;
  grace_status st = body ? GRACE_OK : GRACE_EARG;
  if (st == GRACE_OK) st = grace_ir_input(cond, GRACE_FLOAT32, GRACE_CUDA, 1, &n, &cx);
  if (st == GRACE_OK) st = grace_ir_input(cond, GRACE_BOOL, GRACE_CUDA, 0, NULL, &cgo);
  if (st == GRACE_OK) st = grace_ir_output(cond, cgo);
  if (st == GRACE_OK) st = grace_ir_input(ir, GRACE_FLOAT32, GRACE_CUDA, 1, &n, &x);
  if (st == GRACE_OK) st = grace_ir_input(ir, GRACE_BOOL, GRACE_CUDA, 0, NULL, &go);
  if (st == GRACE_OK) st = grace_ir_while(ir, 1, &x, 1, &go, cond, body, max_iters, &r);
  else { grace_ir_free(body); grace_ir_free(cond); }
  if (st == GRACE_OK) st = grace_ir_output(ir, r);
  if (st != GRACE_OK) { printf("# building while_prog: %s\n", grace_last_error(vm)); grace_ir_free(ir); return NULL; }
  return ir;
}

static uint64_t host_syncs(grace_vm *vm) {
  grace_device_stats s;
  grace_device_stats_get(vm, &s);
  return s.syncs;
}

/* Runs ir `calls` times on (x, flag), the flag flipping every call when flips is 1 (else always false); when flips
 * is 2, on (x, p, q), p flipping every call and q every second call. x NULL: N halves, made here. Returns the failed
 * calls; *syncs and *launches: host synchronisations and graph launches from call `from` on. */
static int run_calls(grace_vm *vm, grace_ir *ir, grace_tensor *x, int calls, int flips, int from, long *syncs,
                     long *launches) {
  int bad = 0;
  grace_tensor *own = x ? NULL : dev_value(vm, GRACE_FLOAT32, N, 0.5);
  grace_tensor *flag[2] = {dev_value(vm, GRACE_BOOL, 0, 0), dev_value(vm, GRACE_BOOL, 0, 1)};
  uint64_t s0 = 0;
  long g0 = 0, ss0 = 0;
  for (int i = 1; i <= calls; i++) {
    if (i == from) { s0 = host_syncs(vm); ss0 = stream_syncs; g0 = graph_launches; }
    grace_tensor *out = NULL;
    grace_tensor *in[3] = {x ? x : own, flag[flips ? i % 2 : 0], flag[i / 2 % 2]};
    if (grace_ir_run(ir, flips == 2 ? 3 : 2, in, 1, &out) != GRACE_OK) {
      printf("# call %d: %s\n", i, grace_last_error(vm));
      bad++;
    }
    grace_tensor_release(out);
  }
  *syncs = (long)(host_syncs(vm) - s0);
  if (stream_syncs - ss0 != *syncs) *syncs = -1;   /* the stats and the driver disagree */
  *launches = graph_launches - g0;
  grace_tensor_release(flag[0]);
  grace_tensor_release(flag[1]);
  grace_tensor_release(own);
  return bad;
}

#endif
