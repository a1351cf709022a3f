/* test_part_fake.c: on the fake driver of test_graph_fake.c (kernels do nothing, so no value a kernel computes is
 * checked; the GPU tests tests/lua/test_gpu_partitions.lua, test_gpu_state.lua and test_gpu_placement.lua do that),
 * what grace decides and records for three kinds of program that used to run eagerly:
 *   - partitions (vm/vm_part.c): a C host computes e = exp(x), reads sum(e) on the host (the break), then returns
 *     e * 2 + 1. Both partitions become programs; with graphs forced (copies, indirection) each is captured once
 *     and replayed on every later call (two graphs a call, no kernel outside them); the second reads the first
 *     one's output as an input (with indirection by pointer: no bytes of it copied);
 *   - state written in place (ir/ir_exec.c, gpu/gpu_graph.c): an SGD step writing its weight argument and a running
 *     statistic written into a captured tensor are captured as graphs, replayed with no kernel outside them, the
 *     versions advance as eagerly (once per in-place op), with indirection no byte of the state is copied, with
 *     copies the weight is copied in and back;
 *   - placement (vm/vm_place.c, gpu/gpu_stage.c): a host argument moved to the device inside the function is staged
 *     ahead of the program (bytes counted), a captured host tensor becomes a device constant (made again, with the
 *     new contents, once the tensor is written), the program is one graph, explain lists both decisions.
 *   - outputs kept internal (vm/vm_part.c): a host computes a chain of four ops, branches on its sum (recorded as a
 *     comparison) and goes on from the last one: the first partition hands back only that value and the sum, the
 *     other two stay inside its program, so its graph copies out two outputs instead of four;
 *   - host work between device ops (vm/vm_place.c, ir/ir_place.c): exp(x) copied to the host, `* 2 + 1` there, the
 *     result copied back and multiplied on the device: the host ops move onto the device (no copy either way, no
 *     synchronize per call, one graph, explain says so), also inside the second partition of a function with a
 *     break; with an op the device lacks, or the host value returned too, the round trip stays and explain says why.
 *   - a tree of paths (the host takes one of two ways after its break): each path's partitions are graphs, and the
 *     arena they draw on holds what the largest needs, not the sum of what their captures took.
 * NVRTC compiles the kernels for real; without it the file skips. */
#include <dirent.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>
#include "grace.h"
#include "cuda/cuda_graph.h"
#include "cuda/cuda_internal.h"
#include "tap.h"

#include "c/fake_cuda.h"

static grace_vm *vm;

/* A host function's end: y its one result when st is GRACE_OK (released when the caller takes no result), else
 * GRACE_EHOST with y released. */
static grace_status host_result(grace_status st, grace_tensor *y, int *nres, grace_arg *res, int maxres) {
  if (st != GRACE_OK) { grace_tensor_release(y); return GRACE_EHOST; }
  *nres = 1;
  if (maxres >= 1) res[0] = (grace_arg){.kind = GRACE_ARG_TENSOR, .t = y};
  else grace_tensor_release(y);
  return GRACE_OK;
}

static grace_status h_call(void *ud, int nargs, const grace_arg *args, int *nres, grace_arg *res, int maxres) {
  (void)ud;
  *nres = 0;
  if (nargs != 1 || args[0].kind != GRACE_ARG_TENSOR) return GRACE_EHOST;
  grace_tensor *e = NULL, *m = NULL, *two = NULL, *one = NULL, *d = NULL, *y = NULL;
  double host = 0;
  grace_status st = grace_run(vm, GRACE_OP_EXP, 1, &args[0].t, NULL, 1, &e);
  if (st == GRACE_OK) st = grace_run(vm, GRACE_OP_SUM, 1, &e, NULL, 1, &m);
  if (st == GRACE_OK) st = grace_tensor_read(vm, m, GRACE_FLOAT64, &host);   /* the break */
  (void)host;   /* the fake driver computes nothing: the host takes the same branch whatever it reads */
  if (st == GRACE_OK) st = grace_tensor_scalar(vm, 2.0, 0, &two);
  if (st == GRACE_OK) st = grace_tensor_scalar(vm, 1.0, 0, &one);
  if (st == GRACE_OK) st = grace_run(vm, GRACE_OP_MUL, 2, (grace_tensor *[]){e, two}, NULL, 1, &d);
  if (st == GRACE_OK) st = grace_run(vm, GRACE_OP_ADD, 2, (grace_tensor *[]){d, one}, NULL, 1, &y);
  grace_tensor_release(e); grace_tensor_release(m); grace_tensor_release(two); grace_tensor_release(one);
  grace_tensor_release(d);
  return host_result(st, y, nres, res, maxres);
}

static const grace_host host = {.call = h_call};

