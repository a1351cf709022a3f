/* cuda_graph.c: stream capture into CUDA graphs with an arena and a record of the words the captured work was
 * given (see cuda_graph.h). The arena is why a graph can be replayed at all: the addresses baked into its nodes
 * must stay graph memory, so blocks allocated during a capture never return to the cache while graphs live. It
 * is one arena for all the VM's graphs: every replay runs on the one stream after the previous, and no arena
 * block carries a value from one replay to the next (an index flag is cleared inside its graph; a graph's
 * argument table, whose fixed words do persist, is allocated before its capture opens), so a free arena block
 * may serve any capture. Graph memory is then the largest set one capture needs at once, not the
 * sum over graphs. */
#include <stdio.h>
#include <string.h>
#include "cuda/cuda_graph.h"
#include "cuda/cuda_internal.h"

enum { CUDA_ERROR_STREAM_CAPTURE_INVALIDATED = 901 };

struct cuda_capture {
  int indirect, begun, failed;
  unsigned epoch;
  cuda_block **blocks;              /* the arena blocks this capture took */
  int nblocks, capblocks;
  size_t bytes;
  CUdeviceptr table;
  int nslots, maxslots;
  uint64_t *slots;
  uint64_t *raw;
  size_t nraw, capraw;
  uint64_t *lib;                    /* words vendor libraries were given (cuda_capture_library) */
  size_t nlib, caplib;
  /* grace's kernels launched in the capture, with their struct size and whether they are predicated (two more
   * parameters after the struct: cuda_pred_set) */
  struct { CUfunction f; size_t bytes; int pred; } *fns;
  size_t nfns, capfns;
};

static int grow(grace_vm *vm, void **p, size_t elsize, size_t have, size_t *cap) {
  if (have < *cap) return 1;
  size_t n = *cap ? *cap * 2 : 64;
  void *q = grace_realloc(vm, *p, elsize * *cap, elsize * n);
  if (!q) return 0;
  *p = q;
  *cap = n;
  return 1;
}

grace_status cuda_capture_open(cuda_ctx *c, int indirect, cuda_capture **out) {
  *out = NULL;
  if (c->cap) return vm_err(c->vm, GRACE_EINTERNAL, "graph capture: one is already open");
  cuda_capture *cap = vm_calloc(c->vm, sizeof *cap);
  if (!cap) return vm_err(c->vm, GRACE_ENOMEM, "graph capture: out of host memory");
  cap->indirect = indirect;
  cap->epoch = ++c->epoch;
  c->ncaptures++;
  c->cap = cap;
  *out = cap;
  return GRACE_OK;
}

/* Records that the open capture took b (once per capture). */
static int take(cuda_ctx *c, cuda_block *b) {
  cuda_capture *cap = c->cap;
  b->held = 1;
  if (b->taken == cap->epoch) return 1;
  size_t n = (size_t)cap->capblocks;
  if (!grow(c->vm, (void **)&cap->blocks, sizeof *cap->blocks, (size_t)cap->nblocks, &n)) { cap->failed = 1; return 0; }
  cap->capblocks = (int)n;
  cap->blocks[cap->nblocks++] = b;
  cap->bytes += b->size;
  b->taken = cap->epoch;
  return 1;
}

cuda_block *cuda_capture_reuse(cuda_ctx *c, size_t size) {
  for (cuda_block *b = c->arena; b; b = b->arena_next)
    if (!b->held && b->size == size) return take(c, b) ? b : NULL;
  return NULL;
}

int cuda_capture_adopt(cuda_ctx *c, cuda_block *b) {
  b->arena = 1;
  b->arena_next = c->arena;
  c->arena = b;
  c->arena_bytes += b->size;
  return take(c, b);
}

