/* test_cond_fake.c: regions (cond, while) lowered to CUDA conditional graph nodes (gpu/gpu_cond.c) on a fake
 * driver, so it runs without a GPU. The fake cannot run the kernel that sets a node's handle, nor any other, so it
 * does not decide which body a replay runs; what is checked is what grace builds and how calls go: a program whose
 * branch flips every call is captured once and then replayed with no host synchronisation and no capture; the
 * graph holds one predicate kernel and one IF node with two bodies, each holding its branch's kernels (the body's
 * launches went to the body, not the graph), the predicate kernel given the node's handle; a branch writing its
 * argument back (the region returns it, copied into it after) is the same one graph, x copied neither in nor out
 * with indirection; a while loop is one
 * WHILE node whose body holds the body's kernels and a predicate kernel setting the same handle as the one before
 * the node (with max_iters, both counting iterations into one word read back like an index check's flag); a cond in a while's body is an IF node inside the WHILE node's body; and with nvJitLink absent the regions stay host branches (a synchronisation per call, no graph), the
 * report saying why. NVRTC compiles the kernels for real and nvJitLink links the predicate kernel with the device
 * runtime for real; without NVRTC the file skips, without nvJitLink only the fallback is checked. */
#include <dirent.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>
#include "grace.h"
#include "codegen/cg_cond.h"
#include "cuda/cuda_graph.h"
#include "cuda/cuda_internal.h"
#include "tap.h"

#include "c/fake_cuda.h"

#include "c/region_progs.h"

static void cond_graph(grace_vm *vm) {
  grace_set_graphs(vm, "indirect");
  grace_ir *ir = cond_prog(vm);
  long c0 = cond_nodes_added, syncs = 0, launches = 0;
  /* call 1 eager (a host branch, then), call 2 the layout's warm run (the other branch), call 3 captures */
  is_int(run_calls(vm, ir, NULL, 12, 1, 4, &syncs, &launches), 0, "cond: 12 calls, the branch flipping every call");
  grace_graph_info gi;
  grace_ir_graph_info(ir, &gi);
  ok(gi.regions == 1 && !gi.region_why[0], "cond: one region, conditional nodes can take it (%d, '%s')", gi.regions,
     gi.region_why);
  is_int(gi.captures, 1, "cond: captured once, whichever branch each call takes");
  is_int(gi.cond_nodes, 1, "cond: the graph holds one conditional node");
  is_int(cond_nodes_added - c0, 1, "cond: one conditional node was added to the driver's graph");
  is_int(launches, 9, "cond: calls 4 to 12 each launch the graph once");
  is_int(syncs, 0, "cond: calls 4 to 12 never wait for the device (the stats and the driver agree)");
  const fake_graph *top = &fgraph[0];
  ok(top->nconds == 1 && top->cond[0].type == CU_GRAPH_COND_TYPE_IF && top->cond[0].size == 2,
     "cond: an IF node with two bodies (then, else)");
  ok(top->nsets == 1 && top->sets[0] == top->cond[0].handle && top->kernels == 1,
     "cond: before it, only the predicate kernel, which sets that node's handle (%d kernels)", top->kernels);
  const fake_graph *tb = &fgraph[top->cond[0].body[0]], *eb = &fgraph[top->cond[0].body[1]];
  /* each body: the branch's fused kernel and the copy into the result both branches write */
  ok(tb->kernels == 2 && eb->kernels == 2 && !tb->nsets && !eb->nsets && !tb->nconds && !eb->nconds,
     "cond: each body holds its branch's kernel and the copy of its result (%d, %d kernels)", tb->kernels, eb->kernels);
  grace_ir_free(ir);
  grace_set_graphs(vm, NULL);
}

/* r = cond(p, x) with x written in place by the then branch (as grace.cond records it: the region returns x's new
 * contents too, copied into x after it): then (exp(x + 1) + 1, x * 3), else (x * 2, x). */
