/* lgrace_luac.h: the analysis of an item() site on Lua 5.4 bytecode (lgrace_luac.c): whether the number a call
 * of x:item() returns is used only as one operand of a comparison with a constant that decides a jump, so that the
 * comparison can stand for the value (a device-side predicate). */
#ifndef LGRACE_LUAC_H
#define LGRACE_LUAC_H
#include <math.h>
#include <stddef.h>
#include <lua.h>

typedef enum { LG_CMP_LT, LG_CMP_LE, LG_CMP_GT, LG_CMP_GE, LG_CMP_EQ, LG_CMP_NE, LG_CMP_TRUTH } lg_cmp_op;

/* The comparison at an item() site. With `value` the number (or boolean) item() returned:
 *   holds = (value OP k) when negate is 0, !(value OP k) when negate is 1
 * and Lua continues with the code right after the comparison (it does NOT take the jump) exactly when holds is
 * true. For `if COND then A else B end` and `elseif COND then A` that code is A, and holds is COND as written in
 * the source: `if v > K` gives GT, `if v <= K` LE, `if K < v` GT (the constant moved right), `if v ~= K` NE,
 * `if not (v > K)` GT with negate 1 (not LE: with a NaN value both are false but `not (v > K)` is true),
 * `if v then` TRUTH, `if not v then` TRUTH with negate 1 (a number is always true: only a boolean item, of a bool
 * tensor, makes TRUTH depend on the value). In `if v > K and w then` and `if v > K or w then` the comparison
 * decides whether Lua goes on to test w, and holds still says whether Lua falls through: for `and` that is GT (w is
 * tested when v > K), for `or` GT with negate 1 (Lua jumps straight into the then-block when v > K).
 * Use lg_cmp_holds below to evaluate it on a concrete value (it follows Lua's rules for booleans and NaN). */
typedef struct {
  lg_cmp_op op;
  double k;          /* the constant (0 for TRUTH) */
  int k_is_int;      /* the constant is a Lua integer: ik holds it exactly (k may round beyond 2^53) */
  long long ik;
  int negate;        /* see above: holds is the negation of (value OP k) */
  int line;          /* the line of the item() call */
  int k_from_upvalue; /* k is not written in the code: it was read now from an upvalue (k_path: how) */
  char k_path[64];   /* c.limit, lim, or a global's name */
  int read_now;      /* the answer depends on values read now (upvalues, fields, registers): do not reuse it */
  /* Per side ([1]: the code Lua falls through to, where holds is true; [0]: where it jumps): "" when that code is an
   * early return of values already computed (only register moves, loads of constants and upvalues, and forward
   * jumps up to a return, none reading the value), which has no effect and calls nothing, so that grace may record
   * that side by forcing the value (lg_cmp_force); else why not, "source:line: ...". */
  char ahead_why[2][240];
} lg_cmp;

/* Analyses the Lua function running at stack `level` (at least 1), the caller of the function at level-1 (for item() called from
 * Lua: level 1 from inside the C function implementing item): 1 and *out when the call running there is a method
 * call `obj:item()` whose one result is used only in one comparison with a number constant (or a truth test) that
 * decides a jump; 0 and a reason "source:line: ..." in why otherwise. Answering 0 is always sound.
 * Accepted: `if`/`elseif` conditions, also inside `and`/`or` (`if v > K and w then`) and conditional expressions
 * (`v > K and 1 or 2`: the comparison decides which of 1 or 2 is computed); an `if` inside a loop, even one whose
 * block ends with break/return/goto. Accepting says only that the value flows nowhere but into that jump: whether
 * the two sides differ only in device work is for whoever merges them.
 * The other operand may also be read now (k_from_upvalue, k_path): loaded right after the call by GETUPVAL or
 * GETTABUP and GETFIELDs with constant string keys (`v > lim`, `v > c.limit`, `v > GLOBAL`), each field read raw
 * and present (no metamethod runs, nothing runs between the load and the comparison), and a number. Whether that
 * value holds at other calls is the caller's question (grace accepts it only for the function being compiled,
 * whose upvalues are guarded).
 * Another plain CALL with the same register on the line is told apart (on either side of item()) when its function
 * is loaded by GETUPVAL, GETTABUP, or MOVE from a register below the frame's top, then GETFIELDs, read now as above,
 * with only loads that run no code between that chain and the CALL (writing neither its register nor the MOVE's
 * source, not jumped into), and that value (through raw __call metamethods) is not the function running at
 * level - 1: had that CALL been the running one, its function would be that value, since nothing changed since.
 * read_now says the answer depends on such values: it must not be reused for another call.
 * Not accepted (answer 0): the value stored in a local or a table, used in arithmetic, passed to a function,
 * returned, used as a table key or indexed; a comparison whose result is kept as a boolean (`local b = v > 0`);
 * the value of `v or 0` / `v and 1`; a comparison with a local, a field read through __index or missing, a value
 * loaded before the call (`c.limit < v`: code in between may change it) or a non-number constant; several item()
 * calls on one line, or another plain function call with the same register on the line that is not told apart as
 * above (its function is item, or read otherwise); a caller that is a C function
 * (`pcall(x.item, x)`), a metamethod or a function without line information; a bytecode format other than this
 * build's Lua 5.4; and a comparison that decides a loop: the condition of `while` or `repeat ... until` and
 * `if COND then break end` (Lua compiles it into the loop's exit jump): there the value decides how many times the
 * loop runs.
 * Assumes a method called under another name on the same line (x:max() in x:max():item()) is not item itself.
 * On acceptance out->ahead_why also says, for each side, whether its code is an early return (see lg_cmp).
 * Leaves the Lua stack as it was; keeps no state between calls (dumps and decodes the function each time: call it
 * once per site while recording, not per call). */
