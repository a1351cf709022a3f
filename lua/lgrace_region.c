/* lgrace_region.c: grace.cond and grace.while_loop, data-dependent control flow in explicit form (PyTorch's
 * torch.cond and while_loop). Eagerly they just run: the predicate is read on the host and the chosen function
 * called. Inside a trace (grace.compile) each function is recorded into a sub-program of one region instruction
 * (include/grace.h: grace_trace_sub_begin ... grace_trace_cond), so the condition stays on the device side of the
 * program and the compiled function runs later calls without Lua. The trace still needs the values this call
 * returns: cond returns the outputs of the branch its predicate chooses (both branches ran while being recorded;
 * a tensor from outside that one writes in place gets its contents back after each, then the taken branch's, and
 * in the program the region returns it and it is written once after: grace_trace_cond), and while_loop runs the
 * loop eagerly once more with the trace paused (its functions may not write to tensors from outside). */
#include <stdio.h>
#include <string.h>
#include "lua/lgrace_tensor.h"

#define MAXT 64   /* tensors a region passes (arguments and captures), results it gives */

static const char *desc(const grace_tensor *t, char *buf, size_t n) {
  char s[160];
  snprintf(buf, n, "%s %s", grace_dtype_name(grace_tensor_dtype(t)), lg_shape_str(s, sizeof s, grace_tensor_ndim(t), grace_tensor_sizes(t)));
  return buf;
}

static int same_type(const grace_tensor *a, const grace_tensor *b) {
  if (grace_tensor_dtype(a) != grace_tensor_dtype(b) || grace_tensor_ndim(a) != grace_tensor_ndim(b) ||
      grace_tensor_device(a) != grace_tensor_device(b))
    return 0;
  return !memcmp(grace_tensor_sizes(a), grace_tensor_sizes(b), sizeof(int64_t) * (size_t)grace_tensor_ndim(a));
}

/* Whether 0-d tensor t is nonzero (a read on the host; a device value is waited for). 0: error in err. */
static int truth(grace_vm *vm, grace_tensor *t, const char *op, const char *what, int *out, char *err, size_t n) {
  char d[200];
  if (grace_tensor_ndim(t) != 0) {
    snprintf(err, n, "%s: %s must be a 0-d tensor, got %s", op, what, desc(t, d, sizeof d));
    return 0;
  }
  double v = 0;
  if (grace_tensor_read(vm, t, GRACE_FLOAT64, &v) != GRACE_OK) {
    snprintf(err, n, "%s", grace_last_error(vm));
    return 0;
  }
  *out = v != 0;   /* NaN is true */
  return 1;
}

/* The tensors among the n values from stack index a0 (in order), at most MAXT. */
static int tensors_at(lua_State *L, int a0, int n, grace_tensor **out) {
  int k = 0;
  for (int i = 0; i < n; i++) {
    grace_tensor *t = lg_totensor(L, a0 + i);
    if (t && k < MAXT) out[k++] = t;
  }
  return k;
}

/* Checks that the n values from stack index r0 are tensors; fills out. 0: error in err. */
static int results_are_tensors(lua_State *L, const char *op, const char *fn, int r0, int n, grace_tensor **out,
                               char *err, size_t en) {
  if (n < 1 || n > MAXT) {
    snprintf(err, en, "%s: %s returns %d values; it must return 1 to %d tensors", op, fn, n, MAXT);
    return 0;
  }
  for (int i = 0; i < n; i++)
    if (!(out[i] = lg_totensor(L, r0 + i))) {
      snprintf(err, en, "%s: %s returns a %s as result %d; it must return tensors", op, fn, luaL_typename(L, r0 + i), i + 1);
      return 0;
    }
  return 1;
}

/* ---- recording one function into a sub-program ---- */
typedef struct region_rec {
  grace_ir *sub[2];
  grace_tensor *caps[2][MAXT];
  int ncap[2];
  int writes;                  /* a cond: its functions' in-place writes to outside tensors are recorded in w */
  grace_sub_writes w[2];
  char err[640];
} region_rec;

