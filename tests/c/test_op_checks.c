/* test_op_checks.c: an op's argument checks say the same words however it runs. Each case is an invalid call,
 * made three ways: eager on the CPU (grace_run), recorded into the IR (grace_ir_op, which is what GPU eager runs
 * through) and, where a CUDA device is usable, eager on it. The messages must be equal, and where the case
 * names the expected words they must hold them (a test of which check fires, written from the op's rules). */
#include <stdio.h>
#include <string.h>
#include "grace.h"
#include "cuda/cuda_api.h"
#include "tap.h"

static grace_vm *vm;
static int have_gpu;

typedef struct arg { grace_dtype dt; int nd; int64_t sizes[4]; } arg;
typedef struct check_case {
  const char *what;
  grace_op op;
  int nin;
  arg in[3];
  grace_attrs attrs;
  int nout;
  const char *want;   /* words the message holds (NULL: only the agreement is checked) */
} check_case;

static grace_tensor *make(const arg *a, grace_device dev) {
  grace_tensor *t = NULL, *d = NULL;
  grace_attrs f = {0};
  f.nshape = a->nd;
  memcpy(f.shape, a->sizes, sizeof a->sizes);
  f.dtype = a->dt;
  f.has_dtype = 1;
  f.device = GRACE_CPU;
  if (grace_run(vm, GRACE_OP_FULL, 0, NULL, &f, 1, &t) != GRACE_OK) return NULL;
  if (dev == GRACE_CPU) return t;
  grace_attrs to = {0};
  to.device = dev;
  grace_status st = grace_run(vm, GRACE_OP_TO_DEVICE, 1, &t, &to, 1, &d);
  grace_tensor_release(t);
  return st == GRACE_OK ? d : NULL;
}

/* The message of running c eagerly on dev ("" when it ran). */
static void eager(const check_case *c, grace_device dev, char *msg, size_t n) {
  grace_tensor *in[3] = {0}, *out[2] = {0};
  snprintf(msg, n, "(inputs not made)");
  for (int i = 0; i < c->nin; i++) if (!(in[i] = make(&c->in[i], dev))) goto done;
  if (grace_run(vm, c->op, c->nin, in, &c->attrs, c->nout, out) != GRACE_OK) snprintf(msg, n, "%s", grace_last_error(vm));
  else snprintf(msg, n, "%s", "");
  for (int i = 0; i < c->nout; i++) grace_tensor_release(out[i]);
done:
  for (int i = 0; i < c->nin; i++) grace_tensor_release(in[i]);
}

/* The message of recording c into a program ("" when it was accepted). */
static void traced(const check_case *c, char *msg, size_t n) {
  grace_ir *ir = grace_ir_new(vm, "checks");
  grace_value v[3], r[2];
  snprintf(msg, n, "(program not made)");
  if (!ir) return;
  for (int i = 0; i < c->nin; i++)
    if (grace_ir_input(ir, c->in[i].dt, GRACE_CPU, c->in[i].nd, c->in[i].sizes, &v[i]) != GRACE_OK) goto done;
  if (grace_ir_op(ir, c->op, c->nin, v, &c->attrs, c->nout, r) != GRACE_OK) snprintf(msg, n, "%s", grace_last_error(vm));
  else snprintf(msg, n, "%s", "");
done:
  grace_ir_free(ir);
}

#define F32 GRACE_FLOAT32
#define B8 GRACE_BOOL
#define I64 GRACE_INT64

