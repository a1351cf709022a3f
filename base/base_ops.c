/* base_ops.c: the op table's derived facts (names, kinds, arity, optional inputs), for every layer. */
#include "base/base.h"

static const struct { const char *name; grace_opkind kind; int nin, nout; } op_info[] = {
#define OP_INFO(e, name, kind, nin, nout) {name, GRACE_KIND_##kind, nin, nout},
  GRACE_OPS(OP_INFO)
#undef OP_INFO
};

const char *grace_op_name(grace_op op) { return (unsigned)op < GRACE_NOPS ? op_info[op].name : "?"; }
grace_opkind grace_op_kind(grace_op op) { return op_info[op].kind; }
int grace_op_ninputs(grace_op op) { return op_info[op].nin; }
int grace_op_noutputs(grace_op op) { return op_info[op].nout; }

grace_status grace_op_from_name(const char *name, grace_op *out) {
  if (!name || !out) return GRACE_EARG;
  for (int i = 0; i < GRACE_NOPS; i++)
    if (!strcmp(op_info[i].name, name)) { *out = (grace_op)i; return GRACE_OK; }
  return GRACE_EARG;
}

int grace_op_input_optional(grace_op op, int i) {
  return (op == GRACE_OP_LAYER_NORM && i >= 1) || (op == GRACE_OP_RMS_NORM && i == 1) ||
         (op == GRACE_OP_ATTENTION && i >= 3);
}