void cuda_capture_drop(cuda_ctx *c, cuda_capture *cap, CUdeviceptr ptr) {
  (void)c;   /* the block stays in the arena, free for any capture once its tensor lets it go */
  for (int i = 0; i < cap->nblocks; i++)
    if (cap->blocks[i]->ptr == ptr) {
      cap->bytes -= cap->blocks[i]->size;
      cap->blocks[i] = cap->blocks[--cap->nblocks];
      return;
    }
}

/* No graph is left: the arena's free blocks go back to the cache (those still held, when their tensors go). */
static void arena_empty(cuda_ctx *c) {
  cuda_block *b = c->arena;
  c->arena = NULL;
  c->arena_bytes = 0;
  while (b) {
    cuda_block *next = b->arena_next;
    cuda_alloc_unpool(c, b);
    b = next;
  }
}

size_t cuda_graph_arena_bytes(const cuda_ctx *c) { return c->arena_bytes; }

grace_status cuda_capture_set_table(cuda_ctx *c, cuda_capture *cap, CUdeviceptr dev, int nslots) {
  cap->slots = grace_realloc(c->vm, NULL, 0, sizeof *cap->slots * (size_t)nslots);
  if (!cap->slots) return vm_err(c->vm, GRACE_ENOMEM, "graph capture: out of host memory");
  cap->table = dev;
  cap->maxslots = nslots;
  return GRACE_OK;
}

grace_status cuda_capture_begin(cuda_ctx *c) {
  if (!c->cap) return vm_err(c->vm, GRACE_EINTERNAL, "graph capture: not open");
  if (!c->fn.cuStreamBeginCapture_v2) return vm_err(c->vm, GRACE_EUNSUPPORTED, "graph capture: the driver lacks it");
  grace_status st = cuda_check(c->vm, c->fn.cuStreamBeginCapture_v2(c->stream, CU_STREAM_CAPTURE_MODE_RELAXED),
                               "cuStreamBeginCapture");
  if (st == GRACE_OK) c->cap->begun = 1;
  return st;
}

grace_status cuda_capture_close(cuda_ctx *c, grace_status st, CUgraph *g) {
  *g = NULL;
  cuda_capture *cap = c->cap;
  c->cap = NULL;
  if (!cap) return st ? st : vm_err(c->vm, GRACE_EINTERNAL, "graph capture: not open");
  if (cap->begun) {
    CUgraph graph = NULL;
    CUresult r = c->fn.cuStreamEndCapture(c->stream, &graph);
    cap->begun = 0;
    if (st == GRACE_OK && r) st = r == CUDA_ERROR_STREAM_CAPTURE_INVALIDATED
                                   ? vm_err(c->vm, GRACE_EUNSUPPORTED, "graph capture: the work synchronized with the host")
                                   : cuda_check(c->vm, r, "cuStreamEndCapture");
    if (st == GRACE_OK && cap->failed)
      st = vm_err(c->vm, GRACE_EUNSUPPORTED, "graph capture: more than %d indirect arguments, or out of host memory",
                  cap->maxslots);
    if (st == GRACE_OK) *g = graph;
    else if (graph) c->fn.cuGraphDestroy(graph);
  } else if (st == GRACE_OK)
    st = vm_err(c->vm, GRACE_EINTERNAL, "graph capture: never begun");
  return st;
}

void cuda_capture_free(cuda_ctx *c, cuda_capture *cap) {
  if (!cap) return;
  if (c->cap == cap) c->cap = NULL;
  if (--c->ncaptures == 0) arena_empty(c);
  grace_realloc(c->vm, cap->blocks, sizeof *cap->blocks * (size_t)cap->capblocks, 0);
  grace_realloc(c->vm, cap->slots, sizeof *cap->slots * (size_t)cap->maxslots, 0);
  grace_realloc(c->vm, cap->raw, sizeof *cap->raw * cap->capraw, 0);
  grace_realloc(c->vm, cap->lib, sizeof *cap->lib * cap->caplib, 0);
  grace_realloc(c->vm, cap->fns, sizeof *cap->fns * cap->capfns, 0);
  vm_free(c->vm, cap, sizeof *cap);
}

