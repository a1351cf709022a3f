/* cuda_graph_update.c: finding the words of a graph's library kernel nodes that point into per-call buffers, and
 * rewriting them in the instantiated graph before a replay (see cuda_graph_update.h for the rules and why). */
#include <stdio.h>
#include <string.h>
#include "cuda/cuda_graph_update.h"
#include "cuda/cuda_internal.h"

enum {
  UPD_MAX_PARAMS = 1024,            /* parameters read per kernel */
  UPD_MAX_BYTES = 32764,            /* a kernel's parameter block is at most 32764 bytes (4 KiB before Volta) */
  UPD_MAX_PATCHES = 64              /* words rewritten per node */
};
#define UPD_LOW ((uint64_t)1 << 32)   /* ranges must lie above: a number below cannot be taken for an address */

/* One library kernel node: its parameters as read after the capture, packed in buf, and the words to rewrite. */
typedef struct upd_node {
  CUgraphNode node;
  CUDA_KERNEL_NODE_PARAMS kp;       /* kernelParams points into args */
  unsigned char *buf;
  size_t nbytes;
  void **args;
  int nargs;
  cuda_patch *p;
  int np;
} upd_node;

struct cuda_node_updates {
  upd_node *n;                      /* room for every node of the graph (nall) */
  size_t nall;
  int nn, nr;
  CUdeviceptr *cur;                 /* the range bases the instantiated graph holds now (0: unknown) */
};

static int in_range(uint64_t w, const cuda_range *r) { return w >= r->base && w - r->base < r->bytes; }

int cuda_param_patches(const unsigned char *bytes, size_t nbytes, const size_t *off, const size_t *size, int nparams,
                       const cuda_range *r, int nr, cuda_patch *out, int max, int *n, char *why, size_t whylen) {
  *n = 0;
  for (int i = 0; i < nr; i++) {
    if (r[i].base < UPD_LOW || r[i].bytes == 0 || r[i].base + r[i].bytes < r[i].base) {
      snprintf(why, whylen, "a buffer's address is too low to tell from a number");
      return -1;
    }
    for (int j = 0; j < i; j++)
      if (r[i].base < r[j].base + r[j].bytes && r[j].base < r[i].base + r[i].bytes) {
        snprintf(why, whylen, "two per-call buffers overlap");
        return -1;
      }
  }
  for (int k = 0; k < nparams; k++) {
    if (off[k] > nbytes || size[k] > nbytes - off[k]) {
      snprintf(why, whylen, "parameter %d lies outside the parameter block", k);
      return -1;
    }
    /* every 4-byte step: an address at an 8-byte offset is a word to rewrite, one straddling two words is not
     * safe to take for either */
    for (size_t b = 0; size[k] >= 8 && b <= size[k] - 8; b += 4) {
      uint64_t w;
      memcpy(&w, bytes + off[k] + b, 8);
      for (int i = 0; i < nr; i++) {
        if (!in_range(w, &r[i])) continue;
        if ((off[k] + b) % 8) {
          snprintf(why, whylen, "parameter %d holds an address at a misaligned offset", k);
          return -1;
        }
        if (*n >= max) {
          snprintf(why, whylen, "more than %d addresses in one kernel's parameters", max);
          return -1;
        }
        out[(*n)++] = (cuda_patch){(uint32_t)(off[k] + b), i, w - r[i].base};
      }
    }
  }
  return 0;
}

/* The parameters' offsets and sizes of node kp's kernel; -1 when the driver cannot say. */
static int param_layout(cuda_ctx *c, const CUDA_KERNEL_NODE_PARAMS *kp, size_t *off, size_t *size) {
  int by_func = kp->func && c->fn.cuFuncGetParamInfo, by_kern = !kp->func && kp->kern && c->fn.cuKernelGetParamInfo;
  if (!by_func && !by_kern) return -1;
  int n = 0;
  for (; n < UPD_MAX_PARAMS; n++) {
    CUresult r = by_func ? c->fn.cuFuncGetParamInfo(kp->func, (size_t)n, &off[n], &size[n])
                         : c->fn.cuKernelGetParamInfo(kp->kern, (size_t)n, &off[n], &size[n]);
    if (r) break;   /* past the last parameter */
  }
  return n < UPD_MAX_PARAMS ? n : -1;
}

static void node_free(grace_vm *vm, upd_node *u) {
  grace_realloc(vm, u->buf, u->nbytes, 0);
  grace_realloc(vm, u->args, sizeof *u->args * (size_t)u->nargs, 0);
  grace_realloc(vm, u->p, sizeof *u->p * (size_t)u->np, 0);
}