static void rec_free(region_rec *r) {
  for (int b = 0; b < 2; b++) {
    grace_sub_writes_release(&r->w[b]);
    grace_ir_free(r->sub[b]);
    r->sub[b] = NULL;
    for (int i = 0; i < r->ncap[b]; i++) grace_tensor_release(r->caps[b][i]);
    r->ncap[b] = 0;
  }
}

enum { REC_OK, REC_LUA_ERROR, REC_ERROR, REC_EAGER };

/* grace.eager inside a function being recorded: its body runs outside the trace, so a write it makes could not be
 * given back after the recording, and both of a cond's functions run while recording (a write of the branch not
 * taken would stay). So it raises this value instead, before running anything; record() takes it as REC_EAGER and
 * the region runs eagerly: only the function a call takes runs, and grace.eager with it. The registry field at
 * &lg_region_depth counts the recordings under way. */
const char lg_region_eager = 0, lg_region_depth = 0;

int lg_region_recording(lua_State *L) {
  lua_rawgetp(L, LUA_REGISTRYINDEX, &lg_region_depth);
  int n = (int)lua_tointeger(L, -1);
  lua_pop(L, 1);
  return n > 0;
}

static void recording(lua_State *L, int delta) {
  lua_rawgetp(L, LUA_REGISTRYINDEX, &lg_region_depth);
  lua_Integer n = lua_tointeger(L, -1) + delta;
  lua_pop(L, 1);
  lua_pushinteger(L, n);
  lua_rawsetp(L, LUA_REGISTRYINDEX, &lg_region_depth);
}

/* Records the function at stack index fn, called with the na values from a0, into r->sub[b] whose inputs are
 * in[0..nin); its results stay on the stack from *r0 (*nr of them, in res), its captures go to r->caps[b].
 * REC_LUA_ERROR: the function raised (the error value on top); REC_ERROR: r->err; REC_EAGER: no region can be
 * recorded now (a replay), nothing was pushed. */
static int record(lua_State *L, grace_vm *vm, region_rec *r, int b, const char *op, const char *fname, int fn, int a0,
                  int na, int nin, grace_tensor *const *in, int *r0, int *nr, grace_tensor **res) {
  r->sub[b] = grace_ir_new(vm, fname);
  if (!r->sub[b]) { snprintf(r->err, sizeof r->err, "%s", grace_last_error(vm)); return REC_ERROR; }
  grace_status st = grace_trace_sub_begin(vm, r->sub[b], nin, in);
  if (st == GRACE_EUNSUPPORTED) return REC_EAGER;
  if (st != GRACE_OK) { snprintf(r->err, sizeof r->err, "%s", grace_last_error(vm)); return REC_ERROR; }
  luaL_checkstack(L, na + 2, "grace: too many arguments");
  int top = lua_gettop(L);
  lua_pushvalue(L, fn);
  for (int i = 0; i < na; i++) lua_pushvalue(L, a0 + i);
  recording(L, 1);
  int rc = lua_pcall(L, na, LUA_MULTRET, 0);
  recording(L, -1);
  if (rc != LUA_OK) {
    grace_trace_sub_abort(vm);
    if (lua_touserdata(L, -1) != &lg_region_eager) return REC_LUA_ERROR;
    lua_pop(L, 1);
    return REC_EAGER;
  }
  *r0 = top + 1;
  *nr = lua_gettop(L) - top;
  char what[64];
  snprintf(what, sizeof what, "%s_fn", fname);
  if (!results_are_tensors(L, op, what, *r0, *nr, res, r->err, sizeof r->err)) { grace_trace_sub_abort(vm); return REC_ERROR; }
  st = grace_trace_sub_end(vm, *nr, res, MAXT - nin, r->caps[b], &r->ncap[b], r->writes ? &r->w[b] : NULL);
  if (st != GRACE_OK) { snprintf(r->err, sizeof r->err, "%s", grace_last_error(vm)); return REC_ERROR; }
  return REC_OK;
}