cuda_capture *cuda_capture_indirect(cuda_ctx *c) {
  return c && c->cap && c->cap->indirect && c->cap->begun ? c->cap : NULL;
}

CUdeviceptr cuda_capture_slot(cuda_capture *cap, uint64_t word) {
  for (int i = 0; i < cap->nslots; i++)
    if (cap->slots[i] == word) return cap->table + 8u * (unsigned)i;
  if (cap->nslots >= cap->maxslots) { cap->failed = 1; return 0; }
  cap->slots[cap->nslots] = word;
  return cap->table + 8u * (unsigned)cap->nslots++;
}

CUdeviceptr cuda_capture_slot_own(cuda_capture *cap, uint64_t word) {
  if (cap->nslots >= cap->maxslots) { cap->failed = 1; return 0; }
  cap->slots[cap->nslots] = word;
  return cap->table + 8u * (unsigned)cap->nslots++;
}

void cuda_capture_kernel(cuda_ctx *c, CUfunction f, const void *params, size_t bytes) {
  cuda_capture *cap = c->cap;
  if (!cap || !cap->begun) return;
  cuda_capture_note(c, params, bytes / 8);   /* the struct's words: pointers among them */
  for (size_t i = 0; i < cap->nfns; i++) if (cap->fns[i].f == f) return;
  if (!grow(c->vm, (void **)&cap->fns, sizeof *cap->fns, cap->nfns, &cap->capfns)) { cap->failed = 1; return; }
  cap->fns[cap->nfns].f = f;
  cap->fns[cap->nfns].pred = c->pred != 0;
  cap->fns[cap->nfns++].bytes = bytes;
}

void cuda_capture_note(cuda_ctx *c, const uint64_t *words, size_t n) {
  cuda_capture *cap = c->cap;
  if (!cap || !cap->begun) return;
  for (size_t i = 0; i < n; i++) {
    if (!grow(c->vm, (void **)&cap->raw, sizeof *cap->raw, cap->nraw, &cap->capraw)) { cap->failed = 1; return; }
    cap->raw[cap->nraw++] = words[i];
  }
}

void cuda_capture_library(cuda_ctx *c, const uint64_t *words, size_t n) {
  c->nlibrary++;
  cuda_capture *cap = c->cap;
  if (!cap || !cap->begun) return;
  for (size_t i = 0; i < n; i++) {
    if (!grow(c->vm, (void **)&cap->lib, sizeof *cap->lib, cap->nlib, &cap->caplib)) { cap->failed = 1; return; }
    cap->lib[cap->nlib++] = words[i];
  }
}

uint64_t cuda_library_calls(const cuda_ctx *c) { return c ? c->nlibrary : 0; }
const uint64_t *cuda_capture_lib(const cuda_capture *cap, size_t *n) { *n = cap->nlib; return cap->lib; }

int cuda_capture_is_own(const cuda_capture *cap, CUfunction f) {
  for (size_t i = 0; i < cap->nfns && f; i++) if (cap->fns[i].f == f) return 1;
  return 0;
}

const uint64_t *cuda_capture_slots(const cuda_capture *cap, int *nslots) { *nslots = cap->nslots; return cap->slots; }
const uint64_t *cuda_capture_raw(const cuda_capture *cap, size_t *n) { *n = cap->nraw; return cap->raw; }
size_t cuda_capture_bytes(const cuda_capture *cap) { return cap->bytes; }

int cuda_capture_owns(const cuda_capture *cap, CUdeviceptr ptr, CUdeviceptr *base, size_t *size) {
  for (int i = 0; i < cap->nblocks; i++) {
    const cuda_block *b = cap->blocks[i];
    if (ptr >= b->ptr && ptr < b->ptr + b->size) {
      if (base) *base = b->ptr;
      if (size) *size = b->size;
      return 1;
    }
  }
  return 0;
}

