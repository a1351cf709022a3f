/* cuda_api.h: the CUDA driver, NVRTC and cuBLASLt, loaded at run time with dlopen (no CUDA header or library
 * is needed to build or to run grace: the types below are declared by their ABI). One primary context and one
 * stream per VM; every call's status is checked and becomes a grace error naming the call and the driver's
 * message. Nothing here aborts or prints. */
#ifndef GRACE_CUDA_API_H
#define GRACE_CUDA_API_H

#include <stddef.h>
#include <stdint.h>
#include "grace.h"

/* ---- ABI types of the driver API (cuda.h), NVRTC (nvrtc.h) ---- */
typedef int CUresult;
typedef int CUdevice;
typedef unsigned long long CUdeviceptr;
typedef struct CUctx_st *CUcontext;
typedef struct CUmod_st *CUmodule;
typedef struct CUfunc_st *CUfunction;
typedef struct CUstream_st *CUstream;
typedef struct CUevent_st *CUevent;
typedef struct CUgraph_st *CUgraph;
typedef struct CUgraphExec_st *CUgraphExec;
typedef struct CUgraphNode_st *CUgraphNode;
typedef int nvrtcResult;
typedef struct _nvrtcProgram *nvrtcProgram;

typedef struct cuda_ctx cuda_ctx;

/* Properties read from the device. */
typedef struct cuda_props {
  char name[128];
  int major, minor;              /* compute capability: 9.0 on H100/H200 */
  int sms;
  int max_threads_per_block;
  int smem_per_block;            /* default limit, bytes */
  int smem_per_block_optin;      /* with cuFuncSetAttribute(MAX_DYNAMIC_SHARED_SIZE_BYTES) */
  int smem_per_sm;
  int l2_bytes;
  int warp_size;
  size_t total_mem;
  int driver_version;            /* 13000 for CUDA 13.0 */
} cuda_props;

/* ---- the device: loaded and probed on first use ---- */
/* The VM's CUDA context (driver loaded, primary context current, stream made); NULL when no device is usable,
 * with the reason in vm's error (GRACE_EDEVICE) and in cuda_why(vm). */
cuda_ctx *cuda_get(grace_vm *vm);
/* Whether a device is usable, without setting an error. */
int cuda_usable(grace_vm *vm);
/* Why no device is usable ("no CUDA driver (libcuda.so.1 not found)", "no CUDA device", a driver message). */
const char *cuda_why(grace_vm *vm);
/* "NVIDIA H200, sm_90, 132 SMs" */
const char *cuda_describe(grace_vm *vm);
const cuda_props *cuda_properties(cuda_ctx *c);
CUstream cuda_stream(cuda_ctx *c);
/* Frees everything the VM holds on the device (cached memory, modules, stream, context reference). */
void cuda_free_all(grace_vm *vm);
/* A failed driver call as a grace error: "<call>: <driver's message> (CUresult n)"; GRACE_OK for r == 0. An
 * out-of-memory result gives GRACE_ENOMEM. */
grace_status cuda_check(grace_vm *vm, CUresult r, const char *call);

/* ---- memory: a caching allocator (size classes, blocks reused in stream order, statistics) ---- */
/* *ptr receives n bytes of device memory (256-byte aligned; n 0 gives a valid unique pointer). On
 * out-of-memory the cache is released and the allocation tried once more; then GRACE_ENOMEM with the sizes. */
grace_status cuda_malloc(cuda_ctx *c, size_t n, CUdeviceptr *ptr);
/* Gives a block back to the cache (n: the size it was allocated with). */
void cuda_release(cuda_ctx *c, CUdeviceptr ptr, size_t n);
/* Returns cached, unused blocks to the driver. */
void cuda_empty_cache(cuda_ctx *c);
typedef struct cuda_mem_stats {
  size_t allocated;              /* bytes in blocks handed out now */
  size_t reserved;               /* bytes held from the driver (allocated + cached) */
  size_t peak_allocated;
  uint64_t nalloc, ncache_hits, ndriver_allocs, noom_retries;
} cuda_mem_stats;
void cuda_memory_stats(cuda_ctx *c, cuda_mem_stats *out);