/* n calls of fn on x, each result dropped; the calls that failed (each said). */
static int calls(grace_fn *fn, grace_tensor *x, int n) {
  grace_arg a = {.kind = GRACE_ARG_TENSOR, .t = x};
  int bad = 0;
  for (int i = 0; i < n; i++) {
    grace_arg r[1];
    int nr = 0;
    if (grace_fn_call(fn, 1, &a, &nr, r, 1) != GRACE_OK || nr != 1) {
      printf("# call %d: %s\n", i + 1, grace_last_error(vm));
      bad++;
    }
    if (nr == 1) grace_tensor_release(r[0].t);
  }
  return bad;
}

static void forced(const char *mode, grace_launch_strategy want) {
  grace_set_graphs(vm, mode);
  grace_fn *fn = NULL;
  grace_tensor *x = NULL;
  int64_t n = 4096;
  grace_tensor_empty(vm, GRACE_FLOAT32, GRACE_CUDA, 1, &n, &x);
  if (grace_fn_new(vm, "part", &host, NULL, NULL, &fn) != GRACE_OK || !x) { ok(0, "%s: setup", mode); return; }
  int bad = calls(fn, x, 5);
  long g_before = graph_launches, k_before = kernel_launches;
  bad += calls(fn, x, 5);
  is_int(bad, 0, "%s: 10 calls run", mode);
  grace_fn_stats s;
  grace_fn_get_stats(fn, &s);
  is_int(s.partitions, 2, "%s: the two partitions became programs", mode);
  is_int(s.partition_runs, 18, "%s: each of the 9 calls after the trace ran both programs", mode);
  is_int(graph_launches - g_before, 10, "%s: calls 6 to 10 launch two graphs each", mode);
  is_int(kernel_launches - k_before, 0, "%s: and no kernel outside them", mode);
  for (int j = 0; j < 2; j++) {
    int path = -1, index = -1;
    grace_ir *part = grace_fn_entry_partition(fn, 0, j, &path, &index);
    grace_graph_info gi;
    grace_ir_graph_info(part, &gi);
    ok(part && index == j && path == 0, "%s: partition %d of path 1", mode, j + 1);
    ok(gi.managed && gi.decided && gi.chosen == want && !gi.ineligible[0] && !gi.why[want][0],
       "%s: partition %d runs as the forced strategy, no eager fallback (%s)", mode, j + 1,
       gi.ineligible[0] ? gi.ineligible : gi.why[want]);
    is_int(gi.captures, 1, "%s: partition %d captured once", mode, j + 1);
    if (j == 1 && want == GRACE_LAUNCH_INDIRECT)
      ok(gi.copy_bytes <= 64, "indirect: the second partition reads the first one's output by pointer (%zu bytes copied)",
         gi.copy_bytes);
    if (j == 1 && want == GRACE_LAUNCH_COPY)
      ok(gi.copy_bytes >= (size_t)n * 4, "copy: the second partition's input is copied into its placeholder (%zu bytes)",
         gi.copy_bytes);
  }
  grace_fn_free(fn);
  grace_tensor_release(x);
  grace_set_graphs(vm, NULL);
}

/* ---- a tree of paths: graphs share the arena ---- */
/* tree(x): e = exp(x), the host reads sum(e) (the break), then on odd calls y = e * 2 + 1, on even ones
 * y = tanh(e) - e: two paths after one first partition (the fake driver computes nothing, so the host picks the
 * path by the call's number, as it would by the value read). */
static int tree_calls;
static grace_status h_tree(void *ud, int nargs, const grace_arg *args, int *nres, grace_arg *res, int maxres) {
  (void)ud;
  *nres = 0;
  if (nargs != 1 || args[0].kind != GRACE_ARG_TENSOR) return GRACE_EHOST;
  grace_tensor *e = NULL, *m = NULL, *c = NULL, *d = NULL, *y = NULL;
  double host = 0;
  grace_status st = grace_run(vm, GRACE_OP_EXP, 1, &args[0].t, NULL, 1, &e);
  if (st == GRACE_OK) st = grace_run(vm, GRACE_OP_SUM, 1, &e, NULL, 1, &m);
  if (st == GRACE_OK) st = grace_tensor_read(vm, m, GRACE_FLOAT64, &host);   /* the break */
  if (st == GRACE_OK && tree_calls++ % 2 == 0) {
    if ((st = grace_tensor_scalar(vm, 2.0, 0, &c)) == GRACE_OK)
      st = grace_run(vm, GRACE_OP_MUL, 2, (grace_tensor *[]){e, c}, NULL, 1, &d);
    if (st == GRACE_OK) st = grace_run(vm, GRACE_OP_ADD, 2, (grace_tensor *[]){d, c}, NULL, 1, &y);
  } else if (st == GRACE_OK) {
    if ((st = grace_run(vm, GRACE_OP_TANH, 1, &e, NULL, 1, &d)) == GRACE_OK)
      st = grace_run(vm, GRACE_OP_SUB, 2, (grace_tensor *[]){d, e}, NULL, 1, &y);
  }
  grace_tensor_release(e); grace_tensor_release(m); grace_tensor_release(c); grace_tensor_release(d);
  return host_result(st, y, nres, res, maxres);
}

/* Each path's partitions are graphs; the arena they draw on holds what one replay needs, not what all of them took:
 * replays are ordered on one stream, so the second path's capture reuses the blocks the first path's freed. */