static grace_ir *cond_write_prog(grace_vm *vm) {
  grace_ir *ir = grace_ir_new(vm, "cond_write_prog"), *sub[2] = {grace_ir_new(vm, "then"), grace_ir_new(vm, "else")};
  int64_t n = N;
  grace_value x, p, r[2], c;
  grace_status st = sub[0] && sub[1] ? GRACE_OK : GRACE_ENOMEM;
  for (int b = 0; b < 2 && st == GRACE_OK; b++) {
    grace_value sx, one, k, y, e, w;
    st = grace_ir_input(sub[b], GRACE_FLOAT32, GRACE_CUDA, 1, &n, &sx);
    if (st == GRACE_OK) st = grace_ir_literal(sub[b], 1, 0, &one);
    if (st == GRACE_OK) st = grace_ir_literal(sub[b], b ? 2 : 3, 0, &k);
    if (b == 0) {   /* exp(x + 1) + 1, and x * 3 written */
      if (st == GRACE_OK) st = grace_ir_op(sub[b], GRACE_OP_ADD, 2, (grace_value[]){sx, one}, NULL, 1, &y);
      if (st == GRACE_OK) st = grace_ir_op(sub[b], GRACE_OP_EXP, 1, &y, NULL, 1, &e);
      if (st == GRACE_OK) st = grace_ir_op(sub[b], GRACE_OP_ADD, 2, (grace_value[]){e, one}, NULL, 1, &y);
      if (st == GRACE_OK) st = grace_ir_op(sub[b], GRACE_OP_MUL, 2, (grace_value[]){sx, k}, NULL, 1, &w);
    } else {        /* x * 2, x as it came in */
      if (st == GRACE_OK) st = grace_ir_op(sub[b], GRACE_OP_MUL, 2, (grace_value[]){sx, k}, NULL, 1, &y);
      w = sx;
    }
    if (st == GRACE_OK) st = grace_ir_output(sub[b], y);
    if (st == GRACE_OK) st = grace_ir_output(sub[b], w);
  }
  if (st == GRACE_OK) st = grace_ir_input(ir, GRACE_FLOAT32, GRACE_CUDA, 1, &n, &x);
  if (st == GRACE_OK) st = grace_ir_input(ir, GRACE_BOOL, GRACE_CUDA, 0, NULL, &p);
  if (st == GRACE_OK && (st = grace_ir_cond(ir, p, 1, &x, sub[0], sub[1], 2, r)) == GRACE_OK) sub[0] = sub[1] = NULL;
  if (st == GRACE_OK) st = grace_ir_op(ir, GRACE_OP_COPY_, 2, (grace_value[]){x, r[1]}, NULL, 1, &c);
  if (st == GRACE_OK) st = grace_ir_write(ir, x, c);
  if (st == GRACE_OK) st = grace_ir_output(ir, r[0]);
  grace_ir_free(sub[0]);
  grace_ir_free(sub[1]);
  if (st != GRACE_OK) { printf("# building cond_write_prog: %s\n", grace_last_error(vm)); grace_ir_free(ir); return NULL; }
  return ir;
}

/* A branch writing its argument back: the IF node's bodies also copy x's new contents into the region's second
 * result, and x takes it after the node, inside the same graph (no copy of x in or out with indirection). */
static void cond_write_graph(grace_vm *vm) {
  grace_set_graphs(vm, "indirect");
  grace_ir *ir = cond_write_prog(vm);
  long syncs = 0, launches = 0;
  is_int(run_calls(vm, ir, NULL, 12, 1, 4, &syncs, &launches), 0, "cond writing x: 12 calls, the branch flipping");
  grace_graph_info gi;
  grace_ir_graph_info(ir, &gi);
  ok(gi.regions == 1 && !gi.region_why[0] && gi.captures == 1 && gi.cond_nodes == 1,
     "cond writing x: one region as one conditional node, captured once (%d, '%s', %ld captures)", gi.regions,
     gi.region_why, (long)gi.captures);
  ok(launches == 9 && syncs == 0, "cond writing x: calls 4 to 12 launch the graph once each, never waiting (%ld, %ld)",
     launches, syncs);
  ok(gi.copy_bytes <= 64, "cond writing x: with indirection no byte of x is copied in or out (%zu)", gi.copy_bytes);
  const fake_graph *top = &fgraph[0];
  const fake_graph *tb = top->nconds ? &fgraph[top->cond[0].body[0]] : top;
  ok(top->nconds == 1 && top->cond[0].size == 2 && tb->kernels >= 2,
     "cond writing x: an IF node whose then body computes both results (%d kernels)", tb->kernels);
  grace_ir_free(ir);
  grace_set_graphs(vm, NULL);
}

