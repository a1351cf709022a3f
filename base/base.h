/* base.h: the bottom layer every other folder may use: the grace_vm struct, tensors and storage, errors,
 * host allocation, dtype loads/stores, shape helpers, the CPU worker pool, random numbers, and the two tables
 * through which lower layers reach upper ones without naming them: the backend table (one per device, filled
 * by cpu/ and gpu/) and the dispatcher's hooks (filled by vm/). */
#ifndef GRACE_BASE_H
#define GRACE_BASE_H

#include <stdarg.h>
#include <stdint.h>
#include <string.h>
#include <pthread.h>
#include "grace.h"

#define VM_ALIGN 64
#define VM_ERRLEN 512

typedef struct vm_pool vm_pool;
typedef struct vm_trace vm_trace;
typedef struct cuda_ctx cuda_ctx;
typedef struct vm_backend vm_backend;
typedef struct vm_hooks vm_hooks;

struct grace_vm {
  grace_alloc_fn alloc;
  void *alloc_ud;
  grace_device default_device;
  int index_base;
  uint64_t seed;                 /* Philox key */
  uint64_t rng_offset;           /* advanced by every random op */
  int threads;
  vm_pool *pool;                 /* CPU workers, started on first parallel loop */
  cuda_ctx *cuda;                /* NULL until first used; see cuda/cuda_api.h */
  const vm_backend *backend[2];  /* indexed by grace_device; set by grace_vm_new */
  const vm_hooks *hooks;         /* the dispatcher's (vm/); set by grace_vm_new */
  vm_trace *trace;               /* an active trace (vm/vm_trace.c), or NULL */
  struct gpu_state *gpu;         /* the device executor's caches (gpu/gpu_exec.c), NULL until used */
  void *gpu_ops;                 /* gpu/gpu_ops.c's table of loaded single-op kernels, NULL until used */
  struct gg_graph *graph_cap;    /* a CUDA graph being captured (gpu/gpu_graph.c), or NULL */
  struct gg_graph *graph_pending;   /* graphs whose index-check flags are on their way back (gpu/gpu_graph.c) */
  int graph_timing;              /* a program's launch measurement is timing a call now (gpu/gpu_graph.c): the
                                    programs it runs inside (a region's branches) do not measure then */
  uint64_t graph_unsteady;       /* calls that compiled or captured (gpu/gpu_graph.c): a timed call during which
                                    this grows timed work that later calls will not do, and is not counted */
  grace_status (*after_sync)(grace_vm *vm);   /* run by cuda_sync once the stream is idle: reads those flags */
  char index_err[VM_ERRLEN];     /* such an error found where it could not be raised (a graph freed): the next
                                    cuda_sync raises it */
  int launch_mode;               /* grace_set_graphs: 0 unset (GRACE_GRAPHS decides), else mode + 3 */
  int region_mode;               /* grace_set_regions: 0 unset (GRACE_REGIONS decides), else grace_region_lowering + 2 (1: auto) */
  int matmul_mode;               /* grace_set_matmul: 0 unset (GRACE_MATMUL decides), else gpu_mm_choice + 1 */
  int norm_prologue;             /* grace_set_norm_prologue: 0 unset (GRACE_NORM_PROLOGUE decides), 1 on, 2 off */
  size_t tensor_bytes;           /* in the storages of live tensors, host and device (grace_tensor_bytes) */
  size_t max_bytes;              /* cap on tensor_bytes (grace_set_memory_limit), 0: none */
  int no_grad;                   /* autograd's recording is off (grace_set_grad_enabled) */
  uint64_t grad_seq;             /* autograd nodes recorded so far (their order) */
  grace_progress_fn progress;    /* grace_set_progress */
  void *progress_ud;
  char info[160];
  grace_status status;           /* of the last error set by vm_err */
  char err[VM_ERRLEN];
};

typedef struct vm_storage {
  int refcount;
  grace_device device;
  void *data;
  size_t nbytes;
  uint64_t version;              /* shared by all views, as PyTorch's version counter */
  int foreign;                   /* the host's memory (grace_tensor_wrap): not counted, never freed by grace */
  grace_release_fn release;      /* foreign: called with release_ud and data when the last reference goes */
  void *release_ud;
} vm_storage;

