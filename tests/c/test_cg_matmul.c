/* test_cg_matmul.c: the matrix-product kernels (codegen/cg_matmul.c), cuBLASLt loading (cuda/cuda_blas.c) and
 * the MATMUL group runner (gpu/gpu_matmul.c).
 * Without a GPU: the generated sources hold what they must (mma.sync, cp.async, ldmatrix, the epilogue's ops,
 * the indirect dereference), are deterministic, and every variant compiles with NVRTC for sm_90 and sm_80;
 * cuBLASLt loads, and a missing library is a clean error.
 * With a GPU: MATMUL groups (odd shapes, 1-D operands, batched with broadcast, transposed weights, every
 * epilogue op) against the CPU backend on the same data (f32 rel 1e-4, f16/bf16 rel 2e-2), and the
 * autotuned choice being cached. */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include "grace.h"
#include "codegen/cg_matmul.h"
#include "cuda/cuda_api.h"
#include "cuda/cuda_blas.h"
#include "ir/ir.h"
#include "ir/ir_fuse.h"
#include "gpu/gpu_exec.h"
#include "gpu/gpu_matmul.h"
#include "base/base.h"
#include "pdl_check.h"
#include "tap.h"

static grace_vm *vm;

static cg_mm_desc desc(cg_mm_form form, grace_dtype dt, int ak, int bk, int vec, int mt) {
  cg_mm_desc d;
  memset(&d, 0, sizeof d);
  d.form = form; d.dt = dt; d.out_dt = dt; d.a_kmajor = ak; d.b_kmajor = bk; d.vec = vec; d.mtile = mt;
  return d;
}

/* bias (operand 0, a row vector), gelu, residual (operand 1), times a scalar, in dt */
static void full_epilogue(cg_mm_desc *d) {
  d->nop = 2; d->op_dtypes[0] = d->dt; d->op_dtypes[1] = d->dt; d->nscalar = 1;
  d->nepi = 4;
  d->epi[0] = (cg_epi_step){GRACE_OP_ADD, 0, d->dt, 0, 0};
  d->epi[1] = (cg_epi_step){GRACE_OP_GELU, 0, d->dt, 0, 0};
  d->epi[2] = (cg_epi_step){GRACE_OP_ADD, 1, d->dt, 0, 0};
  d->epi[3] = (cg_epi_step){GRACE_OP_MUL, -1, d->dt, 0, 0};
}

static const char *dts(grace_dtype dt) { return grace_dtype_name(dt); }

