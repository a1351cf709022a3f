/* lgrace_report.c: grace.report(f) and f:report(): how each device program of a compiled function runs (the
 * launch strategy chosen and what each measured, kernels, bytes copied per call, graph memory), read from the
 * core's grace_ir_graph_info of each entry and replay path (gpu/gpu_graph.c), and of each size a program with
 * symbolic sizes keeps a specialised copy for (grace_ir_specialization, gpu/gpu_exec.c). */
#include <stdio.h>
#include <string.h>
#include "lua/lgrace_tensor.h"

static const char *const launch_names[GRACE_LAUNCH_NSTRATEGIES] = {"eager", "graph+copies", "graph+indirection",
                                                                         "graph+node updates"};

static const char *const lowering_names[3] = {"host branch", "conditional nodes", "predication"};
static const char *const lowering_keys[3] = {"host", "nodes", "pred"};

/* How the program's regions run now: in its graph as conditional nodes or predicated, or as host branches (the
 * eager strategy is the host branch, measured against the graphs). */
static const char *region_lowering(const grace_graph_info *gi) {
  return gi->region_lowering >= 0 && gi->region_lowering < 3 ? lowering_names[gi->region_lowering] : "measuring";
}

/* Pushes one program's launch figures as a table. */
static void push_graph_info(lua_State *L, const grace_graph_info *gi, int entry, int path, int partition,
                            const char *sizes, int outputs) {
  lua_createtable(L, 0, 16);
  lua_pushinteger(L, entry); lua_setfield(L, -2, "entry");
  if (sizes[0]) { lua_pushstring(L, sizes); lua_setfield(L, -2, "sizes"); }
  if (path) { lua_pushinteger(L, path); lua_setfield(L, -2, "path"); }
  if (partition) { lua_pushinteger(L, partition); lua_setfield(L, -2, "partition"); }
  lua_pushinteger(L, outputs); lua_setfield(L, -2, "outputs");
  lua_pushboolean(L, gi->managed); lua_setfield(L, -2, "on_device");
  lua_pushinteger(L, gi->calls); lua_setfield(L, -2, "calls");
  lua_pushinteger(L, gi->captures); lua_setfield(L, -2, "captures");
  lua_pushboolean(L, gi->decided); lua_setfield(L, -2, "decided");
  lua_pushboolean(L, gi->from_cache); lua_setfield(L, -2, "from_cache");
  lua_pushboolean(L, gi->inherited); lua_setfield(L, -2, "inherited");
  if (gi->inherited) { lua_pushstring(L, gi->decided_by); lua_setfield(L, -2, "decided_by"); }
  lua_pushstring(L, gi->ineligible[0] ? "eager" : gi->decided ? launch_names[gi->chosen] : "measuring");
  lua_setfield(L, -2, "strategy");
  if (gi->ineligible[0]) { lua_pushstring(L, gi->ineligible); lua_setfield(L, -2, "no_graph"); }
  lua_pushinteger(L, gi->unfused); lua_setfield(L, -2, "unfused");
  if (gi->unfused) { lua_pushstring(L, gi->unfused_why); lua_setfield(L, -2, "unfused_why"); }
  lua_createtable(L, 0, 3);
  for (int k = 0; k < GRACE_LAUNCH_NSTRATEGIES; k++)
    if (gi->us[k] > 0) { lua_pushnumber(L, gi->us[k]); lua_setfield(L, -2, launch_names[k]); }
  lua_setfield(L, -2, "us");
  lua_createtable(L, 0, 3);   /* the timed calls behind each median */
  for (int k = 0; k < GRACE_LAUNCH_NSTRATEGIES; k++)
    if (gi->us[k] > 0) { lua_pushinteger(L, gi->samples[k]); lua_setfield(L, -2, launch_names[k]); }
  lua_setfield(L, -2, "samples");
  lua_pushinteger(L, gi->rechecks); lua_setfield(L, -2, "rechecks");
  lua_pushinteger(L, gi->switches); lua_setfield(L, -2, "switches");
  lua_pushboolean(L, gi->checking); lua_setfield(L, -2, "checking");
  lua_pushboolean(L, gi->recheck_pending); lua_setfield(L, -2, "recheck_pending");
  lua_pushinteger(L, gi->measure_calls); lua_setfield(L, -2, "measure_calls");
  lua_createtable(L, 0, 3);
  for (int k = 0; k < GRACE_LAUNCH_NSTRATEGIES; k++)
    if (gi->why[k][0]) { lua_pushstring(L, gi->why[k]); lua_setfield(L, -2, launch_names[k]); }
  lua_setfield(L, -2, "unavailable");
  lua_pushinteger(L, gi->graphs); lua_setfield(L, -2, "graphs");
  lua_pushinteger(L, gi->kernels); lua_setfield(L, -2, "kernels");
  lua_pushinteger(L, gi->indirect_words); lua_setfield(L, -2, "indirect_words");
  lua_pushinteger(L, gi->node_updates); lua_setfield(L, -2, "node_updates");
  lua_pushinteger(L, (lua_Integer)gi->graph_bytes); lua_setfield(L, -2, "graph_bytes");
  lua_pushinteger(L, (lua_Integer)gi->table_bytes); lua_setfield(L, -2, "table_bytes");
  lua_pushinteger(L, (lua_Integer)gi->arena_bytes); lua_setfield(L, -2, "arena_bytes");
  lua_pushinteger(L, (lua_Integer)gi->copy_bytes); lua_setfield(L, -2, "copy_bytes");
  lua_pushinteger(L, gi->replays); lua_setfield(L, -2, "replays");
  lua_pushnumber(L, gi->replay_host_us_min); lua_setfield(L, -2, "replay_host_us_min");
  lua_pushnumber(L, gi->replay_host_us_mean); lua_setfield(L, -2, "replay_host_us_mean");
  if (gi->regions) {   /* how its cond / while_loop regions run */
    lua_pushinteger(L, gi->regions); lua_setfield(L, -2, "regions");
    lua_pushinteger(L, gi->cond_nodes); lua_setfield(L, -2, "cond_nodes");
    lua_pushstring(L, region_lowering(gi)); lua_setfield(L, -2, "region_lowering");
    if (gi->region_why[0]) { lua_pushstring(L, gi->region_why); lua_setfield(L, -2, "region_why"); }
    if (gi->pred_why[0]) { lua_pushstring(L, gi->pred_why); lua_setfield(L, -2, "pred_why"); }
    lua_createtable(L, 0, 3);   /* the best measured per lowering, microseconds per call */
    for (int l = 0; l < 3; l++)
      if (gi->region_us[l] > 0) { lua_pushnumber(L, gi->region_us[l]); lua_setfield(L, -2, lowering_keys[l]); }
    lua_setfield(L, -2, "region_times");
  }
}