struct grace_tensor {
  int refcount;
  grace_vm *vm;
  vm_storage *storage;
  grace_dtype dtype;
  int ndim;
  int wrapped;                   /* a host number made by grace_tensor_scalar */
  int pending;                   /* made by a replay, its value not computed yet (vm_replay.c) */
  struct vm_lazy *lazy;          /* pending: how to compute it again, a value a partition kept internal (vm_part.c) */
  int lazy_out;                  /* which result of lazy's program it is */
  int requires_grad;             /* a leaf whose gradient backward accumulates into grad */
  struct vm_gnode *grad_fn;      /* the autograd node that made it (vm/vm_grad.c), NULL for a leaf */
  int grad_slot;                 /* which output of grad_fn it is */
  grace_tensor *grad;            /* accumulated gradient of a leaf, or NULL */
  int64_t sizes[GRACE_MAX_DIMS];
  int64_t strides[GRACE_MAX_DIMS];
  int64_t offset;                /* elements */
};

/* ---- progress of long work (grace_set_progress): one line to the host's callback, if any ---- */
void vm_progress(grace_vm *vm, const char *fmt, ...) __attribute__((format(printf, 2, 3)));
/* Whether $GRACE_LOG (a comma-separated list of topics) names topic: the reports a user asked for on stderr. The
 * topics are listed for hosts by grace_log_topics (vm/vm_fn_explain.c); a layer below vm/ logs one of them through
 * this. */
int vm_log_wants(const char *topic);

/* ---- errors: set the message (op name first) and return the status ---- */
#define vm_err grace_set_error
/* "[2, 3]" into buf */
const char *vm_fmt_shape(char *buf, size_t n, int ndim, const int64_t *sizes);
#define VM_SHAPE(t) vm_fmt_shape((char[128]){0}, 128, (t)->ndim, (t)->sizes)

/* ---- host memory through the VM's allocator ---- */
void *vm_alloc(grace_vm *vm, size_t n);          /* 64-byte aligned, NULL on failure (no message) */
/* Working memory an op sizes from its data (a count of selected positions, a converted operand, a copy of an
 * expanded view): count elements of size bytes. Under a memory cap (grace_set_memory_limit), which counts tensor
 * storages, a block larger than the cap is refused, so an expanded view (a few bytes of storage for a huge shape)
 * cannot make a host or device block far larger than the cap; a product that overflows is refused too.
 * vm_data_bytes checks and sets *bytes; vm_alloc_data allocates on the host. Both set the error (naming op, the
 * size and the cap) when they refuse: NULL / the status. */
grace_status vm_data_bytes(grace_vm *vm, const char *op, size_t count, size_t size, size_t *bytes);
void *vm_alloc_data(grace_vm *vm, const char *op, size_t count, size_t size);
void *vm_calloc(grace_vm *vm, size_t n);
void vm_free(grace_vm *vm, void *p, size_t n);

/* ---- tensors ---- */
/* New contiguous tensor, uninitialised; NULL with the error set (op names the caller; vm->status). */
grace_tensor *vm_tensor_new(grace_vm *vm, const char *op, grace_dtype dt, grace_device dev, int ndim,
                            const int64_t *sizes);
/* New tensor sharing base's storage (offset and strides in elements). */
grace_tensor *vm_tensor_view(grace_vm *vm, const char *op, grace_tensor *base, int ndim,
                             const int64_t *sizes, const int64_t *strides, int64_t offset);
int64_t vm_numel(int ndim, const int64_t *sizes);   /* of a shape already checked (every tensor's is) */

/* ---- checked shape arithmetic: every size, stride, offset and element count computed from a caller's numbers
 * goes through these, since a product or sum that wraps around int64 makes a view larger than its storage. ---- */
/* The most elements a shape may have, counting only its nonzero sizes (so that the product of any subset of a
 * shape's sizes, as kernels compute over outer or inner dims, fits too), and 8 bytes each still fit an int64. */
#define VM_MAX_NUMEL (INT64_C(1) << 60)
static inline int vm_mul_ok(int64_t a, int64_t b, int64_t *r) { return !__builtin_mul_overflow(a, b, r); }
static inline int vm_add_ok(int64_t a, int64_t b, int64_t *r) { return !__builtin_add_overflow(a, b, r); }
static inline int vm_sub_ok(int64_t a, int64_t b, int64_t *r) { return !__builtin_sub_overflow(a, b, r); }
/* An index or dim as the user wrote it, for messages: a non-negative one plus the index base (unchanged where that
 * would pass INT64_MAX, which only a C caller's value can reach). */
