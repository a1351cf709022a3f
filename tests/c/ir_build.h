/* ir_build.h: the C tests' IR builder. Every call appends to one program; the first failed call makes the builder
 * sticky (later calls do nothing and return -1, `err` stays set, the message is printed once as a TAP comment
 * unless `quiet`), so a test builds a whole program and checks once. */
#ifndef GRACE_TEST_IR_BUILD_H
#define GRACE_TEST_IR_BUILD_H

#include <stdio.h>
#include "grace.h"

typedef struct ir_build {
  grace_vm *vm;
  grace_ir *ir;          /* the program being built (irb_begin frees the previous one) */
  grace_device dev;      /* device of its inputs */
  int err;
  int quiet;             /* failures are expected (a dtype an op refuses): no comment */
} ir_build;

static inline int irb_fail(ir_build *b, grace_status st) {
  if (st == GRACE_OK) return 0;
  if (!b->err && !b->quiet) printf("# build: %s\n", grace_last_error(b->vm));
  b->err = 1;
  return 1;
}

static inline void irb_begin(ir_build *b, const char *name) {
  grace_ir_free(b->ir);
  b->ir = grace_ir_new(b->vm, name);
  b->err = b->ir == NULL;
}

static inline grace_value irb_input(ir_build *b, grace_dtype dt, int ndim, const int64_t *sizes) {
  grace_value v = -1;
  if (!b->err) irb_fail(b, grace_ir_input(b->ir, dt, b->dev, ndim, sizes, &v));
  return v;
}

static inline grace_value irb_lit(ir_build *b, double x, int is_int) {
  grace_value v = -1;
  if (!b->err) irb_fail(b, grace_ir_literal(b->ir, x, is_int, &v));
  return v;
}

static inline grace_value irb_const(ir_build *b, grace_tensor *t) {
  grace_value v = -1;
  if (!b->err) irb_fail(b, grace_ir_const(b->ir, t, &v));
  return v;
}

/* An op of n inputs (up to 3) and nout results (up to 2): the first result, the second in *second. */
static inline grace_value irb_op(ir_build *b, grace_op op, int n, grace_value x, grace_value y, grace_value z,
                                 const grace_attrs *at, int nout, grace_value *second) {
  grace_value in[3] = {x, y, z}, v[2] = {-1, -1};
  if (!b->err) irb_fail(b, grace_ir_op(b->ir, op, n, in, at, nout, v));
  if (second) *second = v[1];
  return v[0];
}

static inline void irb_output(ir_build *b, grace_value v) {
  if (!b->err) irb_fail(b, grace_ir_output(b->ir, v));
}

#endif
