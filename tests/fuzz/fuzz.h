/* fuzz.h: what the fuzz targets of tests/fuzz share: a reader that turns the fuzz input into choices (sizes,
 * numbers, dtypes) biased toward the values that break code (zero, negative, near 2^63, NaN), a VM with a memory
 * cap so that a huge but valid size is an ENOMEM error rather than a fuzzer out-of-memory report, and the checks
 * every target makes after each input (an error has a message and is not "internal"; nothing is left allocated).
 * A check that fails aborts: libFuzzer (or tests/fuzz/replay.c in `make test`) reports the input as a crash.
 * An input that found a bug, once fixed, goes into tests/fuzz/corpus/NAME named for what it found (make test replays
 * it; make asan replays it under the sanitizers that saw it), beside a test of its own that states the expectation. */
#ifndef GRACE_FUZZ_H
#define GRACE_FUZZ_H

#include <math.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include "grace.h"

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);

#define FUZZ_MAX_BYTES (1u << 20)   /* tensor bytes a VM may hold: more is GRACE_ENOMEM (and ops stay fast) */

typedef struct fz { const uint8_t *p; size_t n, i; } fz;

static inline int fz_more(const fz *f) { return f->i < f->n; }
static inline uint8_t fz_u8(fz *f) { return f->i < f->n ? f->p[f->i++] : 0; }
static inline uint32_t fz_u32(fz *f) {
  uint32_t v = 0;
  for (int k = 0; k < 4; k++) v = v << 8 | fz_u8(f);
  return v;
}
static inline uint64_t fz_u64(fz *f) { return (uint64_t)fz_u32(f) << 32 | fz_u32(f); }

/* A size or index: mostly small, sometimes an edge of int64. */
static inline int64_t fz_int(fz *f) {
  static const int64_t edge[] = {0, 1, -1, -2, 2, 3, 1 << 16, (int64_t)1 << 31, (int64_t)1 << 40, (int64_t)1 << 60,
                                 (int64_t)1 << 62, INT64_MAX, INT64_MIN, INT64_MIN + 1, -((int64_t)1 << 62)};
  uint8_t b = fz_u8(f);
  if (b < 200) return b % 6;
  if (b < 240) return edge[b % (sizeof edge / sizeof edge[0])];
  return (int64_t)fz_u64(f);
}

/* a - b wrapping around (the harness itself must not overflow: UBSan would report it) */
static inline int64_t fz_sub(int64_t a, int64_t b) { return (int64_t)((uint64_t)a - (uint64_t)b); }

/* A number for a scalar attribute or argument. */
static inline double fz_num(fz *f) {
  static const double edge[] = {0.0, -0.0, 1.0, -1.0, 0.5, 2.0, 3.0, -7.0, 1e308, -1e308, 9007199254740993.0,
                                4611686018427387904.0, 1e-310};
  uint8_t b = fz_u8(f);
  if (b < 150) return (double)(b % 9) - 4;
  if (b < 200) return edge[b % (sizeof edge / sizeof edge[0])];
  if (b < 215) return NAN;
  if (b < 230) return b & 1 ? INFINITY : -INFINITY;
  uint64_t u = fz_u64(f);
  double d;
  memcpy(&d, &u, sizeof d);
  return d;
}

static inline grace_dtype fz_dtype(fz *f) { return (grace_dtype)(fz_u8(f) % GRACE_NDTYPES); }

/* A CPU VM with one worker (the same allocation order every run) and the memory cap. */
static inline grace_vm *fuzz_vm(int index_base) {
  grace_config cfg = {.device = "cpu", .threads = 1, .index_base = index_base, .max_bytes = FUZZ_MAX_BYTES};
  char err[256];
  grace_vm *vm = grace_vm_new(&cfg, err, sizeof err);
  if (!vm) { fprintf(stderr, "fuzz: grace_vm_new: %s\n", err); abort(); }
  return vm;
}

/* After every call of the API: an error says what went wrong and is never a bug of grace's own. */
static inline void fuzz_status(grace_vm *vm, grace_status st, const char *what) {
  if (st == GRACE_OK || st == GRACE_ENOMEM) return;
  const char *msg = grace_last_error(vm);
  if (st == GRACE_EINTERNAL || !msg || !msg[0]) {
    fprintf(stderr, "fuzz: %s: %s with message \"%s\"\n", what, grace_status_name(st), msg ? msg : "(null)");
    abort();
  }
}

/* At the end of an input: every tensor released (the VM counts their bytes), then the VM freed. */
static inline void fuzz_vm_done(grace_vm *vm) {
  size_t left = grace_tensor_bytes(vm);
  if (left) { fprintf(stderr, "fuzz: %zu tensor bytes still held at the end of the input\n", left); abort(); }
  grace_vm_free(vm);
}

/* Reads t back to the host (every element converted to float64): what a user does with a result. */
static inline void fuzz_touch(grace_vm *vm, grace_tensor *t) {
  int64_t n = grace_tensor_numel(t);
  if (n <= 0 || n > (1 << 20)) return;
  double *buf = malloc((size_t)n * sizeof *buf);
  if (!buf) return;
  fuzz_status(vm, grace_tensor_read(vm, t, GRACE_FLOAT64, buf), "grace_tensor_read");
  free(buf);
}

#endif