static void tree(void) {
  grace_set_graphs(vm, "copy");
  const grace_host th = {.call = h_tree};
  grace_fn *fn = NULL;
  grace_tensor *x = NULL;
  int64_t n = 4096;
  grace_tensor_empty(vm, GRACE_FLOAT32, GRACE_CUDA, 1, &n, &x);
  if (grace_fn_new(vm, "tree", &th, NULL, NULL, &fn) != GRACE_OK || !x) { ok(0, "tree: setup"); return; }
  tree_calls = 0;
  is_int(calls(fn, x, 12), 0, "tree: 12 calls, the path alternating");
  size_t sum = 0, arena = 0;
  int graphs = 0, paths[2] = {0, 0};
  for (int j = 0; j < 8; j++) {
    int path = -1, index = -1;
    grace_ir *part = grace_fn_entry_partition(fn, 0, j, &path, &index);
    if (!part) break;
    grace_graph_info gi;
    grace_ir_graph_info(part, &gi);
    if (gi.captures >= 1) graphs++;
    if (path >= 0 && path < 2) paths[path]++;
    sum += gi.graph_bytes - gi.table_bytes;   /* the arena blocks its captures took */
    arena = gi.arena_bytes;
    printf("# partition %d: path %d index %d, %ld captures, %zu bytes of arena blocks taken\n", j, path, index,
           (long)gi.captures, gi.graph_bytes - gi.table_bytes);
  }
  ok(graphs >= 3 && paths[0] >= 1 && paths[1] >= 1,
     "tree: the shared first partition and each path's second are graphs (%d graphs; %d and %d partitions a path)",
     graphs, paths[0], paths[1]);
  ok(arena > 0 && arena < sum, "tree: the graphs share the arena: %zu bytes held, %zu taken by them in all", arena, sum);
  grace_fn_free(fn);
  grace_tensor_release(x);
  grace_set_graphs(vm, NULL);
}

/* ---- outputs kept internal ---- */
/* chain(x): a = exp(x), b = a * 2, c = b + 1, s = sum(c), the host branches on s > 0 (recorded), returns c * 3 */
static grace_status h_chain(void *ud, int nargs, const grace_arg *args, int *nres, grace_arg *res, int maxres) {
  (void)ud;
  *nres = 0;
  if (nargs != 1 || args[0].kind != GRACE_ARG_TENSOR) return GRACE_EHOST;
  grace_tensor *a = NULL, *b = NULL, *c = NULL, *s = NULL, *two = NULL, *one = NULL, *three = NULL, *y = NULL;
  double host = 0;
  grace_status st = grace_tensor_scalar(vm, 2.0, 0, &two);
  if (st == GRACE_OK) st = grace_tensor_scalar(vm, 1.0, 0, &one);
  if (st == GRACE_OK) st = grace_tensor_scalar(vm, 3.0, 0, &three);
  if (st == GRACE_OK) st = grace_run(vm, GRACE_OP_EXP, 1, &args[0].t, NULL, 1, &a);
  if (st == GRACE_OK) st = grace_run(vm, GRACE_OP_MUL, 2, (grace_tensor *[]){a, two}, NULL, 1, &b);
  if (st == GRACE_OK) st = grace_run(vm, GRACE_OP_ADD, 2, (grace_tensor *[]){b, one}, NULL, 1, &c);
  if (st == GRACE_OK) st = grace_run(vm, GRACE_OP_SUM, 1, &c, NULL, 1, &s);
  if (st == GRACE_OK) st = grace_tensor_read(vm, s, GRACE_FLOAT64, &host);   /* the break */
  if (st == GRACE_OK) st = grace_trace_branch(vm, s, GRACE_CMP_GT, 0.0, 1, NULL);
  if (st == GRACE_OK) st = grace_run(vm, GRACE_OP_MUL, 2, (grace_tensor *[]){c, three}, NULL, 1, &y);
  grace_tensor *all[] = {a, b, c, s, two, one, three};
  for (int i = 0; i < 7; i++) grace_tensor_release(all[i]);
  return host_result(st, y, nres, res, maxres);
}