/* ---- copies on the VM's stream; host-side functions wait for completion ---- */
grace_status cuda_copy_to_device(cuda_ctx *c, CUdeviceptr dst, const void *src, size_t n);
grace_status cuda_copy_to_host(cuda_ctx *c, void *dst, CUdeviceptr src, size_t n);
grace_status cuda_copy_device(cuda_ctx *c, CUdeviceptr dst, CUdeviceptr src, size_t n);   /* asynchronous */
grace_status cuda_memset(cuda_ctx *c, CUdeviceptr dst, int byte, size_t n);                  /* asynchronous */
grace_status cuda_sync(cuda_ctx *c);
/* Seconds on the host's monotonic clock (grace_clock), or on the clock a test put in place of it. */
double cuda_clock(cuda_ctx *c);

/* ---- NVRTC and modules ---- */
/* Compiles CUDA C source (no headers are included) with NVRTC for the device's architecture, or for arch
 * (e.g. 90) when arch > 0 (needs no GPU), into PTX (ptx != 0) or a cubin. A source that defines
 * GRACE_ARCH_SPECIFIC (it uses instructions of that architecture alone, such as wgmma) is compiled for the
 * architecture-specific target (sm_90a). The result is malloc'ed through the VM's allocator: free with
 * grace_realloc(vm, *out, *n, 0); *n is its size in bytes (PTX: with its NUL). On a
 * compile error the status is GRACE_EINTERNAL and the message holds NVRTC's log (the first lines). Works without a
 * GPU or driver as long as libnvrtc loads. */
grace_status cuda_nvrtc_compile(grace_vm *vm, const char *src, int arch, int ptx, char **out, size_t *n);
/* Whether libnvrtc can be loaded (NULL) or why not. */
const char *cuda_nvrtc_why(grace_vm *vm);
/* "13.0" */
const char *cuda_nvrtc_version(grace_vm *vm);

typedef struct cuda_module cuda_module;
/* A loaded module for src: from the VM's in-memory cache, else from the disk cache ($GRACE_CACHE_DIR, default
 * ~/.cache/grace; key: a hash of source, options, architecture and NVRTC version; an unreadable or corrupt entry
 * is recompiled and rewritten), else compiled by NVRTC. The module lives as long as the VM. */
grace_status cuda_module_get(cuda_ctx *c, const char *src, cuda_module **out);
grace_status cuda_module_function(cuda_ctx *c, cuda_module *m, const char *name, CUfunction *out);
/* As cuda_module_get for a source that calls the device runtime (cudaGraphSetConditional): compiled relocatable
 * and linked with libcudadevrt.a by nvJitLink (cuda_link.c). GRACE_EUNSUPPORTED when nvJitLink or the library is
 * missing (cuda_link_why says which). */
grace_status cuda_module_get_linked(cuda_ctx *c, const char *src, cuda_module **out);
/* NULL when nvJitLink and libcudadevrt.a are there (probed once), else why not. Needs no GPU. */
const char *cuda_link_why(cuda_ctx *c);
typedef struct cuda_compile_stats {
  uint64_t nvrtc_calls, disk_hits, memory_hits, corrupt_entries;
  double nvrtc_seconds;
} cuda_compile_stats;
void cuda_compile_stats_get(cuda_ctx *c, cuda_compile_stats *out);

/* ---- launches and timing ---- */
/* Launches f with one parameter: the param_bytes bytes at params (the kernel's parameter struct, see
 * codegen/cg.h). smem: dynamic shared memory (raised past 48 KB with cuFuncSetAttribute when needed). */
grace_status cuda_launch(cuda_ctx *c, CUfunction f, const unsigned grid[3], const unsigned block[3], unsigned smem,
                         const void *params, size_t param_bytes);
/* As cuda_launch, but the kernel may start while the previous one drains (programmatic dependent launch): it must
 * wait (griddepcontrol.wait) before reading what earlier kernels wrote, and before writing what they read. A plain
 * launch where the driver lacks it or the environment sets GRACE_PDL=0. */
grace_status cuda_launch_overlapped(cuda_ctx *c, CUfunction f, const unsigned grid[3], const unsigned block[3],
                                    unsigned smem, const void *params, size_t param_bytes);
/* A TMA tensor map (the driver's 128-byte CUtensorMap, written to map, which must be 64-byte aligned) of a
 * row-major matrix of dt (float16 or bfloat16): `rows` rows of `cols` elements, row_bytes apart (a multiple of 16,
 * base 16-byte aligned), read in boxes of box_cols x box_rows elements (box_cols * 2 bytes <= 128) with the
 * 128-byte swizzle; elements past the matrix read as zero. GRACE_EUNSUPPORTED without compute capability 9.0 or
 * without cuTensorMapEncodeTiled in the driver. */