/* triu/tril's diagonal k for R x C matrices, clamped to [-R, C]: every k past either end selects the same elements,
 * and row + k then never overflows */
static inline int64_t vm_tri_diag(int64_t k, int64_t R, int64_t C) { return k < -R ? -R : k > C ? C : k; }
static inline long long vm_user_index(int64_t i, int base) { return i >= 0 && i <= INT64_MAX - base ? i + base : i; }
/* A shape's element count, or -1 when a size is negative or its nonzero sizes multiply past VM_MAX_NUMEL. */
static inline int64_t vm_numel_checked(int ndim, const int64_t *sizes) {
  int64_t nz = 1, zero = 0;
  if (ndim < 0 || ndim > GRACE_MAX_DIMS) return -1;
  for (int d = 0; d < ndim; d++) {
    if (sizes[d] < 0) return -1;
    if (sizes[d] == 0) { zero = 1; continue; }
    if (!vm_mul_ok(nz, sizes[d], &nz) || nz > VM_MAX_NUMEL) return -1;
  }
  return zero ? 0 : nz;
}
/* The same with the message: "op: shape [..] is too large (...)" or "op: negative size ...". */
grace_status vm_check_shape(grace_vm *vm, const char *op, int ndim, const int64_t *sizes);
void vm_contiguous_strides(int ndim, const int64_t *sizes, int64_t *strides);
static inline char *vm_ptr(const grace_tensor *t) {
  return (char *)t->storage->data + (size_t)t->offset * grace_dtype_size(t->dtype);
}
static inline void vm_bump_version(grace_tensor *t) { t->storage->version++; }
int vm_is_contiguous(const grace_tensor *t);
/* Whether dev's backend has a kernel for op on tensors in[0..nin) (see vm_backend.supports). */
int vm_backend_supports(grace_vm *vm, grace_device dev, grace_op op, int nin, grace_tensor *const *in,
                        const grace_attrs *a, char *why, size_t n);
/* A device tensor's elements copied to a new host storage, returned as a view with the same layout. */
grace_status vm_to_host(grace_vm *vm, const grace_tensor *t, grace_tensor **out);

/* Normalise a dim (negative counts from the end) against ndim; the error names op and shows dims in
 * the VM's index base (1-based for Lua). */
#define vm_norm_dim grace_norm_dim
/* Strides of t seen through a broadcast to (ndim, sizes): 0 on broadcast dims. t must broadcast. */
void vm_broadcast_strides(const grace_tensor *t, int ndim, const int64_t *sizes, int64_t *strides);
/* The same for the leading `own` dims of a tensor (tsizes, tstrides): a matmul operand's batch dims. */
void vm_broadcast_dims(int own, const int64_t *tsizes, const int64_t *tstrides, int ndim, const int64_t *sizes,
                       int64_t *strides);

/* Multi-index counter over a shape, row-major: for (c = ...; ; ) { ...; if (!vm_counter_next(&c)) break; } */
typedef struct vm_counter {
  int ndim;
  int64_t sizes[GRACE_MAX_DIMS];
  int64_t idx[GRACE_MAX_DIMS];
} vm_counter;
void vm_counter_init(vm_counter *c, int ndim, const int64_t *sizes);
static inline int vm_counter_next(vm_counter *c) {
  for (int d = c->ndim - 1; d >= 0; d--) {
    if (++c->idx[d] < c->sizes[d]) return 1;
    c->idx[d] = 0;
  }
  return 0;
}
static inline int64_t vm_offset(int ndim, const int64_t *idx, const int64_t *strides) {
  int64_t o = 0;
  for (int d = 0; d < ndim; d++) o += idx[d] * strides[d];
  return o;
}

/* ---- dtypes ---- */
int vm_dtype_category(grace_dtype dt);           /* 0 bool, 1 int, 2 float */
grace_dtype vm_promote_types(grace_dtype a, grace_dtype b);
/* PyTorch's result_type: dimensioned tensors over 0-d tensors over wrapped numbers (NULLs skipped). */
grace_dtype vm_result_type(int n, grace_tensor *const *ts);

