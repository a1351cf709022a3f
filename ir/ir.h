/* ir.h: grace's SSA IR: typed values (dtype, shape with optional symbolic sizes, device), instructions
 * drawn from the op table (include/grace_ops.h) plus a few IR-only ops, function inputs of several kinds,
 * outputs, and source locations. Builder in ir.c, type inference in ir_infer.c, verifier in ir_verify.c,
 * text form (printed and parsed) in ir_text.c. The IR knows nothing of Lua or of how it is executed. */
#ifndef GRACE_IR_H
#define GRACE_IR_H

#include <stdint.h>
#include "grace.h"

/* IR-only ops, numbered after the tensor ops: _(NAME, text name) */
#define IR_EXTRA_OPS(_) \
  _(INPUT,   "input")    /* a per-call tensor input */ \
  _(CONST,   "const")    /* a captured tensor (weights): identity and version guarded */ \
  _(SCALAR,  "scalar")   /* a dynamic scalar input: a 0-d value written before each run */ \
  _(LITERAL, "literal")  /* a number fixed at trace time, typed as a wrapped number */ \
  _(COND,    "cond")     /* region: inputs (pred, args...), runs sub-program then(args) or else(args) */ \
  _(WHILE,   "while")    /* region: inputs (state..., invariants...), sub-programs cond and body; attrs.i0 max_iters */

enum {
  IR_OP_FIRST_EXTRA = GRACE_NOPS,
#define IR_OP_ENUM(e, name) IR_OP_##e,
  IR_OP_BEFORE_INPUT = GRACE_NOPS - 1,
  IR_EXTRA_OPS(IR_OP_ENUM)
#undef IR_OP_ENUM
  IR_NOPS
};

typedef struct ir_type {
  grace_dtype dtype;
  grace_device device;
  int ndim;
  int wrapped;                         /* a literal number: lowest tier of type promotion */
  int64_t sizes[GRACE_MAX_DIMS];       /* static size, or the hint of a symbolic one */
  int32_t sym[GRACE_MAX_DIMS];         /* 0: static; k > 0: symbolic size s<k> */
} ir_type;

typedef struct ir_inst {
  int op;                              /* grace_op or IR_OP_* */
  int nin, nout;
  int32_t first_arg;                   /* into ir->args */
  int32_t first_result;                /* value id of result 0; results are consecutive */
  grace_attrs attrs;
  double literal;                      /* IR_OP_LITERAL */
  int64_t iliteral;                    /* IR_OP_LITERAL of type i64: the exact value */
  int32_t input_index;                 /* IR_OP_INPUT / CONST / SCALAR: position among inputs of its kind */
  int32_t loc;                         /* index into ir->locs, -1 none */
  int32_t sub;                         /* IR_OP_COND / WHILE: its two sub-programs are ir->subs[sub], [sub + 1] */
} ir_inst;

typedef struct ir_value {
  ir_type type;
  int32_t inst;
  int32_t result;                      /* which result of inst */
  int32_t root;                        /* an updated version of this input or capture (in-place), or -1 */
  int32_t nwrites;                     /* the in-place writes to root that this version stands for */
} ir_value;

typedef struct ir_write {
  int32_t target;                      /* an input or const value */
  int32_t value;                       /* its new contents */
  int32_t bumps;                       /* in-place writes it stands for: the version advances by as many */
} ir_write;

/* A graph break: after instruction `after` (-1: before the first) the host read a value; the
 * instructions between two breaks form one partition. */
typedef struct ir_break {
  int32_t after;
  int32_t loc;
  /* what the host did with what it read there (vm/vm_auto.c): IR_BRK_READ nothing grace knows; IR_BRK_PRED one value
   * (`value`) compared with k (cmp, a grace_cmp) deciding a branch, this path taking `taken`; IR_BRK_WHY a read that
   * cannot become a predicate, why (an index into locs) says how */
  int8_t kind, cmp, taken;
  /* IR_BRK_PRED: what the host code does on the outcome this path did not take (grace_trace_branch_ahead): 0 not
   * said, 1 only an early return (that path may be recorded ahead), 2 more: ahead_why (an index into locs) says what */
  int8_t ahead;
  int32_t nread;                       /* host reads at this point */
  int32_t value, why, ahead_why;
  double k;
} ir_break;
enum { IR_BRK_READ, IR_BRK_PRED, IR_BRK_WHY };

typedef struct ir_const {
  grace_tensor *t;
  uint64_t version;                    /* when captured: a run with another version is stale */
  int local;                           /* made from host data during the trace: no outside identity to guard */
} ir_const;