grace_status cuda_tensor_map(cuda_ctx *c, void *map, grace_dtype dt, CUdeviceptr base, uint64_t cols, uint64_t rows,
                             uint64_t row_bytes, unsigned box_cols, unsigned box_rows);
/* Whether cuda_tensor_map can work here (device and driver). */
int cuda_has_tensor_maps(const cuda_ctx *c);
/* Whether the device and driver launch thread-block clusters (compute capability 9.0, cuLaunchKernelEx). */
int cuda_has_clusters(const cuda_ctx *c);
/* As cuda_launch_overlapped, in clusters of `cluster` consecutive blocks along x (grid[0] a multiple of it): the
 * blocks of a cluster run together and read each other's shared memory. GRACE_EUNSUPPORTED where cuda_has_clusters is 0. */
grace_status cuda_launch_cluster(cuda_ctx *c, CUfunction f, const unsigned grid[3], const unsigned block[3],
                                 unsigned smem, const void *params, size_t param_bytes, unsigned cluster);
/* How many blocks of f (block threads, smem dynamic bytes) the whole device holds at once; 0 where the driver
 * cannot say. */
int64_t cuda_coresident_blocks(cuda_ctx *c, CUfunction f, unsigned block, unsigned smem);
/* As cuda_launch, cooperatively: every block is resident at once, so they may wait for each other. The grid must
 * not exceed cuda_coresident_blocks (the driver refuses it: a clear error). GRACE_EUNSUPPORTED without
 * cuLaunchKernelEx (CUDA 12). */
grace_status cuda_launch_cooperative(cuda_ctx *c, CUfunction f, const unsigned grid[3], const unsigned block[3],
                                     unsigned smem, const void *params, size_t param_bytes);
/* Predication (gpu/gpu_pred.c). While word is set (not 0), every kernel launched must be a predicated one (generated
 * with codegen's pred flag, cg_pred_params): each launch passes word and want as its second and third parameters,
 * and the kernel returns at entry unless the 32-bit word holds want. Library kernels (cuBLASLt) and device-to-device
 * driver copies (which could write a region's result) cannot be skipped so: they fail with GRACE_EUNSUPPORTED
 * meanwhile (memsets and copies from the host stay: they only ever fill memory private to the kernels after them).
 * cuda_pred_word: the word set now (0: none) and its want. */
void cuda_pred_set(cuda_ctx *c, CUdeviceptr word, unsigned want);
CUdeviceptr cuda_pred_word(const cuda_ctx *c, unsigned *want);
grace_status cuda_event_new(cuda_ctx *c, CUevent *e);
void cuda_event_free(cuda_ctx *c, CUevent e);
grace_status cuda_event_record(cuda_ctx *c, CUevent e);
/* Milliseconds between two recorded events (waits for b). */
grace_status cuda_event_elapsed(cuda_ctx *c, CUevent a, CUevent b, float *ms);

/* The raw driver table, for subsystems that need calls not wrapped above (graphs, cuBLASLt plumbing). Filled
 * with dlsym under the names given (the ABI versions cuda.h maps its macros to). Entries marked optional are NULL
 * when the driver lacks them; all others are always set once cuda_get succeeded. */
typedef struct CUkern_st *CUkernel;
/* CUDA_KERNEL_NODE_PARAMS_v2 (cuda.h), the struct cuGraphKernelNodeGetParams_v2 and
 * cuGraphExecKernelNodeSetParams_v2 take. */
