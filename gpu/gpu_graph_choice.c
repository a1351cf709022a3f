/* gpu_graph_choice.c: the launch decision of a device program (gpu_graph.c runs the calls it asks for): which
 * candidate (a strategy, and for a program with regions their lowering: gpu_graph_int.h) to time next, what to
 * keep once all are timed, the re-check of a kept decision, and the launch cache that carries a decision with its
 * measurements to later processes.
 *
 * What is timed: one whole call, the host waiting for the device before it and after it (cuda_sync), on the host's
 * clock. That is what a caller that reads each result sees, and what differs between the strategies: an eager call
 * pays a host launch per kernel, a graph call the table rewrite, its copies and one launch, so device time alone
 * (events) would hide most of the difference for the small programs where the choice matters. It is also what the
 * benchmark suite's latency is (a synchronize after each call).
 *
 * How: the candidates are timed round-robin, one call each per round, the order rotated by one each round, so a
 * drift of the device (clocks ramping up, temperature, a neighbour) and one-off stalls fall on every candidate
 * alike rather than on whichever ran in a block at the bad moment; and calls that are not steady are not timed (a
 * new layout's eager run, the call that records a graph, whose first launch also uploads it). Each candidate gets
 * GG_ROUNDS timed calls and is judged by their median, which a few outliers (a page fault, a preemption) do not
 * move. The lowest median wins, but a simpler candidate (eager before graph+copies before graph+indirection before
 * node updates; conditional nodes before predication) within GG_MARGIN_PCT of it is kept instead: between runs the
 * same strategy has differed by 3-8% (bench/RESULTS.md), so a smaller difference says nothing, and the simpler one
 * holds less graph memory and has fewer ways to go wrong.
 *
 * Programs inside a timed call: a region's branches run by the host branch (the eager candidate's lowering) are
 * programs of their own, with decisions of their own. While a call is timed they do not measure (they run decided,
 * or eagerly), since their synchronisations and captures would land in the outer program's time; and a timed call
 * during which any program compiled its kernels or captured a graph is not counted (gpu_graph.c: graph_timing,
 * graph_unsteady in the VM).
 *
 * Re-check: GG_RECHECK_AFTER calls after a decision (made now, or read from the launch cache), the kept candidate
 * and the runner-up (the next best median) are timed again, GG_RECHECK_ROUNDS calls each, interleaved; the same
 * rule picks between them, and a switch is logged and stored. Once per program per process: a decision made in a
 * cold moment (the device's clocks still low, another program's compile in the way) does not stay for good.
 *
 * The cost is bounded: the first measurement takes at most GG_NCAND * (GG_ROUNDS + 2) calls per input layout (each
 * candidate's timed calls, and at most two untimed: the layout's eager run, the capture; a program without regions
 * has at most four candidates, without library calls three), the re-check at most 2 * (GG_RECHECK_ROUNDS + 2); every
 * measuring call waits for the device before and after it. GRACE_LOG=launch prints each decision and re-check on stderr.
 *
 * Sizes: a program with symbolic sizes runs as a copy per size (gpu_exec.c), each a program of its own here, but the
 * decision is shared (gpu_share): the copies made before one has decided measure as above, and the first decision
 * (or a later re-check's) is published; a copy made after that starts decided with it from its second call (its
 * first runs eagerly, as every program's, which also tells whether it calls a library kernel) and measures nothing,
 * so the cost stays that of one measurement however many sizes a loop runs through. Where the shared candidate
 * cannot run in a copy (a lowering or a library kernel it lacks at those sizes, a capture that fails there), that
 * copy measures on its own and does not publish: its decision says nothing about the other sizes. The launch cache
 * keeps the shared decision under the symbolic program's text. */
#include <stdio.h>
#include <string.h>
#include "gpu/gpu_graph_int.h"

/* The median of v[0..n) (n <= GG_ROUNDS), v left as it was. */
static double median(const double *v, int n) {
  double t[GG_ROUNDS];
  memcpy(t, v, sizeof *t * (size_t)n);
  for (int i = 1; i < n; i++)
    for (int j = i; j > 0 && t[j - 1] > t[j]; j--) { double x = t[j]; t[j] = t[j - 1]; t[j - 1] = x; }
  return n % 2 ? t[n / 2] : 0.5 * (t[n / 2 - 1] + t[n / 2]);
}

