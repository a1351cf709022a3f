/* test_shape.c: the data movement ops (cat, stack, index_select, gather, scatter, triu/tril, repeat,
 * embedding, index_copy_) through the public API, on hand-computed cases: non-contiguous and expanded
 * inputs, negative dims, zero sizes, dtype promotion, every error, and the 1-based index convention. */
#include <stdint.h>
#include <stdlib.h>
#include "grace.h"
#include "tap.h"

static grace_vm *vm0, *vm1;   /* index base 0 (C) and 1 (Lua) */

#define SZ(...) ((int64_t[]){__VA_ARGS__})
#define VALS(...) ((double[]){__VA_ARGS__})
#define NV(...) (int)(sizeof((double[]){__VA_ARGS__}) / sizeof(double))

static grace_tensor *T(grace_vm *vm, grace_dtype dt, int nd, const int64_t *sz, const double *v) {
  static const double none = 0;
  grace_tensor *t = NULL;
  if (grace_tensor_from_data(vm, dt, nd, sz, GRACE_FLOAT64, v ? v : &none, &t) != GRACE_OK) return NULL;
  return t;
}

static grace_tensor *transpose(grace_vm *vm, grace_tensor *t) {
  grace_tensor *o = NULL;
  grace_attrs a = {.ndims = 2, .dims = {-2, -1}};
  grace_run(vm, GRACE_OP_TRANSPOSE, 1, &t, &a, 1, &o);
  return o;
}

/* Runs op; on success checks dtype, shape and values (read as float64). Releases the result. */
static void expect(grace_vm *vm, const char *what, grace_op op, int nin, grace_tensor **in, grace_attrs a, grace_dtype dt,
                   int nd, const int64_t *sz, int n, const double *want) {
  grace_tensor *o = NULL;
  grace_status st = grace_run(vm, op, nin, in, &a, 1, &o);
  if (st != GRACE_OK) { ok(0, "%s: %s", what, grace_last_error(vm)); return; }
  int good = grace_tensor_dtype(o) == dt && grace_tensor_ndim(o) == nd && grace_tensor_numel(o) == n &&
             grace_tensor_is_contiguous(o);
  for (int d = 0; good && d < nd; d++) good = grace_tensor_sizes(o)[d] == sz[d];
  double *got = malloc(sizeof(double) * (size_t)(n + 1));
  if (good && grace_tensor_read(vm, o, GRACE_FLOAT64, got) == GRACE_OK)
    for (int i = 0; i < n; i++)
      if (got[i] != want[i]) {
        printf("# element %d: got %g, expected %g\n", i, got[i], want[i]);
        good = 0;
        break;
      }
  ok(good, "%s", what);
  free(got);
  grace_tensor_release(o);
}

/* Runs op expecting failure with status st and a message containing `msg`. */
static void expect_err(grace_vm *vm, const char *what, grace_op op, int nin, grace_tensor **in, grace_attrs a,
                       grace_status st, const char *msg) {
  grace_tensor *o = (grace_tensor *)&o;
  grace_status got = grace_run(vm, op, nin, in, &a, grace_op_noutputs(op) ? 1 : 0, &o);
  int good = got == st && strstr(grace_last_error(vm), msg) != NULL &&
             (grace_op_noutputs(op) == 0 || o == NULL);
  ok(good, "%s: %s", what, grace_last_error(vm));
  if (!good) printf("#   expected status %d with '%s', got status %d\n", (int)st, msg, (int)got);
}

static void release_all(grace_tensor **ts, int n) { for (int i = 0; i < n; i++) grace_tensor_release(ts[i]); }

