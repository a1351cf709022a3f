/* lgrace_guard.c: the host guard of a compiled Lua function (see lgrace_guard.h): where its captured tensors and
 * the numbers, strings and functions a trace depends on live (paths from its arguments, upvalues and globals, through
 * tables and their metatables), the walk that finds them, snapshots that guard a class as one value, and the checks
 * that re-read every path on each call. */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include "lua/lgrace_guard.h"

const char lg_meta_key, lg_nil_read, lg_snap_key, lg_len_key;

/* ---- snapshots: one guard for a whole table reached through a metatable (a class: its methods and fields) ----
 * A snapshot is a table {key = value} of the table's numbers, strings, booleans and functions (under string or
 * number keys) plus lg_snap_key = their count: it holds while the table has exactly those. One snapshot per class
 * instead of a guard per method keeps the check of a call with nn modules short. */
static int is_snapshot(lua_State *L, int i) {
  if (!lua_istable(L, i)) return 0;
  lua_pushlightuserdata(L, (void *)&lg_snap_key);
  int yes = lua_rawget(L, i) != LUA_TNIL;
  lua_pop(L, 1);
  return yes;
}

static int snapshot_kind(lua_State *L, int key, int value) {
  int kt = lua_type(L, key), vt = lua_type(L, value);
  return (kt == LUA_TSTRING || kt == LUA_TNUMBER) &&
         (vt == LUA_TNUMBER || vt == LUA_TSTRING || vt == LUA_TBOOLEAN || vt == LUA_TFUNCTION);
}

/* Two values are the same for a guard: raw equality, an integer and a float apart. */
static int same_scalar(lua_State *L, int a, int b) {
  if (lua_type(L, a) == LUA_TNUMBER && lua_type(L, b) == LUA_TNUMBER && !lua_isinteger(L, a) && !lua_isinteger(L, b)) {
    lua_Number x = lua_tonumber(L, a), y = lua_tonumber(L, b);   /* a float bit for bit: NaN is itself, -0.0 not 0.0 */
    return memcmp(&x, &y, sizeof x) == 0;
  }
  return lua_rawequal(L, a, b) && (lua_type(L, a) != LUA_TNUMBER || lua_isinteger(L, a) == lua_isinteger(L, b));
}

/* Whether the table at t still holds what the snapshot at snap recorded, and nothing more of its kinds. */
static int snapshot_holds(lua_State *L, int t, int snap) {
  if (!lua_istable(L, t)) return 0;
  lua_Integer count = 0;
  lua_pushnil(L);
  while (lua_next(L, t)) {
    if (snapshot_kind(L, -2, -1)) {
      count++;
      lua_pushvalue(L, -2);
      lua_rawget(L, snap);
      int same = same_scalar(L, -1, -2);
      lua_pop(L, 1);
      if (!same) { lua_pop(L, 2); return 0; }
    }
    lua_pop(L, 1);
  }
  lua_pushlightuserdata(L, (void *)&lg_snap_key);
  lua_rawget(L, snap);
  int all = lua_tointeger(L, -1) == count;
  lua_pop(L, 1);
  return all;
}

/* Two expectations are the same (for h_guard_same): raw equality, or two snapshots of the same contents. */
int lg_same_expectation(lua_State *L, int a, int b) {
  a = lua_absindex(L, a), b = lua_absindex(L, b);
  if (lua_rawequal(L, a, b)) return 1;
  if (!is_snapshot(L, a) || !is_snapshot(L, b)) return 0;
  int same = 1;
  lua_pushnil(L);
  while (same && lua_next(L, a)) {   /* the count is one of the entries (under lg_snap_key), so equal sizes follow */
    lua_pushvalue(L, -2);
    lua_rawget(L, b);
    same = same_scalar(L, -1, -2);
    lua_pop(L, 2);
  }
  if (!same) lua_pop(L, 1);
  return same;
}

/* Whether the value at got passes a guard expecting the value at want (a tensor by identity, a snapshot by contents,
 * anything else by raw equality). */
int lg_guard_holds(lua_State *L, int got, int want) {
  got = lua_absindex(L, got), want = lua_absindex(L, want);
  grace_tensor *a = lg_totensor(L, got), *b = lg_totensor(L, want);
  if (a || b) return a == b;
  if (is_snapshot(L, want)) return snapshot_holds(L, got, want);
  return same_scalar(L, got, want);
}

/* ---- paths: where a captured tensor or a guarded number lives, re-read on every call ----
 * A path is a table {root, k1, k2, ...}: root "a<i>" (argument i), "u<i>" (upvalue i of the function),
 * "g" (a global: k1 is its name); then the keys of nested tables (raw access), "u<i>" for an upvalue
 * of a function met on the way, &lg_meta_key for a table's metatable, or &lg_len_key (last) for a table's length
 * (`#t` without __len: what an append changes, and no path of its elements shows). */

/* Pushes the function's _ENV (the global table when it has none). */
static void push_env(lua_State *L, int fn) {
  const char *up = NULL;
  for (int i = 1; (up = lua_getupvalue(L, fn, i)) != NULL; i++) {
    if (!strcmp(up, "_ENV")) return;
    lua_pop(L, 1);
  }
  lua_pushglobaltable(L);
}

/* How many leading elements paths a and b share. */
lua_Integer lg_shared_prefix(lua_State *L, int a, int b) {
  a = lua_absindex(L, a), b = lua_absindex(L, b);
  lua_Integer na = (lua_Integer)lua_rawlen(L, a), nb = (lua_Integer)lua_rawlen(L, b), k = 0;
  while (k < na && k < nb) {
    lua_rawgeti(L, a, k + 1);
    lua_rawgeti(L, b, k + 1);
    int eq = lua_rawequal(L, -1, -2);
    lua_pop(L, 2);
    if (!eq) break;
    k++;
  }
  return k;
}