/* ---- source checks (no GPU) ---- */
static void test_sources(void) {
  cg_kernel k1, k2;
  cg_mm_desc d = desc(CG_MM_GEMM_TC, GRACE_BFLOAT16, 1, 1, 1, 1);
  full_epilogue(&d);
  ok(cg_matmul_source(vm, &d, &k1) == GRACE_OK, "tensor-core source generates");
  ok(k1.src && strstr(k1.src, "mma.sync.aligned.m16n8k16.row.col.f32.bf16.bf16.f32"), "it holds mma.sync m16n8k16 bf16");
  ok(pdl_enters_first(k1.src), "it lets the next kernel launch and waits for the earlier ones before anything else");
  ok(k1.src && strstr(k1.src, "cp.async.cg.shared.global") && strstr(k1.src, "cp.async.wait_group"),
     "it holds cp.async and its wait");
  ok(k1.src && strstr(k1.src, "ldmatrix.sync.aligned.m8n8.x4"), "it holds ldmatrix");
  ok(k1.src && strstr(k1.src, "erfcf(") && strstr(k1.src, "MM_LDE0(E0_[") && strstr(k1.src, "MM_LDE1(E1_[") &&
         strstr(k1.src, "e_ * S0_"), "the epilogue holds gelu, the bias, the residual and the scalar");
  ok(k1.src && strstr(k1.src, "grace_f2bf(e_)"), "bf16 results are rounded per step");
  ok(k1.src && !strstr(k1.src, "#include"), "no header is included");
  ok(cg_matmul_source(vm, &d, &k2) == GRACE_OK && k1.src && k2.src && !strcmp(k1.src, k2.src) &&
         !strcmp(k1.name, k2.name), "generation is deterministic");
  cg_kernel_free(vm, &k2);
  d.epi[1].op = GRACE_OP_RELU;
  ok(cg_matmul_source(vm, &d, &k2) == GRACE_OK && strcmp(k1.name, k2.name) != 0, "another epilogue, another name");
  cg_kernel_free(vm, &k2);
  d.epi[1].op = GRACE_OP_GELU;
  d.indirect = 1;
  ok(cg_matmul_source(vm, &d, &k2) == GRACE_OK && strstr(k2.src, "const MM_T **A;") &&
         strstr(k2.src, "= *p.A;") && strstr(k2.src, "const double *s0;") && strstr(k2.src, "(float)*p.s0"),
     "indirect: pointers and scalars are dereferenced at entry");
  cg_kernel_free(vm, &k2);
  cg_kernel_free(vm, &k1);
  d = desc(CG_MM_GEMM_TC, GRACE_FLOAT16, 0, 0, 1, 1);
  ok(cg_matmul_source(vm, &d, &k1) == GRACE_OK && strstr(k1.src, "f32.f16.f16.f32") && strstr(k1.src, "MM_AK 0"),
     "f16 tensor cores, m-major A");
  cg_kernel_free(vm, &k1);
  d = desc(CG_MM_GEMM_TC, GRACE_FLOAT32, 1, 1, 1, 1);
  ok(cg_matmul_source(vm, &d, &k1) == GRACE_EUNSUPPORTED, "f32 is refused by the tensor-core kernel (no tf32)");
  d = desc(CG_MM_GEMV_NT, GRACE_BFLOAT16, 1, 1, 4, 1);
  ok(cg_matmul_source(vm, &d, &k1) == GRACE_EUNSUPPORTED, "a vector width that is not 16 bytes is refused");
  d = desc(CG_MM_GEMV_NT, GRACE_FLOAT32, 1, 1, 4, 1);
  d.nepi = 1; d.epi[0] = (cg_epi_step){GRACE_OP_ADD, 0, GRACE_FLOAT32, 0, 0};
  ok(cg_matmul_source(vm, &d, &k1) == GRACE_EUNSUPPORTED, "an epilogue naming a missing operand is refused");
  d = desc(CG_MM_GEMV_NT, GRACE_FLOAT32, 1, 1, 4, 1);
  d.split = 1;
  ok(cg_matmul_source(vm, &d, &k1) == GRACE_OK && strstr(k1.src, "WS_[(((long long)blockIdx.y"),
     "split-K GEMV writes partials");
  ok(k1.src && strstr(k1.src, "if (bi) { i0 = bi / (BD1 * BD2);"),
     "the batch coordinates are divided out only past the first matrix (a GEMV thread's prologue stays short)");
  ok(k1.src && strstr(k1.src, "griddepcontrol.wait") && strstr(k1.src, "#define MM_PREFETCH 0") &&
     strstr(k1.src, "wv[u] = mm_ld_stream(w"),
     "the GEMV streams its weight (read-only path) and waits on the previous kernel, without prefetching by default");
  cg_kernel_free(vm, &k1);
  d.prefetch = 1;
  const char *body = cg_matmul_source(vm, &d, &k1) == GRACE_OK ? strstr(k1.src, "__global__") : NULL;
  ok(body && strstr(k1.src, "#define MM_PREFETCH 1") && strstr(body, "prefetch.global.L2") &&
     strstr(body, "prefetch.global.L2") < strstr(body, "griddepcontrol.wait;"),
     "a one-wave GEMV prefetches its weight before waiting on the previous kernel");
  ok(body && !pdl_enters_first(k1.src), "a GEMV does not wait on entry: its wait follows its weight loads");
  cg_kernel_free(vm, &k1);
  cg_launch l;
  memset(&l, 0, sizeof l);
  /* GEMV_RW: the weight is loaded into registers, then the next kernel let in, then the wait */
  d = desc(CG_MM_GEMV_RW, GRACE_BFLOAT16, 1, 1, 8, 1);
  d.rl = 3; d.rc = 2;
  body = cg_matmul_source(vm, &d, &k1) == GRACE_OK ? strstr(k1.src, "__global__") : NULL;
  const char *ld = body ? strstr(body, "wv[c][u] = mm_ld_stream(w + u * 32 * MM_VEC)") : NULL;
  const char *early = body ? strstr(body, "#if !MM_RWLATE") : NULL, *late = body ? strstr(body, "#if MM_RWLATE") : NULL;
  const char *let = early ? strstr(early, "griddepcontrol.launch_dependents") : NULL;
  const char *wait = early ? strstr(early, "griddepcontrol.wait;") : NULL;
  ok(ld && let && wait && ld < early && let < wait && strstr(k1.src, "#define MM_RL 3") &&
         strstr(k1.src, "#define MM_RC 2") && strstr(k1.src, "#define MM_RWLATE 0"),
     "GEMV_RW loads its weight, then lets the next kernel in, then waits");
  cg_kernel_free(vm, &k1);
  d.rw_late = 1;
  body = cg_matmul_source(vm, &d, &k1) == GRACE_OK ? strstr(k1.src, "__global__") : NULL;
  late = body ? strstr(body, "#if MM_RWLATE") : NULL;
  ld = body ? strstr(body, "wv[c][u] = mm_ld_stream(w + u * 32 * MM_VEC)") : NULL;
  ok(late && ld && late < ld && strstr(late, "griddepcontrol.wait;") < ld && strstr(k1.src, "#define MM_RWLATE 1"),
     "GEMV_RW of a weight that is not settled waits before it loads");
  cg_kernel_free(vm, &k1);
  d.rw_late = 0;
  d.rl = 13; d.rc = 2;
  ok(cg_matmul_source(vm, &d, &k1) == GRACE_EUNSUPPORTED, "GEMV_RW holding more than %d vectors a lane is refused",
     CG_MM_RW_MAX_VECS);
  d.rl = 3; d.vec = 4;
  ok(cg_matmul_source(vm, &d, &k1) == GRACE_EUNSUPPORTED, "GEMV_RW needs 16-byte vectors");
  d.vec = 8; d.split = 1;
  ok(cg_matmul_source(vm, &d, &k1) == GRACE_EUNSUPPORTED, "GEMV_RW does not split K");
  d.split = 0; d.rc = 2;
  l.words[CG_MM_M] = 1; l.words[CG_MM_N] = 2305; l.words[CG_MM_NB] = 3;
  cg_matmul_geometry(&d, &l);
  ok(l.grid[0] == (2305 + 7) / 8 && l.grid[1] == 1 && l.grid[2] == 3 && l.block[0] == 128,
     "GEMV_RW geometry: 4 warps of 2 columns a block, a matrix per grid z");
  /* GEMM_WG: sm_90a only, wgmma and TMA, tensor maps at a 64-byte boundary of the parameter struct */
  d = desc(CG_MM_GEMM_WG, GRACE_BFLOAT16, 1, 1, 1, 1);
  ok(cg_matmul_source(vm, &d, &k1) == GRACE_OK && strstr(k1.src, "#define GRACE_ARCH_SPECIFIC") &&
         strstr(k1.src, "#define MM_WGT \"bf16\"") && strstr(k1.src, "wgmma.mma_async.sync.aligned.m64n128k16.f32.\" MM_WGT") &&
         strstr(k1.src, "cp.async.bulk.tensor.2d") && strstr(k1.src, "__grid_constant__") &&
         strstr(k1.src, "mm_tmap ta, tb;"),
     "the Hopper GEMM: marked architecture-specific, wgmma bf16, TMA loads, maps in a grid-constant struct");
  cg_kernel_free(vm, &k1);
  d.b_kmajor = 0;
  ok(cg_matmul_source(vm, &d, &k1) == GRACE_OK && strstr(k1.src, "#define MM_BK 0") && strstr(k1.src, "mm_sdesc(sB, 8192)") &&
         strstr(k1.src, "mm_wgmma<1 - MM_BK>"), "the Hopper GEMM takes an n-major B (wgmma's transposed B)");
  cg_kernel_free(vm, &k1);
  d.a_kmajor = 0;
  ok(cg_matmul_source(vm, &d, &k1) == GRACE_EUNSUPPORTED, "the Hopper GEMM refuses an m-major A");
  d.a_kmajor = 1; d.b_kmajor = 1; d.indirect = 1;
  ok(cg_matmul_source(vm, &d, &k1) == GRACE_EUNSUPPORTED, "the Hopper GEMM refuses indirection (its maps hold pointers)");
  is_int(cg_matmul_wg_maps(23), 24, "the maps start at the next 64-byte boundary");
  is_int(cg_matmul_wg_maps(32), 32, "or where the words end, when that is one");
  d.indirect = 0;
  l.words[CG_MM_M] = 4096; l.words[CG_MM_N] = 1000; l.words[CG_MM_NB] = 1;
  cg_matmul_geometry(&d, &l);
  ok(l.grid[0] == 8 && l.grid[1] == 32 && l.block[0] == 384 && l.smem == 4 * 2 * 128 * 64 * 2 + 1024,
     "GEMM_WG geometry: a 128x128 tile a block, 3 warpgroups, 4 stages of shared memory");
  d = desc(CG_MM_GEMM_TC, GRACE_BFLOAT16, 1, 1, 1, 1);
  is_int(cg_matmul_tc_smem(&d), 3 * (128 * 40 + 128 * 40) * 2, "tensor-core shared memory, k-major tiles");
  d.tile = 1; d.b_kmajor = 0;
  is_int(cg_matmul_tc_smem(&d), 4 * (128 * 40 + 32 * 136) * 2, "4 stages for 64x64 warp tiles, n-major B");
  l.words[CG_MM_M] = 1; l.words[CG_MM_N] = 50257; l.words[CG_MM_K] = 768; l.words[CG_MM_NB] = 1;
  l.words[CG_MM_SPLITS] = 1;
  d = desc(CG_MM_GEMV_NT, GRACE_FLOAT32, 1, 1, 4, 1);
  cg_matmul_geometry(&d, &l);
  ok(l.grid[0] == (50257 + 3) / 4 && l.block[0] == 128 && l.grid[2] == 1, "GEMV_NT geometry: a warp per column");
  d.wpr = 4;
  cg_matmul_geometry(&d, &l);
  ok(l.grid[0] == 50257 && l.block[0] == 128, "GEMV_NT geometry: 4 warps per column");
  d.wpr = 3;
  ok(cg_matmul_source(vm, &d, &k1) == GRACE_EUNSUPPORTED, "3 warps per column is refused");
}

