/* fake_cuda.h: a fake CUDA driver for tests that run without a GPU (include in one test file). Device memory is
 * host memory (so copies, memsets and reads back work), kernels and graphs do nothing (so no value a kernel would
 * compute is right), modules load whatever NVRTC compiled. install_fake(vm) puts it under the VM's CUDA state
 * before anything probes the real driver. Counters say what went through it; inst_oom makes graph instantiation
 * run out of memory, end_result what ending a capture returns. */
#ifndef GRACE_TEST_FAKE_CUDA_H
#define GRACE_TEST_FAKE_CUDA_H
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include "cuda/cuda_internal.h"

static long kernel_launches, graph_launches, instantiations, driver_frees;
static int capturing;    /* between a begin and an end of stream capture */
static int end_result;   /* what ending a capture returns (901: the driver invalidated it) */
static int fake_ctx_obj, fake_obj;

static CUresult f_alloc(CUdeviceptr *p, size_t n) {
  void *m = NULL;
  if (posix_memalign(&m, 256, n ? n : 1)) return 2;
  memset(m, 0, n ? n : 1);
  *p = (CUdeviceptr)(uintptr_t)m;
  return 0;
}
static CUresult f_free(CUdeviceptr p) { free((void *)(uintptr_t)p); driver_frees++; return 0; }
static CUresult f_sync(CUstream s) { (void)s; return 0; }
static CUresult f_htod(CUdeviceptr d, const void *s, size_t n, CUstream st) { (void)st; memcpy((void *)(uintptr_t)d, s, n); return 0; }
static CUresult f_dtoh(void *d, CUdeviceptr s, size_t n, CUstream st) { (void)st; memcpy(d, (void *)(uintptr_t)s, n); return 0; }
static CUresult f_dtod(CUdeviceptr d, CUdeviceptr s, size_t n, CUstream st) { (void)st; memmove((void *)(uintptr_t)d, (void *)(uintptr_t)s, n); return 0; }
static CUresult f_memset(CUdeviceptr d, unsigned char v, size_t n, CUstream st) { (void)st; memset((void *)(uintptr_t)d, v, n); return 0; }
static CUresult f_load(CUmodule *m, const void *img) { (void)img; *m = (CUmodule)&fake_obj; return 0; }
static CUresult f_unload(CUmodule m) { (void)m; return 0; }
static CUresult f_getfn(CUfunction *f, CUmodule m, const char *name) { (void)m; (void)name; *f = (CUfunction)&fake_obj; return 0; }
static CUresult f_attr(CUfunction f, int a, int v) { (void)f; (void)a; (void)v; return 0; }
static CUresult f_launch(CUfunction f, unsigned a, unsigned b, unsigned c, unsigned d, unsigned e, unsigned g, unsigned smem,
                         CUstream s, void **p, void **x) {
  (void)f; (void)a; (void)b; (void)c; (void)d; (void)e; (void)g; (void)smem; (void)s; (void)p; (void)x;
  kernel_launches++;
  return 0;
}
/* cuLaunchKernelEx and the occupancy query, installed by a test that wants them (install_fake_ex): the launch
 * records its grid and whether it was cooperative or a programmatic dependent (CUlaunchConfig's ABI, as cuda_api.c
 * lays it out) */
