/* lgrace_tensor.h: internals shared by the files of the Lua binding (lua/lgrace_*.c): the tensor
 * userdata, the per-state context that owns temporaries, argument parsing (1-based dims and positions,
 * shapes, dtypes, options) and the run-and-push helpers. Only include/grace.h is used underneath. */
#ifndef GRACE_LGRACE_TENSOR_H
#define GRACE_LGRACE_TENSOR_H

#include <lua.h>
#include <lauxlib.h>
#include "lua/lgrace.h"

#define LG_TENSOR "grace.Tensor"
#define LG_NTMP 16   /* temporaries held inline; more (cat of many tensors) grow a heap array */
#define LG_SIZE "grace.Size"   /* the metatable of sizes (x:size(), x.shape, x:stride()) */
/* Registry field: the Lua function a compiled function is tracing (or replaying under its guards' checks) now, set by
 * lgrace_compile.c from trace_begin to trace_end; nil outside. Its upvalues and the tables they reach are guarded. */
#define LG_TRACED_FN "grace.traced_fn"

/* A temporary and the call that holds it: the Lua state and its CallInfo (lua_Debug's i_ci, used only as the
 * call's identity). */
typedef struct lg_tmp {
  grace_tensor *t;
  lua_State *L;
  const void *ci;
} lg_tmp;

/* Per Lua state. Wrapped numbers, intermediate results and references to the call's tensor arguments live in tmp
 * while a C function runs: a Lua error (longjmp) cannot leak them, because the next lg_begin, or the context's
 * __gc, releases them. Lua code can run in the middle of a call (a metamethod of an argument, a finalizer run by
 * an allocation, a __close) and call grace again: each temporary is tagged with its call, so that a nested call
 * releases only its own, and a call's leftovers (of an error) go once that call is seen dead. */
typedef struct lg_ctx {
  grace_vm *vm;
  int ntmp, cap;
  lg_tmp *tmp;                  /* inline, or a heap array of cap entries */
  lg_tmp inline_tmp[LG_NTMP];
  lua_State *L;                 /* the call that kept the last temporary: lg_drop releases its temporaries */
  const void *ci;
  size_t gc_pending, gc_next;   /* lg_account: tensor bytes not yet told to the collector, the batch size */
  int want_grad;                /* the call's options said requires_grad = true: its result is made to require grad */
} lg_ctx;

/* Every entry point (a function Lua calls) starts with this; helpers take the ctx instead. */
lg_ctx *lg_begin(lua_State *L);
/* Takes ownership of one reference to t (may be NULL) until lg_drop; returns t. Raises (t released) when memory
 * for it runs out. */
grace_tensor *lg_keep(lua_State *L, lg_ctx *c, grace_tensor *t);
void lg_drop(lg_ctx *c);
/* A call that returns values other than new tensors ends with this: its temporaries (the argument tensors it
 * held) go now, not at the next call. Returns n. */
static inline int lg_done(lg_ctx *c, int n) { lg_drop(c); return n; }
/* Releases the temporaries and raises the VM's last error (resp. a formatted one) at the script line. */
int lg_fail(lua_State *L, lg_ctx *c);
int lg_errorf(lua_State *L, lg_ctx *c, const char *fmt, ...) __attribute__((format(printf, 3, 4)));
/* A Lua buffer of n elements of 8 bytes that a binding sizes from a tensor's shape (tolist's values, tensor's
 * staging), pushed on the stack and returned. Past the VM's memory cap it raises the core's working-memory error
 * (op, size, cap): a huge expanded view then fails with the cap's figures, not a buffer of its whole size. */
void *lg_data_buffer(lua_State *L, lg_ctx *c, const char *op, int64_t n);

/* ---- the userdata ---- */
/* Pushes a new tensor userdata holding NULL and returns its slot: grace_run writes the result there,
 * so the reference is owned by Lua from the moment it exists. */
grace_tensor **lg_newslot(lua_State *L);
/* The live tensor at idx, or NULL (not a tensor, or closed). */
grace_tensor *lg_totensor(lua_State *L, int idx);
int lg_is_tensor(lua_State *L, int idx);
/* The live tensor at idx or an error naming op and the argument. */
grace_tensor *lg_check(lua_State *L, lg_ctx *c, int idx, const char *op);
/* A tensor, or a Lua number/boolean turned into a wrapped number (a temporary), or an error. */
grace_tensor *lg_operand(lua_State *L, lg_ctx *c, int idx, const char *op);
/* Tells the Lua collector about a new tensor's memory, which it cannot see (a userdata is 8 bytes), in batches. */
void lg_account(lua_State *L, lg_ctx *c, const grace_tensor *t);
/* Runs op into nout new userdata (pushed in order), releases the temporaries; raises on failure. */
int lg_run(lua_State *L, lg_ctx *c, grace_op op, int nin, grace_tensor *const *in, const grace_attrs *a, int nout);
/* Pushes t (a temporary or a borrowed tensor) as a new userdata with its own reference; drops temporaries. */
int lg_push(lua_State *L, lg_ctx *c, grace_tensor *t);
/* Copies the value at idx (a number, boolean or tensor, broadcast) into dst (FILL_ or COPY_). */
int lg_assign(lua_State *L, lg_ctx *c, grace_tensor *dst, int idx, const char *op);
/* Runs a one-output op into a temporary. */
grace_tensor *lg_run_tmp(lua_State *L, lg_ctx *c, grace_op op, int nin, grace_tensor *const *in, const grace_attrs *a);

