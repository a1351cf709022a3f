/* test_op_checks.c: an op's argument checks say the same words however it runs. Each case is an invalid call,
 * made three ways: eager on the CPU (grace_run), recorded into the IR (grace_ir_op, which is what GPU eager runs
 * through) and, where a CUDA device is usable, eager on it. The messages must be equal, and where the case
 * names the expected words they must hold them (a test of which check fires, written from the op's rules).
 * The valid cases (edge cases: empty dims, negative dims, keepdim, dtype attributes) must give one result
 * dtype and shape eagerly, as the IR infers it, and as the IR's program computes it. */
#include <stdio.h>
#include <string.h>
#include "grace.h"
#include "ir/ir.h"
#include "cuda/cuda_api.h"
#include "tap.h"

static grace_vm *vm;
static int have_gpu;

typedef struct arg { grace_dtype dt; int nd; int64_t sizes[4]; } arg;   /* nd < 0: an absent optional input */
#define NONE {F32, -1, {0}}
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
#define I32 GRACE_INT32
#define F64 GRACE_FLOAT64

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
  /* other families: every backend takes these checks from ir_infer (vm_infer_tensors, vm_check_*) or, for views,
   * from base's vm_view_shape, which ir_infer calls. */
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
  /* cat, stack, repeat (infer_cat/stack/repeat, which vm_check_cat/stack/repeat call) */
  {"cat of a 0-d tensor", GRACE_OP_CAT, 2, {{F32, 1, {2}}, {F32, 0, {0}}}, {0}, 1,
   "cat: a 0-d tensor (input 2) cannot be concatenated"},
  {"cat of different ranks", GRACE_OP_CAT, 2, {{F32, 2, {2, 3}}, {F32, 1, {3}}}, {0}, 1,
   "cat: tensors must have the same number of dims: got shapes [2, 3] and [3] (input 2)"},
  {"cat sizes off the cat dim", GRACE_OP_CAT, 2, {{F32, 2, {2, 3}}, {F32, 2, {2, 4}}}, {.ndims = 1, .dims = {0}}, 1,
   "cat: sizes must match except in dim 0: got shapes [2, 3] and [2, 4] (input 2)"},
  {"cat after a skipped [0] input", GRACE_OP_CAT, 3, {{F32, 1, {0}}, {F32, 2, {2, 3}}, {F32, 2, {2, 4}}}, {0}, 1,
   "cat: sizes must match except in dim 0: got shapes [2, 3] and [2, 4] (input 3)"},
  {"cat dim out of range", GRACE_OP_CAT, 2, {{F32, 2, {2, 3}}, {F32, 2, {2, 3}}}, {.ndims = 1, .dims = {2}}, 1,
   "cat: dim 2 out of range"},
  {"cat of [0] inputs, dim 1", GRACE_OP_CAT, 2, {{F32, 1, {0}}, {F32, 1, {0}}}, {.ndims = 1, .dims = {1}}, 1,
   "cat: dim 1 out of range for a 1-d tensor"},
  {"stack of different shapes", GRACE_OP_STACK, 2, {{F32, 2, {2, 3}}, {F32, 2, {3, 2}}}, {0}, 1,
   "stack: expects each tensor to be the same shape, got [2, 3] and [3, 2] (input 2)"},
  {"stack dim out of range", GRACE_OP_STACK, 2, {{F32, 1, {3}}, {F32, 1, {3}}}, {.ndims = 1, .dims = {-3}}, 1,
   "stack: dim -3 out of range for stacking 1-d tensors (expected 0 to 1, or -2 to -1)"},
  {"repeat with too few counts", GRACE_OP_REPEAT, 1, {{F32, 2, {2, 3}}}, {.nshape = 1, .shape = {2}}, 1,
   "repeat: 1 repeat counts given for a tensor of shape [2, 3] (need at least 2)"},
  {"repeat with a negative count", GRACE_OP_REPEAT, 1, {{F32, 1, {3}}}, {.nshape = 2, .shape = {2, -1}}, 1,
   "repeat: repeat counts must be >= 0, got -1 in dim 1"},
  /* views (vm_view_shape in base_view.c, which ir_infer calls) */
  {"expand to fewer dims", GRACE_OP_EXPAND, 1, {{F32, 2, {2, 1}}}, {.nshape = 1, .shape = {3}}, 1,
   "expand: cannot expand shape [2, 1] to [3] (fewer dims)"},
  {"expand a dim that is not 1", GRACE_OP_EXPAND, 1, {{F32, 2, {2, 1}}}, {.nshape = 2, .shape = {3, 4}}, 1,
   "expand: cannot expand shape [2, 1] to [3, 4] (size 2 in dim 0 is not 1)"},
  {"expand -1 in a new dim", GRACE_OP_EXPAND, 1, {{F32, 1, {3}}}, {.nshape = 2, .shape = {-1, 3}}, 1,
   "expand: -1 is not allowed for a new leading dim"},
  {"reshape two -1", GRACE_OP_RESHAPE, 1, {{F32, 2, {2, 3}}}, {.nshape = 2, .shape = {-1, -1}}, 1,
   "reshape: only one dimension can be -1"},
  {"reshape -1 beside a 0", GRACE_OP_VIEW, 1, {{F32, 1, {0}}}, {.nshape = 2, .shape = {0, -1}}, 1,
   "view: shape [0, -1] is invalid for input of shape [0] (0 elements)"},
  {"reshape to too many dims", GRACE_OP_RESHAPE, 1, {{F32, 1, {1}}}, {.nshape = 9}, 1, "reshape: 9 dims requested"},
  {"squeeze dim out of range", GRACE_OP_SQUEEZE, 1, {{F32, 2, {1, 3}}}, {.ndims = 1, .dims = {2}}, 1, "squeeze: dim 2"},
  {"unsqueeze dim out of range", GRACE_OP_UNSQUEEZE, 1, {{F32, 2, {1, 3}}}, {.ndims = 1, .dims = {-4}}, 1,
   "unsqueeze: dim -4 out of range for a 3-d tensor"},
  {"select of a 0-d tensor", GRACE_OP_SELECT, 1, {{F32, 0, {0}}}, {.ndims = 1}, 1, "select: not possible on a 0-d tensor"},
  {"permute repeated", GRACE_OP_PERMUTE, 1, {{F32, 2, {2, 3}}}, {.ndims = 2, .dims = {1, -1}}, 1, "permute: dim 1 repeated"},
  /* creation (vm_create_shape, which ir_infer calls) */
  {"full of a negative size", GRACE_OP_FULL, 0, {{F32, 0, {0}}}, {.nshape = 2, .shape = {2, -3}}, 1,
   "full: negative size -3 in shape [2, -3]"},
  {"arange of step 0", GRACE_OP_ARANGE, 0, {{F32, 0, {0}}}, {.a = 0, .b = 5, .c = 0}, 1,
   "arange: step must be nonzero and the bounds finite"},
  {"linspace of -1 steps", GRACE_OP_LINSPACE, 0, {{F32, 0, {0}}}, {.a = 0, .b = 1, .i0 = -1}, 1,
   "linspace: number of steps must be non-negative, got -1"},
  {"eye of three sizes", GRACE_OP_EYE, 0, {{F32, 0, {0}}}, {.nshape = 3, .shape = {2, 2, 2}}, 1, "eye: expected n or n, m"},
  {"randn of int64", GRACE_OP_RANDN, 0, {{F32, 0, {0}}}, {.nshape = 1, .shape = {2}, .has_dtype = 1, .dtype = I64}, 1,
   "randn: dtype int64 is not a float type"},
  {"randint of an empty range", GRACE_OP_RANDINT, 0, {{F32, 0, {0}}}, {.nshape = 1, .shape = {2}, .i0 = 3, .i1 = 3}, 1,
   "randint: empty range [3, 3)"},
  /* checks the CPU and device ops take from ir_infer (vm_check_types, vm_infer_tensors) */
  {"triu of a 1-d tensor", GRACE_OP_TRIU, 1, {{F32, 1, {3}}}, {0}, 1, "triu: input must have at least 2 dims, got shape [3]"},
  {"embedding of a 1-d weight", GRACE_OP_EMBEDDING, 2, {{I64, 1, {2}}, {F32, 1, {4}}}, {0}, 1,
   "embedding: weight must be 2-d [rows, dim], got shape [4]"},
  {"scatter of another dtype", GRACE_OP_SCATTER, 3, {{F32, 2, {2, 3}}, {I64, 2, {2, 3}}, {F64, 2, {2, 3}}}, {0}, 1,
   "scatter: expected src to have the input's dtype float32, got float64"},
  {"index_select of a 2-d index", GRACE_OP_INDEX_SELECT, 2, {{F32, 2, {2, 3}}, {I64, 2, {1, 2}}}, {0}, 1,
   "index_select: index must be 1-d or 0-d, got shape [1, 2]"},
  {"index_select of a 0-d tensor, two indices", GRACE_OP_INDEX_SELECT, 2, {{F32, 0, {0}}, {I64, 1, {2}}}, {0}, 1,
   "index_select: indexing a 0-d tensor takes exactly one index, got 2"},
  {"cast to an invalid dtype", GRACE_OP_CAST, 1, {{F32, 1, {3}}}, {.dtype = (grace_dtype)42}, 1, "cast: invalid dtype 42"},
  {"matmul batch dims", GRACE_OP_MATMUL, 2, {{F32, 3, {2, 2, 3}}, {F32, 3, {3, 3, 2}}}, {0}, 1,
   "matmul: batch dims of shapes [2, 2, 3] and [3, 3, 2] do not broadcast"},
  /* reductions (infer_reduce, which cpu_reduce.c calls) */
  {"sum of a 0-d tensor over dim 0 twice", GRACE_OP_SUM, 1, {{F32, 0, {0}}}, {.ndims = 2, .dims = {0, -1}}, 1,
   "sum: dim 0 given more than once"},
  {"sum dim out of range", GRACE_OP_SUM, 1, {{F32, 2, {2, 3}}}, {.ndims = 1, .dims = {-3}}, 1, "sum: dim -3 out of range"},
  {"sum invalid dtype", GRACE_OP_SUM, 1, {{F32, 1, {3}}}, {.has_dtype = 1, .dtype = (grace_dtype)99}, 1,
   "sum: invalid dtype 99"},
  {"mean to an integer dtype", GRACE_OP_MEAN, 1, {{F32, 1, {3}}}, {.has_dtype = 1, .dtype = I64}, 1,
   "mean: dtype int64 is not a float type"},
  {"var of int64", GRACE_OP_VAR, 1, {{I64, 1, {3}}}, {0}, 1, "var: input dtype int64 is not a float type"},
  {"max with indices and no dim", GRACE_OP_MAX, 1, {{F32, 2, {2, 3}}}, {0}, 2, "max: indices need a dim"},
  {"min with indices and two dims", GRACE_OP_MIN, 1, {{F32, 2, {2, 3}}}, {.ndims = 2, .dims = {0, 1}}, 2,
   "min: indices need exactly one dim, got 2"},
  {"max keepdim over an empty dim", GRACE_OP_MAX, 1, {{F32, 2, {0, 3}}}, {.ndims = 1, .dims = {0}, .keepdim = 1}, 1,
   "max: cannot reduce over a zero-size dim (input shape [0, 3])"},
  {"argmin of an empty tensor", GRACE_OP_ARGMIN, 1, {{F32, 1, {0}}}, {0}, 1, "argmin: cannot reduce over a zero-size dim"},
  /* scans (infer_scan, which cpu_reduce_scan.c and the device's op_scan call) */
  {"cumsum two dims", GRACE_OP_CUMSUM, 1, {{F32, 2, {2, 3}}}, {.ndims = 2, .dims = {0, 1}}, 1, "cumsum: takes one dim, got 2"},
  {"cumsum dim out of range", GRACE_OP_CUMSUM, 1, {{F32, 2, {2, 3}}}, {.ndims = 1, .dims = {2}}, 1, "cumsum: dim 2 out of range"},
  {"softmax to an integer dtype", GRACE_OP_SOFTMAX, 1, {{F32, 1, {3}}}, {.has_dtype = 1, .dtype = I32}, 1,
   "softmax: dtype int32 is not a float type"},
  {"log_softmax of int64", GRACE_OP_LOG_SOFTMAX, 1, {{I64, 1, {3}}}, {0}, 1, "log_softmax: input dtype int64 is not a float"},
  {"topk negative k", GRACE_OP_TOPK, 1, {{F32, 2, {2, 3}}}, {.i0 = -1}, 2, "topk: k (-1) is out of range for dim 1 of size 3"},
  {"sort two dims", GRACE_OP_SORT, 1, {{F32, 2, {2, 3}}}, {.ndims = 2, .dims = {0, 1}}, 2, "sort: takes one dim, got 2"},
  /* norms (infer_norm, which cpu_reduce_norm.c and the device's op_norm call) */
  {"layer_norm int64 weight", GRACE_OP_LAYER_NORM, 3, {{F32, 2, {2, 3}}, {I64, 1, {3}}, {F32, 1, {3}}}, {0}, 1,
   "layer_norm: weight dtype int64 is not a float type"},
  {"layer_norm bias mismatch", GRACE_OP_LAYER_NORM, 3, {{F32, 2, {2, 3}}, {F32, 1, {3}}, {F32, 2, {1, 3}}}, {0}, 1,
   "layer_norm: bias of shape [1, 3] does not match"},
  {"rms_norm of int32", GRACE_OP_RMS_NORM, 2, {{I32, 2, {2, 3}}, {F32, 1, {3}}}, {0}, 1,
   "rms_norm: input dtype int32 is not a float type"},
};

