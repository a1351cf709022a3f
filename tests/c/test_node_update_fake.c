/* test_node_update_fake.c: the "graph+node updates" launch strategy (gpu/gpu_graph.c, cuda/cuda_graph_update.c)
 * without a GPU.
 *
 * First the pure rule that finds the words to rewrite in a kernel's parameters (cuda_param_patches) on
 * synthetic parameter blocks: plain and interior addresses, the same address twice, a number equal to an
 * address by chance (taken for one: the documented rule), an address straddling two words, overlapping or
 * low ranges, a parameter outside the block.
 *
 * Then the whole strategy on a fake driver whose graphs hold nodes, with a fake cuBLASLt
 * (tests/fake/fake_cublaslt.c, loaded through GRACE_CUBLASLT) whose matmul launches one "library kernel" holding
 * its operands' addresses in its parameters. The fake driver runs that kernel on host memory (fake device memory
 * is host memory) when it is launched or when a graph holding it is replayed, with the node's parameters as the
 * graph holds them then; so a replay that forgot to re-point the node reads the old buffers and the product
 * comes out wrong. A compiled y = x @ w called with new x, w each call: under graph+node updates every call is
 * right, the node's parameters are rewritten per call, no input or output is copied; under graph+copies and
 * graph+indirection the same program copies its inputs and output (the library pins them). Refusals: a driver
 * without cuFuncGetParamInfo, a library that passes an address in a form the graph cannot recognise, a memset
 * node over a per-call buffer, a node of a kind that cannot be checked, a driver whose tensor maps encode their
 * address; an input less aligned than at capture goes through its placeholder for
 * that call; measured, the strategy is timed with the others, and skipped for a program with no library call. */
#include <dirent.h>
#include <dlfcn.h>
#include <limits.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>
#include "grace.h"
#include "cuda/cuda_graph.h"
#include "cuda/cuda_graph_update.h"
#include "cuda/cuda_internal.h"
#include "tap.h"

#include "c/fake_cuda.h"

/* ---- the pure rule ---- */
static void put64(unsigned char *b, size_t off, uint64_t v) { memcpy(b + off, &v, 8); }

static void test_rule(void) {
  const uint64_t A = 0x7f0000100000ull, B = 0x7f0000200000ull, D = 0x7f0000300000ull;
  cuda_range r[3] = {{A, 4096}, {B, 4096}, {D, 1024}};
  /* A (8), B + 64 (8), four ints, a 32-byte struct {D, D, 1024, A + 4096} */
  size_t off[7] = {0, 8, 16, 20, 24, 28, 32}, size[7] = {8, 8, 4, 4, 4, 4, 32};
  unsigned char b[64] = {0};
  put64(b, 0, A);
  put64(b, 8, B + 64);
  put64(b, 16, 0x0000004000000040ull);   /* two ints: 64, 64 */
  put64(b, 24, 0x0000000100000000ull);
  put64(b, 32, D);
  put64(b, 40, D);
  put64(b, 48, 1024);
  put64(b, 56, A + 4096);                /* one past A's end: not A's */
  cuda_patch p[16];
  int n = -1;
  char why[160] = "";
  int rc = cuda_param_patches(b, sizeof b, off, size, 7, r, 3, p, 16, &n, why, sizeof why);
  ok(rc == 0 && n == 4, "four words found: A, B + 64 and D twice (%d, %s)", n, why);
  ok(n == 4 && p[0].off == 0 && p[0].range == 0 && p[0].delta == 0 && p[1].off == 8 && p[1].range == 1 &&
     p[1].delta == 64 && p[2].off == 32 && p[2].range == 2 && p[3].off == 48 - 8 && p[3].range == 2,
     "each at its byte offset, with its range and the offset into it (interior addresses keep theirs)");

  /* a 64-bit number that happens to equal an address is taken for one: device addresses lie far above any size */
  put64(b, 48, D + 8);
  rc = cuda_param_patches(b, sizeof b, off, size, 7, r, 3, p, 16, &n, why, sizeof why);
  ok(rc == 0 && n == 5 && p[4].off == 48 && p[4].delta == 8, "a word equal to an address by chance is rewritten too");
  put64(b, 48, 1024);

  /* an address straddling two words (4 bytes off) cannot be rewritten safely */
  unsigned char m[24] = {0};
  put64(m, 4, B);
  size_t moff[1] = {0}, msize[1] = {24};
  rc = cuda_param_patches(m, sizeof m, moff, msize, 1, r, 3, p, 16, &n, why, sizeof why);
  ok(rc == -1 && strstr(why, "misaligned"), "an address at a misaligned offset refuses (%s)", why);

  cuda_range ov[2] = {{A, 4096}, {A + 2048, 4096}};
  rc = cuda_param_patches(b, sizeof b, off, size, 7, ov, 2, p, 16, &n, why, sizeof why);
  ok(rc == -1 && strstr(why, "overlap"), "overlapping ranges refuse (%s)", why);
  cuda_range low[1] = {{0x10000, 4096}};
  rc = cuda_param_patches(b, sizeof b, off, size, 7, low, 1, p, 16, &n, why, sizeof why);
  ok(rc == -1 && strstr(why, "too low"), "a range below 4 GiB refuses: its addresses look like numbers (%s)", why);
  size_t boff[1] = {60}, bsize[1] = {8};
  rc = cuda_param_patches(b, sizeof b, boff, bsize, 1, r, 3, p, 16, &n, why, sizeof why);
  ok(rc == -1 && strstr(why, "outside"), "a parameter past the block refuses (%s)", why);
  rc = cuda_param_patches(b, sizeof b, off, size, 7, r, 3, p, 2, &n, why, sizeof why);
  ok(rc == -1 && strstr(why, "more than 2"), "more addresses than room refuses (%s)", why);
  rc = cuda_param_patches(b, sizeof b, off, size, 7, r, 0, p, 16, &n, why, sizeof why);
  ok(rc == 0 && n == 0, "no ranges: nothing to rewrite");
}

