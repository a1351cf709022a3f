/* game_loop.c: a C program that owns its lua_State and runs grace in it, as a game would: a Lua script defines a
 * compiled physics step over tensors (balls falling and bouncing), and a fixed-timestep loop (60 steps per second
 * of simulated time, run as fast as it goes: no sleeping) calls it every frame, reads the positions into C arrays
 * (as a renderer would) and checks them against the same physics in plain C. It prints the p50 and p99 frame times
 * and fails if any frame after the warm-up traced (compiled) again.
 * Build: cc -std=c11 -Iinclude -I/usr/include/lua5.4 game_loop.c -Lbuild -lgrace_lua -lgrace -llua5.4 (make examples). */
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <lauxlib.h>
#include <lualib.h>
#include "grace_lua.h"

#define N 256          /* balls */
#define FRAMES 600     /* ten seconds of simulated time */
#define WARMUP 10
#define DT (1.0 / 60)

static const char *script =
  "local G, BOUNCE = 9.81, 0.9\n"
  "step = grace.compile(function(y, v, dt)\n"
  "  v = v - G * dt\n"
  "  y = y + v * dt\n"
  "  local below = y:lt(0)\n"
  "  return grace.where(below, -y, y), grace.where(below, -v * BOUNCE, v)\n"
  "end)\n";

/* The same step in C, in float32 as grace computes it. */
static void c_step(float *y, float *v, double dt) {
  float g = (float)(9.81 * dt), fdt = (float)dt;
  for (int i = 0; i < N; i++) {
    v[i] = v[i] - g;
    y[i] = y[i] + v[i] * fdt;
    if (y[i] < 0) { y[i] = -y[i]; v[i] = -v[i] * 0.9f; }
  }
}

static int cmp_double(const void *a, const void *b) {
  double x = *(const double *)a, y = *(const double *)b;
  return (x > y) - (x < y);
}

/* traces of the compiled step so far, through its Lua stats table (step:stats().traces) */
static long step_traces(lua_State *L) {
  if (luaL_dostring(L, "return step:stats().traces") != LUA_OK) return -1;
  long n = (long)lua_tointeger(L, -1);
  lua_pop(L, 1);
  return n;
}

static int fail_lua(lua_State *L, const char *what) {
  fprintf(stderr, "game_loop: %s: %s\n", what, lua_tostring(L, -1));
  return 1;
}

int main(void) {
  lua_State *L = luaL_newstate();
  luaL_openlibs(L);
  if (grace_lua_open(L, NULL) != LUA_OK) return fail_lua(L, "grace_lua_open");
  if (luaL_dostring(L, script) != LUA_OK) return fail_lua(L, "script");
  grace_vm *vm = grace_lua_vm(L);

  static float y[N], v[N], cy[N], cv[N];
  for (int i = 0; i < N; i++) { cy[i] = y[i] = 1.0f + 0.01f * i; cv[i] = v[i] = 0; }
  int64_t sizes[] = {N};
  grace_tensor *ty = NULL, *tv = NULL;
  if (grace_tensor_from_data(vm, GRACE_FLOAT32, 1, sizes, GRACE_FLOAT32, y, &ty) != GRACE_OK ||
      grace_tensor_from_data(vm, GRACE_FLOAT32, 1, sizes, GRACE_FLOAT32, v, &tv) != GRACE_OK) {
    fprintf(stderr, "game_loop: %s\n", grace_last_error(vm));
    return 1;
  }
  static double ms[FRAMES];
  long warm_traces = 0;
  double worst = 0;
  for (int frame = 0; frame < FRAMES; frame++) {
    double t0 = grace_clock();
    lua_getglobal(L, "step");
    grace_lua_pushtensor(L, ty);
    grace_lua_pushtensor(L, tv);
    lua_pushnumber(L, DT);
    if (lua_pcall(L, 3, 2, 0) != LUA_OK) return fail_lua(L, "step");
    grace_tensor *ny = grace_lua_totensor(L, -2), *nv = grace_lua_totensor(L, -1);
    if (!ny || !nv) { fprintf(stderr, "game_loop: step returned no tensors\n"); return 1; }
    grace_tensor_retain(ny);   /* the new state outlives the Lua values */
    grace_tensor_retain(nv);
    lua_pop(L, 2);
    grace_tensor_release(ty);
    grace_tensor_release(tv);
    ty = ny;
    tv = nv;
    if (grace_tensor_read(vm, ty, GRACE_FLOAT32, y) != GRACE_OK) { fprintf(stderr, "%s\n", grace_last_error(vm)); return 1; }
    ms[frame] = (grace_clock() - t0) * 1e3;
    if (frame == WARMUP - 1) warm_traces = step_traces(L);
    c_step(cy, cv, DT);
    for (int i = 0; i < N; i++) if (fabs(y[i] - cy[i]) > worst) worst = fabs(y[i] - cy[i]);
  }
  long traces = step_traces(L);
  qsort(ms, FRAMES, sizeof ms[0], cmp_double);
  printf("frames %d (%.1f s simulated), frame time p50 %.3f ms, p99 %.3f ms\n", FRAMES, FRAMES * DT,
         ms[FRAMES / 2], ms[FRAMES * 99 / 100]);
  printf("traces after warm-up: %ld (in all %ld)\n", traces - warm_traces, traces);
  printf("largest difference from C: %.2g\n", worst);
  int ok = traces == warm_traces && traces >= 1 && worst < 1e-3;
  grace_tensor_release(ty);
  grace_tensor_release(tv);
  lua_close(L);   /* frees the VM the state made */
  printf("game_loop: %s\n", ok ? "ok" : "FAILED");
  return !ok;
}
