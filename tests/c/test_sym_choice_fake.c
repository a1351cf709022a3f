/* test_sym_choice_fake.c: the launch decision of a device program with symbolic sizes (gpu/gpu_exec.c runs it as
 * copies specialised per size; gpu/gpu_graph_choice.c shares one decision between them) on the fake driver, with
 * the time of each call programmed per strategy (install_fake_clock: eager 80 us, graph+copies 50, graph+indirection
 * 55, so graph+copies is kept and graph+indirection is the runner-up). Checked: the first size measures as a program of
 * fixed sizes does; 63 later sizes start decided with its strategy (inherited, decided by "s1=2") and measure
 * nothing, so the measuring calls of all 64 sizes are the first one's; every call runs and returns its size; the
 * graphs held stay at one per kept copy (at most 4); a size where the shared strategy cannot run (graph
 * instantiation failing) measures on its own and keeps its decision to itself; a re-check of an inherited decision
 * that switches is what later sizes inherit; a new program of the same text takes the decision from the launch cache
 * (keyed by the symbolic program) at its first size. NVRTC compiles the kernels for real; without it the file skips. */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include "grace.h"
#include "cuda/cuda_graph.h"
#include "cuda/cuda_internal.h"
#include "gpu/gpu_graph_int.h"
#include "tap.h"

#include "c/fake_cuda.h"

static long graphs_alive;
static int fail_inst;   /* graph instantiation fails, as when the device is out of memory */
static CUresult count_inst(CUgraphExec *x, CUgraph g, unsigned long long fl) {
  if (fail_inst) return 2;   /* CUDA_ERROR_OUT_OF_MEMORY */
  CUresult r = f_inst(x, g, fl);
  if (!r) graphs_alive++;
  return r;
}
static CUresult count_destroy(CUgraphExec x) {
  graphs_alive--;
  return f_gxdestroy(x);
}

/* microseconds a call per strategy; which strategy a replayed graph exec is: looked up in the copies of sym */
static double cost[GRACE_LAUNCH_NSTRATEGIES] = {80, 50, 55, 0};
static grace_ir *sym;
static double work(long kernels, CUgraphExec x) {
  grace_ir *s;
  for (int k = 0; x && sym && (s = grace_ir_specialization(sym, k, NULL, 0)); k++) {
    const gpu_part *p = gpu_ir_part(s);
    for (int i = 0; p && i < p->ngr; i++)
      if (p->gr[i]->x == x) return cost[p->gr[i]->strat];
  }
  return kernels ? cost[GRACE_LAUNCH_EAGER] : 0;
}

static long measuring;   /* measuring calls, as progress reports them (one report each) */
static void on_progress(void *ud, const char *what) {
  (void)ud;
  measuring += !strncmp(what, "measuring ", 10);
}

static const char *text = "func @dyn {\n"
                          "  sym s1 hint=8 min=2\n"
                          "  %0 = input #0 : f32[s1=8] cuda\n"
                          "  %1 = exp %0 : f32[s1=8] cuda\n"
                          "  %2 = neg %1 : f32[s1=8] cuda\n"
                          "  return %2\n"
                          "}\n";

/* Runs ir `calls` times at size n; returns the calls that failed or returned another size. */
static int run_at(grace_vm *vm, grace_ir *ir, int64_t n, int calls) {
  grace_tensor *x = NULL;
  if (grace_tensor_empty(vm, GRACE_FLOAT32, GRACE_CUDA, 1, &n, &x) != GRACE_OK) return calls;
  int bad = 0;
  for (int i = 0; i < calls; i++) {
    grace_tensor *out = NULL;
    if (grace_ir_run(ir, 1, &x, 1, &out) != GRACE_OK) {
      if (!bad) printf("# size %lld: %s\n", (long long)n, grace_last_error(vm));
      bad++;
    } else if (grace_tensor_sizes(out)[0] != n) bad++;
    grace_tensor_release(out);
  }
  grace_tensor_release(x);
  return bad;
}

/* The launch figures of the copy kept for size n (0 when none is kept). */
static int info_at(grace_ir *ir, int64_t n, grace_graph_info *gi) {
  char want[32], sizes[64];
  snprintf(want, sizeof want, "s1=%lld", (long long)n);
  grace_ir *s;
  for (int k = 0; (s = grace_ir_specialization(ir, k, sizes, sizeof sizes)); k++)
    if (!strcmp(sizes, want)) { grace_ir_graph_info(s, gi); return 1; }
  memset(gi, 0, sizeof *gi);
  return 0;
}

/* Enough calls for a first decision of a program without regions or library calls (3 candidates). */
enum { DECIDE_CALLS = 1 + 3 * (GG_ROUNDS + 3) };

