/* fake_cuda.h: a fake CUDA driver for tests that run without a GPU (include in one test file). Device memory is
 * host memory (so copies, memsets and reads back work), kernels and graphs do nothing (so no value a kernel would
 * compute is right), modules load whatever NVRTC compiled. install_fake(vm) puts it under the VM's CUDA state
 * before anything probes the real driver. Counters say what went through it; inst_oom makes graph instantiation
 * run out of memory, end_result what ending a capture returns. install_fake_cond adds conditional graph nodes: the
 * fake records the structure of the last graph captured (see below), since it cannot run the kernels that set a
 * node's handle nor, therefore, decide which body a replay would run. install_fake_clock programs the time calls
 * take, as the launch measurement sees it. */
#ifndef GRACE_TEST_FAKE_CUDA_H
#define GRACE_TEST_FAKE_CUDA_H
#include <dirent.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>
#include "cuda/cuda_internal.h"

static long kernel_launches, graph_launches, instantiations, driver_frees;
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
static long stream_syncs;
static int capturing;    /* between a begin and an end of stream capture */
/* ---- programmable timings (install_fake_clock) ----
 * The launch measurement then reads fake_clock_us (microseconds) instead of the host's clock, and each stream
 * synchronize advances it by fake_work_us(kernels, exec): what the work queued since the previous synchronize took,
 * told the kernels launched outside graphs since then and the last graph exec launched since then (NULL: none; each
 * instantiation hands out an exec of its own, so a test can tell whose replay it was). NULL: no time passes. */
static double fake_clock_us;
static double (*fake_work_us)(long kernels, CUgraphExec exec);
static long fake_kernels_synced;   /* kernel_launches at the last synchronize */
static CUgraphExec fake_exec_since;
static char fake_execs[256];
/* a synchronize or a copy to the host inside a capture fails, as on a device (CUDA_ERROR_STREAM_CAPTURE_UNSUPPORTED) */
static CUresult f_sync(CUstream s) {
  (void)s;
  stream_syncs++;
  if (capturing) return 900;
  if (fake_work_us) fake_clock_us += fake_work_us(kernel_launches - fake_kernels_synced, fake_exec_since);
  fake_kernels_synced = kernel_launches;
  fake_exec_since = NULL;
  return 0;
}
static inline double fake_clock(cuda_ctx *c) { (void)c; return fake_clock_us * 1e-6; }
static long htod_copies, dtoh_copies;   /* copies between host and device memory */
static CUresult f_htod(CUdeviceptr d, const void *s, size_t n, CUstream st) { (void)st; memcpy((void *)(uintptr_t)d, s, n); htod_copies++; return 0; }
static CUresult f_dtoh(void *d, CUdeviceptr s, size_t n, CUstream st) {
  (void)st;
  dtoh_copies++;
  if (capturing) return 900;
  memcpy(d, (void *)(uintptr_t)s, n);
  return 0;
}
static CUresult f_dtod(CUdeviceptr d, CUdeviceptr s, size_t n, CUstream st) { (void)st; memmove((void *)(uintptr_t)d, (void *)(uintptr_t)s, n); return 0; }
static CUresult f_memset(CUdeviceptr d, unsigned char v, size_t n, CUstream st) { (void)st; memset((void *)(uintptr_t)d, v, n); return 0; }
static CUresult f_load(CUmodule *m, const void *img) { (void)img; *m = (CUmodule)&fake_obj; return 0; }
static CUresult f_unload(CUmodule m) { (void)m; return 0; }
/* ---- the structure of the last graph captured, with conditional nodes (install_fake_cond) ----
 * fgraph[0] is the graph a stream capture begun on the VM's stream records into (cleared when one begins); a
 * conditional node added to a graph gets fresh entries for its bodies. Per graph: the kernels launched into it,
 * the handles the predicate kernel (grace_cond_set, told apart by its name) was launched with, and its conditional
 * nodes (type, number of bodies, handle, the body entries), and per kernel the predicate it was given (predication:
 * cuda_pred_set). A stream made by cuStreamCreate captures into the
 * graph cuStreamBeginCaptureToGraph names. */