int cuda_graph_supported(cuda_ctx *c) {
  return c->fn.cuStreamBeginCapture_v2 && c->fn.cuStreamEndCapture && c->fn.cuGraphInstantiateWithFlags &&
         c->fn.cuGraphLaunch && c->fn.cuGraphExecDestroy && c->fn.cuGraphDestroy;
}

/* The kernel nodes of g into *out (vm_alloc'ed for *all nodes, the first *n of them kernels; NULL when g has no
 * node). 0 when the driver cannot list them or host memory ran out. */
static int kernel_nodes(cuda_ctx *c, CUgraph g, CUgraphNode **out, size_t *n, size_t *all) {
  *out = NULL;
  *n = *all = 0;
  if (!c->fn.cuGraphGetNodes || !c->fn.cuGraphNodeGetType || c->fn.cuGraphGetNodes(g, NULL, all)) return 0;
  if (!*all) return 1;
  CUgraphNode *nodes = vm_alloc(c->vm, sizeof *nodes * *all);
  if (!nodes || c->fn.cuGraphGetNodes(g, nodes, all)) { vm_free(c->vm, nodes, sizeof *nodes * *all); *all = 0; return 0; }
  size_t k = 0;
  for (size_t i = 0; i < *all; i++) {
    int type = -1;
    if (!c->fn.cuGraphNodeGetType(nodes[i], &type) && type == CU_GRAPH_NODE_TYPE_KERNEL) nodes[k++] = nodes[i];
  }
  *out = nodes;
  *n = k;
  return 1;
}

grace_status cuda_graph_remap_slots(cuda_ctx *c, const cuda_capture *cap, CUgraph g, const int *map) {
  CUdeviceptr table = cap->table;
  int nslots = cap->nslots;
  if (!c->fn.cuGraphGetNodes || !c->fn.cuGraphNodeGetType || !c->fn.cuGraphKernelNodeGetParams_v2 ||
      !c->fn.cuGraphKernelNodeSetParams_v2)
    return vm_err(c->vm, GRACE_EUNSUPPORTED, "graph: the driver cannot rewrite kernel parameters");
  size_t all = 0, n = 0;
  CUgraphNode *nodes = NULL;
  if (!kernel_nodes(c, g, &nodes, &n, &all))
    return vm_err(c->vm, GRACE_EUNSUPPORTED, "graph: its nodes cannot be listed");
  if (!nodes) return GRACE_OK;
  grace_status st = GRACE_OK;
  /* two passes: check every node can be read (nothing changed on failure), then rewrite */
  for (int pass = 0; pass < 2 && st == GRACE_OK; pass++)
    for (size_t i = 0; i < n && st == GRACE_OK; i++) {
      CUDA_KERNEL_NODE_PARAMS kp;
      memset(&kp, 0, sizeof kp);
      if (c->fn.cuGraphKernelNodeGetParams_v2(nodes[i], &kp)) {
        if (pass == 0) st = vm_err(c->vm, GRACE_EUNSUPPORTED, "graph: a kernel node's parameters cannot be read");
        continue;
      }
      size_t size = 0;   /* grace's own kernels (one struct, launched in the capture) are the ones with slots */
      int pred = 0;
      for (size_t k = 0; k < cap->nfns && kp.func; k++)
        if (cap->fns[k].f == kp.func) size = cap->fns[k].bytes, pred = cap->fns[k].pred;
      if (!size || !kp.kernelParams || size % 8 || size > 4096 || pass == 0) continue;
      uint64_t words[512];
      memcpy(words, kp.kernelParams[0], size);
      int changed = 0;
      for (size_t w = 0; w < size / 8; w++)
        if (words[w] >= table && words[w] < table + 8u * (unsigned)nslots && (words[w] - table) % 8 == 0) {
          words[w] = table + 8u * (unsigned)map[(words[w] - table) / 8];
          changed = 1;
        }
      if (!changed) continue;
      void *args[3] = {words, pred ? kp.kernelParams[1] : NULL, pred ? kp.kernelParams[2] : NULL};   /* the predicate's */
      kp.kernelParams = args;
      st = cuda_check(c->vm, c->fn.cuGraphKernelNodeSetParams_v2(nodes[i], &kp), "cuGraphKernelNodeSetParams");
    }
  vm_free(c->vm, nodes, sizeof *nodes * all);
  return st;
}

