/* test_graph_fake.c: the bookkeeping of CUDA graphs for device programs (gpu/gpu_graph.c) on a fake driver, so it
 * runs without a GPU. Device memory is host memory and kernels do nothing, so no value is checked here (the GPU
 * tests do that: tests/lua/test_gpu_graphs.lua); what is checked is what grace decides and records: the first
 * call eager, the forced strategies capturing once per input layout and replaying after, the bytes copied per
 * call (inputs into placeholders for copies, a few table words for indirection), fresh output memory every
 * call, a host number becoming a per-call table word, the LRU bound on graphs, measured choice settling on one
 * strategy, random numbers (seed and offset per-call words, the offset advancing as eager's; refused for a graph
 * fed by copies), and the programs that are not graphed with their reasons (a view of an input returned, graphs
 * turned off), out of memory while instantiating (the calls run eagerly, the reason reported, nothing kept), and
 * the cooperative launch of rows split over blocks that wait for each other. NVRTC compiles the kernels for real;
 * without it the file skips. */
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

static grace_tensor *dev_tensor(grace_vm *vm, int64_t n) {
  grace_tensor *t = NULL;
  grace_tensor_empty(vm, GRACE_FLOAT32, GRACE_CUDA, 1, &n, &t);
  return t;
}

/* y = exp(x) / t + 1 with x a device vector of n and t a host number (a 0-d float64 CPU input). */
static grace_ir *prog(grace_vm *vm, int64_t n, int view_out, int random) {
  grace_ir *ir = grace_ir_new(vm, view_out ? "fake_view" : random ? "fake_random" : "fake_prog");
  grace_value x, t, e, d, one, y;
  grace_status st = grace_ir_input(ir, GRACE_FLOAT32, GRACE_CUDA, 1, &n, &x);
  if (st == GRACE_OK) st = grace_ir_input(ir, GRACE_FLOAT64, GRACE_CPU, 0, NULL, &t);   /* a host number */
  if (st == GRACE_OK) st = grace_ir_op(ir, GRACE_OP_EXP, 1, &x, NULL, 1, &e);
  if (st == GRACE_OK) st = grace_ir_op(ir, GRACE_OP_DIV, 2, (grace_value[]){e, t}, NULL, 1, &d);
  if (st == GRACE_OK) st = grace_ir_literal(ir, 1.0, 0, &one);
  if (st == GRACE_OK) st = grace_ir_op(ir, GRACE_OP_ADD, 2, (grace_value[]){d, one}, NULL, 1, &y);
  if (st == GRACE_OK && random) {
    grace_value r, y2;
    grace_attrs a = {.nshape = 1, .shape = {n}, .device = GRACE_CUDA, .has_dtype = 1, .dtype = GRACE_FLOAT32};
    st = grace_ir_op(ir, GRACE_OP_RAND, 0, NULL, &a, 1, &r);
    if (st == GRACE_OK) st = grace_ir_op(ir, GRACE_OP_ADD, 2, (grace_value[]){y, r}, NULL, 1, &y2);
    y = y2;
  }
  if (st == GRACE_OK) st = grace_ir_output(ir, y);
  if (st == GRACE_OK && view_out) {
    grace_value v;
    grace_attrs a = {.ndims = 1, .dims = {0}, .i0 = 0, .i1 = 4};
    st = grace_ir_op(ir, GRACE_OP_NARROW, 1, &x, &a, 1, &v);
    if (st == GRACE_OK) st = grace_ir_output(ir, v);
  }
  if (st != GRACE_OK) { printf("# building the program: %s\n", grace_last_error(vm)); grace_ir_free(ir); return NULL; }
  return ir;
}

/* Runs ir on (x, t) `calls` times; returns how many calls failed; *distinct: whether every call's output had its
 * own device memory while all of them were held. */
