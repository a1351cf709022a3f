/* lgrace_luac.c: the analysis of an item() site (see lgrace_luac.h) on the Lua 5.4 bytecode of the calling function.
 *
 * Why bytecode: the only sound way to let a compiled function branch on a device value without reading it is to know
 * that the value item() returns flows into nothing but one comparison with a constant that decides a jump; then
 * the comparison can be recorded as a device predicate. Returning a proxy object from item() instead would be
 * unsound (Lua 5.4 never calls __eq between a userdata and a number: `proxy == 0` is silently false, and `proxy + 1`
 * or a table key would leak the proxy), and Lua's debug API sees calls and lines but not comparisons. So the
 * calling function is dumped (lua_dump, with its debug information) and the binary chunk is decoded here: the
 * header must be the one of Lua 5.4, format 0, with this build's sizes, else the answer is "cannot analyse".
 *
 * How the call is found: lua_getinfo gives the function and its current line but no pc. Among the CALL and
 * TAILCALL instructions on that line, the running one is pinned by its register: lua_getlocal at that level sees
 * the frame's slots (locals and temporaries) up to the called function's slot, so their count is the A operand of
 * the CALL that is running (a metamethod runs above the whole frame and matches no CALL). It must be a method call
 * `obj:item()` (a SELF with the string constant "item" right before the CALL), the only one on the line; other
 * calls with the same register on the line (x:max():item()) must be method calls under other names, or plain calls
 * whose function, read now from where the code loads it (an upvalue, a register, raw fields), is not item
 * (not_running: `if v > 0 then return pos(h) end`).
 *
 * What is accepted: the one result R of that call is a temporary (not a local's register: Lua's code generator
 * consumes a temporary once), and the instructions right after it are a comparison of R with a number constant
 * (EQK/EQI/LTI/LEI/GTI/GEI; LOADI/LOADF/LOADK into a temporary then EQ/LT/LE; or, for `2.5 >= v`, a constant loaded
 * before the call) or a truth test (TEST), then a JMP. Lua executes that JMP when the outcome equals the
 * instruction's k bit, so the fall-through (the THEN side of an `if`) is taken when it differs: k 0 gives
 * (value OP k), k 1 its negation. TEST leaves R in place, so R must be dead on both sides (in `v or 0` it is the
 * expression's value). Rejected are a comparison whose result becomes a boolean value (the jump lands on
 * LFALSESKIP/LOADTRUE) and one that decides a loop (the jump goes back, or to a CLOSE and back, or it leaves a loop
 * whose back jump ends where the jump lands).
 *
 * Each side of an accepted jump is also scanned (more_than_return): when its code, followed through forward jumps,
 * only moves registers and loads constants and upvalues up to a return, without reading R (until R is overwritten),
 * it is an early return of values already computed: running it has no effect and calls nothing, so grace may force
 * the value to record that side before a call takes it (lg_cmp.ahead_why). */
#include <stdarg.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include "lua/lgrace_luac.h"

/* The opcodes of Lua 5.4 in their order (lopcodes.h); prefixed so as not to clash with Lua's own names. */
enum {
  L_MOVE, L_LOADI, L_LOADF, L_LOADK, L_LOADKX, L_LOADFALSE, L_LFALSESKIP, L_LOADTRUE, L_LOADNIL, L_GETUPVAL,
  L_SETUPVAL, L_GETTABUP, L_GETTABLE, L_GETI, L_GETFIELD, L_SETTABUP, L_SETTABLE, L_SETI, L_SETFIELD, L_NEWTABLE,
  L_SELF, L_ADDI, L_ADDK, L_SUBK, L_MULK, L_MODK, L_POWK, L_DIVK, L_IDIVK, L_BANDK, L_BORK, L_BXORK, L_SHRI, L_SHLI,
  L_ADD, L_SUB, L_MUL, L_MOD, L_POW, L_DIV, L_IDIV, L_BAND, L_BOR, L_BXOR, L_SHL, L_SHR, L_MMBIN, L_MMBINI, L_MMBINK,
  L_UNM, L_BNOT, L_NOT, L_LEN, L_CONCAT, L_CLOSE, L_TBC, L_JMP, L_EQ, L_LT, L_LE, L_EQK, L_EQI, L_LTI, L_LEI, L_GTI,
  L_GEI, L_TEST, L_TESTSET, L_CALL, L_TAILCALL, L_RETURN, L_RETURN0, L_RETURN1, L_FORLOOP, L_FORPREP, L_TFORPREP,
  L_TFORCALL, L_TFORLOOP, L_SETLIST, L_CLOSURE, L_VARARG, L_VARARGPREP, L_EXTRAARG, L_NUMOPS
};
_Static_assert(L_NUMOPS == 83, "Lua 5.4 has 83 opcodes");

/* Instruction fields: op 7 bits, A 8, k 1, B 8, C 8; Bx 17 (from bit 15); sJ 25 (from bit 7); sB/sC excess-127. */
#define I_OP(i) ((int)((i) & 0x7f))
#define I_A(i) ((int)(((i) >> 7) & 0xff))
#define I_K(i) ((int)(((i) >> 15) & 1))
#define I_B(i) ((int)(((i) >> 16) & 0xff))
#define I_C(i) ((int)(((i) >> 24) & 0xff))
#define I_BX(i) ((int)((i) >> 15))
#define I_SBX(i) (I_BX(i) - 0xffff)
#define I_SJ(i) ((int)((i) >> 7) - 0xffffff)
#define I_SB(i) (I_B(i) - 127)