static void while_graph(grace_vm *vm) {
  grace_set_graphs(vm, "indirect");
  grace_ir *ir = while_prog(vm, 0, 0);
  long syncs = 0, launches = 0;
  is_int(run_calls(vm, ir, NULL, 10, 0, 4, &syncs, &launches), 0, "while: 10 calls");
  grace_graph_info gi;
  grace_ir_graph_info(ir, &gi);
  ok(gi.regions == 1 && gi.captures == 1 && gi.cond_nodes == 1, "while: one region, captured once as one node");
  is_int(launches, 7, "while: calls 4 to 10 each launch the graph once");
  is_int(syncs, 0, "while: calls 4 to 10 never wait for the device");
  const fake_graph *top = &fgraph[0];
  ok(top->nconds == 1 && top->cond[0].type == CU_GRAPH_COND_TYPE_WHILE && top->cond[0].size == 1,
     "while: a WHILE node with one body");
  /* before the node: the state copied in, the predicate kernel (the cond sub-program launches nothing here) */
  ok(top->nsets == 1 && top->sets[0] == top->cond[0].handle && top->kernels == 2,
     "while: before it, the state's copy and the predicate kernel setting its handle (%d kernels)", top->kernels);
  const fake_graph *b = &fgraph[top->cond[0].body[0]];
  ok(b->kernels == 3 && b->nsets == 1 && b->sets[0] == top->cond[0].handle,
     "while: the body runs the body's kernel, copies the next state, and sets the same handle again (%d kernels)",
     b->kernels);
  grace_ir_free(ir);
  grace_set_graphs(vm, NULL);
}

/* A cond nested in a while's body: the body graph holds the IF node, its handle made and set there. */
static void nested_graph(grace_vm *vm) {
  grace_set_graphs(vm, "indirect");
  grace_ir *ir = while_prog(vm, 1, 0);
  long syncs = 0, launches = 0;
  is_int(run_calls(vm, ir, NULL, 6, 0, 4, &syncs, &launches), 0, "nested: 6 calls");
  grace_graph_info gi;
  grace_ir_graph_info(ir, &gi);
  ok(gi.captures == 1 && gi.cond_nodes == 2 && launches == 3 && syncs == 0,
     "nested: captured once with two conditional nodes, replayed without waiting (%d nodes, %ld launches, %ld syncs)",
     gi.cond_nodes, launches, syncs);
  const fake_graph *top = &fgraph[0];
  const fake_graph *b = top->nconds == 1 ? &fgraph[top->cond[0].body[0]] : top;
  ok(top->nconds == 1 && top->cond[0].type == CU_GRAPH_COND_TYPE_WHILE && b->nconds == 1 &&
     b->cond[0].type == CU_GRAPH_COND_TYPE_IF && b->cond[0].size == 2,
     "nested: the WHILE node's body holds an IF node with two bodies");
  /* the body: the IF's predicate kernel, then (after the node) the copy of the next state and the loop's predicate */
  ok(b->nsets == 2 && b->sets[0] == b->cond[0].handle && b->sets[1] == top->cond[0].handle && b->kernels == 3,
     "nested: in the body, one predicate kernel sets the IF's handle and one the loop's (%d kernels)", b->kernels);
  const fake_graph *t = b->nconds ? &fgraph[b->cond[0].body[0]] : b, *e = b->nconds ? &fgraph[b->cond[0].body[1]] : b;
  ok(t->kernels == 2 && e->kernels == 2, "nested: the IF's bodies hold their branch's kernel and the copy (%d, %d)",
     t->kernels, e->kernels);
  grace_ir_free(ir);
  grace_set_graphs(vm, NULL);
}

