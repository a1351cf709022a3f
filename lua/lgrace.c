/* lgrace.c: module "grace": the VM owned by a userdata (freed by __gc), module-level functions, and a
 * package searcher for the standard library embedded in the binary. */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>
#include <lauxlib.h>
#include <lualib.h>
#include "lua/lgrace.h"
#include "lua/lgrace_tensor.h"

#define VM_KEY "grace.vm"

/* The registry's VM: owned (freed by __gc when the state closes) unless a host gave it (grace_lua_open). */
typedef struct { grace_vm *vm; int owned; } vm_box;

typedef struct { const char *name; const char *src; size_t len; } stdlib_file;
extern const stdlib_file grace_stdlib_files[];

grace_vm *grace_lua_vm(lua_State *L) {
  lua_getfield(L, LUA_REGISTRYINDEX, VM_KEY);
  vm_box *box = lua_touserdata(L, -1);
  lua_pop(L, 1);
  return box ? box->vm : NULL;
}

grace_vm *lgrace_vm(lua_State *L) {
  grace_vm *vm = grace_lua_vm(L);
  if (!vm) luaL_error(L, "grace: the module is not open (no VM)");
  return vm;
}

int lgrace_error(lua_State *L, grace_vm *vm) {
  return luaL_error(L, "%s", grace_last_error(vm));
}

#if defined(__has_feature)
#if __has_feature(address_sanitizer)
#define LGRACE_ASAN 1
#endif
#endif
#if defined(__SANITIZE_ADDRESS__) && !defined(LGRACE_ASAN)
#define LGRACE_ASAN 1
#endif

#ifdef LGRACE_ASAN
/* Under AddressSanitizer tensors live in malloc memory, which it watches (mimalloc's it cannot): a leaked
 * tensor or an overrun of its storage is then reported. */
static void *asan_alloc(void *ud, void *ptr, size_t osize, size_t nsize, size_t align) {
  (void)ud;
  if (nsize == 0) { free(ptr); return NULL; }
  void *p = NULL;
  if (posix_memalign(&p, align < sizeof(void *) ? sizeof(void *) : align, nsize)) return NULL;
  if (ptr) { memcpy(p, ptr, osize < nsize ? osize : nsize); free(ptr); }
  return p;
}
#endif

static int vm_gc(lua_State *L) {
  vm_box *box = lua_touserdata(L, 1);
  if (box && box->vm && box->owned) grace_vm_free(box->vm);
  if (box) box->vm = NULL;
  return 0;
}

/* isatty([stream="stdout"]): whether stdout (or "stderr", "stdin") is a terminal: a script's progress line */
static int l_isatty(lua_State *L) {
  static const char *const names[] = {"stdin", "stdout", "stderr", NULL};
  int which = luaL_checkoption(L, 1, "stdout", names);
  lua_pushboolean(L, isatty(which));
  return 1;
}

static int l_backend(lua_State *L) {
  lua_pushstring(L, grace_backend_info(lgrace_vm(L)));
  return 1;
}

static int l_device(lua_State *L) {
  grace_vm *vm = lgrace_vm(L);
  if (!lua_isnoneornil(L, 1) && grace_set_default_device(vm, luaL_checkstring(L, 1)) != GRACE_OK)
    return lgrace_error(L, vm);
  lua_pushstring(L, grace_device_name(grace_default_device(vm)));
  return 1;
}

static int l_cuda_available(lua_State *L) {
  lua_pushboolean(L, grace_cuda_available(lgrace_vm(L)));
  return 1;
}

static int l_synchronize(lua_State *L) {
  grace_vm *vm = lgrace_vm(L);
  if (grace_synchronize(vm) != GRACE_OK) return lgrace_error(L, vm);
  return 0;
}

/* grace.regions(mode): how regions (cond, while_loop) of device programs that first run after the call are
 * lowered ("auto", "host", "nodes", "pred"; nil: back to GRACE_REGIONS). */
static int l_regions(lua_State *L) {
  grace_vm *vm = lgrace_vm(L);
  if (grace_set_regions(vm, luaL_optstring(L, 1, NULL)) != GRACE_OK) return lgrace_error(L, vm);
  return 0;
}

/* grace.graphs(mode): the launch strategy of device programs that first run after the call ("auto", "off",
 * "eager", "copy", "indirect", "update"; nil: back to GRACE_GRAPHS). */
static int l_graphs(lua_State *L) {
  grace_vm *vm = lgrace_vm(L);
  if (grace_set_graphs(vm, luaL_optstring(L, 1, NULL)) != GRACE_OK) return lgrace_error(L, vm);
  return 0;
}

