/* gpu_matmul.c: MATMUL groups on the device. Each matmul of a group takes the pointwise instructions that
 * continue its result one after another (bias, activation, residual, scale, cast: the epilogue) into its
 * kernel; whatever else the group holds runs afterwards through grace_run, so any group runs and the common
 * ones run as one kernel. Shapes follow torch.matmul (cpu/cpu_matmul.c): batch dims are broadcast, folded into
 * the rows where the strides allow (x @ W for [B, T, C] inputs is one GEMM), at most 3 are left.
 * Few rows (<= 16) run the GEMV kernels that stream the weight once, larger products the tensor-core (f16/
 * bf16) or FFMA (f32, or any layout) GEMM, or cuBLASLt: the two are timed once per (shape, dtype, layout) and
 * the faster is remembered in the group's slot. A norm the group holds (ir/ir_fuse.h) is the prologue of the GEMVs
 * that read it: each recomputes a row's statistics and normalises the row as it reads it (codegen/cg_matmul.cuh);
 * where a product cannot take it, the norm runs first as its own kernel. */
#include <stdlib.h>
#include <stdio.h>
#include <string.h>
#include "gpu/gpu_matmul.h"
#include "codegen/cg_matmul.h"
#include "cuda/cuda_blas.h"
#include "cuda/cuda_graph.h"
#include "gpu/gpu_graph.h"
#include "ir/ir_exec.h"
#include "ir/ir_fuse.h"
#include "ir/ir_pointwise.h"

#define MM_MAX_FNS 48
#define MM_MAX_TUNE 32
#define MM_GEMV_ROWS 16

typedef struct mm_fn {
  cg_mm_desc d;
  CUfunction f;
} mm_fn;

typedef struct mm_tune {
  int64_t M, N, K, nb;
  int dt, ak, bk, use_blas;
} mm_tune;

typedef struct mm_state {
  cuda_blas *blas;
  int blas_tried;
  int nfn, ntune;
  mm_fn fns[MM_MAX_FNS];
  mm_tune tune[MM_MAX_TUNE];
  int force_tile;                  /* GEMM_TC tile variant forced (benchmarks), -1: chosen by shape */
  int force_wpr;                   /* GEMV_NT warps per column forced (benchmarks), 0: chosen by shape */
  char last[32];
} mm_state;

/* One product, planned: C[b, m, n] = sum_k A[b, m, k] B[b, k, n], C contiguous; the epilogue's operands. */
typedef struct mm_prob {
  grace_dtype dt, out_dt;
  int64_t M, N, K, nb, bd[CG_MM_BATCH];
  CUdeviceptr A, B;
  int64_t a_sm, a_sk, a_b[CG_MM_BATCH], b_sk, b_sn, b_b[CG_MM_BATCH];
  int nop, nscalar, nepi;
  CUdeviceptr E[CG_MM_MAX_OPS];
  grace_dtype edt[CG_MM_MAX_OPS];
  int64_t e_sm[CG_MM_MAX_OPS], e_sn[CG_MM_MAX_OPS], e_b[CG_MM_MAX_OPS][CG_MM_BATCH];
  double s[CG_MM_MAX_SCALARS];
  cg_epi_step epi[CG_MM_MAX_EPI];
  int b_settled;        /* no kernel that may still be running writes B: a GEMV may read it before its wait */
  int norm, norm_w, norm_b;   /* A is a norm's input, normalised by the GEMV as it reads it (cg_mm_desc norm) */
  double eps;
  CUdeviceptr NW, NB;   /* the norm's weight and bias (0 where absent) */
} mm_prob;

/* An epilogue operand before planning: a CUDA tensor broadcast to the output, or a host number. */
typedef struct mm_operand {
  grace_tensor *t;
  double s;
} mm_operand;

static void state_free(grace_vm *vm, void *p) {
  mm_state *s = p;
  if (!s) return;
  cuda_blas_free(vm, s->blas);
  vm_free(vm, s, sizeof *s);
}

static mm_state *state_of(grace_vm *vm, gpu_slot *slot) {
  if (!slot->p) {
    mm_state *s = vm_calloc(vm, sizeof *s);
    if (!s) { vm_err(vm, GRACE_ENOMEM, "matmul: out of host memory"); return NULL; }
    s->force_tile = -1;
    slot->p = s;
    slot->free = state_free;
  }
  return slot->p;
}

const char *gpu_matmul_last_kernel(const gpu_slot *slot) {
  return slot && slot->p ? ((const mm_state *)slot->p)->last : "";
}
int gpu_matmul_tuned(const gpu_slot *slot) { return slot && slot->p ? ((const mm_state *)slot->p)->ntune : 0; }
void gpu_matmul_force(grace_vm *vm, gpu_slot *slot, int tile, int wpr) {
  mm_state *s = state_of(vm, slot);
  if (s) { s->force_tile = tile; s->force_wpr = wpr; }
}

static int is_mm_float(grace_dtype dt) {
  return dt == GRACE_FLOAT32 || dt == GRACE_FLOAT16 || dt == GRACE_BFLOAT16;
}

/* ---- planning ---- */
enum { MM_MAX_T = 2 + CG_MM_MAX_OPS };

/* Fills p's shapes and strides from x @ y and the operands (broadcast to the output). Returns 0 when more than
 * CG_MM_BATCH batch dims are left after folding. */