/* Valid calls: edge cases whose result types eager execution and the IR must agree on. */
typedef struct type_case {
  const char *what;
  grace_op op;
  int nin;
  arg in[3];
  grace_attrs attrs;
  int nout;
  const char *want;   /* the result types, as types_of writes them */
} type_case;

static const type_case valid[] = {
  {"sum of int32 gives int64", GRACE_OP_SUM, 1, {{I32, 2, {2, 3}}}, {.ndims = 1, .dims = {-1}}, 1, "int64[2]"},
  {"sum keepdim over an empty dim", GRACE_OP_SUM, 1, {{F32, 3, {2, 0, 4}}}, {.ndims = 1, .dims = {1}, .keepdim = 1}, 1,
   "float32[2,1,4]"},
  {"sum to float64", GRACE_OP_SUM, 1, {{I64, 1, {3}}}, {.has_dtype = 1, .dtype = F64}, 1, "float64[]"},
  {"mean of int64 to float64", GRACE_OP_MEAN, 1, {{I64, 2, {2, 3}}}, {.ndims = 1, .dims = {0}, .has_dtype = 1, .dtype = F64},
   1, "float64[3]"},
  {"mean of a 0-d tensor over dim -1", GRACE_OP_MEAN, 1, {{F32, 0, {0}}}, {.ndims = 1, .dims = {-1}}, 1, "float32[]"},
  {"max with indices, keepdim", GRACE_OP_MAX, 1, {{F32, 3, {2, 3, 4}}}, {.ndims = 1, .dims = {-2}, .keepdim = 1}, 2,
   "float32[2,1,4] int64[2,1,4]"},
  {"max over a kept dim of an empty tensor", GRACE_OP_MAX, 1, {{F32, 2, {0, 3}}}, {.ndims = 1, .dims = {1}}, 1, "float32[0]"},
  {"argmax of everything ignores keepdim", GRACE_OP_ARGMAX, 1, {{F32, 2, {2, 3}}}, {.keepdim = 1}, 1, "int64[]"},
  {"var over two dims", GRACE_OP_VAR, 1, {{F64, 3, {2, 3, 4}}}, {.ndims = 2, .dims = {0, 2}, .flag = 1}, 1, "float64[3]"},
  {"logsumexp of int64", GRACE_OP_LOGSUMEXP, 1, {{I64, 2, {2, 3}}}, {.ndims = 1, .dims = {1}}, 1, "float32[2]"},
  {"all of float32", GRACE_OP_ALL, 1, {{F32, 2, {2, 3}}}, {.ndims = 1, .dims = {0}}, 1, "bool[3]"},
  {"cumsum of bool", GRACE_OP_CUMSUM, 1, {{B8, 2, {2, 3}}}, {.ndims = 1, .dims = {0}}, 1, "int64[2,3]"},
  {"cumsum to float64", GRACE_OP_CUMSUM, 1, {{I32, 1, {3}}}, {.has_dtype = 1, .dtype = F64}, 1, "float64[3]"},
  {"softmax of int64 to float32", GRACE_OP_SOFTMAX, 1, {{I64, 2, {2, 3}}}, {.has_dtype = 1, .dtype = F32}, 1, "float32[2,3]"},
  {"log_softmax to float64 over dim 0", GRACE_OP_LOG_SOFTMAX, 1, {{F32, 2, {2, 3}}},
   {.ndims = 1, .dims = {0}, .has_dtype = 1, .dtype = F64}, 1, "float64[2,3]"},
  {"softmax of an empty row", GRACE_OP_SOFTMAX, 1, {{F32, 2, {2, 0}}}, {0}, 1, "float32[2,0]"},
  {"topk of a 0-d tensor, k = 0", GRACE_OP_TOPK, 1, {{F32, 0, {0}}}, {.i0 = 0}, 2, "float32[0] int64[0]"},
  {"topk over dim 0", GRACE_OP_TOPK, 1, {{I32, 2, {4, 3}}}, {.ndims = 1, .dims = {0}, .i0 = 2}, 2, "int32[2,3] int64[2,3]"},
  {"sort of an empty tensor", GRACE_OP_SORT, 1, {{F32, 2, {0, 3}}}, {0}, 2, "float32[0,3] int64[0,3]"},
  {"cat skips [0] inputs", GRACE_OP_CAT, 3, {{F32, 1, {0}}, {F32, 2, {2, 3}}, {F32, 2, {4, 3}}}, {0}, 1, "float32[6,3]"},
  {"cat: a skipped input still promotes", GRACE_OP_CAT, 2, {{F64, 1, {0}}, {F32, 2, {2, 3}}}, {.ndims = 1, .dims = {-1}}, 1,
   "float64[2,3]"},
  {"cat of [0] inputs only", GRACE_OP_CAT, 2, {{I32, 1, {0}}, {I64, 1, {0}}}, {.ndims = 1, .dims = {-1}}, 1, "int64[0]"},
  {"cat over a negative dim", GRACE_OP_CAT, 2, {{F32, 3, {2, 0, 3}}, {I32, 3, {2, 0, 1}}}, {.ndims = 1, .dims = {-1}}, 1,
   "float32[2,0,4]"},
  {"stack at the end", GRACE_OP_STACK, 3, {{F32, 2, {2, 3}}, {F32, 2, {2, 3}}, {I64, 2, {2, 3}}}, {.ndims = 1, .dims = {-1}},
   1, "float32[2,3,3]"},
  {"stack of 0-d tensors", GRACE_OP_STACK, 2, {{I32, 0, {0}}, {B8, 0, {0}}}, {0}, 1, "int32[2]"},
  {"repeat adds leading dims", GRACE_OP_REPEAT, 1, {{F32, 2, {2, 3}}}, {.nshape = 3, .shape = {2, 0, 2}}, 1, "float32[2,0,6]"},
  {"expand with -1 and a new dim", GRACE_OP_EXPAND, 1, {{F32, 2, {1, 3}}}, {.nshape = 3, .shape = {2, 4, -1}}, 1,
   "float32[2,4,3]"},
  {"expand a dim of 1 to 0", GRACE_OP_EXPAND, 1, {{F32, 2, {1, 3}}}, {.nshape = 2, .shape = {0, 3}}, 1, "float32[0,3]"},
  {"reshape with -1 of an empty tensor", GRACE_OP_RESHAPE, 1, {{F32, 2, {0, 4}}}, {.nshape = 3, .shape = {2, -1, 2}}, 1,
   "float32[2,0,2]"},
  {"view of a 0-d tensor as [1, 1]", GRACE_OP_VIEW, 1, {{I64, 0, {0}}}, {.nshape = 2, .shape = {1, -1}}, 1, "int64[1,1]"},
  {"transpose of negative dims", GRACE_OP_TRANSPOSE, 1, {{F32, 3, {2, 3, 4}}}, {.ndims = 2, .dims = {-1, 0}}, 1,
   "float32[4,3,2]"},
  {"squeeze keeps dims that are not 1", GRACE_OP_SQUEEZE, 1, {{F32, 3, {1, 3, 1}}}, {.ndims = 2, .dims = {1, -1}}, 1,
   "float32[1,3]"},
  {"unsqueeze at the end", GRACE_OP_UNSQUEEZE, 1, {{F32, 2, {2, 3}}}, {.ndims = 1, .dims = {-1}}, 1, "float32[2,3,1]"},
  {"narrow to nothing at the end", GRACE_OP_NARROW, 1, {{F32, 2, {2, 3}}}, {.ndims = 1, .dims = {1}, .i0 = 3, .i1 = 0}, 1,
   "float32[2,0]"},
  {"select with a negative index", GRACE_OP_SELECT, 1, {{F32, 2, {2, 3}}}, {.ndims = 1, .dims = {-1}, .i0 = -1}, 1,
   "float32[2]"},
  {"arange of int64", GRACE_OP_ARANGE, 0, {{F32, 0, {0}}},
   {.a = 0, .b = 7, .c = 2, .ia = 0, .ib = 7, .ic = 2, .exact = 7, .has_dtype = 1, .dtype = I64}, 1, "int64[4]"},
  {"arange downwards", GRACE_OP_ARANGE, 0, {{F32, 0, {0}}}, {.a = 1, .b = -1, .c = -0.5}, 1, "float32[4]"},
  {"eye n by m", GRACE_OP_EYE, 0, {{F32, 0, {0}}}, {.nshape = 2, .shape = {2, 0}}, 1, "float32[2,0]"},
  {"linspace of 0 steps", GRACE_OP_LINSPACE, 0, {{F32, 0, {0}}}, {.a = 0, .b = 1, .i0 = 0, .has_dtype = 1, .dtype = F64}, 1,
   "float64[0]"},
  {"randint", GRACE_OP_RANDINT, 0, {{F32, 0, {0}}}, {.nshape = 2, .shape = {2, 3}, .i0 = 0, .i1 = 5}, 1, "int64[2,3]"},
  {"matmul of a vector and a batch", GRACE_OP_MATMUL, 2, {{F32, 1, {3}}, {F32, 3, {2, 3, 4}}}, {0}, 1, "float32[2,4]"},
  {"scatter of a 0-d src of another dtype", GRACE_OP_SCATTER, 3, {{F32, 2, {2, 3}}, {I64, 2, {1, 3}}, {I64, 0, {0}}}, {0}, 1,
   "float32[2,3]"},
  {"embedding of 0-d ids", GRACE_OP_EMBEDDING, 2, {{I32, 0, {0}}, {F64, 2, {4, 3}}}, {0}, 1, "float64[3]"},
  {"layer_norm without weight", GRACE_OP_LAYER_NORM, 3, {{F64, 2, {0, 3}}, NONE, {F32, 1, {3}}}, {0}, 1, "float64[0,3]"},
  {"rms_norm with a float64 weight", GRACE_OP_RMS_NORM, 2, {{F32, 2, {2, 3}}, {F64, 1, {3}}}, {0}, 1, "float32[2,3]"},
};