/* grace.matmul_backend(mode): which implementation runs matrix products on the device ("auto", "grace",
 * "cublaslt"; nil: back to GRACE_MATMUL). */
static int l_matmul_backend(lua_State *L) {
  grace_vm *vm = lgrace_vm(L);
  if (grace_set_matmul(vm, luaL_optstring(L, 1, NULL)) != GRACE_OK) return lgrace_error(L, vm);
  return 0;
}

/* grace.norm_prologue(on): layer/RMS norms as the prologue of the device GEMVs that read them (true, false; nil:
 * back to GRACE_NORM_PROLOGUE), for programs built after the call. */
static int l_norm_prologue(lua_State *L) {
  grace_vm *vm = lgrace_vm(L);
  int on = lua_isnoneornil(L, 1) ? -1 : lua_toboolean(L, 1);
  if (grace_set_norm_prologue(vm, on) != GRACE_OK) return lgrace_error(L, vm);
  return 0;
}

static int l_empty_cache(lua_State *L) {
  grace_empty_cache(lgrace_vm(L));
  return 0;
}

/* grace.device_stats(): a table of the device's memory (bytes) and kernel-compilation counts. */
static int l_device_stats(lua_State *L) {
  grace_device_stats s;
  grace_device_stats_get(lgrace_vm(L), &s);
  lua_createtable(L, 0, 8);
  lua_pushinteger(L, (lua_Integer)s.allocated); lua_setfield(L, -2, "allocated");
  lua_pushinteger(L, (lua_Integer)s.reserved); lua_setfield(L, -2, "reserved");
  lua_pushinteger(L, (lua_Integer)s.peak_allocated); lua_setfield(L, -2, "peak_allocated");
  lua_pushinteger(L, (lua_Integer)s.nvrtc_calls); lua_setfield(L, -2, "nvrtc_calls");
  lua_pushinteger(L, (lua_Integer)s.disk_hits); lua_setfield(L, -2, "disk_hits");
  lua_pushinteger(L, (lua_Integer)s.memory_hits); lua_setfield(L, -2, "memory_hits");
  lua_pushnumber(L, s.nvrtc_seconds); lua_setfield(L, -2, "nvrtc_seconds");
  lua_pushinteger(L, (lua_Integer)s.kernel_launches); lua_setfield(L, -2, "kernel_launches");
  lua_pushinteger(L, (lua_Integer)s.syncs); lua_setfield(L, -2, "syncs");
  return 1;
}

/* grace.reset_peak_memory(): device_stats().peak_allocated starts again from the bytes allocated now. */
static int l_reset_peak_memory(lua_State *L) {
  grace_device_reset_peak(lgrace_vm(L));
  return 0;
}

/* The Lua call timed by grace.device_time: fn and its arguments are at stack slots first..first+nargs. A Lua error
 * is caught here (it must not unwind through grace_device_time, which holds events) and raised again after. */
typedef struct { lua_State *L; int first, nargs, raised; } timed_call;

static grace_status timed_lua_call(grace_vm *vm, void *ud) {
  timed_call *t = ud;
  for (int i = 0; i <= t->nargs; i++) lua_pushvalue(t->L, t->first + i);
  if (lua_pcall(t->L, t->nargs, 0, 0) == LUA_OK) return GRACE_OK;
  t->raised = 1;   /* the error value stays on the stack */
  return grace_set_error(vm, GRACE_EARG, "grace.device_time: the timed function raised an error");
}

/* grace.device_time([device,] fn, ...): ms, device. Calls fn(...) once (its results are dropped) and returns its
 * device time in milliseconds (grace_device_time: on "cuda" the span between two events on the VM's stream, on "cpu"
 * the wall time) and the device name used. device defaults to "cuda" when a CUDA device is usable, else "cpu". */