typedef struct fake_attr { int id; char pad[4]; union { char pad[64]; int value; unsigned dim[3]; } v; } fake_attr;
typedef struct fake_config { unsigned grid[3], block[3], smem; CUstream stream; fake_attr *attrs; unsigned nattrs; } fake_config;
static unsigned ex_grid, ex_block;
static int ex_coop, ex_pdl, fake_blocks_per_sm;
static CUresult f_launch_ex(const void *cfg, CUfunction f, void **p, void **x) {
  (void)f; (void)p; (void)x;
  const fake_config *c = cfg;
  ex_grid = c->grid[0];
  ex_block = c->block[0];
  ex_coop = ex_pdl = 0;
  for (unsigned i = 0; i < c->nattrs; i++) {
    ex_coop |= c->attrs[i].id == 2 && c->attrs[i].v.value == 1;
    ex_pdl |= c->attrs[i].id == 6 && c->attrs[i].v.value == 1;
  }
  kernel_launches++;
  return 0;
}
static CUresult f_occupancy(int *n, CUfunction f, int block, size_t smem) {
  (void)f; (void)block; (void)smem;
  *n = fake_blocks_per_sm;
  return 0;
}
static CUresult f_event_new(CUevent *e, unsigned fl) { (void)fl; *e = (CUevent)&fake_obj; return 0; }
static CUresult f_event_free(CUevent e) { (void)e; return 0; }
static CUresult f_event_rec(CUevent e, CUstream s) { (void)e; (void)s; return 0; }
static CUresult f_event_sync(CUevent e) { (void)e; return 0; }
static CUresult f_elapsed(float *ms, CUevent a, CUevent b) { (void)a; (void)b; *ms = 1.0f; return 0; }
static CUresult f_host_alloc(void **p, size_t n) { *p = malloc(n ? n : 1); return *p ? 0 : 2; }
static CUresult f_host_free(void *p) { free(p); return 0; }
static CUresult f_begin(CUstream s, int mode) { (void)s; (void)mode; capturing = 1; return 0; }
static CUresult f_end(CUstream s, CUgraph *g) {
  (void)s;
  capturing = 0;
  *g = end_result ? NULL : (CUgraph)&fake_obj;
  return end_result;
}
static int inst_oom;   /* instantiation runs out of device memory */
static CUresult f_inst(CUgraphExec *x, CUgraph g, unsigned long long fl) {
  (void)g; (void)fl;
  if (inst_oom) return 2;   /* CUDA_ERROR_OUT_OF_MEMORY */
  *x = (CUgraphExec)&fake_obj;
  instantiations++;
  return 0;
}
static CUresult f_glaunch(CUgraphExec x, CUstream s) { (void)x; (void)s; graph_launches++; return 0; }
static CUresult f_gxdestroy(CUgraphExec x) { (void)x; return 0; }
static CUresult f_gdestroy(CUgraph g) { (void)g; return 0; }
static CUresult f_nodes(CUgraph g, CUgraphNode *n, size_t *k) { (void)g; (void)n; *k = 0; return 0; }
static CUresult f_nodetype(CUgraphNode n, int *t) { (void)n; *t = 0; return 0; }
static CUresult f_ctx_get(CUcontext *c) { *c = (CUcontext)&fake_ctx_obj; return 0; }
static CUresult f_ctx_set(CUcontext c) { (void)c; return 0; }
static CUresult f_meminfo(size_t *fr, size_t *tot) { *fr = *tot = (size_t)1 << 36; return 0; }
static CUresult f_errstr(CUresult r, const char **s) { *s = r == 2 ? "out of memory" : "fake driver error"; return 0; }
static CUresult f_release(CUdevice d) { (void)d; return 0; }
static CUresult f_sdestroy(CUstream s) { (void)s; return 0; }

static cuda_ctx *install_fake(grace_vm *vm) {
  cuda_ctx *c = cuda_state(vm);
  cuda_fns *f = &c->fn;
  c->driver_probed = c->usable = 1;
  c->ctx = (CUcontext)&fake_ctx_obj;
  c->props = (cuda_props){.name = "fake GPU", .major = 9, .minor = 0, .sms = 132, .max_threads_per_block = 1024,
                          .smem_per_block = 49152, .smem_per_block_optin = 232448, .smem_per_sm = 233472,
                          .l2_bytes = 50 << 20, .warp_size = 32, .total_mem = (size_t)1 << 36,
                          .driver_version = 13000};
  snprintf(c->desc, sizeof c->desc, "fake GPU, sm_90, 132 SMs");
  f->cuMemAlloc_v2 = f_alloc; f->cuMemFree_v2 = f_free; f->cuStreamSynchronize = f_sync;
  f->cuMemcpyHtoDAsync_v2 = f_htod; f->cuMemcpyDtoHAsync_v2 = f_dtoh; f->cuMemcpyDtoDAsync_v2 = f_dtod;
  f->cuMemsetD8Async = f_memset; f->cuModuleLoadData = f_load; f->cuModuleUnload = f_unload;
  f->cuModuleGetFunction = f_getfn; f->cuFuncSetAttribute = f_attr; f->cuLaunchKernel = f_launch;
  f->cuEventCreate = f_event_new; f->cuEventDestroy_v2 = f_event_free; f->cuEventRecord = f_event_rec;
  f->cuEventSynchronize = f_event_sync; f->cuEventElapsedTime = f_elapsed; f->cuMemAllocHost_v2 = f_host_alloc;
  f->cuMemFreeHost = f_host_free; f->cuStreamBeginCapture_v2 = f_begin; f->cuStreamEndCapture = f_end;
  f->cuGraphInstantiateWithFlags = f_inst; f->cuGraphLaunch = f_glaunch; f->cuGraphExecDestroy = f_gxdestroy;
  f->cuGraphDestroy = f_gdestroy; f->cuGraphGetNodes = f_nodes; f->cuGraphNodeGetType = f_nodetype;
  f->cuCtxGetCurrent = f_ctx_get; f->cuCtxSetCurrent = f_ctx_set; f->cuMemGetInfo_v2 = f_meminfo;
  f->cuGetErrorString = f_errstr; f->cuGetErrorName = f_errstr; f->cuDevicePrimaryCtxRelease_v2 = f_release;
  f->cuStreamDestroy_v2 = f_sdestroy;
  return c;
}
static inline void install_fake_ex(cuda_ctx *c) {
  c->fn.cuLaunchKernelEx = f_launch_ex;
  c->fn.cuOccupancyMaxActiveBlocksPerMultiprocessor = f_occupancy;
}

#endif