static void type_str(grace_dtype dt, int nd, const int64_t *sizes, char *buf, size_t n) {
  size_t k = strlen(buf);
  k += (size_t)snprintf(buf + k, n - k, "%s%s[", k ? " " : "", grace_dtype_name(dt));
  for (int d = 0; d < nd && k < n; d++) k += (size_t)snprintf(buf + k, n - k, d ? ",%lld" : "%lld", (long long)sizes[d]);
  if (k < n) snprintf(buf + k, n - k, "]");
}

/* The result types of c eagerly on dev ("" on an error, its message in err). */
static void eager_types(const type_case *c, grace_device dev, char *buf, size_t n, char *err, size_t en) {
  grace_tensor *in[3] = {0}, *out[2] = {0};
  buf[0] = err[0] = 0;
  for (int i = 0; i < c->nin; i++)
    if (c->in[i].nd >= 0 && !(in[i] = make(&c->in[i], dev))) snprintf(err, en, "(inputs not made)");
  if (!err[0] && grace_run(vm, c->op, c->nin, in, &c->attrs, c->nout, out) != GRACE_OK)
    snprintf(err, en, "%s", grace_last_error(vm));
  for (int i = 0; i < c->nout && !err[0]; i++)
    type_str(grace_tensor_dtype(out[i]), grace_tensor_ndim(out[i]), grace_tensor_sizes(out[i]), buf, n);
  for (int i = 0; i < c->nout; i++) grace_tensor_release(out[i]);
  for (int i = 0; i < c->nin; i++) grace_tensor_release(in[i]);
}