static void kept_inside(void) {
  grace_set_graphs(vm, "copy");
  grace_fn *fn = NULL;
  grace_tensor *x = NULL;
  int64_t n = 4096;
  grace_tensor_empty(vm, GRACE_FLOAT32, GRACE_CUDA, 1, &n, &x);
  const grace_host hc = {.call = h_chain};
  if (grace_fn_new(vm, "chain", &hc, NULL, NULL, &fn) != GRACE_OK || !x) { ok(0, "chain: setup"); return; }
  grace_arg a = {.kind = GRACE_ARG_TENSOR, .t = x};
  int bad = 0;
  long g_before = 0, k_before = 0;
  for (int i = 0; i < 10; i++) {
    if (i == 5) { g_before = graph_launches; k_before = kernel_launches; }
    grace_arg r[1];
    int nr = 0;
    if (grace_fn_call(fn, 1, &a, &nr, r, 1) != GRACE_OK || nr != 1) bad++;
    if (nr == 1) grace_tensor_release(r[0].t);
  }
  is_int(bad, 0, "chain: 10 calls run");
  grace_fn_stats s;
  grace_fn_get_stats(fn, &s);
  is_int(s.partitions, 2, "chain: two partitions became programs");
  grace_ir *p1 = grace_fn_entry_partition(fn, 0, 0, NULL, NULL), *p2 = grace_fn_entry_partition(fn, 0, 1, NULL, NULL);
  is_int(p1 ? grace_ir_count(p1, "outputs") : -1, 2, "chain: the first hands back what is read after it: c and sum(c)");
  is_int(p2 ? grace_ir_count(p2, "outputs") : -1, 1, "chain: the second hands back the result");
  is_int(s.partition_outputs, 3, "chain: stats count three outputs in all");
  is_int(s.partition_internal, 2, "chain: exp(x) and its double stay inside the first program");
  is_int(graph_launches - g_before, 10, "chain: calls 6 to 10 launch two graphs each");
  is_int(kernel_launches - k_before, 0, "chain: and no kernel outside them (nothing computed again)");
  grace_graph_info gi;
  grace_ir_graph_info(p1, &gi);
  ok(gi.managed && gi.decided && gi.chosen == GRACE_LAUNCH_COPY && gi.captures == 1,
     "chain: the first partition is one graph, captured once, no eager fallback (%s)", gi.ineligible);
  /* x into its placeholder and c out: two tensors' bytes (and the sum, the table); four with a and b handed back */
  ok(gi.copy_bytes >= 2 * (size_t)n * 4 && gi.copy_bytes < 3 * (size_t)n * 4,
     "chain: its graph copies x in and c and the sum out, not exp(x) and its double (%zu bytes per replay)", gi.copy_bytes);
  grace_fn_free(fn);
  grace_tensor_release(x);
  grace_set_graphs(vm, NULL);
}

/* ---- state updated in place inside a graph ---- */
/* sgd(w, g): w -= 0.1 * g, returning nothing; running(x): stat = 0.9 * stat + 0.1 * mean(x), stat a tensor the host
 * holds (a capture of the program), returning stat's sum */
static grace_tensor *stat;
static grace_status h_sgd(void *ud, int nargs, const grace_arg *args, int *nres, grace_arg *res, int maxres) {
  (void)ud; (void)res; (void)maxres;
  *nres = 0;
  if (nargs != 2) return GRACE_EHOST;
  grace_tensor *lr = NULL, *d = NULL, *nw = NULL;   /* w:sub_(0.1 * g), as x:sub_ does it: the new value copied in */
  grace_status st = grace_tensor_scalar(vm, 0.1, 0, &lr);
  if (st == GRACE_OK) st = grace_run(vm, GRACE_OP_MUL, 2, (grace_tensor *[]){args[1].t, lr}, NULL, 1, &d);
  if (st == GRACE_OK) st = grace_run(vm, GRACE_OP_SUB, 2, (grace_tensor *[]){args[0].t, d}, NULL, 1, &nw);
  if (st == GRACE_OK) st = grace_run(vm, GRACE_OP_COPY_, 2, (grace_tensor *[]){args[0].t, nw}, NULL, 0, NULL);
  grace_tensor_release(lr);
  grace_tensor_release(d);
  grace_tensor_release(nw);
  return st == GRACE_OK ? GRACE_OK : GRACE_EHOST;
}
static grace_status h_running(void *ud, int nargs, const grace_arg *args, int *nres, grace_arg *res, int maxres) {
  (void)ud;
  *nres = 0;
  if (nargs != 1) return GRACE_EHOST;
  grace_tensor *a = NULL, *b = NULL, *m = NULL, *mm = NULL, *y = NULL, *t1 = NULL, *t2 = NULL;
  grace_status st = grace_tensor_scalar(vm, 0.9, 0, &a);
  if (st == GRACE_OK) st = grace_tensor_scalar(vm, 0.1, 0, &b);
  if (st == GRACE_OK) st = grace_run(vm, GRACE_OP_MEAN, 1, &args[0].t, &(grace_attrs){.ndims = 1, .dims = {0}}, 1, &m);
  if (st == GRACE_OK) st = grace_run(vm, GRACE_OP_MUL, 2, (grace_tensor *[]){m, b}, NULL, 1, &mm);
  if (st == GRACE_OK) st = grace_run(vm, GRACE_OP_MUL, 2, (grace_tensor *[]){stat, a}, NULL, 1, &t1);
  if (st == GRACE_OK) st = grace_run(vm, GRACE_OP_COPY_, 2, (grace_tensor *[]){stat, t1}, NULL, 0, NULL);
  if (st == GRACE_OK) st = grace_run(vm, GRACE_OP_ADD, 2, (grace_tensor *[]){stat, mm}, NULL, 1, &t2);
  if (st == GRACE_OK) st = grace_run(vm, GRACE_OP_COPY_, 2, (grace_tensor *[]){stat, t2}, NULL, 0, NULL);
  grace_tensor_release(t1); grace_tensor_release(t2);
  if (st == GRACE_OK) st = grace_run(vm, GRACE_OP_SUM, 1, &stat, NULL, 1, &y);
  grace_tensor_release(a); grace_tensor_release(b); grace_tensor_release(m); grace_tensor_release(mm);
  return host_result(st, y, nres, res, maxres);
}