/* ---- the check of every call: a guard compiled once into a flat program ----
 * Re-reading each path element by element from its Lua table and comparing through lg_guard_holds costs several
 * Lua API calls per element and per value: more host time than replaying the program it guards. So lg_push_guard
 * compiles the paths once into a flat list of ops and each expected value into a C value compared in place. A
 * check keeps the values along the current path on the Lua stack: each path starts from the prefix it shares with
 * the one before (the paths come in the walk's depth-first order) and reads only the rest, each element pushed
 * above the last, nothing popped: so where every value lies is known when compiling, and no op sets the top but an
 * occasional compaction (the current prefix moved down) that bounds the stack. The distinct keys are pushed once
 * per call below base, and a field read is one lua_pushvalue of its key and one lua_rawget. What C cannot decide (a
 * tensor guard given another userdata, a snapshot whose table changed or was rehashed) goes through
 * lg_guard_holds. */
enum { ST_ARG, ST_UP, ST_ENV, ST_INT, ST_KEY, ST_META, ST_LEN };   /* the elements of a path */
enum { OP_MOVE, OP_TOP, OP_FIELD, OP_STEP, OP_CHECK, OP_LEN };     /* ops: compact, read, compare */
#define LG_GUARD_SLOTS 256   /* pushes between two compactions of the stack of a check */
enum { EX_TENSOR, EX_SNAP, EX_INT, EX_FLOAT, EX_BOOL, EX_NIL, EX_STR, EX_REF };   /* expectation kinds */

typedef struct gop {
  int op;
  int t;           /* slots from base: OP_FIELD/OP_STEP/OP_LEN: the value read; OP_CHECK: the value compared; OP_MOVE:
                    * where it goes (from slot i); OP_TOP: the new top */
  int dst;         /* OP_FIELD/OP_STEP: the slot pushed; OP_CHECK: the top */
  int path;        /* OP_CHECK/OP_LEN: the path (from 0); OP_FIELD: the path whose value it reads last, or -1 */
  int kind, up;    /* OP_FIELD/OP_STEP: the element (ST_*); ST_KEY: "u<up>" is an upvalue of a function, -1: no */
  lua_Integer i;   /* ST_ARG/ST_UP: the argument or upvalue; ST_INT: the key; ST_KEY: the key's number (from 0);
                    * OP_MOVE: the slot moved; OP_LEN: the length expected */
} gop;

typedef struct gexpect {
  int kind, type;   /* type: EX_REF's Lua type */
  union { lua_Integer i; lua_Number f; int b; const void *p; } v;   /* p: a string's bytes, a tensor's userdata */
  size_t len;       /* EX_STR */
} gexpect;

/* An entry of a snapshot, in the order lua_next last gave the table's entries (kobj: the key's string object, whose
 * address identifies it; NULL for a number). */
typedef struct gsnapent {
  gexpect key, value;
  const void *kobj;
} gsnapent;

typedef struct gpath {
  gexpect want;
  int snap, nsnap;   /* EX_SNAP: its entries (snapents[snap...]); snap_known: their order is learned */
  int snap_known;
} gpath;

typedef struct gprog {
  int npaths, nops, nkeys, maxlen, limit;   /* limit: the highest slot */
  gpath *paths;
  gop *ops;
  gsnapent *snapents;
  int *slots;             /* when compiling: the slot of the value after d elements of the current path */
  unsigned char *types;   /* scratch of a check: the Lua type in each slot (a check runs no Lua code) */
} gprog;

/* The guard table's slots. */
enum { G_PATHS = 1, G_EXPECT, G_COUNT, G_PROG, G_KEYS, G_ANCHORS };

/* The expectation of the value at v, for a compare in C: the C value of a number or boolean (an integer apart from
 * a float, as same_scalar), a string's bytes, the address of anything compared by identity (the value itself kept
 * alive by the caller: the expect table, or the anchors of a snapshot's learned order). */
static void expect_of(lua_State *L, int v, gexpect *e) {
  v = lua_absindex(L, v);
  int ty = lua_type(L, v);
  e->type = ty;
  e->len = 0;
  if (lg_is_tensor(L, v)) { e->kind = EX_TENSOR; e->v.p = lua_touserdata(L, v); }
  else if (is_snapshot(L, v)) e->kind = EX_SNAP;
  else if (ty == LUA_TNUMBER && lua_isinteger(L, v)) { e->kind = EX_INT; e->v.i = lua_tointeger(L, v); }
  else if (ty == LUA_TNUMBER) { e->kind = EX_FLOAT; e->v.f = lua_tonumber(L, v); }
  else if (ty == LUA_TBOOLEAN) { e->kind = EX_BOOL; e->v.b = lua_toboolean(L, v); }
  else if (ty == LUA_TNIL) e->kind = EX_NIL;
  else if (ty == LUA_TSTRING) { e->kind = EX_STR; e->v.p = lua_tolstring(L, v, &e->len); }
  else { e->kind = EX_REF; e->v.p = lua_topointer(L, v); }
}

