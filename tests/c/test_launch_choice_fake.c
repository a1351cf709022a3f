/* test_launch_choice_fake.c: the launch decision of a device program (gpu/gpu_graph_choice.c) on the fake driver,
 * with the time of each call programmed per strategy (install_fake_clock: the measurement reads a fake clock that
 * each synchronize advances by what the test says the call took). Checked: a fastest strategy with outliers in its
 * timed calls still wins by its median; the candidates are timed round-robin, one call each per round, each round
 * starting one further along; medians within the margin are a tie that the simpler strategy wins; the re-check
 * after GG_RECHECK_AFTER calls switches when the kept strategy became slower than the runner-up and keeps it when
 * not; the launch cache carries the decision and its measurements (and a re-check's switch) to a new program of
 * the same text. NVRTC compiles the kernels for real; without it the file skips. */
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include "grace.h"
#include "cuda/cuda_internal.h"
#include "gpu/gpu_graph_int.h"
#include "tap.h"

#include "c/fake_cuda.h"

/* ---- the timings: per strategy, microseconds a call; every `outlier`-th call of it takes 100 times that ---- */
static const grace_ir *timed_ir;
static double cost[GRACE_LAUNCH_NSTRATEGIES];
static int outlier[GRACE_LAUNCH_NSTRATEGIES];
static long charged[GRACE_LAUNCH_NSTRATEGIES];

/* The strategy whose graph exec x is (-1: none of the program's). */
static int strategy_of(CUgraphExec x) {
  const gpu_part *p = timed_ir ? gpu_ir_part(timed_ir) : NULL;
  for (int i = 0; p && i < p->ngr; i++)
    if (p->gr[i]->x == x) return (int)p->gr[i]->strat;
  return -1;
}

static double work(long kernels, CUgraphExec x) {
  int s = x ? strategy_of(x) : kernels ? GRACE_LAUNCH_EAGER : -1;
  if (s < 0) return 0;
  long n = ++charged[s];
  return outlier[s] && n % outlier[s] == 0 ? 100 * cost[s] : cost[s];
}

static void set_costs(double eager, double copies, double indirect) {
  cost[GRACE_LAUNCH_EAGER] = eager;
  cost[GRACE_LAUNCH_COPY] = copies;
  cost[GRACE_LAUNCH_INDIRECT] = indirect;
  memset(outlier, 0, sizeof outlier);
}

/* ---- the measuring calls, as progress reports them: (candidate, its call number), repeats of one dropped ---- */
static char seen_name[256][48];
static int seen_call[256], nseen;
static void on_progress(void *ud, const char *what) {   /* "measuring NAME for PROGRAM (call I of N)" */
  (void)ud;
  const char *f = strstr(what, " for "), *c = strstr(what, "(call ");
  int call = 0;
  if (strncmp(what, "measuring ", 10) || !f || !c || sscanf(c, "(call %d", &call) != 1) return;
  char name[48];
  snprintf(name, sizeof name, "%.*s", (int)(f - what - 10), what + 10);
  if (nseen && seen_call[nseen - 1] == call && !strcmp(seen_name[nseen - 1], name)) return;
  if (nseen < 256) { snprintf(seen_name[nseen], sizeof seen_name[nseen], "%s", name); seen_call[nseen++] = call; }
}

/* y = exp(x) / t + 1, x a device vector of n (each test its own n: its own program text, so its own cache entry) */
static grace_ir *prog(grace_vm *vm, int64_t n) {
  grace_ir *ir = grace_ir_new(vm, "choice");
  grace_value x, t, e, d, one, y;
  grace_status st = grace_ir_input(ir, GRACE_FLOAT32, GRACE_CUDA, 1, &n, &x);
  if (st == GRACE_OK) st = grace_ir_input(ir, GRACE_FLOAT64, GRACE_CPU, 0, NULL, &t);
  if (st == GRACE_OK) st = grace_ir_op(ir, GRACE_OP_EXP, 1, &x, NULL, 1, &e);
  if (st == GRACE_OK) st = grace_ir_op(ir, GRACE_OP_DIV, 2, (grace_value[]){e, t}, NULL, 1, &d);
  if (st == GRACE_OK) st = grace_ir_literal(ir, 1.0, 0, &one);
  if (st == GRACE_OK) st = grace_ir_op(ir, GRACE_OP_ADD, 2, (grace_value[]){d, one}, NULL, 1, &y);
  if (st == GRACE_OK) st = grace_ir_output(ir, y);
  if (st != GRACE_OK) { printf("# building the program: %s\n", grace_last_error(vm)); grace_ir_free(ir); return NULL; }
  timed_ir = ir;
  return ir;
}

