/* cg_fused_bench.c: bandwidth of generated fused kernels (codegen/cg_fused.c) on the device, kernels timed
 * alone with CUDA events: a pointwise y = x * 2 + 1 over 64 MB of float32 (the target: >= 85% of copy
 * bandwidth), a 3-input chain, softmax rows, and the sum of 16M elements. Prints one line per case.
 * Build (GPU machine): cc -std=c11 -O2 -I. -Iinclude bench/cg_fused_bench.c <build>/libgrace.a <libs>. */
#include <stdio.h>
#include <string.h>
#include "grace.h"
#include "ir/ir.h"
#include "ir/ir_fuse.h"
#include "codegen/cg_fused.h"
#include "cuda/cuda_api.h"

static grace_vm *vm;
static unsigned grid_override;   /* > 0: launch with this many blocks instead of cg_fused_pack's (the grid sweep) */

/* Times group 0 of ir (every external a fresh contiguous device buffer) over reps launches; bytes moved from the
 * IR types. */
static void run(const char *what, grace_ir *ir, int reps) {
  cuda_ctx *c = cuda_get(vm);
  ir_fusion f;
  if (!c || grace_ir_verify(ir) != GRACE_OK || ir_fuse(ir, &f) != GRACE_OK) { printf("%s: %s\n", what, grace_last_error(vm)); return; }
  cg_group_io io;
  cg_tensor ext[CG_MAX_ARGS];
  cg_fused_spec spec;
  cg_fused_geom geom;
  cg_kernel k;
  uint64_t ptrs[CG_MAX_ARGS + 1];
  size_t sizes[CG_MAX_ARGS];
  double bytes = 0;
  int g = 0;
  while (g < f.ngroup && f.groups[g].kind != IR_FUSE_POINTWISE && f.groups[g].kind != IR_FUSE_ROW) g++;
  if (cg_fused_io(vm, ir, &f, g, &io) != GRACE_OK) { printf("%s: %s\n", what, grace_last_error(vm)); return; }
  for (int a = 0; a < io.next + io.nstore; a++) {
    const ir_type *t = &ir->vals[a < io.next ? io.ext[a] : io.store[a - io.next]].type;
    int64_t n = 1;
    for (int d = 0; d < t->ndim; d++) n *= t->sizes[d];
    sizes[a] = (size_t)n * grace_dtype_size(t->dtype);
    bytes += (double)sizes[a];
    CUdeviceptr p;
    if (cuda_malloc(c, sizes[a], &p) != GRACE_OK) { printf("%s: %s\n", what, grace_last_error(vm)); return; }
    cuda_memset(c, p, 0, sizes[a]);
    ptrs[a] = p;
    if (a < io.next) {
      memset(&ext[a], 0, sizeof ext[a]);
      ext[a].ptr = p; ext[a].ndim = t->ndim; ext[a].dtype = t->dtype;
      int64_t s = 1;
      for (int d = t->ndim - 1; d >= 0; d--) { ext[a].sizes[d] = t->sizes[d]; ext[a].strides[d] = s; s *= t->sizes[d]; }
    }
  }
  cuda_module *m;
  CUfunction fn;
  cg_launch L;
  if (cg_fused_plan(vm, ir, &f, g, &io, ext, 0, cuda_properties(c)->sms, &spec, &geom) != GRACE_OK || cg_fused_generate(vm, ir, &f, g, &io, &spec, &k) != GRACE_OK ||
      cuda_module_get(c, k.src, &m) != GRACE_OK || cuda_module_function(c, m, k.name, &fn) != GRACE_OK ||
      (geom.ws_bytes && (cuda_malloc(c, geom.ws_bytes, (CUdeviceptr *)&ptrs[io.next + io.nstore]) != GRACE_OK ||
                         cuda_memset(c, ptrs[io.next + io.nstore], 0, geom.ws_bytes) != GRACE_OK)) ||
      cg_fused_pack(vm, &k, &spec, &geom, ptrs, cuda_properties(c)->sms, &L) != GRACE_OK) {
    printf("%s: %s\n", what, grace_last_error(vm));
    return;
  }
  if (grid_override) L.grid[0] = grid_override;
  CUevent e0, e1;
  cuda_event_new(c, &e0); cuda_event_new(c, &e1);
  for (int i = 0; i < 3; i++) cuda_launch(c, fn, L.grid, L.block, L.smem, L.words, 8 * (size_t)L.nwords);
  cuda_event_record(c, e0);
  for (int i = 0; i < reps; i++) cuda_launch(c, fn, L.grid, L.block, L.smem, L.words, 8 * (size_t)L.nwords);
  cuda_event_record(c, e1);
  float ms = 0;
  cuda_event_elapsed(c, e0, e1, &ms);
  double us = ms * 1e3 / reps;
  printf("%-44s %9.1f us  %7.0f GB/s  (grid %u x %u, vec %d)\n", what, us, bytes / (us * 1e3), L.grid[0], L.block[0], spec.vec);
  for (int a = 0; a < io.next + io.nstore; a++) cuda_release(c, ptrs[a], sizes[a]);
  cg_kernel_free(vm, &k);
  ir_fuse_free(ir, &f);
}