typedef struct fake_graph {
  int kernels, nsets, nconds;
  /* per kernel (the first 64): the predicate word and wanted value it was launched with (0, 0: not predicated),
   * and whether it is the predication's word kernel (grace_pred_set), then that kernel's words */
  unsigned long long pword[64], pwords[64][6];
  unsigned pwant[64];
  int is_word[64];
  unsigned long long sets[8], counts[8];   /* the handle each predicate kernel sets, and its loop counter's address */
  struct { int type; unsigned size; unsigned long long handle; int body[2]; } cond[8];
  CUgraph bodies[8][2];             /* the arrays handed back as phGraph_out */
} fake_graph;
static fake_graph fgraph[64];
static int nfgraph, fake_main_target = -1, fake_stream_target[8] = {-1, -1, -1, -1, -1, -1, -1, -1}, nfake_streams;
static int fake_streams_obj[8], fake_setfn_obj, fake_predfn_obj;
static long cond_nodes_added;
static unsigned long long fake_handles;
static int fake_graph_index(CUgraph g) { return (int)((fake_graph *)(void *)g - fgraph); }
/* The graph stream s captures into, or -1. */
static int *fake_target(CUstream s) {
  for (int i = 0; i < nfake_streams; i++) if ((void *)s == (void *)&fake_streams_obj[i]) return &fake_stream_target[i];
  return &fake_main_target;
}