/* Runs ir `calls` times on x; returns the calls that failed. */
static int run(grace_vm *vm, grace_ir *ir, grace_tensor *x, int calls) {
  int bad = 0;
  for (int i = 0; i < calls; i++) {
    grace_tensor *t = NULL, *out = NULL;
    grace_tensor_scalar(vm, 2.0, 0, &t);
    if (grace_ir_run(ir, 2, (grace_tensor *[]){x, t}, 1, &out) != GRACE_OK) {
      if (!bad) printf("# call %d: %s\n", i + 1, grace_last_error(vm));
      bad++;
    }
    grace_tensor_release(out);
    grace_tensor_release(t);
  }
  return bad;
}

static grace_tensor *dev_tensor(grace_vm *vm, int64_t n) {
  grace_tensor *t = NULL;
  grace_tensor_empty(vm, GRACE_FLOAT32, GRACE_CUDA, 1, &n, &t);
  return t;
}

static int near(double a, double b) { return fabs(a - b) <= 1e-6 * fabs(b); }

/* Enough calls for the first decision of a program without regions or library calls (3 candidates). */
enum { DECIDE_CALLS = 1 + 3 * (GG_ROUNDS + 3) };

/* The fastest strategy has outliers among its timed calls: its median still wins; and the order of the calls. */
static void noisy_fastest(grace_vm *vm) {
  set_costs(80, 50, 90);
  outlier[GRACE_LAUNCH_COPY] = 3;   /* every third call of graph+copies takes 5000 us */
  nseen = 0;
  grace_ir *ir = prog(vm, 1000);
  grace_tensor *x = dev_tensor(vm, 1000);
  is_int(run(vm, ir, x, DECIDE_CALLS), 0, "noisy: the calls run");
  grace_graph_info gi;
  grace_ir_graph_info(ir, &gi);
  ok(gi.decided && gi.chosen == GRACE_LAUNCH_COPY, "noisy: graph+copies kept (chosen %d)", (int)gi.chosen);
  ok(near(gi.us[GRACE_LAUNCH_COPY], 50) && near(gi.us[GRACE_LAUNCH_EAGER], 80) && near(gi.us[GRACE_LAUNCH_INDIRECT], 90),
     "noisy: the medians are the programmed times (%.1f %.1f %.1f)", gi.us[0], gi.us[1], gi.us[2]);
  const gpu_part *p = gpu_ir_part(ir);
  int big = 0;
  double sum = 0;
  for (int k = 0; k < p->samples[GRACE_LAUNCH_COPY]; k++) {
    big += p->samp[GRACE_LAUNCH_COPY][k] > 1000;
    sum += p->samp[GRACE_LAUNCH_COPY][k];
  }
  ok(big >= 2 && sum / p->samples[GRACE_LAUNCH_COPY] > 80,
     "noisy: %d of its timed calls were outliers (their mean %.0f us would lose to eager's 80)", big,
     sum / p->samples[GRACE_LAUNCH_COPY]);
  is_int(gi.samples[GRACE_LAUNCH_COPY], GG_ROUNDS, "noisy: each strategy timed GG_ROUNDS times");
  is_int(gi.samples[GRACE_LAUNCH_UPDATE], 0, "noisy: node updates not measured (no library call)");
  ok(gi.measure_calls <= 3 * (GG_ROUNDS + 2), "noisy: the measurement took %ld calls (bound %d)", gi.measure_calls,
     3 * (GG_ROUNDS + 2));

  /* the order: round r (call r of each candidate) complete before round r + 1 begins, each candidate once in each,
   * and the first of each round one further along than the previous round's */
  int rounds_ok = nseen == 3 * GG_ROUNDS, rotated = 1;
  for (int i = 0; rounds_ok && i < nseen; i++) {
    rounds_ok = seen_call[i] == i / 3 + 1;
    for (int j = i - i % 3; j < i && rounds_ok; j++) rounds_ok = strcmp(seen_name[j], seen_name[i]) != 0;
  }
  for (int r = 1; rounds_ok && r < GG_ROUNDS; r++) rotated &= strcmp(seen_name[3 * r], seen_name[3 * r - 3]) != 0;
  ok(rounds_ok, "order: %d measuring calls, round by round, each candidate once a round", nseen);
  ok(rounds_ok && rotated && !strcmp(seen_name[3], seen_name[1]), "order: each round starts one further along (%s, %s, %s)",
     seen_name[0], seen_name[3], seen_name[6]);
  grace_tensor_release(x);
  grace_ir_free(ir);
}