/* ---- which weights a captured GEMV may load before its wait (no GPU needed) ---- */
static void test_settled(void) {
  int64_t ws[2] = {8, 16}, xs[2] = {1, 16};
  grace_ir *ir = grace_ir_new(vm, "settled");
  grace_value x, w, c, wt, cv, sum, prod;
  grace_tensor *ct = NULL;
  grace_attrs a = {0};
  a.ndims = 2; a.dims[0] = -1; a.dims[1] = -2;
  int bad = grace_tensor_empty(vm, GRACE_FLOAT32, GRACE_CPU, 2, ws, &ct) ||
            grace_ir_input(ir, GRACE_FLOAT32, GRACE_CPU, 2, xs, &x) ||
            grace_ir_input(ir, GRACE_FLOAT32, GRACE_CPU, 2, ws, &w) || grace_ir_const(ir, ct, &c) ||
            grace_ir_op(ir, GRACE_OP_TRANSPOSE, 1, &w, &a, 1, &wt) || grace_ir_op(ir, GRACE_OP_TRANSPOSE, 1, &c, &a, 1, &cv);
  grace_value two[2] = {w, c};
  bad = bad || grace_ir_op(ir, GRACE_OP_ADD, 2, two, NULL, 1, &sum);
  two[0] = x; two[1] = wt;
  bad = bad || grace_ir_op(ir, GRACE_OP_MATMUL, 2, two, NULL, 1, &prod) || grace_ir_output(ir, prod);
  ok(!bad && gpu_matmul_settled_root(ir, w) == w && gpu_matmul_settled_root(ir, wt) == w &&
         gpu_matmul_settled_root(ir, cv) == c, "an input, a captured tensor and their views are settled, on their root");
  ok(!bad && gpu_matmul_settled_root(ir, sum) < 0 && gpu_matmul_settled_root(ir, prod) < 0,
     "a value computed by the program is not");
  grace_value filled;
  grace_attrs f = {0};
  f.a = 1.0;
  bad = bad || grace_ir_op(ir, GRACE_OP_FILL_, 1, &c, &f, 1, &filled) || grace_ir_write(ir, c, filled);
  ok(!bad && gpu_matmul_settled_root(ir, wt) < 0 && gpu_matmul_settled_root(ir, cv) < 0,
     "in a program that writes an input in place, nothing is");
  grace_ir_free(ir);
  grace_tensor_release(ct);
}

/* ---- every variant compiles (NVRTC, no GPU needed) ---- */
static void compile_one(const cg_mm_desc *d, const char *what) {
  cg_kernel k;
  if (cg_matmul_source(vm, d, &k) != GRACE_OK) { ok(0, "%s: source: %s", what, grace_last_error(vm)); return; }
  int archs[2] = {90, 80};
  for (int a = 0; a < (d->form == CG_MM_GEMM_WG ? 1 : 2); a++) {   /* wgmma: sm_90a alone */
    char *out = NULL;
    size_t n = 0;
    grace_status st = cuda_nvrtc_compile(vm, k.src, archs[a], 1, &out, &n);
    ok(st == GRACE_OK && n > 0, "%s compiles for sm_%d", what, archs[a]);
    if (st != GRACE_OK) printf("# %s\n", grace_last_error(vm));
    if (out) grace_realloc(vm, out, n, 0);
  }
  cg_kernel_free(vm, &k);
}

