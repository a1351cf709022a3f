/* ir_sym.h: symbolic sizes of an IR program. A symbol stands for a size that may change between calls: a free
 * symbol is bound from a dim of an input; a derived one is mul * s<base> + add (a cat adding one row, a flatten
 * doubling a dim). Symbols carry the guards a call must pass: a lower bound (sizes 0 and 1 are never symbolic,
 * since broadcasting and indexing treat them apart), relations between free symbols (s2 == s1, found where a
 * broadcast or a matmul needs two sizes equal), and pins (the size must be the traced one: a host read it, or an
 * op's attributes hold it). Inference on the traced sizes gives each result its sizes; ir_sym_settle then finds
 * which symbols they stand for by inferring again with the symbols moved (see ir_sym.c). */
#ifndef GRACE_IR_SYM_H
#define GRACE_IR_SYM_H

#include "ir/ir.h"

typedef struct ir_sym {
  int64_t hint;      /* the size when traced */
  int64_t min;       /* free symbols: a call's size must be at least this */
  int32_t base;      /* 0: free; k: the value is mul * s<k> + add */
  int64_t mul, add;
  int32_t same;      /* free symbols: a relation s == s<same> (0: none) */
  int32_t pinned;    /* free symbols: the size must equal the hint */
  char why[200];     /* what pinned it, and where */
} ir_sym;

/* A new free symbol of traced size hint (>= 2); its id (>= 1), or 0 without memory (message set). */
int32_t ir_sym_new(grace_ir *ir, int64_t hint);
/* The free symbol s<k> stands for, after relations and derivations ("s3 = s1 + 1": s1's root). */
int32_t ir_sym_root(const grace_ir *ir, int32_t k);
/* Pins the free symbol under s<k> to its hint, noting why and where (the current location). */
void ir_sym_pin(grace_ir *ir, int32_t k, const char *why);
/* Pins every symbol (a program that must run at its traced sizes). */
void ir_sym_pin_all(grace_ir *ir, const char *why);
/* Whether a value of ir has a symbolic size that is not pinned. */
int ir_sym_live(const grace_ir *ir);
/* Gives the result types of op (inferred on the traced sizes) their symbols; may add relations, bounds or pins. */
grace_status ir_sym_settle(grace_ir *ir, int op, int nin, const ir_type *const *in, const grace_attrs *a, int nout,
                           ir_type *res);
/* Copies src's symbols into dst (which has none). */
grace_status ir_sym_copy(grace_ir *dst, const grace_ir *src);
/* The value of s<k> given the values of the free symbols (vals[root]). */
int64_t ir_sym_value(const grace_ir *ir, int32_t k, const int64_t *vals);
/* Binds the free symbols from the inputs' sizes into vals[0..nsyms] (zeroed first), checking bounds, pins and
 * relations; an error names the input, the dim and what was expected. */
grace_status ir_sym_bind(const grace_ir *ir, int nin, grace_tensor *const *in, int64_t *vals);
/* A copy of ir with every symbol replaced by its value (vals as ir_sym_bind gives them): a program of fixed sizes
 * for executors that need them. The copy is verified, so a symbol whose expression is wrong at these sizes is an
 * error, never a wrong result. */
grace_status ir_sym_specialize(grace_ir *ir, const int64_t *vals, grace_ir **out);
/* "s3 = s1 + 1", "s1 >= 2 (traced 4)", "s2 == s1", "s4 = 8 (pinned: ...)". */
const char *ir_sym_str(const grace_ir *ir, int32_t k, char *buf, size_t n);

#endif
