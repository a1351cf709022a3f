/* fake_cublaslt.c: a stand-in for libcublasLt.so for tests without a GPU (built as
 * build/tests/libfake_cublaslt.so; grace loads it through GRACE_CUBLASLT). It takes the calls grace makes
 * (cuda/cuda_blas.c) and, for a matmul, "launches a kernel" through a hook the test sets
 * (fake_cublaslt_set_launch): one library kernel whose parameters are laid out as fake_lt_kernel says, holding the
 * operands' addresses the way a vendor kernel does (the output twice: as C and as D, inside a struct parameter).
 * The test's fake driver runs that kernel on host memory (fake device memory is host memory) when it is launched
 * or replayed in a graph, so results can be checked. Only float32, no batch. */
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

typedef int (*fake_lt_launch)(void *stream, void **args);
static fake_lt_launch launch_hook;
static int hide_a;   /* 1: the first operand's address is passed encoded (not as a plain word) */

void fake_cublaslt_set_launch(fake_lt_launch f) { launch_hook = f; }
void fake_cublaslt_hide_a(int on) { hide_a = on; }

typedef struct layout { uint64_t rows, cols; int64_t ld; } layout;
typedef struct desc { int ta, tb; } desc;
typedef struct algo { uint64_t data[8]; } algo;
typedef struct heuristic { algo a; size_t workspace_size; int state; float waves; int reserved[4]; } heuristic;

int cublasLtCreate(void **h) { *h = malloc(1); return *h ? 0 : 1; }
int cublasLtDestroy(void *h) { free(h); return 0; }
size_t cublasLtGetVersion(void) { return 120000; }
int cublasLtMatmulDescCreate(void **d, int compute, int scale) {
  (void)compute; (void)scale;
  *d = calloc(1, sizeof(desc));
  return *d ? 0 : 1;
}
int cublasLtMatmulDescDestroy(void *d) { free(d); return 0; }
int cublasLtMatmulDescSetAttribute(void *d, int attr, const void *buf, size_t n) {
  desc *x = d;
  int32_t v = 0;
  memcpy(&v, buf, n < 4 ? n : 4);
  if (attr == 3) x->ta = v;
  if (attr == 4) x->tb = v;
  return 0;
}
int cublasLtMatrixLayoutCreate(void **l, int type, uint64_t rows, uint64_t cols, int64_t ld) {
  if (type != 0) return 15;   /* CUBLAS_STATUS_NOT_SUPPORTED: float32 only */
  layout *x = malloc(sizeof *x);
  if (!x) return 1;
  *x = (layout){rows, cols, ld};
  *l = x;
  return 0;
}
int cublasLtMatrixLayoutDestroy(void *l) { free(l); return 0; }
int cublasLtMatrixLayoutSetAttribute(void *l, int attr, const void *buf, size_t n) {
  (void)l; (void)buf; (void)n;
  return attr == 5 ? 15 : 0;   /* a batch count: not supported here */
}
int cublasLtMatmulPreferenceCreate(void **p) { *p = malloc(1); return *p ? 0 : 1; }
int cublasLtMatmulPreferenceDestroy(void *p) { free(p); return 0; }
int cublasLtMatmulPreferenceSetAttribute(void *p, int attr, const void *buf, size_t n) {
  (void)p; (void)attr; (void)buf; (void)n;
  return 0;
}
int cublasLtMatmulAlgoGetHeuristic(void *h, void *d, void *a, void *b, void *c, void *dd, void *pref, int want,
                                   heuristic *out, int *found) {
  (void)h; (void)d; (void)a; (void)b; (void)c; (void)dd; (void)pref; (void)want;
  memset(out, 0, sizeof *out);
  *found = 1;
  return 0;
}

/* The kernel's parameters: A, B (8 bytes each), m, n, k, lda, ldb, ldd, ta, tb (4 bytes each), then a 32-byte
 * struct {C, D, flags, 0} at byte 48. */
typedef struct tail { uint64_t c, d, flags, zero; } tail;

int cublasLtMatmul(void *h, void *dsc, const void *alpha, const void *A, void *la, const void *B, void *lb,
                   const void *beta, const void *C, void *lc, void *D, void *ld, const void *alg, void *ws,
                   size_t wsn, void *stream) {
  (void)h; (void)alpha; (void)beta; (void)lc; (void)alg; (void)ws; (void)wsn;
  const desc *x = dsc;
  const layout *a = la, *b = lb, *d = ld;
  if (!launch_hook) return 7;   /* CUBLAS_STATUS_EXECUTION_FAILED */
  uint64_t pa = (uint64_t)(uintptr_t)A, pb = (uint64_t)(uintptr_t)B;
  if (hide_a) pa >>= 4;   /* an address the graph cannot recognise */
  int32_t m = (int32_t)d->rows, n = (int32_t)d->cols, k = (int32_t)(x->ta ? a->rows : a->cols);
  int32_t lda = (int32_t)a->ld, ldb = (int32_t)b->ld, ldd = (int32_t)d->ld, ta = x->ta, tb = x->tb;
  tail t = {(uint64_t)(uintptr_t)C, (uint64_t)(uintptr_t)D, (uint64_t)hide_a, 0};
  void *args[11] = {&pa, &pb, &m, &n, &k, &lda, &ldb, &ldd, &ta, &tb, &t};
  return launch_hook(stream, args) ? 13 : 0;
}