/* A device program of a compiled function: its launch figures, its entry, path and partition (0: not one). */
typedef struct program_info {
  grace_graph_info gi;
  int entry, path, partition;
  int outputs;                    /* tensors it hands back */
  char sizes[96];                 /* a copy specialised to these sizes of a program with symbolic sizes ("": none) */
} program_info;

enum { MAX_SPECIALIZATIONS = 16 };   /* read per program (the device keeps fewer) */

/* The device programs of the compiled function at index 1 (entries, paths of functions with breaks and their
 * partitions compiled into programs, copies specialised per size), in a
 * userdata pushed on the stack (collected with it); *n of them. */
static program_info *collect_programs(lua_State *L, int *n) {
  grace_fn *fn = lg_compiled_fn(L, 1, NULL);
  *n = 0;
  int ne = grace_fn_entry_count(fn), cap = 0;
  for (int k = 0; k < ne; k++) {
    int np;
    grace_fn_entry_ir(fn, k, NULL, NULL, &np);
    cap += (1 + np) * (1 + MAX_SPECIALIZATIONS);
    for (int j = 0; grace_fn_entry_partition(fn, k, j, NULL, NULL); j++) cap++;
  }
  program_info *p = lua_newuserdatauv(L, sizeof *p * (size_t)(cap ? cap : 1), 0);
  for (int k = 0; k < ne; k++) {
    grace_ir *const *paths;
    int np;
    grace_ir *ir0 = grace_fn_entry_ir(fn, k, NULL, &paths, &np);
    for (int j = -1; j < np; j++) {
      grace_ir *ir = j < 0 ? ir0 : paths[j];
      if (!ir) continue;
      for (int s = -1; s < MAX_SPECIALIZATIONS; s++) {   /* the program, then its copies per size */
        grace_ir *run = ir;
        p[*n].sizes[0] = 0;
        if (s >= 0 && !(run = grace_ir_specialization(ir, s, p[*n].sizes, sizeof p[*n].sizes))) break;
        grace_ir_graph_info(run, &p[*n].gi);
        if (!p[*n].gi.managed) continue;
        p[*n].entry = k + 1;
        p[*n].partition = 0;
        p[*n].outputs = grace_ir_count(run, "outputs");
        p[(*n)++].path = j + 1;
      }
    }
    int path, index;
    grace_ir *part;
    for (int j = 0; (part = grace_fn_entry_partition(fn, k, j, &path, &index)); j++) {
      grace_ir_graph_info(part, &p[*n].gi);
      p[*n].sizes[0] = 0;
      if (!p[*n].gi.managed) continue;
      p[*n].entry = k + 1;
      p[*n].outputs = grace_ir_count(part, "outputs");
      p[*n].path = path + 1;
      p[(*n)++].partition = index + 1;
    }
  }
  return p;
}