typedef struct CUDA_KERNEL_NODE_PARAMS {
  CUfunction func;
  unsigned gridDimX, gridDimY, gridDimZ;
  unsigned blockDimX, blockDimY, blockDimZ;
  unsigned sharedMemBytes;
  void **kernelParams;
  void **extra;
  CUkernel kern;
  CUcontext ctx;
} CUDA_KERNEL_NODE_PARAMS;
enum {
  CU_STREAM_CAPTURE_MODE_GLOBAL = 0, CU_STREAM_CAPTURE_MODE_THREAD_LOCAL = 1, CU_STREAM_CAPTURE_MODE_RELAXED = 2,
  CU_GRAPH_NODE_TYPE_KERNEL = 0, CU_GRAPH_NODE_TYPE_MEMCPY = 1, CU_GRAPH_NODE_TYPE_MEMSET = 2,
  CU_GRAPH_NODE_TYPE_EMPTY = 5, CU_GRAPH_NODE_TYPE_WAIT_EVENT = 6, CU_GRAPH_NODE_TYPE_EVENT_RECORD = 7,
  CU_GRAPH_NODE_TYPE_MEM_ALLOC = 10, CU_GRAPH_NODE_TYPE_MEM_FREE = 11, CU_GRAPH_NODE_TYPE_CONDITIONAL = 13,
  CU_GRAPH_COND_TYPE_IF = 0, CU_GRAPH_COND_TYPE_WHILE = 1, CU_STREAM_SET_CAPTURE_DEPENDENCIES = 1
};
/* CUDA_MEMSET_NODE_PARAMS and CUDA_MEMCPY3D (cuda.h): what a graph's memset and copy nodes touch */
typedef struct CUDA_MEMSET_NODE_PARAMS {
  CUdeviceptr dst;
  size_t pitch;
  unsigned value, elementSize;
  size_t width, height;
} CUDA_MEMSET_NODE_PARAMS;
typedef struct CUDA_MEMCPY3D {
  size_t srcXInBytes, srcY, srcZ, srcLOD;
  int srcMemoryType;
  const void *srcHost;
  CUdeviceptr srcDevice;
  void *srcArray, *reserved0;
  size_t srcPitch, srcHeight;
  size_t dstXInBytes, dstY, dstZ, dstLOD;
  int dstMemoryType;
  void *dstHost;
  CUdeviceptr dstDevice;
  void *dstArray, *reserved1;
  size_t dstPitch, dstHeight;
  size_t WidthInBytes, Height, Depth;
} CUDA_MEMCPY3D;
/* Conditional nodes (cuda.h, CUDA 12.4+; IF with two bodies, an else, since 12.8): CUDA_CONDITIONAL_NODE_PARAMS
 * inside CUgraphNodeParams, whose union is padded to 29 long longs. */
