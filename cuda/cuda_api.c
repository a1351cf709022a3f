/* cuda_api.c: the CUDA driver loaded with dlopen (no header, no link-time dependency), device 0 probed once per
 * VM, its primary context made current and one non-blocking stream created; copies, launches and events on that
 * stream. Every CUresult is checked and becomes a grace error naming the call; nothing aborts or prints. */
#include <dlfcn.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include "cuda/cuda_internal.h"
#include "cuda/cuda_graph.h"

enum {
  ATTR_MAX_THREADS_PER_BLOCK = 1,
  ATTR_SMEM_PER_BLOCK = 8,
  ATTR_WARP_SIZE = 10,
  ATTR_SM_COUNT = 16,
  ATTR_L2_CACHE_SIZE = 38,
  ATTR_CC_MAJOR = 75,
  ATTR_CC_MINOR = 76,
  ATTR_SMEM_PER_SM = 81,
  ATTR_SMEM_PER_BLOCK_OPTIN = 97,
  FUNC_ATTR_MAX_DYNAMIC_SHARED_SIZE_BYTES = 8,
  CU_STREAM_NON_BLOCKING = 1,
  DEFAULT_SMEM_LIMIT = 48 * 1024,
};

cuda_ctx *cuda_state(grace_vm *vm) {
  if (!vm->cuda) {
    vm->cuda = vm_calloc(vm, sizeof *vm->cuda);
    if (vm->cuda) {
      const char *pdl = getenv("GRACE_PDL");
      vm->cuda->vm = vm;
      vm->cuda->pdl = !(pdl && (!strcmp(pdl, "0") || !strcmp(pdl, "off")));
    }
  }
  return vm->cuda;
}

/* The driver's words for r: "out of memory" (cuGetErrorString), else its name, else "unknown error". */
static const char *driver_message(const cuda_ctx *c, CUresult r) {
  const char *msg = NULL;
  if (c && c->fn.cuGetErrorString && c->fn.cuGetErrorString(r, &msg) != 0) msg = NULL;
  if (!msg && c && c->fn.cuGetErrorName && c->fn.cuGetErrorName(r, &msg) != 0) msg = NULL;
  return msg ? msg : "unknown error";
}

grace_status cuda_check(grace_vm *vm, CUresult r, const char *call) {
  if (r == 0) return GRACE_OK;
  return vm_err(vm, r == CUDA_ERROR_OUT_OF_MEMORY ? GRACE_ENOMEM : GRACE_EDEVICE, "%s: %s (CUresult %d)", call,
                driver_message(vm->cuda, r), r);
}

/* Records why probing stopped; 0 so callers can return it. */
static int probe_fail(cuda_ctx *c, CUresult r, const char *call) {
  snprintf(c->why, sizeof c->why, "%s: %s (CUresult %d)", call, driver_message(c, r), r);
  return 0;
}