static int run_calls(grace_vm *vm, grace_ir *ir, grace_tensor *x, int calls, int nout, int *distinct) {
  grace_tensor *held[64] = {0};
  int bad = 0;
  *distinct = 1;
  for (int i = 0; i < calls && i < 64; i++) {
    grace_tensor *t = NULL, *out[2] = {0};
    grace_tensor_scalar(vm, 0.5 + i, 0, &t);
    if (grace_ir_run(ir, 2, (grace_tensor *[]){x, t}, nout, out) != GRACE_OK) {
      printf("# call %d: %s\n", i + 1, grace_last_error(vm));
      bad++;
    }
    held[i] = out[0];
    for (int k = 1; k < nout; k++) grace_tensor_release(out[k]);
    grace_tensor_release(t);
    for (int j = 0; j < i && held[i]; j++)
      if (held[j] && grace_tensor_storage_id(held[j]) == grace_tensor_storage_id(held[i])) *distinct = 0;
  }
  for (int i = 0; i < 64; i++) grace_tensor_release(held[i]);
  return bad;
}

static void forced(grace_vm *vm, const char *mode, grace_launch_strategy want) {
  grace_set_graphs(vm, mode);
  grace_ir *ir = prog(vm, 1000, 0, 0);
  grace_tensor *x = dev_tensor(vm, 1000);
  if (!ir || !x) { ok(0, "%s: setup", mode); return; }
  long g0 = graph_launches;
  int distinct = 0;
  is_int(run_calls(vm, ir, x, 12, 1, &distinct), 0, "%s: 12 calls run", mode);
  grace_graph_info gi;
  grace_ir_graph_info(ir, &gi);
  ok(gi.managed && gi.decided && gi.chosen == want, "%s: the strategy is the one forced", mode);
  is_int(gi.captures, 1, "%s: one capture for one input layout", mode);
  /* call 1 eager (stable first run), call 2 eager again (the layout's warm run), call 3 captures, all replay */
  is_int(graph_launches - g0, 10, "%s: calls 3 to 12 replay the graph", mode);
  ok(distinct, "%s: every call's output has memory of its own while all are held", mode);
  if (want == GRACE_LAUNCH_COPY)
    ok(gi.copy_bytes >= 1000 * 4 * 2, "copy: the input is copied in and the output out (%zu bytes per call)", gi.copy_bytes);
  else
    ok(gi.copy_bytes <= 64, "indirect: only table words are copied (%zu bytes per call)", gi.copy_bytes);
  if (want == GRACE_LAUNCH_INDIRECT)
    ok(gi.indirect_words >= 2, "indirect: the input's and the output's pointers are per-call words (%d)", gi.indirect_words);
  ok(gi.graph_bytes > 0, "%s: the graph's memory is reported (%zu bytes)", mode, gi.graph_bytes);
  ok(gi.table_bytes > 0 && gi.arena_bytes >= gi.graph_bytes - gi.table_bytes,
     "%s: the VM's graph arena holds its blocks (%zu bytes), its table is apart (%zu bytes)", mode, gi.arena_bytes,
     gi.table_bytes);

  /* new layouts record again, bounded by GRACE_GRAPH_LIMIT (2 in this test) */
  grace_tensor *xs[3];
  for (int k = 0; k < 3; k++) {   /* the same shape, other strides: a column of a [1000, k + 2] matrix */
    grace_tensor *base = NULL, *v = NULL;
    grace_tensor_empty(vm, GRACE_FLOAT32, GRACE_CUDA, 2, (int64_t[]){1000, k + 2}, &base);
    grace_run(vm, GRACE_OP_SELECT, 1, &base, &(grace_attrs){.ndims = 1, .dims = {1}, .i0 = 0}, 1, &v);
    xs[k] = v;
    grace_tensor_release(base);
  }
  int bad = 0;
  for (int k = 0; k < 3; k++) bad += run_calls(vm, ir, xs[k] ? xs[k] : x, 4, 1, &distinct);
  grace_ir_graph_info(ir, &gi);
  is_int(bad, 0, "%s: calls with other layouts run", mode);
  ok(gi.graphs <= 2, "%s: graphs held stay within the limit (%d)", mode, gi.graphs);
  for (int k = 0; k < 3; k++) grace_tensor_release(xs[k]);
  grace_tensor_release(x);
  grace_ir_free(ir);
  is_int(cuda_graph_arena_bytes(cuda_state(vm)), 0, "%s: the program gone, no graph is left and the arena is empty", mode);
  grace_set_graphs(vm, NULL);
}