/* ---- a fake driver whose graphs hold the library's kernel nodes ---- */
enum { LIB_PARAMS = 11, LIB_BYTES = 80, MAX_NODES = 16, MAX_GRAPHS = 64 };
static const size_t lib_off[LIB_PARAMS] = {0, 8, 16, 20, 24, 28, 32, 36, 40, 44, 48};
static const size_t lib_size[LIB_PARAMS] = {8, 8, 4, 4, 4, 4, 4, 4, 4, 4, 32};
static int lib_fn_obj;
#define LIB_FN ((CUfunction)&lib_fn_obj)
typedef struct fnode { unsigned char buf[LIB_BYTES]; void *args[LIB_PARAMS]; } fnode;
typedef struct ngraph { int used, n; struct ngraph *src; fnode node[MAX_NODES]; } ngraph;
static ngraph graphs[MAX_GRAPHS], open_graph;
static long lib_runs, node_sets, dtod_copies, param_info_calls;

/* The library kernel: column-major D = op(A) op(B) in float32, from its parameter block. */
static void lib_run(const unsigned char *b) {
  uint64_t pa, pb, c, d, flags;
  int32_t m, n, k, lda, ldb, ldd, ta, tb;
  memcpy(&pa, b, 8); memcpy(&pb, b + 8, 8);
  memcpy(&m, b + 16, 4); memcpy(&n, b + 20, 4); memcpy(&k, b + 24, 4); memcpy(&lda, b + 28, 4);
  memcpy(&ldb, b + 32, 4); memcpy(&ldd, b + 36, 4); memcpy(&ta, b + 40, 4); memcpy(&tb, b + 44, 4);
  memcpy(&c, b + 48, 8); memcpy(&d, b + 56, 8); memcpy(&flags, b + 64, 8);
  (void)c;
  if (flags & 1) pa <<= 4;
  const float *A = (const float *)(uintptr_t)pa, *B = (const float *)(uintptr_t)pb;
  float *D = (float *)(uintptr_t)d;
  lib_runs++;
  for (int j = 0; j < n; j++)
    for (int i = 0; i < m; i++) {
      double s = 0;
      for (int l = 0; l < k; l++)
        s += (double)(ta ? A[l + (int64_t)i * lda] : A[i + (int64_t)l * lda]) * (tb ? B[j + (int64_t)l * ldb] : B[l + (int64_t)j * ldb]);
      D[i + (int64_t)j * ldd] = (float)s;
    }
}

