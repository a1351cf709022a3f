/* gpu_graph_info.c: grace_ir_graph_info (grace.h), what a device program's launch measurement found: per strategy
 * its best median (with its timed calls) and why it cannot run, the re-checks of the decision, the graphs held and
 * their memory, and for a program with regions how each lowering of them measured and which one the calls use
 * (gpu_graph.c measures a graph strategy once per lowering its regions can take: gpu_graph_int.h's candidates). */
#include <stdio.h>
#include <string.h>
#include "gpu/gpu_graph_int.h"

/* Per strategy: the best of its candidates' medians, and why it cannot run (only when none of them can). */
static void strategies(const gpu_part *p, grace_graph_info *out) {
  for (int k = 0; k < GG_NCAND; k++) {
    int s = gg_strat(k);
    if (p->nstat[k] && (out->us[s] == 0 || p->best[k] < out->us[s])) out->us[s] = p->best[k], out->samples[s] = p->nstat[k];
  }
  for (int s = 0; s < GRACE_LAUNCH_NSTRATEGIES; s++) {
    int pk = s + GRACE_LAUNCH_NSTRATEGIES - 1;
    if (p->why[s][0] && (s == GRACE_LAUNCH_EAGER || p->why[pk][0])) memcpy(out->why[s], p->why[s], sizeof out->why[s]);
  }
}

/* Per lowering of the regions: the best measured, the one kept (-1 while measuring), and why predication is not kept
 * where a predicated capture failed (cuBLASLt in a body, a driver copy). */
static void lowerings(const gpu_part *p, grace_graph_info *out) {
  for (int k = 0; k < GG_NCAND; k++) {
    int l = gg_pred(k) ? GRACE_REGION_PRED : k == GRACE_LAUNCH_EAGER ? GRACE_REGION_HOST : GRACE_REGION_NODES;
    if (p->nstat[k] && (out->region_us[l] == 0 || p->best[k] < out->region_us[l])) out->region_us[l] = p->best[k];
  }
  out->region_lowering = !p->decided ? -1 : gg_pred(p->chosen) ? GRACE_REGION_PRED
                         : p->chosen == GRACE_LAUNCH_EAGER ? GRACE_REGION_HOST : GRACE_REGION_NODES;
  if (!out->pred_why[0] && out->region_lowering != GRACE_REGION_PRED)
    memcpy(out->pred_why, p->pred_fail, sizeof out->pred_why);
}

void grace_ir_graph_info(const grace_ir *ir, grace_graph_info *out) {
  if (!out) return;
  memset(out, 0, sizeof *out);
  out->region_lowering = -1;
  if (!ir) return;
  out->unfused = gpu_ir_unfused(ir, out->unfused_why, sizeof out->unfused_why);
  char lw[3][160];
  out->regions = gpu_ir_lowerings(ir, lw);
  memcpy(out->region_why, lw[GRACE_REGION_NODES], sizeof out->region_why);
  memcpy(out->pred_why, lw[GRACE_REGION_PRED], sizeof out->pred_why);
  const gpu_part *p = gpu_ir_part(ir);
  if (!p && out->regions && out->region_why[0] && out->pred_why[0]) {   /* kernel by kernel, regions as host branches */
    out->managed = 1;
    out->region_lowering = GRACE_REGION_HOST;
    snprintf(out->ineligible, sizeof out->ineligible, "its regions run as host branches (%.120s)", out->region_why);
  }
  if (!p) return;
  out->managed = 1;
  out->calls = p->calls;
  out->captures = p->captures;
  out->decided = p->decided;
  out->from_cache = p->from_cache;
  out->inherited = p->inherited;
  memcpy(out->decided_by, p->by, sizeof out->decided_by);
  out->chosen = gg_strat(p->chosen);
  out->rechecks = p->rechecks;
  out->switches = p->switches;
  out->checking = p->checking;
  out->recheck_pending = p->mode == -1 && !p->inel[0] && !p->checked;
  out->measure_calls = p->measure_calls;
  memcpy(out->ineligible, p->inel, sizeof out->ineligible);
  strategies(p, out);
  if (out->regions) lowerings(p, out);
  if (out->regions && p->inel[0]) out->region_lowering = GRACE_REGION_HOST;
  out->graphs = p->ngr;
  if (ir->vm->cuda) out->arena_bytes = cuda_graph_arena_bytes(ir->vm->cuda);
  const gg_graph *last = NULL;
  for (int i = 0; i < p->ngr; i++) {
    const gg_graph *g = p->gr[i];
    out->table_bytes += sizeof(uint64_t) * GG_WORDS;
    out->graph_bytes += cuda_capture_bytes(g->cap);
    int kept = g->strat == gg_strat(p->chosen) && g->pred == gg_pred(p->chosen);
    if ((!p->decided || kept) && (!last || g->used > last->used)) last = g;
  }
  out->graph_bytes += out->table_bytes;
  if (last) {
    out->kernels = last->nkernels;
    out->cond_nodes = last->ncond;
    out->indirect_words = last->ndyn;
    out->node_updates = cuda_graph_updates_nodes(last->upd);
    out->copy_bytes = last->copy_bytes;
    out->replays = last->nreplay;
    out->replay_host_us_min = last->replay_us_min;
    out->replay_host_us_mean = last->nreplay ? last->replay_us_sum / (double)last->nreplay : 0;
  }
}