static void measured(grace_vm *vm) {
  grace_set_graphs(vm, "auto");
  grace_ir *ir = prog(vm, 500, 0, 0);
  grace_tensor *x = dev_tensor(vm, 500);
  int distinct = 0;
  is_int(run_calls(vm, ir, x, 40, 1, &distinct), 0, "auto: 40 calls run");
  grace_graph_info gi;
  grace_ir_graph_info(ir, &gi);
  ok(gi.decided, "auto: a strategy is chosen after measuring");
  int all = 1;
  for (int k = 0; k < GRACE_LAUNCH_NSTRATEGIES; k++) all &= gi.us[k] > 0 || gi.why[k][0];
  ok(all, "auto: every strategy was measured or said why not");
  ok(gi.graphs <= 1, "auto: the losing strategies' graphs are dropped (%d held)", gi.graphs);
  grace_tensor_release(x);
  grace_ir_free(ir);
  grace_set_graphs(vm, NULL);
}

static void not_graphed(grace_vm *vm) {
  grace_set_graphs(vm, "indirect");
  grace_ir *ir = prog(vm, 64, 1, 0);
  grace_tensor *x = dev_tensor(vm, 64);
  int distinct = 0;
  is_int(run_calls(vm, ir, x, 6, 2, &distinct), 0, "a program returning a view of its input runs");
  grace_graph_info gi;
  grace_ir_graph_info(ir, &gi);
  ok(gi.why[GRACE_LAUNCH_INDIRECT][0] && strstr(gi.why[GRACE_LAUNCH_INDIRECT], "view of input") &&
     gi.chosen == GRACE_LAUNCH_EAGER, "and runs eagerly, saying why (%s)", gi.why[GRACE_LAUNCH_INDIRECT]);
  grace_ir_free(ir);

  /* random numbers: with indirection the seed and the generator's offset are per-call table words, and each call
   * advances the offset as an eager call does; a graph fed by copies would repeat its numbers, so it is refused */
  ir = prog(vm, 64, 0, 1);
  uint64_t r0 = vm->rng_offset;
  long g0 = graph_launches;
  is_int(run_calls(vm, ir, x, 8, 1, &distinct), 0, "indirect: a program drawing random numbers runs");
  grace_ir_graph_info(ir, &gi);
  ok(gi.chosen == GRACE_LAUNCH_INDIRECT && gi.captures == 1 && graph_launches - g0 == 6,
     "indirect: it is graphed (%d captures, %ld replays)", (int)gi.captures, graph_launches - g0);
  is_int(vm->rng_offset - r0, 8, "indirect: each call takes the next generator offset, as eager calls do");
  ok(gi.indirect_words >= 4, "indirect: the seed and the offset are per-call words too (%d words)", gi.indirect_words);
  grace_ir_free(ir);
  grace_set_graphs(vm, "copy");
  ir = prog(vm, 64, 0, 1);
  r0 = vm->rng_offset;
  is_int(run_calls(vm, ir, x, 6, 1, &distinct), 0, "copy: a program drawing random numbers runs");
  grace_ir_graph_info(ir, &gi);
  ok(strstr(gi.why[GRACE_LAUNCH_COPY], "random") && gi.chosen == GRACE_LAUNCH_EAGER,
     "copy: it is not graphed, saying why (%s)", gi.why[GRACE_LAUNCH_COPY]);
  is_int(vm->rng_offset - r0, 6, "copy: the refused capture does not advance the generator");
  grace_ir_free(ir);
  grace_tensor_release(x);
  grace_set_graphs(vm, "off");
  ir = prog(vm, 64, 0, 0);
  x = dev_tensor(vm, 64);
  g0 = graph_launches;
  run_calls(vm, ir, x, 6, 1, &distinct);
  grace_ir_graph_info(ir, &gi);
  ok(graph_launches == g0 && strstr(gi.ineligible, "off"), "graphs off: no graph, and the report says so");
  grace_tensor_release(x);
  grace_ir_free(ir);
  grace_set_graphs(vm, NULL);
}