/* Declares inputs for caps to sub (the other function's captures, which this one does not read). */
static grace_status add_inputs(grace_ir *sub, int n, grace_tensor *const *caps) {
  grace_status st = GRACE_OK;
  for (int i = 0; i < n && st == GRACE_OK; i++) {
    grace_value v;
    st = grace_ir_input(sub, grace_tensor_dtype(caps[i]), grace_tensor_device(caps[i]), grace_tensor_ndim(caps[i]),
                        grace_tensor_sizes(caps[i]), &v);
  }
  return st;
}

/* Frees r and raises: the Lua error on top (lua_error) or r->err. */
static int rec_fail(lua_State *L, lg_ctx *c, region_rec *r, int code) {
  char msg[640];
  snprintf(msg, sizeof msg, "%s", r->err);
  rec_free(r);
  if (code == REC_LUA_ERROR) return lua_error(L);
  return lg_errorf(L, c, "%s", msg);
}

/* ---- grace.cond ---- */
/* Calls the chosen function with the arguments; its results (checked to be tensors) are returned. */
static int cond_eager(lua_State *L, lg_ctx *c, int take_then, int nargs) {
  int top = lua_gettop(L);
  lua_pushvalue(L, take_then ? 2 : 3);
  for (int i = 0; i < nargs; i++) lua_pushvalue(L, 4 + i);
  lua_call(L, nargs, LUA_MULTRET);
  int n = lua_gettop(L) - top;
  grace_tensor *res[MAXT];
  char err[640];
  if (!results_are_tensors(L, "cond", take_then ? "then_fn" : "else_fn", top + 1, n, res, err, sizeof err))
    return lg_errorf(L, c, "%s", err);
  return n;
}

/* The two branches' results agree in count, dtype, shape and device; 0: r->err. */
static int branches_agree(region_rec *r, int n0, grace_tensor *const *a, int n1, grace_tensor *const *b) {
  char x[200], y[200];
  if (n0 != n1) {
    snprintf(r->err, sizeof r->err, "cond: then_fn returns %d tensors, else_fn %d; both return the same", n0, n1);
    return 0;
  }
  for (int i = 0; i < n0; i++)
    if (!same_type(a[i], b[i])) {
      snprintf(r->err, sizeof r->err, "cond: result %d is %s from then_fn but %s from else_fn; both branches return the "
               "same dtypes and shapes", i + 1, desc(a[i], x, sizeof x), desc(b[i], y, sizeof y));
      return 0;
    }
  return 1;
}