/* Constant tags of the chunk format (type | variant << 4). */
enum { K_NIL = 0, K_FALSE = 1, K_TRUE = 17, K_INT = 3, K_FLT = 19, K_SHRSTR = 4, K_LNGSTR = 20 };

typedef struct {
  const unsigned char *p, *end;
  int bad;
} rd;

/* The main function of a dumped chunk: pointers into the dump for the parts read on demand. */
typedef struct {
  int linedefined, ncode, nk, nlocvars;
  const unsigned char *code, *k, *locvars, *end;
  int *lines;   /* line of each instruction (malloc'd) */
} proto;

static int rd_byte(rd *r) {
  if (r->p >= r->end) { r->bad = 1; return 0; }
  return *r->p++;
}
static void rd_skip(rd *r, size_t n) {
  if ((size_t)(r->end - r->p) < n) { r->bad = 1; r->p = r->end; }
  else r->p += n;
}
/* A size: 7 bits a byte, most significant first, the last byte marked by its high bit. */
static size_t rd_size(rd *r) {
  size_t x = 0;
  int b;
  do {
    if (x > (SIZE_MAX >> 7)) { r->bad = 1; return 0; }
    b = rd_byte(r);
    x = (x << 7) | (size_t)(b & 0x7f);
  } while (!r->bad && !(b & 0x80));
  return x;
}
static int rd_int(rd *r) {
  size_t x = rd_size(r);
  if (x > INT32_MAX) r->bad = 1;
  return r->bad ? 0 : (int)x;
}
/* A string: its size + 1 (0: none), then its bytes. */
static const char *rd_str(rd *r, size_t *len) {
  size_t n = rd_size(r);
  const char *s = (const char *)r->p;
  *len = n ? n - 1 : 0;
  if (n) rd_skip(r, n - 1);
  return n && !r->bad ? s : NULL;
}
static uint32_t ins(const proto *f, int pc) {
  uint32_t i;
  memcpy(&i, f->code + 4 * (size_t)pc, 4);
  return i;
}

/* Skips the constants, upvalues, nested functions and debug information of a function (depth: nesting). */
static void skip_rest(rd *r, int depth);
static void skip_function(rd *r, int depth) {
  size_t len;
  if (depth > 256) { r->bad = 1; return; }
  rd_str(r, &len);
  rd_int(r); rd_int(r);
  rd_skip(r, 3);
  rd_skip(r, 4 * (size_t)rd_int(r));
  skip_rest(r, depth);
}
static void skip_constants(rd *r, int n) {
  size_t len;
  for (int i = 0; i < n && !r->bad; i++) {
    int t = rd_byte(r);
    if (t == K_INT || t == K_FLT) rd_skip(r, t == K_INT ? sizeof(lua_Integer) : sizeof(lua_Number));
    else if (t == K_SHRSTR || t == K_LNGSTR) rd_str(r, &len);
    else if (t != K_NIL && t != K_FALSE && t != K_TRUE) r->bad = 1;
  }
}
static void skip_locvars(rd *r, int n) {
  size_t len;
  for (int i = 0; i < n && !r->bad; i++) { rd_str(r, &len); rd_int(r); rd_int(r); }
}
static void skip_rest(rd *r, int depth) {
  size_t len;
  skip_constants(r, rd_int(r));
  rd_skip(r, 3 * (size_t)rd_int(r));
  for (int n = rd_int(r), i = 0; i < n && !r->bad; i++) skip_function(r, depth + 1);
  rd_skip(r, (size_t)rd_int(r));
  for (int n = rd_int(r), i = 0; i < n && !r->bad; i++) { rd_int(r); rd_int(r); }
  skip_locvars(r, rd_int(r));
  for (int n = rd_int(r), i = 0; i < n && !r->bad; i++) rd_str(r, &len);
}

/* The header of a chunk of this Lua: signature, version 5.4, format 0, the conversion check bytes, the sizes of an
 * instruction, an integer and a float, and the test integer and float in this machine's representation. */
static const char *check_header(rd *r) {
  static const unsigned char head[] = {0x1b, 'L', 'u', 'a', 0x54, 0, 0x19, 0x93, '\r', '\n', 0x1a, '\n', 4,
                                       sizeof(lua_Integer), sizeof(lua_Number)};
  if ((size_t)(r->end - r->p) < sizeof head + 16 || memcmp(r->p, head, sizeof head) != 0)
    return "the bytecode is not Lua 5.4's, format 0, with this build's sizes";
  lua_Integer i;
  lua_Number n;
  memcpy(&i, r->p + sizeof head, sizeof i);
  memcpy(&n, r->p + sizeof head + sizeof i, sizeof n);
  if (i != 0x5678 || n != (lua_Number)370.5) return "the bytecode's numbers are not in this machine's format";
  rd_skip(r, sizeof head + sizeof i + sizeof n + 1);   /* + the main closure's upvalue count */
  return NULL;
}