/* the fake cuBLASLt's launch: recorded into the open capture, else run now */
static int lib_launch(void *stream, void **args) {
  (void)stream;
  fnode nd;
  for (int i = 0; i < LIB_PARAMS; i++) memcpy(nd.buf + lib_off[i], args[i], lib_size[i]);
  kernel_launches += !capturing;
  if (!capturing) { lib_run(nd.buf); return 0; }
  if (open_graph.n >= MAX_NODES) return 1;
  open_graph.node[open_graph.n++] = nd;
  return 0;
}

static ngraph *graph_new(const ngraph *from) {
  for (int i = 0; i < MAX_GRAPHS; i++)
    if (!graphs[i].used) {
      graphs[i] = *from;
      graphs[i].used = 1;
      for (int k = 0; k < graphs[i].n; k++)
        for (int p = 0; p < LIB_PARAMS; p++) graphs[i].node[k].args[p] = graphs[i].node[k].buf + lib_off[p];
      return &graphs[i];
    }
  return NULL;
}
static CUresult n_begin(CUstream s, int mode) { open_graph.n = 0; return f_begin(s, mode); }
static CUresult n_end(CUstream s, CUgraph *g) {
  CUresult r = f_end(s, g);
  if (r || !*g) return r;
  ngraph *x = graph_new(&open_graph);
  *g = (CUgraph)x;
  return x ? 0 : 2;
}
static CUresult n_inst(CUgraphExec *x, CUgraph g, unsigned long long fl) {
  CUresult r = f_inst(x, g, fl);
  if (r) return r;
  ngraph *e = graph_new((const ngraph *)g);
  if (!e) return 2;
  e->src = (ngraph *)g;
  *x = (CUgraphExec)e;
  return 0;
}
static CUresult n_glaunch(CUgraphExec x, CUstream s) {
  ngraph *e = (ngraph *)x;
  for (int k = 0; k < e->n; k++) lib_run(e->node[k].buf);
  return f_glaunch(x, s);
}
static CUresult n_gfree(CUgraph g) { ((ngraph *)g)->used = 0; return 0; }
static CUresult n_xfree(CUgraphExec x) { ((ngraph *)x)->used = 0; return 0; }
/* a node of another kind listed after the library's (extra_kind: 0 none, 2 a memset over the first library node's
 * output, 3 a host node) */
static int extra_kind, extra_obj;
static CUdeviceptr extra_dst;
static CUresult n_nodes(CUgraph g, CUgraphNode *nodes, size_t *k) {
  ngraph *x = (ngraph *)g;
  size_t n = (size_t)x->n + (extra_kind && x->n);
  if (nodes) {
    for (size_t i = 0; i < *k && i < (size_t)x->n; i++) nodes[i] = (CUgraphNode)&x->node[i];
    if (n > (size_t)x->n && *k >= n) nodes[x->n] = (CUgraphNode)&extra_obj;
  }
  if (x->n) memcpy(&extra_dst, x->node[0].buf + 56, 8);
  *k = n;
  return 0;
}
static CUresult n_type(CUgraphNode nd, int *t) {
  *t = nd == (CUgraphNode)&extra_obj ? extra_kind : CU_GRAPH_NODE_TYPE_KERNEL;
  return 0;
}
static CUresult n_memset(CUgraphNode nd, CUDA_MEMSET_NODE_PARAMS *m) {
  if (nd != (CUgraphNode)&extra_obj) return 1;
  *m = (CUDA_MEMSET_NODE_PARAMS){extra_dst, 0, 0, 1, 64, 1};
  return 0;
}
static CUresult n_getparams(CUgraphNode nd, CUDA_KERNEL_NODE_PARAMS *kp) {
  memset(kp, 0, sizeof *kp);
  kp->func = LIB_FN;
  kp->gridDimX = kp->gridDimY = kp->gridDimZ = kp->blockDimX = kp->blockDimY = kp->blockDimZ = 1;
  kp->kernelParams = ((fnode *)nd)->args;
  return 0;
}
static CUresult n_xsetparams(CUgraphExec x, CUgraphNode nd, const CUDA_KERNEL_NODE_PARAMS *kp) {
  ngraph *e = (ngraph *)x;
  long i = (fnode *)nd - e->src->node;
  if (i < 0 || i >= e->n || kp->func != LIB_FN || !kp->kernelParams) return 1;
  for (int p = 0; p < LIB_PARAMS; p++) memcpy(e->node[i].buf + lib_off[p], kp->kernelParams[p], lib_size[p]);
  node_sets++;
  return 0;
}
static CUresult n_paraminfo(CUfunction f, size_t i, size_t *off, size_t *size) {
  param_info_calls++;
  if (f != LIB_FN || i >= LIB_PARAMS) return 1;
  *off = lib_off[i];
  *size = lib_size[i];
  return 0;
}
static CUresult n_dtod(CUdeviceptr d, CUdeviceptr s, size_t n, CUstream st) {
  dtod_copies += !capturing;
  return f_dtod(d, s, n, st);
}