/* Medians within GG_MARGIN_PCT of the best are a tie: the simpler strategy is kept. */
static void tie(grace_vm *vm, int64_t n, double eager, double copies, double indirect, grace_launch_strategy want,
                const char *what) {
  set_costs(eager, copies, indirect);
  grace_ir *ir = prog(vm, n);
  grace_tensor *x = dev_tensor(vm, n);
  is_int(run(vm, ir, x, DECIDE_CALLS), 0, "%s: the calls run", what);
  grace_graph_info gi;
  grace_ir_graph_info(ir, &gi);
  ok(gi.decided && gi.chosen == want, "%s: strategy %d kept (got %d; %.1f %.1f %.1f us)", what, (int)want,
     (int)gi.chosen, gi.us[0], gi.us[1], gi.us[2]);
  grace_tensor_release(x);
  grace_ir_free(ir);
}

/* The kept strategy is re-checked once, GG_RECHECK_AFTER calls after the decision, against the runner-up. */
static void recheck(grace_vm *vm, int64_t n, int slower) {
  const char *what = slower ? "re-check (kept one slower now)" : "re-check (unchanged)";
  set_costs(80, 50, 90);
  grace_ir *ir = prog(vm, n);
  grace_tensor *x = dev_tensor(vm, n);
  int bad = run(vm, ir, x, DECIDE_CALLS);
  grace_graph_info gi;
  grace_ir_graph_info(ir, &gi);
  ok(gi.decided && gi.chosen == GRACE_LAUNCH_COPY, "%s: graph+copies kept at first", what);
  if (slower) cost[GRACE_LAUNCH_COPY] = 120;
  bad += run(vm, ir, x, GG_RECHECK_AFTER / 2);
  grace_ir_graph_info(ir, &gi);
  ok(gi.rechecks == 0 && !gi.checking && gi.recheck_pending && gi.chosen == GRACE_LAUNCH_COPY,
     "%s: no re-check before %d calls (one pending)", what,
     GG_RECHECK_AFTER);
  long eager0 = charged[GRACE_LAUNCH_EAGER], ind0 = charged[GRACE_LAUNCH_INDIRECT];
  bad += run(vm, ir, x, GG_RECHECK_AFTER / 2 + 2 * (GG_RECHECK_ROUNDS + 3) + 2);
  is_int(bad, 0, "%s: the calls run", what);
  grace_ir_graph_info(ir, &gi);
  ok(gi.rechecks == 1 && !gi.checking && !gi.recheck_pending, "%s: one re-check made, none pending", what);
  ok(charged[GRACE_LAUNCH_EAGER] > eager0 && charged[GRACE_LAUNCH_INDIRECT] == ind0,
     "%s: against the runner-up (eager) alone", what);
  is_int(gi.samples[GRACE_LAUNCH_COPY], GG_RECHECK_ROUNDS, "%s: the kept one timed again", what);
  is_int(gi.samples[GRACE_LAUNCH_INDIRECT], GG_ROUNDS, "%s: the others keep their first measurement", what);
  if (slower) {
    ok(gi.switches == 1 && gi.chosen == GRACE_LAUNCH_EAGER && near(gi.us[GRACE_LAUNCH_COPY], 120),
       "%s: switched to eager (graph+copies now %.1f us)", what, gi.us[GRACE_LAUNCH_COPY]);
    is_int(gi.graphs, 0, "%s: graph+copies' graphs dropped", what);
  } else {
    ok(gi.switches == 0 && gi.chosen == GRACE_LAUNCH_COPY, "%s: graph+copies kept", what);
  }
  grace_tensor_release(x);
  grace_ir_free(ir);
}