static void test_cat(void) {
  grace_tensor *a = T(vm0, GRACE_FLOAT32, 2, SZ(2, 2), VALS(1, 2, 3, 4));
  grace_tensor *b = T(vm0, GRACE_FLOAT32, 2, SZ(1, 2), VALS(5, 6));
  grace_tensor *c = T(vm0, GRACE_FLOAT32, 2, SZ(2, 1), VALS(7, 8));
  grace_tensor *at = transpose(vm0, a);   /* [[1,3],[2,4]] */
  grace_tensor *i32 = T(vm0, GRACE_INT32, 1, SZ(2), VALS(1, 2)), *f32 = T(vm0, GRACE_FLOAT32, 1, SZ(1), VALS(0.5));
  grace_tensor *e02 = T(vm0, GRACE_FLOAT32, 2, SZ(0, 2), NULL), *e0 = T(vm0, GRACE_FLOAT32, 1, SZ(0), NULL);
  grace_tensor *d33 = T(vm0, GRACE_FLOAT32, 2, SZ(3, 3), VALS(0, 0, 0, 0, 0, 0, 0, 0, 0));
  grace_tensor *v3 = T(vm0, GRACE_FLOAT32, 1, SZ(3), VALS(1, 2, 3)), *s = NULL;
  grace_tensor_scalar(vm0, 1.0, 0, &s);

  expect(vm0, "cat [2,2],[1,2] dim 0", GRACE_OP_CAT, 2, (grace_tensor *[]){a, b}, (grace_attrs){.ndims = 1, .dims = {0}},
         GRACE_FLOAT32, 2, SZ(3, 2), 6, VALS(1, 2, 3, 4, 5, 6));
  expect(vm0, "cat with no dim given uses dim 0", GRACE_OP_CAT, 2, (grace_tensor *[]){a, b}, (grace_attrs){0},
         GRACE_FLOAT32, 2, SZ(3, 2), 6, VALS(1, 2, 3, 4, 5, 6));
  expect(vm0, "cat [2,2],[2,1] dim -1", GRACE_OP_CAT, 2, (grace_tensor *[]){a, c}, (grace_attrs){.ndims = 1, .dims = {-1}},
         GRACE_FLOAT32, 2, SZ(2, 3), 6, VALS(1, 2, 7, 3, 4, 8));
  expect(vm0, "cat of a transposed view and [2,1] dim 1", GRACE_OP_CAT, 3, (grace_tensor *[]){at, c, at},
         (grace_attrs){.ndims = 1, .dims = {1}}, GRACE_FLOAT32, 2, SZ(2, 5), 10, VALS(1, 3, 7, 1, 3, 2, 4, 8, 2, 4));
  expect(vm0, "cat int32 with float32 promotes to float32", GRACE_OP_CAT, 2, (grace_tensor *[]){i32, f32},
         (grace_attrs){0}, GRACE_FLOAT32, 1, SZ(3), 3, VALS(1, 2, 0.5));
  expect(vm0, "cat with a [0,2] input", GRACE_OP_CAT, 3, (grace_tensor *[]){e02, a, e02}, (grace_attrs){0}, GRACE_FLOAT32,
         2, SZ(2, 2), 4, VALS(1, 2, 3, 4));
  expect(vm0, "cat skips legacy empty [0] inputs", GRACE_OP_CAT, 2, (grace_tensor *[]){e0, a},
         (grace_attrs){.ndims = 1, .dims = {1}}, GRACE_FLOAT32, 2, SZ(2, 2), 4, VALS(1, 2, 3, 4));
  expect(vm0, "cat of one input copies it", GRACE_OP_CAT, 1, (grace_tensor *[]){at}, (grace_attrs){0}, GRACE_FLOAT32, 2,
         SZ(2, 2), 4, VALS(1, 3, 2, 4));

  expect_err(vm0, "cat of mismatched shapes", GRACE_OP_CAT, 2, (grace_tensor *[]){a, d33}, (grace_attrs){0}, GRACE_ESHAPE,
             "cat: sizes must match except in dim 0: got shapes [2, 2] and [3, 3]");
  grace_tensor *a1 = T(vm1, GRACE_FLOAT32, 2, SZ(2, 2), VALS(1, 2, 3, 4));
  grace_tensor *c1 = T(vm1, GRACE_FLOAT32, 2, SZ(3, 3), VALS(0, 0, 0, 0, 0, 0, 0, 0, 0));
  expect_err(vm1, "cat mismatch names the dim 1-based", GRACE_OP_CAT, 2, (grace_tensor *[]){a1, c1},
             (grace_attrs){.ndims = 1, .dims = {-1}}, GRACE_ESHAPE, "except in dim 2: got shapes [2, 2] and [3, 3]");
  grace_tensor_release(a1);
  grace_tensor_release(c1);
  expect_err(vm0, "cat of different ranks", GRACE_OP_CAT, 2, (grace_tensor *[]){a, v3}, (grace_attrs){0}, GRACE_ESHAPE,
             "[2, 2] and [3]");
  expect_err(vm0, "cat dim out of range", GRACE_OP_CAT, 2, (grace_tensor *[]){a, b}, (grace_attrs){.ndims = 1, .dims = {2}},
             GRACE_EINDEX, "cat: dim 2 out of range");
  expect_err(vm0, "cat of a 0-d tensor", GRACE_OP_CAT, 2, (grace_tensor *[]){v3, s}, (grace_attrs){0}, GRACE_ESHAPE,
             "0-d");

  /* int64 beyond 2^53 stays exact through cat */
  int64_t big[2] = {(INT64_C(1) << 53) + 1, -((INT64_C(1) << 60) + 3)}, got[3] = {0};
  grace_tensor *b1 = NULL, *b2 = NULL, *o = NULL;
  grace_tensor_from_data(vm0, GRACE_INT64, 1, SZ(1), GRACE_INT64, &big[0], &b1);
  grace_tensor_from_data(vm0, GRACE_INT64, 1, SZ(1), GRACE_INT64, &big[1], &b2);
  ok(grace_run(vm0, GRACE_OP_CAT, 3, (grace_tensor *[]){b1, b2, b1}, NULL, 1, &o) == GRACE_OK &&
     grace_tensor_read(vm0, o, GRACE_INT64, got) == GRACE_OK && got[0] == big[0] && got[1] == big[1] && got[2] == big[0],
     "cat keeps int64 values exact");
  grace_tensor_release(o);

  /* A large cat (the parallel copy path) of x[i][j] = 1000 i + j and its transpose. */
  enum { N = 400 };
  double *xv = malloc(sizeof(double) * N * N);
  for (int i = 0; i < N; i++) for (int j = 0; j < N; j++) xv[i * N + j] = 1000.0 * i + j;
  grace_tensor *x = T(vm0, GRACE_FLOAT32, 2, SZ(N, N), xv), *xt = transpose(vm0, x);
  o = NULL;
  int good = grace_run(vm0, GRACE_OP_CAT, 2, (grace_tensor *[]){x, xt}, &(grace_attrs){.ndims = 1, .dims = {1}}, 1, &o) ==
             GRACE_OK && grace_tensor_sizes(o)[0] == N && grace_tensor_sizes(o)[1] == 2 * N;
  float *ov = good ? (float *)grace_tensor_data(o) : NULL;
  for (int i = 0; good && i < N; i++)
    for (int j = 0; good && j < N; j++)
      good = ov[i * 2 * N + j] == (float)(1000.0 * i + j) && ov[i * 2 * N + N + j] == (float)(1000.0 * j + i);
  ok(good, "cat of a 400x400 tensor and its transpose along dim 1");
  grace_tensor_release(o);
  free(xv);
  release_all((grace_tensor *[]){a, b, c, at, i32, f32, e02, e0, d33, v3, s, b1, b2, x, xt}, 15);
}