/* Runs fn 10 times on args; returns the failures; g and k: graph and kernel launches of calls 6 to 10. */
static int ten_calls(grace_fn *fn, int nargs, const grace_arg *args, long *g, long *k) {
  int bad = 0;
  for (int i = 0; i < 10; i++) {
    if (i == 5) { *g = graph_launches; *k = kernel_launches; }
    grace_arg r[1];
    int nr = 0;
    if (grace_fn_call(fn, nargs, args, &nr, r, 1) != GRACE_OK) { printf("# call %d: %s\n", i + 1, grace_last_error(vm)); bad++; }
    if (nr == 1) grace_tensor_release(r[0].t);
  }
  *g = graph_launches - *g;
  *k = kernel_launches - *k;
  return bad;
}

static void state(const char *mode, grace_launch_strategy want) {
  grace_set_graphs(vm, mode);
  int64_t n = 1024;
  grace_tensor *w = NULL, *gr = NULL, *x = NULL;
  grace_tensor_empty(vm, GRACE_FLOAT32, GRACE_CUDA, 1, &n, &w);
  grace_tensor_empty(vm, GRACE_FLOAT32, GRACE_CUDA, 1, &n, &gr);
  grace_tensor_empty(vm, GRACE_FLOAT32, GRACE_CUDA, 2, (int64_t[]){8, n}, &x);
  grace_tensor_empty(vm, GRACE_FLOAT32, GRACE_CUDA, 1, &n, &stat);
  static const grace_host sgd_host = {.call = h_sgd}, run_host = {.call = h_running};
  grace_fn *sgd = NULL, *run = NULL;
  grace_fn_new(vm, "sgd", &sgd_host, NULL, NULL, &sgd);
  grace_fn_new(vm, "running", &run_host, NULL, NULL, &run);
  if (!w || !gr || !x || !stat || !sgd || !run) { ok(0, "%s: state setup", mode); return; }
  grace_arg a[2] = {{.kind = GRACE_ARG_TENSOR, .t = w}, {.kind = GRACE_ARG_TENSOR, .t = gr}};
  uint64_t v0 = grace_tensor_version(w);
  long g = 0, k = 0;
  is_int(ten_calls(sgd, 2, a, &g, &k), 0, "%s: sgd: 10 calls run", mode);
  is_int((long)(grace_tensor_version(w) - v0), 10, "%s: sgd: w's version advanced once per call, as eager sub_", mode);
  grace_graph_info gi;
  grace_ir_graph_info(grace_fn_entry_ir(sgd, 0, NULL, NULL, NULL), &gi);
  ok(gi.decided && gi.chosen == want && !gi.ineligible[0] && !gi.why[want][0] && gi.captures == 1,
     "%s: sgd: the writing program is captured once as the forced strategy (%s)", mode, gi.ineligible[0] ? gi.ineligible : gi.why[want]);
  ok(g == 5 && k == 0, "%s: sgd: calls 6 to 10 replay the graph, no kernel outside it (%ld graphs, %ld kernels)", mode, g, k);
  if (want == GRACE_LAUNCH_INDIRECT)
    ok(gi.copy_bytes <= 64, "indirect: sgd: the weight is updated where it lives, not copied (%zu bytes per call)", gi.copy_bytes);
  else
    ok(gi.copy_bytes >= (size_t)n * 4 * 3, "copy: sgd: the weight is copied in and back (%zu bytes per call)", gi.copy_bytes);

  grace_arg xa = {.kind = GRACE_ARG_TENSOR, .t = x};
  uint64_t s0 = grace_tensor_version(stat);
  is_int(ten_calls(run, 1, &xa, &g, &k), 0, "%s: running statistic: 10 calls run (the capture's version tracked)", mode);
  is_int((long)(grace_tensor_version(stat) - s0), 20, "%s: running statistic: two in-place ops per call advance its version by 2", mode);
  grace_ir_graph_info(grace_fn_entry_ir(run, 0, NULL, NULL, NULL), &gi);
  ok(gi.decided && gi.chosen == want && gi.captures == 1 && g == 5 && k == 0,
     "%s: running statistic: captured once, replayed, no eager launches (%ld graphs, %ld kernels)", mode, g, k);
  grace_fn_stats fs;
  grace_fn_get_stats(run, &fs);
  is_int(fs.traces, 1, "%s: running statistic: one trace (the capture's new versions are the program's own)", mode);
  grace_fn_free(sgd);
  grace_fn_free(run);
  grace_tensor_release(w); grace_tensor_release(gr); grace_tensor_release(x); grace_tensor_release(stat);
  stat = NULL;
  grace_set_graphs(vm, NULL);
}