/* A while_loop with max_iters: both predicate kernels count into one device word, which comes back after each replay
 * as index checks' flags do; the fake cannot run the loop, so the test writes the -1 a device would leave past the
 * bound, and the next wait for the device fails with the eager loop's message. */
static void bounded_graph(grace_vm *vm) {
  grace_set_graphs(vm, "indirect");
  grace_ir *ir = while_prog(vm, 0, 5);
  grace_tensor *x = dev_value(vm, GRACE_FLOAT32, N, 0.5);
  long syncs = 0, launches = 0;
  is_int(run_calls(vm, ir, x, 6, 0, 4, &syncs, &launches), 0, "max_iters: 6 calls");
  grace_graph_info gi;
  grace_ir_graph_info(ir, &gi);
  ok(gi.captures == 1 && gi.cond_nodes == 1 && launches == 3 && syncs == 0,
     "max_iters: one graph, replayed without waiting (%ld captures, %ld launches, %ld syncs)", gi.captures, launches,
     syncs);
  const fake_graph *top = &fgraph[0];
  const fake_graph *b = top->nconds == 1 ? &fgraph[top->cond[0].body[0]] : top;
  uint64_t count = top->nsets == 1 ? top->counts[0] : 0;
  ok(count && b->nsets == 1 && b->counts[0] == count, "max_iters: the predicate kernels before and in the body count "
     "into one word");
  if (count) {
    *(int64_t *)(uintptr_t)count = -1;
    grace_tensor *flag = dev_value(vm, GRACE_BOOL, 0, 0), *out = NULL;
    grace_status st = grace_ir_run(ir, 2, (grace_tensor *[]){x, flag}, 1, &out);
    if (st == GRACE_OK) st = grace_synchronize(vm);
    ok(st != GRACE_OK && strstr(grace_last_error(vm), "still running after max_iters=5 iterations"),
       "max_iters: a count of -1 raises the eager loop's error at the next wait (%s)", grace_last_error(vm));
    grace_tensor_release(out);
    grace_tensor_release(flag);
  }
  grace_tensor_release(x);
  grace_ir_free(ir);
  grace_set_graphs(vm, NULL);
}

/* The predicate kernel compiled relocatable and linked with the device runtime: an ELF image holding it. */
static void linked_image(grace_vm *vm, cuda_ctx *c) {
  char *rel = NULL, *img = NULL;
  size_t nrel = 0, nimg = 0;
  grace_status st = cuda_nvrtc_compile_image(vm, c, cg_cond_source(), 90, 1, &rel, &nrel);
  if (st == GRACE_OK) st = cuda_link_devrt(c, rel, nrel, 90, &img, &nimg);
  int found = 0;
  for (size_t i = 0; img && i + 14 <= nimg && !found; i++) found = !memcmp(img + i, CG_COND_KERNEL, 14);
  ok(st == GRACE_OK && nimg > 4 && !memcmp(img, "\x7f" "ELF", 4) && found,
     "link: the predicate kernel links with libcudadevrt.a into a %zu-byte cubin naming it (%s)", nimg,
     st == GRACE_OK ? "ok" : grace_last_error(vm));
  grace_realloc(vm, rel, nrel, 0);
  grace_realloc(vm, img, nimg, 0);
}

/* nvJitLink absent: no conditional node, the report says why; the regions are predicated instead (no device runtime
 * needed), and with predication forced off too they run as host branches, kernel by kernel. */