/* The element j of the path at path, into o (kind, up, i); a key gets a number in ids (key -> number) and keys. */
static void compile_element(lua_State *L, int path, lua_Integer j, int ids, int keys, gop *o) {
  lua_rawgeti(L, path, j);
  const void *mark = lua_touserdata(L, -1);
  o->up = -1;
  o->i = 0;
  if (j == 1) {   /* the root: "a<i>", "u<i>" or "g" (as push_root) */
    const char *root = lua_tostring(L, -1);
    o->kind = root[0] == 'a' ? ST_ARG : root[0] == 'u' ? ST_UP : ST_ENV;
    o->i = atoi(root + 1);
  } else if (mark == &lg_meta_key) {
    o->kind = ST_META;
  } else if (mark == &lg_len_key) {
    o->kind = ST_LEN;
  } else if (lua_isinteger(L, -1)) {
    o->kind = ST_INT;
    o->i = lua_tointeger(L, -1);
  } else {   /* as step: a key "u<i>" names an upvalue when the value there is a function */
    o->kind = ST_KEY;
    if (lua_type(L, -1) == LUA_TSTRING && lua_tostring(L, -1)[0] == 'u') o->up = atoi(lua_tostring(L, -1) + 1);
    lua_pushvalue(L, -1);
    if (lua_rawget(L, ids) == LUA_TNIL) {
      lua_Integer n = (lua_Integer)lua_rawlen(L, keys);
      lua_pushvalue(L, -2); lua_rawseti(L, keys, n + 1);
      lua_pushvalue(L, -2); lua_pushinteger(L, n); lua_rawset(L, ids);
      lua_pushinteger(L, n);
    }
    o->i = lua_tointeger(L, -1);
    lua_pop(L, 1);
  }
  lua_pop(L, 1);
}

/* The sizes of a program for the n paths at paths (ops: one per element and path, and the compactions; snapshot
 * entries; the longest path). */
static void program_sizes(lua_State *L, int paths, int expect, int n, size_t *ops, size_t *snapents, int *maxlen) {
  int top = lua_gettop(L);
  *ops = *snapents = 0, *maxlen = 0;
  for (int i = 1; i <= n; i++) {
    lua_rawgeti(L, paths, i);
    int len = (int)lua_rawlen(L, -1);
    *ops += (size_t)len + 1;
    if (len > *maxlen) *maxlen = len;
    lua_rawgeti(L, expect, i);
    if (is_snapshot(L, top + 2)) {
      lua_pushlightuserdata(L, (void *)&lg_snap_key);
      lua_rawget(L, top + 2);
      *snapents += (size_t)lua_tointeger(L, -1);
    }
    lua_settop(L, top);
  }
  *ops += (*ops / LG_GUARD_SLOTS + 1) * ((size_t)*maxlen + 1);
}

/* Appends the ops that move the first d values of the current path down to slots 1..d and make d the top. */
static void compact(gprog *p, int *top, int d) {
  for (int k = 1; k <= d; k++)
    if (p->slots[k] != k) p->ops[p->nops++] = (gop){.op = OP_MOVE, .t = k, .i = p->slots[k]}, p->slots[k] = k;
  p->ops[p->nops++] = (gop){.op = OP_TOP, .t = d};
  *top = d;
}

/* Appends the ops of path i (at path; the paths before and after at prev and next, or 0): reads of the elements it
 * does not share with the one before, then its compare (a length that no later path reads through: compared
 * without a push). */
static void compile_path(lua_State *L, gprog *p, int i, int path, int prev, int next, int ids, int keys, int *top) {
  int len = (int)lua_rawlen(L, path), d = 0;
  if (prev) {
    lua_Integer k = lg_shared_prefix(L, prev, path);
    d = (int)(k < len ? k : len);
  }
  lua_Integer next_shared = next ? lg_shared_prefix(L, next, path) : 0;
  int fuse = 0;
  if (d < len && p->paths[i].want.kind == EX_INT && next_shared < len) {
    lua_rawgeti(L, path, len);
    fuse = lua_touserdata(L, -1) == &lg_len_key;
    lua_pop(L, 1);
  }
  for (; d < len - fuse; d++) {
    if (*top >= p->limit) compact(p, top, d);
    gop o = {.t = p->slots[d], .dst = ++*top, .path = -1};
    compile_element(L, path, d + 1, ids, keys, &o);
    o.op = o.kind == ST_KEY ? OP_FIELD : OP_STEP;
    if (o.op == OP_FIELD && d + 1 == len) o.path = i;   /* the last field of the path: compared by the same op */
    p->ops[p->nops++] = o;
    p->slots[d + 1] = *top;
  }
  if (p->nops == 0 || p->ops[p->nops - 1].path != i)
    p->ops[p->nops++] = (gop){.op = fuse ? OP_LEN : OP_CHECK, .t = p->slots[d], .dst = *top, .path = i,
                              .i = fuse ? p->paths[i].want.v.i : 0};
}

/* Pushes a host guard: the table {paths, expected values, count, program, keys, anchors} (the program: a userdata
 * of the ops and expectations above, compiled once here; keys: the distinct keys its fields read; anchors: the
 * values a snapshot's learned order points to, kept alive). */
