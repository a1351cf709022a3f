/* cuda_internal.h: the VM's CUDA state (struct cuda_ctx) shared by cuda_api.c (driver, context, stream, copies,
 * launches), cuda_alloc.c (caching allocator) and cuda_nvrtc.c (NVRTC, module cache, disk cache). The struct
 * exists as soon as any CUDA function is called, even with no driver: NVRTC and the disk cache work without a
 * GPU, and their statistics live here. */
#ifndef GRACE_CUDA_INTERNAL_H
#define GRACE_CUDA_INTERNAL_H

#include "base/base.h"
#include "cuda/cuda_api.h"

enum {
  CUDA_ERROR_OUT_OF_MEMORY = 2,
  CUDA_ALLOC_BUCKETS = 1024,        /* hash buckets of the allocator's live and cached block tables */
};

/* One device block of the caching allocator: in the live table (keyed by ptr) or in the cache (keyed by size). */
typedef struct cuda_block {
  CUdeviceptr ptr;
  size_t size;                      /* rounded size, as allocated from the driver */
  struct cuda_block *next;
  int arena;                        /* in the graphs' arena (cuda_graph.c): never in the cache while graphs live */
  int held;                         /* arena block: a tensor holds it (else any capture may take it) */
  unsigned taken;                   /* arena block: the epoch of the last capture that took it */
  struct cuda_block *arena_next;
} cuda_block;

typedef struct cuda_nvrtc_fns {
  const char *(*nvrtcGetErrorString)(nvrtcResult);
  nvrtcResult (*nvrtcVersion)(int *, int *);
  nvrtcResult (*nvrtcCreateProgram)(nvrtcProgram *, const char *, const char *, int, const char *const *,
                                    const char *const *);
  nvrtcResult (*nvrtcDestroyProgram)(nvrtcProgram *);
  nvrtcResult (*nvrtcCompileProgram)(nvrtcProgram, int, const char *const *);
  nvrtcResult (*nvrtcGetPTXSize)(nvrtcProgram, size_t *);
  nvrtcResult (*nvrtcGetPTX)(nvrtcProgram, char *);
  nvrtcResult (*nvrtcGetCUBINSize)(nvrtcProgram, size_t *);
  nvrtcResult (*nvrtcGetCUBIN)(nvrtcProgram, char *);
  nvrtcResult (*nvrtcGetProgramLogSize)(nvrtcProgram, size_t *);
  nvrtcResult (*nvrtcGetProgramLog)(nvrtcProgram, char *);
} cuda_nvrtc_fns;

/* A module in the in-memory cache, keyed by the same two hashes as its disk entry. */
struct cuda_module {
  uint64_t h1, h2;
  CUmodule mod;
  struct cuda_module *next;
};

typedef struct cuda_key { uint64_t h1, h2; } cuda_key;

struct cuda_ctx {
  grace_vm *vm;
  /* driver: probed once */
  int driver_probed, usable;
  void *lib;
  cuda_fns fn;
  CUdevice dev;
  CUcontext ctx;                    /* the primary context, retained */
  CUstream stream;
  cuda_props props;
  char why[256];
  char desc[192];
  /* NVRTC: loaded once */
  int nvrtc_probed, nvrtc_ok;
  void *nvrtc_lib;
  cuda_nvrtc_fns nv;
  char nvrtc_why[256];
  char nvrtc_version[16];
  /* nvJitLink and the device runtime library (cuda_link.c), probed once: kernels that call the device runtime
   * (the conditional-node setter) are compiled relocatable and linked with libcudadevrt.a */
  int link_probed, link_ok;
  void *link_lib;
  struct cuda_link_fns *lk;
  char link_why[256];
  char devrt_path[4096];
  /* conditional-node bodies being captured (cuda_cond.c): one stream per nesting depth, made on first use */
  CUstream body_streams[8];
  int body_depth;
  /* a graph capture in progress (cuda_graph.c): allocations come from the arena, launches are noted */
  struct cuda_capture *cap;
  /* the graphs' arena: blocks of every capture, shared by all graphs of the VM (their replays are ordered on the
   * one stream, and nothing but tables and flags keeps a value from one replay to the next) */
  cuda_block *arena;
  size_t arena_bytes;
  int ncaptures;                    /* captures alive (open or kept by a graph): the arena is freed at 0 */
  unsigned epoch;
  /* caching allocator */
  cuda_block *live[CUDA_ALLOC_BUCKETS];
  cuda_block *cached[CUDA_ALLOC_BUCKETS];
  cuda_mem_stats mem;
  /* kernels launched on the stream outside captures (cuda_launch, cuda_launch_overlapped): grace's own kernels per
   * call for benchmarks (cuBLASLt's launches and graph replays are not seen here) */
  uint64_t nlaunches;
  /* vendor library calls so far, captured or not (cuda_capture_library): whether a program uses any */
  uint64_t nlibrary;
  uint64_t nsyncs;                  /* stream synchronizations (cuda_sync) */
  /* the clock cuda_clock reads, in seconds: NULL for grace_clock (a fake driver's test sets one it controls, so
   * that the launch measurement of gpu_graph.c sees timings the test programs) */
  double (*clock)(cuda_ctx *c);
  /* launch grace's kernels as programmatic dependents (cuda_launch_overlapped); GRACE_PDL=0 turns it off */
  int pdl;
  /* predication (cuda_pred_set): while pred is set, every launch passes it and pred_want as the kernel's second and
   * third parameters (the predicated kernels of codegen, cg_pred_params) */
  CUdeviceptr pred;
  unsigned pred_want;
  /* functions whose dynamic shared memory limit was raised, and to what: set once, not before every launch */
  struct { CUfunction f; unsigned smem; } smem_set[64];
  int nsmem_set;
  /* modules and the disk cache */
  struct cuda_module *modules;
  cuda_compile_stats cstats;
  int cache_dir_state;              /* 0 not resolved yet, 1 usable, -1 no disk cache */
  char cache_dir[4096];
};