/* The result types of c as the IR infers them (inf) and as its program computes them on the CPU (run). */
static void traced_types(const type_case *c, char *inf, char *run, size_t n, char *err, size_t en) {
  grace_ir *ir = grace_ir_new(vm, "types");
  grace_value v[3], r[2];
  grace_tensor *in[3] = {0}, *out[2] = {0};
  inf[0] = run[0] = err[0] = 0;
  if (!ir) { snprintf(err, en, "(program not made)"); return; }
  for (int i = 0; i < c->nin && !err[0]; i++)
    if (c->in[i].nd < 0) v[i] = -1;
    else if (grace_ir_input(ir, c->in[i].dt, GRACE_CPU, c->in[i].nd, c->in[i].sizes, &v[i]) != GRACE_OK ||
             !(in[i] = make(&c->in[i], GRACE_CPU)))
      snprintf(err, en, "(inputs not made)");
  if (!err[0] && grace_ir_op(ir, c->op, c->nin, v, &c->attrs, c->nout, r) != GRACE_OK)
    snprintf(err, en, "%s", grace_last_error(vm));
  for (int i = 0; i < c->nout && !err[0]; i++) {
    const ir_type *t = &ir->vals[r[i]].type;
    type_str(t->dtype, t->ndim, t->sizes, inf, n);
    if (grace_ir_output(ir, r[i]) != GRACE_OK) snprintf(err, en, "%s", grace_last_error(vm));
  }
  grace_tensor *given[3];   /* the program's inputs: the inputs that are present */
  int ng = 0;
  for (int i = 0; i < c->nin; i++) if (in[i]) given[ng++] = in[i];
  if (!err[0] && grace_ir_run(ir, ng, given, c->nout, out) != GRACE_OK) snprintf(err, en, "%s", grace_last_error(vm));
  for (int i = 0; i < c->nout && !err[0]; i++)
    type_str(grace_tensor_dtype(out[i]), grace_tensor_ndim(out[i]), grace_tensor_sizes(out[i]), run, n);
  for (int i = 0; i < c->nout; i++) grace_tensor_release(out[i]);
  for (int i = 0; i < c->nin; i++) grace_tensor_release(in[i]);
  grace_ir_free(ir);
}