static int load_symbols(cuda_ctx *c) {
  cuda_fns *f = &c->fn;
#define REQ(name, sym)                                                                                  \
  if (!(*(void **)&f->name = dlsym(c->lib, sym))) {                                                     \
    snprintf(c->why, sizeof c->why, "CUDA driver too old: libcuda.so.1 lacks %s", sym);                 \
    return 0;                                                                                           \
  }
#define OPT(name, sym) *(void **)&f->name = dlsym(c->lib, sym);
  REQ(cuGetErrorString, "cuGetErrorString") REQ(cuGetErrorName, "cuGetErrorName") REQ(cuInit, "cuInit")
  REQ(cuDriverGetVersion, "cuDriverGetVersion") REQ(cuDeviceGetCount, "cuDeviceGetCount")
  REQ(cuDeviceGet, "cuDeviceGet") REQ(cuDeviceGetName, "cuDeviceGetName")
  REQ(cuDeviceGetAttribute, "cuDeviceGetAttribute") REQ(cuDeviceTotalMem_v2, "cuDeviceTotalMem_v2")
  REQ(cuDevicePrimaryCtxRetain, "cuDevicePrimaryCtxRetain")
  REQ(cuDevicePrimaryCtxRelease_v2, "cuDevicePrimaryCtxRelease_v2")
  REQ(cuCtxSetCurrent, "cuCtxSetCurrent") REQ(cuCtxGetCurrent, "cuCtxGetCurrent")
  REQ(cuStreamCreate, "cuStreamCreate") REQ(cuStreamDestroy_v2, "cuStreamDestroy_v2")
  REQ(cuStreamSynchronize, "cuStreamSynchronize")
  REQ(cuMemAlloc_v2, "cuMemAlloc_v2") REQ(cuMemFree_v2, "cuMemFree_v2") REQ(cuMemGetInfo_v2, "cuMemGetInfo_v2")
  REQ(cuMemcpyHtoDAsync_v2, "cuMemcpyHtoDAsync_v2") REQ(cuMemcpyDtoHAsync_v2, "cuMemcpyDtoHAsync_v2")
  REQ(cuMemcpyDtoDAsync_v2, "cuMemcpyDtoDAsync_v2") REQ(cuMemsetD8Async, "cuMemsetD8Async")
  REQ(cuModuleLoadData, "cuModuleLoadData") REQ(cuModuleUnload, "cuModuleUnload")
  REQ(cuModuleGetFunction, "cuModuleGetFunction") REQ(cuFuncSetAttribute, "cuFuncSetAttribute")
  REQ(cuLaunchKernel, "cuLaunchKernel")
  REQ(cuEventCreate, "cuEventCreate") REQ(cuEventDestroy_v2, "cuEventDestroy_v2")
  REQ(cuEventRecord, "cuEventRecord") REQ(cuEventSynchronize, "cuEventSynchronize")
  REQ(cuMemAllocHost_v2, "cuMemAllocHost_v2") REQ(cuMemFreeHost, "cuMemFreeHost")
  /* CUDA 12.8 added cuEventElapsedTime_v2 (cuda.h maps the name to it); older drivers have the first one. */
  OPT(cuEventElapsedTime, "cuEventElapsedTime_v2") OPT(cuLaunchKernelEx, "cuLaunchKernelEx")
  if (!f->cuEventElapsedTime) REQ(cuEventElapsedTime, "cuEventElapsedTime")
  OPT(cuStreamBeginCapture_v2, "cuStreamBeginCapture_v2") OPT(cuStreamEndCapture, "cuStreamEndCapture")
  OPT(cuGraphInstantiateWithFlags, "cuGraphInstantiateWithFlags") OPT(cuGraphLaunch, "cuGraphLaunch")
  OPT(cuGraphExecDestroy, "cuGraphExecDestroy") OPT(cuGraphDestroy, "cuGraphDestroy")
  OPT(cuGraphExecKernelNodeSetParams_v2, "cuGraphExecKernelNodeSetParams_v2")
  OPT(cuGraphGetNodes, "cuGraphGetNodes") OPT(cuGraphNodeGetType, "cuGraphNodeGetType")
  OPT(cuGraphKernelNodeGetParams_v2, "cuGraphKernelNodeGetParams_v2")
  OPT(cuFuncGetParamInfo, "cuFuncGetParamInfo")
  OPT(cuGraphKernelNodeSetParams_v2, "cuGraphKernelNodeSetParams_v2")
  OPT(cuTensorMapEncodeTiled, "cuTensorMapEncodeTiled")
  OPT(cuKernelGetParamInfo, "cuKernelGetParamInfo") OPT(cuGraphMemsetNodeGetParams, "cuGraphMemsetNodeGetParams")
  OPT(cuGraphMemcpyNodeGetParams, "cuGraphMemcpyNodeGetParams")
  OPT(cuOccupancyMaxActiveBlocksPerMultiprocessor, "cuOccupancyMaxActiveBlocksPerMultiprocessor")
  OPT(cuStreamGetCaptureInfo_v3, "cuStreamGetCaptureInfo_v3")
  OPT(cuStreamUpdateCaptureDependencies_v2, "cuStreamUpdateCaptureDependencies_v2")
  OPT(cuGraphAddNode_v2, "cuGraphAddNode_v2") OPT(cuGraphConditionalHandleCreate, "cuGraphConditionalHandleCreate")
  OPT(cuStreamBeginCaptureToGraph, "cuStreamBeginCaptureToGraph")
#undef REQ
#undef OPT
  return 1;
}

