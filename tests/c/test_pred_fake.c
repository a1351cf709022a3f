/* test_pred_fake.c: cond regions lowered by predication (gpu/gpu_pred.c) on a fake driver, so it runs without a GPU.
 * The fake runs no kernel, so it cannot say which body a replay takes; what is checked is what grace builds and how
 * calls go: a cond whose branch flips every call is captured once and replayed with no host synchronisation; the
 * graph holds no conditional node but both bodies' kernels, each given the predicate word with the value of its body
 * (1 then, 2 else), after the one kernel that writes the word (itself not predicated); a cond nested in a then body
 * gets a word kernel of its own that reads the enclosing word (a conjunction); a branch returning its argument as it
 * is still writes the result (a predicated copy); a while_loop refuses predication with the reason, and so do
 * cuBLASLt and device-to-device driver copies while a predicate is set. The generated sources of predicated kernels (an op template,
 * GEMV and GEMM, the fused kernels of the programs above) enter by letting dependents launch, waiting, and returning
 * unless the word holds the value, before reading anything; NVRTC compiles them for real (the file skips without
 * NVRTC). */
#include <dirent.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>
#include "grace.h"
#include "codegen/cg_cond.h"
#include "codegen/cg_matmul.h"
#include "codegen/cg_ops.h"
#include "cuda/cuda_blas.h"
#include "cuda/cuda_graph.h"
#include "cuda/cuda_internal.h"
#include "gpu/gpu_exec.h"
#include "gpu/gpu_graph_int.h"
#include "tap.h"

#include "c/fake_cuda.h"
#include "c/region_progs.h"
#include "c/pdl_check.h"

/* The kernels of the last graph captured: how many, the word kernels among them (their indices in w[], at most 4),
 * and how many were predicated on word `word` wanting `want`. */
static int word_kernels(const fake_graph *g, int *w) {
  int n = 0;
  for (int k = 0; k < g->kernels && k < 64; k++) if (g->is_word[k] && n < 4) w[n++] = k;
  return n;
}
static int predicated(const fake_graph *g, unsigned long long word, unsigned want) {
  int n = 0;
  for (int k = 0; k < g->kernels && k < 64; k++) n += g->pword[k] == word && g->pwant[k] == want;
  return n;
}

/* The cond of cond_prog predicated in a graph of strategy mode ("copy" or "indirect"). */
static void pred_graph(grace_vm *vm, const char *mode) {
  grace_set_graphs(vm, mode);
  grace_ir *ir = cond_prog(vm);
  long c0 = cond_nodes_added, syncs = 0, launches = 0;
  is_int(run_calls(vm, ir, NULL, 12, 1, 4, &syncs, &launches), 0, "pred [%s]: 12 calls, the branch flipping every call",
         mode);
  grace_graph_info gi;
  grace_ir_graph_info(ir, &gi);
  ok(gi.regions == 1 && !gi.pred_why[0] && gi.region_lowering == GRACE_REGION_PRED,
     "pred [%s]: one region, predicated ('%s', lowering %d)", mode, gi.pred_why, gi.region_lowering);
  ok(strstr(gi.region_why, "forced to predication") != NULL,
     "pred [%s]: the report says conditional nodes were forced off (%s)", mode, gi.region_why);
  is_int(gi.captures, 1, "pred [%s]: captured once, whichever branch each call takes", mode);
  ok(gi.cond_nodes == 0 && cond_nodes_added == c0, "pred [%s]: no conditional node in the graph (%d)", mode, gi.cond_nodes);
  is_int(launches, 9, "pred [%s]: calls 4 to 12 each launch the graph once", mode);
  is_int(syncs, 0, "pred [%s]: calls 4 to 12 never wait for the device (the stats and the driver agree)",
         mode);
  const fake_graph *g = &fgraph[0];
  int w[4];
  int nw = word_kernels(g, w);
  ok(nw == 1 && w[0] == 0 && g->pword[0] == 0 && g->pwords[0][3] == 0,
     "pred [%s]: first the word kernel, not predicated itself, with no enclosing word (%d word kernels)", mode, nw);
  unsigned long long word = nw ? g->pwords[w[0]][5] : 1;
  /* each body: its branch's fused kernel and the copy of its result into the region's result */
  ok(g->kernels == 5 && predicated(g, word, CG_PRED_THEN) == 2 && predicated(g, word, CG_PRED_ELSE) == 2,
     "pred [%s]: the graph holds both bodies' kernels, each predicated on the word (%d kernels: %d then, %d else)", mode,
     g->kernels, predicated(g, word, CG_PRED_THEN), predicated(g, word, CG_PRED_ELSE));
  ok(g->pwant[1] == CG_PRED_THEN && g->pwant[2] == CG_PRED_THEN && g->pwant[3] == CG_PRED_ELSE &&
     g->pwant[4] == CG_PRED_ELSE, "pred [%s]: the then body's kernels want 1, then the else body's want 2", mode);
  grace_ir_free(ir);
}