static void test_stack(void) {
  grace_tensor *a = T(vm0, GRACE_FLOAT32, 1, SZ(2), VALS(1, 2)), *b = T(vm0, GRACE_FLOAT32, 1, SZ(2), VALS(3, 4));
  grace_tensor *c3 = T(vm0, GRACE_FLOAT32, 1, SZ(3), VALS(4, 5, 6)), *one = T(vm0, GRACE_INT64, 1, SZ(1), VALS(9));
  grace_tensor *ex = NULL;
  grace_run(vm0, GRACE_OP_EXPAND, 1, &one, &(grace_attrs){.nshape = 1, .shape = {3}}, 1, &ex);   /* [9,9,9], stride 0 */
  expect(vm0, "stack dim 0", GRACE_OP_STACK, 2, (grace_tensor *[]){a, b}, (grace_attrs){.ndims = 1, .dims = {0}},
         GRACE_FLOAT32, 2, SZ(2, 2), 4, VALS(1, 2, 3, 4));
  expect(vm0, "stack dim 1", GRACE_OP_STACK, 2, (grace_tensor *[]){a, b}, (grace_attrs){.ndims = 1, .dims = {1}},
         GRACE_FLOAT32, 2, SZ(2, 2), 4, VALS(1, 3, 2, 4));
  expect(vm0, "stack dim -1", GRACE_OP_STACK, 2, (grace_tensor *[]){a, b}, (grace_attrs){.ndims = 1, .dims = {-1}},
         GRACE_FLOAT32, 2, SZ(2, 2), 4, VALS(1, 3, 2, 4));
  expect(vm0, "stack dim -2", GRACE_OP_STACK, 3, (grace_tensor *[]){a, b, a}, (grace_attrs){.ndims = 1, .dims = {-2}},
         GRACE_FLOAT32, 2, SZ(3, 2), 6, VALS(1, 2, 3, 4, 1, 2));
  expect(vm0, "stack an expanded int64 with float32 (promotes)", GRACE_OP_STACK, 2, (grace_tensor *[]){ex, c3},
         (grace_attrs){.ndims = 1, .dims = {1}}, GRACE_FLOAT32, 2, SZ(3, 2), 6, VALS(9, 4, 9, 5, 9, 6));
  grace_tensor *z = T(vm0, GRACE_FLOAT32, 2, SZ(0, 3), NULL);
  expect(vm0, "stack of zero-size tensors", GRACE_OP_STACK, 2, (grace_tensor *[]){z, z}, (grace_attrs){.ndims = 1, .dims = {1}},
         GRACE_FLOAT32, 3, SZ(0, 2, 3), 0, NULL);
  expect_err(vm0, "stack of different shapes", GRACE_OP_STACK, 2, (grace_tensor *[]){a, c3}, (grace_attrs){0},
             GRACE_ESHAPE, "stack: expects each tensor to be the same shape, got [2] and [3]");
  expect_err(vm0, "stack dim -3 on 1-d inputs", GRACE_OP_STACK, 2, (grace_tensor *[]){a, b},
             (grace_attrs){.ndims = 1, .dims = {-3}}, GRACE_EINDEX, "stack: dim -3 out of range for stacking 1-d tensors (expected 0 to 1, or -2 to -1)");
  expect_err(vm0, "stack dim 2 on 1-d inputs", GRACE_OP_STACK, 2, (grace_tensor *[]){a, b},
             (grace_attrs){.ndims = 1, .dims = {2}}, GRACE_EINDEX, "dim 2 out of range");
  release_all((grace_tensor *[]){a, b, c3, one, ex, z}, 6);
}

static void test_index_select(void) {
  double xv[] = {1, 2, 3, 4, 5, 6};
  grace_tensor *x = T(vm0, GRACE_FLOAT32, 2, SZ(2, 3), xv), *x1 = T(vm1, GRACE_FLOAT32, 2, SZ(2, 3), xv);
  grace_tensor *xt = transpose(vm0, x);   /* [[1,4],[2,5],[3,6]] */
  grace_tensor *i20 = T(vm0, GRACE_INT64, 1, SZ(2), VALS(2, 0)), *i31 = T(vm1, GRACE_INT64, 1, SZ(2), VALS(3, 1));
  grace_tensor *i110 = T(vm0, GRACE_INT32, 1, SZ(3), VALS(1, 1, 0)), *i2 = T(vm0, GRACE_INT64, 1, SZ(1), VALS(2));
  grace_tensor *i0d = T(vm0, GRACE_INT64, 0, NULL, VALS(1)), *iempty = T(vm0, GRACE_INT64, 1, SZ(0), NULL);
  grace_tensor *bad3 = T(vm0, GRACE_INT64, 1, SZ(1), VALS(3)), *bad0 = T(vm1, GRACE_INT64, 1, SZ(1), VALS(0));
  grace_tensor *bad4 = T(vm1, GRACE_INT32, 1, SZ(2), VALS(1, 4)), *neg = T(vm0, GRACE_INT64, 1, SZ(1), VALS(-1));
  grace_tensor *fidx = T(vm0, GRACE_FLOAT32, 1, SZ(1), VALS(0)), *i2d = T(vm0, GRACE_INT64, 2, SZ(1, 1), VALS(0));
  grace_attrs d1 = {.ndims = 1, .dims = {1}}, d0 = {.ndims = 1, .dims = {0}}, dm1 = {.ndims = 1, .dims = {-1}};

  expect(vm0, "index_select dim 1 [2,0]", GRACE_OP_INDEX_SELECT, 2, (grace_tensor *[]){x, i20}, d1, GRACE_FLOAT32, 2,
         SZ(2, 2), 4, VALS(3, 1, 6, 4));
  expect(vm0, "index_select dim -1 [2,0]", GRACE_OP_INDEX_SELECT, 2, (grace_tensor *[]){x, i20}, dm1, GRACE_FLOAT32, 2,
         SZ(2, 2), 4, VALS(3, 1, 6, 4));
  expect(vm1, "index_select with index base 1: [3,1] selects columns 3 and 1", GRACE_OP_INDEX_SELECT, 2,
         (grace_tensor *[]){x1, i31}, d1, GRACE_FLOAT32, 2, SZ(2, 2), 4, VALS(3, 1, 6, 4));
  expect(vm0, "index_select dim 0 with int32 [1,1,0]", GRACE_OP_INDEX_SELECT, 2, (grace_tensor *[]){x, i110}, d0,
         GRACE_FLOAT32, 2, SZ(3, 3), 9, VALS(4, 5, 6, 4, 5, 6, 1, 2, 3));
  expect(vm0, "index_select of a transposed view", GRACE_OP_INDEX_SELECT, 2, (grace_tensor *[]){xt, i2}, d0,
         GRACE_FLOAT32, 2, SZ(1, 2), 2, VALS(3, 6));
  expect(vm0, "index_select column of a transposed view", GRACE_OP_INDEX_SELECT, 2, (grace_tensor *[]){xt, i0d}, d1,
         GRACE_FLOAT32, 2, SZ(3, 1), 3, VALS(4, 5, 6));
  expect(vm0, "index_select with an empty index", GRACE_OP_INDEX_SELECT, 2, (grace_tensor *[]){x, iempty}, d1,
         GRACE_FLOAT32, 2, SZ(2, 0), 0, NULL);

  expect_err(vm0, "index_select index 3 of size 3", GRACE_OP_INDEX_SELECT, 2, (grace_tensor *[]){x, bad3}, d1, GRACE_EINDEX,
             "index_select: index 3 out of range for dim 1 of size 3");
  expect_err(vm1, "index_select index 0 with base 1", GRACE_OP_INDEX_SELECT, 2, (grace_tensor *[]){x1, bad0}, d1,
             GRACE_EINDEX, "index_select: index 0 out of range for dim 2 of size 3");
  expect_err(vm1, "index_select index 4 with base 1", GRACE_OP_INDEX_SELECT, 2, (grace_tensor *[]){x1, bad4}, d1,
             GRACE_EINDEX, "index 4 out of range for dim 2 of size 3");
  expect_err(vm0, "index_select negative index", GRACE_OP_INDEX_SELECT, 2, (grace_tensor *[]){x, neg}, d0, GRACE_EINDEX,
             "index -1 out of range for dim 0 of size 2");
  expect_err(vm0, "index_select float index", GRACE_OP_INDEX_SELECT, 2, (grace_tensor *[]){x, fidx}, d0, GRACE_EDTYPE,
             "index_select: index must be int64 or int32, got float32");
  expect_err(vm0, "index_select 2-d index", GRACE_OP_INDEX_SELECT, 2, (grace_tensor *[]){x, i2d}, d0, GRACE_ESHAPE,
             "[1, 1]");

  /* int64 values beyond 2^53 come through exactly */
  int64_t big[2] = {(INT64_C(1) << 53) + 1, 7}, got[2] = {0};
  grace_tensor *bt = NULL, *o = NULL, *i10 = T(vm0, GRACE_INT64, 1, SZ(2), VALS(1, 0));
  grace_tensor_from_data(vm0, GRACE_INT64, 1, SZ(2), GRACE_INT64, big, &bt);
  ok(grace_run(vm0, GRACE_OP_INDEX_SELECT, 2, (grace_tensor *[]){bt, i10}, NULL, 1, &o) == GRACE_OK &&
     grace_tensor_read(vm0, o, GRACE_INT64, got) == GRACE_OK && got[0] == 7 && got[1] == big[0],
     "index_select keeps int64 values exact");
  grace_tensor_release(o);
  release_all((grace_tensor *[]){x, x1, xt, i20, i31, i110, i2, i0d, iempty, bad3, bad0, bad4, neg, fidx, i2d, bt, i10}, 17);
}