static inline float vm_half_to_float(uint16_t h) {
  uint32_t sign = (uint32_t)(h & 0x8000) << 16, exp = (h >> 10) & 0x1f, man = h & 0x3ff, bits;
  if (exp == 0) {
    if (man == 0) bits = sign;
    else { /* subnormal: normalise */
      exp = 127 - 15 + 1;
      while (!(man & 0x400)) { man <<= 1; exp--; }
      man &= 0x3ff;
      bits = sign | (exp << 23) | (man << 13);
    }
  } else if (exp == 31) bits = sign | 0x7f800000u | (man << 13);
  else bits = sign | ((exp + 127 - 15) << 23) | (man << 13);
  float f; memcpy(&f, &bits, 4); return f;
}
static inline uint16_t vm_float_to_half(float f) {   /* round to nearest even */
  uint32_t x; memcpy(&x, &f, 4);
  uint32_t sign = (x >> 16) & 0x8000, ax = x & 0x7fffffffu;
  if (ax >= 0x7f800000u) return (uint16_t)(sign | 0x7c00 | (ax > 0x7f800000u ? 0x200 : 0));
  if (ax >= 0x477ff000u) return (uint16_t)(sign | 0x7c00);          /* overflow to inf */
  if (ax < 0x38800000u) {                                           /* subnormal or zero */
    float af; memcpy(&af, &ax, 4);
    uint32_t m = (uint32_t)__builtin_lrintf(af * 16777216.0f);     /* units of 2^-24, ties even */
    return (uint16_t)(sign | m);
  }
  uint32_t r = ax + 0xfffu + ((ax >> 13) & 1);
  return (uint16_t)(sign | ((r - 0x38000000u) >> 13));
}
static inline float vm_bf16_to_float(uint16_t h) { uint32_t b = (uint32_t)h << 16; float f; memcpy(&f, &b, 4); return f; }
static inline uint16_t vm_float_to_bf16(float f) {
  uint32_t x; memcpy(&x, &f, 4);
  if ((x & 0x7fffffffu) > 0x7f800000u) return (uint16_t)((x >> 16) | 0x40);  /* quiet NaN */
  return (uint16_t)((x + 0x7fffu + ((x >> 16) & 1)) >> 16);
}

static inline double vm_load_f64(grace_dtype dt, const void *p) {
  switch (dt) {
  case GRACE_FLOAT32: return *(const float *)p;
  case GRACE_FLOAT64: return *(const double *)p;
  case GRACE_FLOAT16: return vm_half_to_float(*(const uint16_t *)p);
  case GRACE_BFLOAT16: return vm_bf16_to_float(*(const uint16_t *)p);
  case GRACE_INT32: return *(const int32_t *)p;
  case GRACE_INT64: return (double)*(const int64_t *)p;
  case GRACE_UINT8: return *(const uint8_t *)p;
  case GRACE_BOOL: return *(const uint8_t *)p != 0;
  default: return 0;
  }
}
static inline int64_t vm_load_i64(grace_dtype dt, const void *p) {
  switch (dt) {
  case GRACE_INT32: return *(const int32_t *)p;
  case GRACE_INT64: return *(const int64_t *)p;
  case GRACE_UINT8: return *(const uint8_t *)p;
  case GRACE_BOOL: return *(const uint8_t *)p != 0;
  default: {
    double v = vm_load_f64(dt, p);
    return v != v ? 0 : v >= 9.2233720368547758e18 ? INT64_MAX : v <= -9.2233720368547758e18 ? INT64_MIN : (int64_t)v;
  }
  }
}
/* Float to integer conversion truncates toward zero (as C and PyTorch); out of range saturates. */
static inline void vm_store_f64(grace_dtype dt, void *p, double v) {
  switch (dt) {
  case GRACE_FLOAT32: *(float *)p = (float)v; break;
  case GRACE_FLOAT64: *(double *)p = v; break;
  case GRACE_FLOAT16: *(uint16_t *)p = vm_float_to_half((float)v); break;
  case GRACE_BFLOAT16: *(uint16_t *)p = vm_float_to_bf16((float)v); break;
  case GRACE_INT32: *(int32_t *)p = v != v ? 0 : v >= 2147483647.0 ? INT32_MAX : v <= -2147483648.0 ? INT32_MIN : (int32_t)v; break;
  case GRACE_INT64: *(int64_t *)p = v != v ? 0 : v >= 9.2233720368547758e18 ? INT64_MAX : v <= -9.2233720368547758e18 ? INT64_MIN : (int64_t)v; break;
  case GRACE_UINT8: *(uint8_t *)p = (uint8_t)(int64_t)(v != v ? 0 : v >= 9.2e18 || v <= -9.2e18 ? 0 : v); break;
  case GRACE_BOOL: *(uint8_t *)p = v != 0; break;
  default: break;
  }
}
/* Integer stores wrap modulo 2^bits, as C casts of integers (uint8 + 300 wraps in PyTorch too). */
static inline void vm_store_i64(grace_dtype dt, void *p, int64_t v) {
  switch (dt) {
  case GRACE_INT32: *(int32_t *)p = (int32_t)(uint32_t)(uint64_t)v; break;
  case GRACE_INT64: *(int64_t *)p = v; break;
  case GRACE_UINT8: *(uint8_t *)p = (uint8_t)(uint64_t)v; break;
  case GRACE_BOOL: *(uint8_t *)p = v != 0; break;
  default: vm_store_f64(dt, p, (double)v); break;
  }
}

