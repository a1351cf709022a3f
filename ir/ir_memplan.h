/* ir_memplan.h: the static memory plan of one IR function. Every intermediate tensor (a result that is not a
 * view, not returned, not an input) gets a fixed byte offset in one arena, so a CUDA graph can be captured
 * over fixed addresses and replayed without allocating. Values whose lifetimes overlap never share bytes,
 * except where an elementwise op writes its result over an input that dies at that op (in-place reuse).
 * grace_ir_memplan (grace.h) is the public form; this header gives the whole plan for passes and tests. */
#ifndef GRACE_IR_MEMPLAN_H
#define GRACE_IR_MEMPLAN_H

#include "ir/ir.h"

#define IR_MEMPLAN_ALIGN 256            /* slot alignment in bytes: what vectorized kernels and cuBLASLt want */

typedef struct ir_memplan {
  int nval, ninst;
  int64_t *offset;     /* per value: byte offset in the arena, -1 when not in it */
  int64_t *bytes;      /* per value: its slot's size (bytes rounded up to IR_MEMPLAN_ALIGN); 0 when not planned */
  int32_t *base;       /* per value: the value owning its storage (itself unless it is a view) */
  int32_t *start;      /* per planned value: the instruction defining it */
  int32_t *end;        /* per planned value: its last use, views' uses included, inclusive; ninst: a write at the end */
  int32_t *reuse;      /* per value: the dying input whose slot it takes in place, -1 none */
  int64_t arena_bytes;     /* what the placement needs */
  int64_t peak_live_bytes; /* max over instructions of the slot bytes live there: no placement needs less */
  int nplanned;            /* values in the arena */
  int nreused;             /* of those, how many took an input's slot */
  int noutside;            /* results (views excluded) allocated outside the arena: outputs and their bases */
  void *block;             /* the one allocation behind the arrays */
  size_t block_size;
} ir_memplan;

/* Plans ir into *p (zeroed first). On failure the VM has the message and *p holds nothing to free. */
grace_status ir_memplan_build(grace_ir *ir, ir_memplan *p);
void ir_memplan_free(grace_vm *vm, ir_memplan *p);
/* A few human-readable lines: arena bytes, peak live bytes, values planned, reused in place. */
void ir_memplan_report(const grace_ir *ir, const ir_memplan *p, char *buf, size_t n);

#endif