struct grace_ir {
  grace_vm *vm;
  char name[64];
  ir_inst *insts; int ninst, cap_inst;
  ir_value *vals; int nval, cap_val;
  int32_t *args; int narg, cap_arg;
  int32_t *outputs; int nout, cap_out;
  ir_write *writes; int nwrite, cap_write;
  ir_break *breaks; int nbreak, cap_break;
  ir_const *consts; int nconst, cap_const;       /* captured tensors (NULL until bound after a parse) */
  char **locs; int nloc, cap_loc;
  grace_ir **subs; int nsub, cap_sub;             /* sub-programs of region instructions, owned (ir_region.c) */
  /* set while a sub-program runs inside a CUDA graph capture (gpu/gpu_cond.c): an input declared as a 0-d CPU value
   * (a host number) may then arrive as a 0-d device value, the enclosing program having moved it into the graph's
   * argument table (the device's runners read either) */
  int host_numbers_lifted;
  int32_t cur_loc;
  int ninputs, nscalars;
  struct ir_sym *syms; int nsyms, cap_sym;       /* symbolic sizes s1..s<nsyms> (ir_sym.h) */
  char *text; size_t text_len;                    /* last printed form */
  /* the interpreter's plan (cpu/cpu_interp.c), made on the first run: per instruction, -1 runs alone; >= 0 is
   * part of the fused group run at that instruction; <= -2 runs the group whose member list starts at
   * plan_members[-2 - plan[k]] (a count, then the members) */
  int32_t *plan, *plan_members;
  int nplan_members, planned;
  /* per instruction (ir_exec.c, made on the first run; ndirect the instruction count it was made for): 1 where an
   * in-place op writes the input or capture itself instead of an updated copy */
  int8_t *direct;
  int ndirect;
  /* what an executor derived from this IR (generated kernels, launch plans), freed with the IR; the IR only
   * calls exec_free, so it stays independent of any backend */
  void *exec;
  void (*exec_free)(grace_ir *ir);
};

const char *ir_op_name(int op);
int ir_op_from_name(const char *name);
/* Number of results an instruction of op has in the IR: INPLACE ops give the updated tensor (functional form). */
int ir_op_results(int op, const grace_attrs *a);
/* Same attributes, field by field (a struct compare would see padding). */
int ir_attrs_equal(const grace_attrs *x, const grace_attrs *y);
/* Same dtype, device and sizes (and the wrapped-number tier when with_wrapped). */
int ir_type_equal(const ir_type *a, const ir_type *b, int with_wrapped);
/* The elements of a value of type t (its static sizes). */
int64_t ir_type_numel(const ir_type *t);
/* The value that v is a chain of views of (v itself when it is no view; v when negative). */
int32_t ir_view_base(const grace_ir *ir, int32_t v);
/* The value of tensor input #index of ir (-1: not declared). */
int32_t ir_input_value(const grace_ir *ir, int index);

/* Records a break after the last instruction (at the current location); a second read at the same point counts in
 * the same break. */
grace_status ir_add_break(grace_ir *ir);
/* s kept in ir's string table (where locations live); its index, or -1 (out of memory). */
int32_t ir_intern(grace_ir *ir, const char *s);
/* cmp's text name ("gt"), or NULL. */
const char *ir_cmp_name(int cmp);

/* ---- merging two recorded paths at a branch (ir_merge.c) ---- */
/* Paths t and e of one function, alike up to break b (the same ops from the inputs on), where the host branched on
 * `value cmp k` (t took the true side, e the false one), each running to its end with no further break: one
 * program computing the predicate on the device and a cond region whose branches are the two paths' rests. tout and
 * eout (nout values each) are what each path returns. On success *out is the new program; otherwise why (n bytes)
 * says what keeps them apart, and the VM's error is untouched (GRACE_EUNSUPPORTED), or an error (out of memory). */
grace_status ir_merge(grace_ir *t, grace_ir *e, int b, int nout, const int32_t *tout, const int32_t *eout, grace_ir **out,
                      char *why, size_t n);
/* Appends an instruction with given result types (no inference); returns the first result id or -1. */
int32_t ir_append(grace_ir *ir, int op, int nin, const int32_t *in, const grace_attrs *a, int nout,
                  const ir_type *types);
/* Infers result types of op over input types (errors in ir->vm, as eager would give them). */
grace_status ir_infer(grace_vm *vm, int op, int nin, const ir_type *const *in, const grace_attrs *a, int nout,
                      ir_type *out);
const char *ir_type_str(const ir_type *t, char *buf, size_t n);

/* ---- regions (ir_region.c): instructions that own sub-programs, the base of data-dependent control flow. A
 * sub-program is a whole grace_ir that captures nothing: what it reads from outside is one of its inputs, so it
 * can be verified, optimized, fused and run on its own. ---- */
static inline int ir_is_region(int op) { return op == IR_OP_COND || op == IR_OP_WHILE; }
/* Whether ir holds a region instruction (at its top level). */
int ir_has_region(const grace_ir *ir);
/* Appends sub to ir->subs (ir owns it from then on); its index, or -1 (out of memory, message set). */
int32_t ir_add_sub(grace_ir *ir, grace_ir *sub);
/* The checks of region instruction i (the verifier's part for it, sub-programs verified recursively). */
grace_status ir_region_verify(grace_ir *ir, int i);
/* A deep copy of sub-program s (its own regions copied too), or NULL with the message set. */
grace_ir *ir_clone(grace_ir *s);
/* Whether region i's sub-programs draw random numbers (dce keeps them: each draw advances the generator). */
int ir_region_random(const grace_ir *ir, int i);
/* Whether instruction i draws random numbers: a draw op, or a region whose sub-programs draw (running it twice
 * would advance the generator twice). */
int ir_inst_random(const grace_ir *ir, int i);
const char *ir_dtype_short(grace_dtype dt);     /* "f32" */
int ir_dtype_from_short(const char *s, grace_dtype *dt);

#endif