static int l_device_time(lua_State *L) {
  grace_vm *vm = lgrace_vm(L);
  int first = 1;
  grace_device dev = grace_cuda_available(vm) ? GRACE_CUDA : GRACE_CPU;
  if (lua_type(L, 1) == LUA_TSTRING) {
    if (!lg_parse_device(lua_tostring(L, 1), &dev)) return luaL_argerror(L, 1, "expected \"cuda\" or \"cpu\"");
    first = 2;
  }
  /* a compiled function is a callable userdata */
  if (lua_type(L, first) != LUA_TFUNCTION) {
    if (luaL_getmetafield(L, first, "__call") == LUA_TNIL) return luaL_typeerror(L, first, "function");
    lua_pop(L, 1);
  }
  timed_call t = {L, first, lua_gettop(L) - first, 0};
  luaL_checkstack(L, t.nargs + 2, "grace.device_time: too many arguments");
  double ms = 0;
  grace_status st = grace_device_time(vm, dev, timed_lua_call, &t, &ms);
  if (t.raised) return lua_error(L);
  if (st != GRACE_OK) return lgrace_error(L, vm);
  lua_pushnumber(L, ms);
  lua_pushstring(L, grace_device_name(dev));
  return 2;
}

static int l_manual_seed(lua_State *L) {
  grace_vm *vm = lgrace_vm(L);
  /* a compiled program would not seed again when it replays: inside a trace this is a break */
  if (grace_trace_active(vm)) grace_trace_note(vm, "graph break: grace.manual_seed inside a compiled function");
  grace_manual_seed(vm, (uint64_t)luaL_checkinteger(L, 1));
  return 0;
}

/* grace.get_rng_state() -> seed, offset; grace.set_rng_state(seed, offset) */
static int l_get_rng_state(lua_State *L) {
  uint64_t seed, offset;
  grace_rng_state(lgrace_vm(L), &seed, &offset);
  lua_pushinteger(L, (lua_Integer)seed);
  lua_pushinteger(L, (lua_Integer)offset);
  return 2;
}

static int l_set_rng_state(lua_State *L) {
  grace_vm *vm = lgrace_vm(L);
  lua_Integer seed = luaL_checkinteger(L, 1), offset = luaL_checkinteger(L, 2);
  luaL_argcheck(L, offset >= 0, 2, "the offset counts random ops drawn: it cannot be negative");
  if (grace_trace_active(vm)) grace_trace_note(vm, "graph break: grace.set_rng_state inside a compiled function");
  grace_set_rng_state(vm, (uint64_t)seed, (uint64_t)offset);
  return 0;
}

/* package.searchers entry: finds "grace.NAME" in the embedded standard library. */
int lgrace_stdlib_searcher(lua_State *L) {
  const char *name = luaL_checkstring(L, 1);
  for (const stdlib_file *f = grace_stdlib_files; f->name; f++) {
    if (strcmp(f->name, name)) continue;
    char chunk[300];
    snprintf(chunk, sizeof chunk, "@stdlib/%s.lua", f->name);
    for (char *p = chunk + 8; *p && strcmp(p, ".lua"); p++) if (*p == '.') *p = '/';
    if (luaL_loadbuffer(L, f->src, f->len, chunk) != LUA_OK) return lua_error(L);
    lua_pushstring(L, chunk + 1);
    return 2;
  }
  lua_pushfstring(L, "no embedded module '%s'", name);
  return 1;
}

/* $GRACE_LOG names topics of grace_log_topics(); a name that is not one (a typo) is said once on stderr, with the
 * valid ones, here because the core never prints. */
static void check_log_topics(void) {
  static int checked;
  const char *v = getenv("GRACE_LOG");
  if (checked || !v) return;
  checked = 1;
  const char *const *topics = grace_log_topics();
  for (const char *p = v; *p;) {
    size_t n = strcspn(p, ",");
    int known = n == 0;
    for (int i = 0; topics[i] && !known; i++) known = strlen(topics[i]) == n && !strncmp(topics[i], p, n);
    if (!known) {
      fprintf(stderr, "grace: GRACE_LOG: unknown topic '%.*s' (topics:", (int)n, p);
      for (int i = 0; topics[i]; i++) fprintf(stderr, "%s %s", i ? "," : "", topics[i]);
      fprintf(stderr, ")\n");
    }
    p += n + (p[n] == ',');
  }
}

/* Runs the embedded chunk name with the module table (on top of the stack) as its argument: parts of the module
 * written in Lua add their functions to it. */
static void open_stdlib_part(lua_State *L, const char *name) {
  for (const stdlib_file *f = grace_stdlib_files; f->name; f++) {
    if (strcmp(f->name, name)) continue;
    char chunk[300];   /* "@stdlib/grace/ops.lua", as the searcher names its chunks */
    snprintf(chunk, sizeof chunk, "@stdlib/%s.lua", name);
    for (char *p = chunk + 8; *p && strcmp(p, ".lua"); p++) if (*p == '.') *p = '/';
    if (luaL_loadbuffer(L, f->src, f->len, chunk) != LUA_OK) lua_error(L);
    lua_pushvalue(L, -2);
    lua_call(L, 1, 0);
    return;
  }
  luaL_error(L, "grace: the embedded module '%s' is missing", name);
}