static void test_gather_scatter(void) {
  grace_tensor *x = T(vm0, GRACE_FLOAT32, 2, SZ(2, 2), VALS(1, 2, 3, 4)), *x1 = T(vm1, GRACE_FLOAT32, 2, SZ(2, 2), VALS(1, 2, 3, 4));
  grace_tensor *xt = transpose(vm0, x);   /* [[1,3],[2,4]] */
  grace_tensor *g1 = T(vm0, GRACE_INT64, 2, SZ(2, 2), VALS(0, 0, 1, 0)), *g0 = T(vm0, GRACE_INT32, 2, SZ(2, 2), VALS(0, 1, 1, 0));
  grace_tensor *g1b = T(vm1, GRACE_INT64, 2, SZ(2, 2), VALS(1, 1, 2, 1)), *small = T(vm0, GRACE_INT64, 2, SZ(1, 1), VALS(1));
  grace_tensor *oob = T(vm0, GRACE_INT64, 2, SZ(1, 1), VALS(2)), *oob1 = T(vm1, GRACE_INT64, 2, SZ(1, 1), VALS(0));
  grace_tensor *g1d = T(vm0, GRACE_INT64, 1, SZ(2), VALS(0, 1)), *big = T(vm0, GRACE_INT64, 2, SZ(3, 1), VALS(0, 0, 0));
  grace_attrs d1 = {.ndims = 1, .dims = {1}}, d0 = {.ndims = 1, .dims = {0}}, dm1 = {.ndims = 1, .dims = {-1}};

  /* out[i][j] = x[i][idx[i][j]] (dim 1), x[idx[i][j]][j] (dim 0) */
  expect(vm0, "gather dim 1", GRACE_OP_GATHER, 2, (grace_tensor *[]){x, g1}, d1, GRACE_FLOAT32, 2, SZ(2, 2), 4,
         VALS(1, 1, 4, 3));
  expect(vm0, "gather dim -1", GRACE_OP_GATHER, 2, (grace_tensor *[]){x, g1}, dm1, GRACE_FLOAT32, 2, SZ(2, 2), 4,
         VALS(1, 1, 4, 3));
  expect(vm0, "gather dim 0 with int32 index", GRACE_OP_GATHER, 2, (grace_tensor *[]){x, g0}, d0, GRACE_FLOAT32, 2,
         SZ(2, 2), 4, VALS(1, 4, 3, 2));
  expect(vm1, "gather dim 1 with index base 1", GRACE_OP_GATHER, 2, (grace_tensor *[]){x1, g1b}, d1, GRACE_FLOAT32, 2,
         SZ(2, 2), 4, VALS(1, 1, 4, 3));
  expect(vm0, "gather of a transposed view", GRACE_OP_GATHER, 2, (grace_tensor *[]){xt, g1}, d1, GRACE_FLOAT32, 2,
         SZ(2, 2), 4, VALS(1, 1, 4, 2));
  expect(vm0, "gather with a smaller index", GRACE_OP_GATHER, 2, (grace_tensor *[]){x, small}, d1, GRACE_FLOAT32, 2,
         SZ(1, 1), 1, VALS(2));
  expect_err(vm0, "gather index 2 of size 2", GRACE_OP_GATHER, 2, (grace_tensor *[]){x, oob}, d1, GRACE_EINDEX,
             "gather: index 2 out of range for dim 1 of size 2");
  expect_err(vm1, "gather index 0 with base 1", GRACE_OP_GATHER, 2, (grace_tensor *[]){x1, oob1}, d1, GRACE_EINDEX,
             "gather: index 0 out of range for dim 2 of size 2");
  expect_err(vm0, "gather with a 1-d index on a 2-d input", GRACE_OP_GATHER, 2, (grace_tensor *[]){x, g1d}, d1,
             GRACE_ESHAPE, "gather: index (shape [2]) must have the same number of dims as the input (shape [2, 2])");
  expect_err(vm0, "gather index larger outside dim", GRACE_OP_GATHER, 2, (grace_tensor *[]){x, big}, d1, GRACE_ESHAPE,
             "larger than input shape");

  /* PyTorch's scatter_ example: zeros(3,5).scatter_(0, [[0,1,2,0]], arange(1,11).view(2,5)) */
  grace_tensor *z35 = T(vm0, GRACE_FLOAT32, 2, SZ(3, 5), VALS(0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0));
  grace_tensor *src = T(vm0, GRACE_FLOAT32, 2, SZ(2, 5), VALS(1, 2, 3, 4, 5, 6, 7, 8, 9, 10));
  grace_tensor *si0 = T(vm0, GRACE_INT64, 2, SZ(1, 4), VALS(0, 1, 2, 0));
  grace_tensor *si1 = T(vm0, GRACE_INT64, 2, SZ(2, 3), VALS(0, 1, 2, 0, 1, 4));
  grace_tensor *si1b = T(vm1, GRACE_INT64, 2, SZ(2, 3), VALS(1, 2, 3, 1, 2, 5));
  grace_tensor *z35b = T(vm1, GRACE_FLOAT32, 2, SZ(3, 5), VALS(0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0));
  grace_tensor *srcb = T(vm1, GRACE_FLOAT32, 2, SZ(2, 5), VALS(1, 2, 3, 4, 5, 6, 7, 8, 9, 10));
  expect(vm0, "scatter dim 0 (PyTorch's example)", GRACE_OP_SCATTER, 3, (grace_tensor *[]){z35, si0, src}, d0, GRACE_FLOAT32,
         2, SZ(3, 5), 15, VALS(1, 0, 0, 4, 0, 0, 2, 0, 0, 0, 0, 0, 3, 0, 0));
  expect(vm0, "scatter dim 1 (PyTorch's example)", GRACE_OP_SCATTER, 3, (grace_tensor *[]){z35, si1, src}, d1, GRACE_FLOAT32,
         2, SZ(3, 5), 15, VALS(1, 2, 3, 0, 0, 6, 7, 0, 0, 8, 0, 0, 0, 0, 0));
  expect(vm1, "scatter dim 1 with index base 1", GRACE_OP_SCATTER, 3, (grace_tensor *[]){z35b, si1b, srcb}, d1,
         GRACE_FLOAT32, 2, SZ(3, 5), 15, VALS(1, 2, 3, 0, 0, 6, 7, 0, 0, 8, 0, 0, 0, 0, 0));
  grace_tensor *xs = NULL, *sidx = T(vm0, GRACE_INT64, 2, SZ(2, 1), VALS(1, 0));
  grace_tensor_scalar(vm0, 9.0, 0, &xs);
  /* x transposed is [[1,3],[2,4]]; write 9 at column idx[i][0] of row i; x itself is not changed */
  expect(vm0, "scatter a scalar value into a transposed view", GRACE_OP_SCATTER, 3, (grace_tensor *[]){xt, sidx, xs}, d1,
         GRACE_FLOAT32, 2, SZ(2, 2), 4, VALS(1, 9, 9, 4));
  expect(vm0, "scatter leaves its input alone", GRACE_OP_CAT, 1, (grace_tensor *[]){x}, (grace_attrs){0}, GRACE_FLOAT32, 2,
         SZ(2, 2), 4, VALS(1, 2, 3, 4));
  grace_tensor *srci = T(vm0, GRACE_INT64, 2, SZ(2, 5), VALS(1, 2, 3, 4, 5, 6, 7, 8, 9, 10));
  expect_err(vm0, "scatter src of another dtype", GRACE_OP_SCATTER, 3, (grace_tensor *[]){z35, si0, srci}, d0, GRACE_EDTYPE,
             "scatter: expected src to have the input's dtype float32, got int64");
  grace_tensor *sbad = T(vm0, GRACE_INT64, 2, SZ(1, 1), VALS(3));
  expect_err(vm0, "scatter index 3 of size 3", GRACE_OP_SCATTER, 3, (grace_tensor *[]){z35, sbad, src}, d0, GRACE_EINDEX,
             "scatter: index 3 out of range for dim 0 of size 3");
  grace_tensor *swide = T(vm0, GRACE_INT64, 2, SZ(1, 6), VALS(0, 0, 0, 0, 0, 0));
  expect_err(vm0, "scatter index wider than the input", GRACE_OP_SCATTER, 3, (grace_tensor *[]){z35, swide, src}, d0,
             GRACE_ESHAPE, "larger than input shape [3, 5]");
  release_all((grace_tensor *[]){x, x1, xt, g1, g0, g1b, small, oob, oob1, g1d, big, z35, src, si0, si1, si1b, z35b, srcb,
                                 xs, sidx, srci, sbad, swide}, 23);
}