static int plan(mm_prob *p, const grace_tensor *x, const grace_tensor *y, int nop, const mm_operand *ops) {
  p->dt = x->dtype;
  p->M = x->ndim == 1 ? 1 : x->sizes[x->ndim - 2];
  p->K = x->sizes[x->ndim - 1];
  p->N = y->ndim == 1 ? 1 : y->sizes[y->ndim - 1];
  int xb = x->ndim > 2 ? x->ndim - 2 : 0, yb = y->ndim > 2 ? y->ndim - 2 : 0, nbd = xb > yb ? xb : yb;
  int64_t sz[GRACE_MAX_DIMS + 1], st[MM_MAX_T][GRACE_MAX_DIMS + 1];
  int nt = 2 + nop;
  for (int d = 0; d < nbd; d++) {
    int dx = d - (nbd - xb), dy = d - (nbd - yb);
    int64_t sx = dx < 0 ? 1 : x->sizes[dx], sy = dy < 0 ? 1 : y->sizes[dy];
    sz[d] = sx == 1 ? sy : sx;
  }
  vm_broadcast_dims(xb, x->sizes, x->strides, nbd, sz, st[0]);
  vm_broadcast_dims(yb, y->sizes, y->strides, nbd, sz, st[1]);
  sz[nbd] = p->M;
  st[0][nbd] = x->ndim == 1 ? 0 : x->strides[x->ndim - 2];
  st[1][nbd] = 0;
  /* operands: strides over the output's dims (batch..., [M], [N]) */
  int ond = nbd + (x->ndim >= 2) + (y->ndim >= 2);
  int64_t osz[GRACE_MAX_DIMS];
  memcpy(osz, sz, sizeof(int64_t) * (size_t)nbd);
  if (x->ndim >= 2) osz[nbd] = p->M;
  if (y->ndim >= 2) osz[ond - 1] = p->N;
  for (int i = 0; i < nop; i++) {
    int64_t os[GRACE_MAX_DIMS] = {0};
    if (ops[i].t) vm_broadcast_strides(ops[i].t, ond, osz, os);
    for (int d = 0; d < nbd; d++) st[2 + i][d] = os[d];
    st[2 + i][nbd] = x->ndim >= 2 ? os[nbd] : 0;
    p->e_sn[i] = y->ndim >= 2 ? os[ond - 1] : 0;
  }
  /* size-1 dims have no stride that matters: drop batch ones, give M == 1 the stride that folds */
  int nd = 0;
  for (int d = 0; d <= nbd; d++) {
    if (d < nbd && sz[d] == 1) continue;
    sz[nd] = sz[d];
    for (int t = 0; t < nt; t++) st[t][nd] = st[t][d];
    nd++;
  }
  if (sz[nd - 1] == 1)   /* not B's: B does not step with M, so a batch dim folds into M only where B is shared */
    for (int t = 0; t < nt; t++) if (t != 1) st[t][nd - 1] = nd >= 2 ? st[t][nd - 2] : 0;
  /* fold a dim into the one after it where every operand steps through both as one run (C always does) */
  for (int i = nd - 2; i >= 0; i--) {
    int can = 1;
    for (int t = 0; t < nt && can; t++) can = st[t][i] == st[t][i + 1] * sz[i + 1];
    if (!can) continue;
    sz[i + 1] *= sz[i];
    for (int j = i; j < nd - 1; j++) {
      sz[j] = sz[j + 1];
      for (int t = 0; t < nt; t++) st[t][j] = st[t][j + 1];
    }
    nd--;
  }
  if (nd - 1 > CG_MM_BATCH) return 0;
  p->M = sz[nd - 1];
  p->a_sm = st[0][nd - 1];
  p->a_sk = x->strides[x->ndim - 1];
  p->b_sk = y->ndim == 1 ? y->strides[0] : y->strides[y->ndim - 2];
  p->b_sn = y->ndim == 1 ? 0 : y->strides[y->ndim - 1];
  for (int i = 0; i < nop; i++) p->e_sm[i] = st[2 + i][nd - 1];
  int pad = CG_MM_BATCH - (nd - 1);
  p->nb = 1;
  for (int d = 0; d < CG_MM_BATCH; d++) {
    int s = d - pad;
    p->bd[d] = s < 0 ? 1 : sz[s];
    p->a_b[d] = s < 0 ? 0 : st[0][s];
    p->b_b[d] = s < 0 ? 0 : st[1][s];
    for (int i = 0; i < nop; i++) p->e_b[i][d] = s < 0 ? 0 : st[2 + i][s];
    p->nb *= p->bd[d];
  }
  /* strides of size-1 dims: unit, so the layout tests below see a contiguous dim */
  if (p->K == 1) p->a_sk = p->b_sk = 1;
  if (p->N == 1) p->b_sn = 1;
  if (p->M == 1) p->a_sm = p->a_sk == 1 ? p->K : 1;
  p->A = gpu_ptr(x);
  p->B = gpu_ptr(y);
  p->nop = nop;
  for (int i = 0; i < nop; i++) {
    p->E[i] = ops[i].t ? gpu_ptr(ops[i].t) : 0;
    p->edt[i] = ops[i].t ? ops[i].t->dtype : GRACE_FLOAT32;
  }
  return 1;
}

/* A column (N == 1) of many rows is a row of many columns: C^T = B^T A^T, the same memory. */
static void swap_sides(mm_prob *p) {
  int64_t t;
  t = p->M; p->M = p->N; p->N = t;
  CUdeviceptr pt = p->A; p->A = p->B; p->B = pt;
  int64_t a_sm = p->b_sn, a_sk = p->b_sk, b_sk = p->a_sk, b_sn = p->a_sm;
  p->a_sm = a_sm; p->a_sk = a_sk; p->b_sk = b_sk; p->b_sn = b_sn;
  for (int d = 0; d < CG_MM_BATCH; d++) { t = p->a_b[d]; p->a_b[d] = p->b_b[d]; p->b_b[d] = t; }
  for (int i = 0; i < p->nop; i++) { t = p->e_sm[i]; p->e_sm[i] = p->e_sn[i]; p->e_sn[i] = t; }
  p->b_settled = 0;   /* B is now the other operand, of unknown origin */
}

/* Whether base and every batch stride keep 16-byte alignment for vectors of `vec` elements. */
static int aligned(CUdeviceptr base, const int64_t *bstr, int64_t s0, int64_t s1, int vec, size_t es) {
  if (base % 16) return 0;
  for (int d = 0; d < CG_MM_BATCH; d++) if (bstr[d] % vec) return 0;
  return s0 % vec == 0 && s1 % vec == 0 && es * (size_t)vec == 16;
}

static cg_mm_desc base_desc(const mm_prob *p, cg_mm_form form) {
  cg_mm_desc d;
  memset(&d, 0, sizeof d);
  d.form = form;
  d.dt = p->dt;
  d.out_dt = p->out_dt;
  d.a_kmajor = p->a_sk == 1;
  d.b_kmajor = p->b_sk == 1;
  d.vec = d.mtile = 1;
  d.nop = p->nop;
  for (int i = 0; i < p->nop; i++) d.op_dtypes[i] = p->edt[i];
  d.nscalar = p->nscalar;
  d.nepi = p->nepi;
  d.norm = p->norm;
  d.norm_w = p->norm_w;
  d.norm_b = p->norm_b;
  d.eps = p->norm ? p->eps : 0.0;
  memcpy(d.epi, p->epi, sizeof(cg_epi_step) * (size_t)p->nepi);
  return d;
}

static int tc_fits(const mm_prob *p) {
  if (p->dt == GRACE_FLOAT32) return 0;
  size_t es = 2;
  int ak = p->a_sk == 1, bk = p->b_sk == 1;
  if (!ak && p->a_sm != 1) return 0;
  if (!bk && p->b_sn != 1) return 0;
  if (!aligned(p->A, p->a_b, ak ? p->a_sm : p->a_sk, ak ? p->K : p->M, 8, es)) return 0;
  if (!aligned(p->B, p->b_b, bk ? p->b_sn : p->b_sk, bk ? p->K : p->N, 8, es)) return 0;
  return 1;
}