/* Reads library kernel node nd; *u filled (np 0 when it holds no address in r). GRACE_EUNSUPPORTED: why. */
static grace_status read_node(cuda_ctx *c, CUgraphNode nd, const cuda_range *r, int nr, upd_node *u) {
  grace_vm *vm = c->vm;
  memset(u, 0, sizeof *u);
  u->node = nd;
  if (c->fn.cuGraphKernelNodeGetParams_v2(nd, &u->kp))
    return vm_err(vm, GRACE_EUNSUPPORTED, "graph: a library kernel node's parameters cannot be read");
  size_t offs[UPD_MAX_PARAMS], sizes[UPD_MAX_PARAMS];
  int n = param_layout(c, &u->kp, offs, sizes);
  if (n < 0) return vm_err(vm, GRACE_EUNSUPPORTED, "graph: the driver cannot describe a library kernel's parameters");
  if (n == 0) return GRACE_OK;
  if (!u->kp.kernelParams)
    return vm_err(vm, GRACE_EUNSUPPORTED, "graph: a library kernel's parameters are packed (not one pointer each)");
  size_t nbytes = 0;
  for (int k = 0; k < n; k++)
    if (offs[k] + sizes[k] > nbytes) nbytes = offs[k] + sizes[k];
  if (nbytes > UPD_MAX_BYTES)
    return vm_err(vm, GRACE_EUNSUPPORTED, "graph: a library kernel has %zu bytes of parameters", nbytes);
  if ((u->buf = grace_realloc(vm, NULL, 0, nbytes))) u->nbytes = nbytes;
  if ((u->args = grace_realloc(vm, NULL, 0, sizeof *u->args * (size_t)n))) u->nargs = n;
  cuda_patch p[UPD_MAX_PATCHES];
  if (!u->buf || !u->args) return vm_err(vm, GRACE_ENOMEM, "graph: out of host memory");
  memset(u->buf, 0, u->nbytes);
  for (int k = 0; k < n; k++) {
    if (!u->kp.kernelParams[k]) return vm_err(vm, GRACE_EUNSUPPORTED, "graph: a library kernel's parameter is unreadable");
    memcpy(u->buf + offs[k], u->kp.kernelParams[k], sizes[k]);
    u->args[k] = u->buf + offs[k];
  }
  char why[160];
  int np = 0;
  if (cuda_param_patches(u->buf, u->nbytes, offs, sizes, n, r, nr, p, UPD_MAX_PATCHES, &np, why, sizeof why))
    return vm_err(vm, GRACE_EUNSUPPORTED, "graph: a library kernel cannot be re-pointed: %s", why);
  if (np && !(u->p = grace_realloc(vm, NULL, 0, sizeof *u->p * (size_t)np))) return vm_err(vm, GRACE_ENOMEM, "graph: out of host memory");
  if (np) memcpy(u->p, p, sizeof *p * (size_t)np);
  u->np = np;
  u->kp.kernelParams = u->args;
  u->kp.extra = NULL;
  return GRACE_OK;
}

/* Whether [a, a + n) meets a range. */
static int touches(CUdeviceptr a, size_t n, const cuda_range *r, int nr) {
  for (int i = 0; i < nr; i++) if (a < r[i].base + r[i].bytes && r[i].base < a + (n ? n : 1)) return 1;
  return 0;
}