const char *const gg_strategy_names[GRACE_LAUNCH_NSTRATEGIES] = {"eager", "graph+copies", "graph+indirection",
                                                                 "graph+node updates"};

const char *gg_cand_name(int k, char *buf, size_t n) {
  snprintf(buf, n, "%s%s", gg_strategy_names[gg_strat(k)], gg_pred(k) ? " (regions predicated)" : "");
  return buf;
}

/* How simple candidate k is (lower: simpler), for ties within the margin. */
static int simplicity(int k) { return 2 * (int)gg_strat(k) + gg_pred(k); }

static int runnable(const gpu_part *p, int k) { return !p->why[k][0]; }

/* Of the candidates of the measurement that can run and were timed: the lowest median, or the simplest within
 * GG_MARGIN_PCT of it; -1 when none was timed. */
static int pick(const gpu_part *p) {
  int best = -1;
  for (int k = 0; k < GG_NCAND; k++)
    if (p->want[k] && runnable(p, k) && p->nstat[k] && (best < 0 || p->best[k] < p->best[best])) best = k;
  int keep = best;
  for (int k = 0; best >= 0 && k < GG_NCAND; k++)
    if (p->want[k] && runnable(p, k) && p->nstat[k] && simplicity(k) < simplicity(keep) &&
        p->best[k] <= p->best[best] * (1.0 + GG_MARGIN_PCT / 100.0))
      keep = k;
  return keep;
}

/* The medians of the measurement (all: every one known), for the log: "eager 80.1 us (9), graph+copies 50.0 us (9)". */
static void medians(const gpu_part *p, int all, char *buf, size_t n) {
  size_t at = 0;
  buf[0] = 0;
  for (int k = 0; k < GG_NCAND && at < n; k++) {
    if (!(all || p->want[k]) || !p->nstat[k]) continue;
    char nm[64];
    int w = snprintf(buf + at, n - at, "%s%s %.1f us (%d)", at ? ", " : "", gg_cand_name(k, nm, sizeof nm), p->best[k],
                     p->nstat[k]);
    if (w < 0) break;
    at += (size_t)w;
  }
}

/* The launch cache's key: the program's text, or for a specialisation the symbolic program's (one decision for all
 * its sizes). */
static grace_ir *cache_key(grace_ir *ir, const gpu_part *p) { return p->share ? p->share->symbolic : ir; }

/* Keeps the decision: in the launch cache, and for a specialisation in the decision its siblings share. A
 * specialisation that could not run the shared decision keeps its own to itself. */
static void store(grace_ir *ir, gpu_part *p) {
  gpu_share *sh = p->share;
  if (sh && !p->shares) return;
  gg_decision dc;
  memset(&dc, 0, sizeof dc);
  dc.magic = GG_DECISION_MAGIC;
  dc.chosen = p->chosen;
  for (int k = 0; k < GG_NCAND; k++)
    if (p->nstat[k]) dc.us[k] = p->best[k], dc.n[k] = p->nstat[k];
  dc.rechecks = p->rechecks;
  dc.switches = p->switches;
  if (sh) {
    sh->decided = 1;
    sh->dc = dc;
    snprintf(sh->by, sizeof sh->by, "%.63s", sh->running && sh->running[0] ? sh->running : "a specialisation");
  }
  cuda_graph_decision_store(gpu_ctx(ir->vm), grace_ir_text(cache_key(ir, p)), &dc, sizeof dc);
}

/* For the log: the program's name, and a specialisation's sizes ("dyn at s1=8"). */
static const char *who(const grace_ir *ir, const gpu_part *p, char *buf, size_t n) {
  const char *at = p->share ? p->share->running : NULL;
  snprintf(buf, n, "%s%s%s", ir->name, at && at[0] ? " at " : "", at ? at : "");
  return buf;
}

/* For the log: where a shared decision came from ("the launch cache", "the specialisation at s1=8"). */
static const char *source(const char *by, char *buf, size_t n) {
  snprintf(buf, n, "%s%s", strncmp(by, "the ", 4) ? "the specialisation at " : "", by);
  return buf;
}

/* Starts decided with dc (read from the launch cache or a sibling specialisation's). */
static void adopt(gpu_part *p, const gg_decision *dc) {
  p->decided = 1;
  p->chosen = dc->chosen;
  p->rechecks = dc->rechecks;
  p->switches = dc->switches;
  for (int k = 0; k < GG_NCAND; k++) p->best[k] = dc->us[k], p->nstat[k] = dc->us[k] > 0 ? dc->n[k] : 0, p->want[k] = 0;
}