static void test_tri_repeat(void) {
  grace_tensor *m = T(vm0, GRACE_FLOAT32, 2, SZ(3, 3), VALS(1, 2, 3, 4, 5, 6, 7, 8, 9));
  grace_tensor *mt = transpose(vm0, m);   /* [[1,4,7],[2,5,8],[3,6,9]] */
  grace_tensor *b = T(vm0, GRACE_INT32, 3, SZ(2, 2, 3), VALS(1, 2, 3, 4, 5, 6, 7, 8, 9, 10, 11, 12));
  grace_tensor *v = T(vm0, GRACE_FLOAT32, 1, SZ(3), VALS(1, 2, 3));
  grace_op TU = GRACE_OP_TRIU, TL = GRACE_OP_TRIL;
  expect(vm0, "triu", TU, 1, &m, (grace_attrs){0}, GRACE_FLOAT32, 2, SZ(3, 3), 9, VALS(1, 2, 3, 0, 5, 6, 0, 0, 9));
  expect(vm0, "triu diagonal 1", TU, 1, &m, (grace_attrs){.i0 = 1}, GRACE_FLOAT32, 2, SZ(3, 3), 9,
         VALS(0, 2, 3, 0, 0, 6, 0, 0, 0));
  expect(vm0, "triu diagonal -1", TU, 1, &m, (grace_attrs){.i0 = -1}, GRACE_FLOAT32, 2, SZ(3, 3), 9,
         VALS(1, 2, 3, 4, 5, 6, 0, 8, 9));
  expect(vm0, "tril", TL, 1, &m, (grace_attrs){0}, GRACE_FLOAT32, 2, SZ(3, 3), 9, VALS(1, 0, 0, 4, 5, 0, 7, 8, 9));
  expect(vm0, "tril diagonal -1", TL, 1, &m, (grace_attrs){.i0 = -1}, GRACE_FLOAT32, 2, SZ(3, 3), 9,
         VALS(0, 0, 0, 4, 0, 0, 7, 8, 0));
  expect(vm0, "tril diagonal 5 keeps everything", TL, 1, &m, (grace_attrs){.i0 = 5}, GRACE_FLOAT32, 2, SZ(3, 3), 9,
         VALS(1, 2, 3, 4, 5, 6, 7, 8, 9));
  expect(vm0, "triu diagonal -5 keeps everything", TU, 1, &m, (grace_attrs){.i0 = -5}, GRACE_FLOAT32, 2, SZ(3, 3), 9,
         VALS(1, 2, 3, 4, 5, 6, 7, 8, 9));
  expect(vm0, "tril of a transposed view", TL, 1, &mt, (grace_attrs){0}, GRACE_FLOAT32, 2, SZ(3, 3), 9,
         VALS(1, 0, 0, 2, 5, 0, 3, 6, 9));
  expect(vm0, "batched int32 triu of [2,2,3]", TU, 1, &b, (grace_attrs){0}, GRACE_INT32, 3, SZ(2, 2, 3), 12,
         VALS(1, 2, 3, 0, 5, 6, 7, 8, 9, 0, 11, 12));
  expect(vm0, "batched tril diagonal 1 of [2,2,3]", TL, 1, &b, (grace_attrs){.i0 = 1}, GRACE_INT32, 3, SZ(2, 2, 3), 12,
         VALS(1, 2, 0, 4, 5, 6, 7, 8, 0, 10, 11, 12));
  expect_err(vm0, "triu of a 1-d tensor", TU, 1, &v, (grace_attrs){0}, GRACE_ESHAPE, "triu: input must have at least 2 dims");

  grace_tensor *r2 = T(vm0, GRACE_FLOAT32, 2, SZ(2, 2), VALS(1, 2, 3, 4)), *r2t = transpose(vm0, r2);
  grace_tensor *u8 = T(vm0, GRACE_UINT8, 1, SZ(2), VALS(1, 2)), *s = NULL;
  grace_tensor_scalar(vm0, 7, 1, &s);
  grace_op R = GRACE_OP_REPEAT;
  expect(vm0, "repeat [1,2,3] by {2,2}", R, 1, &v, (grace_attrs){.nshape = 2, .shape = {2, 2}}, GRACE_FLOAT32, 2, SZ(2, 6),
         12, VALS(1, 2, 3, 1, 2, 3, 1, 2, 3, 1, 2, 3));
  expect(vm0, "repeat [[1,2],[3,4]] by {1,2}", R, 1, &r2, (grace_attrs){.nshape = 2, .shape = {1, 2}}, GRACE_FLOAT32, 2,
         SZ(2, 4), 8, VALS(1, 2, 1, 2, 3, 4, 3, 4));
  expect(vm0, "repeat a transposed view by {2,1,1}", R, 1, &r2t, (grace_attrs){.nshape = 3, .shape = {2, 1, 1}},
         GRACE_FLOAT32, 3, SZ(2, 2, 2), 8, VALS(1, 3, 2, 4, 1, 3, 2, 4));
  expect(vm0, "repeat a transposed view by {2,3}", R, 1, &r2t, (grace_attrs){.nshape = 2, .shape = {2, 3}}, GRACE_FLOAT32,
         2, SZ(4, 6), 24,
         VALS(1, 3, 1, 3, 1, 3, 2, 4, 2, 4, 2, 4, 1, 3, 1, 3, 1, 3, 2, 4, 2, 4, 2, 4));
  expect(vm0, "repeat uint8 by {3}", R, 1, &u8, (grace_attrs){.nshape = 1, .shape = {3}}, GRACE_UINT8, 1, SZ(6), 6,
         VALS(1, 2, 1, 2, 1, 2));
  expect(vm0, "repeat a 0-d tensor by {2,2}", R, 1, &s, (grace_attrs){.nshape = 2, .shape = {2, 2}}, GRACE_INT64, 2,
         SZ(2, 2), 4, VALS(7, 7, 7, 7));
  expect(vm0, "repeat by 0 gives an empty tensor", R, 1, &r2, (grace_attrs){.nshape = 2, .shape = {0, 2}}, GRACE_FLOAT32,
         2, SZ(0, 4), 0, NULL);
  expect_err(vm0, "repeat with fewer counts than dims", R, 1, &r2, (grace_attrs){.nshape = 1, .shape = {2}}, GRACE_ESHAPE,
             "repeat: 1 repeat counts given for a tensor of shape [2, 2]");
  expect_err(vm0, "repeat with a negative count", R, 1, &r2, (grace_attrs){.nshape = 2, .shape = {1, -1}}, GRACE_EARG,
             "repeat counts must be >= 0");
  release_all((grace_tensor *[]){m, mt, b, v, r2, r2t, u8, s}, 8);
}