/* Loads the driver, makes device 0's primary context current and creates the stream; 0 with c->why set. */
static int probe(cuda_ctx *c) {
  c->lib = dlopen("libcuda.so.1", RTLD_NOW | RTLD_LOCAL);
  if (!c->lib) {
    snprintf(c->why, sizeof c->why, "no CUDA driver (libcuda.so.1 not found)");
    return 0;
  }
  if (!load_symbols(c)) return 0;
  cuda_fns *f = &c->fn;
  CUresult r;
  int n = 0;
  if ((r = f->cuInit(0))) return probe_fail(c, r, "cuInit");
  if ((r = f->cuDeviceGetCount(&n))) return probe_fail(c, r, "cuDeviceGetCount");
  if (n == 0) {
    snprintf(c->why, sizeof c->why, "no CUDA device");
    return 0;
  }
  if ((r = f->cuDeviceGet(&c->dev, 0))) return probe_fail(c, r, "cuDeviceGet");
  cuda_props *p = &c->props;
  if ((r = f->cuDeviceGetName(p->name, sizeof p->name, c->dev))) return probe_fail(c, r, "cuDeviceGetName");
  p->name[sizeof p->name - 1] = 0;
  static const struct { int attr; size_t off; } attrs[] = {
    {ATTR_CC_MAJOR, offsetof(cuda_props, major)}, {ATTR_CC_MINOR, offsetof(cuda_props, minor)},
    {ATTR_SM_COUNT, offsetof(cuda_props, sms)},
    {ATTR_MAX_THREADS_PER_BLOCK, offsetof(cuda_props, max_threads_per_block)},
    {ATTR_SMEM_PER_BLOCK, offsetof(cuda_props, smem_per_block)},
    {ATTR_SMEM_PER_BLOCK_OPTIN, offsetof(cuda_props, smem_per_block_optin)},
    {ATTR_SMEM_PER_SM, offsetof(cuda_props, smem_per_sm)}, {ATTR_L2_CACHE_SIZE, offsetof(cuda_props, l2_bytes)},
    {ATTR_WARP_SIZE, offsetof(cuda_props, warp_size)},
  };
  for (size_t i = 0; i < sizeof attrs / sizeof *attrs; i++)
    if ((r = f->cuDeviceGetAttribute((int *)((char *)p + attrs[i].off), attrs[i].attr, c->dev)))
      return probe_fail(c, r, "cuDeviceGetAttribute");
  if ((r = f->cuDeviceTotalMem_v2(&p->total_mem, c->dev))) return probe_fail(c, r, "cuDeviceTotalMem_v2");
  if ((r = f->cuDriverGetVersion(&p->driver_version))) return probe_fail(c, r, "cuDriverGetVersion");
  if ((r = f->cuDevicePrimaryCtxRetain(&c->ctx, c->dev))) return probe_fail(c, r, "cuDevicePrimaryCtxRetain");
  if ((r = f->cuCtxSetCurrent(c->ctx))) return probe_fail(c, r, "cuCtxSetCurrent");
  if ((r = f->cuStreamCreate(&c->stream, CU_STREAM_NON_BLOCKING))) return probe_fail(c, r, "cuStreamCreate");
  snprintf(c->desc, sizeof c->desc, "%s, sm_%d%d, %d SMs", p->name, p->major, p->minor, p->sms);
  return 1;
}

