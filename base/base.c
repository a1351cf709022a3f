/* base.c: the services every layer uses: errors, host allocation through the VM's allocator, progress
 * lines, the clock, and the dtype facts (names, sizes, categories, type promotion). */
#include <stdarg.h>
#include <time.h>
#include <stdio.h>
#include <stdlib.h>
#include <unistd.h>
#include "base/base.h"

static const char *status_names[] = {
  "ok", "bad argument", "shape mismatch", "dtype mismatch", "index out of range", "out of memory",
  "device error", "unsupported", "internal error", "error in host code"
};

const char *grace_status_name(grace_status st) {
  return (unsigned)st < sizeof status_names / sizeof *status_names ? status_names[st] : "unknown status";
}

grace_status grace_set_error(grace_vm *vm, grace_status st, const char *fmt, ...) {
  if (!vm || !fmt) return st;   /* nowhere to keep a message: the status still says what failed */
  va_list ap;
  va_start(ap, fmt);
  vsnprintf(vm->err, sizeof vm->err, fmt, ap);
  va_end(ap);
  vm->status = st;
  return st;
}

/* A block larger than the machine's memory can never be used: no allocator is asked for one, so a huge shape fails
 * as a clean out-of-memory error. mimalloc reserves address space without committing it (such a request would
 * succeed and the process be killed once the pages are touched); AddressSanitizer aborts past its own maximum.
 * Looked up only for blocks over 1 GiB. */
static int fits_ram(size_t n) {
  if (n <= (size_t)1 << 30) return 1;
  long pages = sysconf(_SC_PHYS_PAGES), psize = sysconf(_SC_PAGESIZE);
  return pages <= 0 || psize <= 0 || n / (size_t)psize <= (size_t)pages;
}

void *grace_realloc(grace_vm *vm, void *ptr, size_t osize, size_t nsize) {
  if (!vm || (nsize && !fits_ram(nsize))) return NULL;
  return vm->alloc(vm->alloc_ud, ptr, osize, nsize, VM_ALIGN);
}

const char *grace_last_error(const grace_vm *vm) { return vm ? vm->err : "no VM"; }

void *vm_alloc(grace_vm *vm, size_t n) {
  return fits_ram(n) ? vm->alloc(vm->alloc_ud, NULL, 0, n ? n : 1, VM_ALIGN) : NULL;
}
grace_status vm_data_bytes(grace_vm *vm, const char *op, size_t count, size_t size, size_t *bytes) {
  if (__builtin_mul_overflow(count, size, bytes))
    return vm_err(vm, GRACE_ENOMEM, "%s: working memory of %zu x %zu bytes is too large", op, count, size);
  if (vm->max_bytes && *bytes > vm->max_bytes)
    return vm_err(vm, GRACE_ENOMEM, "%s: working memory of %zu bytes is past the memory limit of %zu bytes", op, *bytes,
                  vm->max_bytes);
  return GRACE_OK;
}

void *vm_alloc_data(grace_vm *vm, const char *op, size_t count, size_t size) {
  size_t n;
  if (vm_data_bytes(vm, op, count, size, &n) != GRACE_OK) return NULL;
  void *p = vm_alloc(vm, n);
  if (!p) vm_err(vm, GRACE_ENOMEM, "%s: out of host memory for %zu bytes of working memory", op, n);
  return p;
}
void *vm_calloc(grace_vm *vm, size_t n) {
  void *p = vm_alloc(vm, n);
  if (p) memset(p, 0, n);
  return p;
}
void vm_free(grace_vm *vm, void *p, size_t n) { if (p) vm->alloc(vm->alloc_ud, p, n, 0, VM_ALIGN); }

grace_device grace_default_device(const grace_vm *vm) { return vm ? vm->default_device : GRACE_CPU; }
int grace_index_base(const grace_vm *vm) { return vm ? vm->index_base : 0; }
void grace_manual_seed(grace_vm *vm, uint64_t seed) { if (vm) { vm->seed = seed; vm->rng_offset = 0; } }
void grace_rng_state(const grace_vm *vm, uint64_t *seed, uint64_t *offset) {
  if (seed) *seed = vm ? vm->seed : 0;
  if (offset) *offset = vm ? vm->rng_offset : 0;
}
void grace_set_rng_state(grace_vm *vm, uint64_t seed, uint64_t offset) {
  if (vm) { vm->seed = seed; vm->rng_offset = offset; }
}

double grace_clock(void) {
  struct timespec ts;
  clock_gettime(CLOCK_MONOTONIC, &ts);
  return (double)ts.tv_sec + (double)ts.tv_nsec * 1e-9;
}

void grace_set_progress(grace_vm *vm, grace_progress_fn fn, void *ud) {
  if (vm) { vm->progress = fn; vm->progress_ud = ud; }
}

void vm_progress(grace_vm *vm, const char *fmt, ...) {
  if (!vm->progress) return;
  char line[200];
  va_list ap;
  va_start(ap, fmt);
  vsnprintf(line, sizeof line, fmt, ap);
  va_end(ap);
  vm->progress(vm->progress_ud, line);
}

