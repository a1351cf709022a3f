/* ir_pass.h: the pass framework. A pass reads one IR and builds a new one through a rewriter that maps
 * old values to new ones, so every pass is a small function and the input stays valid for comparison.
 * IR_PASSES is the list of passes, by name, in their default order. */
#ifndef GRACE_IR_PASS_H
#define GRACE_IR_PASS_H

#include "ir/ir.h"
#include "base/base.h"

typedef struct ir_rewriter {
  grace_ir *src, *dst;
  int32_t *map;          /* src value -> dst value (-1: not yet defined) */
  int nmap;
  int nbreak;            /* src breaks carried so far */
} ir_rewriter;

/* Starts dst as an empty IR of src's name. */
grace_status ir_rw_begin(ir_rewriter *rw, grace_ir *src);
/* The dst value for src value v (-1 for -1). */
static inline int32_t ir_rw_value(const ir_rewriter *rw, int32_t v) { return v < 0 ? -1 : rw->map[v]; }
/* Maps src value v to dst value to (a pass replacing v by something else). */
static inline void ir_rw_set(ir_rewriter *rw, int32_t v, int32_t to) { rw->map[v] = to; }
/* Copies src instruction k into dst with its inputs mapped (inputs, captures, scalars and literals keep
 * what they are); its results map to the copies. Breaks after k are carried over. */
grace_status ir_rw_copy(ir_rewriter *rw, int k);
/* Appends op over dst values with types inferred, at src instruction k's location (k < 0: none). */
grace_status ir_rw_op(ir_rewriter *rw, int k, grace_op op, int nin, const int32_t *in, const grace_attrs *a, int nout,
                      int32_t *out);
/* Appends a literal to dst, at src instruction k's place and location as ir_rw_op does (k < 0: none). */
grace_status ir_rw_literal(ir_rewriter *rw, int k, double v, int is_int, int64_t iv, int32_t *out);
/* Maps outputs and writes, verifies dst, and hands it over (*out owns it); on failure frees it. */
grace_status ir_rw_finish(ir_rewriter *rw, grace_ir **out);
void ir_rw_abort(ir_rewriter *rw);

/* Uses of each value (outputs and writes count), into uses[nval] (caller frees with grace_realloc). */
int32_t *ir_count_uses(grace_ir *ir);

typedef grace_status (*ir_pass_fn)(grace_ir *src, grace_ir **out);

/* _(name, function): the passes, in their default order. */
#define IR_PASSES(_) \
  _(attention, ir_pass_attention) \
  _(decompose, ir_pass_decompose) \
  _(fold, ir_pass_fold) \
  _(simplify, ir_pass_simplify) \
  _(cse, ir_pass_cse) \
  _(views, ir_pass_views) \
  _(hoist, ir_pass_hoist) \
  _(dce, ir_pass_dce)

#define IR_PASS_DECL(name, fn) grace_status fn(grace_ir *src, grace_ir **out);
IR_PASSES(IR_PASS_DECL)
#undef IR_PASS_DECL

#endif