/* The state with the driver probed (once); NULL only when host memory ran out. */
static cuda_ctx *probed(grace_vm *vm) {
  cuda_ctx *c = cuda_state(vm);
  if (c && !c->driver_probed) {
    c->driver_probed = 1;
    c->usable = probe(c);
    if (!c->usable && c->ctx) {
      c->fn.cuDevicePrimaryCtxRelease_v2(c->dev);
      c->ctx = NULL;
    }
  }
  return c;
}

cuda_ctx *cuda_get(grace_vm *vm) {
  cuda_ctx *c = probed(vm);
  if (!c) {
    vm_err(vm, GRACE_ENOMEM, "cuda: out of host memory");
    return NULL;
  }
  if (!c->usable) {
    vm_err(vm, GRACE_EDEVICE, "cuda: no usable device: %s", c->why);
    return NULL;
  }
  /* The context is current on the thread that probed; a host calling from another thread needs it there too. */
  CUcontext cur = NULL;
  if (c->fn.cuCtxGetCurrent(&cur) != 0 || cur != c->ctx) {
    CUresult r = c->fn.cuCtxSetCurrent(c->ctx);
    if (r) {
      cuda_check(vm, r, "cuCtxSetCurrent");
      return NULL;
    }
  }
  return c;
}

int cuda_usable(grace_vm *vm) {
  cuda_ctx *c = probed(vm);
  return c && c->usable;
}

const char *cuda_why(grace_vm *vm) {
  cuda_ctx *c = probed(vm);
  return !c ? "out of host memory" : c->usable ? "usable" : c->why;
}

const char *cuda_describe(grace_vm *vm) {
  cuda_ctx *c = probed(vm);
  return !c ? "out of host memory" : c->usable ? c->desc : c->why;
}

const cuda_props *cuda_properties(cuda_ctx *c) { return &c->props; }
CUstream cuda_stream(cuda_ctx *c) { return c->stream; }
const cuda_fns *cuda_driver_fns(cuda_ctx *c) { return &c->fn; }

void cuda_free_all(grace_vm *vm) {
  cuda_ctx *c = vm->cuda;
  if (!c) return;
  if (c->usable) {
    /* Pending work may still use the memory and modules about to go. */
    c->fn.cuStreamSynchronize(c->stream);
    cuda_nvrtc_free_all(c);
    cuda_alloc_free_all(c);
    cuda_cond_free(c);
    c->fn.cuStreamDestroy_v2(c->stream);
    c->fn.cuDevicePrimaryCtxRelease_v2(c->dev);
  } else
    cuda_nvrtc_free_all(c);
  cuda_link_free(c);
  /* The driver is not dlclose'd either: drivers are not built to be unloaded and reloaded in one process. */
  vm_free(vm, c, sizeof *c);
  vm->cuda = NULL;
}

/* ---- copies ---- */
grace_status cuda_copy_to_device(cuda_ctx *c, CUdeviceptr dst, const void *src, size_t n) {
  if (n == 0) return GRACE_OK;
  grace_status st = cuda_check(c->vm, c->fn.cuMemcpyHtoDAsync_v2(dst, src, n, c->stream), "cuMemcpyHtoDAsync_v2");
  /* The caller may reuse src as soon as this returns. */
  return st ? st : cuda_sync(c);
}

grace_status cuda_copy_to_host(cuda_ctx *c, void *dst, CUdeviceptr src, size_t n) {
  if (n == 0) return GRACE_OK;
  grace_status st = cuda_check(c->vm, c->fn.cuMemcpyDtoHAsync_v2(dst, src, n, c->stream), "cuMemcpyDtoHAsync_v2");
  return st ? st : cuda_sync(c);
}

grace_status cuda_copy_device(cuda_ctx *c, CUdeviceptr dst, CUdeviceptr src, size_t n) {
  if (n == 0) return GRACE_OK;
  if (c->pred) return vm_err(c->vm, GRACE_EUNSUPPORTED, "predication: a driver copy cannot be skipped by a predicate");
  if (c->cap) cuda_capture_note(c, (uint64_t[]){dst, src}, 2);
  return cuda_check(c->vm, c->fn.cuMemcpyDtoDAsync_v2(dst, src, n, c->stream), "cuMemcpyDtoDAsync_v2");
}