/* Out of memory while instantiating: the call still runs (eagerly), the report says why, nothing is kept. */
static void instantiation_oom(grace_vm *vm) {
  grace_set_graphs(vm, "indirect");
  grace_ir *ir = prog(vm, 256, 0, 0);
  grace_tensor *x = dev_tensor(vm, 256);
  inst_oom = 1;
  long g0 = graph_launches;
  int distinct = 0;
  is_int(run_calls(vm, ir, x, 8, 1, &distinct), 0, "out of memory at instantiation: every call still runs");
  inst_oom = 0;
  grace_graph_info gi;
  grace_ir_graph_info(ir, &gi);
  ok(graph_launches == g0 && gi.chosen == GRACE_LAUNCH_EAGER && gi.graphs == 0,
     "it falls back to eager launches and keeps no graph");
  ok(strstr(gi.why[GRACE_LAUNCH_INDIRECT], "out of memory") != NULL, "the report says why (%s)", gi.why[GRACE_LAUNCH_INDIRECT]);
  is_int(gi.captures, 0, "it is tried once, not on every call");
  grace_tensor_release(x);
  grace_ir_free(ir);
  is_int(cuda_graph_arena_bytes(cuda_state(vm)), 0, "the failed capture leaves no graph memory behind");
  grace_set_graphs(vm, NULL);
}

/* Softmax over few long rows: its row kernel splits each row over blocks that wait for each other, so it is
 * launched cooperatively with no more blocks than the device holds at once, and refuses to run (a clear error,
 * nothing kept) where the driver cannot say how many that is. */
static void split_rows(grace_vm *vm, cuda_ctx *c) {
  int64_t sz[2] = {100, 65536};
  grace_ir *ir = grace_ir_new(vm, "fake_softmax");
  grace_value x, m, d, e, s, y;
  grace_attrs last = {.ndims = 1, .dims = {-1}, .keepdim = 1};
  grace_status st = grace_ir_input(ir, GRACE_FLOAT32, GRACE_CUDA, 2, sz, &x);
  if (st == GRACE_OK) st = grace_ir_op(ir, GRACE_OP_MAX, 1, &x, &last, 1, &m);
  if (st == GRACE_OK) st = grace_ir_op(ir, GRACE_OP_SUB, 2, (grace_value[]){x, m}, NULL, 1, &d);
  if (st == GRACE_OK) st = grace_ir_op(ir, GRACE_OP_EXP, 1, &d, NULL, 1, &e);
  if (st == GRACE_OK) st = grace_ir_op(ir, GRACE_OP_SUM, 1, &e, &last, 1, &s);
  if (st == GRACE_OK) st = grace_ir_op(ir, GRACE_OP_DIV, 2, (grace_value[]){e, s}, NULL, 1, &y);
  if (st == GRACE_OK) st = grace_ir_output(ir, y);
  grace_tensor *xt = NULL;
  if (st == GRACE_OK) st = grace_tensor_empty(vm, GRACE_FLOAT32, GRACE_CUDA, 2, sz, &xt);
  if (!ok(st == GRACE_OK, "softmax over 100 rows of 65536 built")) { grace_ir_free(ir); return; }
  grace_set_graphs(vm, "off");
  grace_device_stats d0, d1;
  grace_device_stats_get(vm, &d0);
  grace_tensor *out = NULL;
  /* the fake's default: neither cuLaunchKernelEx nor the occupancy query */
  st = grace_ir_run(ir, 1, &xt, 1, &out);
  ok(st == GRACE_EDEVICE && strstr(grace_last_error(vm), "cannot say how many") && !out,
     "without the occupancy query the split row refuses to run (%s)", grace_last_error(vm));
  grace_device_stats_get(vm, &d1);
  is_int((long long)d1.allocated, (long long)d0.allocated, "the refused launch keeps no device memory");
  install_fake_ex(c);
  fake_blocks_per_sm = 2;   /* 264 blocks at once: 100 rows of 6 chunks (4 blocks an SM wanted) become 2 chunks */
  st = grace_ir_run(ir, 1, &xt, 1, &out);
  ok(st == GRACE_OK && ex_coop && !ex_pdl && ex_grid == 200 && ex_block == 512,
     "2 blocks an SM: a cooperative launch of 100 rows x 2 chunks (grid %u of %u threads, cooperative %d)", ex_grid,
     ex_block, ex_coop);
  grace_tensor_release(out);
  out = NULL;
  fake_blocks_per_sm = 1;
  st = grace_ir_run(ir, 1, &xt, 1, &out);
  ok(st == GRACE_OK && ex_coop && ex_grid == 100, "1 block an SM: one chunk a row (grid %u)", ex_grid);
  grace_tensor_release(out);
  out = NULL;
  /* eager softmax over the same rows is written out into that kernel; over short rows it keeps its own */
  ex_coop = 0;
  st = grace_run(vm, GRACE_OP_SOFTMAX, 1, &xt, &last, 1, &out);
  if (!ok(st == GRACE_OK && ex_coop && ex_grid == 100, "eager softmax over 100 rows of 65536: the split row kernel (grid %u)",
          ex_grid))
    printf("# status %d: %s\n", st, st ? grace_last_error(vm) : "");
  grace_tensor_release(out);
  out = NULL;
  /* bfloat16 too (written out in float32 between two casts) */
  grace_tensor *xb = NULL;
  ex_coop = 0;
  st = grace_tensor_empty(vm, GRACE_BFLOAT16, GRACE_CUDA, 2, sz, &xb);
  if (st == GRACE_OK) st = grace_run(vm, GRACE_OP_LOG_SOFTMAX, 1, &xb, &last, 1, &out);
  if (!ok(st == GRACE_OK && ex_coop && ex_grid == 100 && out && grace_tensor_dtype(out) == GRACE_BFLOAT16,
          "eager bfloat16 log_softmax over the same rows: the split row kernel, a bfloat16 result (grid %u)", ex_grid))
    printf("# status %d: %s\n", st, st ? grace_last_error(vm) : "");
  grace_tensor_release(out);
  grace_tensor_release(xb);
  out = NULL;
  grace_tensor *xs = NULL;
  int64_t short_rows[2] = {100, 1000};
  ex_coop = 0;
  long launches = kernel_launches;
  st = grace_tensor_empty(vm, GRACE_FLOAT32, GRACE_CUDA, 2, short_rows, &xs);
  if (st == GRACE_OK) st = grace_run(vm, GRACE_OP_SOFTMAX, 1, &xs, &last, 1, &out);
  ok(st == GRACE_OK && !ex_coop && ex_pdl && kernel_launches == launches + 1,
     "eager softmax over rows of 1000: one launch, as a programmatic dependent of the kernel before");
  grace_tensor_release(out);
  out = NULL;
  c->pdl = 0;   /* GRACE_PDL=0 */
  ex_pdl = 0;
  launches = kernel_launches;
  grace_tensor *yt = NULL;
  if (st == GRACE_OK) st = grace_run(vm, GRACE_OP_EXP, 1, &xs, NULL, 1, &yt);
  if (st == GRACE_OK) st = grace_run(vm, GRACE_OP_SOFTMAX, 1, &xs, &last, 1, &out);
  ok(st == GRACE_OK && !ex_pdl && kernel_launches == launches + 2, "with programmatic launches off: plain launches");
  c->pdl = 1;
  grace_tensor_release(yt);
  grace_tensor_release(out);
  grace_tensor_release(xs);
  c->fn.cuLaunchKernelEx = NULL;
  c->fn.cuOccupancyMaxActiveBlocksPerMultiprocessor = NULL;
  grace_tensor_release(xt);
  grace_ir_free(ir);
  grace_set_graphs(vm, NULL);
}

