/* cg_fused_int.h: what the two halves of the fused-kernel generator share (cg_fused.c: analysis, plan,
 * expressions, POINTWISE kernels; cg_fused_row.c: ROW kernels). Not part of the codegen interface (cg_fused.h). */
#ifndef GRACE_CG_FUSED_INT_H
#define GRACE_CG_FUSED_INT_H
#include "codegen/cg_fused.h"

enum { SP_NONE = 0, SP_FULL = 1, SP_ROW = 2 };

/* The analysis of one group shared by plan and generate. */
typedef struct grp {
  grace_vm *vm;
  const grace_ir *ir;
  const ir_fusion *f;
  int g, n;
  const int32_t *mem;
  int row;
  const ir_type *dom, *red;   /* ROW: the reductions' input shape and first result shape */
  uint32_t dims;              /* ROW: reduced dims of dom */
  int keep;                   /* ROW: red has dom's rank */
  int64_t pdom[GRACE_MAX_DIMS];  /* POINTWISE: the broadcast iteration shape */
  int pnd;
  uint8_t *space;             /* per value */
  int32_t *level;             /* per value: reduction depth it depends on */
  int32_t *alias;             /* per value: the member value it stands for (views of reduction results) */
  int maxlevel;
} grp;

/* Expressions are built from register names and constants into fixed buffers far larger than any of them. */
typedef char cg_expr[768];

int cgf_op_kind(int op);
/* float32/float16/bfloat16 (computed in float registers); those or float64 */
int cgf_is_f(grace_dtype dt);
int cgf_is_fl(grace_dtype dt);
/* the register type of dt: float, double or long long */
const char *cgf_rtype(grace_dtype dt);
/* A register of dtype `from` as a register of dtype `to` (narrowed: wrapped, rounded, 0/1). */
void cgf_conv(cg_expr out, grace_dtype from, grace_dtype to, const char *x);
/* lv (an element of dtype dt in memory) as a register; a register as the element to store */
void cgf_load_expr(cg_expr out, grace_dtype dt, const char *lv);
void cgf_store_expr(cg_expr out, grace_dtype dt, const char *x);
/* The name (or constant) of argument a of a member, and its dtype. */
void cgf_operand(const grp *G, int32_t a, cg_expr out, grace_dtype *dt, const int32_t *ext, int next);
/* The parameter struct and the pointer prologue shared by both kinds. */
void cgf_emit_params(cg_buf *b, const grace_ir *ir, const cg_group_io *io, const cg_fused_spec *spec, int nwords);
/* Members of space sp (and level <= maxlvl) in program order. */
grace_status cgf_emit_members(cg_buf *b, const grp *G, const cg_group_io *io, int sp, int minlvl, int maxlvl);

/* cg_fused_row.c */
/* The 8-byte fields of all the group's reduction states (a split row's workspace holds them a chunk). */
int cgf_red_fields(const grp *G);
/* A ROW group's kernel into b. */
grace_status cgf_gen_row(cg_buf *b, const grp *G, const cg_group_io *io, const cg_fused_spec *spec);
#endif