grace_status cuda_memset(cuda_ctx *c, CUdeviceptr dst, int byte, size_t n) {
  if (n == 0) return GRACE_OK;
  if (c->cap) cuda_capture_note(c, (uint64_t[]){dst}, 1);
  return cuda_check(c->vm, c->fn.cuMemsetD8Async(dst, (unsigned char)byte, n, c->stream), "cuMemsetD8Async");
}

grace_status cuda_sync(cuda_ctx *c) {
  c->nsyncs++;
  grace_status st = cuda_check(c->vm, c->fn.cuStreamSynchronize(c->stream), "cuStreamSynchronize");
  if (st == GRACE_OK && (c->vm->graph_pending || c->vm->index_err[0]) && c->vm->after_sync) st = c->vm->after_sync(c->vm);
  return st;
}

double cuda_clock(cuda_ctx *c) { return c && c->clock ? c->clock(c) : grace_clock(); }

/* ---- launches and events ---- */
/* Checks the parameter struct and raises f's dynamic shared memory limit when smem needs it. */
static grace_status launch_prepare(cuda_ctx *c, CUfunction f, unsigned smem, const void *params, size_t param_bytes) {
  if (!params || param_bytes == 0)
    return vm_err(c->vm, GRACE_EINTERNAL, "cuda_launch: a kernel takes one parameter struct (got %zu bytes)",
                  param_bytes);
  if (smem <= DEFAULT_SMEM_LIMIT) return GRACE_OK;
  /* a function's limit is raised once (to the most it was launched with): an attribute change per launch would be
   * a driver call before every launch of the big-tile GEMMs and attention */
  int i = 0;
  while (i < c->nsmem_set && c->smem_set[i].f != f) i++;
  if (i < c->nsmem_set && c->smem_set[i].smem >= smem) return GRACE_OK;
  grace_status st = cuda_check(c->vm, c->fn.cuFuncSetAttribute(f, FUNC_ATTR_MAX_DYNAMIC_SHARED_SIZE_BYTES, (int)smem),
                               "cuFuncSetAttribute(MAX_DYNAMIC_SHARED_SIZE_BYTES)");
  if (st == GRACE_OK && i < (int)(sizeof c->smem_set / sizeof c->smem_set[0])) {
    c->smem_set[i].f = f;
    c->smem_set[i].smem = smem;
    if (i == c->nsmem_set) c->nsmem_set++;
  }
  return st;
}

grace_status cuda_launch(cuda_ctx *c, CUfunction f, const unsigned grid[3], const unsigned block[3], unsigned smem,
                         const void *params, size_t param_bytes) {
  grace_status st = launch_prepare(c, f, smem, params, param_bytes);
  if (st != GRACE_OK) return st;
  if (c->cap) cuda_capture_kernel(c, f, params, param_bytes);   /* its words, pointers among them, noted */
  void *args[3] = {(void *)params, &c->pred, &c->pred_want};   /* the last two only reach a predicated kernel */
  st = cuda_check(c->vm, c->fn.cuLaunchKernel(f, grid[0], grid[1], grid[2], block[0], block[1], block[2], smem,
                                              c->stream, args, NULL),
                  "cuLaunchKernel");
  /* a launch into a capture runs only when its graph is replayed: the graph's kernel count says that */
  if (st == GRACE_OK && !c->cap) c->nlaunches++;
  return st;
}

/* cuLaunchKernelEx's ABI (CUlaunchConfig, CUlaunchAttribute: a 64-byte value union after the id) */
typedef struct launch_attr {
  int id;
  char pad[4];
  union { char pad[64]; int value; unsigned dim[3]; } v;
} launch_attr;
typedef struct launch_config {
  unsigned grid[3], block[3], smem;
  CUstream stream;
  launch_attr *attrs;
  unsigned nattrs;
} launch_config;
enum { LAUNCH_ATTR_COOPERATIVE = 2, LAUNCH_ATTR_CLUSTER_DIMENSION = 4, LAUNCH_ATTR_PROGRAMMATIC_STREAM_SERIALIZATION = 6 };
enum { LAUNCH_PDL = 1, LAUNCH_COOPERATIVE = 2 };
_Static_assert(sizeof(launch_attr) == 72, "CUlaunchAttribute is 72 bytes");
_Static_assert(sizeof(launch_config) == 56, "CUlaunchConfig is 56 bytes");