/* ---- arguments ---- */
/* "[2, 3]" */
const char *lg_shape_str(char *buf, size_t n, int ndim, const int64_t *sizes);
#define LG_SHAPE(t) lg_shape_str((char[160]){0}, 160, grace_tensor_ndim(t), grace_tensor_sizes(t))
/* A Lua dim (1-based, negative from the end, 0 invalid) as the C API's dim (0-based, negative kept). */
int64_t lg_dim(lua_State *L, lg_ctx *c, int idx, const char *op);
/* A dim or a table of dims into a->dims; nil/none leaves ndims 0. */
void lg_dims(lua_State *L, lg_ctx *c, int idx, const char *op, grace_attrs *a);
/* A 1-based position (negative from the end) as a 0-based one (negative kept). */
int64_t lg_pos(lua_State *L, lg_ctx *c, int idx, const char *op, const char *what);
/* Normalises a C dim against ndim like the VM does (error names op); returns 0..ndim-1. */
int lg_norm_dim(lua_State *L, lg_ctx *c, int64_t dim, int ndim, const char *op);
/* A shape given as a table at idx or as numbers from idx on, into a->shape; returns the index after it.
 * allow_neg1: -1 entries are kept (reshape, expand). */
int lg_shape(lua_State *L, lg_ctx *c, int idx, const char *op, grace_attrs *a, int allow_neg1);
int64_t lg_int(lua_State *L, lg_ctx *c, int idx, const char *op, const char *what);
/* The number (or boolean) at idx as scalar attribute k (0: a, 1: b, 2: c), exact for Lua integers. */
void lg_number_attr(lua_State *L, int idx, grace_attrs *a, int k);
grace_dtype lg_dtype(lua_State *L, lg_ctx *c, int idx, const char *op);
/* A device name ("cpu", "cuda", "cuda:0"); returns 0 if the string is not one. */
int lg_parse_device(const char *s, grace_device *out);
/* Options table {dtype=, device=} at idx (nil/none allowed); sets a->has_dtype/dtype and a->device. */
void lg_opts(lua_State *L, lg_ctx *c, int idx, const char *op, grace_attrs *a, int *has_device);

/* ---- the other files ---- */
int lg_tostring(lua_State *L);                       /* lgrace_print.c */
int lg_set_printoptions(lua_State *L);               /* lgrace_print.c: grace.set_printoptions{...} */
int lg_push_size(lua_State *L, int n, const int64_t *v);   /* lgrace_methods.c: a size ({1, 16, 256}) */
void lg_open_create(lua_State *L);                   /* lgrace_create.c: constructors into the module */
extern const luaL_Reg lg_special_methods[];          /* lgrace_methods.c */
int lg_inplace(lua_State *L);                        /* lgrace_methods.c: NAME_ (upvalue: the op) */
extern const luaL_Reg lg_view_methods[];             /* lgrace_shape.c */
extern const luaL_Reg lg_module_shape[];             /* lgrace_shape.c: cat, stack, where, ... */
extern const luaL_Reg lg_index_methods[];            /* lgrace_index.c: index_put_ */
int lg_index_get(lua_State *L);                      /* lgrace_index.c: x[key] for table and tensor keys */
int lg_index_set(lua_State *L);                      /* lgrace_index.c: x[key] = v for them */

/* lgrace_autograd.c: x.requires_grad, x.grad, x.is_leaf, x.grad_fn (pushes it, returns 1; 0: not one of them),
 * assigning x.grad and x.requires_grad (v the value's index; returns 1 when k is one of them), the methods and the
 * module functions */
int lg_grad_field(lua_State *L, lg_ctx *c, grace_tensor *x, const char *k);
int lg_grad_assign(lua_State *L, lg_ctx *c, grace_tensor *x, const char *k, int v);
extern const luaL_Reg lg_grad_methods[];
extern const luaL_Reg lg_module_grad[];

/* ---- compiled functions (lgrace_compile.c) and their launch report (lgrace_report.c) ---- */
/* The core object of the compiled function at idx (a Lua error if it is not one); *name its name, if asked. */
grace_fn *lg_compiled_fn(lua_State *L, int idx, const char **name);
int lg_compiled_report(lua_State *L);   /* f:report() */
int lg_report(lua_State *L);            /* grace.report(f) */
/* grace.eager inside a cond or while_loop function being recorded raises lg_region_eager: the region runs eagerly */
extern const char lg_region_eager;
int lg_region_recording(lua_State *L);

#endif
