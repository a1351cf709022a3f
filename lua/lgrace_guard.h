/* lgrace_guard.h: the host guard of compiled functions (lgrace_guard.c): the paths from a function's upvalues,
 * arguments and globals to the tensors it captures and the values a trace depends on, the walk that finds them,
 * snapshots of classes, and the checks that re-read them on every call. Used by lgrace_compile.c. */
#ifndef LGRACE_GUARD_H
#define LGRACE_GUARD_H
#include "lua/lgrace_tensor.h"

#define WALK_DEPTH 8     /* tables and functions below a root the walk follows */
#define WALK_BUDGET 200000   /* values one walk visits */

/* A path key that stands for "the metatable of", the value a global read as nil is recorded as, and the key of a
 * snapshot's count (their addresses only: light userdata no Lua code makes). */
extern const char lg_meta_key, lg_nil_read, lg_snap_key, lg_len_key;

typedef struct walk {
  lua_State *L;
  int fn, args, nargs;
  int seen;           /* table: visited tables/functions */
  int targets;        /* table: tensor userdata -> true (captured tensors still to find) */
  int paths, expect;  /* output lists */
  int npaths, budget;
  int libs;           /* table: the modules in package.loaded (libraries are not state to guard) */
  int arg_captured;   /* an argument tensor is also reachable (targets maps it to 2) */
  int truncated;      /* a table or function was left unwalked (depth or budget): its state is not guarded */
} walk;

/* Whether the value at got passes a guard expecting the value at want (a tensor by identity, a snapshot by contents,
 * anything else by raw equality). */
int lg_guard_holds(lua_State *L, int got, int want);
/* Two expectations are the same: raw equality, or two snapshots of the same contents. */
int lg_same_expectation(lua_State *L, int a, int b);
/* Pushes a host guard of n paths (paths: a list of paths, expect: the value each must hold): the table {paths,
 * expect, n, program, keys, anchors}, its check compiled once into a program of steps and expectations compared in
 * C (anchors: the values a snapshot's learned order points to, kept alive). */
void lg_push_guard(lua_State *L, int paths, int expect, int n);
/* The number of the first path of the guard at guard (absolute index) that no longer holds its value, for the
 * function at fn and the arguments from args; 0 when all hold, -1 when the Lua stack has no room to check. */
int lg_guard_fails(lua_State *L, int guard, int fn, int args);
/* How many leading elements paths a and b share. */
lua_Integer lg_shared_prefix(lua_State *L, int a, int b);
/* Pushes the set of library code the walk does not treat as state: package.loaded's tables and the chunks of grace's
 * own Lua modules. */
void lg_push_libs(lua_State *L);
/* The walk from the arguments and the function's upvalues, and from the globals the trace read (reads: name -> value). */
void lg_walk_roots(walk *w, int fn, int args, int nargs);
void lg_walk_globals(walk *w, int reads);
/* Pushes {table -> a shallow copy of it} for every table in seen (the tables a walk met). */
void lg_push_table_copies(lua_State *L, int seen);
/* Whether a table of copies (lg_push_table_copies) no longer matches its tables: a description in buf, or NULL. */
const char *lg_changed_table(lua_State *L, int copies, char *buf, size_t len);
/* Which path of a walk (paths/expect tables) no longer holds its value: a description in buf, or NULL. */
const char *lg_changed_path(lua_State *L, int fn, int args, int paths, int expect, int n, char *buf, size_t len);
#endif