/* cuLaunchKernelEx with programmatic serialization and/or a cooperative grid (flags: LAUNCH_*) and/or clusters of
 * `cluster` blocks along x. */
static grace_status launch_ex(cuda_ctx *c, CUfunction f, const unsigned grid[3], const unsigned block[3], unsigned smem,
                              const void *params, size_t param_bytes, int flags, unsigned cluster) {
  grace_status st = launch_prepare(c, f, smem, params, param_bytes);
  if (st != GRACE_OK) return st;
  launch_attr attr[3];
  unsigned n = 0;
  memset(attr, 0, sizeof attr);
  if (flags & LAUNCH_PDL) { attr[n].id = LAUNCH_ATTR_PROGRAMMATIC_STREAM_SERIALIZATION; attr[n++].v.value = 1; }
  if (flags & LAUNCH_COOPERATIVE) { attr[n].id = LAUNCH_ATTR_COOPERATIVE; attr[n++].v.value = 1; }
  if (cluster) {
    attr[n].id = LAUNCH_ATTR_CLUSTER_DIMENSION;
    attr[n].v.dim[0] = cluster; attr[n].v.dim[1] = attr[n].v.dim[2] = 1;
    n++;
  }
  if (c->cap) cuda_capture_kernel(c, f, params, param_bytes);
  launch_config cfg = {{grid[0], grid[1], grid[2]}, {block[0], block[1], block[2]}, smem, c->stream, attr, n};
  void *args[3] = {(void *)params, &c->pred, &c->pred_want};
  st = cuda_check(c->vm, c->fn.cuLaunchKernelEx(&cfg, f, args, NULL), "cuLaunchKernelEx");
  if (st == GRACE_OK && !c->cap) c->nlaunches++;   /* counted as cuda_launch counts */
  return st;
}

grace_status cuda_launch_overlapped(cuda_ctx *c, CUfunction f, const unsigned grid[3], const unsigned block[3],
                                    unsigned smem, const void *params, size_t param_bytes) {
  if (!c->fn.cuLaunchKernelEx || !c->pdl) return cuda_launch(c, f, grid, block, smem, params, param_bytes);
  return launch_ex(c, f, grid, block, smem, params, param_bytes, LAUNCH_PDL, 0);
}

int64_t cuda_coresident_blocks(cuda_ctx *c, CUfunction f, unsigned block, unsigned smem) {
  int per_sm = 0;
  if (!c->fn.cuOccupancyMaxActiveBlocksPerMultiprocessor ||
      c->fn.cuOccupancyMaxActiveBlocksPerMultiprocessor(&per_sm, f, (int)block, smem) != 0)
    return 0;
  return (int64_t)per_sm * c->props.sms;
}

grace_status cuda_launch_cooperative(cuda_ctx *c, CUfunction f, const unsigned grid[3], const unsigned block[3],
                                     unsigned smem, const void *params, size_t param_bytes) {
  if (!c->fn.cuLaunchKernelEx)
    return vm_err(c->vm, GRACE_EUNSUPPORTED, "cuda_launch_cooperative: a cooperative launch needs cuLaunchKernelEx "
                  "(a CUDA 12 driver)");
  return launch_ex(c, f, grid, block, smem, params, param_bytes, LAUNCH_COOPERATIVE, 0);
}

int cuda_has_tensor_maps(const cuda_ctx *c) { return c->fn.cuTensorMapEncodeTiled && c->props.major >= 9; }

