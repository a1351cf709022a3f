/* lgrace_luac.h: the analysis of an item() site on Lua 5.4 bytecode (lgrace_luac.c): whether the number a call
 * of x:item() returns is used only as one operand of a comparison with a constant that decides a jump, so that the
 * comparison can stand for the value (a device-side predicate). */
#ifndef LGRACE_LUAC_H
#define LGRACE_LUAC_H
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
} lg_cmp;

/* Analyses the Lua function running at stack `level`, the caller of the function at level-1 (for item() called from
 * Lua: level 1 from inside the C function implementing item): 1 and *out when the call running there is a method
 * call `obj:item()` whose one result is used only in one comparison with a number constant (or a truth test) that
 * decides a jump; 0 and a reason "source:line: ..." in why otherwise. Answering 0 is always sound.
 * Accepted: `if`/`elseif` conditions, also inside `and`/`or` (`if v > K and w then`) and conditional expressions
 * (`v > K and 1 or 2`: the comparison decides which of 1 or 2 is computed); an `if` inside a loop, even one whose
 * block ends with break/return/goto. Accepting says only that the value flows nowhere but into that jump: whether
 * the two sides differ only in device work is for whoever merges them.
 * Not accepted (answer 0): the value stored in a local or a table, used in arithmetic, passed to a function,
 * returned, used as a table key or indexed; a comparison whose result is kept as a boolean (`local b = v > 0`);
 * the value of `v or 0` / `v and 1`; a comparison with a variable or a non-number constant; several item() calls on
 * one line, or another plain function call with the same register on the line; a caller that is a C function
 * (`pcall(x.item, x)`), a metamethod or a function without line information; a bytecode format other than this
 * build's Lua 5.4; and a comparison that decides a loop: the condition of `while` or `repeat ... until` and
 * `if COND then break end` (Lua compiles it into the loop's exit jump): there the value decides how many times the
 * loop runs.
 * Assumes a method called under another name on the same line (x:max() in x:max():item()) is not item itself.
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

#endif