typedef unsigned long long CUgraphConditionalHandle;
typedef struct CUDA_CONDITIONAL_NODE_PARAMS {
  CUgraphConditionalHandle handle;
  int type;                       /* CU_GRAPH_COND_TYPE_IF or _WHILE */
  unsigned size;                  /* bodies: 1 (if, while) or 2 (if/else) */
  CUgraph *phGraph_out;           /* the driver's array of the node's body graphs, filled by cuGraphAddNode */
  CUcontext ctx;
} CUDA_CONDITIONAL_NODE_PARAMS;
typedef struct CUgraphNodeParams {
  int type;
  int reserved0[3];
  union { long long reserved1[29]; CUDA_CONDITIONAL_NODE_PARAMS conditional; } u;
  long long reserved2;
} CUgraphNodeParams;
typedef struct cuda_fns {
  CUresult (*cuGetErrorString)(CUresult, const char **);
  CUresult (*cuGetErrorName)(CUresult, const char **);
  CUresult (*cuInit)(unsigned);
  CUresult (*cuDriverGetVersion)(int *);
  CUresult (*cuDeviceGetCount)(int *);
  CUresult (*cuDeviceGet)(CUdevice *, int);
  CUresult (*cuDeviceGetName)(char *, int, CUdevice);
  CUresult (*cuDeviceGetAttribute)(int *, int, CUdevice);
  CUresult (*cuDeviceTotalMem_v2)(size_t *, CUdevice);
  CUresult (*cuDevicePrimaryCtxRetain)(CUcontext *, CUdevice);
  CUresult (*cuDevicePrimaryCtxRelease_v2)(CUdevice);
  CUresult (*cuCtxSetCurrent)(CUcontext);
  CUresult (*cuCtxGetCurrent)(CUcontext *);
  CUresult (*cuStreamCreate)(CUstream *, unsigned);
  CUresult (*cuStreamDestroy_v2)(CUstream);
  CUresult (*cuStreamSynchronize)(CUstream);
  CUresult (*cuMemAlloc_v2)(CUdeviceptr *, size_t);
  CUresult (*cuMemFree_v2)(CUdeviceptr);
  CUresult (*cuMemGetInfo_v2)(size_t *, size_t *);
  CUresult (*cuMemcpyHtoDAsync_v2)(CUdeviceptr, const void *, size_t, CUstream);
  CUresult (*cuMemcpyDtoHAsync_v2)(void *, CUdeviceptr, size_t, CUstream);
  CUresult (*cuMemcpyDtoDAsync_v2)(CUdeviceptr, CUdeviceptr, size_t, CUstream);
  CUresult (*cuMemsetD8Async)(CUdeviceptr, unsigned char, size_t, CUstream);
  CUresult (*cuModuleLoadData)(CUmodule *, const void *);
  CUresult (*cuModuleUnload)(CUmodule);
  CUresult (*cuModuleGetFunction)(CUfunction *, CUmodule, const char *);
  CUresult (*cuFuncSetAttribute)(CUfunction, int, int);
  CUresult (*cuLaunchKernel)(CUfunction, unsigned, unsigned, unsigned, unsigned, unsigned, unsigned, unsigned,
                             CUstream, void **, void **);
  CUresult (*cuLaunchKernelEx)(const void *config, CUfunction, void **, void **);   /* optional (CUDA 12) */
  CUresult (*cuEventCreate)(CUevent *, unsigned);
  CUresult (*cuEventDestroy_v2)(CUevent);
  CUresult (*cuEventRecord)(CUevent, CUstream);
  CUresult (*cuEventSynchronize)(CUevent);
  CUresult (*cuEventElapsedTime)(float *, CUevent, CUevent);   /* cuEventElapsedTime_v2 where the driver has it */
  CUresult (*cuMemAllocHost_v2)(void **, size_t);
  CUresult (*cuMemFreeHost)(void *);
  /* graphs; optional */
  CUresult (*cuStreamBeginCapture_v2)(CUstream, int mode);
  CUresult (*cuStreamEndCapture)(CUstream, CUgraph *);
  CUresult (*cuGraphInstantiateWithFlags)(CUgraphExec *, CUgraph, unsigned long long);
  CUresult (*cuGraphLaunch)(CUgraphExec, CUstream);
  CUresult (*cuGraphExecDestroy)(CUgraphExec);
  CUresult (*cuGraphDestroy)(CUgraph);
  CUresult (*cuGraphExecKernelNodeSetParams_v2)(CUgraphExec, CUgraphNode, const CUDA_KERNEL_NODE_PARAMS *);
  CUresult (*cuGraphGetNodes)(CUgraph, CUgraphNode *, size_t *);
  CUresult (*cuGraphNodeGetType)(CUgraphNode, int *);
  CUresult (*cuGraphKernelNodeGetParams_v2)(CUgraphNode, CUDA_KERNEL_NODE_PARAMS *);
  CUresult (*cuFuncGetParamInfo)(CUfunction, size_t, size_t *, size_t *);
  CUresult (*cuOccupancyMaxActiveBlocksPerMultiprocessor)(int *, CUfunction, int, size_t);   /* optional */
  /* TMA tensor maps; optional (CUDA 12) */
  CUresult (*cuTensorMapEncodeTiled)(void *map, int dtype, unsigned rank, void *base, const uint64_t *dims,
                                     const uint64_t *strides, const unsigned *box, const unsigned *elem_strides,
                                     int interleave, int swizzle, int l2_promotion, int oob_fill);
  CUresult (*cuGraphKernelNodeSetParams_v2)(CUgraphNode, const CUDA_KERNEL_NODE_PARAMS *);
  /* library kernel nodes re-pointed per replay (cuda_graph_update.c); optional (CUDA 12.4) */
  CUresult (*cuKernelGetParamInfo)(CUkernel, size_t, size_t *, size_t *);
  CUresult (*cuGraphMemsetNodeGetParams)(CUgraphNode, CUDA_MEMSET_NODE_PARAMS *);
  CUresult (*cuGraphMemcpyNodeGetParams)(CUgraphNode, CUDA_MEMCPY3D *);
  /* conditional nodes added during stream capture, their bodies captured from other streams; optional (CUDA 12.4+).
   * The edge-data arguments (CUgraphEdgeData) are always passed NULL: plain full dependencies. */
  CUresult (*cuStreamGetCaptureInfo_v3)(CUstream, int *status, unsigned long long *id, CUgraph *graph,
                                        const CUgraphNode **deps, const void **edges, size_t *ndeps);
  CUresult (*cuStreamUpdateCaptureDependencies_v2)(CUstream, CUgraphNode *deps, const void *edges, size_t n,
                                                   unsigned flags);
  CUresult (*cuGraphAddNode_v2)(CUgraphNode *, CUgraph, const CUgraphNode *deps, const void *edges, size_t n,
                                CUgraphNodeParams *);
  CUresult (*cuGraphConditionalHandleCreate)(CUgraphConditionalHandle *, CUgraph, CUcontext, unsigned dflt,
                                             unsigned flags);
  CUresult (*cuStreamBeginCaptureToGraph)(CUstream, CUgraph, const CUgraphNode *deps, const void *edges, size_t n,
                                          int mode);
} cuda_fns;
const cuda_fns *cuda_driver_fns(cuda_ctx *c);

#endif