/* Reads the main function of the chunk; fills f (f->lines malloc'd). NULL, or what is wrong. */
static const char *read_main(rd *r, proto *f) {
  const char *bad = check_header(r);
  if (bad) return bad;
  f->end = r->end;
  size_t len;
  rd_str(r, &len);
  f->linedefined = rd_int(r);
  rd_int(r);
  rd_skip(r, 3);
  f->ncode = rd_int(r);
  f->code = r->p;
  rd_skip(r, 4 * (size_t)f->ncode);
  f->nk = rd_int(r);
  f->k = r->p;
  skip_constants(r, f->nk);
  rd_skip(r, 3 * (size_t)rd_int(r));
  for (int n = rd_int(r), i = 0; i < n && !r->bad; i++) skip_function(r, 1);
  int nline = rd_int(r);
  const signed char *delta = (const signed char *)r->p;
  rd_skip(r, (size_t)nline);
  if (r->bad) return "the bytecode is truncated";
  if (nline != f->ncode || f->ncode == 0) return "the function has no line information (a stripped chunk)";
  f->lines = malloc(sizeof(int) * (size_t)f->ncode);
  if (!f->lines) return "out of memory";
  /* lines: a signed delta from the previous line per instruction, or -128 for an absolute (pc, line) entry */
  int nabs = rd_int(r), line = f->linedefined;
  for (int pc = 0; pc < f->ncode && !r->bad; pc++) {
    if (delta[pc] != -128) { line += delta[pc]; f->lines[pc] = line; continue; }
    if (nabs-- <= 0 || rd_int(r) != pc) { r->bad = 1; break; }
    f->lines[pc] = line = rd_int(r);
  }
  for (; nabs > 0 && !r->bad; nabs--) { rd_int(r); rd_int(r); }
  f->nlocvars = rd_int(r);
  f->locvars = r->p;
  skip_locvars(r, f->nlocvars);
  return r->bad ? "the bytecode is malformed" : NULL;
}

/* Constant idx: 1 and its value in num, ival and isint when it is a number; 0 otherwise. */
static int const_num(const proto *f, int idx, double *num, long long *ival, int *isint) {
  rd r = {f->k, f->end, 0};
  skip_constants(&r, idx < f->nk ? idx : 0);
  if (idx >= f->nk || r.bad) return 0;
  int t = rd_byte(&r);
  if (t != K_INT && t != K_FLT) return 0;
  lua_Integer iv;
  lua_Number nv;
  if ((size_t)(r.end - r.p) < (t == K_INT ? sizeof iv : sizeof nv)) return 0;
  if (t == K_INT) { memcpy(&iv, r.p, sizeof iv); *ival = (long long)iv; *num = (double)iv; *isint = 1; }
  else { memcpy(&nv, r.p, sizeof nv); *num = (double)nv; *ival = 0; *isint = 0; }
  return 1;
}
/* The name of the local in register reg at pc (locals in scope take registers 0, 1, ... in their order); NULL when
 * reg holds no local (a temporary). */
static const char *local_at(const proto *f, int reg, int pc, size_t *len) {
  rd r = {f->locvars, f->end, 0};
  int active = 0;
  for (int i = 0; i < f->nlocvars && !r.bad; i++) {
    const char *name = rd_str(&r, len);
    int start = rd_int(&r), end = rd_int(&r);
    if (start > pc) break;
    if (pc < end && active++ == reg) return name ? name : "?";
  }
  return NULL;
}

/* ---- the site ---- */

typedef struct {
  char *why;
  size_t nwhy;
  const char *src;
  int line;
  lua_State *L;
  lua_Debug *ar;   /* the analysed function's frame */
  int fn, running; /* stack indices: the analysed function, the function running at level - 1 (item) */
  int slot;        /* the frame's slots below the running call's function: registers lua_getlocal can read */
  lg_cmp *out;     /* read_now is set there when a value is read */
} site;

static int reject(site *s, const char *fmt, ...) __attribute__((format(printf, 2, 3)));
static int reject(site *s, const char *fmt, ...) {
  if (!s->why || !s->nwhy) return 0;
  int n = s->line > 0 ? snprintf(s->why, s->nwhy, "%s:%d: ", s->src, s->line) : snprintf(s->why, s->nwhy, "%s: ", s->src);
  if (n >= 0 && (size_t)n < s->nwhy) {
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(s->why + n, s->nwhy - (size_t)n, fmt, ap);
    va_end(ap);
  }
  return 0;
}

/* Constant idx when it is a string, else NULL. */
static const char *const_str(const proto *f, int idx, size_t *len) {
  if (idx >= f->nk) return NULL;
  rd r = {f->k, f->end, 0};
  skip_constants(&r, idx);
  int t = rd_byte(&r);
  return !r.bad && (t == K_SHRSTR || t == K_LNGSTR) ? rd_str(&r, len) : NULL;
}

/* The method name of the CALL at pc when the SELF right before it loads a string constant as its method (NULL
 * otherwise): obj:item() has "item". */
static const char *method_of(const proto *f, int pc, size_t *len) {
  if (pc == 0) return NULL;
  uint32_t c = ins(f, pc), m = ins(f, pc - 1);
  if (I_OP(m) != L_SELF || I_A(m) != I_A(c) || !I_K(m)) return NULL;
  return const_str(f, I_C(m), len);
}

/* ---- values read now ---- */