static const luaL_Reg grace_funcs[] = {
  {"backend", l_backend},
  {"isatty", l_isatty},
  {"device", l_device},
  {"cuda_available", l_cuda_available},
  {"manual_seed", l_manual_seed},
  {"get_rng_state", l_get_rng_state},
  {"set_rng_state", l_set_rng_state},
  {"synchronize", l_synchronize},
  {"graphs", l_graphs},
  {"regions", l_regions},
  {"matmul_backend", l_matmul_backend},
  {"norm_prologue", l_norm_prologue},
  {"empty_cache", l_empty_cache},
  {"device_stats", l_device_stats},
  {"reset_peak_memory", l_reset_peak_memory},
  {"device_time", l_device_time},
  {"set_printoptions", lg_set_printoptions},
  {NULL, NULL}
};

/* Tensor methods and constructors live in lgrace_tensor.c. */
void lgrace_open_tensor(lua_State *L);
void lgrace_open_compile(lua_State *L);   /* lgrace_compile.c: compile, explain, clock */
void lgrace_open_io(lua_State *L);        /* lgrace_io.c: save, load */
void lgrace_open_region(lua_State *L);    /* lgrace_region.c: cond, while_loop */

/* Makes the registry's VM box: vm when the host gave one, else a new VM. */
static void open_vm(lua_State *L, grace_vm *given) {
  vm_box *box = lua_newuserdatauv(L, sizeof *box, 0);
  box->vm = given;
  box->owned = !given;
  lua_newtable(L);
  lua_pushcfunction(L, vm_gc);
  lua_setfield(L, -2, "__gc");
  lua_setmetatable(L, -2);
  char err[256] = "";
  grace_config cfg = {.index_base = 1};
#ifdef LGRACE_ASAN
  cfg.alloc = asan_alloc;
#endif
  check_log_topics();
  if (!given) box->vm = grace_vm_new(&cfg, err, sizeof err);
  if (!box->vm) luaL_error(L, "grace: %s", err);
  lua_setfield(L, LUA_REGISTRYINDEX, VM_KEY);
  /* the embedded standard library is searched before package.path */
  lua_getglobal(L, "package");
  if (lua_istable(L, -1)) {
    lua_getfield(L, -1, "searchers");
    if (lua_istable(L, -1)) {
      lua_Integer n = luaL_len(L, -1);
      for (lua_Integer i = n; i >= 2; i--) { lua_geti(L, -1, i); lua_seti(L, -2, i + 1); }
      lua_pushcfunction(L, lgrace_stdlib_searcher);
      lua_seti(L, -2, 2);
    }
    lua_pop(L, 1);
  }
  lua_pop(L, 1);
}

int luaopen_grace(lua_State *L) {
  if (!grace_lua_vm(L)) open_vm(L, NULL);
  luaL_newlib(L, grace_funcs);
  lua_pushliteral(L, GRACE_VERSION);
  lua_setfield(L, -2, "version");
  lgrace_open_tensor(L);
  lgrace_open_compile(L);
  lgrace_open_io(L);
  open_stdlib_part(L, "grace.ops");    /* ops composed in Lua (dot, norm, median, ...) */
  open_stdlib_part(L, "grace.loss");   /* the loss functions */
  open_stdlib_part(L, "grace.optim");  /* grace.optim: optimizers and schedules */
  open_stdlib_part(L, "grace.help");   /* grace.help: the one-line docs */
  lgrace_open_region(L);
  return 1;
}

/* grace_lua_open's protected part: the host's VM (a light userdata, or none) is argument 1. */
static int host_open(lua_State *L) {
  grace_vm *vm = lua_touserdata(L, 1), *have = grace_lua_vm(L);
  if (vm && have && vm != have) return luaL_error(L, "grace_lua_open: the state already uses another VM");
  if (vm && grace_index_base(vm) != 1)
    return luaL_error(L, "grace_lua_open: the VM must be made with index_base 1 (Lua counts from 1)");
  if (vm && !have) open_vm(L, vm);
  luaL_requiref(L, "grace", luaopen_grace, 1);
  return 0;
}

int grace_lua_open(lua_State *L, grace_vm *vm) {
  lua_pushcfunction(L, host_open);
  lua_pushlightuserdata(L, vm);
  return lua_pcall(L, 1, 0, 0);
}
