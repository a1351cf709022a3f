/* grace_ops.h: the one table of grace's tensor ops. The op enum, the names, the verifier rules and the
 * kernels of every backend are derived from GRACE_OPS; grep an op's name to find all of its parts. */
#ifndef GRACE_OPS_H
#define GRACE_OPS_H

/* Kinds of op (what passes and backends may assume about them). */
#define GRACE_OPKINDS(_) \
  _(UNARY)    /* pointwise, 1 input */ \
  _(BINARY)   /* pointwise, 2 inputs, NumPy broadcasting, type promotion */ \
  _(COMPARE)  /* pointwise, 2 inputs, bool result */ \
  _(TERNARY)  /* pointwise, 3 inputs (where, masked_fill) */ \
  _(REDUCE)   /* reduction over attrs.dims */ \
  _(SCAN)     /* scans and row ops over one dim (cumsum, softmax, sort) */ \
  _(MATMUL)   /* matrix products */ \
  _(VIEW)     /* no data movement: a new tensor sharing storage */ \
  _(MOVE)     /* data movement: copies, gathers, concatenation */ \
  _(NORM)     /* normalisations over the last dim */ \
  _(CREATE)   /* no tensor input: filled, ranges, random */ \
  _(INPLACE)  /* writes input 1 in place, bumps its version */