/* ---- host work between device ops ---- */
/* trip(x): h = exp(x):to(cpu); d = (h * 2 + 1):to(cuda); returns d * 3, and with `leak` h too (the host value escapes) */
static int trip_leak, trip_break;
static grace_status h_trip(void *ud, int nargs, const grace_arg *args, int *nres, grace_arg *res, int maxres) {
  (void)ud;
  *nres = 0;
  if (nargs != 1 || args[0].kind != GRACE_ARG_TENSOR || maxres < 1 + trip_leak) return GRACE_EHOST;
  grace_tensor *e = NULL, *h = NULL, *b = NULL, *c = NULL, *d = NULL, *y = NULL, *two = NULL, *one = NULL, *three = NULL;
  grace_status st = grace_tensor_scalar(vm, 2.0, 0, &two);
  if (st == GRACE_OK) st = grace_tensor_scalar(vm, 1.0, 0, &one);
  if (st == GRACE_OK) st = grace_tensor_scalar(vm, 3.0, 0, &three);
  if (st == GRACE_OK) st = grace_run(vm, GRACE_OP_EXP, 1, &args[0].t, NULL, 1, &e);
  if (st == GRACE_OK && trip_break) {   /* a break before the round trip: it is in the second partition */
    grace_tensor *m = NULL;
    double host = 0;
    st = grace_run(vm, GRACE_OP_SUM, 1, &e, NULL, 1, &m);
    if (st == GRACE_OK) st = grace_tensor_read(vm, m, GRACE_FLOAT64, &host);
    if (st == GRACE_OK) st = grace_trace_branch(vm, m, GRACE_CMP_GT, 0.0, 1, NULL);
    grace_tensor_release(m);
  }
  if (st == GRACE_OK) st = grace_run(vm, GRACE_OP_TO_DEVICE, 1, &e, &(grace_attrs){.device = GRACE_CPU}, 1, &h);
  if (st == GRACE_OK) st = grace_run(vm, GRACE_OP_MUL, 2, (grace_tensor *[]){h, two}, NULL, 1, &b);
  if (st == GRACE_OK) st = grace_run(vm, GRACE_OP_ADD, 2, (grace_tensor *[]){b, one}, NULL, 1, &c);
  if (st == GRACE_OK) st = grace_run(vm, GRACE_OP_TO_DEVICE, 1, &c, &(grace_attrs){.device = GRACE_CUDA}, 1, &d);
  if (st == GRACE_OK) st = grace_run(vm, GRACE_OP_MUL, 2, (grace_tensor *[]){d, three}, NULL, 1, &y);
  grace_tensor *all[] = {e, b, c, d, two, one, three};
  for (int i = 0; i < 7; i++) grace_tensor_release(all[i]);
  if (st != GRACE_OK) { grace_tensor_release(y); grace_tensor_release(h); return GRACE_EHOST; }
  res[0] = (grace_arg){.kind = GRACE_ARG_TENSOR, .t = y};
  if (trip_leak) res[1] = (grace_arg){.kind = GRACE_ARG_TENSOR, .t = h};
  else grace_tensor_release(h);
  *nres = 1 + trip_leak;
  return GRACE_OK;
}

/* trip_mm(x): (x:to(cpu) @ x:to(cpu)):to(cuda), x int64 */
static grace_status h_trip_mm(void *ud, int nargs, const grace_arg *args, int *nres, grace_arg *res, int maxres) {
  (void)ud;
  *nres = 0;
  if (nargs != 1 || args[0].kind != GRACE_ARG_TENSOR || maxres < 1) return GRACE_EHOST;
  grace_tensor *h = NULL, *c = NULL, *d = NULL;
  grace_status st = grace_run(vm, GRACE_OP_TO_DEVICE, 1, &args[0].t, &(grace_attrs){.device = GRACE_CPU}, 1, &h);
  if (st == GRACE_OK) st = grace_run(vm, GRACE_OP_MATMUL, 2, (grace_tensor *[]){h, h}, NULL, 1, &c);
  if (st == GRACE_OK) st = grace_run(vm, GRACE_OP_TO_DEVICE, 1, &c, &(grace_attrs){.device = GRACE_CUDA}, 1, &d);
  grace_tensor_release(h);
  grace_tensor_release(c);
  return host_result(st, d, nres, res, maxres);
}