/* Pushes the value the load chain first..last puts into register reg, read now: GETUPVAL reg or GETTABUP reg (an
 * upvalue, or a field of one), or MOVE reg from a register below the frame's top, then GETFIELD reg reg K. Every
 * field is read raw and must be there (so reading it runs no metamethod, and the same read in the code gives the
 * same value while nothing changes the tables). 1 and the value pushed; 0, nothing pushed, when it cannot be read
 * so. path: the chain as written (c.limit), also on failure. */
static int push_chain(const proto *f, site *s, int first, int last, int reg, char *path, size_t npath) {
  lua_State *L = s->L;
  uint32_t i = ins(f, first);
  int op = I_OP(i);
  size_t len, n;
  const char *name = NULL;
  snprintf(path, npath, "?");
  if (I_A(i) != reg) return 0;
  if (op == L_GETUPVAL || op == L_GETTABUP) name = lua_getupvalue(L, s->fn, I_B(i) + 1);
  else if (op == L_MOVE && I_B(i) < s->slot) name = lua_getlocal(L, s->ar, I_B(i) + 1);
  if (!name) return 0;
  s->out->read_now = 1;
  snprintf(path, npath, "%s", strcmp(name, "_ENV") == 0 ? "" : name);
  for (int pc = op == L_GETTABUP ? first : first + 1; pc <= last; pc++) {
    uint32_t g = ins(f, pc);
    int ok = pc == first || (I_OP(g) == L_GETFIELD && I_A(g) == reg && I_B(g) == reg);
    const char *key = ok ? const_str(f, I_C(g), &len) : NULL;
    n = strlen(path);
    if (key && n + 1 < npath) snprintf(path + n, npath - n, "%s%.*s", n ? "." : "", (int)len, key);
    if (!key || !lua_istable(L, -1)) { lua_pop(L, 1); return 0; }
    lua_pushlstring(L, key, len);
    int t = lua_rawget(L, -2);
    lua_remove(L, -2);
    if (t == LUA_TNIL) { lua_pop(L, 1); return 0; }
  }
  return 1;
}

/* Whether an instruction jumps to a pc in (lo, hi]. */
static int jumped_into(const proto *f, int lo, int hi) {
  for (int pc = 0; pc < f->ncode; pc++) {
    uint32_t i = ins(f, pc);
    int t1 = -1, t2 = -1;
    switch (I_OP(i)) {
    case L_JMP: t1 = pc + 1 + I_SJ(i); break;
    case L_FORLOOP: case L_TFORLOOP: t1 = pc + 1 - I_BX(i); break;
    case L_FORPREP: t1 = pc + 1 + I_BX(i); t2 = t1 + 1; break;
    case L_TFORPREP: t1 = pc + 1 + I_BX(i); break;
    default: break;
    }
    if ((t1 > lo && t1 <= hi) || (t2 > lo && t2 <= hi)) return 1;
  }
  return 0;
}

/* Whether the value on top of the stack, called, would run the function running at level - 1 (item): directly, or
 * through a chain of __call metamethods (read raw, as Lua does); pops it. A value Lua cannot call raises an error
 * instead of running anything: 0. -1 when the chain is too long to follow. */
static int calls_running(site *s) {
  lua_State *L = s->L;
  int r = -1;
  for (int n = 0; n < 8 && r < 0; n++) {
    if (lua_isfunction(L, -1)) r = lua_rawequal(L, -1, s->running);
    else if (!lua_getmetatable(L, -1)) r = 0;
    else {
      lua_pushliteral(L, "__call");
      lua_rawget(L, -2);
      lua_remove(L, -2);
      lua_remove(L, -2);
    }
  }
  lua_pop(L, 1);
  return r;
}

static int safe_load(int op) {
  return op == L_MOVE || op == L_LOADI || op == L_LOADF || op == L_LOADK || op == L_LOADFALSE || op == L_LOADTRUE ||
         op == L_LOADNIL || op == L_GETUPVAL;
}

/* Whether the plain CALL at pc (function in register a) is not the call running. If it were, its function would be
 * the value its load chain reads now: between the chain and the call there are only loads that run no code, write
 * neither a nor the chain's source and are not jumped into, and the function running (item) changed nothing since.
 * So when that value would not run item, the call is not the running one, wherever it stands on the line. */
static int not_running(const proto *f, site *s, int pc) {
  unsigned char written[256] = {0};
  int a = I_A(ins(f, pc)), q = pc - 1;
  for (; q >= 0; q--) {   /* the arguments' loads, back to the last write of a */
    uint32_t i = ins(f, q);
    int op = I_OP(i), lo = I_A(i), hi = op == L_LOADNIL ? I_A(i) + I_B(i) : I_A(i);
    if (lo <= a && a <= hi) break;
    if (!safe_load(op)) return 0;
    for (int r = lo; r <= hi && r < 256; r++) written[r] = 1;
  }
  int first = q;
  while (first > 0 && I_OP(ins(f, first)) == L_GETFIELD && I_A(ins(f, first)) == a && I_B(ins(f, first)) == a) first--;
  if (first < 0) return 0;
  uint32_t i = ins(f, first);
  if (I_OP(i) != L_GETUPVAL && I_OP(i) != L_GETTABUP && (I_OP(i) != L_MOVE || I_B(i) == a || written[I_B(i)]))
    return 0;
  int before = first > 0 ? I_OP(ins(f, first - 1)) : -1;   /* a test right before it would skip the chain's start */
  if ((before >= L_EQ && before <= L_TESTSET) || before == L_LFALSESKIP || jumped_into(f, first, pc)) return 0;
  char path[64];
  return push_chain(f, s, first, q, a, path, sizeof path) && calls_running(s) == 0;
}
static int is_item_call(const proto *f, int pc) {
  size_t len;
  const char *m = method_of(f, pc, &len);
  return m && len == 4 && memcmp(m, "item", 4) == 0;
}

