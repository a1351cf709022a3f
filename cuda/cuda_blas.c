/* cuda_blas.c: cuBLASLt through dlopen. The ABI pieces used are declared here from cublasLt.h's documented
 * values (CUDA 12/13 agree on them). grace's matrices are row-major: C = A B is computed as the column-major
 * C^T = B^T A^T, which needs no copy, only the right leading dimensions and transpose flags. */
#include <dlfcn.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include "cuda/cuda_blas.h"
#include "cuda/cuda_graph.h"

typedef int lt_status;
typedef void *lt_handle;
typedef void *lt_desc;
typedef void *lt_layout;
typedef void *lt_pref;
typedef struct { uint64_t data[8]; } lt_algo;
typedef struct {
  lt_algo algo;
  size_t workspace_size;
  lt_status state;
  float waves;
  int reserved[4];
} lt_heuristic;

enum {
  LT_CUDA_R_32F = 0, LT_CUDA_R_16F = 2, LT_CUDA_R_16BF = 14,
  LT_COMPUTE_32F = 68,
  LT_OP_N = 0, LT_OP_T = 1,
  LT_DESC_TRANSA = 3, LT_DESC_TRANSB = 4,
  LT_LAYOUT_BATCH_COUNT = 5, LT_LAYOUT_STRIDED_BATCH_OFFSET = 6,
  LT_PREF_MAX_WORKSPACE_BYTES = 1, LT_PREF_REDUCTION_SCHEME_MASK = 3, LT_REDUCTION_COMPUTE_TYPE = 2,
};
#define LT_WORKSPACE ((size_t)32 << 20)

struct cuda_blas {
  void *lib;
  lt_handle handle;
  size_t version;
  lt_status (*create)(lt_handle *);
  lt_status (*destroy)(lt_handle);
  size_t (*get_version)(void);
  lt_status (*desc_create)(lt_desc *, int, int);
  lt_status (*desc_destroy)(lt_desc);
  lt_status (*desc_set)(lt_desc, int, const void *, size_t);
  lt_status (*layout_create)(lt_layout *, int, uint64_t, uint64_t, int64_t);
  lt_status (*layout_destroy)(lt_layout);
  lt_status (*layout_set)(lt_layout, int, const void *, size_t);
  lt_status (*pref_create)(lt_pref *);
  lt_status (*pref_destroy)(lt_pref);
  lt_status (*pref_set)(lt_pref, int, const void *, size_t);
  lt_status (*heuristic)(lt_handle, lt_desc, lt_layout, lt_layout, lt_layout, lt_layout, lt_pref, int,
                         lt_heuristic *, int *);
  lt_status (*matmul)(lt_handle, lt_desc, const void *, const void *, lt_layout, const void *, lt_layout,
                      const void *, const void *, lt_layout, void *, lt_layout, const lt_algo *, void *, size_t,
                      CUstream);
};

grace_status cuda_blas_load(grace_vm *vm, const char *path, cuda_blas **out) {
  *out = NULL;
  static const char *const names[] = {"libcublasLt.so", "libcublasLt.so.13", "libcublasLt.so.12",
                                      "/usr/local/cuda/lib64/libcublasLt.so", "/usr/local/cuda/lib64/libcublasLt.so.13",
                                      "/usr/local/cuda/lib64/libcublasLt.so.12"};
  void *lib = NULL;
  if (!path && getenv("GRACE_CUBLASLT") && *getenv("GRACE_CUBLASLT")) path = getenv("GRACE_CUBLASLT");
  if (path) lib = dlopen(path, RTLD_NOW | RTLD_LOCAL);
  else
    for (size_t i = 0; i < sizeof names / sizeof names[0] && !lib; i++) lib = dlopen(names[i], RTLD_NOW | RTLD_LOCAL);
  if (!lib)
    return grace_set_error(vm, GRACE_EDEVICE, "cuBLASLt: cannot load %s", path ? path : "libcublasLt.so (.13, .12)");
  cuda_blas *b = grace_realloc(vm, NULL, 0, sizeof *b);
  if (!b) return grace_set_error(vm, GRACE_ENOMEM, "cuBLASLt: out of host memory");
  memset(b, 0, sizeof *b);
  b->lib = lib;
  struct { void **slot; const char *name; } syms[] = {
    {(void **)&b->create, "cublasLtCreate"}, {(void **)&b->destroy, "cublasLtDestroy"},
    {(void **)&b->get_version, "cublasLtGetVersion"}, {(void **)&b->desc_create, "cublasLtMatmulDescCreate"},
    {(void **)&b->desc_destroy, "cublasLtMatmulDescDestroy"}, {(void **)&b->desc_set, "cublasLtMatmulDescSetAttribute"},
    {(void **)&b->layout_create, "cublasLtMatrixLayoutCreate"}, {(void **)&b->layout_destroy, "cublasLtMatrixLayoutDestroy"},
    {(void **)&b->layout_set, "cublasLtMatrixLayoutSetAttribute"}, {(void **)&b->pref_create, "cublasLtMatmulPreferenceCreate"},
    {(void **)&b->pref_destroy, "cublasLtMatmulPreferenceDestroy"},
    {(void **)&b->pref_set, "cublasLtMatmulPreferenceSetAttribute"},
    {(void **)&b->heuristic, "cublasLtMatmulAlgoGetHeuristic"}, {(void **)&b->matmul, "cublasLtMatmul"},
  };
  for (size_t i = 0; i < sizeof syms / sizeof syms[0]; i++) {
    *syms[i].slot = dlsym(lib, syms[i].name);
    if (!*syms[i].slot) {
      cuda_blas_free(vm, b);
      return grace_set_error(vm, GRACE_EDEVICE, "cuBLASLt: symbol %s missing", syms[i].name);
    }
  }
  b->version = b->get_version();
  *out = b;
  return GRACE_OK;
}

