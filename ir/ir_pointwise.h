/* ir_pointwise.h: the one definition of every pointwise op's meaning, in the style of LuaJIT's lj_ir.h. Each row
 * gives the op's result-type rule (read by inference, ir_infer.c), its CPU scalar code (the kernels of
 * cpu/cpu_pointwise.c, which the fused CPU loops of cpu/cpu_fused.c call), its CUDA expression (fused kernels,
 * codegen/cg_fused.c) and, where it has one, its float32 matrix-product epilogue (codegen/cg_matmul.c). The op
 * itself (enum, name, kind, arity) is its row of GRACE_OPS in include/grace_ops.h; docs/adding_an_op.md says how
 * to add one. cast is not here: it is a conversion, lowered by the copy paths and conv() of cg_fused.c.
 *
 * Columns: _(OP, RULE, f32, f64, i64, cuda, cuda_int, epilogue)
 *   OP        the GRACE_OP_ name without its prefix
 *   RULE      the result dtype (ir_pw_rule):
 *               SAME     unary, keeps the input's dtype; integers compute in int64 with the i64 column
 *               FLOAT    unary float math: an integer or bool input computes and gives float32 (i64 unused)
 *               PROMOTE  binary, the promoted dtype of the operands (integers wrap like the stored dtype)
 *               DIV      as PROMOTE, but integers give float32 (true division; the i64 column never runs)
 *               COMPARE  computes in the promoted dtype, gives bool
 *               LOGIC    truth bytes in, bool out: the i64 column is the kernel on bytes (f32/f64 unused)
 *               SELECT   ternary selects (where, masked_fill): the CPU kernels are PW_DEF_SELECT's loops
 *   f32, f64, i64  CPU C expressions of x (unary) or a, b (binary) in that compute type; float16 and bfloat16
 *             compute in float32. In scope: lo, hi (clamp's bounds), flag (attrs.flag), bad (an integer kernel's
 *             error, PW_ERR_*). PW_NONE: no kernel of that type. The float32 forms are branch-free so the loops
 *             vectorize (cpu/cpu_pointwise_math.h), hence their own spellings where libm's would not.
 *   cuda      a template of the CUDA expression on float registers: $0 $1 $2 the operands, $f "f" for a float
 *             register and "" for a double one, $T the register's type. It may read flag (gelu's variant).
 *             Its cgf_ helpers are in codegen/cg_fused.cuh.
 *   cuda_int  the same on integer registers (long long; bool as 0/1), NULL where integers never reach it
 *   epilogue  a template on the float32 accumulator of a matrix product ($0; $1 the other operand of a binary
 *             op), or NULL: the op does not continue a matmul kernel. These spellings are the epilogue's own
 *             (no helpers there); gelu(tanh), silu and sigmoid use 1 / (1 + e^-u) forms that round differently
 *             from the fused kernels' cgf_ helpers.
 */
#ifndef GRACE_IR_POINTWISE_H
#define GRACE_IR_POINTWISE_H

#include <stddef.h>
#include "grace.h"