/* The pc of the obj:item() call running on the site's line, whose called function sits in register `slot`; -1 after
 * rejecting. Other calls on the line may use the same register (x:max():item()): they must be method calls under
 * another name, which are taken not to be item itself. */
static int find_call(const proto *f, site *s, int slot) {
  int item = -1, nitem = 0, pinned = 0, other = 0;
  size_t len;
  for (int pc = 0; pc < f->ncode; pc++) {
    uint32_t i = ins(f, pc);
    if (f->lines[pc] != s->line || (I_OP(i) != L_CALL && I_OP(i) != L_TAILCALL)) continue;
    int is_item = is_item_call(f, pc);
    nitem += is_item;
    if (I_A(i) != slot) continue;
    if (is_item) { item = pc; pinned++; }
    else if (!method_of(f, pc, &len) && !not_running(f, s, pc)) other++;
  }
  if (nitem == 0) return reject(s, "no call obj:item() on this line (item() is analysed when called as a method)") - 1;
  if (nitem > 1) return reject(s, "several item() calls on one line") - 1;
  if (pinned != 1)
    return reject(s, "the running call is not this line's obj:item() (a metamethod or another function)") - 1;
  if (other) return reject(s, "the running call cannot be told apart from another function call on this line") - 1;
  return item;
}

/* What the instruction i that consumes the value in register r does with it, for a reason. */
static const char *use_of(uint32_t i, int r) {
  int op = I_OP(i);
  if ((op >= L_ADDI && op <= L_BNOT) || op == L_LEN) return "is used in arithmetic";
  switch (op) {
  case L_CONCAT: return "is concatenated";
  case L_MOVE: return "is copied to a variable";
  case L_SETUPVAL: return "is stored in an upvalue";
  case L_SETTABLE: if (I_B(i) == r) return "is used as a table key";
    /* fall through */
  case L_SETTABUP: case L_SETI: case L_SETFIELD: case L_SETLIST: return "is stored in a table or a global";
  case L_GETTABLE: if (I_C(i) == r) return "is used as a table key";
    /* fall through */
  case L_GETI: case L_GETFIELD: case L_SELF: return "is indexed";
  case L_RETURN: case L_RETURN1: return "is returned";
  case L_CALL: case L_TAILCALL: return "is passed to a function";
  case L_TESTSET: return "is the value of an 'and' or 'or' expression";
  case L_NOT: return "is turned into a boolean value by 'not'";
  case L_EQ: case L_LT: case L_LE: return "is compared with a value that is not a constant";
  case L_EQK: return "is compared with a constant that is not a number";
  default: return "is not compared with a constant right after the call";
  }
}

/* A constant load (LOADI, LOADF, LOADK of a number) into out->k; 0 if i is none. */
static int load_const(const proto *f, uint32_t i, lg_cmp *out) {
  switch (I_OP(i)) {
  case L_LOADI: out->k = out->ik = I_SBX(i); out->k_is_int = 1; return 1;
  case L_LOADF: out->k = I_SBX(i); out->k_is_int = 0; return 1;
  case L_LOADK: return const_num(f, I_BX(i), &out->k, &out->ik, &out->k_is_int);
  default: return 0;
  }
}

/* The comparison of register r at pc into out->op (the constant and the sense are the caller's): NULL, or what pc
 * does with r instead (t: the register holding the constant when it was loaded into one, else -1). */
static const char *comparison(const proto *f, int pc, int r, int t, lg_cmp *out) {
  static const lg_cmp_op imm[] = {LG_CMP_EQ, LG_CMP_LT, LG_CMP_LE, LG_CMP_GT, LG_CMP_GE};
  uint32_t i = ins(f, pc);
  int op = I_OP(i);
  if (t < 0 && I_A(i) == r && op >= L_EQI && op <= L_GEI) {
    out->op = imm[op - L_EQI];
    out->k = out->ik = I_SB(i);
    out->k_is_int = !I_C(i);   /* C: the immediate was written as a float */
    return NULL;
  }
  if (t < 0 && I_A(i) == r && op == L_EQK && const_num(f, I_B(i), &out->k, &out->ik, &out->k_is_int)) {
    out->op = LG_CMP_EQ;
    return NULL;
  }
  if (t < 0 && I_A(i) == r && op == L_TEST) { out->op = LG_CMP_TRUTH; return NULL; }
  if (t >= 0 && (op == L_EQ || op == L_LT || op == L_LE) && I_A(i) != I_B(i) &&
      (I_A(i) == r || I_A(i) == t) && (I_B(i) == r || I_B(i) == t)) {
    int swapped = I_A(i) == t;   /* the constant on the left: K < v is v > K */
    out->op = op == L_EQ ? LG_CMP_EQ : op == L_LT ? (swapped ? LG_CMP_GT : LG_CMP_LT) : (swapped ? LG_CMP_GE : LG_CMP_LE);
    return NULL;
  }
  return use_of(i, r);
}