static void no_link(grace_vm *vm, cuda_ctx *c) {
  c->link_probed = 1;
  c->link_ok = 0;
  snprintf(c->link_why, sizeof c->link_why, "nvJitLink not found (hidden by the test)");
  grace_set_graphs(vm, "indirect");
  grace_ir *ir = cond_prog(vm);
  long syncs = 0, launches = 0;
  is_int(run_calls(vm, ir, NULL, 6, 1, 4, &syncs, &launches), 0, "no nvJitLink: 6 calls run");
  grace_graph_info gi;
  grace_ir_graph_info(ir, &gi);
  ok(gi.regions == 1 && strstr(gi.region_why, "nvJitLink not found"), "no nvJitLink: the report says why (%s)",
     gi.region_why);
  ok(gi.captures == 1 && gi.cond_nodes == 0 && gi.region_lowering == GRACE_REGION_PRED && launches == 3 && !syncs,
     "no nvJitLink: the regions are predicated in one graph (%ld captures, lowering %d, %ld launches, %ld syncs)",
     gi.captures, gi.region_lowering, launches, syncs);
  grace_ir_free(ir);
  grace_set_regions(vm, "nodes");
  ir = cond_prog(vm);
  is_int(run_calls(vm, ir, NULL, 6, 1, 1, &syncs, &launches), 0, "no nvJitLink, conditional nodes asked for: 6 calls run");
  grace_ir_graph_info(ir, &gi);
  ok(gi.managed && gi.ineligible[0] && gi.cond_nodes == 0 && gi.captures == 0 && gi.region_lowering == GRACE_REGION_HOST,
     "no nvJitLink, conditional nodes asked for: the program is not graphed, and the report says so (%s)", gi.ineligible);
  ok(launches <= 6, "no nvJitLink: a call replays at most the graph of the branch it takes (%ld launches)", launches);
  ok(syncs >= 6, "no nvJitLink: every call reads its predicate on the host (%ld synchronisations)", syncs);
  grace_ir_free(ir);
  grace_set_regions(vm, NULL);
  grace_set_graphs(vm, NULL);
}

/* The launch measurement of a program with a region (graphs "auto"): its eager candidate runs the region as a host
 * branch, each branch a program of its own. While the outer program times a call, its branches must not measure
 * their own strategies (their synchronisations and captures would be timed as the outer call's): every
 * "measuring" report before the outer program decides names the outer program. */
static const grace_ir *timing_outer;
static int timing_outer_reports, timing_inner_reports;
static void timing_progress(void *ud, const char *what) {
  (void)ud;
  const char *f = strstr(what, " for ");
  if (strncmp(what, "measuring ", 10) || !f || !timing_outer) return;
  grace_graph_info gi;
  grace_ir_graph_info((grace_ir *)timing_outer, &gi);
  if (gi.decided) return;
  if (!strncmp(f + 5, "cond_prog ", 10)) timing_outer_reports++;
  else timing_inner_reports++;
}

static void nested_timing(grace_vm *vm) {
  grace_set_graphs(vm, "auto");
  grace_ir *ir = cond_prog(vm);
  timing_outer = ir;
  timing_outer_reports = timing_inner_reports = 0;
  grace_set_progress(vm, timing_progress, NULL);
  long syncs = 0, launches = 0;
  is_int(run_calls(vm, ir, NULL, 120, 1, 1, &syncs, &launches), 0, "timing: 120 calls of a cond under graphs auto");
  grace_graph_info gi;
  grace_ir_graph_info(ir, &gi);
  ok(gi.decided && timing_outer_reports > 10, "timing: the program measured its candidates and decided (%d reports)",
     timing_outer_reports);
  is_int(timing_inner_reports, 0, "timing: no branch measured its own strategies inside those calls");
  grace_set_progress(vm, NULL, NULL);
  timing_outer = NULL;
  grace_ir_free(ir);
  grace_set_graphs(vm, NULL);
}

int main(void) {
  char dir[] = "/tmp/grace-condfake-XXXXXX";
  int rc = 0;
  grace_vm *vm = fake_vm_new(dir, &rc);
  if (!vm) return rc;
  cuda_ctx *fake = install_fake_cond(install_fake(vm));
  grace_set_regions(vm, "nodes");   /* conditional nodes only, but in no_link */
  const char *lw = cuda_link_why(fake);
  if (lw) printf("# conditional nodes not checked: %s\n", lw);
  else {
    linked_image(vm, fake);
    cond_graph(vm);
    cond_write_graph(vm);
    while_graph(vm);
    nested_graph(vm);
    bounded_graph(vm);
    nested_timing(vm);
  }
  grace_set_regions(vm, NULL);
  no_link(vm, fake);
  fake_vm_free(vm, dir);
  return tap_done();
}