/* eager softmax by grace_run over x, 10 calls */
typedef struct eager_arg { grace_tensor *x; } eager_arg;
static grace_status eager_softmax(grace_vm *v, void *ud) {
  eager_arg *e = ud;
  grace_attrs last = {.ndims = 1, .dims = {-1}};
  grace_status st = GRACE_OK;
  for (int i = 0; i < 10 && st == GRACE_OK; i++) {
    grace_tensor *y = NULL;
    st = grace_run(v, GRACE_OP_SOFTMAX, 1, &e->x, &last, 1, &y);
    grace_tensor_release(y);
  }
  return st;
}
static void run_eager(grace_dtype dt, int64_t rows, int64_t cols) {
  grace_attrs a = {.nshape = 2, .shape = {rows, cols}, .device = GRACE_CUDA, .has_dtype = 1, .dtype = dt};
  eager_arg e = {NULL};
  double ms = 0, best = 1e30;
  grace_status st = grace_run(vm, GRACE_OP_RANDN, 0, NULL, &a, 1, &e.x);
  for (int r = 0; r < 5 && st == GRACE_OK; r++) {   /* the first compiles: the best of five */
    st = grace_device_time(vm, GRACE_CUDA, eager_softmax, &e, &ms);
    if (ms < best) best = ms;
  }
  char what[64];
  snprintf(what, sizeof what, "eager softmax [%lld, %lld] %s", (long long)rows, (long long)cols, grace_dtype_name(dt));
  if (st != GRACE_OK) printf("%s: %s\n", what, grace_last_error(vm));
  else printf("%-44s %9.1f us  %7.0f GB/s\n", what, best * 1e2, 2.0 * (double)(rows * cols) *
              (double)grace_dtype_size(dt) / (best * 1e-4) / 1e9);
  grace_tensor_release(e.x);
}
static grace_value in(grace_ir *ir, grace_dtype dt, int nd, int64_t a, int64_t b) {
  int64_t s[2] = {a, b};
  grace_value v;
  grace_ir_input(ir, dt, GRACE_CUDA, nd, s, &v);
  return v;
}
static grace_value op(grace_ir *ir, grace_op o, grace_value a, grace_value b, const grace_attrs *at) {
  grace_value x[2] = {a, b}, r = -1;
  grace_ir_op(ir, o, b < 0 ? 1 : 2, x, at, 1, &r);
  return r;
}
static grace_value lit(grace_ir *ir, double v) { grace_value r; grace_ir_literal(ir, v, 0, &r); return r; }
static const grace_attrs last_dim = {.ndims = 1, .dims = {-1}, .keepdim = 1};

/* softmax over the last dim of a float32 [rows, cols] input, written out (one row group) */
static grace_ir *softmax_ir(int64_t rows, int64_t cols) {
  grace_ir *ir = grace_ir_new(vm, "b");
  grace_value x = in(ir, GRACE_FLOAT32, 2, rows, cols);
  grace_value mx = op(ir, GRACE_OP_MAX, x, -1, &last_dim);
  grace_value e = op(ir, GRACE_OP_EXP, op(ir, GRACE_OP_SUB, x, mx, NULL), -1, NULL);
  grace_ir_output(ir, op(ir, GRACE_OP_DIV, e, op(ir, GRACE_OP_SUM, e, -1, &last_dim), NULL));
  return ir;
}