/* The Hopper GEMM: tensor maps (compute capability 9.0) over a k-major A and a B of either layout, one matrix,
 * outside captures with indirection (its maps hold the operands' addresses, which a replay could not redirect). */
static int wg_fits(cuda_ctx *c, const mm_prob *p) {
  const cuda_props *pr = cuda_properties(c);   /* wgmma is sm_90a's alone: later architectures lack it */
  return tc_fits(p) && p->a_sk == 1 && p->nb == 1 && p->M < (1LL << 31) && p->N < (1LL << 31) &&
         p->K < (1LL << 31) && pr->major == 9 && pr->minor == 0 && cuda_has_tensor_maps(c) &&
         !cuda_capture_indirect(c);
}

/* GEMM_WG's two tensor maps (256 bytes at maps, 64-byte aligned): A [M, K] in 128 x 64 boxes; B [N, K] likewise, or
 * B [K, N] (n-major) in 64 x 64 boxes, two of them side by side a tile. */
static grace_status wg_tensor_maps(cuda_ctx *c, const mm_prob *p, uint64_t *maps) {
  uint64_t es = grace_dtype_size(p->dt);
  grace_status st = cuda_tensor_map(c, maps, p->dt, p->A, (uint64_t)p->K, (uint64_t)p->M, (uint64_t)p->a_sm * es, 64, 128);
  if (st != GRACE_OK) return st;
  if (p->b_sk == 1)
    return cuda_tensor_map(c, maps + 16, p->dt, p->B, (uint64_t)p->K, (uint64_t)p->N, (uint64_t)p->b_sn * es, 64, 128);
  return cuda_tensor_map(c, maps + 16, p->dt, p->B, (uint64_t)p->N, (uint64_t)p->K, (uint64_t)p->b_sk * es, 64, 64);
}

/* ---- kernels: generated, compiled and loaded once per description ---- */
static grace_status get_fn(grace_vm *vm, cuda_ctx *c, mm_state *s, const cg_mm_desc *d, CUfunction *f) {
  for (int i = 0; i < s->nfn; i++)
    if (!memcmp(&s->fns[i].d, d, sizeof *d)) { *f = s->fns[i].f; return GRACE_OK; }
  cg_kernel k;
  grace_status st = cg_matmul_source(vm, d, &k);
  if (st != GRACE_OK) return st;
  cuda_module *m = NULL;
  if ((st = cuda_module_get(c, k.src, &m)) == GRACE_OK) st = cuda_module_function(c, m, k.name, f);
  cg_kernel_free(vm, &k);
  if (st != GRACE_OK) return st;
  if (s->nfn < MM_MAX_FNS) s->fns[s->nfn++] = (mm_fn){*d, *f};
  return GRACE_OK;
}

static int pack(const mm_prob *p, CUdeviceptr C, CUdeviceptr WS, int64_t splits, int64_t kchunk, cg_launch *l) {
  int n = 0;
  l->words[n++] = p->A; l->words[n++] = p->B; l->words[n++] = C; l->words[n++] = WS;
  for (int i = 0; i < p->nop; i++) l->words[n++] = p->E[i];
  if (p->norm) { l->words[n++] = p->NW; l->words[n++] = p->NB; }
  int64_t w[CG_MM_NWORDS] = {p->M, p->N, p->K, p->nb, p->bd[0], p->bd[1], p->bd[2], p->a_sm, p->a_sk,
                             p->a_b[0], p->a_b[1], p->a_b[2], p->b_sk, p->b_sn, p->b_b[0], p->b_b[1], p->b_b[2],
                             splits, kchunk};
  int w0 = n;
  for (int i = 0; i < CG_MM_NWORDS; i++) l->words[n++] = (uint64_t)w[i];
  for (int i = 0; i < p->nop; i++) {
    l->words[n++] = (uint64_t)p->e_sm[i]; l->words[n++] = (uint64_t)p->e_sn[i];
    for (int d = 0; d < CG_MM_BATCH; d++) l->words[n++] = (uint64_t)p->e_b[i][d];
  }
  for (int i = 0; i < p->nscalar; i++) memcpy(&l->words[n++], &p->s[i], 8);
  l->nwords = n;
  return w0;
}

static grace_status launch(grace_vm *vm, cuda_ctx *c, mm_state *s, const cg_mm_desc *d, cg_launch *l) {
  CUfunction f;
  cg_mm_desc di;
  cg_launch li;
  cuda_capture *ind = cuda_capture_indirect(c);
  di = *d;
  di.pred = cuda_pred_word(c, NULL) != 0;   /* in a predicated body (gpu_pred.c) */
  d = &di;
  if (ind) {   /* captured for a graph: pointers and scalars through slots of its argument table */
    di.indirect = 1;
    li = *l;
    for (int i = 0; i < li.nwords; i++)
      if (i < cg_matmul_nptrs(d) || i >= li.nwords - d->nscalar)
        if (!(li.words[i] = cuda_capture_slot(ind, l->words[i])))
          return vm_err(vm, GRACE_EUNSUPPORTED, "matmul: the graph's argument table is full");
    l = &li;
  }
  grace_status st = get_fn(vm, c, s, d, &f);
  if (st != GRACE_OK) return st;
  int w0 = cg_matmul_nptrs(d);
  cg_launch g = *l;
  /* geometry reads M, N, NB, SPLITS at the start of the words */
  memmove(g.words, l->words + w0, sizeof(uint64_t) * CG_MM_NWORDS);
  cg_matmul_geometry(d, &g);
  /* every generated kernel waits for its inputs (a GEMV after its weight starts streaming, the others on entry) */
  return cuda_launch_overlapped(c, f, g.grid, g.block, g.smem, l->words, sizeof(uint64_t) * (size_t)l->nwords);
}