/* The launch cache: a new program of the same text starts decided with the earlier measurements, re-checks them
 * once, and stores a switch for the next one. */
static void cached(grace_vm *vm) {
  const int64_t n = 4000;
  set_costs(80, 50, 90);
  grace_ir *ir = prog(vm, n);
  grace_tensor *x = dev_tensor(vm, n);
  int bad = run(vm, ir, x, DECIDE_CALLS);
  grace_ir_free(ir);

  ir = prog(vm, n);
  nseen = 0;
  bad += run(vm, ir, x, 10);
  grace_graph_info gi;
  grace_ir_graph_info(ir, &gi);
  ok(gi.from_cache && gi.decided && gi.chosen == GRACE_LAUNCH_COPY && nseen == 0,
     "cache: the second program starts decided, nothing measured (%d measuring calls)", nseen);
  ok(near(gi.us[GRACE_LAUNCH_EAGER], 80) && near(gi.us[GRACE_LAUNCH_COPY], 50) && near(gi.us[GRACE_LAUNCH_INDIRECT], 90) &&
     gi.samples[GRACE_LAUNCH_COPY] == GG_ROUNDS && gi.samples[GRACE_LAUNCH_EAGER] == GG_ROUNDS,
     "cache: the medians and their timed calls come with it");
  cost[GRACE_LAUNCH_COPY] = 120;
  bad += run(vm, ir, x, GG_RECHECK_AFTER + 2 * (GG_RECHECK_ROUNDS + 3));
  grace_ir_graph_info(ir, &gi);
  ok(gi.rechecks == 1 && gi.switches == 1 && gi.chosen == GRACE_LAUNCH_EAGER,
     "cache: the cached decision is re-checked and switches");
  grace_ir_free(ir);

  ir = prog(vm, n);
  bad += run(vm, ir, x, 3);
  is_int(bad, 0, "cache: the calls run");
  grace_ir_graph_info(ir, &gi);
  ok(gi.from_cache && gi.chosen == GRACE_LAUNCH_EAGER && gi.rechecks == 1 && gi.switches == 1 &&
     near(gi.us[GRACE_LAUNCH_COPY], 120) && gi.samples[GRACE_LAUNCH_COPY] == GG_RECHECK_ROUNDS,
     "cache: the third program reads the switch and the re-checked measurements");
  grace_tensor_release(x);
  grace_ir_free(ir);
}

int main(void) {
  unsetenv("GRACE_GRAPHS");
  char dir[] = "/tmp/grace-choice-XXXXXX";
  int rc = 0;
  grace_vm *vm = fake_vm_new(dir, &rc);
  if (!vm) return rc;
  cuda_ctx *c = install_fake(vm);
  install_fake_clock(c, work);
  grace_set_progress(vm, on_progress, NULL);
  grace_set_graphs(vm, "auto");
  noisy_fastest(vm);
  tie(vm, 1100, 100, 98, 97.5, GRACE_LAUNCH_EAGER, "tie: eager within 3% of the best");
  tie(vm, 1200, 200, 100, 98, GRACE_LAUNCH_COPY, "tie: graph+copies within 3% of graph+indirection");
  tie(vm, 1300, 110, 120, 100, GRACE_LAUNCH_INDIRECT, "no tie: graph+indirection 9% faster");
  recheck(vm, 2000, 1);
  recheck(vm, 3000, 0);
  cached(vm);
  fake_vm_free(vm, dir);
  return tap_done();
}