void cuda_blas_free(grace_vm *vm, cuda_blas *b) {
  if (!b) return;
  if (b->handle && b->destroy) b->destroy(b->handle);
  /* the library stays loaded (as libcuda and NVRTC do): unloading a C++ library leaks its runtime's buffers on
   * every reload, and the next load is then free */
  grace_realloc(vm, b, sizeof *b, 0);
}

size_t cuda_blas_version(const cuda_blas *b) { return b ? b->version : 0; }

/* The column-major view of one operand: rows x cols with leading dim ld, transposed or not. */
typedef struct lt_view { uint64_t rows, cols; int64_t ld; int op; } lt_view;

/* X = the first cuBLAS factor, from B (C^T = B^T A^T): N x K col-major when B's n stride is 1. */
static int view_b(const cuda_blas_gemm *g, lt_view *v) {
  if (g->b_sn == 1 || g->N == 1) {
    *v = (lt_view){(uint64_t)g->N, (uint64_t)g->K, g->K == 1 ? g->N : g->b_sk, LT_OP_N};
    return v->ld >= g->N;
  }
  if (g->b_sk == 1 || g->K == 1) {
    *v = (lt_view){(uint64_t)g->K, (uint64_t)g->N, g->N == 1 ? g->K : g->b_sn, LT_OP_T};
    return v->ld >= g->K;
  }
  return 0;
}
static int view_a(const cuda_blas_gemm *g, lt_view *v) {
  if (g->a_sk == 1 || g->K == 1) {
    *v = (lt_view){(uint64_t)g->K, (uint64_t)g->M, g->M == 1 ? g->K : g->a_sm, LT_OP_N};
    return v->ld >= g->K;
  }
  if (g->a_sm == 1 || g->M == 1) {
    *v = (lt_view){(uint64_t)g->M, (uint64_t)g->K, g->K == 1 ? g->M : g->a_sk, LT_OP_T};
    return v->ld >= g->M;
  }
  return 0;
}

int cuda_blas_supports(const cuda_blas_gemm *g) {
  lt_view x, y;
  if (g->dt != GRACE_FLOAT32 && g->dt != GRACE_FLOAT16 && g->dt != GRACE_BFLOAT16) return 0;
  if (g->c_dt != g->dt && g->c_dt != GRACE_FLOAT32) return 0;
  if (g->M <= 0 || g->N <= 0 || g->K <= 0 || g->batch <= 0 || g->batch > 0x7fffffff) return 0;
  return view_b(g, &x) && view_a(g, &y);
}

static grace_status lt_check(grace_vm *vm, lt_status s, const char *call) {
  if (s == 0) return GRACE_OK;
  return grace_set_error(vm, GRACE_EDEVICE, "%s: cuBLAS status %d", call, s);
}