int vm_log_wants(const char *topic) {
  const char *v = getenv("GRACE_LOG");
  size_t n = strlen(topic);
  for (const char *p = v; p && *p; p = strchr(p, ',') ? strchr(p, ',') + 1 : NULL)
    if (!strncmp(p, topic, n) && (p[n] == ',' || p[n] == 0)) return 1;
  return 0;
}

/* ---- dtypes ---- */
static const struct { const char *name; size_t size; int cat; } dtype_info[] = {
#define CAT_BOOL 0
#define CAT_INT 1
#define CAT_FLOAT 2
#define DT_INFO(e, name, bytes, cat) {name, bytes, CAT_##cat},
  GRACE_DTYPES(DT_INFO)
#undef DT_INFO
};

const char *grace_dtype_name(grace_dtype dt) { return (unsigned)dt < GRACE_NDTYPES ? dtype_info[dt].name : "?"; }
size_t grace_dtype_size(grace_dtype dt) { return (unsigned)dt < GRACE_NDTYPES ? dtype_info[dt].size : 0; }
int vm_dtype_category(grace_dtype dt) { return dtype_info[dt].cat; }
int grace_dtype_is_float(grace_dtype dt) { return (unsigned)dt < GRACE_NDTYPES && dtype_info[dt].cat == CAT_FLOAT; }
int grace_dtype_is_int(grace_dtype dt) { return (unsigned)dt < GRACE_NDTYPES && dtype_info[dt].cat != CAT_FLOAT; }
const char *grace_device_name(grace_device dev) { return dev == GRACE_CUDA ? "cuda" : "cpu"; }

grace_status grace_dtype_from_name(const char *name, grace_dtype *out) {
  static const struct { const char *alias; grace_dtype dt; } aliases[] = {
    {"float", GRACE_FLOAT32}, {"double", GRACE_FLOAT64}, {"half", GRACE_FLOAT16}, {"long", GRACE_INT64},
    {"int", GRACE_INT32}, {"byte", GRACE_UINT8},
  };
  if (!name || !out) return GRACE_EARG;
  for (int i = 0; i < GRACE_NDTYPES; i++)
    if (!strcmp(name, dtype_info[i].name)) { *out = (grace_dtype)i; return GRACE_OK; }
  for (size_t i = 0; i < sizeof aliases / sizeof *aliases; i++)
    if (!strcmp(name, aliases[i].alias)) { *out = aliases[i].dt; return GRACE_OK; }
  return GRACE_EARG;
}

grace_dtype vm_promote_types(grace_dtype a, grace_dtype b) {
  if (a == b) return a;
  int ca = dtype_info[a].cat, cb = dtype_info[b].cat;
  if (ca != cb) return ca > cb ? a : b;
  if (ca == CAT_FLOAT) {
    if (a == GRACE_FLOAT64 || b == GRACE_FLOAT64) return GRACE_FLOAT64;
    return GRACE_FLOAT32;   /* f16 with bf16, or either with f32 */
  }
  /* integers: uint8 < int32 < int64 */
  return dtype_info[a].size >= dtype_info[b].size ? a : b;
}

/* PyTorch's rule (c10 ResultTypeState): three tiers, a higher tier's category wins, a lower tier only
 * raises the category. A wrapped float counts as the default dtype, float32. */
static grace_dtype combine_categories(int has_hi, grace_dtype hi, int has_lo, grace_dtype lo) {
  if (!has_hi) return lo;
  if (!has_lo) return hi;
  if (dtype_info[hi].cat == CAT_FLOAT) return hi;
  if (hi == GRACE_BOOL || dtype_info[lo].cat == CAT_FLOAT) {
    if (dtype_info[lo].cat > dtype_info[hi].cat) return lo;   /* category raises to lo's type */
    return vm_promote_types(hi, lo);
  }
  return hi;
}

grace_dtype grace_promote_types(grace_dtype a, grace_dtype b) { return vm_promote_types(a, b); }

grace_dtype grace_result_type(int n, const grace_dtype *dtypes, const int *tiers) {
  grace_dtype tier[3] = {GRACE_BOOL, GRACE_BOOL, GRACE_BOOL};
  int has[3] = {0, 0, 0};
  if (!dtypes || !tiers) n = 0;   /* nothing to promote: the neutral result, bool */
  for (int i = 0; i < n; i++) {
    int k = tiers[i] < 0 ? 0 : tiers[i] > 2 ? 2 : tiers[i];
    grace_dtype dt = dtypes[i];
    if (k == 2 && dtype_info[dt].cat == CAT_FLOAT) dt = GRACE_FLOAT32;
    tier[k] = has[k] ? vm_promote_types(tier[k], dt) : dt;
    has[k] = 1;
  }
  grace_dtype lo = combine_categories(has[1], tier[1], has[2], tier[2]);
  return combine_categories(has[0], tier[0], has[1] || has[2], lo);
}

grace_dtype vm_result_type(int n, grace_tensor *const *ts) {
  grace_dtype dts[8];
  int tiers[8], k = 0;
  for (int i = 0; i < n && k < 8; i++) {
    if (!ts[i]) continue;
    dts[k] = ts[i]->dtype;
    tiers[k++] = ts[i]->wrapped ? 2 : ts[i]->ndim == 0 ? 1 : 0;
  }
  return grace_result_type(k, dts, tiers);
}