/* The VM's CUDA state, made on first call without probing anything; NULL only when host memory ran out. */
cuda_ctx *cuda_state(grace_vm *vm);

/* cuda_graph.c: a block allocated while c->cap is set joins the arena, taken by that capture. */
int cuda_capture_adopt(cuda_ctx *c, cuda_block *b);
/* cuda_graph.c: a free arena block of exactly size bytes, now taken by the open capture, or NULL. */
cuda_block *cuda_capture_reuse(cuda_ctx *c, size_t size);
/* cuda_alloc.c: an arena block goes back to the cache (the arena empties once no graph is left). */
void cuda_alloc_unpool(cuda_ctx *c, cuda_block *b);
/* cuda_alloc.c: frees every block (live and cached) to the driver. */
void cuda_alloc_free_all(cuda_ctx *c);
/* cuda_alloc.c: the peak of allocated bytes starts again from what is allocated now (grace_device_reset_peak). */
void cuda_alloc_reset_peak(cuda_ctx *c);
/* cuda_api.c: kernels launched outside captures so far (grace_device_stats.kernel_launches). */
uint64_t cuda_launch_count(const cuda_ctx *c);
/* cuda_nvrtc.c: compiles src for arch into a cubin, relocatable (-rdc=true) when rdc is set (for cuda_link_devrt). */
grace_status cuda_nvrtc_compile_image(grace_vm *vm, cuda_ctx *c, const char *src, int arch, int rdc, char **out,
                                      size_t *n);
/* cuda_link.c: links a relocatable cubin with libcudadevrt.a into a loadable cubin (*out as cuda_nvrtc_compile's);
 * GRACE_EUNSUPPORTED (with cuda_link_why) when nvJitLink or the library is missing. */
grace_status cuda_link_devrt(cuda_ctx *c, const char *image, size_t n, int arch, char **out, size_t *nout);
/* cuda_link.c: unloads nothing (nvJitLink stays mapped, as NVRTC) but forgets the probe. */
void cuda_link_free(cuda_ctx *c);
/* cuda_cond.c: destroys the body streams. */
void cuda_cond_free(cuda_ctx *c);
/* cuda_api.c: stream synchronizations so far (grace_device_stats.syncs). */
uint64_t cuda_sync_count(const cuda_ctx *c);
/* cuda_nvrtc.c: unloads the modules and NVRTC. */
void cuda_nvrtc_free_all(cuda_ctx *c);

/* ---- the disk cache of compiled kernels (cuda_nvrtc.c) ----
 * An entry is the file <dir>/<h1><h2>.cubin (hex): the magic "GRCUBIN1", h1, h2, the payload length and an
 * FNV-1a checksum of the payload (five 8-byte words), then the payload. */
/* The key of a source compiled with options for arch by a given NVRTC version. */
cuda_key cuda_cache_key(const char *src, const char *options, int arch, const char *nvrtc_version);
/* The cache directory ($GRACE_CACHE_DIR, else ~/.cache/grace, created 0700 on first use), or NULL when it cannot be
 * made or is not safe to use (then the disk cache is off, silently). */
const char *cuda_cache_dir(cuda_ctx *c);
typedef enum cuda_cache_result { CUDA_CACHE_MISS, CUDA_CACHE_HIT, CUDA_CACHE_CORRUPT } cuda_cache_result;
/* Reads the entry of key: HIT with *bytes (free with grace_realloc(vm, *bytes, *n, 0)) and *n; MISS when there is
 * no entry or no disk cache; CORRUPT when the entry is truncated, fails its checksum, holds another key or is no
 * regular file (a symlink, a FIFO; counted in corrupt_entries; the caller recompiles and stores over it). */
cuda_cache_result cuda_cache_load(cuda_ctx *c, cuda_key key, char **bytes, size_t *n);
/* Writes the entry of key through a temp file and a rename; 1 when written, 0 when not (no disk cache, disk
 * full: the cache is only an optimisation, so no error is set). */
int cuda_cache_store(cuda_ctx *c, cuda_key key, const void *bytes, size_t n);

#endif