/* cuTensorMapEncodeTiled: the address kept as a plain word (tmap_shift 0) or encoded (shifted) */
static int tmap_shift;
static CUresult n_tmap(void *map, int dt, unsigned rank, void *base, const uint64_t *dims, const uint64_t *strides,
                       const unsigned *box, const unsigned *es, int il, int sw, int l2, int oob) {
  (void)dt; (void)rank; (void)dims; (void)strides; (void)box; (void)es; (void)il; (void)sw; (void)l2; (void)oob;
  memset(map, 0x5a, 128);
  uint64_t a = (uint64_t)(uintptr_t)base >> tmap_shift;
  memcpy((unsigned char *)map + 8, &a, 8);
  return 0;
}

static void install_nodes(cuda_ctx *c) {
  cuda_fns *f = &c->fn;
  f->cuStreamBeginCapture_v2 = n_begin; f->cuStreamEndCapture = n_end; f->cuGraphInstantiateWithFlags = n_inst;
  f->cuGraphLaunch = n_glaunch; f->cuGraphDestroy = n_gfree; f->cuGraphExecDestroy = n_xfree;
  f->cuGraphGetNodes = n_nodes; f->cuGraphNodeGetType = n_type; f->cuGraphKernelNodeGetParams_v2 = n_getparams;
  f->cuGraphExecKernelNodeSetParams_v2 = n_xsetparams; f->cuFuncGetParamInfo = n_paraminfo;
  f->cuMemcpyDtoDAsync_v2 = n_dtod; f->cuGraphMemsetNodeGetParams = n_memset;
}

/* ---- the strategy end to end ---- */
enum { M = 24, K = 20, N = 28 };

static grace_tensor *dev(grace_vm *vm, int64_t r, int64_t c, int seed) {
  grace_tensor *t = NULL;
  if (grace_tensor_empty(vm, GRACE_FLOAT32, GRACE_CUDA, 2, (int64_t[]){r, c}, &t) != GRACE_OK) return NULL;
  float *p = (float *)t->storage->data + t->offset;
  for (int64_t i = 0; i < r * c; i++) p[i] = (float)((i * 7 + seed * 13) % 11) - 5.0f;
  return t;
}

/* Whether y = x @ w, computed here (row-major, double sums of small integers: exact). */
static int right(const grace_tensor *y, const grace_tensor *x, const grace_tensor *w) {
  const float *Y = (const float *)y->storage->data + y->offset, *X = (const float *)x->storage->data + x->offset,
              *W = (const float *)w->storage->data + w->offset;
  for (int i = 0; i < M; i++)
    for (int j = 0; j < N; j++) {
      double s = 0;
      for (int l = 0; l < K; l++) s += (double)X[i * K + l] * W[l * N + j];
      if (Y[i * y->strides[0] + j * y->strides[1]] != (float)s) return 0;
    }
  return 1;
}

static grace_ir *mm_prog(grace_vm *vm) {
  grace_ir *ir = grace_ir_new(vm, "fake_mm");
  grace_value x, w, y;
  grace_status st = grace_ir_input(ir, GRACE_FLOAT32, GRACE_CUDA, 2, (int64_t[]){M, K}, &x);
  if (st == GRACE_OK) st = grace_ir_input(ir, GRACE_FLOAT32, GRACE_CUDA, 2, (int64_t[]){K, N}, &w);
  if (st == GRACE_OK) st = grace_ir_op(ir, GRACE_OP_MATMUL, 2, (grace_value[]){x, w}, NULL, 1, &y);
  if (st == GRACE_OK) st = grace_ir_output(ir, y);
  if (st != GRACE_OK) { printf("# building the program: %s\n", grace_last_error(vm)); grace_ir_free(ir); return NULL; }
  return ir;
}