/* Our kernels for p into C. */
static grace_status run_own(grace_vm *vm, cuda_ctx *c, mm_state *s, mm_prob *p, CUdeviceptr C) {
  cg_launch l;
  size_t es = grace_dtype_size(p->dt);
  int vec = (int)(16 / es);
  int sms = cuda_properties(c)->sms > 0 ? cuda_properties(c)->sms : 132;
  if (p->N == 1 && p->M > MM_GEMV_ROWS) swap_sides(p);
  if (p->M <= MM_GEMV_ROWS && (p->b_sk == 1 || p->b_sn == 1) && p->K > 0) {
    int nt = p->b_sk == 1;
    cg_mm_desc d = base_desc(p, nt ? CG_MM_GEMV_NT : CG_MM_GEMV_NN);
    int mt = 1;
    while (mt < p->M) mt *= 2;
    /* B's rows read as 16-byte vectors; columns enough to fill the device (64 an SM) */
    int b_vec = nt && p->K % vec == 0 && aligned(p->B, p->b_b, p->b_sn, 0, vec, es);
    int64_t cols = p->N * p->nb, full = (int64_t)sms * 64;
    /* a settled weight of short rows goes into registers before the kernel waits on the one before it; any weight
     * of short rows and many columns (the LM head: a full device) after the wait, for the layout's loads in flight
     * (faster than GEMV_NT for the bf16 LM head: bench/RESULTS.md) */
    int64_t rl = (p->K + 32LL * vec - 1) / (32LL * vec);
    if (b_vec && (p->b_settled || cols >= full) && rl <= CG_MM_RW_MAX_VECS) {
      d.form = CG_MM_GEMV_RW;
      d.rw_late = !p->b_settled;
      d.vec = vec;
      d.mtile = mt;   /* M <= MM_GEMV_ROWS: a power of two up to 16 */
      d.rl = (int)rl;
      d.rc = 2 * rl <= 12 ? 2 : 1;   /* 2 columns a warp at K 768, 1 at 3072: bench/gemv_explore.cu's choice */
      d.a_vec = p->a_sk == 1 && aligned(p->A, p->a_b, p->a_sm, 0, vec, es);
      pack(p, C, 0, 1, p->K, &l);
      snprintf(s->last, sizeof s->last, "gemv_rw");
      return launch(vm, c, s, &d, &l);
    }
    if (nt) {
      /* few columns: two warps per column so enough loads are in flight, when each lane keeps >= ~1.5 loads
       * of its row (one and four warps ran GPT-2's decode GEMVs slower: bench/RESULTS.md) */
      d.vec = b_vec ? vec : 1;
      int64_t loads = p->K / d.vec;
      int by_cols = cols >= full ? 1 : 2, by_len = loads >= 96 ? 2 : 1;
      d.wpr = s->force_wpr > 0 ? s->force_wpr : by_cols < by_len ? by_cols : by_len;
      d.a_vec = d.vec > 1 && p->a_sk == 1 && aligned(p->A, p->a_b, p->a_sm, 0, vec, es);
    } else {
      d.vec = p->N % vec == 0 && aligned(p->B, p->b_b, p->b_sk, 0, vec, es) ? vec : 1;
    }
    if (mt * d.vec > 64) mt = 64 / d.vec;   /* registers: rows x vector width accumulators per lane */
    d.mtile = mt > 16 ? 16 : mt;
    /* split K when the columns give less than a wave of blocks */
    int64_t cpb = nt ? CG_MM_NT_WARPS / d.wpr : 32 * d.vec;   /* columns per block */
    int64_t blocks = (p->N + cpb - 1) / cpb * p->nb;
    int64_t gran = nt ? 32 * d.vec : 8 * CG_MM_NN_KSLICES, splits = 1, kchunk = p->K;
    if (blocks < sms && p->K >= 2 * gran) {
      int64_t want = (2 * sms + blocks - 1) / blocks;
      kchunk = (p->K + want - 1) / want;
      kchunk = (kchunk + gran - 1) / gran * gran;
      splits = (p->K + kchunk - 1) / kchunk;
      if (splits < 2) { splits = 1; kchunk = p->K; }
    }
    /* a grid of one wave (16 blocks of 4 warps an SM) prefetches its weight into L2 (cg_matmul.c) */
    d.prefetch = nt && (p->N + cpb - 1) / cpb * p->nb * splits <= 16LL * sms;
    if (splits == 1) {
      pack(p, C, 0, 1, p->K, &l);
      snprintf(s->last, sizeof s->last, "%s", nt ? "gemv_nt" : "gemv_nn");
      return launch(vm, c, s, &d, &l);
    }
    size_t wsb = (size_t)(splits * p->nb * p->M * p->N) * sizeof(float);
    CUdeviceptr ws;
    grace_status st = cuda_malloc(c, wsb, &ws);
    if (st != GRACE_OK) return st;
    d.split = 1;
    pack(p, C, ws, splits, kchunk, &l);
    st = launch(vm, c, s, &d, &l);
    if (st == GRACE_OK) {
      cg_mm_desc r = base_desc(p, CG_MM_SPLITK);
      st = launch(vm, c, s, &r, &l);
    }
    cuda_release(c, ws, wsb);
    snprintf(s->last, sizeof s->last, "%s+splitk", nt ? "gemv_nt" : "gemv_nn");
    return st;
  }
  const char *refused = "";
  if (s->force_tile < 0 && wg_fits(c, p)) {
    /* the tensor maps follow the words in the parameter struct, at its first 64-byte boundary */
    cg_mm_desc d = base_desc(p, CG_MM_GEMM_WG);
    pack(p, C, 0, 1, p->K, &l);
    int w = cg_matmul_wg_maps(l.nwords);
    _Alignas(64) uint64_t maps[32];
    if (w + 32 <= CG_MAX_WORDS && wg_tensor_maps(c, p, maps) == GRACE_OK) {
      for (int i = l.nwords; i < w; i++) l.words[i] = 0;
      memcpy(&l.words[w], maps, sizeof maps);
      l.nwords = w + 32;
      snprintf(s->last, sizeof s->last, "gemm_wg");
      return launch(vm, c, s, &d, &l);
    }
    /* a map the driver refused: the mma.sync kernel takes the product, and the kernel's name says why (the
     * driver's message stays as the last error) */
    refused = " (no tensor map)";
  }
  cg_mm_desc d = base_desc(p, tc_fits(p) ? CG_MM_GEMM_TC : CG_MM_GEMM_SIMT);
  if (d.form == CG_MM_GEMM_TC) {
    /* 64x64 warp tiles halve the fragment loads per mma; with few tiles the 8-warp blocks spread better */
    int64_t tiles = (p->M + 127) / 128 * ((p->N + 127) / 128) * p->nb;
    d.tile = s->force_tile >= 0 ? s->force_tile : tiles >= 2 * sms;
  }
  if (d.form == CG_MM_GEMM_SIMT) { d.a_kmajor = p->a_sk == 1; d.b_kmajor = p->b_sk == 1; }
  pack(p, C, 0, 1, p->K, &l);
  snprintf(s->last, sizeof s->last, "%s%s", d.form == CG_MM_GEMM_SIMT ? "gemm_simt" : d.tile ? "gemm_tc64" : "gemm_tc",
           refused);
  return launch(vm, c, s, &d, &l);
}

/* cuBLASLt for p into C; with an epilogue the product goes to a float32 buffer that the split-K finishing
 * kernel (one split) turns into the epilogue's result. */