static int valid(const gg_decision *dc) {
  return dc->magic == GG_DECISION_MAGIC && dc->chosen >= 0 && dc->chosen < GG_NCAND;
}

/* Starts a measurement of the candidates in[] (those that can run), `target` timed calls each. */
static void begin(gpu_part *p, const int *in, int target) {
  for (int k = 0; k < GG_NCAND; k++) p->want[k] = in[k] && runnable(p, k), p->samples[k] = 0;
  p->target = target;
}

void gg_choice_init(grace_ir *ir, gpu_part *p) {
  cuda_ctx *c = gpu_ctx(ir->vm);
  p->shares = p->share != NULL;
  if (p->mode != -1 || p->inel[0] || !c) return;
  gg_decision dc;
  gpu_share *sh = p->share;
  if (sh && !sh->loaded) {   /* the symbolic program's decision from an earlier process, for every size */
    sh->loaded = 1;
    if (cuda_graph_decision_load(c, grace_ir_text(sh->symbolic), &dc, sizeof dc) && valid(&dc)) {
      sh->decided = 1;
      sh->dc = dc;
      snprintf(sh->by, sizeof sh->by, "the launch cache");
    }
  }
  /* a specialisation measures from its second call unless gg_choice_inherit finds a decision it can take */
  if (!sh && cuda_graph_decision_load(c, grace_ir_text(ir), &dc, sizeof dc) && valid(&dc) && runnable(p, dc.chosen)) {
    adopt(p, &dc);
    p->from_cache = 1;
    if (vm_log_wants("launch")) {
      char m[512], a[64];
      medians(p, 1, m, sizeof m);
      fprintf(stderr, "grace launch: %s: %s from the launch cache (re-checked %d times, %d switched); medians (timed "
              "calls): %s\n", ir->name, gg_cand_name(p->chosen, a, sizeof a), p->rechecks, p->switches, m);
    }
    return;
  }
  int all[GG_NCAND];
  for (int k = 0; k < GG_NCAND; k++) all[k] = 1;
  begin(p, all, GG_ROUNDS);
}

/* The shared decision (candidate k, made by `by`) cannot run in this specialisation: it measures, from scratch,
 * and keeps what it finds to itself. */
static void refuse(grace_ir *ir, gpu_part *p, int k, const char *by) {
  if (vm_log_wants("launch")) {
    char a[64], w[160], f[96];
    fprintf(stderr, "grace launch: %s: %s, decided by %s, cannot run here (%s): measuring\n", who(ir, p, w, sizeof w),
            gg_cand_name(k, a, sizeof a), source(by, f, sizeof f), p->why[k]);
  }
  p->decided = p->inherited = p->shares = p->from_cache = 0;
  p->rechecks = p->switches = 0;
  p->by[0] = 0;
  int all[GG_NCAND];
  for (int j = 0; j < GG_NCAND; j++) all[j] = 1, p->best[j] = 0, p->nstat[j] = 0;
  begin(p, all, GG_ROUNDS);
}

void gg_choice_inherit(grace_ir *ir, gpu_part *p) {
  gpu_share *sh = p->share;
  if (!sh || !sh->decided || p->decided || p->mode != -1 || p->inel[0]) return;
  if (!runnable(p, sh->dc.chosen)) { refuse(ir, p, sh->dc.chosen, sh->by); return; }
  adopt(p, &sh->dc);
  p->inherited = 1;
  p->from_cache = !strcmp(sh->by, "the launch cache");
  p->decided_at = p->calls;
  snprintf(p->by, sizeof p->by, "%s", sh->by);
  if (vm_log_wants("launch")) {
    char m[512], a[64], w[160], f[96];
    medians(p, 1, m, sizeof m);
    fprintf(stderr, "grace launch: %s: %s inherited from %s, nothing measured; its medians (timed calls): %s\n",
            who(ir, p, w, sizeof w), gg_cand_name(p->chosen, a, sizeof a), source(p->by, f, sizeof f), m);
  }
}

int gg_choice_refused(grace_ir *ir, gpu_part *p, int k) {
  if (!p->inherited || k != p->chosen || p->checking) return 0;
  refuse(ir, p, k, p->by);
  return 1;
}

/* The decision is due a re-check: against the runner-up, the candidate other than the kept one with the lowest
 * median; nothing to do where there is none. */
