/* lgrace_autograd.c: autograd in Lua: the fields requires_grad, grad, is_leaf and grad_fn of a tensor, the methods
 * backward, requires_grad_ and detach, and the module functions grad, no_grad, enable_grad, is_grad_enabled and
 * set_grad_enabled, over the public grace_*grad* functions. */
#include <string.h>
#include "lua/lgrace_tensor.h"

int lg_grad_field(lua_State *L, lg_ctx *c, grace_tensor *x, const char *k) {
  if (!strcmp(k, "requires_grad")) lua_pushboolean(L, grace_tensor_requires_grad(x));
  else if (!strcmp(k, "is_leaf")) lua_pushboolean(L, grace_tensor_is_leaf(x));
  else if (!strcmp(k, "grad_fn")) {
    const char *fn = grace_tensor_grad_fn(x);
    if (fn) lua_pushstring(L, fn);
    else lua_pushnil(L);
  } else if (!strcmp(k, "grad")) {
    grace_tensor *g = grace_tensor_grad(x);
    if (!g) { lua_pushnil(L); return lg_done(c, 1); }
    return lg_push(L, c, g);
  } else return 0;
  return lg_done(c, 1);
}

int lg_grad_assign(lua_State *L, lg_ctx *c, grace_tensor *x, const char *k, int v) {
  if (!strcmp(k, "requires_grad")) {
    if (!lua_isboolean(L, v)) return lg_errorf(L, c, "requires_grad: expected a boolean, got %s", luaL_typename(L, v));
    if (grace_tensor_set_requires_grad(x, lua_toboolean(L, v)) != GRACE_OK) return lg_fail(L, c);
    return 1;
  }
  if (!strcmp(k, "grad")) {
    grace_tensor *g = lua_isnil(L, v) ? NULL : lg_totensor(L, v);
    if (!g && !lua_isnil(L, v)) return lg_errorf(L, c, "grad: expected a tensor or nil, got %s", luaL_typename(L, v));
    if (grace_tensor_set_grad(x, g) != GRACE_OK) return lg_fail(L, c);
    return 1;
  }
  return 0;
}

/* y:backward([grad]) */
static int m_backward(lua_State *L) {
  lg_ctx *c = lg_begin(L);
  grace_tensor *y = lg_check(L, c, 1, "backward"), *g = NULL;
  if (!lua_isnoneornil(L, 2) && !(g = lg_totensor(L, 2)))
    return lg_errorf(L, c, "backward: the gradient must be a tensor, got %s", luaL_typename(L, 2));
  if (grace_backward(c->vm, 1, &y, g ? &g : NULL) != GRACE_OK) return lg_fail(L, c);
  return lg_done(c, 0);
}

/* x:requires_grad_([flag]): sets the flag of a leaf, returns x */
static int m_requires_grad_(lua_State *L) {
  lg_ctx *c = lg_begin(L);
  grace_tensor *x = lg_check(L, c, 1, "requires_grad_");
  int on = lua_isnone(L, 2) ? 1 : lua_toboolean(L, 2);
  if (grace_tensor_set_requires_grad(x, on) != GRACE_OK) return lg_fail(L, c);
  lua_settop(L, 1);
  return lg_done(c, 1);
}

static int m_detach(lua_State *L) {
  lg_ctx *c = lg_begin(L);
  grace_tensor *x = lg_check(L, c, 1, "detach");
  grace_tensor **slot = lg_newslot(L);
  if (grace_detach(c->vm, x, slot) != GRACE_OK) return lg_fail(L, c);
  return lg_done(c, 1);
}

const luaL_Reg lg_grad_methods[] = {
  {"backward", m_backward},
  {"requires_grad_", m_requires_grad_},
  {"detach", m_detach},
  {NULL, NULL}
};

/* A tensor or a list of tensors at idx into out (at most max; borrowed: the argument holds them); returns the count,
 * *single whether idx was one tensor rather than a list. */