void lg_push_guard(lua_State *L, int paths, int expect, int n) {
  paths = lua_absindex(L, paths), expect = lua_absindex(L, expect);
  size_t nops, nsnap;
  int maxlen;
  program_sizes(L, paths, expect, n, &nops, &nsnap, &maxlen);
  lua_createtable(L, 6, 0);
  int g = lua_gettop(L);
  lua_pushvalue(L, paths); lua_rawseti(L, g, G_PATHS);
  lua_pushvalue(L, expect); lua_rawseti(L, g, G_EXPECT);
  lua_pushinteger(L, n); lua_rawseti(L, g, G_COUNT);
  int limit = LG_GUARD_SLOTS + maxlen;   /* a compaction leaves at most maxlen */
  gprog *p = lua_newuserdatauv(L, sizeof(gprog) + (size_t)n * sizeof(gpath) + nops * sizeof(gop) +
                               nsnap * sizeof(gsnapent) + ((size_t)maxlen + 1) * sizeof(int) + (size_t)limit + 2, 0);
  *p = (gprog){.npaths = n, .maxlen = maxlen, .limit = limit};
  p->paths = (gpath *)(p + 1);
  p->ops = (gop *)(p->paths + n);
  p->snapents = (gsnapent *)(p->ops + nops);
  p->slots = (int *)(p->snapents + nsnap);
  p->types = (unsigned char *)(p->slots + maxlen + 1);
  memset(p->slots, 0, ((size_t)maxlen + 1) * sizeof(int));
  memset(p->types, 0, (size_t)limit + 2);
  lua_rawseti(L, g, G_PROG);
  lua_newtable(L); lua_rawseti(L, g, G_ANCHORS);
  lua_newtable(L);
  int keys = lua_gettop(L), ids = keys + 1, snap = 0, top = 0;
  lua_newtable(L);
  for (int i = 0; i < n; i++) {
    gpath *gp = &p->paths[i];
    lua_rawgeti(L, expect, i + 1);
    expect_of(L, -1, &gp->want);
    *gp = (gpath){.want = gp->want, .snap = snap};
    if (gp->want.kind == EX_SNAP) {
      lua_pushlightuserdata(L, (void *)&lg_snap_key);
      lua_rawget(L, -2);
      gp->nsnap = (int)lua_tointeger(L, -1);
      snap += gp->nsnap;
    }
    lua_settop(L, ids);
    lua_rawgeti(L, paths, i + 1);
    if (i > 0) lua_rawgeti(L, paths, i); else lua_pushnil(L);
    if (i + 1 < n) lua_rawgeti(L, paths, i + 2); else lua_pushnil(L);
    compile_path(L, p, i, ids + 1, i > 0 ? ids + 2 : 0, i + 1 < n ? ids + 3 : 0, ids, keys, &top);
    lua_settop(L, ids);
  }
  p->nkeys = (int)lua_rawlen(L, keys);
  lua_settop(L, keys);
  lua_rawseti(L, g, G_KEYS);
}

/* Pushes the value that the element of op o reads from the value at t (of Lua type ty); returns its type. A part
 * that is not there (a key of a non-table, a missing upvalue) reads as nil, as step. */
static int push_element(lua_State *L, const gop *o, int ty, int t, int fn, int args, int keys) {
  switch (o->kind) {
  case ST_ARG: lua_pushvalue(L, args + (int)o->i - 1); return lua_type(L, -1);
  case ST_UP: if (!lua_getupvalue(L, fn, (int)o->i)) lua_pushnil(L); return lua_type(L, -1);
  case ST_ENV: push_env(L, fn); return lua_type(L, -1);
  case ST_INT: if (ty == LUA_TTABLE) return lua_rawgeti(L, t, o->i); break;
  case ST_KEY:
    if (ty == LUA_TTABLE) { lua_rawgeti(L, keys, o->i + 1); return lua_rawget(L, t); }
    if (ty == LUA_TFUNCTION && o->up >= 0 && lua_getupvalue(L, t, o->up)) return lua_type(L, -1);
    break;
  case ST_META: if (ty == LUA_TTABLE && lua_getmetatable(L, t)) return LUA_TTABLE; break;
  case ST_LEN: if (ty == LUA_TTABLE) { lua_pushinteger(L, (lua_Integer)lua_rawlen(L, t)); return LUA_TNUMBER; } break;
  }
  lua_pushnil(L);
  return LUA_TNIL;
}

/* Whether the value at idx (of Lua type ty) passes expectation e, decided in C: 1, 0, or -1 when it takes
 * lg_guard_holds (a snapshot; a tensor guard given another userdata). The same answers as lg_guard_holds. */
static inline __attribute__((always_inline)) int holds_at(lua_State *L, int idx, int ty, const gexpect *e) {
  size_t n;
  const char *s;
  lua_Number x;
  switch (e->kind) {
  case EX_TENSOR: return ty == LUA_TUSERDATA && lua_touserdata(L, idx) == e->v.p ? 1 : -1;
  case EX_INT: return ty == LUA_TNUMBER && lua_isinteger(L, idx) && lua_tointeger(L, idx) == e->v.i;
  case EX_FLOAT:   /* bit for bit: NaN is itself, -0.0 not 0.0 */
    if (ty != LUA_TNUMBER || lua_isinteger(L, idx)) return 0;
    x = lua_tonumber(L, idx);
    return memcmp(&x, &e->v.f, sizeof x) == 0;
  case EX_BOOL: return ty == LUA_TBOOLEAN && lua_toboolean(L, idx) == e->v.b;
  case EX_NIL: return ty == LUA_TNIL;
  case EX_STR:   /* raw equality of strings: the same bytes (the same string object, mostly) */
    if (ty != LUA_TSTRING) return 0;
    s = lua_tolstring(L, idx, &n);
    return n == e->len && (s == e->v.p || memcmp(s, e->v.p, n) == 0);
  case EX_REF: return ty == e->type && lua_topointer(L, idx) == e->v.p;
  default: return -1;
  }
}

/* Whether the table at t (of type ty) holds snapshot entries e[0..n) in the order lua_next gives them: 1, or -1
 * when it is not decided so (an entry changed, added or removed, or the same entries in another order: the table
 * was rehashed), which snapshot_holds decides. The loop of snapshot_holds without a lookup in the snapshot: a key
 * is the learned string object (or number), a value compared as holds_at does. */