static int blas_fits(const mm_prob *p, cuda_blas_gemm *g) {
  int nbd = 0, bdim = -1;
  for (int d = 0; d < CG_MM_BATCH; d++) if (p->bd[d] > 1) { nbd++; bdim = d; }
  if (nbd > 1) return 0;
  *g = (cuda_blas_gemm){.dt = p->dt, .c_dt = p->nepi ? GRACE_FLOAT32 : p->dt, .M = p->M, .N = p->N, .K = p->K,
                        .batch = p->nb, .A = p->A, .B = p->B, .a_sm = p->a_sm, .a_sk = p->a_sk, .b_sk = p->b_sk,
                        .b_sn = p->b_sn, .a_sb = bdim < 0 ? 0 : p->a_b[bdim], .b_sb = bdim < 0 ? 0 : p->b_b[bdim],
                        .c_sb = p->M * p->N};
  return cuda_blas_supports(g);
}

static grace_status run_blas(grace_vm *vm, cuda_ctx *c, mm_state *s, mm_prob *p, cuda_blas_gemm *g, CUdeviceptr C) {
  snprintf(s->last, sizeof s->last, "cublaslt");
  if (!p->nepi) { g->C = C; return cuda_blas_matmul(vm, s->blas, c, g); }
  size_t bytes;   /* the product in float32 before the epilogue: twice a 16-bit result, so checked against the cap */
  grace_status st = vm_data_bytes(vm, "matmul", (size_t)(p->nb * p->M * p->N), sizeof(float), &bytes);
  CUdeviceptr tmp;
  if (st == GRACE_OK) st = cuda_malloc(c, bytes, &tmp);
  if (st != GRACE_OK) return st;
  g->C = tmp;
  if ((st = cuda_blas_matmul(vm, s->blas, c, g)) == GRACE_OK) {
    cg_launch l;
    pack(p, C, tmp, 1, p->K, &l);
    cg_mm_desc r = base_desc(p, CG_MM_SPLITK);
    st = launch(vm, c, s, &r, &l);
  }
  cuda_release(c, tmp, bytes);
  return st;
}

/* Milliseconds of the best of 3 runs after one warm-up; negative on failure (error set). */
static float time_one(grace_vm *vm, cuda_ctx *c, mm_state *s, mm_prob *p, cuda_blas_gemm *g, CUdeviceptr C, int blas) {
  CUevent e0 = NULL, e1 = NULL;
  float best = -1.0f;
  if (cuda_event_new(c, &e0) != GRACE_OK || cuda_event_new(c, &e1) != GRACE_OK) goto out;
  for (int r = 0; r < 4; r++) {
    mm_prob q = *p;
    if (cuda_event_record(c, e0) != GRACE_OK) goto out;
    grace_status st = blas ? run_blas(vm, c, s, &q, g, C) : run_own(vm, c, s, &q, C);
    if (st != GRACE_OK) { best = -1.0f; goto out; }
    float ms;
    if (cuda_event_record(c, e1) != GRACE_OK || cuda_event_elapsed(c, e0, e1, &ms) != GRACE_OK) { best = -1.0f; goto out; }
    if (r > 0 && (best < 0 || ms < best)) best = ms;
  }
out:
  if (e0) cuda_event_free(c, e0);
  if (e1) cuda_event_free(c, e1);
  return best;
}

/* Runs the planned product into C with the chosen implementation. */
static grace_status run_prob(grace_vm *vm, cuda_ctx *c, mm_state *s, mm_prob *p, CUdeviceptr C, gpu_mm_choice choice) {
  if (p->nb * p->M * p->N == 0) return GRACE_OK;
  cuda_blas_gemm g;
  int blas_ok = p->K > 0 && blas_fits(p, &g);
  /* cuBLASLt cannot read a graph's argument table: captured with indirection, a product of few rows (where ours
   * is close) runs ours, so its inputs and outputs need no copies around the replay */
  int few_rows = p->M <= MM_GEMV_ROWS || p->N == 1;
  if (p->norm) return run_own(vm, c, s, p, C);   /* a GEMV with the norm as its prologue (norm_fits) */
  if (choice == GPU_MM_OWN || (choice == GPU_MM_AUTO && (!blas_ok || (few_rows && cuda_capture_indirect(c)))))
    return run_own(vm, c, s, p, C);
  if (!s->blas_tried) {
    s->blas_tried = 1;
    if (cuda_blas_load(vm, NULL, &s->blas) != GRACE_OK) s->blas = NULL;
  }
  if (choice == GPU_MM_BLAS) {
    if (!s->blas || !blas_ok) return vm_err(vm, GRACE_EUNSUPPORTED, "matmul: cuBLASLt cannot run this product");
    return run_blas(vm, c, s, p, &g, C);
  }
  if (choice == GPU_MM_PREFER_BLAS) return s->blas && blas_ok ? run_blas(vm, c, s, p, &g, C) : run_own(vm, c, s, p, C);
  if (!s->blas) return run_own(vm, c, s, p, C);
  int ak = p->a_sk == 1, bk = p->b_sk == 1;
  for (int i = 0; i < s->ntune; i++) {
    const mm_tune *t = &s->tune[i];
    if (t->M == p->M && t->N == p->N && t->K == p->K && t->nb == p->nb && t->dt == (int)p->dt && t->ak == ak &&
        t->bk == bk)
      return t->use_blas ? run_blas(vm, c, s, p, &g, C) : run_own(vm, c, s, p, C);
  }
  /* timing synchronizes, which a graph capture cannot; a shape first seen there runs ours, untimed */
  if (c && gpu_graph_capturing(vm)) return run_own(vm, c, s, p, C);
  float own = time_one(vm, c, s, p, &g, C, 0);
  if (own < 0) return vm->status;
  float vendor = time_one(vm, c, s, p, &g, C, 1);
  int use_blas = vendor >= 0 && vendor < own;
  if (s->ntune < MM_MAX_TUNE)
    s->tune[s->ntune++] = (mm_tune){p->M, p->N, p->K, p->nb, (int)p->dt, ak, bk, use_blas};
  /* the timing runs wrote C already; run the winner once more so C and `last` say what was chosen */
  return use_blas ? run_blas(vm, c, s, p, &g, C) : run_own(vm, c, s, p, C);
}

static grace_status check_pair(grace_vm *vm, const grace_tensor *x, const grace_tensor *y) {
  if (!x || !y || x->storage->device != GRACE_CUDA || y->storage->device != GRACE_CUDA)
    return vm_err(vm, GRACE_EUNSUPPORTED, "matmul: operands are not both CUDA tensors");
  if (x->dtype != y->dtype || !is_mm_float(x->dtype))
    return vm_err(vm, GRACE_EUNSUPPORTED, "matmul: no CUDA kernel for %s @ %s", grace_dtype_name(x->dtype),
                  grace_dtype_name(y->dtype));
  if (x->ndim == 0 || y->ndim == 0) return vm_err(vm, GRACE_EUNSUPPORTED, "matmul: 0-d operand");
  return GRACE_OK;
}