static int tensors(lua_State *L, lg_ctx *c, int idx, const char *what, grace_tensor **out, int max, int *single) {
  *single = lg_is_tensor(L, idx);
  if (*single) { out[0] = lg_check(L, c, idx, "grad"); return 1; }
  if (lua_type(L, idx) != LUA_TTABLE)
    return lg_errorf(L, c, "grad: %s must be a tensor or a list of tensors, got %s", what, luaL_typename(L, idx));
  int n = (int)luaL_len(L, idx);
  if (n < 1 || n > max) return lg_errorf(L, c, "grad: %s: expected 1 to %d tensors, got %d", what, max, n);
  for (int k = 0; k < n; k++) {
    lua_rawgeti(L, idx, k + 1);
    out[k] = lg_totensor(L, -1);
    lua_pop(L, 1);   /* the table keeps it alive */
    if (!out[k]) return lg_errorf(L, c, "grad: %s[%d] is not a tensor", what, k + 1);
  }
  return n;
}

#define LG_GRAD_MAX 256
/* grace.grad(outputs, inputs [, grad_outputs]): the gradients of inputs (a tensor or a list; nil where no path) */
static int l_grad(lua_State *L) {
  lg_ctx *c = lg_begin(L);
  grace_tensor *outs[LG_GRAD_MAX], *ins[LG_GRAD_MAX], *seeds[LG_GRAD_MAX], *res[LG_GRAD_MAX];
  int single, one_input;
  int no = tensors(L, c, 1, "outputs", outs, LG_GRAD_MAX, &single);
  int ni = tensors(L, c, 2, "inputs", ins, LG_GRAD_MAX, &one_input);
  int ns = lua_isnoneornil(L, 3) ? 0 : tensors(L, c, 3, "grad_outputs", seeds, LG_GRAD_MAX, &single);
  if (ns && ns != no) return lg_errorf(L, c, "grad: %d outputs and %d grad_outputs", no, ns);
  if (grace_grad(c->vm, no, outs, ns ? seeds : NULL, ni, ins, res) != GRACE_OK) return lg_fail(L, c);
  for (int k = 0; k < ni; k++) lg_keep(L, c, res[k]);   /* released by lg_drop; each pushed with its own reference */
  if (one_input) {
    if (!res[0]) { lua_pushnil(L); return lg_done(c, 1); }
    return lg_push(L, c, res[0]);
  }
  lua_createtable(L, ni, 0);
  for (int k = 0; k < ni; k++) {
    if (!res[k]) continue;
    grace_tensor **slot = lg_newslot(L);
    grace_tensor_retain(res[k]);
    *slot = res[k];
    lua_rawseti(L, -2, k + 1);
  }
  return lg_done(c, 1);
}

/* no_grad(fn, ...) and enable_grad(fn, ...): fn's results, with grad mode restored even when fn raises */
static int with_mode(lua_State *L, int on) {
  luaL_checktype(L, 1, LUA_TFUNCTION);
  grace_vm *vm = lg_begin(L)->vm;
  int was = grace_set_grad_enabled(vm, on);
  int rc = lua_pcall(L, lua_gettop(L) - 1, LUA_MULTRET, 0);
  grace_set_grad_enabled(vm, was);
  if (rc != LUA_OK) return lua_error(L);
  return lua_gettop(L);
}
static int l_no_grad(lua_State *L) { return with_mode(L, 0); }
static int l_enable_grad(lua_State *L) { return with_mode(L, 1); }

static int l_is_grad_enabled(lua_State *L) {
  lua_pushboolean(L, grace_grad_enabled(lg_begin(L)->vm));
  return 1;
}
/* set_grad_enabled(flag): returns the previous setting */
static int l_set_grad_enabled(lua_State *L) {
  luaL_checktype(L, 1, LUA_TBOOLEAN);
  lua_pushboolean(L, grace_set_grad_enabled(lg_begin(L)->vm, lua_toboolean(L, 1)));
  return 1;
}

const luaL_Reg lg_module_grad[] = {
  {"grad", l_grad},
  {"no_grad", l_no_grad},
  {"enable_grad", l_enable_grad},
  {"is_grad_enabled", l_is_grad_enabled},
  {"set_grad_enabled", l_set_grad_enabled},
  {NULL, NULL}
};