/* _(NAME, lua name, kind, inputs (-1: variadic), outputs) */
#define GRACE_OPS(_) \
  /* pointwise unary */ \
  _(NEG,         "neg",         UNARY, 1, 1) \
  _(ABS,         "abs",         UNARY, 1, 1) \
  _(EXP,         "exp",         UNARY, 1, 1) \
  _(LOG,         "log",         UNARY, 1, 1) \
  _(LOG1P,       "log1p",       UNARY, 1, 1) \
  _(SQRT,        "sqrt",        UNARY, 1, 1) \
  _(RSQRT,       "rsqrt",       UNARY, 1, 1) \
  _(SIN,         "sin",         UNARY, 1, 1) \
  _(COS,         "cos",         UNARY, 1, 1) \
  _(TAN,         "tan",         UNARY, 1, 1) \
  _(TANH,        "tanh",        UNARY, 1, 1) \
  _(SIGMOID,     "sigmoid",     UNARY, 1, 1) \
  _(RELU,        "relu",        UNARY, 1, 1) \
  _(GELU,        "gelu",        UNARY, 1, 1) /* attrs.flag: tanh approximation */ \
  _(SILU,        "silu",        UNARY, 1, 1) \
  _(ERF,         "erf",         UNARY, 1, 1) \
  _(FLOOR,       "floor",       UNARY, 1, 1) \
  _(CEIL,        "ceil",        UNARY, 1, 1) \
  _(ROUND,       "round",       UNARY, 1, 1) /* half to even, as PyTorch */ \
  _(SIGN,        "sign",        UNARY, 1, 1) \
  _(LOGICAL_NOT, "logical_not", UNARY, 1, 1) \
  _(CLAMP,       "clamp",       UNARY, 1, 1) /* attrs.a/has_a: min, attrs.b/has_b: max */ \
  _(CAST,        "cast",        UNARY, 1, 1) /* attrs.dtype */ \
  /* pointwise binary */ \
  _(ADD,         "add",         BINARY, 2, 1) \
  _(SUB,         "sub",         BINARY, 2, 1) \
  _(MUL,         "mul",         BINARY, 2, 1) \
  _(DIV,         "div",         BINARY, 2, 1) /* true division: integers give float32 */ \
  _(REM,         "remainder",   BINARY, 2, 1) /* sign of the divisor, as Lua's % */ \
  _(POW,         "pow",         BINARY, 2, 1) \
  _(MAXIMUM,     "maximum",     BINARY, 2, 1) \
  _(MINIMUM,     "minimum",     BINARY, 2, 1) \
  _(LOGICAL_AND, "logical_and", COMPARE, 2, 1) \
  _(LOGICAL_OR,  "logical_or",  COMPARE, 2, 1) \
  _(EQ,          "eq",          COMPARE, 2, 1) \
  _(NE,          "ne",          COMPARE, 2, 1) \
  _(LT,          "lt",          COMPARE, 2, 1) \
  _(LE,          "le",          COMPARE, 2, 1) \
  _(GT,          "gt",          COMPARE, 2, 1) \
  _(GE,          "ge",          COMPARE, 2, 1) \
  /* pointwise ternary */ \
  _(WHERE,       "where",       TERNARY, 3, 1) /* cond, a, b */ \
  _(MASKED_FILL, "masked_fill", TERNARY, 3, 1) /* x, mask, value (0-d); result has x's dtype */ \
  /* reductions over attrs.dims (none: all dims), attrs.keepdim */ \
  _(SUM,         "sum",         REDUCE, 1, 1) \
  _(MEAN,        "mean",        REDUCE, 1, 1) \
  _(PROD,        "prod",        REDUCE, 1, 1) \
  _(MAX,         "max",         REDUCE, 1, 2) /* one dim given: values and indices */ \
  _(MIN,         "min",         REDUCE, 1, 2) \
  _(ARGMAX,      "argmax",      REDUCE, 1, 1) \
  _(ARGMIN,      "argmin",      REDUCE, 1, 1) \
  _(VAR,         "var",         REDUCE, 1, 1) /* attrs.flag: unbiased */ \
  _(STD,         "std",         REDUCE, 1, 1) \
  _(LOGSUMEXP,   "logsumexp",   REDUCE, 1, 1) \
  _(ALL,         "all",         REDUCE, 1, 1) \
  _(ANY,         "any",         REDUCE, 1, 1) \
  /* scans and row ops over attrs.dims[0] */ \
  _(CUMSUM,      "cumsum",      SCAN, 1, 1) \
  _(SOFTMAX,     "softmax",     SCAN, 1, 1) \
  _(LOG_SOFTMAX, "log_softmax", SCAN, 1, 1) \
  _(TOPK,        "topk",        SCAN, 1, 2) /* attrs.i0: k, attrs.flag: smallest instead of largest */ \
  _(SORT,        "sort",        SCAN, 1, 2) /* attrs.flag: descending */ \
  /* softmax(q @ kt (* or / scale), masked) @ v over the keys, the scores never in memory: q [..., M, D], \
   * kt [..., D, N], v [..., N, Dv]; scale 0-d, mask bool over [..., M, N] (either may be NULL); attrs.flag: \
   * GRACE_ATTN_* bits; attrs.a: the masked scores' value */ \
  _(ATTENTION,   "attention",   SCAN, 5, 1) \
  /* matrix products */ \
  _(MATMUL,      "matmul",      MATMUL, 2, 1) \
  /* views (share storage) */ \
  _(RESHAPE,     "reshape",     VIEW, 1, 1) /* attrs.shape (one -1 allowed); copies only if it must */ \
  _(VIEW,        "view",        VIEW, 1, 1) /* as reshape, but an error where a copy would be needed */ \
  _(TRANSPOSE,   "transpose",   VIEW, 1, 1) /* attrs.dims[0..1] */ \
  _(PERMUTE,     "permute",     VIEW, 1, 1) /* attrs.dims */ \
  _(EXPAND,      "expand",      VIEW, 1, 1) /* attrs.shape, -1 keeps a size */ \
  _(NARROW,      "narrow",      VIEW, 1, 1) /* attrs.dims[0], attrs.i0: start, attrs.i1: length */ \
  _(SELECT,      "select",      VIEW, 1, 1) /* attrs.dims[0], attrs.i0: index */ \
  _(SQUEEZE,     "squeeze",     VIEW, 1, 1) /* attrs.dims (none: all size-1 dims) */ \
  _(UNSQUEEZE,   "unsqueeze",   VIEW, 1, 1) /* attrs.dims[0] in [-ndim-1, ndim] */ \
  /* data movement */ \
  _(CONTIGUOUS,  "contiguous",  MOVE, 1, 1) \
  _(CLONE,       "clone",       MOVE, 1, 1) \
  _(TO_DEVICE,   "to",          MOVE, 1, 1) /* attrs.device */ \
  _(CAT,         "cat",         MOVE, -1, 1) /* attrs.dims[0] */ \
  _(STACK,       "stack",       MOVE, -1, 1) /* attrs.dims[0] */ \
  _(INDEX_SELECT,"index_select",MOVE, 2, 1) /* x, index (int64/int32); attrs.dims[0] */ \
  _(GATHER,      "gather",      MOVE, 2, 1) /* x, index; attrs.dims[0] */ \
  _(SCATTER,     "scatter",     MOVE, 3, 1) /* x, index, src; attrs.dims[0]; out-of-place */ \
  /* data-dependent result shapes: never recorded into a trace (a graph break, vm_trace_record) */ \
  _(MASKED_SELECT,"masked_select",MOVE, 2, 1) /* x, mask (bool, broadcast with x): 1-d, x's elements where true */ \
  _(NONZERO,     "nonzero",     MOVE, 1, 1) /* x: int64 [n, ndim], the positions of nonzero elements (index base) */ \
  _(TRIU,        "triu",        MOVE, 1, 1) /* attrs.i0: diagonal */ \
  _(TRIL,        "tril",        MOVE, 1, 1) \
  _(REPEAT,      "repeat",      MOVE, 1, 1) /* attrs.shape: repeats per dim */ \
  _(EMBEDDING,   "embedding",   MOVE, 2, 1) /* ids, weight */ \
  _(SLICE_SCATTER,"slice_scatter",MOVE, 2, 1) /* base, src: base with narrow(dims[0], i0, i1) replaced by src; \
                                                  flag: src is a select at i0 (no dim) */ \
  /* normalisation over the last dim */ \
  _(LAYER_NORM,  "layer_norm",  NORM, 3, 1) /* x, weight, bias (either may be NULL); attrs.a: eps */ \
  _(RMS_NORM,    "rms_norm",    NORM, 2, 1) /* x, weight (may be NULL); attrs.a: eps */ \
  /* creation: attrs.shape, attrs.dtype, attrs.device */ \
  _(FULL,        "full",        CREATE, 0, 1) /* attrs.a: value */ \
  _(ARANGE,      "arange",      CREATE, 0, 1) /* attrs.a: start, attrs.b: end, attrs.c: step */ \
  _(LINSPACE,    "linspace",    CREATE, 0, 1) /* attrs.a: start, attrs.b: end, attrs.i0: steps */ \
  _(EYE,         "eye",         CREATE, 0, 1) /* attrs.shape: {n, m} */ \
  _(RAND,        "rand",        CREATE, 0, 1) /* uniform [0, 1) */ \
  _(RANDN,       "randn",       CREATE, 0, 1) /* standard normal */ \
  _(RANDINT,     "randint",     CREATE, 0, 1) /* attrs.i0: low, attrs.i1: high (exclusive) */ \
  /* in place on input 1 (version counter bumped) */ \
  _(COPY_,       "copy_",       INPLACE, 2, 0) /* dst, src (broadcast to dst, converted to dst's dtype) */ \
  _(FILL_,       "fill_",       INPLACE, 1, 0) /* attrs.a */ \
  /* dst, values, then index tensors (int, broadcast together, over dst's leading dims) or one bool mask; \
   * values broadcast to the selection; attrs.flag: accumulate (add instead of write) */ \
  _(INDEX_PUT_,  "index_put_",  INPLACE, -1, 0) \
  _(INDEX_COPY_, "index_copy_", INPLACE, 3, 0) /* dst, index, src; attrs.dims[0] */

#endif