grace_status gpu_matmul_tensors(grace_vm *vm, gpu_slot *slot, grace_tensor *x, grace_tensor *y, grace_tensor *out,
                                gpu_mm_choice choice) {
  grace_status st = check_pair(vm, x, y);
  if (st != GRACE_OK) return st;
  mm_state *s = state_of(vm, slot);
  cuda_ctx *c = gpu_ctx(vm);
  if (!s || !c) return vm->status;
  mm_prob p;
  memset(&p, 0, sizeof p);
  if (!plan(&p, x, y, 0, NULL)) return vm_err(vm, GRACE_EUNSUPPORTED, "matmul: more than %d batch dims", CG_MM_BATCH);
  p.out_dt = p.dt;
  p.b_settled = choice == GPU_MM_OWN_SETTLED;
  if (choice == GPU_MM_OWN_SETTLED) choice = GPU_MM_OWN;
  if (out->dtype != p.dt || vm_numel(out->ndim, out->sizes) != p.nb * p.M * p.N || !vm_is_contiguous(out))
    return vm_err(vm, GRACE_EARG, "matmul: the output tensor does not match the product");
  return run_prob(vm, c, s, &p, gpu_ptr(out), choice);
}

/* ---- groups: each matmul with the epilogue chain that continues it ---- */
int32_t gpu_matmul_settled_root(const grace_ir *ir, int32_t v) {
  if (ir->nwrite > 0) return -1;
  v = ir_view_base(ir, v);
  int op = v >= 0 ? ir->insts[ir->vals[v].inst].op : -1;
  return op == IR_OP_INPUT || op == IR_OP_CONST ? v : -1;
}

static int uses_of(const grace_ir *ir, int32_t v) {
  int n = 0;
  for (int i = 0; i < ir->ninst; i++) {
    const ir_inst *k = &ir->insts[i];
    for (int a = 0; a < k->nin; a++) n += ir->args[k->first_arg + a] == v;
  }
  for (int i = 0; i < ir->nout; i++) n += 2 * (ir->outputs[i] == v);
  for (int i = 0; i < ir->nwrite; i++) n += 2 * (ir->writes[i].value == v);
  return n;
}

/* Whether k continues a matmul kernel as a unary step: a pointwise op with an epilogue form in ir/ir_pointwise.h,
 * or a cast between float dtypes (only a rounding). */
static int epi_unary(const ir_inst *k) {
  if (k->op == GRACE_OP_CAST) return is_mm_float(k->attrs.dtype);
  return ir_pw_epilogue(k->op, k->attrs.flag) != NULL && grace_op_kind((grace_op)k->op) == GRACE_KIND_UNARY;
}

typedef struct mm_chain {
  int inst;                        /* the matmul */
  int n;                           /* epilogue instructions taken */
  int insts[CG_MM_MAX_EPI];
  int nop, nscalar, nepi;
  mm_operand ops[CG_MM_MAX_OPS];
  double scalars[CG_MM_MAX_SCALARS];
  cg_epi_step epi[CG_MM_MAX_EPI];
  int32_t result;                  /* the value the kernel stores */
} mm_chain;

/* Extends ch from the matmul's result through the group's pointwise members while each value has no other
 * use, the shape stays the product's and the operands are ready (outside the group). */
static void take_chain(grace_ir *ir, const ir_fusion *f, int g, grace_tensor **vals, mm_chain *ch, const int8_t *taken) {
  const ir_fuse_group *gr = &f->groups[g];
  const ir_type *t0 = &ir->vals[ch->result].type;
  for (;;) {
    int32_t v = ch->result;
    if (ch->nepi >= CG_MM_MAX_EPI || uses_of(ir, v) != 1) return;
    int next = -1;
    for (int j = 0; j < gr->n && next < 0; j++) {
      int m = f->members[gr->first + j];
      const ir_inst *k = &ir->insts[m];
      if (taken[j] || m == ch->inst) continue;
      for (int a = 0; a < k->nin; a++) if (ir->args[k->first_arg + a] == v) next = j;
    }
    if (next < 0) return;
    int m = f->members[gr->first + next];
    const ir_inst *k = &ir->insts[m];
    const ir_type *rt = &ir->vals[k->first_result].type;
    if (k->nout != 1 || !is_mm_float(rt->dtype) || rt->ndim != t0->ndim ||
        memcmp(rt->sizes, t0->sizes, sizeof(int64_t) * (size_t)t0->ndim))
      return;
    cg_epi_step step = {k->op, 0, rt->dtype, k->nin == 1 ? k->attrs.flag : 0, 0};
    if (k->nin == 1 && epi_unary(k)) {
      /* unary */
    } else if (k->nin == 2 && ir_pw_epilogue(k->op, 0) && grace_op_kind((grace_op)k->op) == GRACE_KIND_BINARY) {
      int32_t a0 = ir->args[k->first_arg], a1 = ir->args[k->first_arg + 1];
      if (a0 == a1) return;
      int first = a0 == v;
      int32_t o = first ? a1 : a0;
      if (o < 0 || f->inst_group[ir->vals[o].inst] == g) return;
      grace_tensor *ot = vals[o];
      if (!ot || (ot->storage->device == GRACE_CUDA && !is_mm_float(ot->dtype))) return;
      step.reversed = !first;
      if (ot->storage->device == GRACE_CPU) {
        if (vm_numel(ot->ndim, ot->sizes) != 1 || ch->nscalar >= CG_MM_MAX_SCALARS) return;
        double sv;
        if (grace_tensor_read(ir->vm, ot, GRACE_FLOAT64, &sv) != GRACE_OK) return;
        ch->scalars[ch->nscalar] = sv;
        step.operand = -1 - ch->nscalar++;
      } else {
        if (ch->nop >= CG_MM_MAX_OPS || ot->ndim > t0->ndim) return;
        for (int d = 0; d < ot->ndim; d++) {
          int64_t want = t0->sizes[t0->ndim - ot->ndim + d];
          if (ot->sizes[d] != 1 && ot->sizes[d] != want) return;
        }
        ch->ops[ch->nop] = (mm_operand){ot, 0};
        step.operand = ch->nop++;
      }
    } else {
      return;
    }
    ch->epi[ch->nepi++] = step;
    ch->insts[ch->n++] = m;
    ch->result = k->first_result;
  }
}

static void result_shape(const grace_tensor *x, const grace_tensor *y, int *nd, int64_t *sz) {
  int xb = x->ndim > 2 ? x->ndim - 2 : 0, yb = y->ndim > 2 ? y->ndim - 2 : 0, nbd = xb > yb ? xb : yb, n = 0;
  for (int d = 0; d < nbd; d++) {
    int dx = d - (nbd - xb), dy = d - (nbd - yb);
    int64_t sx = dx < 0 ? 1 : x->sizes[dx], sy = dy < 0 ? 1 : y->sizes[dy];
    sz[n++] = sx == 1 ? sy : sx;
  }
  if (x->ndim >= 2) sz[n++] = x->sizes[x->ndim - 2];
  if (y->ndim >= 2) sz[n++] = y->sizes[y->ndim - 1];
  *nd = n;
}