/* A node other than a kernel: copies and memsets must keep off the ranges; other kinds are refused. */
static grace_status check_other(cuda_ctx *c, CUgraphNode nd, int type, const cuda_range *r, int nr) {
  grace_vm *vm = c->vm;
  if (type == CU_GRAPH_NODE_TYPE_EMPTY || type == CU_GRAPH_NODE_TYPE_WAIT_EVENT || type == CU_GRAPH_NODE_TYPE_EVENT_RECORD)
    return GRACE_OK;
  if (type == CU_GRAPH_NODE_TYPE_MEMSET) {
    CUDA_MEMSET_NODE_PARAMS m;
    memset(&m, 0, sizeof m);
    if (!c->fn.cuGraphMemsetNodeGetParams || c->fn.cuGraphMemsetNodeGetParams(nd, &m))
      return vm_err(vm, GRACE_EUNSUPPORTED, "graph: a memset node cannot be read");
    size_t ext = (m.height > 1 ? m.pitch * (m.height - 1) : 0) + m.width * m.elementSize;
    return touches(m.dst, ext, r, nr) ? vm_err(vm, GRACE_EUNSUPPORTED, "graph: a library memset writes a per-call buffer")
                                      : GRACE_OK;
  }
  if (type == CU_GRAPH_NODE_TYPE_MEMCPY) {
    CUDA_MEMCPY3D m;
    memset(&m, 0, sizeof m);
    if (!c->fn.cuGraphMemcpyNodeGetParams || c->fn.cuGraphMemcpyNodeGetParams(nd, &m))
      return vm_err(vm, GRACE_EUNSUPPORTED, "graph: a copy node cannot be read");
    size_t rows = (m.Height ? m.Height : 1) * (m.Depth ? m.Depth : 1);
    size_t se = m.srcPitch ? m.srcPitch * rows : m.WidthInBytes * rows, de = m.dstPitch ? m.dstPitch * rows : m.WidthInBytes * rows;
    /* memory types 2 (device) and 4 (unified) address device memory */
    if (((m.srcMemoryType == 2 || m.srcMemoryType == 4) && touches(m.srcDevice + m.srcXInBytes, se, r, nr)) ||
        ((m.dstMemoryType == 2 || m.dstMemoryType == 4) && touches(m.dstDevice + m.dstXInBytes, de, r, nr)))
      return vm_err(vm, GRACE_EUNSUPPORTED, "graph: a copy node reads or writes a per-call buffer");
    return GRACE_OK;
  }
  return vm_err(vm, GRACE_EUNSUPPORTED, "graph: a node of kind %d cannot be checked", type);
}

/* Every library word into a range is a word some node rewrites. */
static grace_status check_covered(cuda_ctx *c, const cuda_capture *cap, const cuda_node_updates *u, const cuda_range *r, int nr) {
  size_t nlib;
  const uint64_t *lib = cuda_capture_lib(cap, &nlib);
  for (size_t w = 0; w < nlib; w++)
    for (int i = 0; i < nr; i++) {
      if (!in_range(lib[w], &r[i])) continue;
      int found = 0;
      for (int k = 0; k < u->nn && !found; k++)
        for (int j = 0; j < u->n[k].np && !found; j++)
          found = u->n[k].p[j].range == i && r[i].base + u->n[k].p[j].delta == lib[w];
      if (!found)
        return vm_err(c->vm, GRACE_EUNSUPPORTED, "graph: an address a library call was given is in none of its kernels' "
                      "parameters (it reaches them another way)");
    }
  return GRACE_OK;
}

/* On a device with tensor maps (TMA), a library kernel may hold a buffer's address inside a tensor map, whose
 * encoding is the driver's business. Encoding one for a known address shows whether the address sits in it as a
 * plain 8-byte word: then the scan finds it like any other word and rewriting it re-points the map (as
 * cuTensorMapReplaceAddress would); if not, a map could hold an address no rewrite reaches: refused. */
static grace_status tensor_maps_plain(cuda_ctx *c, CUdeviceptr base) {
  if (!cuda_has_tensor_maps(c)) return GRACE_OK;
  _Alignas(64) unsigned char map[128];
  CUdeviceptr a = base & ~(CUdeviceptr)255;
  if (cuda_tensor_map(c, map, GRACE_FLOAT16, a, 64, 64, 128, 64, 64) != GRACE_OK) {
    char why[VM_ERRLEN];
    snprintf(why, sizeof why, "%s", c->vm->err);
    return vm_err(c->vm, GRACE_EUNSUPPORTED, "graph: how tensor maps hold addresses cannot be checked (%.120s)", why);
  }
  for (int w = 0; w < 16; w++) {
    uint64_t v;
    memcpy(&v, map + 8 * w, 8);
    if (v == a) return GRACE_OK;
  }
  return vm_err(c->vm, GRACE_EUNSUPPORTED, "graph: this driver encodes addresses in tensor maps, so a library kernel "
                "could hold one that no rewrite reaches");
}