static void test_compiles(void) {
  const char *why = cuda_nvrtc_why(vm);
  if (why) { printf("# NVRTC cannot load: %s\n", why); skip("NVRTC not loadable"); return; }
  grace_dtype dts3[3] = {GRACE_FLOAT32, GRACE_BFLOAT16, GRACE_FLOAT16};
  char what[160];
  for (int t = 0; t < 3; t++) {
    grace_dtype dt = dts3[t];
    int vec = 16 / (int)grace_dtype_size(dt);
    for (int ind = 0; ind < 2; ind++) {
      cg_mm_desc d = desc(CG_MM_GEMV_NT, dt, 1, 1, vec, 1);
      d.indirect = ind;
      d.a_vec = 1;
      snprintf(what, sizeof what, "GEMV W[N,K] %s vec, M tile 1%s", dts(dt), ind ? ", indirect" : "");
      compile_one(&d, what);
      d = desc(CG_MM_GEMV_NN, dt, 1, 0, vec, 4);
      d.indirect = ind;
      full_epilogue(&d);
      snprintf(what, sizeof what, "GEMV W[K,N] %s vec, M tile 4, epilogue%s", dts(dt), ind ? ", indirect" : "");
      compile_one(&d, what);
    }
    cg_mm_desc d = desc(CG_MM_GEMV_NT, dt, 0, 1, 1, 16);
    full_epilogue(&d);
    snprintf(what, sizeof what, "GEMV W[N,K] %s scalar, M tile 16, epilogue", dts(dt));
    compile_one(&d, what);
    d = desc(CG_MM_GEMV_NT, dt, 1, 1, vec, 2);
    d.wpr = 4;
    d.prefetch = 1;
    full_epilogue(&d);
    snprintf(what, sizeof what, "GEMV W[N,K] %s, 4 warps per column, L2 prefetch, epilogue", dts(dt));
    compile_one(&d, what);
    d = desc(CG_MM_GEMV_NT, dt, 1, 1, 1, 1);
    d.wpr = 2;
    snprintf(what, sizeof what, "GEMV W[N,K] %s scalar, 2 warps per column", dts(dt));
    compile_one(&d, what);
    d = desc(CG_MM_GEMV_NT, dt, 1, 1, vec, 2);
    d.split = 1;
    snprintf(what, sizeof what, "GEMV W[N,K] %s split-K", dts(dt));
    compile_one(&d, what);
    for (int v = 0; v < 2; v++) {
      d = desc(CG_MM_GEMV_RW, dt, 1, 1, vec, 1);
      d.rl = v ? 24 : 3; d.rc = v ? 1 : 2; d.a_vec = !v; d.indirect = v;
      if (v) full_epilogue(&d);
      snprintf(what, sizeof what, "GEMV_RW %s, %d x %d vectors a lane%s", dts(dt), d.rc, d.rl,
               v ? ", scalar rows, epilogue, indirect" : "");
      compile_one(&d, what);
    }
    d = desc(CG_MM_GEMV_NN, dt, 1, 0, 1, 8);
    d.split = 1;
    snprintf(what, sizeof what, "GEMV W[K,N] %s scalar split-K", dts(dt));
    compile_one(&d, what);
    d = desc(CG_MM_SPLITK, dt, 1, 1, 1, 1);
    full_epilogue(&d);
    snprintf(what, sizeof what, "split-K finish %s, epilogue", dts(dt));
    compile_one(&d, what);
    for (int lay = 0; lay < 4; lay++) {
      d = desc(CG_MM_GEMM_SIMT, dt, lay & 1, lay >> 1, 1, 1);
      if (lay == 3) full_epilogue(&d);
      snprintf(what, sizeof what, "SIMT GEMM %s, A %s-major, B %s-major%s", dts(dt), lay & 1 ? "k" : "m",
               lay & 2 ? "k" : "n", lay == 3 ? ", epilogue" : "");
      compile_one(&d, what);
      if (dt == GRACE_FLOAT32) continue;
      if (lay == 3) {
        d = desc(CG_MM_GEMM_WG, dt, 1, 0, 1, 1);
        compile_one(&d, "Hopper GEMM, n-major B");
        d = desc(CG_MM_GEMM_WG, dt, 1, 1, 1, 1);
        compile_one(&d, "Hopper GEMM");
        full_epilogue(&d);
        snprintf(what, sizeof what, "Hopper GEMM (wgmma, TMA) %s, epilogue", dts(dt));
        compile_one(&d, what);
      }
      d = desc(CG_MM_GEMM_TC, dt, lay & 1, lay >> 1, 1, 1);
      if (lay == 1) full_epilogue(&d);
      d.indirect = lay == 2;
      compile_one(&d, "tensor-core GEMM (8 warps)");
      d.tile = 1;
      snprintf(what, sizeof what, "tensor-core GEMM %s, A %s-major, B %s-major%s%s", dts(dt), lay & 1 ? "k" : "m",
               lay & 2 ? "k" : "n", lay == 1 ? ", epilogue" : "", lay == 2 ? ", indirect" : "");
      compile_one(&d, what);
    }
  }
  /* every epilogue op, a cast to another dtype (f32 product, bf16 result) */
  cg_mm_desc d = desc(CG_MM_GEMM_SIMT, GRACE_FLOAT32, 1, 1, 1, 1);
  d.out_dt = GRACE_BFLOAT16;
  d.nop = 1; d.op_dtypes[0] = GRACE_FLOAT16; d.nscalar = 1;
  /* {op, reversed}: reversed binary steps are operand op value (rsub, rdiv) */
  static const int ops[][2] = {{GRACE_OP_ADD, 0}, {GRACE_OP_SUB, 0}, {GRACE_OP_SUB, 1}, {GRACE_OP_MUL, 0},
                               {GRACE_OP_DIV, 0}, {GRACE_OP_DIV, 1}, {GRACE_OP_RELU, 0}, {GRACE_OP_SILU, 0}};
  for (int i = 0; i < 8; i++) d.epi[i] = (cg_epi_step){ops[i][0], i % 2 ? -1 : 0, GRACE_FLOAT32, 0, ops[i][1]};
  d.nepi = 8;
  compile_one(&d, "SIMT f32 with add, sub, rsub, mul, div, rdiv, relu, silu");
  /* gelu with flag 1: the tanh approximation */
  static const int ops2[] = {GRACE_OP_GELU, GRACE_OP_TANH, GRACE_OP_SIGMOID, GRACE_OP_NEG, GRACE_OP_CAST};
  for (int i = 0; i < 5; i++) d.epi[i] = (cg_epi_step){ops2[i], 0, i == 4 ? GRACE_BFLOAT16 : GRACE_FLOAT32, i == 0, 0};
  d.nepi = 5;
  compile_one(&d, "SIMT f32 with gelu(tanh), tanh, sigmoid, neg, cast to bf16");
}

/* ---- cuBLASLt loading ---- */
static void test_blas_load(void) {
  cuda_blas *b = NULL;
  grace_status st = cuda_blas_load(vm, NULL, &b);
  if (st == GRACE_OK) {
    ok(b != NULL, "cuBLASLt loads (no GPU needed for dlopen)");
    ok(cuda_blas_version(b) > 0, "cuBLASLt reports version %zu", cuda_blas_version(b));
    cuda_blas_free(vm, b);
  } else {
    printf("# %s\n", grace_last_error(vm));
    skip("cuBLASLt not installed here");
    skip("cuBLASLt not installed here");
  }
  b = NULL;
  st = cuda_blas_load(vm, "libgrace-no-such-cublasLt.so", &b);
  ok(st == GRACE_EDEVICE && b == NULL && strstr(grace_last_error(vm), "cuBLASLt"),
     "a missing library is a clean error: %s", grace_last_error(vm));
}