static int snapshot_in_order(lua_State *L, int t, int ty, const gsnapent *e, int n) {
  if (ty != LUA_TTABLE) return 0;
  int j = 0, ok = 1, top = lua_gettop(L);
  lua_pushnil(L);
  while (ok && lua_next(L, t)) {
    int vt = lua_type(L, -1);
    if (vt == LUA_TNUMBER || vt == LUA_TSTRING || vt == LUA_TBOOLEAN || vt == LUA_TFUNCTION) {   /* snapshot_kind */
      int same_key = j < n && e[j].kobj && lua_topointer(L, -2) == e[j].kobj;   /* the learned string itself */
      int kt = same_key ? LUA_TSTRING : lua_type(L, -2);
      if (kt == LUA_TSTRING || kt == LUA_TNUMBER) {
        ok = j < n && (same_key || (kt == LUA_TNUMBER && holds_at(L, -2, kt, &e[j].key) == 1)) &&
             (vt == LUA_TFUNCTION ? e[j].value.type == vt && lua_topointer(L, -1) == e[j].value.v.p
                                  : holds_at(L, -1, vt, &e[j].value) == 1);
        j++;
      }
    }
    lua_settop(L, top + 1);
  }
  lua_settop(L, top);
  return ok && j == n ? 1 : -1;
}

/* Records the order of the entries of the table at t, which holds its snapshot (gp): the next checks compare in
 * that order. Its keys and values are kept in a new table of anchors (at anchors[i]) so the addresses stay valid. */
static void learn_snapshot_order(lua_State *L, int t, gpath *gp, gsnapent *e, int anchors, int i) {
  lua_createtable(L, 2 * gp->nsnap, 0);
  int a = lua_gettop(L), j = 0;
  lua_pushnil(L);
  while (lua_next(L, t)) {
    if (snapshot_kind(L, -2, -1) && j < gp->nsnap) {
      expect_of(L, -2, &e[j].key);
      expect_of(L, -1, &e[j].value);
      e[j].kobj = lua_type(L, -2) == LUA_TSTRING ? lua_topointer(L, -2) : NULL;
      lua_pushvalue(L, -2); lua_rawseti(L, a, 2 * j + 1);
      lua_pushvalue(L, -1); lua_rawseti(L, a, 2 * j + 2);
      j++;
    }
    lua_pop(L, 1);
  }
  lua_settop(L, a);
  lua_rawseti(L, anchors, i);
  gp->snap_known = j == gp->nsnap;
}

/* Whether path i holds, its value at v (of Lua type ty; top: the stack's top), where holds_at cannot tell: a
 * snapshot in its learned order, else lg_guard_holds; a snapshot that holds there has its order learned. */
static int path_holds(lua_State *L, gprog *p, int i, int ty, int v, int top, int guard) {
  gpath *gp = &p->paths[i];
  int ok;
  if (gp->want.kind == EX_SNAP && gp->snap_known) {
    ok = snapshot_in_order(L, v, ty, p->snapents + gp->snap, gp->nsnap);
    if (ok >= 0) return ok;
  }
  lua_rawgeti(L, guard, G_EXPECT);
  lua_rawgeti(L, -1, i + 1);
  ok = lg_guard_holds(L, v, -1);
  if (ok && gp->want.kind == EX_SNAP) {   /* the only allocation of a check: no collection (no finalizer) meanwhile */
    int gc = lua_gc(L, LUA_GCISRUNNING);
    if (gc) lua_gc(L, LUA_GCSTOP);
    lua_rawgeti(L, guard, G_ANCHORS);
    learn_snapshot_order(L, v, gp, p->snapents + gp->snap, lua_gettop(L), i + 1);
    if (gc) lua_gc(L, LUA_GCRESTART);
  }
  lua_settop(L, top);
  return ok;
}

/* Which path of the guard at guard (absolute index; a table of lg_push_guard) fails for the function at fn and the
 * arguments from args: its number, 0 when all hold, -1 when the Lua stack has no room for the check. Every path is
 * read and compared on every call: the ops run in order, each value in its slot (base + slot), its type in
 * p->types[slot] (no Lua code runs during a check, so the scratch is this check's). */
int lg_guard_fails(lua_State *L, int guard, int fn, int args) {
  int top0 = lua_gettop(L), fail = 0;
  lua_rawgeti(L, guard, G_PROG);
  gprog *p = lua_touserdata(L, top0 + 1);
  lua_rawgeti(L, guard, G_KEYS);
  int keys = top0 + 2, slots = lua_checkstack(L, p->nkeys + p->limit + 16);   /* else keys read from their table */
  if (!slots && !lua_checkstack(L, p->limit + 16)) {
    lua_settop(L, top0);
    return -1;
  }
  for (int k = 1; slots && k <= p->nkeys; k++) lua_rawgeti(L, keys, k);
  int base = lua_gettop(L);
  unsigned char *ty = p->types;
  for (const gop *o = p->ops, *end = o + p->nops; o < end; o++) {
    int t = base + o->t, v = o->t;   /* v: the slot compared */
    switch (o->op) {
    case OP_MOVE: lua_copy(L, base + (int)o->i, t); ty[o->t] = ty[o->i]; break;
    case OP_TOP: lua_settop(L, t); break;
    case OP_FIELD:   /* else a function's upvalue, nil, or the key read from its table */
      if (ty[o->t] == LUA_TTABLE && slots) {
        lua_pushvalue(L, keys + 1 + (int)o->i);
        ty[o->dst] = (unsigned char)lua_rawget(L, t);
      } else {
        ty[o->dst] = (unsigned char)push_element(L, o, ty[o->t], t, fn, args, keys);
      }
      if (o->path < 0) break;
      v = o->dst;
      goto check;
    case OP_STEP: ty[o->dst] = (unsigned char)push_element(L, o, ty[o->t], t, fn, args, keys); break;
    case OP_LEN:
      if (ty[o->t] == LUA_TTABLE && (lua_Integer)lua_rawlen(L, t) == o->i) break;
      fail = o->path + 1;
      goto done;
    case OP_CHECK:
    check:
      fail = holds_at(L, base + v, ty[v], &p->paths[o->path].want);
      if (fail < 0) fail = path_holds(L, p, o->path, ty[v], base + v, base + o->dst, guard);
      if (fail) { fail = 0; break; }
      fail = o->path + 1;
      goto done;
    }
  }
done:
  lua_settop(L, top0);
  return fail;
}