/* Pushes the list of f:report() for programs p[0..n). */
static void push_programs(lua_State *L, const program_info *p, int n) {
  lua_createtable(L, n, 0);
  for (int i = 0; i < n; i++) {
    push_graph_info(L, &p[i].gi, p[i].entry, p[i].path, p[i].partition, p[i].sizes, p[i].outputs);
    lua_rawseti(L, -2, i + 1);
  }
}

/* f:report(): a list with one table per device program of f (entries, and paths of functions with breaks). */
int lg_compiled_report(lua_State *L) {
  lg_compiled_fn(L, 1, NULL);
  lua_settop(L, 1);
  int n;
  const program_info *p = collect_programs(L, &n);
  push_programs(L, p, n);
  return 1;
}

/* grace.report(f): prints, per device program of compiled function f, the launch strategy chosen, what each
 * strategy measured, kernels, bytes copied per call and the graphs' memory; returns f:report()'s table. */
int lg_report(lua_State *L) {
  const char *name;
  lg_compiled_fn(L, 1, &name);
  lua_settop(L, 1);
  int n;
  const program_info *p = collect_programs(L, &n);
  push_programs(L, p, n);   /* the result, at index 3 */
  luaL_Buffer b;
  luaL_buffinit(L, &b);
  char line[512];
  snprintf(line, sizeof line, "grace.report: %s\n", name);
  luaL_addstring(&b, line);
  if (n == 0) luaL_addstring(&b, "  no program has run on the CUDA device yet\n");
  grace_fn_stats fs;
  grace_fn_get_stats(lg_compiled_fn(L, 1, NULL), &fs);
  if (fs.partitions) {
    snprintf(line, sizeof line, "  partitions between breaks: %d programs handing back %ld tensors, %ld more computed "
             "inside them only\n", fs.partitions, fs.partition_outputs, fs.partition_internal);
    luaL_addstring(&b, line);
  }
  if (fs.staged_bytes) {
    snprintf(line, sizeof line, "  host inputs staged to the device ahead of the programs: %ld bytes so far\n", fs.staged_bytes);
    luaL_addstring(&b, line);
  }
  if (fs.auto_regions) {
    snprintf(line, sizeof line, "  %d branch%s on a value read on the host became a cond region (both paths run as one "
             "program)\n", fs.auto_regions, fs.auto_regions == 1 ? "" : "es");
    luaL_addstring(&b, line);
  }
  if (fs.ahead_paths) {
    snprintf(line, sizeof line, "  %d branch path%s recorded before a call took %s (an early return that calls never "
             "took)\n", fs.ahead_paths, fs.ahead_paths == 1 ? "" : "s", fs.ahead_paths == 1 ? "it" : "them");
    luaL_addstring(&b, line);
  }
  if (fs.auto_why[0]) {
    snprintf(line, sizeof line, "  paths kept replayed: %.400s\n", fs.auto_why);
    luaL_addstring(&b, line);
  }
  for (int i = 0; i < n; i++) {
    const grace_graph_info *gi = &p[i].gi;
    char path[160] = "";
    if (p[i].partition)
      snprintf(path, sizeof path, " path %d partition %d (%d output%s)", p[i].path, p[i].partition, p[i].outputs,
               p[i].outputs == 1 ? "" : "s");
    else if (p[i].path) snprintf(path, sizeof path, " path %d", p[i].path);
    if (p[i].sizes[0]) snprintf(path + strlen(path), sizeof path - strlen(path), " at %s", p[i].sizes);
    const char *strategy = gi->ineligible[0] ? "eager" : gi->decided ? launch_names[gi->chosen] : "measuring";
    char from[128] = "";
    if (gi->inherited)
      snprintf(from, sizeof from, " (inherited from %s%s)", strncmp(gi->decided_by, "the ", 4) ? "the copy at " : "",
               gi->decided_by);
    else if (gi->from_cache) snprintf(from, sizeof from, " (measured by an earlier process: from the launch cache)");
    snprintf(line, sizeof line, "  program %d%s: %s%s after %ld calls; %d kernels per graph, %zu bytes copied per call, "
             "%d graphs holding %.1f KiB\n", p[i].entry, path, strategy, from, gi->calls, gi->kernels,
             gi->copy_bytes, gi->graphs, (double)gi->graph_bytes / 1024.0);
    luaL_addstring(&b, line);
    if (gi->rechecks || gi->checking || gi->measure_calls) {
      snprintf(line, sizeof line, "    %ld calls measured in this process; decision re-checked %d time%s (%d switched)%s\n",
               gi->measure_calls, gi->rechecks, gi->rechecks == 1 ? "" : "s", gi->switches,
               gi->checking ? ", a re-check under way" : "");
      luaL_addstring(&b, line);
    }
    if (gi->node_updates) {
      snprintf(line, sizeof line, "    %d library kernel node%s re-pointed per call (no copies for them)\n", gi->node_updates,
               gi->node_updates > 1 ? "s" : "");
      luaL_addstring(&b, line);
    }
    if (gi->ineligible[0]) {
      snprintf(line, sizeof line, "    no graph: %s\n", gi->ineligible);
      luaL_addstring(&b, line);
    }
    if (gi->unfused) {
      snprintf(line, sizeof line, "    %d fused group%s ran an op at a time (%s)\n", gi->unfused, gi->unfused > 1 ? "s" : "",
               gi->unfused_why);
      luaL_addstring(&b, line);
    }
    if (gi->regions) {
      snprintf(line, sizeof line, "    %d region%s (cond, while_loop): %s (eager is the host branch)\n", gi->regions,
               gi->regions > 1 ? "s" : "", region_lowering(gi));
      luaL_addstring(&b, line);
      for (int l = 0; l < 3; l++) {
        const char *why = l == GRACE_REGION_NODES ? gi->region_why : l == GRACE_REGION_PRED ? gi->pred_why : "";
        if (why[0]) snprintf(line, sizeof line, "      %-18s unavailable: %.160s\n", lowering_names[l], why);
        else if (gi->region_us[l] > 0) snprintf(line, sizeof line, "      %-18s %9.1f us\n", lowering_names[l], gi->region_us[l]);
        else continue;
        luaL_addstring(&b, line);
      }
    }
    for (int k = 0; k < GRACE_LAUNCH_NSTRATEGIES; k++) {
      if (gi->why[k][0]) snprintf(line, sizeof line, "    %-18s unavailable: %s\n", launch_names[k], gi->why[k]);
      else if (gi->us[k] > 0)
        snprintf(line, sizeof line, "    %-18s %9.1f us per call (median of %d timed calls)\n", launch_names[k], gi->us[k],
                 gi->samples[k]);
      else continue;
      luaL_addstring(&b, line);
    }
  }
  luaL_pushresult(&b);
  lua_getglobal(L, "print");
  if (lua_isfunction(L, -1)) { lua_insert(L, -2); lua_call(L, 1, 0); } else lua_pop(L, 2);
  lua_settop(L, 3);
  return 1;
}