/* Scalar attribute k (0: a, 1: b, 2: c) as an integer, exact where the caller gave one. */
static inline int64_t vm_attr_int(const grace_attrs *a, int k) {
  double d = k == 0 ? a->a : k == 1 ? a->b : a->c;
  if (a->exact & (1 << k)) return k == 0 ? a->ia : k == 1 ? a->ib : a->ic;
  return d != d ? 0 : d >= 9.2233720368547758e18 ? INT64_MAX : d <= -9.2233720368547758e18 ? INT64_MIN : (int64_t)d;
}

/* ---- CPU worker pool ---- */
typedef void (*vm_range_fn)(void *ctx, int64_t begin, int64_t end);
/* Runs fn over [0, n) split into chunks of at least `grain`; on the calling thread when small. */
void vm_parallel_for(grace_vm *vm, int64_t n, int64_t grain, vm_range_fn fn, void *ctx);
void vm_pool_free(grace_vm *vm);

/* ---- backends: what dispatch, placement and the executors ask of a device. cpu/ and gpu/ each fill one
 * table; a backend reaches another only through its table, and never calls the dispatcher (grace_run). ---- */
/* An operand as placement sees it before any data exists: what a backend's supports() looks at. */
typedef struct vm_meta {
  grace_dtype dtype;
  grace_device device;
  int ndim;
  int64_t sizes[GRACE_MAX_DIMS];
} vm_meta;
typedef grace_status (*vm_op_fn)(grace_vm *vm, grace_op op, int nin, grace_tensor *const *in, const grace_attrs *a,
                                 int nout, grace_tensor **out);
struct vm_backend {
  const char *name;
  grace_device device;
  /* Whether the backend has a kernel for op on operands like in[0..nin) (ndim -1: an absent optional input).
   * 0: why (n bytes) says what it lacks, and vm_route runs the op on the CPU backend over host copies, results
   * moved back; placement reports the same. NULL: every op. */
  int (*supports)(grace_vm *vm, grace_op op, int nin, const vm_meta *in, const grace_attrs *a, char *why, size_t n);
  vm_op_fn run_op;          /* one op; out gets nout new references */
  /* A whole verified IR program whose tensor inputs are on this device (grace_ir_run's semantics). */
  grace_status (*run_program)(grace_ir *ir, int nin, grace_tensor *const *in, int nout, grace_tensor **out);
  grace_status (*synchronize)(grace_vm *vm);
  /* Memory: bytes for a new storage (the message set on failure), freeing them, copying bytes to the host. */
  grace_status (*storage_alloc)(grace_vm *vm, size_t bytes, void **data);
  void (*storage_free)(grace_vm *vm, void *data, size_t bytes);
  grace_status (*to_host)(grace_vm *vm, void *dst, const void *src, size_t bytes);
  void (*release)(grace_vm *vm);   /* the backend's state, when the VM ends */
};
static inline const vm_backend *vm_backend_of(const grace_vm *vm, grace_device dev) { return vm->backend[dev]; }

/* VIEW ops (base_view.c): the same for every backend, a new tensor over the input's storage. */
grace_status vm_view_run(grace_vm *vm, grace_op op, int nin, grace_tensor *const *in, const grace_attrs *a, int nout,
                         grace_tensor **out);