grace_status cuda_tensor_map(cuda_ctx *c, void *map, grace_dtype dt, CUdeviceptr base, uint64_t cols, uint64_t rows,
                             uint64_t row_bytes, unsigned box_cols, unsigned box_rows) {
  /* cuda.h's CUtensorMapDataType FLOAT16 / BFLOAT16, SWIZZLE_128B, L2_PROMOTION_L2_256B; interleave and out-of-range
   * fill 0 (none: zeros) */
  enum { TMAP_F16 = 6, TMAP_BF16 = 9, TMAP_SWIZZLE_128B = 3, TMAP_L2_256B = 3 };
  if (!cuda_has_tensor_maps(c))
    return vm_err(c->vm, GRACE_EUNSUPPORTED, "cuda_tensor_map: TMA needs compute capability 9.0 and cuTensorMapEncodeTiled");
  if (dt != GRACE_FLOAT16 && dt != GRACE_BFLOAT16)
    return vm_err(c->vm, GRACE_EUNSUPPORTED, "cuda_tensor_map: %s matrices are not supported", grace_dtype_name(dt));
  if ((uintptr_t)map % 64 || base % 16 || row_bytes % 16 || box_cols * 2 > 128)
    return vm_err(c->vm, GRACE_EARG, "cuda_tensor_map: misaligned map, base or row stride, or a box wider than 128 bytes");
  uint64_t dims[2] = {cols, rows}, strides[1] = {row_bytes};
  unsigned box[2] = {box_cols, box_rows}, estr[2] = {1, 1};
  return cuda_check(c->vm, c->fn.cuTensorMapEncodeTiled(map, dt == GRACE_FLOAT16 ? TMAP_F16 : TMAP_BF16, 2, (void *)base,
                                                        dims, strides, box, estr, 0, TMAP_SWIZZLE_128B, TMAP_L2_256B, 0),
                    "cuTensorMapEncodeTiled");
}

int cuda_has_clusters(const cuda_ctx *c) { return c->fn.cuLaunchKernelEx && c->props.major >= 9; }

grace_status cuda_launch_cluster(cuda_ctx *c, CUfunction f, const unsigned grid[3], const unsigned block[3],
                                 unsigned smem, const void *params, size_t param_bytes, unsigned cluster) {
  if (!cuda_has_clusters(c))
    return vm_err(c->vm, GRACE_EUNSUPPORTED, "cuda_launch_cluster: thread-block clusters need compute capability 9.0 "
                  "and cuLaunchKernelEx");
  return launch_ex(c, f, grid, block, smem, params, param_bytes, c->pdl ? LAUNCH_PDL : 0, cluster);
}

uint64_t cuda_launch_count(const cuda_ctx *c) { return c->nlaunches; }

void cuda_pred_set(cuda_ctx *c, CUdeviceptr word, unsigned want) {
  c->pred = word;
  c->pred_want = word ? want : 0;
}

CUdeviceptr cuda_pred_word(const cuda_ctx *c, unsigned *want) {
  if (want) *want = c ? c->pred_want : 0;
  return c ? c->pred : 0;
}
uint64_t cuda_sync_count(const cuda_ctx *c) { return c->nsyncs; }

grace_status cuda_event_new(cuda_ctx *c, CUevent *e) {
  *e = NULL;
  return cuda_check(c->vm, c->fn.cuEventCreate(e, 0), "cuEventCreate");
}

void cuda_event_free(cuda_ctx *c, CUevent e) {
  if (e) c->fn.cuEventDestroy_v2(e);
}

grace_status cuda_event_record(cuda_ctx *c, CUevent e) {
  return cuda_check(c->vm, c->fn.cuEventRecord(e, c->stream), "cuEventRecord");
}

grace_status cuda_event_elapsed(cuda_ctx *c, CUevent a, CUevent b, float *ms) {
  *ms = 0;
  grace_status st = cuda_check(c->vm, c->fn.cuEventSynchronize(b), "cuEventSynchronize");
  return st ? st : cuda_check(c->vm, c->fn.cuEventElapsedTime(ms, a, b), "cuEventElapsedTime");
}