/* A sum of 40 inputs is more tensor operands than a kernel takes: ir_fuse splits it into two kernels. A chain of 40
 * ops that returns every result is one group that no generated kernel runs whole (41 tensor arguments): it runs an
 * op at a time, and the program's report says so. */
static void unfused_group(grace_vm *vm) {
  enum { N = 40 };
  int64_t sz[1] = {8};
  grace_tensor *x[N] = {0}, *y[N] = {0};
  grace_set_graphs(vm, "off");
  for (int prog = 0; prog < 2; prog++) {
    char text[8192];
    int n = snprintf(text, sizeof text, "func @unfused {\n");
    for (int i = 0; i < (prog ? 1 : N); i++) n += snprintf(text + n, sizeof text - (size_t)n, "  %%%d = input #%d : f32[8] cuda\n", i, i);
    if (!prog) {   /* %40 = %0 + %1, %41 = %40 + %2, ... */
      n += snprintf(text + n, sizeof text - (size_t)n, "  %%%d = add %%0, %%1 : f32[8] cuda\n", N);
      for (int i = 2; i < N; i++)
        n += snprintf(text + n, sizeof text - (size_t)n, "  %%%d = add %%%d, %%%d : f32[8] cuda\n", N + i - 1, N + i - 2, i);
      snprintf(text + n, sizeof text - (size_t)n, "  return %%%d\n}\n", 2 * N - 2);
    } else {       /* %1 = exp %0, %2 = exp %1, ..., all returned */
      for (int i = 1; i <= N; i++) n += snprintf(text + n, sizeof text - (size_t)n, "  %%%d = exp %%%d : f32[8] cuda\n", i, i - 1);
      n += snprintf(text + n, sizeof text - (size_t)n, "  return %%1");
      for (int i = 2; i <= N; i++) n += snprintf(text + n, sizeof text - (size_t)n, ", %%%d", i);
      snprintf(text + n, sizeof text - (size_t)n, "\n}\n");
    }
    const char *what = prog ? "40 exps, all returned" : "a sum of 40 inputs";
    grace_ir *ir = NULL;
    grace_status st = grace_ir_parse(vm, text, &ir);
    if (!ok(st == GRACE_OK, "unfused: %s parses", what)) { printf("# %s\n", grace_last_error(vm)); continue; }
    char rep[4096];
    int nk = -1, nin = prog ? 1 : N, nout = prog ? N : 1;
    st = grace_ir_fuse_report(ir, rep, sizeof rep, &nk);
    ok(st == GRACE_OK && nk == (prog ? 1 : 2), "unfused: %s is %d group(s) (%d)", what, prog ? 1 : 2, nk);
    for (int i = 0; i < nin && st == GRACE_OK; i++) st = grace_tensor_empty(vm, GRACE_FLOAT32, GRACE_CUDA, 1, sz, &x[i]);
    long launches = kernel_launches;
    for (int i = 0; i < 2 && st == GRACE_OK; i++) {
      for (int o = 0; o < N; o++) { grace_tensor_release(y[o]); y[o] = NULL; }
      st = grace_ir_run(ir, nin, x, nout, y);
    }
    long want = prog ? 2 * N : 2 * 2;
    ok(st == GRACE_OK && kernel_launches - launches == want, "unfused: %s runs in %ld launches for two calls (%ld)", what,
       want, kernel_launches - launches);
    grace_graph_info gi;
    grace_ir_graph_info(ir, &gi);
    if (prog)
      ok(gi.unfused == 1 && strstr(gi.unfused_why, "tensor operands"),
         "unfused: the report counts the group once over two calls and says why (%d: %s)", gi.unfused, gi.unfused_why);
    else ok(gi.unfused == 0, "unfused: %s: no group an op at a time", what);
    for (int o = 0; o < N; o++) { grace_tensor_release(y[o]); y[o] = NULL; }
    for (int i = 0; i < N; i++) { grace_tensor_release(x[i]); x[i] = NULL; }
    grace_ir_free(ir);
  }
  grace_set_graphs(vm, NULL);
}