/* A boolean made from a comparison (`local b = v > 0`): its jumps land on LFALSESKIP / LOADTRUE. */
static int is_boolean_value(const proto *f, int pc) {
  if (pc >= f->ncode) return 0;
  int op = I_OP(ins(f, pc));
  return op == L_LFALSESKIP || (op == L_LOADTRUE && pc > 0 && I_OP(ins(f, pc - 1)) == L_LFALSESKIP);
}

/* Whether the jump at j to target decides a loop around the call at pc: it goes back (repeat ... until, goto) or to
 * a CLOSE then back (repeat with captured locals), or it lands right after a loop's back jump (to at or before the
 * call) and so leaves that loop (while, break). */
static int decides_loop(const proto *f, int j, int target, int pc) {
  if (target <= j) return 1;
  if (target + 1 < f->ncode && I_OP(ins(f, target)) == L_CLOSE && I_OP(ins(f, target + 1)) == L_JMP &&
      target + 2 + I_SJ(ins(f, target + 1)) <= pc) return 1;
  if (target - 1 == j) return 0;
  uint32_t b = ins(f, target - 1);
  switch (I_OP(b)) {
  case L_JMP: return target + I_SJ(b) <= pc;
  case L_FORLOOP: case L_TFORLOOP: return target - I_BX(b) <= pc;
  default: return 0;
  }
}

/* A constant on the left of an order comparison that is not an immediate (`2.5 >= v`) is loaded before the call:
 * register o, written last by a constant load before the receiver's evaluation (which writes only registers above
 * o). 1 and out->k when that load is a number; 0 when it is not; -1 when o is not such a constant. */
static int loaded_before(const proto *f, int pc, int o, lg_cmp *out) {
  size_t len;
  if (local_at(f, o, pc, &len)) return -1;
  for (int q = pc - 1; q >= 0 && q >= pc - 8; q--) {
    uint32_t i = ins(f, q);
    int op = I_OP(i);
    if (I_A(i) == o) return op == L_LOADK || op == L_LOADI || op == L_LOADF ? load_const(f, i, out) : -1;
    if (I_A(i) < o || (op != L_SELF && op != L_MOVE && op != L_GETUPVAL && op != L_GETTABUP && op != L_GETFIELD &&
                       op != L_GETTABLE && op != L_GETI)) return -1;
  }
  return -1;
}

/* The other operand of the comparison, loaded by the chain first..last into register t (see push_chain), read now
 * into out (k, k_from_upvalue, k_path): NULL, or what is wrong with it. */
static const char *upvalue_const(const proto *f, site *s, int first, int last, int t, lg_cmp *out) {
  lua_State *L = s->L;
  if (!push_chain(f, s, first, last, t, out->k_path, sizeof out->k_path))
    return "cannot be read now without metamethods (a missing field, or a value that is not a table on the way)";
  int num = lua_type(L, -1) == LUA_TNUMBER;
  out->k_is_int = num && lua_isinteger(L, -1);
  out->ik = out->k_is_int ? (long long)lua_tointeger(L, -1) : 0;
  out->k = out->k_is_int ? (double)out->ik : num ? (double)lua_tonumber(L, -1) : 0;
  out->k_from_upvalue = 1;
  lua_pop(L, 1);
  return num ? NULL : "is not a number";
}

/* Whether register r may still be read from pc on: the value is dead when an instruction writes r without reading
 * it, or the function returns nothing, before anything reads r; anything else this scan does not know is a read. */
static int may_read(const proto *f, int pc, int r) {
  size_t len;
  if (pc >= f->ncode || local_at(f, r, pc, &len)) return 1;
  for (int n = 0; n < 16 && pc >= 0 && pc < f->ncode; n++) {
    uint32_t i = ins(f, pc);
    int op = I_OP(i), a = I_A(i), b = I_B(i), c = I_C(i), rk = !I_K(i) && c == r;
    switch (op) {
    case L_LOADI: case L_LOADF: case L_LOADK: case L_LOADFALSE: case L_LOADTRUE: case L_GETUPVAL: case L_GETTABUP:
    case L_CLOSURE:
      if (a == r) return 0;
      break;
    case L_MOVE: case L_GETFIELD: case L_GETI: case L_NOT: case L_UNM: case L_LEN:
      if (b == r) return 1;
      if (a == r) return 0;
      break;
    case L_GETTABLE:
      if (b == r || c == r) return 1;
      if (a == r) return 0;
      break;
    case L_SETTABUP: if (rk) return 1; break;
    case L_SETFIELD: case L_SETI: if (a == r || rk) return 1; break;
    case L_JMP: pc += I_SJ(i); break;
    case L_RETURN0: return 0;
    case L_RETURN: return b != 1;
    default: return 1;
    }
    pc++;
  }
  return 1;
}

/* What the code from pc on does that is more than returning values already computed (NULL: nothing): register
 * moves, loads of constants and upvalues, and forward jumps up to a return are all it may run, and it may not read
 * item()'s value (register r, until overwritten). Such code has no effect and calls nothing, so grace may run the
 * function with item() forced to give this side, to record its path before a call takes it. *line: where. */