grace_status cuda_graph_instantiate(cuda_ctx *c, CUgraph g, CUgraphExec *x, int *nkernels) {
  *x = NULL;
  *nkernels = 0;
  grace_status st = cuda_check(c->vm, c->fn.cuGraphInstantiateWithFlags(x, g, 0), "cuGraphInstantiateWithFlags");
  if (st != GRACE_OK) { *x = NULL; return st; }
  size_t n = 0, all = 0;
  CUgraphNode *nodes = NULL;
  kernel_nodes(c, g, &nodes, &n, &all);   /* a count for the report: 0 when the driver cannot say */
  vm_free(c->vm, nodes, sizeof *nodes * all);
  *nkernels = (int)n;
  return GRACE_OK;
}

grace_status cuda_graph_launch(cuda_ctx *c, CUgraphExec x) {
  return cuda_check(c->vm, c->fn.cuGraphLaunch(x, c->stream), "cuGraphLaunch");
}

void cuda_graph_destroy(cuda_ctx *c, CUgraph g, CUgraphExec x) {
  if (x) c->fn.cuGraphExecDestroy(x);
  if (g) c->fn.cuGraphDestroy(g);
}

static cuda_key decision_key(cuda_ctx *c, const char *text) {
  char opts[256];
  snprintf(opts, sizeof opts, "launch decision v1; %s; driver %d", c->props.name, c->props.driver_version);
  return cuda_cache_key(text, opts, c->props.major * 10 + c->props.minor, c->nvrtc_version);
}

int cuda_graph_decision_load(cuda_ctx *c, const char *text, void *buf, size_t n) {
  char *bytes = NULL;
  size_t len = 0;
  if (!text || cuda_cache_load(c, decision_key(c, text), &bytes, &len) != CUDA_CACHE_HIT) return 0;
  int ok = len == n;
  if (ok) memcpy(buf, bytes, n);
  grace_realloc(c->vm, bytes, len, 0);
  return ok;
}

void cuda_graph_decision_store(cuda_ctx *c, const char *text, const void *buf, size_t n) {
  if (text) cuda_cache_store(c, decision_key(c, text), buf, n);
}

grace_status cuda_host_alloc(cuda_ctx *c, size_t n, void **p) {
  *p = NULL;
  grace_status st = cuda_check(c->vm, c->fn.cuMemAllocHost_v2(p, n ? n : 1), "cuMemAllocHost");
  if (st != GRACE_OK) *p = NULL;
  return st;
}

void cuda_host_free(cuda_ctx *c, void *p) {
  if (p) c->fn.cuMemFreeHost(p);
}

grace_status cuda_copy_to_device_async(cuda_ctx *c, CUdeviceptr dst, const void *src, size_t n) {
  if (n == 0) return GRACE_OK;
  return cuda_check(c->vm, c->fn.cuMemcpyHtoDAsync_v2(dst, src, n, c->stream), "cuMemcpyHtoDAsync_v2");
}

grace_status cuda_event_sync(cuda_ctx *c, CUevent e) {
  return cuda_check(c->vm, c->fn.cuEventSynchronize(e), "cuEventSynchronize");
}

grace_status cuda_copy_to_host_async(cuda_ctx *c, void *dst, CUdeviceptr src, size_t n) {
  if (n == 0) return GRACE_OK;
  return cuda_check(c->vm, c->fn.cuMemcpyDtoHAsync_v2(dst, src, n, c->stream), "cuMemcpyDtoHAsync_v2");
}