static int cond_traced(lua_State *L, lg_ctx *c, grace_tensor *p, int nargs) {
  grace_vm *vm = c->vm;
  region_rec r = {0};
  r.writes = 1;
  grace_tensor *in[MAXT * 2], *res[2][MAXT];
  int nin = tensors_at(L, 4, nargs, in), r0[2], nr[2];
  /* both functions run to be recorded, and each draws random numbers as it would alone, from the same place in
   * the stream; the generator then goes on from where the branch this call takes left it */
  uint64_t seed, off0, off[2];
  grace_rng_state(vm, &seed, &off0);
  int code = record(L, vm, &r, 0, "cond", "then", 2, 4, nargs, nin, in, &r0[0], &nr[0], res[0]);
  if (code == REC_EAGER) { rec_free(&r); grace_set_rng_state(vm, seed, off0); return -1; }
  if (code != REC_OK) return rec_fail(L, c, &r, code);
  grace_rng_state(vm, NULL, &off[0]);
  grace_set_rng_state(vm, seed, off0);
  for (int i = 0; i < r.ncap[0]; i++) in[nin + i] = r.caps[0][i];   /* else sees then's captures as inputs too */
  code = record(L, vm, &r, 1, "cond", "else", 3, 4, nargs, nin + r.ncap[0], in, &r0[1], &nr[1], res[1]);
  grace_rng_state(vm, NULL, &off[1]);
  if (code == REC_EAGER) { rec_free(&r); grace_set_rng_state(vm, seed, off0); return -1; }   /* grace.eager in else_fn */
  if (code != REC_OK) return rec_fail(L, c, &r, code);
  if (!branches_agree(&r, nr[0], res[0], nr[1], res[1])) return rec_fail(L, c, &r, REC_ERROR);
  if (nin + r.ncap[0] + r.ncap[1] > MAXT - 1) {
    snprintf(r.err, sizeof r.err, "cond: the branches read %d tensors in all (at most %d)", nin + r.ncap[0] + r.ncap[1], MAXT - 1);
    return rec_fail(L, c, &r, REC_ERROR);
  }
  if (add_inputs(r.sub[0], r.ncap[1], r.caps[1]) != GRACE_OK) {
    snprintf(r.err, sizeof r.err, "%s", grace_last_error(vm));
    return rec_fail(L, c, &r, REC_ERROR);
  }
  int all = nin + r.ncap[0];
  for (int i = 0; i < r.ncap[1]; i++) in[all++] = r.caps[1][i];
  int take = 0;
  grace_trace_pause(vm);   /* which branch this call returns: no part of the program */
  int okp = truth(vm, p, "cond", "the predicate", &take, r.err, sizeof r.err);
  grace_trace_resume(vm);
  if (!okp) return rec_fail(L, c, &r, REC_ERROR);
  int b = take ? 0 : 1, n = nr[b];
  grace_set_rng_state(vm, seed, off[b]);
  grace_tensor *out[MAXT];
  for (int i = 0; i < n; i++) { out[i] = res[b][i]; grace_tensor_retain(out[i]); }
  grace_status st = grace_trace_cond(vm, p, all, in, r.sub[0], r.sub[1], n, out, r.w, b);
  r.sub[0] = r.sub[1] = NULL;   /* the trace's now */
  if (st != GRACE_OK) {
    snprintf(r.err, sizeof r.err, "%s", grace_last_error(vm));
    for (int i = 0; i < n; i++) grace_tensor_release(out[i]);
    return rec_fail(L, c, &r, REC_ERROR);
  }
  rec_free(&r);
  luaL_checkstack(L, n, "grace: too many results");
  for (int i = 0; i < n; i++) {
    grace_tensor **slot = lg_newslot(L);
    *slot = out[i];   /* our reference moves to Lua */
  }
  return n;
}

static int l_cond(lua_State *L) {
  lg_ctx *c = lg_begin(L);
  luaL_checktype(L, 2, LUA_TFUNCTION);
  luaL_checktype(L, 3, LUA_TFUNCTION);
  int nargs = lua_gettop(L) - 3;
  if (lua_isboolean(L, 1)) return cond_eager(L, c, lua_toboolean(L, 1), nargs);   /* known now: no region */
  if (lua_type(L, 1) == LUA_TNUMBER) return cond_eager(L, c, lua_tonumber(L, 1) != 0, nargs);
  grace_tensor *p = lg_check(L, c, 1, "cond");
  char err[640], d[200];
  if (grace_tensor_ndim(p) != 0)
    return lg_errorf(L, c, "cond: the predicate must be a 0-d tensor, got %s", desc(p, d, sizeof d));
  if (grace_trace_active(c->vm)) {
    int n = cond_traced(L, c, p, nargs);
    if (n >= 0) return n;
  }
  int take = 0;
  if (!truth(c->vm, p, "cond", "the predicate", &take, err, sizeof err)) return lg_errorf(L, c, "%s", err);
  return cond_eager(L, c, take, nargs);
}