#define GRACE_PW_UNARY(_) \
  _(NEG,     SAME,  -x,                   -x,                  PW_INEG(x),             "-($0)", \
    "(long long)(0ULL - (grace_u64)($0))", "-$0") \
  _(ABS,     SAME,  fabsf(x),             fabs(x),             x < 0 ? PW_INEG(x) : x, "fabs$f($0)", "cgf_iabs($0)", NULL) \
  _(RELU,    SAME,  x < 0 ? 0.0f : x,     x < 0 ? 0.0 : x,     x < 0 ? 0 : x,          "cgf_relu($0)", "cgf_relu($0)", \
    "$0 > 0.0f ? $0 : ($0 != $0 ? $0 : 0.0f)") \
  _(FLOOR,   SAME,  floorf(x),            floor(x),            x,                      "floor$f($0)", "$0", NULL) \
  _(CEIL,    SAME,  ceilf(x),             ceil(x),             x,                      "ceil$f($0)", "$0", NULL) \
  _(ROUND,   SAME,  nearbyintf(x),        nearbyint(x),        x,                      "rint$f($0)", "$0", NULL) \
  _(SIGN,    SAME,  x != x ? x : (float)((x > 0) - (x < 0)), x != x ? x : (double)((x > 0) - (x < 0)), \
    (int64_t)((x > 0) - (x < 0)), "cgf_sign($0)", "cgf_sign($0)", NULL) \
  /* clamp: $1, $2 are the bounds (cg_fused.c makes them from attrs, as clamp_setup does for the CPU) */ \
  _(CLAMP,   SAME,  pw_clampf(x, lo, hi), pw_clamp(x, lo, hi), pw_iclamp(x, lo, hi),   "cgf_clamp($0, ($T)$1, ($T)$2)", \
    "cgf_clamp($0, $1, $2)", NULL) \
  _(EXP,     FLOAT, pw_expf(x),           exp(x),              PW_NONE,                "exp$f($0)", NULL, NULL) \
  _(LOG,     FLOAT, logf(x),              log(x),              PW_NONE,                "log$f($0)", NULL, NULL) \
  _(LOG1P,   FLOAT, log1pf(x),            log1p(x),            PW_NONE,                "log1p$f($0)", NULL, NULL) \
  _(SQRT,    FLOAT, sqrtf(x),             sqrt(x),             PW_NONE,                "sqrt$f($0)", NULL, NULL) \
  _(RSQRT,   FLOAT, 1.0f / sqrtf(x),      1.0 / sqrt(x),       PW_NONE,                "($T)1 / sqrt$f($0)", NULL, NULL) \
  _(SIN,     FLOAT, sinf(x),              sin(x),              PW_NONE,                "sin$f($0)", NULL, NULL) \
  _(COS,     FLOAT, cosf(x),              cos(x),              PW_NONE,                "cos$f($0)", NULL, NULL) \
  _(TAN,     FLOAT, tanf(x),              tan(x),              PW_NONE,                "tan$f($0)", NULL, NULL) \
  _(TANH,    FLOAT, pw_tanhf(x),          tanh(x),             PW_NONE,                "tanh$f($0)", NULL, "tanhf($0)") \
  _(SIGMOID, FLOAT, pw_sigmoidf(x),       x < 0 ? exp(x) / (1.0 + exp(x)) : 1.0 / (1.0 + exp(-x)), PW_NONE, \
    "cgf_sigmoid($0)", NULL, "1.0f / (1.0f + expf(-$0))") \
  /* gelu: flag selects the tanh approximation */ \
  _(GELU,    FLOAT, flag ? pw_gelu_tanhf(x) : pw_geluf(x), flag ? pw_gelu_tanh(x) : pw_gelu(x), PW_NONE, \
    flag ? "cgf_gelu_tanh($0)" : "cgf_gelu($0)", NULL, \
    flag ? "$0 / (1.0f + expf(-1.5957691216057308f * ($0 + 0.044715f * $0 * $0 * $0)))" \
         : "0.5f * $0 * erfcf(-$0 * 0.70710678118654752f)") \
  _(SILU,    FLOAT, x * pw_sigmoidf(x),   x / (1.0 + exp(-x)), PW_NONE,                "cgf_silu($0)", NULL, \
    "$0 / (1.0f + expf(-$0))") \
  _(ERF,     FLOAT, pw_erff(x),           erf(x),              PW_NONE,                "erf$f($0)", NULL, NULL) \
  _(LOGICAL_NOT, LOGIC, PW_NONE,          PW_NONE,             !x,                     "(long long)!($0)", \
    "(long long)!($0)", NULL)

