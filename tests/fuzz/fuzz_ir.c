/* fuzz_ir.c: the IR's text form from untrusted bytes: grace_ir_parse (which verifies), the printed text parsed
 * again and printed the same, the default passes (each output verified), and a run of the parsed and the optimized
 * program on the CPU interpreter with inputs of the declared types (captured tensors bound first). Programs too big
 * to run quickly (a value of more than 2^16 elements, a loop without a small iteration bound) are parsed and
 * optimized but not run. */
#include "fuzz.h"
#include "ir/ir.h"

#define MAX_RUN_NUMEL (1 << 16)
#define MAX_IO 64

/* Whether every value is small and every loop (nested ones too) has a small max_iters. */
static int runnable(const grace_ir *ir, int depth) {
  if (depth > 8) return 0;
  for (int v = 0; v < ir->nval; v++) {
    int64_t n = ir_type_numel(&ir->vals[v].type);
    if (n < 0 || n > MAX_RUN_NUMEL) return 0;
  }
  for (int k = 0; k < ir->ninst; k++)
    if (ir->insts[k].op == IR_OP_WHILE && (ir->insts[k].attrs.i0 <= 0 || ir->insts[k].attrs.i0 > 64)) return 0;
  for (int s = 0; s < ir->nsub; s++)
    if (!runnable(ir->subs[s], depth + 1)) return 0;
  return 1;
}

/* A tensor of type ty with small deterministic elements (seeded by k). */
static grace_status make(grace_vm *vm, const ir_type *ty, int k, grace_tensor **out) {
  int64_t n = ir_type_numel(ty);
  double *v = malloc(sizeof *v * (size_t)(n > 0 ? n : 1));
  if (!v) return GRACE_ENOMEM;
  for (int64_t i = 0; i < n; i++) v[i] = (double)((i * 7 + k * 3) % 11) - 5;
  grace_status st = grace_tensor_from_data(vm, ty->dtype, ty->ndim, ty->sizes, GRACE_FLOAT64, v, out);
  free(v);
  return st;
}

static void run(grace_vm *vm, grace_ir *ir, const char *what) {
  int nin = ir->ninputs + ir->nscalars, nout = ir->nout;
  if (nin > MAX_IO || nout > MAX_IO) return;
  grace_tensor *in[MAX_IO] = {0}, *out[MAX_IO] = {0};
  grace_status st = GRACE_OK;
  for (int k = 0; k < ir->ninst && st == GRACE_OK; k++) {
    const ir_inst *i = &ir->insts[k];
    const ir_type *ty = &ir->vals[i->first_result].type;
    if (i->op == IR_OP_INPUT || i->op == IR_OP_SCALAR) {
      int slot = i->op == IR_OP_INPUT ? i->input_index : ir->ninputs + i->input_index;
      if (slot < 0 || slot >= nin || in[slot]) { fprintf(stderr, "fuzz: input slot %d\n", slot); abort(); }
      st = make(vm, ty, k, &in[slot]);
    } else if (i->op == IR_OP_CONST && !grace_ir_const_tensor(ir, i->input_index)) {
      grace_tensor *t = NULL;
      st = make(vm, ty, k, &t);
      if (st == GRACE_OK) st = grace_ir_bind_const(ir, i->input_index, t);
      grace_tensor_release(t);
    }
  }
  if (st == GRACE_OK) {
    st = grace_ir_run(ir, nin, in, nout, out);
    fuzz_status(vm, st, what);
    for (int k = 0; k < nout && st == GRACE_OK; k++) fuzz_touch(vm, out[k]);
  } else {
    fuzz_status(vm, st, "making inputs");
  }
  for (int k = 0; k < MAX_IO; k++) { grace_tensor_release(in[k]); grace_tensor_release(out[k]); }
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size) {
  if (size > 8192) return 0;
  char *text = malloc(size + 1);
  if (!text) return 0;
  memcpy(text, data, size);
  text[size] = 0;
  grace_vm *vm = fuzz_vm(0);
  grace_ir *ir = NULL, *again = NULL, *opt = NULL;
  grace_status st = grace_ir_parse(vm, text, &ir);
  fuzz_status(vm, st, "grace_ir_parse");
  if (st == GRACE_OK) {
    /* printing then parsing gives the same program */
    const char *t1 = grace_ir_text(ir);
    if (!t1) { fprintf(stderr, "fuzz: no text for a parsed IR\n"); abort(); }
    char *copy = strdup(t1);
    st = grace_ir_parse(vm, copy, &again);
    if (st != GRACE_OK) { fprintf(stderr, "fuzz: the printed IR does not parse: %s\n%s", grace_last_error(vm), copy); abort(); }
    const char *t2 = grace_ir_text(again);
    if (!t2 || strcmp(copy, t2)) { fprintf(stderr, "fuzz: printed twice differently:\n%s---\n%s", copy, t2 ? t2 : ""); abort(); }
    free(copy);
    st = grace_ir_pass(ir, "default", &opt);
    fuzz_status(vm, st, "grace_ir_pass");
    if (runnable(ir, 0)) {
      run(vm, ir, "grace_ir_run");
      if (opt && runnable(opt, 0)) run(vm, opt, "grace_ir_run (optimized)");
    }
  }
  grace_ir_free(ir);
  grace_ir_free(again);
  grace_ir_free(opt);
  free(text);
  fuzz_vm_done(vm);
  return 0;
}