#define MM_MAX_GROUP 64

/* vals[v], making the views it is read through on the host (a leftover may read a view of a product). */
static grace_status ensure(grace_ir *ir, const ir_fusion *f, int32_t v, grace_tensor **vals, int depth) {
  if (v < 0 || vals[v]) return GRACE_OK;
  int i = ir->vals[v].inst, op = ir->insts[i].op;
  if (depth > 64 || op >= GRACE_NOPS || f->inst_group[i] >= 0 || grace_op_kind((grace_op)op) != GRACE_KIND_VIEW)
    return vm_err(ir->vm, GRACE_EINTERNAL, "matmul: value %%%d is used before it is computed", (int)v);
  grace_status st = ensure(ir, f, ir->args[ir->insts[i].first_arg], vals, depth + 1);
  return st == GRACE_OK ? ir_exec_inst(ir, i, NULL, vals) : st;
}

/* "auto", "grace", "cublaslt" as a choice; -1 for anything else */
static int parse_matmul(const char *mode) {
  if (!mode || !strcmp(mode, "auto")) return GPU_MM_AUTO;
  if (!strcmp(mode, "grace")) return GPU_MM_OWN;
  if (!strcmp(mode, "cublaslt")) return GPU_MM_PREFER_BLAS;
  return -1;
}

grace_status grace_set_matmul(grace_vm *vm, const char *mode) {
  if (!vm) return GRACE_EARG;
  int m = mode ? parse_matmul(mode) : 0;
  if (m < 0) return vm_err(vm, GRACE_EARG, "matmul: unknown implementation '%s' (auto, grace or cublaslt)", mode);
  vm->matmul_mode = mode ? m + 1 : 0;
  return GRACE_OK;
}

/* The VM's choice for products of IR groups: grace_set_matmul's, else $GRACE_MATMUL's (read once; an unknown
 * value counts as auto, as GRACE_GRAPHS does). */
static gpu_mm_choice matmul_choice(grace_vm *vm) {
  if (!vm->matmul_mode) {
    int m = parse_matmul(getenv("GRACE_MATMUL"));
    vm->matmul_mode = (m < 0 ? GPU_MM_AUTO : m) + 1;
  }
  return (gpu_mm_choice)(vm->matmul_mode - 1);
}

/* ---- norms as prologues (ir/ir_fuse.h: the group holds a norm that only its matmuls read) ---- */
static int is_norm(int op) { return op == GRACE_OP_LAYER_NORM || op == GRACE_OP_RMS_NORM; }

/* The norm instruction of group g whose result matmul k reads as its left operand, -1 if none. */
static int norm_of(const grace_ir *ir, const ir_fusion *f, int g, const ir_inst *k) {
  int i = ir->vals[ir->args[k->first_arg]].inst;
  return f->inst_group[i] == g && is_norm(ir->insts[i].op) ? i : -1;
}

/* A norm's weight or bias as the GEMV reads it: absent, or a contiguous [K] CUDA vector of the product's dtype. */
static int norm_vec_ok(const grace_tensor *t, grace_dtype dt, int64_t K) {
  return !t || (t->storage->device == GRACE_CUDA && t->dtype == dt && t->ndim == 1 && t->sizes[0] == K &&
                (K == 1 || t->strides[0] == 1));
}

/* Whether matmul k can take norm instruction nm as its prologue, and then p planned for it: a GEMV of a k-contiguous
 * weight (NT or RW), run by grace's kernels (the product's choice not cuBLASLt). */
static int norm_fits(grace_ir *ir, int nm, const ir_inst *k, grace_tensor **vals, gpu_mm_choice choice, mm_prob *p) {
  const ir_inst *n = &ir->insts[nm];
  grace_tensor *x = vals[ir->args[n->first_arg]], *y = vals[ir->args[k->first_arg + 1]];
  grace_tensor *w = n->nin > 1 && ir->args[n->first_arg + 1] >= 0 ? vals[ir->args[n->first_arg + 1]] : NULL;
  grace_tensor *b = n->nin > 2 && ir->args[n->first_arg + 2] >= 0 ? vals[ir->args[n->first_arg + 2]] : NULL;
  if (choice == GPU_MM_BLAS || choice == GPU_MM_PREFER_BLAS || !x || !y || x->storage->device != GRACE_CUDA ||
      y->storage->device != GRACE_CUDA || x->dtype != y->dtype || !is_mm_float(x->dtype) || !x->ndim || !y->ndim)
    return 0;
  if ((n->nin > 1 && ir->args[n->first_arg + 1] >= 0 && !w) || (n->nin > 2 && ir->args[n->first_arg + 2] >= 0 && !b))
    return 0;
  memset(p, 0, sizeof *p);
  if (!plan(p, x, y, 0, NULL)) return 0;
  if (p->M > MM_GEMV_ROWS || p->M > IR_NORM_PROLOGUE_ROWS || p->K < 1 || p->K > IR_NORM_PROLOGUE_K || p->b_sk != 1 ||
      p->nb * p->M * p->N == 0 || !norm_vec_ok(w, p->dt, p->K) || !norm_vec_ok(b, p->dt, p->K))
    return 0;
  p->norm = n->op == GRACE_OP_LAYER_NORM ? CG_MM_NORM_LAYER : CG_MM_NORM_RMS;
  p->norm_w = w != NULL;
  p->norm_b = b != NULL && p->norm == CG_MM_NORM_LAYER;
  p->eps = n->attrs.a;
  p->NW = w ? gpu_ptr(w) : 0;
  p->NB = p->norm_b ? gpu_ptr(b) : 0;
  return 1;
}

/* Runs the group's norms that some matmul reading them cannot take as its prologue (a product of many rows, a weight
 * that is not k-contiguous): as the norm kernel, before the products. pro[j]: member j is a norm its GEMVs compute. */