/* ---- on the device: MATMUL groups against the CPU backend ---- */
static uint64_t rng = 0x9E3779B97F4A7C15ull;
static float frand(void) {
  rng ^= rng << 13; rng ^= rng >> 7; rng ^= rng << 17;
  return (float)((rng >> 40) / 16777216.0) * 2.0f - 1.0f;
}
static grace_tensor *host_rand(grace_dtype dt, int nd, const int64_t *sz) {
  int64_t n = 1;
  for (int d = 0; d < nd; d++) n *= sz[d];
  float *buf = malloc(sizeof(float) * (size_t)(n > 0 ? n : 1));
  for (int64_t i = 0; i < n; i++) buf[i] = frand();
  grace_tensor *t = NULL;
  grace_tensor_from_data(vm, dt, nd, sz, GRACE_FLOAT32, buf, &t);
  free(buf);
  return t;
}
static grace_tensor *to_dev(grace_tensor *t, grace_device dev) {
  grace_attrs a = {0};
  a.device = dev;
  grace_tensor *o = NULL;
  if (grace_run(vm, GRACE_OP_TO_DEVICE, 1, &t, &a, 1, &o) != GRACE_OK) return NULL;
  return o;
}

/* epilogue codes of a case: a bias row, a residual, gelu, gelu(tanh), relu, silu, tanh, sigmoid, neg, scale,
 * sub from a literal, div by a literal, cast to float32 */
enum { E_BIAS = 1, E_RES = 2, E_GELU = 4, E_GELUT = 8, E_RELU = 16, E_SILU = 32, E_TANH = 64, E_SIG = 128,
       E_NEG = 256, E_SCALE = 512, E_RSUB = 1024, E_DIV = 2048, E_CAST = 4096 };

typedef struct mcase {
  const char *what;
  grace_dtype dt;
  int xnd, wnd;
  int64_t xs[4], ws[4];   /* w's logical shape [.., K, N]; wt: stored as [.., N, K] and transposed */
  int wt;
  int epi;
} mcase;

/* The program: x @ w (w transposed from its stored layout when wt) then the epilogue; inputs x, w, bias,
 * residual on dev. Returns the output of running it on tensors in[] (already on dev). */
static grace_tensor *run_case(const mcase *c, grace_device dev, grace_tensor **in, int nin, int64_t n_out) {
  grace_ir *ir = grace_ir_new(vm, "mm");
  grace_value x, w, b = -1, r = -1, v = -1, t, l;
  int64_t wsz[4];
  memcpy(wsz, c->ws, sizeof wsz);
  if (c->wt) { wsz[c->wnd - 1] = c->ws[c->wnd - 2]; wsz[c->wnd - 2] = c->ws[c->wnd - 1]; }
  int bad = grace_ir_input(ir, c->dt, dev, c->xnd, c->xs, &x) || grace_ir_input(ir, c->dt, dev, c->wnd, wsz, &w);
  if (c->epi & E_BIAS) bad |= grace_ir_input(ir, c->dt, dev, 1, &n_out, &b);
  if (c->wt) {
    grace_attrs a = {0};
    a.ndims = 2; a.dims[0] = -1; a.dims[1] = -2;
    bad |= grace_ir_op(ir, GRACE_OP_TRANSPOSE, 1, &w, &a, 1, &t);
    w = t;
  }
  grace_value xw[2] = {x, w};
  bad |= grace_ir_op(ir, GRACE_OP_MATMUL, 2, xw, NULL, 1, &v);
  if (c->epi & E_RES) {
    /* the residual has the product's shape: an input made from the program's type */
    const ir_type *ty = &ir->vals[v].type;
    bad |= grace_ir_input(ir, c->dt, dev, ty->ndim, ty->sizes, &r);
  }
#define BIN(op, a0, a1) do { grace_value in2[2] = {a0, a1}; bad |= grace_ir_op(ir, op, 2, in2, NULL, 1, &t); v = t; } while (0)
#define UN(op, at) do { bad |= grace_ir_op(ir, op, 1, &v, at, 1, &t); v = t; } while (0)
  if (c->epi & E_BIAS) BIN(GRACE_OP_ADD, v, b);
  if (c->epi & E_GELU) UN(GRACE_OP_GELU, NULL);
  if (c->epi & E_GELUT) { grace_attrs a = {0}; a.flag = 1; UN(GRACE_OP_GELU, &a); }
  if (c->epi & E_RELU) UN(GRACE_OP_RELU, NULL);
  if (c->epi & E_SILU) UN(GRACE_OP_SILU, NULL);
  if (c->epi & E_TANH) UN(GRACE_OP_TANH, NULL);
  if (c->epi & E_SIG) UN(GRACE_OP_SIGMOID, NULL);
  if (c->epi & E_NEG) UN(GRACE_OP_NEG, NULL);
  if (c->epi & E_RES) BIN(GRACE_OP_ADD, r, v);
  if (c->epi & E_SCALE) { bad |= grace_ir_literal(ir, 0.125, 0, &l); BIN(GRACE_OP_MUL, v, l); }
  if (c->epi & E_RSUB) { bad |= grace_ir_literal(ir, 1.5, 0, &l); BIN(GRACE_OP_SUB, l, v); }
  if (c->epi & E_DIV) { bad |= grace_ir_literal(ir, 3.0, 0, &l); BIN(GRACE_OP_DIV, v, l); }
  if (c->epi & E_CAST) { grace_attrs a = {0}; a.has_dtype = 1; a.dtype = GRACE_FLOAT32; UN(GRACE_OP_CAST, &a); }
#undef BIN
#undef UN
  bad |= grace_ir_output(ir, v);
  grace_tensor *out = NULL;
  if (bad || grace_ir_run(ir, nin, in, 1, &out) != GRACE_OK) {
    printf("# %s on %s: %s\n", c->what, dev == GRACE_CUDA ? "cuda" : "cpu", grace_last_error(vm));
    out = NULL;
  }
  grace_ir_free(ir);
  return out;
}