/* r = cond(p, [x, q]): then cond(q, x) (then exp(x + 1) + 1, else x * 2), else x * 2; inputs x, p, q. */
static grace_ir *nested_prog(grace_vm *vm) {
  grace_ir *ir = grace_ir_new(vm, "nested"), *t = grace_ir_new(vm, "then"), *e = unary(vm, "else", GRACE_OP_MUL, 2, 1),
           *it = unary(vm, "inner_then", GRACE_OP_ADD, 1, 0), *ie = unary(vm, "inner_else", GRACE_OP_MUL, 2, 0);
  int64_t n = N;
  grace_value x, p, q, tx, tq, tr, r;
  grace_status st = e && it && ie ? GRACE_OK : GRACE_EARG;
  if (st == GRACE_OK) st = grace_ir_input(t, GRACE_FLOAT32, GRACE_CUDA, 1, &n, &tx);
  if (st == GRACE_OK) st = grace_ir_input(t, GRACE_BOOL, GRACE_CUDA, 0, NULL, &tq);
  if (st == GRACE_OK) st = grace_ir_cond(t, tq, 1, &tx, it, ie, 1, &tr);
  else { grace_ir_free(it); grace_ir_free(ie); }
  if (st == GRACE_OK) st = grace_ir_output(t, tr);
  if (st == GRACE_OK) st = grace_ir_input(ir, GRACE_FLOAT32, GRACE_CUDA, 1, &n, &x);
  if (st == GRACE_OK) st = grace_ir_input(ir, GRACE_BOOL, GRACE_CUDA, 0, NULL, &p);
  if (st == GRACE_OK) st = grace_ir_input(ir, GRACE_BOOL, GRACE_CUDA, 0, NULL, &q);
  if (st == GRACE_OK) st = grace_ir_cond(ir, p, 2, (grace_value[]){x, q}, t, e, 1, &r);
  else { grace_ir_free(t); grace_ir_free(e); }
  if (st == GRACE_OK) st = grace_ir_output(ir, r);
  if (st != GRACE_OK) { printf("# building nested: %s\n", grace_last_error(vm)); grace_ir_free(ir); return NULL; }
  return ir;
}

static void nested_graph(grace_vm *vm) {
  grace_ir *ir = nested_prog(vm);
  long syncs = 0, launches = 0;
  /* p flips every call, q every second call */
  is_int(run_calls(vm, ir, NULL, 10, 2, 4, &syncs, &launches), 0, "nested: 10 calls, both predicates changing");
  grace_graph_info gi;
  grace_ir_graph_info(ir, &gi);
  ok(gi.captures == 1 && gi.cond_nodes == 0 && gi.region_lowering == GRACE_REGION_PRED && syncs == 0 && launches == 7,
     "nested: captured once, predicated, replayed without waiting (%ld captures, %ld syncs)", gi.captures, syncs);
  const fake_graph *g = &fgraph[0];
  int w[4];
  int nw = word_kernels(g, w);
  unsigned long long outer = nw == 2 ? g->pwords[w[0]][5] : 1, inner = nw == 2 ? g->pwords[w[1]][5] : 2;
  ok(nw == 2 && g->pwords[w[0]][3] == 0 && g->pwords[w[1]][3] == outer && g->pwords[w[1]][4] == CG_PRED_THEN &&
     g->pword[w[0]] == 0 && g->pword[w[1]] == 0,
     "nested: the inner word kernel reads the outer word (wanting the then body), neither is predicated itself");
  /* outer then: the inner region (its two bodies, each a kernel and a copy) and the copy of its result; outer else: a
   * kernel and a copy */
  ok(predicated(g, inner, CG_PRED_THEN) == 2 && predicated(g, inner, CG_PRED_ELSE) == 2 &&
     predicated(g, outer, CG_PRED_THEN) == 1 && predicated(g, outer, CG_PRED_ELSE) == 2 && g->kernels == 9,
     "nested: the inner bodies are predicated on the inner word, the outer bodies' own kernels on the outer (%d kernels)",
     g->kernels);
  grace_ir_free(ir);
}