int main(void) {
  char err[256];
  vm = grace_vm_new(NULL, err, sizeof err);
  if (!vm || !cuda_usable(vm)) { printf("no device: %s\n", vm ? cuda_why(vm) : err); return 0; }
  printf("%s\n", cuda_describe(vm));
  grace_ir *ir;
  static const grace_dtype dts[] = {GRACE_FLOAT32, GRACE_FLOAT16, GRACE_BFLOAT16};
  for (int d = 0; d < 3; d++) {
    ir = grace_ir_new(vm, "b");
    int64_t n = (64 << 20) / (int64_t)grace_dtype_size(dts[d]);
    grace_value x = in(ir, dts[d], 1, n, 0);
    grace_ir_output(ir, op(ir, GRACE_OP_ADD, op(ir, GRACE_OP_MUL, x, lit(ir, 2), NULL), lit(ir, 1), NULL));
    char what[64];
    snprintf(what, sizeof what, "x * 2 + 1, 64 MB %s", grace_dtype_name(dts[d]));
    run(what, ir, 50);
    grace_ir_free(ir);
  }
  ir = grace_ir_new(vm, "b");
  {
    grace_value x = in(ir, GRACE_FLOAT32, 1, 1 << 20, 0), y = in(ir, GRACE_FLOAT32, 1, 1 << 20, 0), a = x;
    for (int i = 0; i < 20; i++) a = op(ir, GRACE_OP_TANH, op(ir, GRACE_OP_ADD, op(ir, GRACE_OP_MUL, a, lit(ir, 0.9), NULL), y, NULL), -1, NULL);
    grace_ir_output(ir, a);
  }
  run("60-op chain, 1M float32", ir, 50);
  grace_ir_free(ir);
  static const int64_t shapes[][2] = {{4096, 1024}, {1024, 32768}, {1, 16 << 20}, {64, 256 << 10}, {16 << 10, 1024}};
  for (int s = 0; s < 5; s++) {
    ir = softmax_ir(shapes[s][0], shapes[s][1]);
    char what[64];
    snprintf(what, sizeof what, "softmax [%lld, %lld] float32", (long long)shapes[s][0], (long long)shapes[s][1]);
    run(what, ir, 20);
    grace_ir_free(ir);
    ir = grace_ir_new(vm, "b");
    grace_ir_output(ir, op(ir, GRACE_OP_SUM, in(ir, GRACE_FLOAT32, 2, shapes[s][0], shapes[s][1]), -1, &last_dim));
    snprintf(what, sizeof what, "sum [%lld, %lld] float32 dim -1", (long long)shapes[s][0], (long long)shapes[s][1]);
    run(what, ir, 20);
    grace_ir_free(ir);
  }
  /* a block a row over rows of 128-256 KB (more than L2 holds at once at 4 blocks an SM): the grid swept, so
     fewer rows are read at a time and the passes after the first may find them in L2 */
  static const int64_t gshapes[][2] = {{1024, 32768}, {512, 65536}, {4096, 8192}};
  static const unsigned grids[] = {0, 132, 200, 264, 396, 528};   /* 0: cg_fused_pack's */
  for (int s = 0; s < 3; s++)
    for (int gi = 0; gi < 6; gi++) {
      ir = softmax_ir(gshapes[s][0], gshapes[s][1]);
      char what[64];
      snprintf(what, sizeof what, "softmax [%lld, %lld] float32, grid %u", (long long)gshapes[s][0], (long long)gshapes[s][1], grids[gi]);
      grid_override = grids[gi];
      run(what, ir, 20);
      grid_override = 0;
      grace_ir_free(ir);
    }
  /* eager softmax over few long rows: written out into the split row kernel (float32, and bfloat16 in float32) */
  static const int64_t eshapes[][2] = {{1, 16 << 20}, {4, 50257}, {1024, 4096}};
  for (int s = 0; s < 3; s++) { run_eager(GRACE_FLOAT32, eshapes[s][0], eshapes[s][1]); run_eager(GRACE_BFLOAT16, eshapes[s][0], eshapes[s][1]); }
  grace_vm_free(vm);
  return 0;
}
