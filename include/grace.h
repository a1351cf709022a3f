/* grace.h: the public C API of grace: the VM handle, tensors, eager ops and errors.
 * Every function that can fail returns a grace_status; the message is then in grace_last_error(vm).
 * Nothing here aborts, exits or prints. Host languages (the Lua binding is one) use only this header. */
#ifndef GRACE_H
#define GRACE_H

#include <stddef.h>
#include <stdint.h>
#include "grace_ops.h"

#ifdef __cplusplus
extern "C" {
#endif
/* Everything declared here is the shared library's interface; the rest of grace is built hidden. */
#if defined(__GNUC__)
#pragma GCC visibility push(default)
#endif

#define GRACE_VERSION "0.1.0"
#define GRACE_MAX_DIMS 8

typedef enum grace_status {
  GRACE_OK = 0,
  GRACE_EARG,         /* a bad argument: wrong kind, out of range */
  GRACE_ESHAPE,       /* shapes do not fit together */
  GRACE_EDTYPE,       /* a dtype the op does not take */
  GRACE_EINDEX,       /* an index out of range */
  GRACE_ENOMEM,       /* host or device memory exhausted */
  GRACE_EDEVICE,      /* a device error, or a device that is not there */
  GRACE_EUNSUPPORTED, /* valid, but not supported by this backend */
  GRACE_EINTERNAL,    /* a bug in grace */
  GRACE_EHOST         /* the host's code failed (a Lua error): the host keeps its error and raises it */
} grace_status;

/* _(ENUM, name, bytes, category): category orders type promotion, BOOL < INT < FLOAT. */
#define GRACE_DTYPES(_) \
  _(FLOAT32,  "float32",  4, FLOAT) \
  _(FLOAT64,  "float64",  8, FLOAT) \
  _(FLOAT16,  "float16",  2, FLOAT) \
  _(BFLOAT16, "bfloat16", 2, FLOAT) \
  _(INT32,    "int32",    4, INT) \
  _(INT64,    "int64",    8, INT) \
  _(UINT8,    "uint8",    1, INT) \
  _(BOOL,     "bool",     1, BOOL)

typedef enum grace_dtype {
#define GRACE_DTYPE_ENUM(e, name, bytes, cat) GRACE_##e,
  GRACE_DTYPES(GRACE_DTYPE_ENUM)
#undef GRACE_DTYPE_ENUM
  GRACE_NDTYPES
} grace_dtype;

typedef enum grace_device { GRACE_CPU = 0, GRACE_CUDA = 1 } grace_device;

typedef enum grace_op {
#define GRACE_OP_ENUM(e, name, kind, nin, nout) GRACE_OP_##e,
  GRACE_OPS(GRACE_OP_ENUM)
#undef GRACE_OP_ENUM
  GRACE_NOPS
} grace_op;

typedef enum grace_opkind {
#define GRACE_OPKIND_ENUM(k) GRACE_KIND_##k,
  GRACE_OPKINDS(GRACE_OPKIND_ENUM)
#undef GRACE_OPKIND_ENUM
  GRACE_NOPKINDS
} grace_opkind;

/* ---- the VM ---- */
typedef struct grace_vm grace_vm;
typedef struct grace_tensor grace_tensor;

/* Host allocator, as lua_Alloc plus an alignment: nsize 0 frees ptr; otherwise (re)allocates to nsize
 * bytes aligned to `align` (a power of two). Returns NULL on failure. grace never asks for a block larger than
 * the machine's physical memory (it fails such a request itself, as out of memory). */
typedef void *(*grace_alloc_fn)(void *ud, void *ptr, size_t osize, size_t nsize, size_t align);

typedef struct grace_config {
  grace_alloc_fn alloc;   /* NULL: mimalloc */
  void *alloc_ud;
  const char *device;     /* "cpu", "cuda" or "auto" (NULL: $GRACE_DEVICE, else "auto") */
  int threads;            /* CPU worker threads; 0: one per core */
  int index_base;         /* values of index tensors (argmax, gather, ...): 0 (C, default) or 1 (Lua) */
  size_t max_bytes;       /* cap on grace_tensor_bytes, host and device together (grace_set_memory_limit); 0: none */
} grace_config;

/* NULL cfg gives the defaults. On failure returns NULL and, if err is not NULL, writes a message there. */
grace_vm *grace_vm_new(const grace_config *cfg, char *err, size_t errlen);
/* Frees the VM and everything it holds. Lifetimes: every tensor, IR and function made with a VM belongs to it and
 * must be released (grace_tensor_release, grace_ir_free, ...) before grace_vm_free; none may be used after it, nor
 * after its own release. Pointers a function returns (grace_tensor_sizes, grace_last_error, grace_ir_text) are valid
 * until the object changes or is released. A NULL pointer where a function takes one is an error status (GRACE_EARG,
 * with the message in grace_last_error where there is a VM); an accessor of a NULL tensor gives 0 or NULL. */
void grace_vm_free(grace_vm *vm);
const char *grace_last_error(const grace_vm *vm);
const char *grace_status_name(grace_status st);
grace_device grace_default_device(const grace_vm *vm);
/* "cpu", "cuda" or "auto"; "cuda" with no usable device is an error. */
grace_status grace_set_default_device(grace_vm *vm, const char *name);
/* One line describing the backend in use, e.g. "cpu (2 threads)" or "cuda: NVIDIA H200, sm_90". */
const char *grace_backend_info(grace_vm *vm);
/* Whether a CUDA driver and device are present (libcuda is loaded on first call, never required). */
int grace_cuda_available(grace_vm *vm);
/* The device's memory and kernel-compilation figures (zeros when no device was used). */
typedef struct grace_device_stats {
  size_t allocated, reserved, peak_allocated;   /* bytes: in tensors now, held from the driver, highest allocated */
  uint64_t nvrtc_calls, disk_hits, memory_hits; /* kernels compiled, loaded from the disk cache, found in memory */
  double nvrtc_seconds;
  /* Kernels grace launched itself on its stream since the VM began (generated and template kernels). Not counted:
   * kernels launched by cuBLASLt, kernels replayed inside a CUDA graph (grace_graph_info.kernels says how many a
   * graph holds) and launches recorded into a graph being captured. */
  uint64_t kernel_launches;
  /* Times the host waited for all of the device's queued work (a stream synchronization): each read of a device
   * value on the host, grace_synchronize, the first call of a new layout. A compiled call replayed as a graph
   * waits for nothing, index checks included. */
  uint64_t syncs;
} grace_device_stats;
void grace_device_stats_get(grace_vm *vm, grace_device_stats *out);
/* Starts a new peak: peak_allocated becomes the bytes allocated now, so that grace_device_stats_get reports the
 * highest allocation since this call (per benchmark mode, say). Nothing to do when no device was used. */
void grace_device_reset_peak(grace_vm *vm);
/* Waits for the device's queued work (timing from the host needs it); GRACE_OK when no device is in use. */
grace_status grace_synchronize(grace_vm *vm);
/* The device time of fn(vm, ud) in *ms. dev GRACE_CUDA: the milliseconds between two events recorded on the VM's
 * stream, one just before fn runs and one when it has returned, waiting for the second: the span on the device from
 * the point where fn's work could start to its completion. Work queued before the call delays the first event, and
 * gaps where the device waits for the host (a host-bound fn) count, so synchronize first and read it as the device
 * span of one call, not a sum of kernel durations. A CUDA device must be usable (else GRACE_EDEVICE). dev GRACE_CPU:
 * the host's wall time of fn (the CPU backend finishes each op before it returns). fn's status is returned, with its
 * error message; *ms is 0 unless everything succeeded. */
typedef grace_status (*grace_timed_fn)(grace_vm *vm, void *ud);
grace_status grace_device_time(grace_vm *vm, grace_device dev, grace_timed_fn fn, void *ud, double *ms);
/* Returns the device memory cached by the allocator but not in use to the driver. */
void grace_empty_cache(grace_vm *vm);
int grace_index_base(const grace_vm *vm);
/* Sets the VM's error message (for hosts and subsystems reporting through the same channel); returns st. */
grace_status grace_set_error(grace_vm *vm, grace_status st, const char *fmt, ...) __attribute__((format(printf, 3, 4)));
/* The VM's host allocator (grace_alloc_fn semantics). */
void *grace_realloc(grace_vm *vm, void *ptr, size_t osize, size_t nsize);
void grace_manual_seed(grace_vm *vm, uint64_t seed);
/* The generator's state: its seed and its offset, the number of random ops that have drawn since the seed was set
 * (each draws its elements from the stream at the next offset). Setting a saved state replays the same draws. */
void grace_rng_state(const grace_vm *vm, uint64_t *seed, uint64_t *offset);
void grace_set_rng_state(grace_vm *vm, uint64_t seed, uint64_t offset);
/* Seconds on a monotonic clock (for timing; the origin is arbitrary). */
double grace_clock(void);
/* Work that can take long (NVRTC compiling a kernel, recording and measuring CUDA graphs) calls fn(ud, what) as it
 * goes, what being one line ("compiling kernel 12 with NVRTC"). grace prints nothing itself: a host that shows
 * progress should do so only after a second of such work and only on a terminal (the grace command does). NULL
 * turns it off. */
typedef void (*grace_progress_fn)(void *ud, const char *what);
void grace_set_progress(grace_vm *vm, grace_progress_fn fn, void *ud);

/* ---- dtypes and devices ---- */
const char *grace_dtype_name(grace_dtype dt);
grace_status grace_dtype_from_name(const char *name, grace_dtype *out);
size_t grace_dtype_size(grace_dtype dt);
int grace_dtype_is_float(grace_dtype dt);
int grace_dtype_is_int(grace_dtype dt);   /* integer or bool */
const char *grace_device_name(grace_device dev);
grace_dtype grace_promote_types(grace_dtype a, grace_dtype b);
/* A dim (negative counts from the end; a 0-d tensor takes 0 and -1) as 0..ndim-1; the error names op and
 * shows dims in the VM's index base. */
grace_status grace_norm_dim(grace_vm *vm, const char *op, int64_t dim, int ndim, int *out);
/* PyTorch's result_type: operands of tier 0 (tensors with dims) over tier 1 (0-d tensors) over tier 2
 * (wrapped host numbers; a float one counts as float32): a lower tier only raises the category. */
grace_dtype grace_result_type(int n, const grace_dtype *dtypes, const int *tiers);
/* NumPy broadcasting of n shapes; the error names op and the shapes. */
grace_status grace_broadcast_shapes(grace_vm *vm, const char *op, int n, const int *ndims,
                                    const int64_t *const *sizes, int *ndim, int64_t *out);

/* ---- tensors (reference counted; every function returning a tensor gives the caller one reference) ---- */
grace_status grace_tensor_empty(grace_vm *vm, grace_dtype dt, grace_device dev, int ndim,
                                const int64_t *sizes, grace_tensor **out);
/* A new contiguous tensor holding a copy of `data` (ndim sizes, row-major, of dtype src_dt), stored as dt. */
grace_status grace_tensor_from_data(grace_vm *vm, grace_dtype dt, int ndim, const int64_t *sizes,
                                    grace_dtype src_dt, const void *data, grace_tensor **out);
/* A 0-d tensor for a host number (a Lua number in `x + 2`): it takes part in type promotion as a
 * PyTorch "wrapped number" (it does not widen a tensor's dtype within the same category). */
grace_status grace_tensor_scalar(grace_vm *vm, double v, int is_integer, grace_tensor **out);
/* The same for an integer, exactly (int64 values past 2^53 survive). */
grace_status grace_tensor_scalar_int(grace_vm *vm, int64_t v, grace_tensor **out);
/* A CPU tensor over memory the caller owns, without copying: ndim sizes, row-major and contiguous, of dtype dt, at
 * data, which must be aligned to grace_dtype_size(dt) and hold numel * grace_dtype_size(dt) bytes. grace reads and
 * writes the memory in place (in-place ops, copy_, index_put_ write the caller's array) and never frees it: when the
 * last reference to it goes (the tensor and every view of it: views share the memory; op results do not, they are
 * new tensors), release(ud, data) is called once, if release is not NULL. Until then the memory must stay valid and
 * must not be freed or reused. Not counted by grace_tensor_bytes nor by the memory limit. On failure nothing is
 * kept and release is not called. */
typedef void (*grace_release_fn)(void *ud, void *data);
grace_status grace_tensor_wrap(grace_vm *vm, grace_dtype dt, int ndim, const int64_t *sizes, void *data,
                               grace_release_fn release, void *ud, grace_tensor **out);
void grace_tensor_retain(grace_tensor *t);
void grace_tensor_release(grace_tensor *t);

int grace_tensor_ndim(const grace_tensor *t);
const int64_t *grace_tensor_sizes(const grace_tensor *t);
const int64_t *grace_tensor_strides(const grace_tensor *t);   /* in elements */
int64_t grace_tensor_offset(const grace_tensor *t);            /* in elements */
int64_t grace_tensor_numel(const grace_tensor *t);
/* Bytes held by the storages of the VM's live tensors, host and device (views count their storage once). A
 * garbage-collected host uses it to pace its collector (lua/ does). */
size_t grace_tensor_bytes(const grace_vm *vm);
/* Caps grace_tensor_bytes (0: no cap): a new storage that would take it past `bytes` is GRACE_ENOMEM ("memory limit
 * of N bytes reached (M in use, K requested)") and nothing is allocated; the VM stays usable, and releasing tensors
 * makes room again. A cap below what is in use only stops new storages. For scripts the host does not trust:
 * the device's cached blocks, kernels and host bookkeeping are not counted, only tensor storages. */
void grace_set_memory_limit(grace_vm *vm, size_t bytes);
size_t grace_memory_limit(const grace_vm *vm);
grace_dtype grace_tensor_dtype(const grace_tensor *t);
grace_device grace_tensor_device(const grace_tensor *t);
int grace_tensor_is_contiguous(const grace_tensor *t);
int grace_tensor_is_scalar(const grace_tensor *t);             /* made by grace_tensor_scalar */
uint64_t grace_tensor_version(const grace_tensor *t);          /* bumped on every in-place write */
const void *grace_tensor_storage_id(const grace_tensor *t);    /* equal for views of one storage */
/* Host pointer to element 0 (with offset applied); NULL for device tensors. */
void *grace_tensor_data(grace_tensor *t);
/* Copies all elements, in row-major order of the logical shape, converted to dst_dt, into dst
 * (numel * grace_dtype_size(dst_dt) bytes). Works for device tensors too. */
grace_status grace_tensor_read(grace_vm *vm, const grace_tensor *t, grace_dtype dst_dt, void *dst);
/* Element at a multi-index (0-based, ndim entries) as double or as int64. */
grace_status grace_tensor_get(grace_vm *vm, const grace_tensor *t, const int64_t *index, double *out);
grace_status grace_tensor_get_int(grace_vm *vm, const grace_tensor *t, const int64_t *index, int64_t *out);

/* ---- files of tensors (io/): safetensors, NumPy .npy and .npz ----
 * Loading maps the file read-only (mmap) and copies each tensor out of the mapping into a storage of its own
 * (then to dev), so no tensor keeps the file open or mapped. Saving writes PATH.tmp-PID and renames it over path
 * once complete. Elements are little-endian and row-major. .npy/.npz have no bfloat16: saving one is an error. */
typedef enum grace_file_format {
  GRACE_FILE_AUTO = 0,          /* from the path's extension: .safetensors, .npy, .npz */
  GRACE_FILE_SAFETENSORS,
  GRACE_FILE_NPY,               /* exactly one tensor, unnamed */
  GRACE_FILE_NPZ                /* members NAME.npy; read: stored or deflated (np.savez_compressed); written stored */
} grace_file_format;
/* The format the path's extension names (case-insensitive), GRACE_FILE_AUTO when none. */
grace_file_format grace_file_format_of(const char *path);
typedef struct grace_tensor_file {
  grace_vm *vm;
  int count;                    /* tensors, in the file's order */
  char **names;                 /* NAME for npz member NAME.npy, "" for .npy */
  grace_tensor **tensors;       /* owned by the file: retain one to keep it past grace_tensor_file_free */
  int nmeta;                    /* safetensors' "__metadata__" (string to string) */
  char **meta_keys, **meta_values;
  int cap, metacap;             /* allocated entries (private to io/) */
} grace_tensor_file;
grace_status grace_load_file(grace_vm *vm, const char *path, grace_file_format fmt, grace_device dev,
                             grace_tensor_file **out);
void grace_tensor_file_free(grace_tensor_file *f);
/* n tensors under names (unique, non-empty; ignored for .npy, which takes n == 1), metadata for safetensors only
 * (nmeta pairs; else nmeta must be 0). safetensors lays the tensors out in the order given, the header padded with
 * spaces to 8 bytes, so a CPU reader can map them aligned. */
grace_status grace_save_file(grace_vm *vm, const char *path, grace_file_format fmt, int n, const char *const *names,
                             grace_tensor *const *tensors, int nmeta, const char *const *meta_keys,
                             const char *const *meta_values);

/* ---- ops ---- */
typedef struct grace_attrs {
  int ndims;                        /* dims (0-based; negative counts from the end); 0: none given */
  int64_t dims[GRACE_MAX_DIMS];
  int nshape;                       /* a shape: reshape/view/expand target, repeats, created shape */
  int64_t shape[GRACE_MAX_DIMS];
  double a, b, c;                   /* scalar parameters (see the op table) */
  int has_a, has_b;
  int exact;                        /* bit 1, 2, 4: a, b, c is exactly the integer ia, ib, ic (int64 past 2^53) */
  int64_t ia, ib, ic;
  int64_t i0, i1;                   /* integer parameters (see the op table) */
  int keepdim;
  int flag;                         /* per op: unbiased, tanh gelu, descending, smallest */
  int has_dtype;
  grace_dtype dtype;                /* result dtype where the op takes one (cast, creation, sum) */
  grace_device device;              /* creation and TO_DEVICE */
} grace_attrs;

const char *grace_op_name(grace_op op);
grace_opkind grace_op_kind(grace_op op);
int grace_op_ninputs(grace_op op);   /* -1: variadic */
int grace_op_input_optional(grace_op op, int i);   /* whether input i may be NULL (the norms' affine parameters) */
/* attention's attrs.flag bits: the scores are divided by scale (else multiplied); the mask keeps the scores where
 * it is true (where(mask, s, fill); else masked_fill(s, mask, fill) replaces them there) */
enum { GRACE_ATTN_DIV = 1, GRACE_ATTN_KEEP = 2 };
int grace_op_noutputs(grace_op op);
grace_status grace_op_from_name(const char *name, grace_op *out);

/* Runs one op eagerly on the inputs' device. `out` receives `nout` new references (nout may be less
 * than grace_op_noutputs: MAX with a dim gives values and indices, ask for 1 to get values only).
 * Input tensors may be NULL only where the op table says so. attrs may be NULL (all defaults). */
grace_status grace_run(grace_vm *vm, grace_op op, int nin, grace_tensor *const *in,
                       const grace_attrs *attrs, int nout, grace_tensor **out);

/* ---- autograd (reverse mode, eager). While grad mode is on (the default), every grace_run whose inputs include a
 * tensor that requires grad records a node; the op's floating-point results then require grad too. A backward walks
 * those nodes from the outputs back and computes each op's derivative with ops run through grace_run (so a backward
 * run while tracing is part of the traced program). The graph stays while its tensors live: backward may run again
 * over it. Tensors an op saved for its derivative are checked by version: one written in place after the op ran is an
 * error of the backward that needs it, naming the op. An op with no derivative is an error of the backward that
 * reaches it. While grad mode is on, an in-place op (copy_, fill_, index_put_, index_copy_) may not write a value
 * that requires grad, nor overwrite a result of a recorded op (write under grad mode off, as an optimizer's update
 * does); it may overwrite a leaf that requires grad (loading weights). Gradients of an op's input have
 * the input's shape and dtype. ---- */
int grace_grad_enabled(const grace_vm *vm);
/* Turns recording on or off (no_grad / enable_grad); returns the previous setting. */
int grace_set_grad_enabled(grace_vm *vm, int on);
/* A leaf (a tensor no recorded op made) that requires grad accumulates its gradient into its grad. Only
 * floating-point tensors can; a non-leaf cannot be turned off (grace_detach gives one that does not require grad). */
grace_status grace_tensor_set_requires_grad(grace_tensor *t, int on);
int grace_tensor_requires_grad(const grace_tensor *t);   /* a leaf that does, or a result of a recorded op */
int grace_tensor_is_leaf(const grace_tensor *t);
const char *grace_tensor_grad_fn(const grace_tensor *t);   /* the name of the op that made it, NULL for a leaf */
/* The accumulated gradient (borrowed; NULL: none yet); set_grad replaces it (NULL clears it; else same shape and
 * dtype, the tensor is retained). */
grace_tensor *grace_tensor_grad(const grace_tensor *t);
grace_status grace_tensor_set_grad(grace_tensor *t, grace_tensor *g);
/* A view of t sharing its storage that does not require grad. */
grace_status grace_detach(grace_vm *vm, grace_tensor *t, grace_tensor **out);
/* Backward from outputs[0..n): grads[i] the gradient of outputs[i] (grads NULL, or an entry NULL: ones, for a
 * one-element output only). Gradients are summed into the grad of every leaf that requires grad and was reached: the
 * first one is stored, later ones are added in place. */
grace_status grace_backward(grace_vm *vm, int n, grace_tensor *const *outputs, grace_tensor *const *grads);
/* The gradients of outputs (seeded as grace_backward) with respect to inputs[0..nin) (each requires grad, leaf or
 * not): out[k] a new reference, NULL where no path leads from inputs[k] to the outputs. No grad is touched. */
grace_status grace_grad(grace_vm *vm, int nout, grace_tensor *const *outputs, grace_tensor *const *grads, int nin,
                        grace_tensor *const *inputs, grace_tensor **out);

/* ---- the IR: SSA functions built by a tracer or by C code, verified, printed, parsed, run ---- */
typedef struct grace_ir grace_ir;
typedef int32_t grace_value;          /* an SSA value of one grace_ir; negative: none */

grace_ir *grace_ir_new(grace_vm *vm, const char *name);   /* NULL on failure, message in the VM */
void grace_ir_free(grace_ir *ir);
/* A per-call tensor input of a fixed type. */
grace_status grace_ir_input(grace_ir *ir, grace_dtype dt, grace_device dev, int ndim, const int64_t *sizes,
                            grace_value *out);
/* A captured tensor (a weight): the IR keeps a reference and the version it had, which a run checks. */
grace_status grace_ir_const(grace_ir *ir, grace_tensor *t, grace_value *out);
/* A dynamic scalar input: a 0-d value of dtype dt supplied with each run (a learning rate, a temperature). */
grace_status grace_ir_scalar(grace_ir *ir, grace_dtype dt, grace_value *out);
/* A number fixed when the IR was built; in type promotion it is a wrapped number. */
grace_status grace_ir_literal(grace_ir *ir, double v, int is_integer, grace_value *out);
grace_status grace_ir_literal_int(grace_ir *ir, int64_t v, grace_value *out);
/* Appends an op over earlier values; result types are inferred, and inputs the op rejects give the error
 * eager execution would give. INPLACE ops are functional in the IR: their one result is the updated tensor. */
grace_status grace_ir_op(grace_ir *ir, grace_op op, int nin, const grace_value *in, const grace_attrs *attrs,
                         int nout, grace_value *out);
/* "file:line" attached to the instructions appended after this call (NULL clears it). */
grace_status grace_ir_set_location(grace_ir *ir, const char *where);
grace_status grace_ir_output(grace_ir *ir, grace_value v);
/* After a run, the tensor behind `target` (an input or a captured tensor) is overwritten with `value`
 * (in-place updates are functional in the IR and written back once, at the end). */
grace_status grace_ir_write(grace_ir *ir, grace_value target, grace_value value);
/* Checks SSA order, arity, attributes and that every value's type is the one inference gives. */
grace_status grace_ir_verify(grace_ir *ir);
/* The text form (owned by the IR, valid until it changes); NULL on failure. */
const char *grace_ir_text(grace_ir *ir);
/* Parses the text form; captured tensors must then be bound with grace_ir_bind_const before a run. */
grace_status grace_ir_parse(grace_vm *vm, const char *text, grace_ir **out);
grace_status grace_ir_bind_const(grace_ir *ir, int index, grace_tensor *t);
/* Captured tensor k (borrowed; NULL if unbound), and whether it was made from host data during a trace
 * (a constant of the program rather than a tensor that lives outside it). */
grace_tensor *grace_ir_const_tensor(const grace_ir *ir, int k);
int grace_ir_const_is_local(const grace_ir *ir, int k);
/* Whether every captured tensor still has the version it was captured at; grace_ir_recapture accepts the
 * current versions (valid while no pass has folded a capture's contents into the program). */
int grace_ir_consts_current(const grace_ir *ir);
/* Two recordings of one function: -1 if they differ other than in the values of literals, else the number
 * of literal instructions whose values differ, their indices written to lits (at most max). */
int grace_ir_literal_diff(const grace_ir *a, const grace_ir *b, int *lits, int max);
/* Literal instruction k's value (exact for integers). */
grace_status grace_ir_literal_value(const grace_ir *ir, int k, double *v, int64_t *iv, int *is_int);
/* Turns literal instruction k into the next dynamic scalar input (a wrapped number given per run). */
grace_status grace_ir_literal_to_scalar(grace_ir *ir, int k);
void grace_ir_recapture(grace_ir *ir);
int grace_ir_count(const grace_ir *ir, const char *what);   /* "inputs", "scalars", "consts", "outputs", "insts", "breaks", "writes", "values" */
/* Break k: the instruction it follows (-1: none) and where it was (NULL if unknown). */
grace_status grace_ir_break(const grace_ir *ir, int k, int *after, const char **where);
/* Runs passes over ir (comma-separated names, or "default" for all in order) and gives a new IR (ir is
 * unchanged). Each pass's output is verified. */
grace_status grace_ir_pass(grace_ir *ir, const char *names, grace_ir **out);
/* Runs the IR on the CPU, one op at a time: `in` holds the tensor inputs then the scalar inputs (0-d
 * tensors), in declaration order; `out` receives new references to the outputs. A captured tensor whose
 * version changed since capture is an error (GRACE_EARG, "stale"): the caller retraces. */
grace_status grace_ir_run(grace_ir *ir, int nin, grace_tensor *const *in, int nout, grace_tensor **out);
/* ---- regions: instructions that own sub-programs (data-dependent control flow, explicit form). A sub-program is
 * a grace_ir with inputs and outputs only: it captures nothing (no captured tensors, scalars, breaks or writes);
 * whatever it reads from outside is one of its inputs. On success ir owns the sub-programs given (the caller must
 * not free or use them); on failure the caller keeps them. Run by the CPU interpreter and, for now, by the CUDA
 * executor with the predicate read on the host. ---- */
/* out[0..nout) = then_ir(args) if pred (a 0-d bool or number tensor, any device; nonzero is true) else
 * else_ir(args). Both take the args' types as inputs and return nout outputs of the same types. */
grace_status grace_ir_cond(grace_ir *ir, grace_value pred, int nargs, const grace_value *args, grace_ir *then_ir,
                           grace_ir *else_ir, int nout, grace_value *out);
/* The loop `while cond_ir(state, inv) do state = body_ir(state, inv) end`; out[0..nstate) the final state.
 * cond_ir returns one 0-d tensor (nonzero: go on); body_ir returns the nstate next state values, typed as the
 * state; inv (ninv values) is read by both and never changes. max_iters > 0: running the body more often is an
 * error (a bound on runaway loops, not a stopping rule); 0: unbounded. */
grace_status grace_ir_while(grace_ir *ir, int nstate, const grace_value *state, int ninv, const grace_value *inv,
                            grace_ir *cond_ir, grace_ir *body_ir, int64_t max_iters, grace_value *out);
/* Region instruction k's sub-program j (0: then/cond, 1: else/body), borrowed; NULL if k is no region. */
grace_ir *grace_ir_sub(const grace_ir *ir, int k, int j);
/* How a program that runs on the CUDA device is launched (gpu/gpu_graph.c). Its first call runs eagerly (kernel
 * by kernel) and proves it stable; the next calls measure, each on a real call with its own inputs, the
 * strategies below; the fastest is kept. GRACE_GRAPHS=off|eager|copy|indirect|update forces one (default: auto);
 * GRACE_GRAPH_LIMIT bounds the graphs kept per program (default 8; a new input layout records another). */
typedef enum grace_launch_strategy {
  GRACE_LAUNCH_EAGER,       /* one launch per kernel */
  GRACE_LAUNCH_COPY,        /* a CUDA graph; inputs copied into its placeholders, outputs copied out */
  GRACE_LAUNCH_INDIRECT,    /* a CUDA graph whose kernels read their pointers from a device argument table */
  GRACE_LAUNCH_UPDATE,      /* as INDIRECT, and the library kernels (cuBLASLt) that read an input or write an output
                               directly are re-pointed per call by updating their nodes' parameters */
  GRACE_LAUNCH_NSTRATEGIES
} grace_launch_strategy;
typedef enum grace_region_lowering {
  GRACE_REGION_HOST,        /* a host branch: the predicate read on the host, one graph-less call */
  GRACE_REGION_NODES,       /* CUDA conditional nodes (IF, IF/ELSE, WHILE) in the program's graph */
  GRACE_REGION_PRED         /* predication: both bodies in the graph, their kernels skipped by the predicate */
} grace_region_lowering;
typedef struct grace_graph_info {
  int managed;                     /* 1 when the program ran on the device under this scheme */
  long calls, captures;
  int decided;                     /* the measurements are done (or a strategy was forced) */
  int from_cache;                  /* decided by an earlier process's measurements (kept with the kernels) */
  /* A specialisation of a program with symbolic sizes (grace_ir_specialization) made after another one decided
   * starts decided with that decision, measuring nothing: inherited, and decided_by the sizes of the copy that
   * made it ("s1=8") or "the launch cache". */
  int inherited;
  char decided_by[64];
  grace_launch_strategy chosen;    /* the strategy calls use now */
  /* Per strategy: the median time of a whole call (the host waiting for the device before and after it) over its
   * timed calls (samples, interleaved with the other strategies' calls), 0 when unmeasured; the best of its region
   * lowerings for a program with regions. Read from the launch cache when from_cache (an earlier process's). */
  double us[GRACE_LAUNCH_NSTRATEGIES];
  int samples[GRACE_LAUNCH_NSTRATEGIES];
  /* The decision is re-checked once per process after some calls against the runner-up (both timed again):
   * rechecks made (this process and earlier ones, through the launch cache), how many switched the strategy, and
   * whether one is under way or still to come. measure_calls: calls of this process spent measuring (timed or not). */
  int rechecks, switches, checking;
  int recheck_pending;             /* this process's re-check is still to come (or under way) */
  long measure_calls;
  char why[GRACE_LAUNCH_NSTRATEGIES][160];   /* why a strategy cannot run here ("" when it can) */
  char ineligible[160];            /* why no graph is tried at all ("" when graphs are tried) */
  int graphs;                      /* instantiated graphs held now */
  int kernels;                     /* kernel nodes of the newest graph of the chosen strategy */
  int indirect_words;              /* argument-table words rewritten per replay */
  int node_updates;                /* library kernel nodes re-pointed per replay (graph+node updates) */
  size_t graph_bytes;              /* device memory the held graphs use: arena blocks they took, and table_bytes */
  size_t table_bytes;              /* their argument tables (kept outside the arena: their words persist) */
  size_t arena_bytes;              /* the VM's graph arena, shared by all its graphs */
  size_t copy_bytes;               /* bytes copied per replay: the table, inputs into placeholders, outputs out */
  long replays;                    /* of that graph */
  double replay_host_us_min, replay_host_us_mean;   /* host time from a replay's start to its launch returning */
  int unfused;                     /* fused groups no generated kernel could run whole: they ran an op at a time */
  char unfused_why[160];           /* why the first of them could not ("" when none) */
  /* Regions (cond, while_loop) of the program, and how they run (grace_region_lowering): as CUDA conditional nodes
   * inside the program's graph (the predicate read on the device; cond_nodes > 0 in the graph the chosen strategy
   * replays), predicated (both bodies' kernels in the graph, each returning at once unless the predicate picks its
   * body), or as host branches (the predicate read on the host, a wait for the device per decision: the eager
   * strategy). Each graph strategy is measured with each lowering that can take the regions; region_us: the best
   * measured per lowering (0: not measured), region_lowering: the one the calls use now (-1 while measuring).
   * region_why: why conditional nodes cannot take them, pred_why: why predication cannot ("" when it can). */
  int regions;
  int cond_nodes;
  char region_why[160];
  int region_lowering;
  double region_us[3];
  char pred_why[160];
} grace_graph_info;
void grace_ir_graph_info(const grace_ir *ir, grace_graph_info *out);
/* A device program with symbolic sizes runs as copies specialised to the sizes of its calls, a few kept (least
 * recently used dropped): copy k (0-based; NULL past the last), for grace_ir_graph_info; sizes gets the symbols'
 * values it was made for ("s1=128, s2=129"; n bytes). */
grace_ir *grace_ir_specialization(const grace_ir *ir, int k, char *sizes, size_t n);
/* Sets the launch strategy for device programs that first run after this call: "auto" (measure and choose),
 * "off" (no graphs, no measuring), "eager", "copy", "indirect" or "update" (forced); NULL: back to GRACE_GRAPHS. */
grace_status grace_set_graphs(grace_vm *vm, const char *mode);
/* Sets how regions (cond, while_loop) of device programs that first run after this call are lowered: "auto"
 * (measured with the launch strategies, the fastest kept), "host", "nodes" or "pred" (forced where the program can
 * take it, else the host branch); NULL: back to GRACE_REGIONS (default auto). */
grace_status grace_set_regions(grace_vm *vm, const char *mode);
/* Which implementation runs a matrix product on the CUDA device: "auto" (grace's kernel or cuBLASLt, whichever
 * timing once per shape finds faster), "grace" (grace's generated kernels only) or "cublaslt" (cuBLASLt where it
 * can take the product, grace's kernels elsewhere); NULL: back to GRACE_MATMUL (default auto). */
grace_status grace_set_matmul(grace_vm *vm, const char *mode);
/* Layer norm and RMS norm as the prologue of the device GEMVs that read them (a decode step's norms then run
 * no kernel of their own): on (1, the default), off (0), or -1: back to $GRACE_NORM_PROLOGUE ("0": off). Read when
 * a program is built (a compiled function's first call, a new specialisation of its sizes). */
grace_status grace_set_norm_prologue(grace_vm *vm, int on);

/* ---- tracing: while a trace is active on a VM, every successful grace_run also appends its op to the
 * trace's IR, so a host records a function by running it once. Tensors are mapped to IR values: declared
 * inputs and scalars, results of traced ops, and any other tensor an op touches becomes a captured constant
 * (a wrapped number becomes a literal). Reading a traced tensor's data from the host (grace_tensor_read,
 * _get) is a graph break. In-place ops update the mapping and become writes at the end. ---- */
/* Writes "file:line" of the host code running now into buf (called only while tracing). */
typedef void (*grace_where_fn)(void *ud, char *buf, size_t n);
grace_status grace_trace_begin(grace_vm *vm, grace_ir *ir, grace_where_fn where, void *ud);
grace_status grace_trace_input(grace_vm *vm, grace_tensor *t, grace_value *out);
/* t (0-d) stands for a dynamic scalar input of t's dtype. */
grace_status grace_trace_scalar(grace_vm *vm, grace_tensor *t, grace_value *out);
/* The value of t in the trace (an unknown tensor is captured as a constant); for the host's outputs. */
grace_status grace_trace_value(grace_vm *vm, grace_tensor *t, grace_value *out);
/* Stops recording (reads and ops run plainly until grace_trace_resume): for host work that is not part of
 * the traced program. */
void grace_trace_pause(grace_vm *vm);
void grace_trace_resume(grace_vm *vm);
/* The trace's events: breaks and reasons it cannot compile, each with its location, one per line. Empty
 * when the trace is clean. Valid until grace_trace_end. */
const char *grace_trace_problems(grace_vm *vm);
int grace_trace_active(const grace_vm *vm);
/* Records a reason the trace cannot be one program (a break the host saw), with the current location. */
grace_status grace_trace_note(grace_vm *vm, const char *why);
/* Tells an active trace that the host read dim `dim` (0-based; -1: every dim) of t's size: a symbolic size read so
 * is specialised to its traced value (the host may compute or branch with it). Nothing without a trace. */
void grace_trace_size_read(grace_vm *vm, const grace_tensor *t, int dim);
/* Whether the trace has written in place to a tensor that outlives it (an input or a capture). */
int grace_trace_mutated(const grace_vm *vm);
/* How the host used the value it just read from tensor t (a one-element tensor, read on the host while a trace or
 * replay is active, e.g. by item()): only in one comparison `value cmp k` deciding a branch (GRACE_CMP_TRUTH: the
 * value's truth, for booleans), whose outcome this call took is `taken`; or, with GRACE_CMP_NONE, in a way that
 * cannot be recorded (why: "file:line: how", kept for grace_fn_explain). Once the paths of a function with graph
 * breaks have taken both outcomes of such a read, and nothing else breaks them, they become one program with a
 * cond region (the automatic form of grace_ir_cond). Nothing without a trace. */
typedef enum grace_cmp {
  GRACE_CMP_NONE = -1, GRACE_CMP_LT, GRACE_CMP_LE, GRACE_CMP_GT, GRACE_CMP_GE, GRACE_CMP_EQ, GRACE_CMP_NE, GRACE_CMP_TRUTH
} grace_cmp;
grace_status grace_trace_branch(grace_vm *vm, const grace_tensor *t, grace_cmp cmp, double k, int taken, const char *why);
/* After grace_trace_branch with a comparison: what the host code does on the outcome this call did not take. why
 * NULL: it only returns values already computed (no call, no write, no use of the value read), so grace may record
 * that outcome's path before a call takes it, by calling the function once more with the read forced that way
 * (grace_trace_forced); a host that says so must honour the forcing. Otherwise why ("file:line: ...") says why not,
 * kept for grace_fn_explain. Nothing without a trace or after a read that is no predicate. */
grace_status grace_trace_branch_ahead(grace_vm *vm, const char *why);
/* Before the host uses a value it just read from t (a one-element tensor) to decide a branch: -1 when it uses the
 * value read; 0 or 1 while grace records a branch's other outcome ahead (see grace_trace_branch_ahead): the host must
 * then use instead a value for which `value cmp k` (as it will tell grace_trace_branch) is false or true, or fail the
 * call. */
int grace_trace_forced(grace_vm *vm, const grace_tensor *t);
/* Replaying: runs a function again against the paths recorded for it (IR with breaks). Each grace_run
 * is matched against the paths and deferred; a host read (a break) or the end runs what was deferred.
 * A call that leaves every path is recorded from there on as a new path (prefix included), which
 * grace_replay_end hands to the host. Inputs are declared with grace_trace_input as for a trace. */
grace_status grace_replay_begin(grace_vm *vm, grace_ir *const *paths, int npaths, grace_where_fn where, void *ud);
/* Runs what is deferred and ends the replay; *recorded: NULL, or the new path (the caller owns it). A
 * new path that cannot be replayed gives GRACE_EUNSUPPORTED with the reason. */
grace_status grace_replay_end(grace_vm *vm, grace_ir **recorded);
/* Regions while tracing (grace.cond, grace.while_loop): each function is recorded into a sub-program of its own
 * while the outer trace waits. grace_trace_sub_begin starts recording sub with in[0..nin) as its inputs (a tensor
 * given twice is one value); any other tensor of the enclosing traces the function touches becomes a further input
 * of sub (captured); grace_trace_sub_end makes out[] sub's outputs, returns to the enclosing trace and hands back
 * the captured tensors in input order (new references, at most maxcap). What the function cannot do inside a
 * region (read a tensor on the host) becomes a problem of the trace. grace_trace_sub_abort drops the recording
 * after a host error.
 * In-place writes to tensors from outside the function (arguments, captures): with `writes` given, sub_end appends
 * each such tensor's final value to sub's outputs (after out[], in writes->t order) and fills writes: the tensors
 * and copies of their contents at the function's end; either way each tensor is given back its contents and
 * version from before the function ran (it runs while being recorded, and a cond records both functions). Without
 * `writes` such a write is an error (a while_loop carries what it updates in its state). At most GRACE_SUB_WRITES
 * tensors; grace_sub_writes_release drops the references. */
enum { GRACE_SUB_WRITES = 16 };
typedef struct grace_sub_writes {
  int n;
  grace_tensor *t[GRACE_SUB_WRITES];       /* the tensors written */
  grace_tensor *final[GRACE_SUB_WRITES];   /* their contents when the function returned */
} grace_sub_writes;
grace_status grace_trace_sub_begin(grace_vm *vm, grace_ir *sub, int nin, grace_tensor *const *in);
grace_status grace_trace_sub_end(grace_vm *vm, int nout, grace_tensor *const *out, int maxcap, grace_tensor **caps,
                                 int *ncap, grace_sub_writes *writes);
void grace_trace_sub_abort(grace_vm *vm);
void grace_sub_writes_release(grace_sub_writes *w);
/* Appends a region over recorded sub-programs to the active trace (grace_ir_cond / grace_ir_while on the values
 * of the tensors given) and maps res[0..nout) (the results the host computed eagerly) to its results; a res[i]
 * the trace already knows (a branch returned its argument) is replaced by a copy (the reference moves). The
 * sub-programs are the trace's from the call on (freed if it fails). A region the IR refuses, or one recorded with
 * problems, is a problem of the trace (the function runs eagerly), not an error.
 * writes (NULL, or two: then's and else's, from grace_trace_sub_end) and taken (0: then, 1: else, the branch res
 * came from): every tensor either branch wrote becomes a further result of the region (the branch that did not
 * write it returns it as it was), copied into the tensor once after the region (a copy_ of the trace; the tensor
 * gets the taken branch's contents now). The in[] given must hold each such tensor. */
grace_status grace_trace_cond(grace_vm *vm, grace_tensor *pred, int nin, grace_tensor *const *in, grace_ir *then_ir,
                              grace_ir *else_ir, int nout, grace_tensor **res, const grace_sub_writes *writes,
                              int taken);
grace_status grace_trace_while(grace_vm *vm, int nstate, int nin, grace_tensor *const *in, grace_ir *cond_ir,
                               grace_ir *body_ir, int64_t max_iters, grace_tensor **res);
/* Ends the trace: adds the writes of mutated inputs and captures, releases the trace's references.
 * GRACE_OK when the trace is a complete program; GRACE_EUNSUPPORTED (message: the first problem) when
 * it broke or touched something it cannot express. */
grace_status grace_trace_end(grace_vm *vm);

/* ---- compiled functions: a host function (a Lua function, a C callback) compiled into cached programs. A call
 * checks the guards of the cached entries in order (tensor arguments by dtype, device, sizes, contiguity and strides
 * when strided; numbers, booleans and nil by value; host values by identity; the aliasing of tensor arguments; the
 * host's own guards on what the function reads) and runs the first that passes without calling the host function.
 * A miss traces the host function once (every grace_run it makes is recorded) into a new entry, up to cache_limit
 * entries; then the function runs eagerly for good. A function whose trace breaks (a host read of a tensor) is
 * replayed: the host function runs and its ops are matched against the recorded paths. With `dynamic`, a number
 * argument that changes value becomes a dynamic scalar input when two traces differ only in literals equal to it.
 * Nothing here prints, except what $GRACE_LOG asks for (ir, placement) on stderr. ---- */
/* The topics $GRACE_LOG (a comma-separated list) may name, NULL-terminated: "ir" (every traced program, after the
 * passes, and the kernels it runs as), "placement" (how device programs get host values). The one list: the core
 * reads $GRACE_LOG against it and hosts warn of other names with it (the core never warns). */
const char *const *grace_log_topics(void);
#define GRACE_FN_MAXARGS 32          /* more arguments run eagerly; a trace with more results runs eagerly */
typedef struct grace_fn grace_fn;
typedef enum grace_arg_kind {
  GRACE_ARG_NIL, GRACE_ARG_BOOL, GRACE_ARG_INT, GRACE_ARG_FLOAT, GRACE_ARG_TENSOR, GRACE_ARG_HOST
} grace_arg_kind;
/* An argument or a result. host: an opaque handle of a host value (0: none), compared by identity through
 * grace_host.same; a TENSOR may carry one too (the host's object for it), which a result that is that argument
 * keeps. is_mutable: a HOST result that cannot be replayed as a constant (a Lua table): the entry runs eagerly. */
typedef struct grace_arg {
  grace_arg_kind kind;
  int64_t i;                  /* BOOL (0 or 1), INT */
  double f;                   /* FLOAT */
  grace_tensor *t;            /* TENSOR */
  uint64_t host;
  int is_mutable;
} grace_arg;
/* The host's side. Handles given to the core (arguments, results of call) are borrowed for the duration of the
 * grace_fn_call; the core calls keep to hold one longer (a guard, a constant result) and release when done. */
typedef struct grace_host {
  /* Runs the host function. *nres gets the number of results (even past maxres; only maxres are written); TENSOR
   * results are new references handed to the core. Any failure of the host code: GRACE_EHOST (the host keeps its
   * error), nothing to release. Required. */
  grace_status (*call)(void *ud, int nargs, const grace_arg *args, int *nres, grace_arg *res, int maxres);
  /* Before a trace: note what the function may read (optional). */
  void (*trace_begin)(void *ud);
  /* After a trace: undo what trace_begin set up; with ir (NULL when the entry runs eagerly anyway) also find what
   * the program depends on: *guard a handle checked by guard_check (0: none), *nguarded how many values it checks,
   * and why (n bytes) a reason the function must run eagerly ("" when it can compile). Optional. */
  void (*trace_end)(void *ud, grace_ir *ir, uint64_t *guard, int *nguarded, char *why, size_t n);
  /* Whether guard still holds for this call; 0 and the reason in why when it does not. */
  int (*guard_check)(void *ud, uint64_t guard, int nargs, const grace_arg *args, char *why, size_t n);
  /* Whether two guards check the same values with the same expectations (for promotion; optional: never). */
  int (*guard_same)(void *ud, uint64_t a, uint64_t b);
  uint64_t (*keep)(void *ud, uint64_t handle);   /* a handle the core owns, for the same value */
  void (*release)(void *ud, uint64_t handle);    /* a kept handle or a guard */
  int (*same)(void *ud, uint64_t a, uint64_t b); /* identity of two host values (required for HOST arguments) */
  grace_where_fn where;                          /* "file:line" of the host code running now (optional) */
  void (*eager)(void *ud, const char *why);      /* once, when the function starts to run eagerly (optional) */
  /* Whether guard a checks every value guard b checks (the same paths), with the same expectations: then b need not
   * be checked beside a (optional: never). */
  int (*guard_covers)(void *ud, uint64_t a, uint64_t b);
} grace_host;
typedef struct grace_fn_options {
  int cache_limit;            /* entries before the function runs eagerly for good; at least 1 */
  int dynamic;                /* numbers that change may become dynamic scalars */
  int nallow;                 /* > 0: only the arguments allow[0..nallow) (0-based) may */
  const int *allow;
  const char *ir_name;        /* an identifier for the IR's text form (NULL: made from the name) */
  int dynamic_shapes;         /* 1: a tensor dim whose size changes between calls is retraced symbolic once;
                                 0: every size is guarded by value (one trace per size) */
  unsigned dynamic_dims[GRACE_FN_MAXARGS];   /* bit d of [k]: dim d of argument k is symbolic from the first trace */
  int no_auto_regions;        /* 1: paths that differ at a branch on a value read on the host stay replayed (see
                                 grace_trace_branch); 0: they become one program with a cond region */
} grace_fn_options;
/* opts NULL: cache_limit 8, numbers static. host and ud must outlive fn. */
grace_status grace_fn_new(grace_vm *vm, const char *name, const grace_host *host, void *ud,
                          const grace_fn_options *opts, grace_fn **out);
void grace_fn_free(grace_fn *fn);
/* Calls fn: res receives the results (*nres of them, at most maxres: more is GRACE_EARG). TENSOR results are new
 * references; a returned argument comes back as that argument (its host handle too); other results are those
 * recorded at trace time, their host handles valid until the next call of fn. GRACE_EHOST: the host code failed. */
grace_status grace_fn_call(grace_fn *fn, int nargs, const grace_arg *args, int *nres, grace_arg *res, int maxres);
typedef struct grace_fn_stats {
  long calls, hits, traces, eager_calls, recaptures, replays;
  int entries;
  int partitions;                         /* partitions between graph breaks compiled into programs of their own */
  long partition_runs;                    /* times such a program ran (once per partition per replayed call) */
  long partition_outputs;                 /* tensors those programs hand back (what later code reads) */
  long partition_internal;                /* tensors they compute but keep inside (computed again if asked for) */
  long staged_bytes;                      /* host tensors copied to the device ahead of programs, in bytes */
  int eager;                              /* runs eagerly for good (the cache limit) */
  const char *name;
  const char *last_miss;                  /* the last guard failure ("" none) */
  const char *eager_reason;               /* why it runs eagerly ("" when it does not) */
  unsigned char dynamic[GRACE_FN_MAXARGS];   /* 1: argument k became a dynamic scalar */
  unsigned dynamic_dims[GRACE_FN_MAXARGS];   /* bit d of [k]: dim d of argument k is traced symbolic */
  int symbolic_entries;                   /* entries whose program has symbolic sizes */
  int auto_regions;                       /* entries whose paths became one program with a cond region */
  const char *auto_why;                   /* why the latest paths that could have merged stay replayed ("" none) */
  int ahead_paths;                        /* paths of a branch's other outcome recorded before a call took it */
} grace_fn_stats;
void grace_fn_get_stats(const grace_fn *fn, grace_fn_stats *out);
int grace_fn_entry_count(const grace_fn *fn);
/* Entry k (0-based): its program (NULL: it has recorded paths, or runs eagerly, *why then says why), and the
 * paths of a function with breaks (*npaths of them, 0 once they became one program; paths may be NULL). NULL with
 * no such entry. */
grace_ir *grace_fn_entry_ir(const grace_fn *fn, int k, const char **why, grace_ir *const **paths, int *npaths);
long grace_fn_entry_hits(const grace_fn *fn, int k);
/* The j-th (0-based) partition of entry k that became a program of its own (a function with breaks: the ops between
 * two breaks, with its own passes, kernels and launch decision), with the path it was recorded on and its index
 * among that path's partitions (both 0-based); NULL when there is no such partition. */
grace_ir *grace_fn_entry_partition(const grace_fn *fn, int k, int j, int *path, int *index);
/* Traces the host function once on args, without caching or counting it, and writes into buf (n bytes) what grace
 * does with it: partitions, ops by kind, graph breaks, placement, dynamic scalars of fn, guards. The results are
 * dropped. GRACE_EHOST: the host code failed. */
grace_status grace_fn_explain(grace_fn *fn, int nargs, const grace_arg *args, char *buf, size_t n);

/* ---- fusion grouping: groups the instructions of a verified IR into kernels (views, inputs and literals are
 * free; pointwise chains, reductions with their prologue/epilogue, matmuls with their epilogue; never across a
 * break) and writes one line per kernel, in topological order: "kernel <i> <kind>: %a %b = <ops>; stores %v"
 * (stores: values read by another kernel or returned). *nkernels gets the count; buf may be NULL (n 0) to count
 * only; a report longer than n bytes is truncated and gives GRACE_EARG. ---- */
grace_status grace_ir_fuse_report(grace_ir *ir, char *buf, size_t n, int *nkernels);

/* ---- placement (ir/ir_place.c): how each host value a device partition reads gets there (a device-resident scalar
 * in the graph's argument table, or a host-to-device copy that keeps the partition from being a CUDA graph), device
 * ops with no device kernel and where they split the partition. One line per decision, "%v (what, type) -> decision:
 * reason; at file:line", then a summary line: "no device partition: ...", "one device partition; ..." or "N device
 * partitions (...); ...". *npartitions gets the count; buf and n as for grace_ir_fuse_report. ---- */
grace_status grace_ir_place_report(grace_ir *ir, char *buf, size_t n, int *npartitions);

#if defined(__GNUC__)
#pragma GCC visibility pop
#endif
#ifdef __cplusplus
}
#endif
#endif