/* ---- grace.while_loop ---- */
/* loop(cond_fn, body_fn, max_iters, state...): runs the loop eagerly, returns the final state. */
static int loop_eager(lua_State *L) {
  lg_ctx *c = lg_begin(L);
  int ns = lua_gettop(L) - 3;
  lua_Integer max = lua_tointeger(L, 3);
  char err[640], a[200], b[200];
  luaL_checkstack(L, ns + 2, "grace: too many state values");
  for (lua_Integer it = 0;; it++) {
    lua_pushvalue(L, 1);
    for (int i = 0; i < ns; i++) lua_pushvalue(L, 4 + i);
    lua_call(L, ns, 1);
    grace_tensor *t = lg_totensor(L, -1);
    if (!t) return lg_errorf(L, c, "while_loop: cond_fn returns a %s; it must return a 0-d tensor", luaL_typename(L, -1));
    int go = 0;
    if (!truth(c->vm, t, "while_loop", "cond_fn's result", &go, err, sizeof err)) return lg_errorf(L, c, "%s", err);
    lua_pop(L, 1);
    if (!go) break;
    if (max > 0 && it >= max)
      return lg_errorf(L, c, "while_loop: the loop is still running after max_iters=%lld iterations", (long long)max);
    int top = lua_gettop(L);
    lua_pushvalue(L, 2);
    for (int i = 0; i < ns; i++) lua_pushvalue(L, 4 + i);
    lua_call(L, ns, LUA_MULTRET);
    int n = lua_gettop(L) - top;
    if (n != ns) return lg_errorf(L, c, "while_loop: body_fn returns %d values for a state of %d tensors", n, ns);
    for (int i = 0; i < ns; i++) {
      grace_tensor *x = lg_totensor(L, top + 1 + i), *s = lg_totensor(L, 4 + i);
      if (!x) return lg_errorf(L, c, "while_loop: body_fn returns a %s as state %d; it must return tensors",
                               luaL_typename(L, top + 1 + i), i + 1);
      if (!same_type(x, s))
        return lg_errorf(L, c, "while_loop: body_fn changes state %d from %s to %s; the state keeps its dtype and shape",
                         i + 1, desc(s, a, sizeof a), desc(x, b, sizeof b));
    }
    for (int i = ns - 1; i >= 0; i--) lua_replace(L, 4 + i);
  }
  return ns;
}

static int while_traced(lua_State *L, lg_ctx *c, int ns, lua_Integer max) {
  grace_vm *vm = c->vm;
  region_rec r = {0};
  grace_tensor *in[MAXT * 2], *res[2][MAXT];
  int r0[2], nr[2];
  for (int i = 0; i < ns; i++) in[i] = lg_totensor(L, 4 + i);
  /* recording runs each function once; the loop then runs from the generator's state before them */
  uint64_t seed, off0;
  grace_rng_state(vm, &seed, &off0);
  int code = record(L, vm, &r, 0, "while_loop", "cond", 1, 4, ns, ns, in, &r0[0], &nr[0], res[0]);
  if (code == REC_EAGER) { rec_free(&r); grace_set_rng_state(vm, seed, off0); return -1; }
  if (code != REC_OK) return rec_fail(L, c, &r, code);
  char a[200], b[200];
  if (nr[0] != 1 || grace_tensor_ndim(res[0][0]) != 0) {
    snprintf(r.err, sizeof r.err, "while_loop: cond_fn must return one 0-d tensor, it returns %d values (the first %s)",
             nr[0], desc(res[0][0], a, sizeof a));
    return rec_fail(L, c, &r, REC_ERROR);
  }
  lua_settop(L, 3 + ns);
  for (int i = 0; i < r.ncap[0]; i++) in[ns + i] = r.caps[0][i];
  code = record(L, vm, &r, 1, "while_loop", "body", 2, 4, ns, ns + r.ncap[0], in, &r0[1], &nr[1], res[1]);
  if (code == REC_EAGER) {   /* grace.eager in body_fn */
    rec_free(&r);
    lua_settop(L, 3 + ns);
    grace_set_rng_state(vm, seed, off0);
    return -1;
  }
  if (code != REC_OK) return rec_fail(L, c, &r, code);
  if (nr[1] != ns) {
    snprintf(r.err, sizeof r.err, "while_loop: body_fn returns %d values for a state of %d tensors", nr[1], ns);
    return rec_fail(L, c, &r, REC_ERROR);
  }
  for (int i = 0; i < ns; i++)
    if (!same_type(res[1][i], in[i])) {
      snprintf(r.err, sizeof r.err, "while_loop: body_fn changes state %d from %s to %s; the state keeps its dtype and "
               "shape", i + 1, desc(in[i], a, sizeof a), desc(res[1][i], b, sizeof b));
      return rec_fail(L, c, &r, REC_ERROR);
    }
  lua_settop(L, 3 + ns);
  if (ns + r.ncap[0] + r.ncap[1] > MAXT || add_inputs(r.sub[0], r.ncap[1], r.caps[1]) != GRACE_OK) {
    snprintf(r.err, sizeof r.err, "while_loop: the functions read %d tensors in all (at most %d)", ns + r.ncap[0] + r.ncap[1], MAXT);
    return rec_fail(L, c, &r, REC_ERROR);
  }
  int all = ns + r.ncap[0];
  for (int i = 0; i < r.ncap[1]; i++) in[all++] = r.caps[1][i];
  /* this call's values: the loop run eagerly, outside the program being recorded */
  grace_set_rng_state(vm, seed, off0);
  lua_pushcfunction(L, loop_eager);
  lua_pushvalue(L, 1);
  lua_pushvalue(L, 2);
  lua_pushinteger(L, max);
  for (int i = 0; i < ns; i++) lua_pushvalue(L, 4 + i);
  grace_trace_pause(vm);
  int rc = lua_pcall(L, ns + 3, ns, 0);
  grace_trace_resume(vm);
  if (rc != LUA_OK) return rec_fail(L, c, &r, REC_LUA_ERROR);
  grace_tensor *out[MAXT];
  for (int i = 0; i < ns; i++) { out[i] = lg_totensor(L, -ns + i); grace_tensor_retain(out[i]); }
  grace_status st = grace_trace_while(vm, ns, all, in, r.sub[0], r.sub[1], max, out);
  r.sub[0] = r.sub[1] = NULL;
  if (st != GRACE_OK) {
    snprintf(r.err, sizeof r.err, "%s", grace_last_error(vm));
    for (int i = 0; i < ns; i++) grace_tensor_release(out[i]);
    return rec_fail(L, c, &r, REC_ERROR);
  }
  rec_free(&r);
  for (int i = 0; i < ns; i++) {
    grace_tensor **slot = lg_newslot(L);
    *slot = out[i];
  }
  return ns;
}