static void round_trip(void) {
  grace_set_graphs(vm, "indirect");
  int64_t n = 1024;
  grace_tensor *x = NULL;
  grace_tensor_empty(vm, GRACE_FLOAT32, GRACE_CUDA, 1, &n, &x);
  static const grace_host trip_host = {.call = h_trip};
  grace_fn *fn = NULL;
  grace_fn_new(vm, "trip", &trip_host, NULL, NULL, &fn);
  if (!x || !fn) { ok(0, "round trip: setup"); return; }
  grace_arg a = {.kind = GRACE_ARG_TENSOR, .t = x};
  long g = 0, k = 0;
  is_int(ten_calls(fn, 1, &a, &g, &k), 0, "round trip: 10 calls run");
  long h0 = htod_copies, d0 = dtoh_copies, s0 = stream_syncs;
  is_int(ten_calls(fn, 1, &a, &g, &k), 0, "round trip: 10 more calls run");
  grace_fn_stats s;
  grace_fn_get_stats(fn, &s);
  grace_ir *ir = grace_fn_entry_ir(fn, 0, NULL, NULL, NULL);
  grace_graph_info gi;
  grace_ir_graph_info(ir, &gi);
  ok(ir && gi.decided && gi.chosen == GRACE_LAUNCH_INDIRECT && !gi.ineligible[0] && gi.captures == 1,
     "round trip: the program is one graph, captured once, no eager fallback (%s)", gi.ineligible);
  ok(g == 5 && k == 0 && s.eager_calls == 0, "round trip: calls 6 to 10 replay it, no kernel outside it (%ld graphs, %ld kernels)", g, k);
  is_int(dtoh_copies - d0, 0, "round trip: no copy to the host in 10 calls");
  is_int(stream_syncs - s0, 0, "round trip: no synchronize in 10 calls");
  ok(htod_copies - h0 <= 10, "round trip: at most the argument table's one copy a call to the device (%ld)", htod_copies - h0);
  const char *text = grace_ir_text(ir);
  ok(text && !strstr(text, " to ") && !strstr(text, "cpu"), "round trip: no copy and no host value left in the program");
  char buf[8192];
  grace_status xs = grace_fn_explain(fn, 1, &a, buf, sizeof buf);
  ok(xs == GRACE_OK && strstr(buf, "2 host ops between a copy to the host and one back) -> moved to the device"),
     "round trip: explain says the two host ops moved to the device");
  grace_fn_free(fn);
  /* the same after a graph break: the round trip is in the second partition's program, moved there too */
  trip_break = 1;
  fn = NULL;
  grace_fn_new(vm, "trip_break", &trip_host, NULL, NULL, &fn);
  d0 = dtoh_copies;
  is_int(ten_calls(fn, 1, &a, &g, &k), 0, "round trip after a break: 10 calls run");
  grace_ir *p2 = grace_fn_entry_partition(fn, 0, 1, NULL, NULL);
  grace_ir_graph_info(p2, &gi);
  text = p2 ? grace_ir_text(p2) : NULL;
  ok(text && !strstr(text, " to ") && !strstr(text, "f32[1024]\n") && gi.captures == 1 && !gi.ineligible[0],
     "round trip after a break: the second partition has no copy and no host value, one graph (%s)", gi.ineligible);
  ok(g == 10 && k == 0, "round trip after a break: calls 6 to 10 replay two graphs each (%ld graphs, %ld kernels)", g, k);
  /* each call reads the sum at the break; the traced call, run eagerly, also copies exp(x) to the host once */
  is_int(dtoh_copies - d0, 11, "round trip after a break: one copy to the host per call (the sum the break reads), not two");
  grace_fn_free(fn);
  trip_break = 0;
  /* the host value returned too: it stays, and explain says why */
  trip_leak = 1;
  fn = NULL;
  grace_fn_new(vm, "trip_leak", &trip_host, NULL, NULL, &fn);
  xs = fn ? grace_fn_explain(fn, 1, &a, buf, sizeof buf) : GRACE_EARG;
  ok(xs == GRACE_OK && strstr(buf, "-> stays on the host: its host value %") && strstr(buf, "is returned to Lua"),
     "round trip: a host value the function returns keeps the round trip, explain says so");
  grace_fn_free(fn);
  trip_leak = 0;
  /* an op the device has no kernel for (a matmul of int64 tensors) keeps it too */
  static const grace_host mm_host = {.call = h_trip_mm};
  fn = NULL;
  grace_tensor *xi = NULL;
  grace_tensor_empty(vm, GRACE_INT64, GRACE_CUDA, 2, (int64_t[]){4, 4}, &xi);
  grace_fn_new(vm, "trip_mm", &mm_host, NULL, NULL, &fn);
  grace_arg ai = {.kind = GRACE_ARG_TENSOR, .t = xi};
  xs = fn && xi ? grace_fn_explain(fn, 1, &ai, buf, sizeof buf) : GRACE_EARG;
  ok(xs == GRACE_OK && strstr(buf, "-> stays on the host: matmul %") && strstr(buf, "has no device kernel"),
     "round trip: an op with no device kernel keeps the round trip, explain says so");
  grace_fn_free(fn);
  grace_tensor_release(xi);
  grace_tensor_release(x);
  grace_set_graphs(vm, NULL);
}