static const check_case cases[] = {
  {"clamp without bounds", GRACE_OP_CLAMP, 1, {{F32, 1, {3}}}, {0}, 1, "clamp: at least one of min and max must be given"},
  {"neg of bool", GRACE_OP_NEG, 1, {{B8, 1, {3}}}, {0}, 1, "neg: negation of a bool tensor is not supported"},
  {"sub with bool", GRACE_OP_SUB, 2, {{B8, 1, {3}}, {F32, 1, {3}}}, {0}, 1, "sub: subtraction with a bool tensor"},
  {"add of shapes that do not broadcast", GRACE_OP_ADD, 2, {{F32, 1, {2}}, {F32, 1, {3}}}, {0}, 1, "add:"},
  {"masked_fill with a float mask", GRACE_OP_MASKED_FILL, 3, {{F32, 2, {2, 3}}, {F32, 2, {2, 3}}, {F32, 0, {0}}}, {0}, 1,
   "masked_fill: mask must be bool, got float32"},
  {"masked_fill with a 1-d value", GRACE_OP_MASKED_FILL, 3, {{F32, 2, {2, 3}}, {B8, 2, {2, 3}}, {F32, 1, {1}}}, {0}, 1,
   "masked_fill: value must be a 0-d tensor or a number"},
  {"masked_fill with a mask wider than x", GRACE_OP_MASKED_FILL, 3, {{F32, 2, {2, 3}}, {B8, 3, {2, 2, 3}}, {F32, 0, {0}}},
   {0}, 1, "masked_fill: mask of shape [2, 2, 3] does not broadcast to the input's shape [2, 3]"},
  /* other families: the checks ir_infer and the CPU family both make. Still apart (not listed): cat, stack (the
   * CPU's legacy skip of [0] inputs; vm_check_cat/stack), repeat and expand, whose eager checks are their own. */
  {"mean of int64", GRACE_OP_MEAN, 1, {{I64, 1, {3}}}, {0}, 1, NULL},
  {"softmax of int64", GRACE_OP_SOFTMAX, 1, {{I64, 1, {3}}}, {0}, 1, NULL},
  {"layer_norm of int64", GRACE_OP_LAYER_NORM, 3, {{I64, 2, {2, 3}}, {I64, 1, {3}}, {I64, 1, {3}}}, {0}, 1, NULL},
  {"layer_norm weight mismatch", GRACE_OP_LAYER_NORM, 3, {{F32, 2, {2, 3}}, {F32, 1, {4}}, {F32, 1, {3}}}, {0}, 1, NULL},
  {"rms_norm of 0-d", GRACE_OP_RMS_NORM, 2, {{F32, 0, {0}}, {F32, 1, {1}}}, {0}, 1, NULL},
  {"matmul dtypes", GRACE_OP_MATMUL, 2, {{F32, 2, {2, 3}}, {I64, 2, {3, 2}}}, {0}, 1, NULL},
  {"matmul inner dims", GRACE_OP_MATMUL, 2, {{F32, 2, {2, 3}}, {F32, 2, {4, 2}}}, {0}, 1, NULL},
  {"matmul 0-d", GRACE_OP_MATMUL, 2, {{F32, 0, {0}}, {F32, 2, {4, 2}}}, {0}, 1, NULL},
  {"index_select float index", GRACE_OP_INDEX_SELECT, 2, {{F32, 2, {2, 3}}, {F32, 1, {2}}}, {0}, 1, NULL},
  {"gather float index", GRACE_OP_GATHER, 2, {{F32, 2, {2, 3}}, {F32, 2, {2, 3}}}, {0}, 1, NULL},
  {"gather index rank", GRACE_OP_GATHER, 2, {{F32, 2, {2, 3}}, {I64, 1, {2}}}, {0}, 1, NULL},
  {"embedding float ids", GRACE_OP_EMBEDDING, 2, {{F32, 1, {2}}, {F32, 2, {4, 3}}}, {0}, 1, NULL},
  {"reshape invalid", GRACE_OP_RESHAPE, 1, {{F32, 2, {2, 3}}}, {.nshape = 1, .shape = {5}}, 1, NULL},
  {"transpose dim", GRACE_OP_TRANSPOSE, 1, {{F32, 2, {2, 3}}}, {.ndims = 2, .dims = {0, 5}}, 1, NULL},
  {"sum dim twice", GRACE_OP_SUM, 1, {{F32, 2, {2, 3}}}, {.ndims = 2, .dims = {0, 0}}, 1, NULL},
  {"max empty dim", GRACE_OP_MAX, 1, {{F32, 2, {0, 3}}}, {.ndims = 1, .dims = {0}}, 2, NULL},
  {"argmax two dims", GRACE_OP_ARGMAX, 1, {{F32, 2, {2, 3}}}, {.ndims = 2, .dims = {0, 1}}, 1, NULL},
  {"topk too big", GRACE_OP_TOPK, 1, {{F32, 1, {3}}}, {.i0 = 5}, 2, NULL},
  {"narrow out of range", GRACE_OP_NARROW, 1, {{F32, 1, {3}}}, {.ndims = 1, .i0 = 2, .i1 = 5}, 1, NULL},
  {"select out of range", GRACE_OP_SELECT, 1, {{F32, 1, {3}}}, {.ndims = 1, .i0 = 7}, 1, NULL},
  {"permute", GRACE_OP_PERMUTE, 1, {{F32, 2, {2, 3}}}, {.ndims = 1, .dims = {0}}, 1, NULL},
  {"arange", GRACE_OP_ARANGE, 0, {{F32, 0, {0}}}, {.a = 0, .b = 5, .c = -1}, 1, NULL},
};

int main(void) {
  char err[256];
  vm = grace_vm_new(NULL, err, sizeof err);
  if (!vm) { printf("Bail out! %s\n", err); return 1; }
  have_gpu = cuda_usable(vm);
  if (!have_gpu) printf("# no CUDA device (%s): the device's messages are not checked\n", cuda_why(vm));
  for (size_t i = 0; i < sizeof cases / sizeof *cases; i++) {
    const check_case *c = &cases[i];
    char cpu[512], ir[512], dev[512];
    eager(c, GRACE_CPU, cpu, sizeof cpu);
    traced(c, ir, sizeof ir);
    ok(cpu[0] && !strcmp(cpu, ir), "%s: CPU eager and the IR say the same: \"%s\"", c->what, cpu);
    if (strcmp(cpu, ir)) printf("#   CPU: %s\n#   IR:  %s\n", cpu, ir);
    if (c->want) ok(strstr(cpu, c->want) != NULL, "%s: the message holds \"%s\"", c->what, c->want);
    if (!have_gpu) { skip("no CUDA device"); continue; }
    eager(c, GRACE_CUDA, dev, sizeof dev);
    ok(!strcmp(cpu, dev), "%s: CUDA eager says the same: \"%s\"", c->what, dev);
  }
  grace_vm_free(vm);
  return tap_done();
}