static const char *more_than_return(const proto *f, int pc, int r, int *line) {
  int value = 1, tbc = 0;   /* value: r still holds item()'s value */
  for (int q = 0; q < f->ncode; q++) tbc |= I_OP(ins(f, q)) == L_TBC;
  for (int n = 0; n < 64; n++, pc++) {
    if (pc < 0 || pc >= f->ncode) return "runs off the function's code";
    uint32_t i = ins(f, pc);
    int op = I_OP(i), a = I_A(i), b = I_B(i);
    *line = f->lines[pc];
    switch (op) {
    case L_MOVE:
      if (value && b == r) return "uses the value item() returned";
      value &= a != r;
      break;
    case L_LOADI: case L_LOADF: case L_LOADK: case L_LOADFALSE: case L_LOADTRUE: case L_GETUPVAL:
      value &= a != r;
      break;
    case L_LOADKX:
      value &= a != r;
      pc++;   /* its EXTRAARG */
      break;
    case L_LOADNIL: value &= !(a <= r && r <= a + b); break;
    case L_JMP:
      if (I_SJ(i) < 0) return "loops";
      pc += I_SJ(i);
      break;
    case L_RETURN0: return NULL;
    case L_RETURN1: return value && a == r ? "returns the value item() returned" : NULL;
    case L_RETURN:
      if (b == 0) return "returns the results of a call or of '...'";
      if (value && a <= r && r <= a + b - 2) return "returns the value item() returned";
      return I_K(i) && tbc ? "closes to-be-closed variables as it returns" : NULL;
    case L_CALL: case L_TAILCALL: case L_TFORCALL: return "calls a function";
    case L_SETUPVAL: case L_SETTABUP: case L_SETTABLE: case L_SETI: case L_SETFIELD: case L_SETLIST:
      return "assigns a table field, a global or an upvalue";
    case L_GETTABUP: case L_GETTABLE: case L_GETI: case L_GETFIELD: case L_SELF:
      return "reads a global or a table field (an __index metamethod may run)";
    case L_CLOSE: case L_TBC: return "closes to-be-closed variables (a __close metamethod may run)";
    case L_NEWTABLE: case L_CLOSURE: return "makes a table or a function";
    case L_EQ: case L_LT: case L_LE: case L_EQK: case L_EQI: case L_LTI: case L_LEI: case L_GTI: case L_GEI:
    case L_TEST: case L_TESTSET:
      return "tests another condition";
    case L_FORPREP: case L_FORLOOP: case L_TFORPREP: case L_TFORLOOP: return "loops";
    default: return "computes (arithmetic, a length, a concatenation: metamethods may run)";
    }
  }
  return "is too long to follow";
}

/* why (n bytes): "" when the side of the branch starting at pc may be recorded ahead (see more_than_return), else
 * the reason with the place of the branch. */
static void ahead(const proto *f, site *s, int pc, int r, char *why, size_t n) {
  int line = s->line;
  const char *what = more_than_return(f, pc, r, &line);
  why[0] = 0;
  if (what)
    snprintf(why, n, "%s:%d: the branch's other way is not recorded before a call takes it: its code %s (line %d); "
             "only an early return of values already computed is", s->src, s->line, what, line);
}

/* The use of the result of the item() call at pc: 1 and *out when it is only compared with a constant to decide a
 * jump. */