int main(void) {
  unsetenv("GRACE_GRAPHS");
  unsetenv("GRACE_GRAPH_MEM");
  setenv("GRACE_GRAPH_LIMIT", "2", 1);
  char dir[] = "/tmp/grace-symchoice-XXXXXX";
  int rc = 0;
  grace_vm *vm = fake_vm_new(dir, &rc);
  if (!vm) return rc;
  cuda_ctx *fake = install_fake(vm);
  fake->fn.cuGraphInstantiateWithFlags = count_inst;
  fake->fn.cuGraphExecDestroy = count_destroy;
  install_fake_clock(fake, work);
  grace_set_progress(vm, on_progress, NULL);
  grace_set_graphs(vm, "auto");

  grace_ir *ir = NULL;
  ok(grace_ir_parse(vm, text, &ir) == GRACE_OK, "a device program with a symbolic size parses: %s", grace_last_error(vm));
  if (!ir) return tap_done();
  sym = ir;

  /* the first size measures as today */
  int bad = run_at(vm, ir, 2, DECIDE_CALLS);
  grace_graph_info gi;
  info_at(ir, 2, &gi);
  long first = gi.measure_calls;
  ok(gi.decided && !gi.inherited && gi.chosen == GRACE_LAUNCH_COPY && first > 0 && first <= 3 * (GG_ROUNDS + 2),
     "the first size measures and keeps graph+copies (%ld measuring calls, chosen %d)", first, (int)gi.chosen);
  /* GG_ROUNDS timed calls of each of the 3 candidates, the layout's eager run before the first capture, and one
   * capture per graph strategy */
  is_int(first, 3 * GG_ROUNDS + 1 + 2, "the first size's measurement takes %d calls", 3 * GG_ROUNDS + 3);
  is_int(measuring, first, "its measuring calls are all there were");

  /* 63 more sizes, three calls each, as a decoder whose length grows each step */
  int inherit_ok = 0, replayed = 0;
  long most = 0;
  for (int64_t n = 3; n < 66; n++) {
    bad += run_at(vm, ir, n, 3);
    if (graphs_alive > most) most = graphs_alive;
    info_at(ir, n, &gi);
    inherit_ok += gi.decided && gi.inherited && gi.chosen == GRACE_LAUNCH_COPY && gi.measure_calls == 0 &&
                  !strcmp(gi.decided_by, "s1=2") && !gi.from_cache;
    replayed += gi.graphs == 1 && gi.replays >= 1;
  }
  is_int(bad, 0, "64 sizes: every call runs and returns its size");
  is_int(inherit_ok, 63, "the 63 later sizes start decided with graph+copies, inherited from s1=2, nothing measured");
  is_int(replayed, 63, "each of them records one graph and replays it within its three calls");
  is_int(measuring, first, "the measuring calls of all 64 sizes are the first size's (%ld)", first);
  ok(most <= 4, "graphs held at once: at most one per kept copy, 4 (%ld)", most);

  /* a size where the shared strategy cannot run measures on its own */
  fail_inst = 1;
  long m0 = measuring;
  bad = run_at(vm, ir, 70, DECIDE_CALLS);
  fail_inst = 0;
  info_at(ir, 70, &gi);
  ok(gi.decided && !gi.inherited && gi.chosen == GRACE_LAUNCH_EAGER && gi.measure_calls > 0 && gi.why[GRACE_LAUNCH_COPY][0],
     "a size whose graphs cannot be made measures (%ld calls) and keeps eager (graph+copies: %s)", gi.measure_calls,
     gi.why[GRACE_LAUNCH_COPY]);
  ok(measuring > m0, "its measuring calls are counted");
  bad += run_at(vm, ir, 71, 3);
  info_at(ir, 71, &gi);
  ok(gi.inherited && gi.chosen == GRACE_LAUNCH_COPY && !strcmp(gi.decided_by, "s1=2"),
     "it keeps its decision to itself: the next size inherits graph+copies from s1=2 (by %s)", gi.decided_by);

  /* a re-check of an inherited decision may switch; later sizes inherit the switch */
  cost[GRACE_LAUNCH_COPY] = 120;
  bad += run_at(vm, ir, 80, 1 + GG_RECHECK_AFTER + 2 * (GG_RECHECK_ROUNDS + 3) + 2);
  info_at(ir, 80, &gi);
  ok(gi.inherited && gi.rechecks == 1 && gi.switches == 1 && gi.chosen == GRACE_LAUNCH_INDIRECT,
     "an inherited decision is re-checked after %d calls and switches to graph+indirection", GG_RECHECK_AFTER);
  bad += run_at(vm, ir, 81, 3);
  info_at(ir, 81, &gi);
  ok(gi.inherited && gi.chosen == GRACE_LAUNCH_INDIRECT && !strcmp(gi.decided_by, "s1=80") && gi.measure_calls == 0,
     "the next size inherits the switch from s1=80 (by %s)", gi.decided_by);
  is_int(bad, 0, "those calls run and return their sizes");
  grace_ir_free(ir);
  sym = NULL;
  is_int(graphs_alive, 0, "the program gone, no graph is left");

  /* the launch cache keys the decision by the symbolic program: a new program of the same text, any size */
  ok(grace_ir_parse(vm, text, &ir) == GRACE_OK, "the program again");
  if (!ir) return tap_done();
  sym = ir;
  m0 = measuring;
  is_int(run_at(vm, ir, 33, 3), 0, "its first size runs");
  info_at(ir, 33, &gi);
  ok(gi.inherited && gi.from_cache && gi.chosen == GRACE_LAUNCH_INDIRECT && !strcmp(gi.decided_by, "the launch cache") &&
     measuring == m0, "its first size starts decided from the launch cache, nothing measured (by %s)", gi.decided_by);
  grace_ir_free(ir);
  sym = NULL;

  grace_set_graphs(vm, NULL);
  fake_vm_free(vm, dir);
  return tap_done();
}