grace_status cuda_graph_updates_find(cuda_ctx *c, const cuda_capture *cap, CUgraph g, const cuda_range *r, int nr,
                                     cuda_node_updates **out) {
  grace_vm *vm = c->vm;
  *out = NULL;
  if (!c->fn.cuGraphGetNodes || !c->fn.cuGraphNodeGetType || !c->fn.cuGraphKernelNodeGetParams_v2 ||
      !c->fn.cuGraphExecKernelNodeSetParams_v2 || (!c->fn.cuFuncGetParamInfo && !c->fn.cuKernelGetParamInfo))
    return vm_err(vm, GRACE_EUNSUPPORTED, "graph: the driver cannot rewrite kernel parameters (CUDA 12.4 needed)");
  grace_status ts = nr ? tensor_maps_plain(c, r[0].base) : GRACE_OK;
  if (ts != GRACE_OK) return ts;
  size_t all = 0;
  if (c->fn.cuGraphGetNodes(g, NULL, &all)) return vm_err(vm, GRACE_EUNSUPPORTED, "graph: its nodes cannot be listed");
  cuda_node_updates *u = vm_calloc(vm, sizeof *u);
  CUgraphNode *nodes = all ? vm_alloc(vm, sizeof *nodes * all) : NULL;
  grace_status st = u && (nodes || !all) ? GRACE_OK : vm_err(vm, GRACE_ENOMEM, "graph: out of host memory");
  if (st == GRACE_OK && all && c->fn.cuGraphGetNodes(g, nodes, &all))
    st = vm_err(vm, GRACE_EUNSUPPORTED, "graph: its nodes cannot be listed");
  if (st == GRACE_OK && !(u->n = vm_calloc(vm, sizeof *u->n * (all ? all : 1))))
    st = vm_err(vm, GRACE_ENOMEM, "graph: out of host memory");
  if (st == GRACE_OK) u->nall = all ? all : 1, u->nr = nr;
  for (size_t i = 0; i < all && st == GRACE_OK; i++) {
    int type = -1;
    if (c->fn.cuGraphNodeGetType(nodes[i], &type)) { st = vm_err(vm, GRACE_EUNSUPPORTED, "graph: a node's kind cannot be read"); break; }
    if (type != CU_GRAPH_NODE_TYPE_KERNEL) { st = check_other(c, nodes[i], type, r, nr); continue; }
    upd_node nd;
    CUDA_KERNEL_NODE_PARAMS kp;
    memset(&kp, 0, sizeof kp);
    if (c->fn.cuGraphKernelNodeGetParams_v2(nodes[i], &kp)) { st = vm_err(vm, GRACE_EUNSUPPORTED, "graph: a kernel node cannot be read"); break; }
    if (cuda_capture_is_own(cap, kp.func)) continue;   /* grace's: its words were noted when launched */
    st = read_node(c, nodes[i], r, nr, &nd);
    if (st == GRACE_OK && nd.np) u->n[u->nn++] = nd;
    else node_free(vm, &nd);
  }
  if (st == GRACE_OK && !(u->cur = vm_calloc(vm, sizeof *u->cur * (size_t)(nr ? nr : 1))))
    st = vm_err(vm, GRACE_ENOMEM, "graph: out of host memory");
  for (int i = 0; i < nr && st == GRACE_OK; i++) u->cur[i] = r[i].base;
  if (st == GRACE_OK) st = check_covered(c, cap, u, r, nr);
  vm_free(vm, nodes, sizeof *nodes * (all ? all : 1));
  if (st != GRACE_OK || !u->nn) { cuda_graph_updates_free(c, u); return st; }
  *out = u;
  return GRACE_OK;
}

grace_status cuda_graph_updates_apply(cuda_ctx *c, cuda_node_updates *u, CUgraphExec x, const CUdeviceptr *base,
                                      int *nset) {
  int set = 0;
  grace_status st = GRACE_OK;
  for (int k = 0; u && k < u->nn && st == GRACE_OK; k++) {
    upd_node *nd = &u->n[k];
    int changed = 0;
    for (int j = 0; j < nd->np; j++) changed |= base[nd->p[j].range] != u->cur[nd->p[j].range];
    if (!changed) continue;
    for (int j = 0; j < nd->np; j++) {
      uint64_t w = base[nd->p[j].range] + nd->p[j].delta;
      memcpy(nd->buf + nd->p[j].off, &w, 8);
    }
    st = cuda_check(c->vm, c->fn.cuGraphExecKernelNodeSetParams_v2(x, nd->node, &nd->kp), "cuGraphExecKernelNodeSetParams");
    set++;
  }
  /* on failure some nodes may hold the new words and some the old: all are rewritten next time */
  for (int i = 0; u && i < u->nr; i++) u->cur[i] = st == GRACE_OK ? base[i] : 0;
  if (nset) *nset = set;
  return st;
}

int cuda_graph_updates_nodes(const cuda_node_updates *u) { return u ? u->nn : 0; }

void cuda_graph_updates_free(cuda_ctx *c, cuda_node_updates *u) {
  if (!u) return;
  for (int k = 0; k < u->nn; k++) node_free(c->vm, &u->n[k]);
  vm_free(c->vm, u->n, sizeof *u->n * u->nall);
  vm_free(c->vm, u->cur, sizeof *u->cur * (size_t)(u->nr ? u->nr : 1));
  vm_free(c->vm, u, sizeof *u);
}
