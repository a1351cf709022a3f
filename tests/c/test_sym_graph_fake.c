/* test_sym_graph_fake.c: a device program with symbolic sizes (gpu/gpu_exec.c, run_symbolic) on the fake driver
 * (tests/c/fake_cuda.h: device memory is host memory, kernels do nothing, so no value is checked here; the GPU test
 * tests/lua/test_gpu_dynamic.lua does that). One program runs at 64 distinct sizes: every call runs; the kernels
 * are compiled for a few layout classes, not once per size; graphs are recorded per size, but the graphs held stay
 * within the bound (4 specialisations, GRACE_GRAPH_LIMIT graphs each) and the graph memory under GRACE_GRAPH_MEM;
 * each kept copy reports its sizes and graphs (grace_ir_specialization); freeing the program leaves no graph memory. NVRTC compiles the kernels for real; without it the file skips. */
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

static long graphs_alive;
static CUresult count_inst(CUgraphExec *x, CUgraph g, unsigned long long fl) {
  CUresult r = f_inst(x, g, fl);
  if (!r) graphs_alive++;
  return r;
}
static CUresult count_destroy(CUgraphExec x) {
  graphs_alive--;
  return f_gxdestroy(x);
}

static int n_compiling;
static void count_progress(void *ud, const char *what) {
  (void)ud;
  n_compiling += strstr(what, "compiling kernel") != NULL;
}

static const char *text = "func @dyn {\n"
                          "  sym s1 hint=8 min=2\n"
                          "  %0 = input #0 : f32[s1=8] cuda\n"
                          "  %1 = exp %0 : f32[s1=8] cuda\n"
                          "  %2 = neg %1 : f32[s1=8] cuda\n"
                          "  return %2\n"
                          "}\n";

/* Runs ir three times at size n (a graph is recorded by the third call of a layout); 0 when all ran. */
static int run_at(grace_vm *vm, grace_ir *ir, int64_t n) {
  grace_tensor *x = NULL;
  if (grace_tensor_empty(vm, GRACE_FLOAT32, GRACE_CUDA, 1, &n, &x) != GRACE_OK) return 1;
  int bad = 0;
  for (int i = 0; i < 3; i++) {
    grace_tensor *out = NULL;
    if (grace_ir_run(ir, 1, &x, 1, &out) != GRACE_OK) {
      printf("# size %lld: %s\n", (long long)n, grace_last_error(vm));
      bad++;
    } else if (grace_tensor_sizes(out)[0] != n) bad++;
    grace_tensor_release(out);
  }
  grace_tensor_release(x);
  return bad;
}

int main(void) {
  setenv("GRACE_GRAPH_LIMIT", "2", 1);
  char dir[] = "/tmp/grace-symfake-XXXXXX";
  int rc = 0;
  grace_vm *vm = fake_vm_new(dir, &rc);
  if (!vm) return rc;
  cuda_ctx *fake = install_fake(vm);
  fake->fn.cuGraphInstantiateWithFlags = count_inst;
  fake->fn.cuGraphExecDestroy = count_destroy;
  grace_set_progress(vm, count_progress, NULL);
  grace_set_graphs(vm, "indirect");

  /* the graph memory of the largest size alone sets the budget: two sizes' worth */
  grace_ir *ir = NULL;
  ok(grace_ir_parse(vm, text, &ir) == GRACE_OK, "a device program with a symbolic size parses: %s", grace_last_error(vm));
  if (!ir) return tap_done();
  is_int(run_at(vm, ir, 65), 0, "size 65 runs");
  size_t one = cuda_graph_arena_bytes(fake);
  ok(one > 0 && graphs_alive >= 1, "it recorded a graph (%zu bytes of graph memory)", one);
  grace_ir_free(ir);
  char budget[32];
  snprintf(budget, sizeof budget, "%zu", 2 * one);
  setenv("GRACE_GRAPH_MEM", budget, 1);

  ok(grace_ir_parse(vm, text, &ir) == GRACE_OK, "the program again");
  if (!ir) return tap_done();
  int bad = 0, over = 0;
  long most = 0, inst0 = instantiations;
  int compiles0 = n_compiling;
  for (int64_t n = 2; n < 66; n++) {
    bad += run_at(vm, ir, n);
    if (cuda_graph_arena_bytes(fake) > 2 * one) over++;
    if (graphs_alive > most) most = graphs_alive;
  }
  is_int(bad, 0, "64 distinct sizes, 3 calls each, all run with the right result size");
  ok(instantiations - inst0 >= 64, "a graph is recorded per size (%ld)", instantiations - inst0);
  ok(most <= 4 * 2, "graphs held at once stay within 4 sizes of 2 graphs (at most %ld)", most);
  is_int(over, 0, "the graph memory stays under GRACE_GRAPH_MEM (%s bytes) after every call", budget);
  ok(n_compiling - compiles0 <= 4, "kernels compiled for layout classes, not per size (%d compiles for 64 sizes)",
     n_compiling - compiles0);
  int kept = 0, newest = 0;
  char sizes[64];
  for (grace_ir *s; (s = grace_ir_specialization(ir, kept, sizes, sizeof sizes)); kept++) {
    grace_graph_info gi;
    grace_ir_graph_info(s, &gi);
    if (!strcmp(sizes, "s1=65") && gi.managed && gi.graphs >= 1 && gi.replays >= 1) newest = 1;
  }
  ok(kept >= 1 && kept <= 4, "copies per size kept: %d (at most 4)", kept);
  ok(newest, "the latest size's copy is reported with its size, its graph and its replay");
  ok(!grace_ir_specialization(ir, -1, sizes, sizeof sizes) && !grace_ir_specialization(NULL, 0, NULL, 0),
     "no copy past the ends, none of no program");
  grace_ir_free(ir);
  is_int(cuda_graph_arena_bytes(fake), 0, "the program gone, no graph memory is left");
  is_int(graphs_alive, 0, "and no graph");

  grace_set_graphs(vm, NULL);
  fake_vm_free(vm, dir);
  return tap_done();
}