grace_status cuda_blas_matmul(grace_vm *vm, cuda_blas *b, cuda_ctx *c, const cuda_blas_gemm *g) {
  if (cuda_pred_word(c, NULL))
    return grace_set_error(vm, GRACE_EUNSUPPORTED, "cuBLASLt: a library kernel cannot be predicated (it cannot read "
                           "the predicate word and return)");
  lt_view x, y;
  if (!cuda_blas_supports(g) || !view_b(g, &x) || !view_a(g, &y))
    return grace_set_error(vm, GRACE_EUNSUPPORTED, "cuBLASLt: layout not supported");
  grace_status st;
  /* a graph redirects these only by re-pointing cuBLASLt's kernel nodes (cuda_graph_update.h) */
  cuda_capture_library(c, (uint64_t[]){g->A, g->B, g->C}, 3);
  if (!b->handle && (st = lt_check(vm, b->create(&b->handle), "cublasLtCreate"))) { b->handle = NULL; return st; }
  int dt = g->dt == GRACE_FLOAT32 ? LT_CUDA_R_32F : g->dt == GRACE_FLOAT16 ? LT_CUDA_R_16F : LT_CUDA_R_16BF;
  lt_desc desc = NULL;
  lt_layout lx = NULL, ly = NULL, ld = NULL;
  lt_pref pref = NULL;
  CUdeviceptr ws = 0;
  int ws_taken = 0;
  if ((st = lt_check(vm, b->desc_create(&desc, LT_COMPUTE_32F, LT_CUDA_R_32F), "cublasLtMatmulDescCreate"))) goto done;
  int32_t ta = x.op, tb = y.op;
  if ((st = lt_check(vm, b->desc_set(desc, LT_DESC_TRANSA, &ta, sizeof ta), "cublasLtMatmulDescSetAttribute"))) goto done;
  if ((st = lt_check(vm, b->desc_set(desc, LT_DESC_TRANSB, &tb, sizeof tb), "cublasLtMatmulDescSetAttribute"))) goto done;
  if ((st = lt_check(vm, b->layout_create(&lx, dt, x.rows, x.cols, x.ld), "cublasLtMatrixLayoutCreate"))) goto done;
  if ((st = lt_check(vm, b->layout_create(&ly, dt, y.rows, y.cols, y.ld), "cublasLtMatrixLayoutCreate"))) goto done;
  int cdt = g->c_dt == GRACE_FLOAT32 ? LT_CUDA_R_32F : dt;
  if ((st = lt_check(vm, b->layout_create(&ld, cdt, (uint64_t)g->N, (uint64_t)g->M, g->N), "cublasLtMatrixLayoutCreate")))
    goto done;
  if (g->batch > 1) {
    int32_t n = (int32_t)g->batch;
    lt_layout ls[3] = {lx, ly, ld};
    int64_t strides[3] = {g->b_sb, g->a_sb, g->c_sb};
    for (int i = 0; i < 3; i++) {
      if ((st = lt_check(vm, b->layout_set(ls[i], LT_LAYOUT_BATCH_COUNT, &n, sizeof n), "cublasLtMatrixLayoutSetAttribute")))
        goto done;
      if ((st = lt_check(vm, b->layout_set(ls[i], LT_LAYOUT_STRIDED_BATCH_OFFSET, &strides[i], sizeof strides[i]),
                         "cublasLtMatrixLayoutSetAttribute")))
        goto done;
    }
  }
  if ((st = lt_check(vm, b->pref_create(&pref), "cublasLtMatmulPreferenceCreate"))) goto done;
  uint64_t wsmax = LT_WORKSPACE;
  if ((st = lt_check(vm, b->pref_set(pref, LT_PREF_MAX_WORKSPACE_BYTES, &wsmax, sizeof wsmax),
                     "cublasLtMatmulPreferenceSetAttribute")))
    goto done;
  /* split-K partials summed in fp32 only: sums in the output type (bf16) lose what the CPU keeps */
  uint32_t schemes = LT_REDUCTION_COMPUTE_TYPE;
  if ((st = lt_check(vm, b->pref_set(pref, LT_PREF_REDUCTION_SCHEME_MASK, &schemes, sizeof schemes),
                     "cublasLtMatmulPreferenceSetAttribute")))
    goto done;
  lt_heuristic h;
  int found = 0;
  memset(&h, 0, sizeof h);
  if ((st = lt_check(vm, b->heuristic(b->handle, desc, lx, ly, ld, ld, pref, 1, &h, &found),
                     "cublasLtMatmulAlgoGetHeuristic")))
    goto done;
  if (found < 1 || h.state != 0) {
    st = grace_set_error(vm, GRACE_EUNSUPPORTED, "cuBLASLt: no algorithm for %lldx%lldx%lld %s",
                         (long long)g->M, (long long)g->N, (long long)g->K, grace_dtype_name(g->dt));
    goto done;
  }
  if (h.workspace_size > 0) {
    if ((st = cuda_malloc(c, h.workspace_size, &ws))) goto done;
    ws_taken = 1;
  }
  float alpha = 1.0f, beta = 0.0f;
  st = lt_check(vm, b->matmul(b->handle, desc, &alpha, (const void *)(uintptr_t)g->B, lx, (const void *)(uintptr_t)g->A, ly,
                              &beta, (const void *)(uintptr_t)g->C, ld, (void *)(uintptr_t)g->C, ld, &h.algo,
                              (void *)(uintptr_t)ws, h.workspace_size, cuda_stream(c)),
                "cublasLtMatmul");
done:
  if (ws_taken) cuda_release(c, ws, h.workspace_size);
  if (pref) b->pref_destroy(pref);
  if (ld) b->layout_destroy(ld);
  if (ly) b->layout_destroy(ly);
  if (lx) b->layout_destroy(lx);
  if (desc) b->desc_destroy(desc);
  return st;
}