static void start_recheck(grace_ir *ir, gpu_part *p) {
  p->checked = 1;
  int rival = -1;
  for (int k = 0; k < GG_NCAND; k++)
    if (k != p->chosen && runnable(p, k) && p->nstat[k] && (rival < 0 || p->best[k] < p->best[rival])) rival = k;
  if (rival < 0) return;
  int in[GG_NCAND] = {0};
  in[p->chosen] = in[rival] = 1;
  begin(p, in, GG_RECHECK_ROUNDS);
  p->checking = 1;
  if (vm_log_wants("launch")) {
    char a[64], b[64], w[160];
    fprintf(stderr, "grace launch: %s: re-checking %s (%.1f us) against %s (%.1f us) after %ld calls\n",
            who(ir, p, w, sizeof w),
            gg_cand_name(p->chosen, a, sizeof a), p->best[p->chosen], gg_cand_name(rival, b, sizeof b),
            p->best[rival], p->calls - 1);
  }
}

int gg_choice_next(grace_ir *ir, gpu_part *p) {
  if (p->decided && !p->checking) {
    if (p->mode != -1 || p->checked || p->calls - p->decided_at <= GG_RECHECK_AFTER) return -1;
    start_recheck(ir, p);
    if (!p->checking) return -1;
  }
  /* round m is the one the least-timed candidate is in; it starts m places further along the candidates */
  int ks[GG_NCAND], n = 0, m = -1;
  for (int k = 0; k < GG_NCAND; k++)
    if (p->want[k] && runnable(p, k)) {
      ks[n++] = k;
      if (m < 0 || p->samples[k] < m) m = p->samples[k];
    }
  if (n == 0 || m >= p->target) return -1;
  for (int j = 0; j < n; j++)
    if (p->samples[ks[(m + j) % n]] == m) return ks[(m + j) % n];
  return -1;
}

/* Every candidate of the measurement is timed (or refused): keep one, drop the others' graphs, store. */
static void finish(grace_ir *ir, gpu_part *p) {
  int keep = pick(p);
  char m[512], a[64], b[64], w[160];
  int log = vm_log_wants("launch");
  if (log) medians(p, 0, m, sizeof m), who(ir, p, w, sizeof w);
  if (!p->decided) {
    p->decided = 1;
    p->decided_at = p->calls;
    p->chosen = keep >= 0 ? keep : GRACE_LAUNCH_EAGER;   /* none timed: every candidate refused */
    if (log)
      fprintf(stderr, "grace launch: %s: kept %s after %ld measuring calls; medians (timed calls): %s\n", w,
              gg_cand_name(p->chosen, a, sizeof a), p->measure_calls, keep >= 0 ? m : "none");
  } else {
    p->checking = 0;
    p->rechecks++;
    int was = p->chosen;
    if (keep >= 0 && keep != was) p->chosen = keep, p->switches++;
    if (log && p->chosen != was)
      fprintf(stderr, "grace launch: %s: re-check switched from %s to %s; medians (timed calls): %s\n", w,
              gg_cand_name(was, a, sizeof a), gg_cand_name(p->chosen, b, sizeof b), m);
    else if (log)
      fprintf(stderr, "grace launch: %s: re-check kept %s; medians (timed calls): %s\n", w,
              gg_cand_name(was, a, sizeof a), m);
  }
  for (int k = 0; k < GG_NCAND; k++) p->want[k] = 0;
  gg_drop_graphs(ir->vm, p, p->chosen);
  if (keep >= 0) store(ir, p);
}

void gg_choice_after(grace_ir *ir, gpu_part *p, int k, double us) {
  if (us >= 0 && p->samples[k] < GG_ROUNDS) {
    p->samp[k][p->samples[k]++] = us;
    p->best[k] = median(p->samp[k], p->samples[k]);
    p->nstat[k] = p->samples[k];
  }
  if ((!p->decided || p->checking) && gg_choice_next(ir, p) < 0) finish(ir, p);
}

gpu_share *gpu_share_new(grace_ir *symbolic) {
  gpu_share *sh = vm_calloc(symbolic->vm, sizeof *sh);
  if (sh) sh->symbolic = symbolic;
  return sh;
}

void gpu_share_free(gpu_share *sh) {
  if (sh) vm_free(sh->symbolic->vm, sh, sizeof *sh);
}

void gpu_share_running(gpu_share *sh, const char *sizes) {
  if (sh) sh->running = sizes;
}