/* `calls` calls with new inputs each (all kept alive, so every call's addresses differ); how many were right */
static int run_fresh(grace_vm *vm, grace_ir *ir, int calls, int seed0) {
  grace_tensor *keep[3 * 48] = {0};
  int good = 0;
  for (int i = 0; i < calls && i < 48; i++) {
    grace_tensor *x = dev(vm, M, K, seed0 + i), *w = dev(vm, K, N, seed0 + 100 + i), *y = NULL;
    if (grace_ir_run(ir, 2, (grace_tensor *[]){x, w}, 1, &y) != GRACE_OK) printf("# call %d: %s\n", i + 1, grace_last_error(vm));
    else good += right(y, x, w);
    keep[3 * i] = x, keep[3 * i + 1] = w, keep[3 * i + 2] = y;
  }
  for (int i = 0; i < 3 * 48; i++) grace_tensor_release(keep[i]);
  return good;
}

static void forced_update(grace_vm *vm) {
  grace_set_graphs(vm, "update");
  grace_ir *ir = mm_prog(vm);
  if (!ir) { ok(0, "update: the program"); return; }
  long g0 = graph_launches, s0 = node_sets, c0 = dtod_copies, r0 = lib_runs;
  is_int(run_fresh(vm, ir, 10, 1), 10, "update: 10 calls with new inputs each are right");
  grace_graph_info gi;
  grace_ir_graph_info(ir, &gi);
  ok(gi.decided && gi.chosen == GRACE_LAUNCH_UPDATE && !gi.why[GRACE_LAUNCH_UPDATE][0],
     "update: the strategy is graph+node updates (%s)", gi.why[GRACE_LAUNCH_UPDATE]);
  is_int(gi.captures, 1, "update: one capture");
  is_int(graph_launches - g0, 8, "update: calls 3 to 10 replay the graph");
  is_int(lib_runs - r0, 10, "update: the library kernel ran once per call (2 eager, 8 in replays)");
  is_int(gi.node_updates, 1, "update: one library kernel node is re-pointed per call");
  is_int(node_sets - s0, 8, "update: its parameters were rewritten before each replay (new addresses each call)");
  is_int(dtod_copies - c0, 0, "update: no input or output was copied");
  ok(gi.copy_bytes <= 64, "update: at most a few table words copied per call (%zu bytes)", gi.copy_bytes);

  /* the same inputs again: the node already points at them (only the fresh output moves) */
  grace_tensor *x = dev(vm, M, K, 50), *w = dev(vm, K, N, 51), *y = NULL;
  grace_ir_run(ir, 2, (grace_tensor *[]){x, w}, 1, &y);
  grace_tensor_release(y);
  y = NULL;
  s0 = node_sets;
  grace_ir_run(ir, 2, (grace_tensor *[]){x, w}, 1, &y);
  ok(y && right(y, x, w), "update: a call with the same inputs is right");
  ok(node_sets - s0 <= 1, "update: and rewrites the node at most once (the output's memory may be the same: %ld)",
     node_sets - s0);
  grace_tensor_release(y);
  y = NULL;

  /* an input less aligned than at capture (16 bytes, not 256): it goes through its placeholder for that call */
  grace_tensor *big = dev(vm, M * K + 4, 1, 60), *flat = NULL, *xv = NULL;
  grace_run(vm, GRACE_OP_NARROW, 1, &big, &(grace_attrs){.ndims = 1, .dims = {0}, .i0 = 4, .i1 = M * K}, 1, &flat);
  if (flat) grace_run(vm, GRACE_OP_RESHAPE, 1, &flat, &(grace_attrs){.nshape = 2, .shape = {M, K}}, 1, &xv);
  grace_tensor_release(flat);
  c0 = dtod_copies;
  long cap0 = gi.captures;
  int st = xv ? grace_ir_run(ir, 2, (grace_tensor *[]){xv, w}, 1, &y) : GRACE_EARG;
  grace_ir_graph_info(ir, &gi);
  ok(st == GRACE_OK && y && right(y, xv, w), "update: a 16-byte aligned input view is right%s%s", st ? ": " : "",
     st ? grace_last_error(vm) : "");
  ok(gi.captures == cap0 && dtod_copies - c0 == 1, "update: same graph, the view copied into its placeholder (%ld copies)",
     dtod_copies - c0);
  grace_tensor_release(y);
  grace_tensor_release(xv);
  grace_tensor_release(big);
  grace_tensor_release(x);
  grace_tensor_release(w);
  grace_ir_free(ir);
  grace_set_graphs(vm, NULL);
}