/* ---- the walk that finds captured tensors and the numbers a trace depends on ---- */

static void add_guard(walk *w, int path_idx, int value_idx) {
  lua_State *L = w->L;
  w->npaths++;
  lua_pushvalue(L, path_idx);
  lua_rawseti(L, w->paths, w->npaths);
  lua_pushvalue(L, value_idx);
  lua_rawseti(L, w->expect, w->npaths);
}

/* The chunk a Lua function was defined in (its source), pushed; nil for a C function. */
static void push_source(lua_State *L, int f) {
  lua_Debug ar;
  lua_pushvalue(L, f);
  if (lua_iscfunction(L, -1) || !lua_getinfo(L, ">S", &ar)) { lua_settop(L, f); lua_pushnil(L); return; }
  lua_pushstring(L, ar.source);
}

/* Whether the table or function at v is library code, not state: a library's table (a value of package.loaded) or
 * a function of grace's own Lua modules (its identity is guarded where it is met; its upvalues are not walked). */
static int is_library(walk *w, int v) {
  lua_State *L = w->L;
  if (lua_type(L, v) == LUA_TFUNCTION) push_source(L, v);
  else lua_pushvalue(L, v);
  lua_rawget(L, w->libs);
  int lib = lua_toboolean(L, -1);
  lua_pop(L, 1);
  return lib;
}

/* Whether the table or function at v holds anything a guard would have to follow: a field or a metatable, an
 * upvalue other than _ENV (globals are guarded as they are read). */
static int has_state(lua_State *L, int v) {
  if (lua_type(L, v) == LUA_TTABLE) {
    lua_pushnil(L);
    if (lua_next(L, v)) { lua_pop(L, 2); return 1; }
    if (lua_getmetatable(L, v)) { lua_pop(L, 1); return 1; }
    return 0;
  }
  const char *name;
  for (int i = 1; (name = lua_getupvalue(L, v, i)) != NULL; i++) {
    lua_pop(L, 1);
    if (strcmp(name, "_ENV")) return 1;
  }
  return 0;
}

/* Visits the value on top of the stack, reached by the path at path_idx (a table). depth bounds it;
 * scalars are guarded when `guard_scalars` (direct upvalues, fields of tables holding a captured tensor); 2: the
 * value was reached through a metatable, and a table is guarded by one snapshot of its fields. */
static void visit(walk *w, int path_idx, int depth, int guard_scalars);

static void visit_child(walk *w, int path_idx, int key_idx, int depth, int guard_scalars) {
  lua_State *L = w->L;
  /* child path = copy of path + key */
  lua_newtable(L);
  lua_Integer n = luaL_len(L, path_idx);
  for (lua_Integer k = 1; k <= n; k++) { lua_rawgeti(L, path_idx, k); lua_rawseti(L, -2, k); }
  lua_pushvalue(L, key_idx);
  lua_rawseti(L, -2, n + 1);
  int child_path = lua_gettop(L);
  lua_pushvalue(L, -2);   /* the child value, just below the new path */
  visit(w, child_path, depth, guard_scalars);
  lua_settop(L, child_path - 1);
}