/* ---- placement: a per-call host input and a captured host tensor moved to the device ---- */
/* model(x): exp(x:cuda()) + bias:cuda(), x a host argument, bias a host tensor the host holds (a capture) */
static grace_tensor *bias;
static grace_status h_model(void *ud, int nargs, const grace_arg *args, int *nres, grace_arg *res, int maxres) {
  (void)ud;
  *nres = 0;
  if (nargs != 1) return GRACE_EHOST;
  grace_attrs to = {.device = GRACE_CUDA};
  grace_tensor *xd = NULL, *bd = NULL, *e = NULL, *y = NULL;
  grace_status st = grace_run(vm, GRACE_OP_TO_DEVICE, 1, &args[0].t, &to, 1, &xd);
  if (st == GRACE_OK) st = grace_run(vm, GRACE_OP_TO_DEVICE, 1, &bias, &to, 1, &bd);
  if (st == GRACE_OK) st = grace_run(vm, GRACE_OP_EXP, 1, &xd, NULL, 1, &e);
  if (st == GRACE_OK) st = grace_run(vm, GRACE_OP_ADD, 2, (grace_tensor *[]){e, bd}, NULL, 1, &y);
  grace_tensor_release(xd); grace_tensor_release(bd); grace_tensor_release(e);
  return host_result(st, y, nres, res, maxres);
}

static void placement(void) {
  grace_set_graphs(vm, "indirect");
  int64_t n = 2048;
  grace_tensor *x = NULL;
  grace_tensor_empty(vm, GRACE_FLOAT32, GRACE_CPU, 1, &n, &x);
  grace_tensor_empty(vm, GRACE_FLOAT32, GRACE_CPU, 1, &n, &bias);
  static const grace_host model_host = {.call = h_model};
  grace_fn *fn = NULL;
  grace_fn_new(vm, "model", &model_host, NULL, NULL, &fn);
  if (!x || !bias || !fn) { ok(0, "placement: setup"); return; }
  grace_arg a = {.kind = GRACE_ARG_TENSOR, .t = x};
  long g = 0, k = 0;
  is_int(ten_calls(fn, 1, &a, &g, &k), 0, "placement: 10 calls with a host input run");
  grace_fn_stats s;
  grace_fn_get_stats(fn, &s);
  grace_ir *ir = grace_fn_entry_ir(fn, 0, NULL, NULL, NULL);
  grace_graph_info gi;
  grace_ir_graph_info(ir, &gi);
  ok(gi.decided && gi.chosen == GRACE_LAUNCH_INDIRECT && !gi.ineligible[0] && gi.captures == 1,
     "placement: the program with a per-call host input is one graph (%s)", gi.ineligible);
  ok(g == 5 && k == 0, "placement: calls 6 to 10 replay it, no kernel outside it (%ld graphs, %ld kernels)", g, k);
  is_int(s.staged_bytes, 9 * n * 4, "placement: the input is staged ahead of the program on each call after the trace "
         "(%ld bytes)", s.staged_bytes);
  const char *text = grace_ir_text(ir);
  ok(text && !strstr(text, " to ") && strstr(text, "cuda"), "placement: no move is left inside the program");
  char buf[8192];
  grace_status xs = grace_fn_explain(fn, 1, &a, buf, sizeof buf);
  ok(xs == GRACE_OK && strstr(buf, "input #0") && strstr(buf, "-> staged") &&
     strstr(buf, "captured #0") && strstr(buf, "-> device constant"), "placement: explain lists both decisions");
  /* the captured tensor written: its device constant is made again, the program stays */
  double one = 1;
  grace_tensor *o = NULL;
  grace_tensor_scalar(vm, one, 0, &o);
  grace_run(vm, GRACE_OP_COPY_, 2, (grace_tensor *[]){bias, o}, NULL, 0, NULL);
  grace_tensor_release(o);
  is_int(ten_calls(fn, 1, &a, &g, &k), 0, "placement: after the captured tensor changed, calls run");
  grace_fn_get_stats(fn, &s);
  ok(s.traces == 1 && s.eager_calls == 0, "placement: no new trace, no eager call");
  ir = grace_fn_entry_ir(fn, 0, NULL, NULL, NULL);
  grace_tensor *dc = grace_ir_const_tensor(ir, 0);
  static float back[2048];
  int ones = dc && grace_tensor_device(dc) == GRACE_CUDA && grace_tensor_read(vm, dc, GRACE_FLOAT32, back) == GRACE_OK;
  for (int i = 0; ones && i < n; i++) ones = back[i] == 1.0f;
  ok(ones, "placement: the device constant was made again from the written tensor (all ones now)");
  grace_fn_free(fn);
  grace_tensor_release(x);
  grace_tensor_release(bias);
  bias = NULL;
  grace_set_graphs(vm, NULL);
}

int main(void) {
  char dir[] = "/tmp/grace-part-fake-XXXXXX";
  int rc = 0;
  vm = fake_vm_new(dir, &rc);
  if (!vm) return rc;
  install_fake(vm);
  forced("copy", GRACE_LAUNCH_COPY);
  forced("indirect", GRACE_LAUNCH_INDIRECT);
  state("copy", GRACE_LAUNCH_COPY);
  state("indirect", GRACE_LAUNCH_INDIRECT);
  placement();
  kept_inside();
  round_trip();
  tree();
  fake_vm_free(vm, dir);
  return tap_done();
}