/* graph+copies and graph+indirection: cuBLASLt's addresses pin the inputs and the output: copied every call */
static void pinned(grace_vm *vm, const char *mode, grace_launch_strategy want) {
  grace_set_graphs(vm, mode);
  grace_ir *ir = mm_prog(vm);
  long c0 = dtod_copies, s0 = node_sets;
  is_int(ir ? run_fresh(vm, ir, 6, 3) : 0, 6, "%s: 6 calls with new inputs each are right", mode);
  grace_graph_info gi;
  grace_ir_graph_info(ir, &gi);
  ok(gi.chosen == want && gi.node_updates == 0 && node_sets == s0, "%s: no node is re-pointed", mode);
  ok(gi.copy_bytes >= 4 * (M * K + K * N + M * N) && dtod_copies - c0 == 4 * 3,
     "%s: both inputs copied in and the output out per replay (%zu bytes, %ld copies)", mode, gi.copy_bytes,
     dtod_copies - c0);
  grace_ir_free(ir);
  grace_set_graphs(vm, NULL);
}

/* refusals: each leaves the program running eagerly and right, the reason reported */
static void refused(grace_vm *vm, void (*hide)(int)) {
  const char *what[2] = {"no cuFuncGetParamInfo", "an address the graph cannot see"};
  for (int k = 0; k < 2; k++) {
    cuda_state(vm)->fn.cuFuncGetParamInfo = k == 0 ? NULL : n_paraminfo;
    if (k == 1) hide(1);
    grace_set_graphs(vm, "update");
    grace_ir *ir = mm_prog(vm);
    is_int(ir ? run_fresh(vm, ir, 5, 7) : 0, 5, "refused (%s): 5 calls are right", what[k]);
    grace_graph_info gi;
    grace_ir_graph_info(ir, &gi);
    const char *why = gi.why[GRACE_LAUNCH_UPDATE];
    ok(gi.chosen == GRACE_LAUNCH_EAGER && (k == 0 ? strstr(why, "12.4") != NULL : strstr(why, "none of its kernels") != NULL),
       "refused (%s): eager, and the report says why (%s)", what[k], why);
    grace_ir_free(ir);
    if (k == 1) hide(0);
  }
  cuda_state(vm)->fn.cuFuncGetParamInfo = n_paraminfo;

  /* a memset node over a per-call buffer (it would keep writing the old one), or a node that cannot be checked */
  for (extra_kind = 2; extra_kind <= 3; extra_kind++) {
    grace_set_graphs(vm, "update");
    grace_ir *ir = mm_prog(vm);
    is_int(ir ? run_fresh(vm, ir, 5, 13) : 0, 5, "a graph with a %s node: 5 calls are right", extra_kind == 2 ? "memset" : "host");
    grace_graph_info gi;
    grace_ir_graph_info(ir, &gi);
    const char *why = gi.why[GRACE_LAUNCH_UPDATE];
    ok(gi.chosen == GRACE_LAUNCH_EAGER && strstr(why, extra_kind == 2 ? "memset writes a per-call buffer" : "kind 3"),
       "a graph with a %s node: refused, saying why (%s)", extra_kind == 2 ? "memset" : "host", why);
    grace_ir_free(ir);
  }
  extra_kind = 0;

  /* a device with tensor maps: the driver's encoding is probed; a plain address is fine, an encoded one refuses */
  cuda_state(vm)->fn.cuTensorMapEncodeTiled = n_tmap;
  for (int shift = 0; shift <= 4; shift += 4) {
    tmap_shift = shift;
    grace_set_graphs(vm, "update");
    grace_ir *ir = mm_prog(vm);
    is_int(ir ? run_fresh(vm, ir, 5, 11) : 0, 5, "tensor maps %s: 5 calls are right", shift ? "encoded" : "plain");
    grace_graph_info gi;
    grace_ir_graph_info(ir, &gi);
    if (!shift) ok(gi.chosen == GRACE_LAUNCH_UPDATE && gi.node_updates == 1, "tensor maps plain: node updates run (%s)",
                   gi.why[GRACE_LAUNCH_UPDATE]);
    else ok(gi.chosen == GRACE_LAUNCH_EAGER && strstr(gi.why[GRACE_LAUNCH_UPDATE], "encodes addresses"),
            "tensor maps encoded: refused, saying why (%s)", gi.why[GRACE_LAUNCH_UPDATE]);
    grace_ir_free(ir);
  }
  cuda_state(vm)->fn.cuTensorMapEncodeTiled = NULL;
  grace_set_graphs(vm, NULL);
}