static int l_while_loop(lua_State *L) {
  lg_ctx *c = lg_begin(L);
  luaL_checktype(L, 1, LUA_TFUNCTION);
  luaL_checktype(L, 2, LUA_TFUNCTION);
  luaL_checktype(L, 3, LUA_TTABLE);
  lua_Integer max = 0;
  if (lua_istable(L, 4)) {
    lua_getfield(L, 4, "max_iters");
    if (!lua_isnil(L, -1) && (!lua_isinteger(L, -1) || lua_tointeger(L, -1) < 0))
      return lg_errorf(L, c, "while_loop: max_iters must be an integer >= 0 (0: unbounded)");
    max = lua_tointeger(L, -1);
    lua_pop(L, 1);
  } else if (!lua_isnoneornil(L, 4))
    return lg_errorf(L, c, "while_loop: the 4th argument is an options table ({max_iters = n})");
  int ns = (int)luaL_len(L, 3);
  if (ns < 1 || ns > MAXT) return lg_errorf(L, c, "while_loop: the state is a list of 1 to %d tensors, got %d values", MAXT, ns);
  lua_settop(L, 3);
  luaL_checkstack(L, ns + 8, "grace: too many state values");
  for (int i = 1; i <= ns; i++) {
    lua_geti(L, 3, i);
    if (!lg_totensor(L, -1)) return lg_errorf(L, c, "while_loop: state[%d] is a %s, not a tensor", i, luaL_typename(L, -1));
  }
  /* stack: cond, body, state table, state values at 4.. */
  if (grace_trace_active(c->vm)) {
    int n = while_traced(L, c, ns, max);
    if (n >= 0) return n;
  }
  lua_pushcfunction(L, loop_eager);
  lua_pushvalue(L, 1);
  lua_pushvalue(L, 2);
  lua_pushinteger(L, max);
  for (int i = 0; i < ns; i++) lua_pushvalue(L, 4 + i);
  lua_call(L, ns + 3, ns);
  return ns;
}

static const luaL_Reg region_funcs[] = {
  {"cond", l_cond},
  {"while_loop", l_while_loop},
  {NULL, NULL}
};

void lgrace_open_region(lua_State *L) { luaL_setfuncs(L, region_funcs, 0); }