static void check_valid(const type_case *c) {
  char cpu[256], inf[256], run[256], dev[256], e1[256], e2[256];
  eager_types(c, GRACE_CPU, cpu, sizeof cpu, e1, sizeof e1);
  traced_types(c, inf, run, sizeof inf, e2, sizeof e2);
  ok(!e1[0] && !strcmp(cpu, c->want), "%s: CPU eager gives %s", c->what, c->want);
  if (e1[0] || strcmp(cpu, c->want)) printf("#   got \"%s\" %s\n", cpu, e1);
  ok(!e2[0] && !strcmp(inf, c->want) && !strcmp(run, c->want), "%s: the IR infers and computes %s", c->what, c->want);
  if (e2[0] || strcmp(inf, c->want) || strcmp(run, c->want)) printf("#   inferred \"%s\", ran \"%s\" %s\n", inf, run, e2);
  if (!have_gpu) { skip("no CUDA device"); return; }
  eager_types(c, GRACE_CUDA, dev, sizeof dev, e1, sizeof e1);
  ok(!e1[0] && !strcmp(dev, c->want), "%s: CUDA eager gives %s (%s)", c->what, c->want, e1[0] ? e1 : dev);
}

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
  for (size_t i = 0; i < sizeof valid / sizeof *valid; i++) check_valid(&valid[i]);
  grace_vm_free(vm);
  return tap_done();
}