static void check_case(const mcase *c) {
  int64_t wsz[4];
  memcpy(wsz, c->ws, sizeof wsz);
  if (c->wt) { wsz[c->wnd - 1] = c->ws[c->wnd - 2]; wsz[c->wnd - 2] = c->ws[c->wnd - 1]; }
  int64_t n_out = c->wnd == 1 ? 1 : c->ws[c->wnd - 1];
  grace_tensor *hx = host_rand(c->dt, c->xnd, c->xs), *hw = host_rand(c->dt, c->wnd, wsz);
  grace_tensor *hb = (c->epi & E_BIAS) ? host_rand(c->dt, 1, &n_out) : NULL, *hr = NULL;
  /* the residual's shape: the product's, from the CPU run of the plain product */
  grace_tensor *hin[4] = {hx, hw, hb, NULL}, *din[4] = {NULL};
  int nin = 2 + (hb != NULL);
  if (c->epi & E_RES) {
    grace_tensor *pr = NULL, *wv = hw, *tmp = NULL;
    if (c->wt) {
      grace_attrs a = {0};
      a.ndims = 2; a.dims[0] = -1; a.dims[1] = -2;
      grace_run(vm, GRACE_OP_TRANSPOSE, 1, &hw, &a, 1, &tmp);
      wv = tmp;
    }
    grace_tensor *xy[2] = {hx, wv};
    grace_run(vm, GRACE_OP_MATMUL, 2, xy, NULL, 1, &pr);
    hr = pr ? host_rand(c->dt, pr->ndim, pr->sizes) : NULL;
    grace_tensor_release(pr);
    grace_tensor_release(tmp);
    hin[nin++] = hr;
  }
  for (int i = 0; i < nin; i++) din[i] = to_dev(hin[i], GRACE_CUDA);
  grace_tensor *want = run_case(c, GRACE_CPU, hin, nin, n_out);
  grace_tensor *got = run_case(c, GRACE_CUDA, din, nin, n_out);
  int64_t n = want ? grace_tensor_numel(want) : 0;
  int good = want && got && grace_tensor_numel(got) == n && got->ndim == want->ndim &&
             !memcmp(got->sizes, want->sizes, sizeof(int64_t) * (size_t)want->ndim) &&
             grace_tensor_dtype(got) == grace_tensor_dtype(want);
  double worst = 0, tol = c->dt == GRACE_FLOAT32 ? 1e-4 : 2e-2;
  if (good && n > 0) {
    float *a = malloc(sizeof(float) * (size_t)n), *b = malloc(sizeof(float) * (size_t)n);
    good = grace_tensor_read(vm, want, GRACE_FLOAT32, a) == GRACE_OK && grace_tensor_read(vm, got, GRACE_FLOAT32, b) == GRACE_OK;
    /* relative to the output's scale: sums of K terms differ by reassociation, not per element */
    double scale = 1e-6;
    for (int64_t i = 0; i < n; i++) scale = fabs(a[i]) > scale ? fabs(a[i]) : scale;
    for (int64_t i = 0; good && i < n; i++) {
      double e = fabs((double)a[i] - (double)b[i]) / (fabs(a[i]) > 1e-2 * scale ? fabs(a[i]) : 1e-2 * scale);
      if (!(e <= worst)) worst = e;   /* a NaN on either side counts as the worst */
    }
    free(a); free(b);
  }
  ok(good && worst <= tol, "%s: %s matches the CPU (worst rel %.2g, tol %g)", c->what, dts(c->dt), worst, tol);
  grace_tensor_release(want);
  grace_tensor_release(got);
  for (int i = 0; i < 4; i++) { grace_tensor_release(hin[i]); grace_tensor_release(din[i]); }
}

/* x [B, M, K] @ W^T with W [B, N, K] (wt), or x @ W with W [B, K, N] (sizes {M, K, N, B}) through
 * gpu_matmul_tensors with `how`, against the CPU; `kernel` is the kernel that must have run ("!name": must not). */
static void check_direct(gpu_slot *slot, grace_dtype dt, const int64_t sizes[4], int wt, gpu_mm_choice how,
                         const char *kernel) {
  int64_t M = sizes[0], K = sizes[1], N = sizes[2], B = sizes[3];
  int nd = B > 1 ? 3 : 2;
  int64_t xs[3] = {B, M, K}, ws[3] = {B, N, K}, os[3] = {B, M, N};
  if (!wt) { ws[1] = K; ws[2] = N; }
  grace_tensor *hx = host_rand(dt, nd, xs + 3 - nd), *hw = host_rand(dt, nd, ws + 3 - nd);
  grace_tensor *dx = to_dev(hx, GRACE_CUDA), *dw = to_dev(hw, GRACE_CUDA), *hwt = NULL, *dwt = NULL, *want = NULL,
               *got = NULL;
  grace_attrs a = {0};
  a.ndims = 2; a.dims[0] = -1; a.dims[1] = -2;
  if (wt) {
    grace_run(vm, GRACE_OP_TRANSPOSE, 1, &hw, &a, 1, &hwt);
    grace_run(vm, GRACE_OP_TRANSPOSE, 1, &dw, &a, 1, &dwt);
  } else {   /* W [K, N] as stored: x @ W */
    grace_tensor_retain(hw); grace_tensor_retain(dw);
    hwt = hw; dwt = dw;
  }
  grace_tensor *hxy[2] = {hx, hwt};
  grace_run(vm, GRACE_OP_MATMUL, 2, hxy, NULL, 1, &want);
  grace_tensor_empty(vm, dt, GRACE_CUDA, nd, os + 3 - nd, &got);
  grace_status st = dx && dwt && got ? gpu_matmul_tensors(vm, slot, dx, dwt, got, how) : GRACE_EARG;
  int64_t n = B * M * N;
  float *ref = malloc(sizeof(float) * (size_t)n), *out = malloc(sizeof(float) * (size_t)n);
  double worst = 1e30, tol = dt == GRACE_FLOAT32 ? 1e-4 : 2e-2;
  if (st == GRACE_OK && want && grace_tensor_read(vm, want, GRACE_FLOAT32, ref) == GRACE_OK &&
      grace_tensor_read(vm, got, GRACE_FLOAT32, out) == GRACE_OK) {
    double scale = 1e-6;
    worst = 0;
    for (int64_t e = 0; e < n; e++) scale = fabs(ref[e]) > scale ? fabs(ref[e]) : scale;
    for (int64_t e = 0; e < n; e++) {
      double d = fabs((double)ref[e] - (double)out[e]) / scale;
      if (!(d <= worst)) worst = d;   /* NaN counts as the worst */
    }
  }
  /* kernel "!name": any kernel but that one */
  int right = kernel[0] == '!' ? strcmp(gpu_matmul_last_kernel(slot), kernel + 1) != 0
                               : !strcmp(gpu_matmul_last_kernel(slot), kernel);
  ok(st == GRACE_OK && right && worst <= tol,
     "%s [%lld x %lld,%lld] @ %s[%lld,%lld]: %s, worst %.2g of the largest (tol %g)", dts(dt), (long long)B,
     (long long)M, (long long)K, wt ? "W^T" : "W", (long long)K, (long long)N, gpu_matmul_last_kernel(slot), worst, tol);
  if (st != GRACE_OK) printf("# %s\n", grace_last_error(vm));
  free(ref); free(out);
  grace_tensor *ts[] = {hx, hw, dx, dw, hwt, dwt, want, got};
  for (size_t j = 0; j < sizeof ts / sizeof ts[0]; j++) grace_tensor_release(ts[j]);
}