static void test_embedding(void) {
  double wv[12];
  for (int i = 0; i < 4; i++) for (int j = 0; j < 3; j++) wv[i * 3 + j] = 10 * i + j;   /* row i: 10i, 10i+1, 10i+2 */
  grace_tensor *w = T(vm0, GRACE_FLOAT32, 2, SZ(4, 3), wv), *w1 = T(vm1, GRACE_FLOAT32, 2, SZ(4, 3), wv);
  grace_tensor *wb = T(vm0, GRACE_BFLOAT16, 2, SZ(4, 3), wv);
  grace_tensor *wT = T(vm0, GRACE_FLOAT32, 2, SZ(3, 4), VALS(0, 10, 20, 30, 1, 11, 21, 31, 2, 12, 22, 32));
  grace_tensor *wt = transpose(vm0, wT);   /* the same table as w, column-major */
  grace_tensor *ids = T(vm0, GRACE_INT64, 2, SZ(2, 2), VALS(1, 3, 0, 1)), *ids32 = T(vm0, GRACE_INT32, 1, SZ(2), VALS(2, 2));
  grace_tensor *ids1 = T(vm1, GRACE_INT64, 2, SZ(2, 2), VALS(2, 4, 1, 2)), *id0d = T(vm0, GRACE_INT64, 0, NULL, VALS(3));
  grace_tensor *bad = T(vm0, GRACE_INT64, 1, SZ(3), VALS(0, 4, 1)), *bad1 = T(vm1, GRACE_INT32, 1, SZ(1), VALS(0));
  grace_tensor *fids = T(vm0, GRACE_FLOAT32, 1, SZ(1), VALS(0)), *v = T(vm0, GRACE_FLOAT32, 1, SZ(3), VALS(0, 0, 0));
  grace_tensor *none = T(vm0, GRACE_INT64, 1, SZ(0), NULL);
  grace_op E = GRACE_OP_EMBEDDING;
  double want[] = {10, 11, 12, 30, 31, 32, 0, 1, 2, 10, 11, 12};
  expect(vm0, "embedding of [2,2] ids", E, 2, (grace_tensor *[]){ids, w}, (grace_attrs){0}, GRACE_FLOAT32, 3, SZ(2, 2, 3),
         12, want);
  expect(vm1, "embedding with index base 1", E, 2, (grace_tensor *[]){ids1, w1}, (grace_attrs){0}, GRACE_FLOAT32, 3,
         SZ(2, 2, 3), 12, want);
  expect(vm0, "embedding from a column-major table", E, 2, (grace_tensor *[]){ids, wt}, (grace_attrs){0}, GRACE_FLOAT32, 3,
         SZ(2, 2, 3), 12, want);
  expect(vm0, "embedding of a bfloat16 table with int32 ids", E, 2, (grace_tensor *[]){ids32, wb}, (grace_attrs){0},
         GRACE_BFLOAT16, 2, SZ(2, 3), 6, VALS(20, 21, 22, 20, 21, 22));
  expect(vm0, "embedding of a 0-d id", E, 2, (grace_tensor *[]){id0d, w}, (grace_attrs){0}, GRACE_FLOAT32, 1, SZ(3), 3,
         VALS(30, 31, 32));
  expect(vm0, "embedding of no ids", E, 2, (grace_tensor *[]){none, w}, (grace_attrs){0}, GRACE_FLOAT32, 2, SZ(0, 3), 0,
         NULL);
  expect_err(vm0, "embedding id 4 of 4 rows", E, 2, (grace_tensor *[]){bad, w}, (grace_attrs){0}, GRACE_EINDEX,
             "embedding: id 4 out of range for a table of 4 rows");
  expect_err(vm1, "embedding id 0 with base 1", E, 2, (grace_tensor *[]){bad1, w1}, (grace_attrs){0}, GRACE_EINDEX,
             "embedding: id 0 out of range for a table of 4 rows");
  expect_err(vm0, "embedding float ids", E, 2, (grace_tensor *[]){fids, w}, (grace_attrs){0}, GRACE_EDTYPE,
             "embedding: ids must be int64 or int32, got float32");
  expect_err(vm0, "embedding 1-d table", E, 2, (grace_tensor *[]){ids, v}, (grace_attrs){0}, GRACE_ESHAPE,
             "embedding: weight must be 2-d");

  /* The GPT-2 sized message, and a large lookup (the parallel path) checked element by element. */
  enum { V = 50257, D = 64, NID = 3000 };
  grace_tensor *big = NULL, *o = NULL;
  int64_t bsz[2] = {V, D};
  grace_tensor_empty(vm0, GRACE_FLOAT32, GRACE_CPU, 2, bsz, &big);
  float *bd = grace_tensor_data(big);
  for (int64_t i = 0; i < V; i++) for (int j = 0; j < D; j++) bd[i * D + j] = (float)(i * 64 + j);
  int64_t over = 50258;
  grace_tensor *oid = NULL, *many = NULL;
  grace_tensor_from_data(vm1, GRACE_INT64, 1, SZ(1), GRACE_INT64, &over, &oid);
  grace_tensor *oid0 = T(vm0, GRACE_INT64, 1, SZ(1), VALS(50258));
  expect_err(vm0, "embedding id 50258 of 50257 rows", E, 2, (grace_tensor *[]){oid0, big}, (grace_attrs){0}, GRACE_EINDEX,
             "embedding: id 50258 out of range for a table of 50257 rows");
  int64_t *idv = malloc(sizeof(int64_t) * NID);
  for (int i = 0; i < NID; i++) idv[i] = (int64_t)i * 7919 % V;
  grace_tensor_from_data(vm0, GRACE_INT64, 1, SZ(NID), GRACE_INT64, idv, &many);
  int good = grace_run(vm0, E, 2, (grace_tensor *[]){many, big}, NULL, 1, &o) == GRACE_OK;
  float *od = good ? grace_tensor_data(o) : NULL;
  for (int i = 0; good && i < NID; i++)
    for (int j = 0; good && j < D; j++) good = od[i * D + j] == (float)(idv[i] * 64 + j);
  ok(good, "embedding of 3000 ids from a 50257 x 64 table");
  free(idv);
  grace_tensor_release(o);
  release_all((grace_tensor *[]){w, w1, wb, wT, wt, ids, ids32, ids1, id0d, bad, bad1, fids, v, none, big, oid, oid0, many},
              18);
}