/* A launch of f on s with parameters p, in the graph s captures into. */
static void fake_record(CUfunction f, CUstream s, void **p) {
  int t = *fake_target(s);
  if (t < 0) return;
  fake_graph *fg = &fgraph[t];
  if (fg->kernels < 64) {   /* grace's launches pass the predicate's two parameters after the struct */
    int k = fg->kernels;
    fg->pword[k] = *(const unsigned long long *)p[1];
    fg->pwant[k] = *(const unsigned *)p[2];
    fg->is_word[k] = (void *)f == (void *)&fake_predfn_obj;
    if (fg->is_word[k]) memcpy(fg->pwords[k], p[0], sizeof fg->pwords[k]);
  }
  fg->kernels++;
  if ((void *)f == (void *)&fake_setfn_obj && fg->nsets < 8) {
    fg->counts[fg->nsets] = ((const uint64_t *)p[0])[4];
    fg->sets[fg->nsets++] = ((const uint64_t *)p[0])[1];
  }
}
static CUresult f_getfn(CUfunction *f, CUmodule m, const char *name) {
  (void)m;
  *f = !strcmp(name, "grace_cond_set") ? (CUfunction)&fake_setfn_obj
       : !strcmp(name, "grace_pred_set") ? (CUfunction)&fake_predfn_obj : (CUfunction)&fake_obj;
  return 0;
}
static CUresult f_attr(CUfunction f, int a, int v) { (void)f; (void)a; (void)v; return 0; }
static CUresult f_launch(CUfunction f, unsigned a, unsigned b, unsigned c, unsigned d, unsigned e, unsigned g, unsigned smem,
                         CUstream s, void **p, void **x) {
  (void)a; (void)b; (void)c; (void)d; (void)e; (void)g; (void)smem; (void)x;
  kernel_launches++;
  fake_record(f, s, p);
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
  (void)x;
  const fake_config *c = cfg;
  ex_grid = c->grid[0];
  ex_block = c->block[0];
  ex_coop = ex_pdl = 0;
  for (unsigned i = 0; i < c->nattrs; i++) {
    ex_coop |= c->attrs[i].id == 2 && c->attrs[i].v.value == 1;
    ex_pdl |= c->attrs[i].id == 6 && c->attrs[i].v.value == 1;
  }
  kernel_launches++;
  fake_record(f, c->stream, p);
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
static CUresult f_begin(CUstream s, int mode) {
  (void)s; (void)mode;
  capturing = 1;
  memset(fgraph, 0, sizeof fgraph);
  nfgraph = 1;
  fake_main_target = 0;
  return 0;
}
static CUresult f_end(CUstream s, CUgraph *g) {
  int *t = fake_target(s);
  if (t != &fake_main_target) {   /* a body's capture */
    *g = *t >= 0 ? (CUgraph)(void *)&fgraph[*t] : NULL;
    *t = -1;
    return 0;
  }
  fake_main_target = -1;
  capturing = 0;
  *g = end_result ? NULL : (CUgraph)&fake_obj;
  return end_result;
}
static int inst_oom;   /* instantiation runs out of device memory */
static CUresult f_inst(CUgraphExec *x, CUgraph g, unsigned long long fl) {
  (void)g; (void)fl;
  if (inst_oom) return 2;   /* CUDA_ERROR_OUT_OF_MEMORY */
  *x = (CUgraphExec)(void *)&fake_execs[instantiations % 256];
  instantiations++;
  return 0;
}
static CUresult f_glaunch(CUgraphExec x, CUstream s) { (void)s; graph_launches++; fake_exec_since = x; return 0; }
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

static CUresult f_capture_info(CUstream s, int *status, unsigned long long *id, CUgraph *g, const CUgraphNode **deps,
                               const void **edges, size_t *ndeps) {
  int t = *fake_target(s);
  *status = t >= 0;
  if (id) *id = 1;
  *g = t >= 0 ? (CUgraph)(void *)&fgraph[t] : NULL;
  *deps = NULL;
  if (edges) *edges = NULL;
  *ndeps = 0;
  return 0;
}
static CUresult f_update_deps(CUstream s, CUgraphNode *deps, const void *edges, size_t n, unsigned fl) {
  (void)s; (void)deps; (void)edges; (void)n; (void)fl;
  return 0;
}
static CUresult f_add_node(CUgraphNode *node, CUgraph g, const CUgraphNode *deps, const void *edges, size_t n,
                           CUgraphNodeParams *p) {
  (void)deps; (void)edges; (void)n;
  fake_graph *fg = &fgraph[fake_graph_index(g)];
  unsigned size = p->u.conditional.size;
  if (p->type != CU_GRAPH_NODE_TYPE_CONDITIONAL || fg->nconds >= 8 || size < 1 || size > 2 || nfgraph + 2 > 64) return 1;
  int k = fg->nconds++;
  fg->cond[k].type = p->u.conditional.type;
  fg->cond[k].size = size;
  fg->cond[k].handle = p->u.conditional.handle;
  for (unsigned b = 0; b < size; b++) {
    fg->cond[k].body[b] = nfgraph;
    fg->bodies[k][b] = (CUgraph)(void *)&fgraph[nfgraph++];
  }
  p->u.conditional.phGraph_out = fg->bodies[k];
  *node = (CUgraphNode)&fake_obj;
  cond_nodes_added++;
  return 0;
}
static CUresult f_handle(CUgraphConditionalHandle *h, CUgraph g, CUcontext ctx, unsigned dflt, unsigned fl) {
  (void)g; (void)ctx; (void)dflt; (void)fl;
  *h = ++fake_handles;
  return 0;
}
static CUresult f_begin_to(CUstream s, CUgraph g, const CUgraphNode *deps, const void *edges, size_t n, int mode) {
  (void)deps; (void)edges; (void)n; (void)mode;
  *fake_target(s) = fake_graph_index(g);
  return 0;
}
static CUresult f_stream_new(CUstream *s, unsigned fl) {
  (void)fl;
  if (nfake_streams >= 8) return 1;
  *s = (CUstream)(void *)&fake_streams_obj[nfake_streams++];
  return 0;
}

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
/* A VM on the CPU device with a fresh GRACE_CACHE_DIR made from template dir (so no launch decision of an earlier
 * run is read). NULL after printing the TAP lines when the VM cannot be made (a failure) or NVRTC is missing (a
 * skip: the fake driver needs real kernels); *rc is then what main returns. */
static inline grace_vm *fake_vm_new(char *dir, int *rc) {
  if (mkdtemp(dir)) setenv("GRACE_CACHE_DIR", dir, 1);
  char err[256];
  grace_vm *vm = grace_vm_new(&(grace_config){.device = "cpu"}, err, sizeof err);
  if (!vm) { printf("not ok 1 - grace_vm_new: %s\n1..1\n", err); *rc = 1; return NULL; }
  const char *why = cuda_nvrtc_why(vm);
  if (why) {
    printf("1..0 # SKIP no NVRTC to compile the kernels: %s\n", why);
    grace_vm_free(vm);
    *rc = 0;
    return NULL;
  }
  return vm;
}

/* Frees vm and removes dir with the kernel and launch caches the run wrote there. */
static inline void fake_vm_free(grace_vm *vm, const char *dir) {
  grace_vm_free(vm);
  DIR *d = opendir(dir);
  for (struct dirent *e; d && (e = readdir(d));) {
    char path[4096];
    snprintf(path, sizeof path, "%s/%s", dir, e->d_name);
    if (e->d_name[0] != '.') unlink(path);
  }
  if (d) closedir(d);
  rmdir(dir);
}

static inline cuda_ctx *install_fake_cond(cuda_ctx *c) {
  c->fn.cuStreamGetCaptureInfo_v3 = f_capture_info;
  c->fn.cuStreamUpdateCaptureDependencies_v2 = f_update_deps;
  c->fn.cuGraphAddNode_v2 = f_add_node;
  c->fn.cuGraphConditionalHandleCreate = f_handle;
  c->fn.cuStreamBeginCaptureToGraph = f_begin_to;
  c->fn.cuStreamCreate = f_stream_new;
  return c;
}
/* The launch measurement reads the fake clock, advanced per synchronize by work(kernels, exec) (see above). */
static inline void install_fake_clock(cuda_ctx *c, double (*work)(long kernels, CUgraphExec exec)) {
  c->clock = fake_clock;
  fake_work_us = work;
  fake_kernels_synced = kernel_launches;
  fake_exec_since = NULL;
}
static inline void install_fake_ex(cuda_ctx *c) {
  c->fn.cuLaunchKernelEx = f_launch_ex;
  c->fn.cuOccupancyMaxActiveBlocksPerMultiprocessor = f_occupancy;
}

#endif