/* grace_set_matmul's names (what each does on a device: test_gpu) */
static void test_matmul_choice(void) {
  ok(grace_set_matmul(vm, "fastest") == GRACE_EARG && strstr(grace_last_error(vm), "'fastest'"),
     "grace_set_matmul refuses an unknown implementation, naming it");
  ok(grace_set_matmul(vm, "auto") == GRACE_OK && grace_set_matmul(vm, "grace") == GRACE_OK &&
         grace_set_matmul(vm, "cublaslt") == GRACE_OK && grace_set_matmul(vm, NULL) == GRACE_OK,
     "it takes auto, grace, cublaslt and NULL (back to GRACE_MATMUL)");
}

static void test_gpu(void) {
  if (!cuda_usable(vm)) {
    printf("# no CUDA device: %s\n", cuda_why(vm));
    skip("no CUDA device: GPU tests skipped");
    return;
  }
  printf("# device: %s\n", cuda_describe(vm));
  grace_dtype all[3] = {GRACE_FLOAT32, GRACE_BFLOAT16, GRACE_FLOAT16};
  gpu_slot slot0 = {0};
  int64_t Ms[4] = {1, 3, 17, 130}, Ns[3] = {1, 7, 50257}, Ks[3] = {1, 5, 768};
  char what[160];
  for (int t = 0; t < 3; t++)
    for (int mi = 0; mi < 4; mi++)
      for (int ni = 0; ni < 3; ni++)
        for (int ki = 0; ki < 3; ki++) {
          if (Ns[ni] == 50257 && (Ms[mi] > 17 || Ks[ki] == 5)) continue;   /* keep the CPU reference quick */
          for (int wt = 0; wt < 2; wt++) {
            snprintf(what, sizeof what, "[%lld,%lld] @ %s[%lld,%lld]", (long long)Ms[mi], (long long)Ks[ki],
                     wt ? "W^T " : "", (long long)Ks[ki], (long long)Ns[ni]);
            mcase c = {what, all[t], 2, 2, {Ms[mi], Ks[ki]}, {Ks[ki], Ns[ni]}, wt, 0};
            check_case(&c);
          }
        }
  /* epilogues, each alone and all together, on the GEMV and GEMM paths */
  int epis[] = {E_BIAS, E_RES, E_GELU, E_GELUT, E_RELU, E_SILU, E_TANH, E_SIG, E_NEG, E_SCALE, E_RSUB, E_DIV, E_CAST,
                E_BIAS | E_GELU | E_RES | E_SCALE, E_BIAS | E_SILU | E_CAST};
  for (int t = 0; t < 3; t++)
    for (size_t e = 0; e < sizeof epis / sizeof epis[0]; e++)
      for (int big = 0; big < 2; big++) {
        snprintf(what, sizeof what, "epilogue %#x, M %d, W^T", epis[e], big ? 130 : 3);
        mcase c = {what, all[t], 2, 2, {big ? 130 : 3, 96}, {96, 72}, 1, epis[e]};
        check_case(&c);
      }
  /* grace_set_matmul: "grace" runs grace's kernels for every product (on compute capability 9.0 in f16/bf16 the
     Hopper GEMM, its epilogues included), "cublaslt" cuBLASLt where it takes the product; cuBLASLt's kernels are not
     in kernel_launches, so the same plain product launches fewer of grace's kernels under "cublaslt" */
  int epis_big[] = {0, E_BIAS | E_GELU | E_RES | E_SCALE, E_BIAS | E_SILU | E_CAST, E_RELU | E_DIV};
  uint64_t launched[2] = {0, 0};
  for (int mode = 0; mode < 2; mode++) {
    ok(grace_set_matmul(vm, mode ? "cublaslt" : "grace") == GRACE_OK, "grace_set_matmul(\"%s\")", mode ? "cublaslt" : "grace");
    for (int t = 1; t < 3; t++)
      for (size_t e = 0; e < sizeof epis_big / sizeof epis_big[0]; e++) {
        grace_device_stats s0, s1;
        grace_device_stats_get(vm, &s0);
        snprintf(what, sizeof what, "%s, epilogue %#x, [200,136] @ W^T[136,264]", mode ? "cublaslt" : "grace", epis_big[e]);
        mcase c = {what, all[t], 2, 2, {200, 136}, {136, 264}, 1, epis_big[e]};
        check_case(&c);
        grace_device_stats_get(vm, &s1);
        if (epis_big[e] == 0) launched[mode] += s1.kernel_launches - s0.kernel_launches;
      }
  }
  ok(launched[0] > launched[1], "plain products: %llu of grace's kernels launched under \"grace\", %llu under \"cublaslt\"",
     (unsigned long long)launched[0], (unsigned long long)launched[1]);
  grace_set_matmul(vm, NULL);
  /* 1-D operands, batches with broadcast, a big square one on tensor cores */
  for (int t = 0; t < 3; t++) {
    mcase cs[] = {
      {"dot [768] @ [768]", all[t], 1, 1, {768}, {768}, 0, 0},
      {"[768] @ [768,50]", all[t], 1, 2, {768}, {768, 50}, 0, E_BIAS},
      {"[40,768] @ [768]", all[t], 2, 1, {40, 768}, {768}, 0, 0},
      {"[300,64] @ [64] (a column of many rows)", all[t], 2, 1, {300, 64}, {64}, 0, 0},
      {"[2,3,17,32] @ [3,32,24] (broadcast batch)", all[t], 4, 3, {2, 3, 17, 32}, {3, 32, 24}, 0, E_BIAS},
      {"[4,1,5,16] @ [3,16,8] (both broadcast)", all[t], 4, 3, {4, 1, 5, 16}, {3, 16, 8}, 0, 0},
      {"[2,64,96] @ W^T[96,80] (folded rows)", all[t], 3, 2, {2, 64, 96}, {96, 80}, 1, E_BIAS | E_GELU | E_RES},
      {"[2,130,64] @ [2,64,136] (batched GEMM)", all[t], 3, 3, {2, 130, 64}, {2, 64, 136}, 0, E_RELU},
      {"[1,768] @ W^T[768,2304]", all[t], 2, 2, {1, 768}, {768, 2304}, 1, E_BIAS},
      {"[1,3072] @ W^T[3072,768] (split-K)", all[t], 2, 2, {1, 3072}, {3072, 768}, 1, E_BIAS | E_RES},
      {"[4,768] @ [768,768] (split-K, W[K,N])", all[t], 2, 2, {4, 768}, {768, 768}, 0, E_BIAS},
      {"[512,512] @ [512,512]", all[t], 2, 2, {512, 512}, {512, 512}, 0, 0},
      {"[256,320] @ W^T[320,384]", all[t], 2, 2, {256, 320}, {320, 384}, 1, E_BIAS | E_GELUT},
    };
    for (size_t i = 0; i < sizeof cs / sizeof cs[0]; i++) check_case(&cs[i]);
  }
  /* a settled weight (GPU_MM_OWN_SETTLED) of short rows: GEMV_RW, weights in registers before the wait */
  static const int64_t rw[][4] = {{1, 768, 2304, 1}, {1, 3072, 768, 1}, {16, 768, 768, 1}, {3, 136, 77, 1},
                                  {5, 8, 9, 1}, {2, 40, 24, 3}, {1, 1024, 5, 2}};
  for (int t = 0; t < 3; t++)
    for (size_t i = 0; i < sizeof rw / sizeof rw[0]; i++) check_direct(&slot0, all[t], rw[i], 1, GPU_MM_OWN_SETTLED, "gemv_rw");
  /* a weight not vouched for: GEMV_RW loading after the wait when the columns are many (the LM head), else not */
  static const int64_t late[][4] = {{1, 768, 50257, 1}, {5, 1000, 9001, 1}, {2, 136, 8500, 1}};
  for (int t = 0; t < 3; t++)
    for (size_t i = 0; i < sizeof late / sizeof late[0]; i++) check_direct(&slot0, all[t], late[i], 1, GPU_MM_OWN, "gemv_rw");
  static const int64_t few[4] = {1, 768, 2304, 1};
  for (int t = 0; t < 3; t++) check_direct(&slot0, all[t], few, 1, GPU_MM_OWN, "!gemv_rw");
  /* one column of many rows runs with the sides swapped: the activation becomes B, which is not settled */
  static const int64_t col[4] = {40, 256, 1, 1};
  for (int t = 0; t < 3; t++) check_direct(&slot0, all[t], col, 1, GPU_MM_OWN_SETTLED, "!gemv_rw");
  /* the Hopper GEMM (sm_90a): x @ W^T of one matrix, edges of M, N and K inside a tile, several k tiles */
  if (cuda_properties(gpu_ctx(vm))->major == 9) {
    static const int64_t wg[][4] = {{17, 16, 8, 1}, {200, 72, 136, 1}, {130, 1000, 264, 1}, {256, 320, 384, 1},
                                    {1024, 4096, 512, 1}};
    for (int t = 1; t < 3; t++)
      for (size_t i = 0; i < sizeof wg / sizeof wg[0]; i++)
        for (int wt = 0; wt < 2; wt++) check_direct(&slot0, all[t], wg[i], wt, GPU_MM_OWN, "gemm_wg");
    static const int64_t odd[4] = {40, 64, 77, 1};   /* an odd N: results stored one by one */
    for (int t = 1; t < 3; t++) check_direct(&slot0, all[t], odd, 1, GPU_MM_OWN, "gemm_wg");
  } else {
    skip("the Hopper GEMM needs compute capability 9.0");
  }
  /* the autotuned choice is made once and kept */
  if (slot0.free) slot0.free(vm, slot0.p);
  gpu_slot slot = {0};
  int64_t sq[2] = {512, 512};
  grace_tensor *hx = host_rand(GRACE_BFLOAT16, 2, sq), *x = to_dev(hx, GRACE_CUDA), *o = NULL;
  grace_tensor_empty(vm, GRACE_BFLOAT16, GRACE_CUDA, 2, sq, &o);
  ok(x && o && gpu_matmul_tensors(vm, &slot, x, x, o, GPU_MM_AUTO) == GRACE_OK, "autotuned 512^3 bf16 runs (%s)",
     gpu_matmul_last_kernel(&slot));
  is_int(gpu_matmul_tuned(&slot), 1, "one decision is cached");
  char first[32];
  snprintf(first, sizeof first, "%s", gpu_matmul_last_kernel(&slot));
  ok(gpu_matmul_tensors(vm, &slot, x, x, o, GPU_MM_AUTO) == GRACE_OK && gpu_matmul_tuned(&slot) == 1 &&
         !strcmp(first, gpu_matmul_last_kernel(&slot)), "the second call reuses it");
  const char *tc = cuda_properties(gpu_ctx(vm))->major == 9 ? "gemm_wg" : "gemm_tc";
  ok(gpu_matmul_tensors(vm, &slot, x, x, o, GPU_MM_OWN) == GRACE_OK && !strcmp(gpu_matmul_last_kernel(&slot), tc),
     "forced own kernel: tensor cores (%s)", gpu_matmul_last_kernel(&slot));
  ok(gpu_matmul_tensors(vm, &slot, x, x, o, GPU_MM_BLAS) == GRACE_OK && !strcmp(gpu_matmul_last_kernel(&slot), "cublaslt"),
     "forced cuBLASLt");
  if (slot.free) slot.free(vm, slot.p);
  grace_tensor_release(hx); grace_tensor_release(x); grace_tensor_release(o);
}

int main(void) {
  char err[256];
  vm = grace_vm_new(&(grace_config){.device = "cpu"}, err, sizeof err);
  if (!vm) { printf("Bail out! %s\n", err); return 1; }
  test_sources();
  test_settled();
  test_compiles();
  test_blas_load();
  test_matmul_choice();
  test_gpu();
  grace_vm_free(vm);
  return tap_done();
}
