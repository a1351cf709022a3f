/* ir_fuse.h: the fusion scheduler's grouping analysis (Inductor-style): which instructions of a verified IR
 * run together as one generated kernel. Views and inputs/captures/scalars/literals belong to no kernel (a
 * consumer indexes through them); every other instruction belongs to exactly one group. Codegen lowers one
 * group to one kernel; grace_ir_fuse_report (grace.h) prints the grouping. */
#ifndef GRACE_IR_FUSE_H
#define GRACE_IR_FUSE_H

#include "ir/ir.h"

/* What a group's kernel is built around. */
typedef enum ir_fuse_kind {
  IR_FUSE_POINTWISE,   /* one loop over a (broadcast) shape */
  IR_FUSE_ROW,         /* reductions over the same dims of one base shape, with pointwise prologue/epilogue */
  IR_FUSE_MATMUL,      /* a matmul (or several sharing the left input: horizontal) with a pointwise epilogue */
  IR_FUSE_SINGLE       /* an op lowered alone: move, scan, norm, creation, in-place */
} ir_fuse_kind;

typedef struct ir_fuse_group {
  ir_fuse_kind kind;
  int horizontal;      /* IR_FUSE_MATMUL holding more than one matmul */
  int partition;       /* breaks before its instructions */
  int first, n;        /* its instructions: members[first .. first+n), in program order */
} ir_fuse_group;

typedef struct ir_fusion {
  int ngroup;
  ir_fuse_group *groups;      /* in a topological order of the group graph */
  int32_t *members;           /* instruction indices, group after group */
  int32_t *inst_group;        /* per instruction: its group's position in groups, -1: free (view, input, ...) */
  int ninst;
} ir_fusion;

/* What a fused kernel can read of a value it computes itself: a thread holds in registers only the elements it is
 * at, so ir_fuse groups, and the generators lower, by these two rules. */
/* Whether view v keeps its base's element order (only reshape, view, squeeze and unsqueeze on its chain): the
 * element a thread holds of the base is then v's element of the same linear index. */
int ir_view_keeps_order(const grace_ir *ir, int32_t v);
/* Whether a per-row value of type t, broadcast over a row kernel's base shape dom whose dims `dims` (bits) are
 * reduced, gives every element its own row's value: t's dims line up with the kept ones (a keepdim=1 result always
 * does; a keepdim=0 one where the reduced dims lead, as a column mean of [n, c]). */
int ir_row_lines_up(const ir_type *t, const ir_type *dom, uint32_t dims);

/* The most distinct tensors a pointwise or row group reads from outside: a generated kernel takes CG_MAX_ARGS (32)
 * pointers, and what it stores needs some of them. */
enum { IR_FUSE_MAX_OPERANDS = 24 };

/* Layer norm (or RMS norm) as the prologue of the matmuls that read it: where a CUDA norm's result is only the
 * left operand of matmuls, its rows few (a decode step) and short enough, the decompose pass keeps it whole and
 * ir_fuse puts it into the matmul's group, whose GEMV recomputes each row's statistics and normalises the row as it
 * reads it (gpu/gpu_matmul.c); the norm's kernel is gone. Bounds: one row (every warp recomputes the statistics
 * of every row it reads, so the cost grows with the rows: at 8 rows the products took several times longer than
 * the norm's own kernel saves, bench/RESULTS.md), and the row length a warp reduces twice before the product
 * without a cost that shows. */
enum { IR_NORM_PROLOGUE_ROWS = 1, IR_NORM_PROLOGUE_K = 8192 };
/* Whether the prologue is on: grace_set_norm_prologue's choice, else $GRACE_NORM_PROLOGUE ("0" turns it off). */
int ir_norm_prologue_on(grace_vm *vm);
/* Whether instruction k of ir is such a norm (the switch on, its operands as the GEMV reads them). */
int ir_norm_feeds_matmul(const grace_ir *ir, int k);

/* Groups the instructions of ir (assumed verified). On failure nothing is left allocated. */
grace_status ir_fuse(grace_ir *ir, ir_fusion *out);
void ir_fuse_free(grace_ir *ir, ir_fusion *f);

#endif
