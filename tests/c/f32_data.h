/* f32_data.h: float32 test data and comparison for the fused-execution tests (test_fused*.c). Include after
 * declaring `static grace_vm *vm;` (the VM the tensors are made in); define F32_SEED first to pick the file's
 * own sequence of random numbers. */
#ifndef GRACE_TEST_F32_DATA_H
#define GRACE_TEST_F32_DATA_H
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include "grace.h"
#include "tap.h"

#ifndef F32_SEED
#define F32_SEED 88172645463325252ull
#endif
static uint64_t rng = F32_SEED;
/* xorshift: uniform in [lo, hi), 24 bits */
static __attribute__((unused)) float frand(float lo, float hi) {
  rng ^= rng << 13; rng ^= rng >> 7; rng ^= rng << 17;
  return lo + (hi - lo) * (float)((rng >> 40) / 16777216.0);
}

/* A new f32 tensor of the given shape with values uniform in [lo, hi) (NULL on failure). */
static __attribute__((unused)) grace_tensor *randt(int ndim, const int64_t *sizes, float lo, float hi) {
  int64_t n = 1;
  for (int d = 0; d < ndim; d++) n *= sizes[d];
  float *buf = malloc(sizeof(float) * (size_t)(n > 0 ? n : 1));
  if (!buf) return NULL;
  for (int64_t i = 0; i < n; i++) buf[i] = frand(lo, hi);
  grace_tensor *t = NULL;
  if (grace_tensor_from_data(vm, GRACE_FLOAT32, ndim, sizes, GRACE_FLOAT32, buf, &t) != GRACE_OK) t = NULL;
  free(buf);
  return t;
}

/* Bit-for-bit comparison of got with ref (every value finite), one TAP line. */
static __attribute__((unused)) int same_bits(const char *what, grace_tensor *ref, grace_tensor *got) {
  if (!ref || !got) return ok(0, "%s: both results exist", what);
  int64_t n = grace_tensor_numel(ref);
  if (grace_tensor_ndim(got) != grace_tensor_ndim(ref) || grace_tensor_numel(got) != n ||
      memcmp(grace_tensor_sizes(got), grace_tensor_sizes(ref), sizeof(int64_t) * (size_t)grace_tensor_ndim(ref)))
    return ok(0, "%s: the result has the reference's shape", what);
  uint32_t *a = malloc(4 * (size_t)(n ? n : 1)), *b = malloc(4 * (size_t)(n ? n : 1));
  int64_t diff = 0, first = -1, finite = 0;
  if (a && b && grace_tensor_read(vm, ref, GRACE_FLOAT32, a) == GRACE_OK && grace_tensor_read(vm, got, GRACE_FLOAT32, b) == GRACE_OK)
    for (int64_t i = 0; i < n; i++) {
      if (a[i] != b[i]) { diff++; if (first < 0) first = i; }
      finite += (a[i] & 0x7f800000u) != 0x7f800000u;
    }
  else diff = -1;
  int r = ok(diff == 0 && finite == n, "%s: bit-identical to eager (%lld elements)", what, (long long)n);
  if (!r && first >= 0) {
    float fa, fb;
    memcpy(&fa, &a[first], 4); memcpy(&fb, &b[first], 4);
    printf("# %lld differ; first at %lld: %.9g (eager) vs %.9g (fused)\n", (long long)diff, (long long)first, fa, fb);
  }
  free(a); free(b);
  return r;
}

#endif