int lg_cmp_site(lua_State *L, int level, lg_cmp *out, char *why, size_t nwhy);

/* Whether Lua falls through (the THEN side, see lg_cmp) for an item() value: a number v (is_bool 0) or a boolean
 * (is_bool 1, v 0 or 1). 1: falls through, 0: jumps, -1: Lua raises an error there (an order comparison of a
 * boolean with a number). As in Lua, a number is always true for TRUTH, a boolean never equals a number and any
 * comparison with NaN is false (exact for integers up to 2^53 in magnitude). */
static inline int lg_cmp_holds(const lg_cmp *c, int is_bool, double v) {
  int r;
  switch (c->op) {
  case LG_CMP_TRUTH: r = is_bool ? v != 0 : 1; break;
  case LG_CMP_EQ: r = !is_bool && v == c->k; break;
  case LG_CMP_NE: r = is_bool || v != c->k; break;
  default:
    if (is_bool) return -1;
    r = c->op == LG_CMP_LT ? v < c->k : c->op == LG_CMP_LE ? v <= c->k : c->op == LG_CMP_GT ? v > c->k : v >= c->k;
  }
  return c->negate ? !r : r;
}

/* A value for item() that makes the comparison `value OP k` itself (negate aside) come out as `outcome`, for a tensor
 * of kind 0 (floating point: a number), 1 (integer: an integral number, returned as a Lua integer) or 2 (boolean:
 * 0 or 1, returned as a boolean): 1 and *v, or 0 when no such value exists (an integer never equals 2.5, a boolean
 * never equals a number, k infinite). The nearest such value to k is taken. */
static inline int lg_cmp_force(const lg_cmp *c, int kind, int outcome, double *v) {
  double k = c->k, up = kind == 1 ? floor(k) + 1 : nextafter(k, INFINITY),
         down = kind == 1 ? ceil(k) - 1 : nextafter(k, -INFINITY);
  switch (c->op) {
  case LG_CMP_TRUTH: *v = outcome; break;
  case LG_CMP_LT: *v = outcome ? down : (kind == 1 ? ceil(k) : k); break;
  case LG_CMP_LE: *v = outcome ? (kind == 1 ? floor(k) : k) : up; break;
  case LG_CMP_GT: *v = outcome ? up : (kind == 1 ? floor(k) : k); break;
  case LG_CMP_GE: *v = outcome ? (kind == 1 ? ceil(k) : k) : down; break;
  case LG_CMP_EQ: *v = outcome ? k : up; break;
  case LG_CMP_NE: *v = outcome ? up : k; break;
  }
  if (kind == 1 && (*v != floor(*v) || !(fabs(*v) < 9007199254740992.0))) return 0;   /* an exact Lua integer */
  int h = lg_cmp_holds(c, kind == 2, *v);
  return h >= 0 && (c->negate ? !h : h) == outcome;   /* the comparison checked as Lua would make it */
}

#endif