static int analyse(const proto *f, site *s, int pc, lg_cmp *out) {
  uint32_t call = ins(f, pc);
  int r = I_A(call), p = pc + 1, t = -1, kchain = -1;
  size_t len;
  if (I_OP(call) == L_TAILCALL) return reject(s, "the value of item() is returned");
  if (I_C(call) == 0)
    return reject(s, "the value of item() is passed on as a last argument, table item or return value");
  if (I_C(call) != 2) return reject(s, "the value of item() is %s", I_C(call) == 1 ? "not used" : "assigned to several variables");
  const char *name = local_at(f, r, p, &len);
  if (name) return reject(s, "the value of item() is stored in the local '%.*s'", (int)len, name);
  out->line = s->line;
  if (p >= f->ncode) return reject(s, "the value of item() is not used");
  uint32_t i = ins(f, p);
  int num = 1;
  if (p + 1 < f->ncode && I_A(i) != r && (I_OP(i) == L_LOADI || I_OP(i) == L_LOADF || I_OP(i) == L_LOADK)) {
    t = I_A(i);   /* a constant loaded right after the call: v < 1000 */
    num = load_const(f, i, out);
    i = ins(f, ++p);
  } else if (p + 1 < f->ncode && I_A(i) != r && (I_OP(i) == L_GETUPVAL || I_OP(i) == L_GETTABUP)) {
    t = I_A(i);   /* an upvalue or a field of one loaded right after the call: v > c.limit */
    kchain = p;
    while (p + 2 < f->ncode && I_OP(ins(f, p + 1)) == L_GETFIELD && I_A(ins(f, p + 1)) == t && I_B(ins(f, p + 1)) == t)
      p++;
    i = ins(f, ++p);
  } else if ((I_OP(i) == L_LT || I_OP(i) == L_LE) && (I_A(i) == r) != (I_B(i) == r)) {
    t = I_A(i) == r ? I_B(i) : I_A(i);   /* or right before it: 2.5 >= v */
    num = loaded_before(f, pc, t, out);
    if (num < 0) t = -1;
  }
  const char *use = comparison(f, p, r, t, out);
  if (!use && !num) use = "is compared with a constant that is not a number";
  if (!use && kchain >= 0 && (use = upvalue_const(f, s, kchain, p - 1, t, out)))
    return reject(s, "the value of item() is compared with %s, which %s", out->k_path, use);
  if (use && kchain >= 0) { t = -1; i = ins(f, kchain); }   /* name what uses the value, as for other loads */
  if (use) {
    for (int q = p; t < 0 && q < f->ncode && q < p + 8 && (I_OP(i) == L_MOVE || I_OP(i) == L_LOADI ||
         I_OP(i) == L_LOADK || I_OP(i) == L_GETUPVAL || I_OP(i) == L_GETTABUP || I_OP(i) == L_GETFIELD) && I_A(i) > r && I_B(i) != r; q++)
      i = ins(f, q + 1);   /* other operands loaded after the call: name the instruction that uses the value */
    return reject(s, "the value of item() %s", t < 0 ? use_of(i, r) : use);
  }
  int j = p + 1;
  if (j >= f->ncode || I_OP(ins(f, j)) != L_JMP) return reject(s, "the comparison of item()'s value decides no jump");
  int target = j + 1 + I_SJ(ins(f, j));
  if (target < 0 || target > f->ncode) return reject(s, "cannot analyse the function: a jump out of its code");
  if (is_boolean_value(f, j + 1) || is_boolean_value(f, target))
    return reject(s, "the comparison of item()'s value is kept as a boolean value, not only branched on");
  if (out->op == LG_CMP_TRUTH && (may_read(f, j + 1, r) || may_read(f, target, r)))
    return reject(s, "the value of item() is the value of an 'and' or 'or' expression");
  if (decides_loop(f, j, target, pc))
    return reject(s, "the comparison of item()'s value decides a loop (a while or repeat condition, or a break)");
  /* Lua takes the jump when the outcome equals the k bit: the fall-through is the outcome with k 0, else its negation */
  out->negate = I_K(ins(f, p));
  if (out->negate && (out->op == LG_CMP_EQ || out->op == LG_CMP_NE)) {
    out->op = out->op == LG_CMP_EQ ? LG_CMP_NE : LG_CMP_EQ;
    out->negate = 0;
  }
  ahead(f, s, j + 1, r, out->ahead_why[1], sizeof out->ahead_why[1]);   /* Lua falls through: the comparison holds */
  ahead(f, s, target, r, out->ahead_why[0], sizeof out->ahead_why[0]);
  return 1;
}

typedef struct {
  unsigned char *p;
  size_t n, cap;
  int oom;
} buf;

static int writer(lua_State *L, const void *data, size_t sz, void *ud) {
  buf *b = ud;
  if (sz > b->cap - b->n) {
    size_t cap = b->cap ? b->cap : 4096;
    while (cap - b->n < sz && cap < SIZE_MAX / 2) cap *= 2;
    unsigned char *q = cap - b->n >= sz ? realloc(b->p, cap) : NULL;
    if (!q) { b->oom = 1; return 1; }
    b->p = q;
    b->cap = cap;
  }
  memcpy(b->p + b->n, data, sz);
  b->n += sz;
  return 0;
}

int lg_cmp_site(lua_State *L, int level, lg_cmp *out, char *why, size_t nwhy) {
  lua_Debug ar, run;
  site s = {why, nwhy, "?", 0, L, &ar, 0, 0, 0, out};
  if (why && nwhy) why[0] = '\0';
  memset(out, 0, sizeof *out);
  if (level < 1 || !lua_getstack(L, level, &ar) || !lua_getstack(L, level - 1, &run))
    return reject(&s, "no function at stack level %d", level);
  lua_getinfo(L, "f", &run);
  s.running = lua_gettop(L);
  lua_getinfo(L, "Slf", &ar);
  s.fn = lua_gettop(L);
  s.src = ar.short_src;
  s.line = ar.currentline;
  if (!lua_isfunction(L, -1) || lua_iscfunction(L, -1) || ar.currentline <= 0) {
    int c = lua_iscfunction(L, -1);
    lua_pop(L, 2);
    return reject(&s, c ? "item() is called from a C function" : "the calling function has no line information");
  }
  /* the frame's slots below the called function: the A of the running CALL */
  while (s.slot < 256 && lua_getlocal(L, &ar, s.slot + 1)) { lua_pop(L, 1); s.slot++; }
  buf b = {NULL, 0, 0, 0};
  int failed = lua_dump(L, writer, &b, 0);
  proto f;
  memset(&f, 0, sizeof f);
  rd r = {b.p, b.p + b.n, 0};
  const char *bad = b.oom ? "out of memory" : failed ? "the function cannot be dumped" : read_main(&r, &f);
  int ok = 0;
  if (bad) reject(&s, "cannot analyse the function: %s", bad);
  else {
    int pc = find_call(&f, &s, s.slot);
    if (pc >= 0) ok = analyse(&f, &s, pc, out);
  }
  lua_pop(L, 2);
  free(f.lines);
  free(b.p);
  return ok;
}