static grace_status run_norms(grace_ir *ir, const ir_fusion *f, int g, grace_tensor **vals, gpu_mm_choice choice,
                              int8_t *taken, int8_t *pro) {
  const ir_fuse_group *gr = &f->groups[g];
  for (int j = 0; j < gr->n; j++) {
    int nm = f->members[gr->first + j];
    if (!is_norm(ir->insts[nm].op)) continue;
    taken[j] = 1;
    int fits = 1;
    for (int i = 0; i < gr->n && fits; i++) {
      const ir_inst *k = &ir->insts[f->members[gr->first + i]];
      mm_prob p;
      if (k->op == GRACE_OP_MATMUL && norm_of(ir, f, g, k) == nm) fits = norm_fits(ir, nm, k, vals, choice, &p);
    }
    pro[j] = (int8_t)fits;
    if (fits) continue;
    const ir_inst *n = &ir->insts[nm];
    grace_status st = GRACE_OK;
    for (int a = 0; a < n->nin && st == GRACE_OK; a++) st = ensure(ir, f, ir->args[n->first_arg + a], vals, 0);
    if (st == GRACE_OK) st = ir_exec_inst(ir, nm, NULL, vals);
    if (st != GRACE_OK) return st;
  }
  return GRACE_OK;
}

grace_status gpu_matmul_run(grace_vm *vm, grace_ir *ir, const ir_fusion *f, int g, gpu_slot *slot, grace_tensor **vals) {
  const ir_fuse_group *gr = &f->groups[g];
  if (gr->n > MM_MAX_GROUP) return vm_err(vm, GRACE_EUNSUPPORTED, "matmul: group of %d instructions", gr->n);
  int8_t taken[MM_MAX_GROUP] = {0}, pro[MM_MAX_GROUP] = {0};
  mm_chain chains[MM_MAX_GROUP];
  int nch = 0;
  gpu_mm_choice choice = matmul_choice(vm);
  /* check every matmul before anything runs: an unsupported group launches nothing (a norm of the group is
     computed in its GEMVs, or else first and alone: run_norms) */
  for (int j = 0; j < gr->n; j++) {
    int m = f->members[gr->first + j];
    const ir_inst *k = &ir->insts[m];
    if (k->op != GRACE_OP_MATMUL) continue;
    int32_t a0 = ir->args[k->first_arg], a1 = ir->args[k->first_arg + 1];
    int nm = norm_of(ir, f, g, k);
    if ((f->inst_group[ir->vals[a0].inst] == g && nm < 0) || f->inst_group[ir->vals[a1].inst] == g)
      return vm_err(vm, GRACE_EUNSUPPORTED, "matmul: an operand is computed inside the group");
    grace_status st = check_pair(vm, nm >= 0 ? vals[ir->args[ir->insts[nm].first_arg]] : vals[a0], vals[a1]);
    if (st != GRACE_OK) return st;
    taken[j] = 1;
    memset(&chains[nch], 0, sizeof chains[nch]);
    chains[nch].inst = m;
    chains[nch].result = k->first_result;
    nch++;
  }
  if (nch == 0) return vm_err(vm, GRACE_EUNSUPPORTED, "matmul: the group holds no matmul");
  for (int i = 0; i < nch; i++) {
    take_chain(ir, f, g, vals, &chains[i], taken);
    for (int e = 0; e < chains[i].n; e++)
      for (int j = 0; j < gr->n; j++) if (f->members[gr->first + j] == chains[i].insts[e]) taken[j] = 1;
  }
  mm_state *s = state_of(vm, slot);
  cuda_ctx *c = gpu_ctx(vm);
  if (!s || !c) return vm->status;
  grace_status nst = run_norms(ir, f, g, vals, choice, taken, pro);
  if (nst != GRACE_OK) return nst;
  for (int i = 0; i < nch; i++) {
    mm_chain *ch = &chains[i];
    const ir_inst *k = &ir->insts[ch->inst];
    grace_tensor *x = vals[ir->args[k->first_arg]], *y = vals[ir->args[k->first_arg + 1]];
    mm_prob p, np;
    int nm = norm_of(ir, f, g, k), prologue = 0;
    for (int j = 0; j < gr->n && nm >= 0; j++)
      if (f->members[gr->first + j] == nm) prologue = pro[j] && norm_fits(ir, nm, k, vals, choice, &np);
    if (prologue) x = vals[ir->args[ir->insts[nm].first_arg]];   /* the norm's input: the GEMV normalises it */
    memset(&p, 0, sizeof p);
    if (!plan(&p, x, y, ch->nop, ch->ops)) {
      /* the operands keep too many batch dims apart: the epilogue runs after, through grace_run */
      for (int e = 0; e < ch->n; e++)
        for (int j = 0; j < gr->n; j++) if (f->members[gr->first + j] == ch->insts[e]) taken[j] = 0;
      ch->n = ch->nop = ch->nscalar = ch->nepi = 0;
      ch->result = k->first_result;
      memset(&p, 0, sizeof p);
      if (!plan(&p, x, y, 0, NULL)) return vm_err(vm, GRACE_EUNSUPPORTED, "matmul: more than %d batch dims", CG_MM_BATCH);
    }
    /* settled while a graph is captured: only kernels of the graph can then still be running when a GEMV starts
     * (a replay begins after all earlier work on the stream), and none of them writes B; B must still be in its
     * root's storage (a reshape that had to copy made it with a kernel of the graph) */
    int32_t root = gpu_graph_capturing(vm) ? gpu_matmul_settled_root(ir, ir->args[k->first_arg + 1]) : -1;
    p.b_settled = root >= 0 && vals[root] && vals[root]->storage == y->storage;
    if (prologue) {
      p.norm = np.norm; p.norm_w = np.norm_w; p.norm_b = np.norm_b; p.eps = np.eps; p.NW = np.NW; p.NB = np.NB;
    }
    p.nscalar = ch->nscalar;
    memcpy(p.s, ch->scalars, sizeof p.s);
    p.nepi = ch->nepi;
    memcpy(p.epi, ch->epi, sizeof p.epi);
    p.out_dt = ch->nepi ? ch->epi[ch->nepi - 1].dtype : p.dt;
    int nd;
    int64_t sz[GRACE_MAX_DIMS];
    result_shape(x, y, &nd, sz);
    grace_tensor *o = vm_tensor_new(vm, "matmul", p.out_dt, GRACE_CUDA, nd, sz);
    if (!o) return vm->status;
    grace_status st = run_prob(vm, c, s, &p, gpu_ptr(o), choice);
    if (st != GRACE_OK) { grace_tensor_release(o); return st; }
    grace_tensor_release(vals[ch->result]);
    vals[ch->result] = o;
  }
  /* the rest of the group, in program order */
  for (int j = 0; j < gr->n; j++) {
    if (taken[j]) continue;
    const ir_inst *k = &ir->insts[f->members[gr->first + j]];
    grace_status st = GRACE_OK;
    for (int a = 0; a < k->nin && st == GRACE_OK; a++) st = ensure(ir, f, ir->args[k->first_arg + a], vals, 0);
    if (st == GRACE_OK) st = ir_exec_inst(ir, f->members[gr->first + j], NULL, vals);
    if (st != GRACE_OK) return st;
  }
  return GRACE_OK;
}