static void visit(walk *w, int path_idx, int depth, int guard_scalars) {
  lua_State *L = w->L;
  int v = lua_gettop(L);
  int ty = lua_type(L, v);
  if (--w->budget < 0) { w->truncated = 1; return; }
  if (ty == LUA_TUSERDATA) {
    grace_tensor *t = lg_totensor(L, v);
    if (!t) return;
    lua_pushlightuserdata(L, t);
    lua_rawget(L, w->targets);
    int wanted = lua_toboolean(L, -1), is_arg = lua_tointeger(L, -1) == 2;
    lua_pop(L, 1);
    if (is_arg) { w->arg_captured = 1; return; }
    if (wanted) {
      add_guard(w, path_idx, v);
      lua_pushlightuserdata(L, t);
      lua_pushnil(L);
      lua_rawset(L, w->targets);
    }
    return;
  }
  if ((ty == LUA_TNUMBER || ty == LUA_TSTRING || ty == LUA_TBOOLEAN) && guard_scalars) {
    add_guard(w, path_idx, v);
    return;
  }
  /* a function the code may call: guarded by identity (a replaced method or helper retraces) */
  if (ty == LUA_TFUNCTION && guard_scalars) add_guard(w, path_idx, v);
  if (ty != LUA_TTABLE && ty != LUA_TFUNCTION) return;
  lua_pushvalue(L, v);
  lua_rawget(L, w->seen);
  int seen = lua_toboolean(L, -1);
  lua_pop(L, 1);
  if (seen || is_library(w, v)) return;
  if (depth <= 0) {   /* state below here would go unguarded: say so, unless there is none */
    if (has_state(L, v)) w->truncated = 1;
    return;
  }
  lua_pushvalue(L, v);
  lua_pushboolean(L, 1);
  lua_rawset(L, w->seen);
  if (ty == LUA_TFUNCTION) {
    for (int i = 1;; i++) {
      const char *name = lua_getupvalue(L, v, i);
      if (!name) break;
      if (!strcmp(name, "_ENV")) { lua_pop(L, 1); continue; }   /* globals are guarded as they are read */
      lua_pushfstring(L, "u%d", i);
      int key = lua_gettop(L);
      lua_pushvalue(L, key - 1);
      lua_remove(L, key - 1);   /* stack: ..., key, value */
      visit_child(w, path_idx, key - 1, depth - 1, 1);
      lua_settop(L, v);
    }
    return;
  }
  /* a table of data (a module, a config): its numbers, strings and booleans are guarded, and its metatable
   * walked: methods and defaults read through __index (a class of grace.nn, a table of defaults) */
  int snap = guard_scalars == 2;
  if (lua_getmetatable(L, v)) {
    lua_pushlightuserdata(L, (void *)&lg_meta_key);
    lua_insert(L, -2);
    visit_child(w, path_idx, lua_gettop(L) - 1, depth - 1, 2);
    lua_settop(L, v);
  }
  if (!snap) {   /* its length: `#t` reads it, and an element added at the end changes no other path */
    lua_pushlightuserdata(L, (void *)&lg_len_key);
    lua_pushinteger(L, (lua_Integer)lua_rawlen(L, v));
    visit_child(w, path_idx, lua_gettop(L) - 1, depth - 1, 1);
    lua_settop(L, v);
  }
  if (snap) {   /* one guard for the fields (below); the functions' upvalues and nested tables are walked still */
    lua_newtable(L);
    lua_Integer count = 0;
    lua_pushnil(L);
    while (lua_next(L, v)) {
      if (snapshot_kind(L, -2, -1)) { count++; lua_pushvalue(L, -2); lua_pushvalue(L, -2); lua_rawset(L, v + 1); }
      lua_pop(L, 1);
    }
    lua_pushlightuserdata(L, (void *)&lg_snap_key);
    lua_pushinteger(L, count);
    lua_rawset(L, v + 1);
    add_guard(w, path_idx, v + 1);
    lua_settop(L, v);
  }
  lua_pushnil(L);
  while (lua_next(L, v)) {
    int kt = lua_type(L, -2), vt = lua_type(L, -1);
    if ((kt == LUA_TSTRING || kt == LUA_TNUMBER) && (!snap || vt == LUA_TFUNCTION || vt == LUA_TTABLE ||
                                                      vt == LUA_TUSERDATA)) {
      int value = lua_gettop(L);
      /* in a snapshot, a function's identity is guarded already: only its upvalues are walked */
      visit_child(w, path_idx, value - 1, depth - 1, snap ? (vt == LUA_TFUNCTION ? 0 : 2) : 1);
      lua_settop(L, value);
    }
    lua_pop(L, 1);
  }
}

/* Marks the chunk of every Lua function in the table on top as library code (grace's own modules). */
static void add_lib_sources(lua_State *L, int set) {
  int t = lua_gettop(L);
  lua_pushnil(L);
  while (lua_next(L, t)) {
    if (lua_type(L, -1) == LUA_TFUNCTION) {
      push_source(L, lua_gettop(L));
      if (lua_isstring(L, -1)) { lua_pushboolean(L, 1); lua_rawset(L, set); }
      else lua_pop(L, 1);
    }
    lua_pop(L, 1);
  }
}

/* Pushes the set of library code: tables that are values of package.loaded, and the chunks (sources) of grace's
 * own Lua modules ("grace", "grace.*": the classes of grace.nn live there), whose functions are code whose identity
 * is guarded but whose upvalues are not state to walk. */
void lg_push_libs(lua_State *L) {
  lua_newtable(L);
  int set = lua_gettop(L);
  lua_getglobal(L, "package");
  if (lua_istable(L, -1)) {
    lua_getfield(L, -1, "loaded");
    if (lua_istable(L, -1)) {
      lua_pushnil(L);
      while (lua_next(L, -2)) {
        if (lua_istable(L, -1)) {
          if (lua_type(L, -2) == LUA_TSTRING && !strncmp(lua_tostring(L, -2), "grace", 5) &&
              (lua_tostring(L, -2)[5] == 0 || lua_tostring(L, -2)[5] == '.'))
            add_lib_sources(L, set);
          lua_pushboolean(L, 1);
          lua_rawset(L, set);
        } else {
          lua_pop(L, 1);
        }
      }
    }
    lua_pop(L, 1);
  }
  lua_settop(L, set);
}

/* Walks the arguments and the function's upvalues (roots a<i>, u<i>) collecting guards into w. */
void lg_walk_roots(walk *w, int fn, int args, int nargs) {
  lua_State *L = w->L;
  int top = lua_gettop(L);
  for (int i = 0; i < nargs; i++) {
    if (!lua_istable(L, args + i) && !lua_isfunction(L, args + i)) continue;
    lua_newtable(L);
    lua_pushfstring(L, "a%d", i + 1);
    lua_rawseti(L, -2, 1);
    lua_pushvalue(L, args + i);
    visit(w, lua_gettop(L) - 1, WALK_DEPTH, 0);
    lua_settop(L, top);
  }
  lua_pushvalue(L, fn);
  lua_pushboolean(L, 1);
  lua_rawset(L, w->seen);
  for (int i = 1;; i++) {
    const char *name = lua_getupvalue(L, fn, i);
    if (!name) break;
    if (!strcmp(name, "_ENV")) { lua_pop(L, 1); continue; }
    lua_newtable(L);
    lua_pushfstring(L, "u%d", i);
    lua_rawseti(L, -2, 1);
    lua_insert(L, -2);
    visit(w, lua_gettop(L) - 1, WALK_DEPTH, 1);
    lua_settop(L, top);
  }
}

