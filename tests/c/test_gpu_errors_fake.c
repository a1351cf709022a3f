/* test_gpu_errors_fake.c: the device side of grace_run rejects bad arguments exactly as the CPU side does (same
 * status, same message), checked on the fake driver (tests/c/fake_cuda.h) so that it runs without a GPU: shape,
 * rank, dtype and dim errors of the device's own ops (cat, stack, index_select, gather, scatter, repeat,
 * embedding, triu, softmax, cumsum, topk, layer_norm). These checks happen on the host before any kernel, so the
 * fake's do-nothing kernels do not matter; out-of-range index values, found by a kernel, are left to the GPU
 * tests. The two sides' checks are separate code today (gpu/gpu_ops.c and cpu/cpu_shape.c, partly shared through
 * ir/ir_check.c): this is what keeps them saying the same. */
#include "grace.h"
#include "tap.h"
#include "c/fake_cuda.h"
static grace_tensor *mk(grace_vm *vm, grace_device d, grace_dtype dt, int nd, const int64_t *s) {
  grace_tensor *t = NULL;
  grace_tensor_empty(vm, dt, d, nd, s, &t);
  return t;
}
int main(void) {
  grace_config cfg = {0};
  cfg.device = "cpu";
  char err[256];
  grace_vm *vm = grace_vm_new(&cfg, err, sizeof err);
  if (!vm) { printf("not ok 1 - grace_vm_new: %s\n1..1\n", err); return 1; }
  install_fake(vm);
  struct { const char *name; grace_op op; int nin; int nd[3]; int64_t s[3][4]; grace_dtype dt[3]; grace_attrs a; } cases[] = {
    {"cat dims", GRACE_OP_CAT, 2, {2, 2}, {{2, 3}, {2, 4}}, {GRACE_FLOAT32, GRACE_FLOAT32}, {.ndims = 1, .dims = {0}}},
    {"cat rank", GRACE_OP_CAT, 2, {2, 1}, {{2, 3}, {3}}, {GRACE_FLOAT32, GRACE_FLOAT32}, {.ndims = 1, .dims = {0}}},
    {"cat 0-d", GRACE_OP_CAT, 2, {2, 0}, {{2, 3}, {0}}, {GRACE_FLOAT32, GRACE_FLOAT32}, {.ndims = 1, .dims = {0}}},
    {"cat dim", GRACE_OP_CAT, 2, {2, 2}, {{2, 3}, {2, 3}}, {GRACE_FLOAT32, GRACE_FLOAT32}, {.ndims = 1, .dims = {2}}},
    {"cat only empty, dim", GRACE_OP_CAT, 2, {1, 1}, {{0}, {0}}, {GRACE_FLOAT32, GRACE_FLOAT32}, {.ndims = 1, .dims = {3}}},
    {"stack", GRACE_OP_STACK, 2, {2, 2}, {{2, 3}, {2, 4}}, {GRACE_FLOAT32, GRACE_FLOAT32}, {.ndims = 1, .dims = {0}}},
    {"stack rank", GRACE_OP_STACK, 2, {2, 1}, {{2, 3}, {6}}, {GRACE_FLOAT32, GRACE_FLOAT32}, {.ndims = 1, .dims = {0}}},
    {"stack dim", GRACE_OP_STACK, 2, {2, 2}, {{2, 3}, {2, 3}}, {GRACE_FLOAT32, GRACE_FLOAT32}, {.ndims = 1, .dims = {4}}},
    {"stack negative dim", GRACE_OP_STACK, 2, {2, 2}, {{2, 3}, {2, 3}}, {GRACE_FLOAT32, GRACE_FLOAT32}, {.ndims = 1, .dims = {-5}}},
    {"index_select float idx", GRACE_OP_INDEX_SELECT, 2, {2, 1}, {{4, 3}, {2}}, {GRACE_FLOAT32, GRACE_FLOAT32}, {.ndims = 1, .dims = {0}}},
    {"index_select dim", GRACE_OP_INDEX_SELECT, 2, {2, 1}, {{4, 3}, {2}}, {GRACE_FLOAT32, GRACE_INT64}, {.ndims = 1, .dims = {2}}},
    {"index_select 0-d x", GRACE_OP_INDEX_SELECT, 2, {0, 1}, {{0}, {2}}, {GRACE_FLOAT32, GRACE_INT64}, {.ndims = 1, .dims = {0}}},
    {"index_select 2d idx", GRACE_OP_INDEX_SELECT, 2, {2, 2}, {{4, 3}, {2, 2}}, {GRACE_FLOAT32, GRACE_INT64}, {.ndims = 1, .dims = {0}}},
    {"index_copy_ src", GRACE_OP_INDEX_COPY_, 3, {2, 1, 2}, {{4, 3}, {2}, {3, 3}}, {GRACE_FLOAT32, GRACE_INT64, GRACE_FLOAT32}, {.ndims = 1, .dims = {0}}},
    {"index_copy_ 2d idx", GRACE_OP_INDEX_COPY_, 3, {2, 2, 2}, {{4, 3}, {1, 2}, {2, 3}}, {GRACE_FLOAT32, GRACE_INT64, GRACE_FLOAT32}, {.ndims = 1, .dims = {0}}},
    {"gather rank", GRACE_OP_GATHER, 2, {2, 1}, {{4, 3}, {2}}, {GRACE_FLOAT32, GRACE_INT64}, {.ndims = 1, .dims = {0}}},
    {"gather size", GRACE_OP_GATHER, 2, {2, 2}, {{4, 3}, {2, 5}}, {GRACE_FLOAT32, GRACE_INT64}, {.ndims = 1, .dims = {0}}},
    {"scatter src shape", GRACE_OP_SCATTER, 3, {2, 2, 2}, {{4, 3}, {2, 3}, {1, 3}}, {GRACE_FLOAT32, GRACE_INT64, GRACE_FLOAT32}, {.ndims = 1, .dims = {0}}},
    {"repeat fewer", GRACE_OP_REPEAT, 1, {2}, {{4, 3}}, {GRACE_FLOAT32}, {.nshape = 1, .shape = {2}}},
    {"repeat negative", GRACE_OP_REPEAT, 1, {2}, {{4, 3}}, {GRACE_FLOAT32}, {.nshape = 3, .shape = {2, -1, 1}}},
    {"embedding 1d weight", GRACE_OP_EMBEDDING, 2, {1, 1}, {{3}, {10}}, {GRACE_INT64, GRACE_FLOAT32}, {0}},
    {"triu 1d", GRACE_OP_TRIU, 1, {1}, {{4}}, {GRACE_FLOAT32}, {0}},
    {"softmax dim", GRACE_OP_SOFTMAX, 1, {2}, {{4, 3}}, {GRACE_FLOAT32}, {.ndims = 1, .dims = {5}}},
    {"cumsum dim", GRACE_OP_CUMSUM, 1, {2}, {{4, 3}}, {GRACE_FLOAT32}, {.ndims = 1, .dims = {5}}},
    {"topk k", GRACE_OP_TOPK, 1, {2}, {{4, 3}}, {GRACE_FLOAT32}, {.i0 = 9, .ndims = 1, .dims = {1}}},
    {"layer_norm inputs", GRACE_OP_LAYER_NORM, 1, {2}, {{4, 3}}, {GRACE_FLOAT32}, {.nshape = 1, .shape = {5}}},
  };
  for (size_t k = 0; k < sizeof cases / sizeof *cases; k++) {
    char msg[2][600];
    for (int d = 0; d < 2; d++) {
      grace_device dev = d ? GRACE_CUDA : GRACE_CPU;
      grace_tensor *in[3] = {0}, *out[2] = {0};
      for (int i = 0; i < cases[k].nin; i++) in[i] = mk(vm, dev, cases[k].dt[i], cases[k].nd[i], cases[k].s[i]);
      int nout = grace_op_noutputs(cases[k].op) > 0 ? 1 : 0;   /* in-place ops give none */
      grace_status st = grace_run(vm, cases[k].op, cases[k].nin, in, &cases[k].a, nout, out);
      snprintf(msg[d], sizeof msg[d], "%d %s", st, st ? grace_last_error(vm) : "ok");
      for (int i = 0; i < 3; i++) grace_tensor_release(in[i]);
      grace_tensor_release(out[0]);
    }
    if (!ok(!strcmp(msg[0], msg[1]) && strncmp(msg[0], "0 ", 2) && !strstr(msg[0], "requested"), "%s: the device rejects it as the CPU does", cases[k].name))
      printf("#   cpu:  %s\n#   cuda: %s\n", msg[0], msg[1]);
  }
  ok(kernel_launches == 0, "no kernel was launched for a rejected call");
  grace_vm_free(vm);
  return tap_done();
}