/* grace_set_progress: the lines long work reports */
static int n_compiling, n_recording, n_measuring;
static void count_progress(void *ud, const char *what) {
  (void)ud;
  n_compiling += strstr(what, "compiling kernel") != NULL;
  n_recording += strstr(what, "recording a CUDA graph") != NULL;
  n_measuring += strstr(what, "measuring") != NULL;
}

int main(void) {
  setenv("GRACE_GRAPH_LIMIT", "2", 1);
  char dir[] = "/tmp/grace-fake-XXXXXX";
  int rc = 0;
  grace_vm *vm = fake_vm_new(dir, &rc);
  if (!vm) return rc;
  cuda_ctx *fake = install_fake(vm);
  grace_set_progress(vm, count_progress, NULL);
  forced(vm, "copy", GRACE_LAUNCH_COPY);
  forced(vm, "indirect", GRACE_LAUNCH_INDIRECT);
  measured(vm);
  not_graphed(vm);
  instantiation_oom(vm);
  split_rows(vm, fake);
  unfused_group(vm);
  ok(kernel_launches > 0 && instantiations > 0, "kernels and graphs went through the fake driver");
  ok(n_compiling > 0 && n_recording > 0 && n_measuring > 0,
     "progress is reported: %d kernel compiles, %d graph recordings, %d measured calls", n_compiling, n_recording,
     n_measuring);
  fake_vm_free(vm, dir);
  return tap_done();
}