/* measured: graph+node updates is one of the strategies timed for a program with a library kernel, and said to be
 * unavailable (without a capture) for one with none */
static void measured(grace_vm *vm) {
  grace_set_graphs(vm, "auto");
  grace_ir *ir = mm_prog(vm);
  is_int(ir ? run_fresh(vm, ir, 48, 9) : 0, 48, "auto: 48 calls are right");
  grace_graph_info gi;
  grace_ir_graph_info(ir, &gi);
  ok(gi.decided && gi.us[GRACE_LAUNCH_UPDATE] > 0, "auto: graph+node updates was measured (%.1f us)", gi.us[GRACE_LAUNCH_UPDATE]);
  grace_ir_free(ir);
  grace_ir *e = grace_ir_new(vm, "fake_exp");
  grace_value x, y;
  grace_ir_input(e, GRACE_FLOAT32, GRACE_CUDA, 1, (int64_t[]){64}, &x);
  grace_ir_op(e, GRACE_OP_EXP, 1, &x, NULL, 1, &y);
  grace_ir_output(e, y);
  grace_tensor *t = NULL, *o = NULL;
  grace_tensor_empty(vm, GRACE_FLOAT32, GRACE_CUDA, 1, (int64_t[]){64}, &t);
  long r0 = lib_runs;
  grace_ir_run(e, 1, &t, 1, &o);
  grace_tensor_release(o);
  o = NULL;
  grace_ir_run(e, 1, &t, 1, &o);
  grace_ir_graph_info(e, &gi);
  ok(lib_runs == r0 && strstr(gi.why[GRACE_LAUNCH_UPDATE], "no library kernel"),
     "auto: a program without library calls: node updates unavailable (%s)", gi.why[GRACE_LAUNCH_UPDATE]);
  grace_tensor_release(o);
  grace_tensor_release(t);
  grace_ir_free(e);
  grace_set_graphs(vm, NULL);
}

int main(void) {
  test_rule();
  char lib[PATH_MAX + 32], exe[PATH_MAX] = "";
  ssize_t n = readlink("/proc/self/exe", exe, sizeof exe - 1);
  if (n > 0) exe[n] = 0;
  char *slash = strrchr(exe, '/');
  if (slash) *slash = 0;
  snprintf(lib, sizeof lib, "%s/libfake_cublaslt.so", exe);
  void *h = dlopen(lib, RTLD_NOW | RTLD_LOCAL);
  void (*set_launch)(int (*)(void *, void **)) = h ? (void (*)(int (*)(void *, void **)))dlsym(h, "fake_cublaslt_set_launch") : NULL;
  void (*hide)(int) = h ? (void (*)(int))dlsym(h, "fake_cublaslt_hide_a") : NULL;
  if (!set_launch || !hide) {
    ok(0, "the fake cuBLASLt loads from %s", lib);
    return tap_done();
  }
  set_launch(lib_launch);
  setenv("GRACE_CUBLASLT", lib, 1);
  setenv("GRACE_MATMUL", "cublaslt", 1);
  char dir[] = "/tmp/grace-fake-upd-XXXXXX";
  if (mkdtemp(dir)) setenv("GRACE_CACHE_DIR", dir, 1);   /* no launch decisions from earlier runs */
  grace_config cfg = {0};
  cfg.device = "cpu";
  char err[256];
  grace_vm *vm = grace_vm_new(&cfg, err, sizeof err);
  if (!vm) { printf("not ok - grace_vm_new: %s\n", err); return tap_done(); }
  install_nodes(install_fake(vm));
  forced_update(vm);
  pinned(vm, "copy", GRACE_LAUNCH_COPY);
  pinned(vm, "indirect", GRACE_LAUNCH_INDIRECT);
  refused(vm, hide);
  if (cuda_nvrtc_why(vm)) skip("no NVRTC: the measured choice (which compiles a kernel) is not run");
  else measured(vm);
  fake_vm_free(vm, dir);
  return tap_done();
}