/* The globals the trace read (reads: name -> value): each guarded by value (numbers, strings, booleans) or identity
 * (anything else), and the tables and functions among them walked as upvalues are. */
void lg_walk_globals(walk *w, int reads) {
  lua_State *L = w->L;
  if (!lua_istable(L, reads)) return;
  lua_pushnil(L);
  while (lua_next(L, reads)) {
    int value = lua_gettop(L);
    if (lua_touserdata(L, value) == &lg_nil_read) { lua_pushnil(L); lua_replace(L, value); }
    lua_newtable(L);
    lua_pushliteral(L, "g");
    lua_rawseti(L, -2, 1);
    lua_pushvalue(L, value - 1);
    lua_rawseti(L, -2, 2);
    int path = lua_gettop(L);
    add_guard(w, path, value);
    grace_tensor *t = lg_totensor(L, value);   /* a tensor read from a global is found here */
    if (t) {
      lua_pushlightuserdata(L, t);
      lua_rawget(L, w->targets);
      int is_arg = lua_tointeger(L, -1) == 2;
      lua_pop(L, 1);
      if (is_arg) w->arg_captured = 1;
      else { lua_pushlightuserdata(L, t); lua_pushnil(L); lua_rawset(L, w->targets); }
    } else if (lua_istable(L, value) || lua_isfunction(L, value)) {
      lua_pushvalue(L, value);
      visit(w, path, WALK_DEPTH, 1);
    }
    lua_settop(L, value - 1);
  }
}

/* Which path of a walk (paths/expect tables) no longer holds its value: a description, or NULL. */
const char *lg_changed_path(lua_State *L, int fn, int args, int paths, int expect, int n, char *buf, size_t len) {
  int top = lua_gettop(L);
  lg_push_guard(L, paths, expect, n);   /* read as the check of a call reads them */
  int i = lg_guard_fails(L, top + 1, fn, args);
  if (i < 0) snprintf(buf, len, "the Lua stack has no room to check the state the function reads; it runs eagerly");
  if (i > 0) {
    lua_rawgeti(L, paths, i);
    int path = lua_gettop(L);
    lua_rawgeti(L, path, 1);
    const char *root = lua_tostring(L, -1), *name = NULL;
    if (root[0] == 'u') {   /* an upvalue of the function: say its name */
      name = lua_getupvalue(L, fn, atoi(root + 1));
      if (name) lua_pop(L, 1);
    }
    lua_rawgeti(L, path, luaL_len(L, path));
    if (luaL_len(L, path) == 1 && name)
      snprintf(buf, len, "the function assigns its upvalue '%s'; a compiled call would not, so it runs eagerly", name);
    else
      snprintf(buf, len, "the function changes Lua state that it reads (%s %s, key %s); a compiled call would not, so "
               "it runs eagerly", root[0] == 'a' ? "argument" : "upvalue", name ? name : root + 1,
               lua_touserdata(L, -1) == &lg_meta_key ? "(its metatable)"
               : lua_touserdata(L, -1) == &lg_len_key ? "(its length)"
               : lua_isstring(L, -1)                ? lua_tostring(L, -1)
                                                    : "?");
  }
  lua_settop(L, top);
  return i ? buf : NULL;
}


/* ---- tables the function can reach, compared whole around a trace: a key added or a field written that the
 * function does not read is an effect no path shows (an append to a log, a tensor stored for later) ---- */
void lg_push_table_copies(lua_State *L, int seen) {
  lua_newtable(L);
  int copies = lua_gettop(L);
  lua_pushnil(L);
  while (lua_next(L, seen)) {
    lua_pop(L, 1);
    if (lua_type(L, -1) == LUA_TTABLE) {
      int t = lua_gettop(L);
      lua_pushvalue(L, t);
      lua_newtable(L);
      lua_pushnil(L);
      while (lua_next(L, t)) { lua_pushvalue(L, -2); lua_insert(L, -2); lua_rawset(L, -4); }
      lua_rawset(L, copies);
    }
  }
}

static const char *key_text(lua_State *L, int k) {
  return lua_type(L, k) == LUA_TSTRING ? lua_tostring(L, k) : lua_type(L, k) == LUA_TNUMBER ? "(a number)" : "(a key)";
}

const char *lg_changed_table(lua_State *L, int copies, char *buf, size_t len) {
  int top = lua_gettop(L);
  lua_pushnil(L);
  while (lua_next(L, copies)) {   /* stack: table, copy */
    int t = lua_gettop(L) - 1, c = t + 1;
    lua_pushnil(L);
    while (lua_next(L, t)) {   /* every key of the table now: in the copy, with the same value */
      lua_pushvalue(L, -2);
      lua_rawget(L, c);
      if (!same_scalar(L, -1, -2)) {   /* NaN is itself: a table holding one is unchanged */
        snprintf(buf, len, "the function changes a table it can reach (key %s); a compiled call would not, so it "
                 "runs eagerly", key_text(L, -3));
        lua_settop(L, top);
        return buf;
      }
      lua_pop(L, 2);
    }
    lua_pushnil(L);
    while (lua_next(L, c)) {   /* and no key of the copy gone */
      lua_pushvalue(L, -2);
      lua_rawget(L, t);
      if (lua_isnil(L, -1)) {
        snprintf(buf, len, "the function changes a table it can reach (key %s removed); a compiled call would not, "
                 "so it runs eagerly", key_text(L, -3));
        lua_settop(L, top);
        return buf;
      }
      lua_pop(L, 2);
    }
    lua_settop(L, t);
  }
  lua_settop(L, top);
  return NULL;
}