/* r = cond(p, x): then x itself, else x * 2. */
static void identity_graph(grace_vm *vm) {
  grace_ir *ir = grace_ir_new(vm, "identity"), *t = grace_ir_new(vm, "then"), *e = unary(vm, "else", GRACE_OP_MUL, 2, 0);
  int64_t n = N;
  grace_value x, p, tx, r;
  grace_status st = e ? GRACE_OK : GRACE_EARG;
  if (st == GRACE_OK) st = grace_ir_input(t, GRACE_FLOAT32, GRACE_CUDA, 1, &n, &tx);
  if (st == GRACE_OK) st = grace_ir_output(t, tx);
  if (st == GRACE_OK) st = grace_ir_input(ir, GRACE_FLOAT32, GRACE_CUDA, 1, &n, &x);
  if (st == GRACE_OK) st = grace_ir_input(ir, GRACE_BOOL, GRACE_CUDA, 0, NULL, &p);
  if (st == GRACE_OK) st = grace_ir_cond(ir, p, 1, &x, t, e, 1, &r);
  if (st == GRACE_OK) st = grace_ir_output(ir, r);
  if (st != GRACE_OK) { ok(0, "identity: built (%s)", grace_last_error(vm)); grace_ir_free(ir); return; }
  long syncs = 0, launches = 0;
  is_int(run_calls(vm, ir, NULL, 6, 1, 4, &syncs, &launches), 0, "identity: 6 calls");
  grace_graph_info gi;
  grace_ir_graph_info(ir, &gi);
  const fake_graph *g = &fgraph[0];
  int w[4];
  unsigned long long word = word_kernels(g, w) == 1 ? g->pwords[w[0]][5] : 1;
  ok(gi.captures == 1 && gi.region_lowering == GRACE_REGION_PRED && predicated(g, word, CG_PRED_THEN) == 1 &&
     predicated(g, word, CG_PRED_ELSE) == 2,
     "identity: a branch returning its argument still fills the result, by a predicated copy (%d then kernels)",
     predicated(g, word, CG_PRED_THEN));
  grace_ir_free(ir);
}

/* Nothing forced: every graph strategy is measured with conditional nodes and predicated, and against the host
 * branch; the fastest is kept (or a simpler one within the margin), and the report has each lowering's best. */
static void measured(grace_vm *vm, cuda_ctx *c) {
  grace_ir *ir = cond_prog(vm);
  long syncs = 0, launches = 0;
  is_int(run_calls(vm, ir, NULL, 80, 1, 80, &syncs, &launches), 0, "measured: 80 calls");
  grace_graph_info gi;
  grace_ir_graph_info(ir, &gi);
  int nodes = cuda_link_why(c) == NULL, kept = gi.region_lowering;
  ok(gi.decided && gi.region_us[GRACE_REGION_HOST] > 0 && gi.region_us[GRACE_REGION_PRED] > 0 &&
     (gi.region_us[GRACE_REGION_NODES] > 0) == nodes, "measured: each lowering measured (host %.1f, nodes %.1f, pred "
     "%.1f us)", gi.region_us[GRACE_REGION_HOST], gi.region_us[GRACE_REGION_NODES], gi.region_us[GRACE_REGION_PRED]);
  int fastest = kept >= 0;
  /* (a simpler candidate within GG_MARGIN_PCT of the fastest is a tie it wins) */
  for (int l = 0; l < 3 && fastest; l++)
    fastest = gi.region_us[l] == 0 || gi.region_us[kept] <= gi.region_us[l] * (1 + GG_MARGIN_PCT / 100.0);
  ok(fastest, "measured: the lowering kept (%d) is the fastest measured, or within %d%% of it", kept, GG_MARGIN_PCT);
  ok((kept == GRACE_REGION_HOST) == (gi.chosen == GRACE_LAUNCH_EAGER), "measured: the host branch is the eager strategy");
  grace_ir_free(ir);
}

/* What predication cannot take: a while_loop (the report says why, and it runs as conditional nodes or host branches
 * as before), cuBLASLt and driver copies while a word is set. */