static void test_index_copy(void) {
  grace_tensor *d = T(vm0, GRACE_FLOAT32, 2, SZ(3, 2), VALS(0, 0, 0, 0, 0, 0));
  grace_tensor *idx = T(vm0, GRACE_INT64, 1, SZ(2), VALS(2, 0)), *src = T(vm0, GRACE_FLOAT32, 2, SZ(2, 2), VALS(1, 2, 3, 4));
  uint64_t v0 = grace_tensor_version(d);
  ok(grace_run(vm0, GRACE_OP_INDEX_COPY_, 3, (grace_tensor *[]){d, idx, src}, &(grace_attrs){.ndims = 1, .dims = {0}}, 0,
               NULL) == GRACE_OK, "index_copy_ dim 0 runs");
  double got[6] = {0};
  grace_tensor_read(vm0, d, GRACE_FLOAT64, got);
  ok(got[0] == 3 && got[1] == 4 && got[2] == 0 && got[3] == 0 && got[4] == 1 && got[5] == 2,
     "index_copy_ dim 0 writes rows 2 and 0: [[3,4],[0,0],[1,2]]");
  is_int(grace_tensor_version(d), v0 + 1, "index_copy_ bumps the version once");

  /* dim -1 into a transposed view of a [3,2] zeros tensor, int64 src converted to float32 */
  grace_tensor *base = T(vm0, GRACE_FLOAT32, 2, SZ(3, 2), VALS(0, 0, 0, 0, 0, 0)), *view = transpose(vm0, base); /* [2,3] */
  grace_tensor *i1 = T(vm0, GRACE_INT32, 1, SZ(1), VALS(1)), *s64 = T(vm0, GRACE_INT64, 2, SZ(2, 1), VALS(5, 6));
  uint64_t bv0 = grace_tensor_version(base);
  ok(grace_run(vm0, GRACE_OP_INDEX_COPY_, 3, (grace_tensor *[]){view, i1, s64}, &(grace_attrs){.ndims = 1, .dims = {-1}}, 0,
               NULL) == GRACE_OK, "index_copy_ into a transposed view runs");
  grace_tensor_read(vm0, base, GRACE_FLOAT64, got);   /* view[r][1] = base[1][r] */
  ok(got[0] == 0 && got[1] == 0 && got[2] == 5 && got[3] == 6 && got[4] == 0 && got[5] == 0,
     "index_copy_ through a view writes the base: [[0,0],[5,6],[0,0]]");
  ok(grace_tensor_version(base) == bv0 + 1, "the version is shared with the base");

  /* index base 1 */
  grace_tensor *d1 = T(vm1, GRACE_FLOAT32, 1, SZ(4), VALS(0, 0, 0, 0)), *ix1 = T(vm1, GRACE_INT64, 1, SZ(2), VALS(4, 1));
  grace_tensor *sv = T(vm1, GRACE_FLOAT32, 1, SZ(2), VALS(7, 8));
  ok(grace_run(vm1, GRACE_OP_INDEX_COPY_, 3, (grace_tensor *[]){d1, ix1, sv}, NULL, 0, NULL) == GRACE_OK,
     "index_copy_ with index base 1 runs");
  grace_tensor_read(vm1, d1, GRACE_FLOAT64, got);
  ok(got[0] == 8 && got[1] == 0 && got[2] == 0 && got[3] == 7, "index base 1: [4,1] writes positions 4 and 1");

  /* errors change nothing */
  grace_tensor *bad = T(vm0, GRACE_INT64, 1, SZ(2), VALS(0, 3)), *bad1 = T(vm1, GRACE_INT64, 1, SZ(2), VALS(0, 1));
  uint64_t dv = grace_tensor_version(d);
  expect_err(vm0, "index_copy_ index 3 of size 3", GRACE_OP_INDEX_COPY_, 3, (grace_tensor *[]){d, bad, src},
             (grace_attrs){0}, GRACE_EINDEX, "index_copy_: index 3 out of range for dim 0 of size 3");
  expect_err(vm1, "index_copy_ index 0 with base 1", GRACE_OP_INDEX_COPY_, 3, (grace_tensor *[]){d1, bad1, sv},
             (grace_attrs){0}, GRACE_EINDEX, "index_copy_: index 0 out of range for dim 1 of size 4");
  grace_tensor_read(vm0, d, GRACE_FLOAT64, got);
  ok(grace_tensor_version(d) == dv && got[0] == 3 && got[1] == 4 && got[4] == 1,
     "a failed index_copy_ writes nothing and keeps the version");
  grace_tensor *s3 = T(vm0, GRACE_FLOAT32, 2, SZ(2, 3), VALS(1, 2, 3, 4, 5, 6)), *fi = T(vm0, GRACE_FLOAT64, 1, SZ(2), VALS(0, 1));
  expect_err(vm0, "index_copy_ src of the wrong shape", GRACE_OP_INDEX_COPY_, 3, (grace_tensor *[]){d, idx, s3},
             (grace_attrs){0}, GRACE_ESHAPE, "source of shape [2, 3] does not fit destination [3, 2] with 2 indices in dim 0");
  expect_err(vm0, "index_copy_ float index", GRACE_OP_INDEX_COPY_, 3, (grace_tensor *[]){d, fi, src}, (grace_attrs){0},
             GRACE_EDTYPE, "index must be int64 or int32, got float64");
  release_all((grace_tensor *[]){d, idx, src, base, view, i1, s64, d1, ix1, sv, bad, bad1, s3, fi}, 14);
}

int main(void) {
  char err[256];
  vm0 = grace_vm_new(&(grace_config){.device = "cpu", .index_base = 0}, err, sizeof err);
  vm1 = grace_vm_new(&(grace_config){.device = "cpu", .index_base = 1}, err, sizeof err);
  if (!vm0 || !vm1) { printf("Bail out! %s\n", err); return 1; }
  test_cat();
  test_stack();
  test_index_select();
  test_gather_scatter();
  test_tri_repeat();
  test_embedding();
  test_index_copy();
  grace_vm_free(vm0);
  grace_vm_free(vm1);
  return tap_done();
}