#define GRACE_PW_BINARY(_) \
  _(ADD,     PROMOTE, a + b,              a + b,               PW_IWRAP(+, a, b),      "$0 + $1", \
    "(long long)((grace_u64)($0) + (grace_u64)($1))", "$0 + $1") \
  _(SUB,     PROMOTE, a - b,              a - b,               PW_IWRAP(-, a, b),      "$0 - $1", \
    "(long long)((grace_u64)($0) - (grace_u64)($1))", "$0 - $1") \
  _(MUL,     PROMOTE, a * b,              a * b,               PW_IWRAP(*, a, b),      "$0 * $1", \
    "(long long)((grace_u64)($0) * (grace_u64)($1))", "$0 * $1") \
  _(DIV,     DIV,     a / b,              a / b,               0,                      "$0 / $1", "$0 / $1", "$0 / $1") \
  _(REM,     PROMOTE, pw_remf(a, b),      pw_rem(a, b),        pw_irem(a, b, &bad),    "cgf_rem($0, $1)", "cgf_rem($0, $1)", \
    NULL) \
  _(POW,     PROMOTE, powf(a, b),         pow(a, b),           pw_ipow(a, b, &bad),    "pow$f($0, $1)", "cgf_ipow($0, $1)", \
    NULL) \
  _(MAXIMUM, PROMOTE, (a > b || a != a) ? a : b, (a > b || a != a) ? a : b, a > b ? a : b, "cgf_maximum($0, $1)", \
    "cgf_maximum($0, $1)", NULL) \
  _(MINIMUM, PROMOTE, (a < b || a != a) ? a : b, (a < b || a != a) ? a : b, a < b ? a : b, "cgf_minimum($0, $1)", \
    "cgf_minimum($0, $1)", NULL) \
  _(LOGICAL_AND, LOGIC, PW_NONE,          PW_NONE,             a & b,                  "(long long)(($0) & ($1))", \
    "(long long)(($0) & ($1))", NULL) \
  _(LOGICAL_OR,  LOGIC, PW_NONE,          PW_NONE,             a | b,                  "(long long)(($0) | ($1))", \
    "(long long)(($0) | ($1))", NULL) \
  _(EQ,      COMPARE, a == b,             a == b,              a == b,                 "(long long)($0 == $1)", \
    "(long long)($0 == $1)", NULL) \
  _(NE,      COMPARE, a != b,             a != b,              a != b,                 "(long long)($0 != $1)", \
    "(long long)($0 != $1)", NULL) \
  _(LT,      COMPARE, a < b,              a < b,               a < b,                  "(long long)($0 < $1)", \
    "(long long)($0 < $1)", NULL) \
  _(LE,      COMPARE, a <= b,             a <= b,              a <= b,                 "(long long)($0 <= $1)", \
    "(long long)($0 <= $1)", NULL) \
  _(GT,      COMPARE, a > b,              a > b,               a > b,                  "(long long)($0 > $1)", \
    "(long long)($0 > $1)", NULL) \
  _(GE,      COMPARE, a >= b,             a >= b,              a >= b,                 "(long long)($0 >= $1)", \
    "(long long)($0 >= $1)", NULL)

/* Ternary selects: the truth operand is where's 0 and masked_fill's 1 (read as a 0/1 byte on the CPU, as
 * ((x) != 0) in CUDA). */
#define GRACE_PW_TERNARY(_) \
  _(WHERE,       SELECT, PW_NONE, PW_NONE, PW_NONE, "$0 ? $1 : $2", "$0 ? $1 : $2", NULL) \
  _(MASKED_FILL, SELECT, PW_NONE, PW_NONE, PW_NONE, "$1 ? $2 : $0", "$1 ? $2 : $0", NULL)

/* ---- what the rows give, by op ---- */
typedef enum ir_pw_rule {
  IR_PW_NONE,       /* not a row of the table */
  IR_PW_SAME, IR_PW_FLOAT, IR_PW_PROMOTE, IR_PW_DIV, IR_PW_COMPARE, IR_PW_LOGIC, IR_PW_SELECT
} ir_pw_rule;

static inline ir_pw_rule ir_pw_rule_of(int op) {
  switch (op) {
#define IR_PW_RULE_CASE(OP, RULE, ...) case GRACE_OP_##OP: return IR_PW_##RULE;
    GRACE_PW_UNARY(IR_PW_RULE_CASE)
    GRACE_PW_BINARY(IR_PW_RULE_CASE)
    GRACE_PW_TERNARY(IR_PW_RULE_CASE)
#undef IR_PW_RULE_CASE
  default: return IR_PW_NONE;
  }
}

/* The CUDA template of op on float (is_float) or integer registers; NULL: none. flag: attrs.flag. */
static inline const char *ir_pw_cuda(int op, int flag, int is_float) {
  (void)flag;
  switch (op) {
#define IR_PW_CUDA_CASE(OP, RULE, F32, F64, I64, CUDA, CUDA_INT, EPI) \
  case GRACE_OP_##OP: return is_float ? (CUDA) : (CUDA_INT);
    GRACE_PW_UNARY(IR_PW_CUDA_CASE)
    GRACE_PW_BINARY(IR_PW_CUDA_CASE)
    GRACE_PW_TERNARY(IR_PW_CUDA_CASE)
#undef IR_PW_CUDA_CASE
  default: return NULL;
  }
}

/* The float32 matmul-epilogue template of op (attrs.flag flag); NULL: op does not continue a matmul. */
static inline const char *ir_pw_epilogue(int op, int flag) {
  (void)flag;
  switch (op) {
#define IR_PW_EPI_CASE(OP, RULE, F32, F64, I64, CUDA, CUDA_INT, EPI) case GRACE_OP_##OP: return (EPI);
    GRACE_PW_UNARY(IR_PW_EPI_CASE)
    GRACE_PW_BINARY(IR_PW_EPI_CASE)
#undef IR_PW_EPI_CASE
  default: return NULL;
  }
}

#endif