static void refusals(grace_vm *vm, cuda_ctx *c) {
  grace_ir *ir = while_prog(vm, 0, 0);
  grace_tensor *x = dev_value(vm, GRACE_FLOAT32, N, 0.5);
  long syncs = 0, launches = 0;
  is_int(run_calls(vm, ir, x, 5, 0, 4, &syncs, &launches), 0, "while: 5 calls");
  grace_graph_info gi;
  grace_ir_graph_info(ir, &gi);
  ok(strstr(gi.pred_why, "while_loop cannot be predicated") != NULL && gi.region_lowering != GRACE_REGION_PRED,
     "while: predication refused with the reason (%s)", gi.pred_why);
  grace_ir_free(ir);
  CUdeviceptr word = 0;
  grace_status st = cuda_malloc(c, 4, &word);
  cuda_pred_set(c, word, CG_PRED_THEN);
  grace_status sb = cuda_blas_matmul(vm, NULL, c, &(cuda_blas_gemm){.dt = GRACE_FLOAT32});
  ok(st == GRACE_OK && sb == GRACE_EUNSUPPORTED && strstr(grace_last_error(vm), "cuBLASLt") &&
     strstr(grace_last_error(vm), "cannot be predicated"), "cuBLASLt refuses while a predicate is set (%s)",
     grace_last_error(vm));
  grace_status sc = cuda_copy_device(c, gpu_ptr(x), gpu_ptr(x), 16);
  ok(sc == GRACE_EUNSUPPORTED && strstr(grace_last_error(vm), "predicate"), "a driver copy refuses while a predicate "
     "is set (%s)", grace_last_error(vm));
  cuda_pred_set(c, 0, 0);
  ok(cuda_copy_device(c, gpu_ptr(x), gpu_ptr(x), 16) == GRACE_OK && !cuda_pred_word(c, NULL),
     "and copies again once it is cleared");
  if (word) cuda_release(c, word, 4);
  grace_tensor_release(x);
}

static void check_source(grace_vm *vm, grace_status st, cg_kernel *k, const char *what) {
  if (st != GRACE_OK) { ok(0, "%s: source (%s)", what, grace_last_error(vm)); return; }
  ok(pred_enters_first(k->src), "%s: predicated, it lets dependents launch, waits, and returns unless the word holds "
     "its value, before reading anything", what);
  char *out = NULL;
  size_t n = 0;
  st = cuda_nvrtc_compile(vm, k->src, 90, 1, &out, &n);
  ok(st == GRACE_OK && n > 0, "%s: the predicated kernel compiles (%s)", what, st == GRACE_OK ? "ok" : grace_last_error(vm));
  if (out) grace_realloc(vm, out, n, 0);
  cg_kernel_free(vm, k);
}

static void sources(grace_vm *vm) {
  cg_kernel k;
  check_source(vm, cg_ops_source(vm, &(cgo_spec){CGO_COPY, {GRACE_FLOAT32, GRACE_FLOAT16, GRACE_FLOAT32}, 0, 1, 1}, &k),
               &k, "an op template (a copy, indirect)");
  check_source(vm, cg_ops_source(vm, &(cgo_spec){CGO_ICHECK, {GRACE_INT64}, 0, 0, 1}, &k), &k, "an index check");
  cg_mm_desc d;
  memset(&d, 0, sizeof d);
  d = (cg_mm_desc){.form = CG_MM_GEMV_NT, .dt = GRACE_BFLOAT16, .out_dt = GRACE_BFLOAT16, .a_kmajor = 1, .b_kmajor = 1,
                   .vec = 8, .mtile = 1, .pred = 1};
  check_source(vm, cg_matmul_source(vm, &d, &k), &k, "a GEMV (its weights loaded before its own wait otherwise)");
  d = (cg_mm_desc){.form = CG_MM_GEMM_TC, .dt = GRACE_FLOAT16, .out_dt = GRACE_FLOAT16, .a_kmajor = 1, .b_kmajor = 1,
                   .vec = 1, .mtile = 1, .pred = 1};
  check_source(vm, cg_matmul_source(vm, &d, &k), &k, "a tensor-core GEMM");
  cgo_spec plain = {CGO_COPY, {GRACE_FLOAT32, GRACE_FLOAT32, GRACE_FLOAT32}, 0, 0, 0};
  if (cg_ops_source(vm, &plain, &k) == GRACE_OK) {
    ok(!strstr(k.src, "grace_pred") && pdl_enters_first(k.src), "a kernel outside predicated bodies has no predicate");
    cg_kernel_free(vm, &k);
  }
}

int main(void) {
  char dir[] = "/tmp/grace-predfake-XXXXXX";
  int rc = 0;
  grace_vm *vm = fake_vm_new(dir, &rc);
  if (!vm) return rc;
  cuda_ctx *fake = install_fake_cond(install_fake(vm));
  sources(vm);
  grace_set_regions(vm, "pred");
  pred_graph(vm, "copy");
  pred_graph(vm, "indirect");
  nested_graph(vm);
  identity_graph(vm);
  grace_set_regions(vm, NULL);
  grace_set_graphs(vm, NULL);
  measured(vm, fake);
  refusals(vm, fake);
  fake_vm_free(vm, dir);
  return tap_done();
}