/* A view op's result shape from its input's shape: every view op's checks and messages, which vm_view_run and
 * inference (ir_infer) share, so they are written once (here, as ir/ may call base/ but not the reverse). from[d]:
 * the input dim that result dim d is, unchanged in size (-1: a new dim or a new size). Checks that need strides
 * (view without a copy) stay with vm_view_run. */
grace_status vm_view_shape(grace_vm *vm, grace_op op, int ndim, const int64_t *sizes, const grace_attrs *a, int *ond,
                           int64_t *osizes, int *from);

/* ---- the dispatcher's hooks: what tensor functions here must tell an active trace or replay ---- */
struct vm_hooks {
  /* A tensor made from host data while tracing: a constant local to the traced program. */
  grace_status (*created)(grace_vm *vm, grace_tensor *t);
  /* The host reads t's data or layout: a break of an active trace (a replay runs what was deferred: its status). */
  grace_status (*read)(grace_vm *vm, const grace_tensor *t, const char *how);
  /* A tensor made while replaying stands for a value not computed yet: this runs what was deferred (and computes
   * a value a partition kept inside); the status of that. */
  grace_status (*materialize)(grace_vm *vm, const grace_tensor *t);
  /* Pauses (+1) or resumes (-1) recording: computing that is no op of the traced program (a pass folding). */
  void (*hold)(grace_vm *vm, int delta);
  /* A dying tensor made by an op autograd recorded: drops its node (vm/vm_grad.c). */
  void (*grad_drop)(grace_tensor *t);
  /* A dying or computed tensor drops its way of being computed again (vm/vm_part.c). */
  void (*lazy_drop)(grace_tensor *t);
};
static inline grace_status vm_materialize(const grace_tensor *t) {
  return (t->pending || t->vm->trace) && t->vm->hooks ? t->vm->hooks->materialize(t->vm, t) : GRACE_OK;
}
static inline void vm_trace_hold(grace_vm *vm, int delta) {
  if (vm->trace && vm->hooks) vm->hooks->hold(vm, delta);
}
static inline grace_status vm_note_read(const grace_tensor *t, const char *how) {
  return t->vm->trace && t->vm->hooks ? t->vm->hooks->read(t->vm, t, how) : GRACE_OK;
}
/* t's value computed (a replay's deferred work run, a value a partition kept inside computed again); an error where
 * it cannot be: what computing it failed on (a value kept inside whose inputs changed since), or a call that failed
 * before it. */
static inline grace_status vm_computed(grace_vm *vm, const grace_tensor *t) {
  grace_status st = vm_materialize(t);
  if (!t->pending) return GRACE_OK;
  if (st != GRACE_OK) return st;
  return grace_set_error(vm, GRACE_EARG, "a value of a compiled function's call that failed: it was never computed");
}
/* Before the host reads t's elements: a break of a trace, and t's value computed (vm_computed); where the work the
 * break runs failed before computing t, what it failed on. */
static inline grace_status vm_host_read(grace_vm *vm, const grace_tensor *t, const char *how) {
  grace_status st = vm_note_read(t, how);
  return st != GRACE_OK && t->pending ? st : vm_computed(vm, t);
}
/* ---- routing (base_route.c): one op on the backend of its inputs' device, outside any trace ---- */
/* The checks common to all ops and the device it runs on; *op may change (a wrapped number's CONTIGUOUS is a
 * CLONE), *attrs NULL becomes the defaults. *done: the result is already in out (to() onto its own device). */
grace_status vm_route_prepare(grace_vm *vm, grace_op *op, int nin, grace_tensor *const *in, const grace_attrs **attrs,
                              int nout, grace_tensor **out, grace_device *dev, int *done);
/* Runs a prepared op on dev's backend, or on the CPU over host copies where that backend does not take it. */
grace_status vm_route_run(grace_vm *vm, grace_device dev, grace_op op, int nin, grace_tensor *const *in,
                          const grace_attrs *attrs, int nout, grace_tensor **out);
/* Both: grace_run without tracing. Backends, executors and passes compute through this, never grace_run. */
grace_status vm_route(grace_vm *vm, grace_op op, int nin, grace_tensor *const *in, const grace_attrs *attrs, int nout,
                      grace_tensor **out);

/* ---- random numbers: Philox4x32-10, counter (element index, op offset), key = seed ---- */
void vm_philox(uint64_t seed, uint64_t offset, uint64_t index, uint32_t out[4]);

#endif
