/* vm_place.c: placement rewrites of a compiled function's program (DESIGN: "Placement moves work"). A host tensor
 * with dims that the program only moves to the device (`x:cuda()` of an argument, `w:cuda()` of a captured tensor)
 * would be a synchronous copy inside the program, which no CUDA graph can hold. Instead:
 *   - an argument becomes a device input of the program, copied ahead of it on every call through page-locked
 *     staging memory and an asynchronous copy on the stream (gpu/gpu_stage.c);
 *   - a captured tensor becomes a device constant, made once, and made again when the tensor's version changes.
 * The moves `to` made are forwarded to the value itself and dropped. Host work between two device ops (a device
 * value copied to the host, ops on it there, the result copied back: `x:cpu()`, `:exp()`, `:cuda()`) runs on the
 * device instead where the device has the ops (ir_place_round_trips; also host work a device op reads as a number):
 * no copy either way, no synchronize. Each decision, and why a round trip stays, is said in explain and under
 * GRACE_LOG=placement; a function with graph breaks gets them said of its first path (vm/vm_part.c moves the round
 * trips inside each partition's program).
 * Host numbers (0-d host tensors) are left alone: they are argument-table words already. */
#include <stdio.h>
#include "ir/ir_place.h"
#include "vm/vm_fn.h"
#include "vm/vm_trace.h"
#include "gpu/gpu_exec.h"

struct fn_moves {
  unsigned char staged[FN_MAXARGS];     /* per tensor input of the program: copied to the device ahead of it */
  int nstaged;
  grace_tensor *src[FN_MAXARGS], *dev[FN_MAXARGS];   /* captured host tensors and their device constants */
  uint64_t ver[FN_MAXARGS];             /* src's version when dev was made */
  int ncst;
  long remakes;
  gpu_stage *stage;
  char text[1024];                      /* the decisions, one per line */
};

void fn_moves_free(grace_vm *vm, fn_moves *m) {
  if (!m) return;
  for (int k = 0; k < m->ncst; k++) { grace_tensor_release(m->src[k]); grace_tensor_release(m->dev[k]); }
  gpu_stage_free(vm, m->stage);
  grace_realloc(vm, m, sizeof *m, 0);
}

const char *fn_moves_text(const fn_moves *m) { return m ? m->text : ""; }
size_t fn_moves_bytes(const fn_moves *m) { return m ? gpu_stage_bytes(m->stage) : 0; }

/* Whether every use of host value v is a move to the CUDA device keeping its dtype, none of whose results is
 * returned or written (a returned move is a fresh tensor per call; sharing a constant would not be). */
static int only_moved(const grace_ir *ir, int32_t v) {
  int uses = 0;
  for (int i = 0; i < ir->ninst; i++) {
    const ir_inst *k = &ir->insts[i];
    for (int a = 0; a < k->nin; a++) {
      if (ir->args[k->first_arg + a] != v) continue;
      if (k->op != GRACE_OP_TO_DEVICE || k->attrs.device != GRACE_CUDA ||
          ir->vals[k->first_result].type.dtype != ir->vals[v].type.dtype)
        return 0;
      for (int o = 0; o < ir->nout; o++) if (ir->outputs[o] == k->first_result) return 0;
      uses++;
    }
  }
  for (int o = 0; o < ir->nout; o++) if (ir->outputs[o] == v) return 0;
  for (int w = 0; w < ir->nwrite; w++) if (ir->writes[w].target == v || ir->writes[w].value == v) return 0;
  return uses > 0;
}

/* Uses of each move of v become uses of v (now a device value). */
static void forward(grace_ir *ir, int32_t v) {
  for (int i = 0; i < ir->ninst; i++) {
    const ir_inst *k = &ir->insts[i];
    if (k->op != GRACE_OP_TO_DEVICE || ir->args[k->first_arg] != v) continue;
    int32_t u = k->first_result;
    for (int j = 0; j < ir->narg; j++) if (ir->args[j] == u) ir->args[j] = v;
    for (int w = 0; w < ir->nwrite; w++) if (ir->writes[w].value == u) ir->writes[w].value = v;
  }
}

static void say(fn_moves *m, const grace_ir *ir, int inst, const char *fmt, const char *what, size_t bytes) {
  size_t n = strlen(m->text);
  const ir_inst *k = &ir->insts[inst];
  char t[160];
  ir_type_str(&ir->vals[k->first_result].type, t, sizeof t);
  n += (size_t)snprintf(m->text + n, sizeof m->text - n, fmt, what, k->input_index + ir->vm->index_base, t, bytes);
  if (n < sizeof m->text)
    snprintf(m->text + n, sizeof m->text - n, "%s%s\n", k->loc >= 0 ? "; at " : "", k->loc >= 0 ? ir->locs[k->loc] : "");
}

/* e's moves, made the first time (NULL with the error set: out of memory). */
static fn_moves *moves_of(grace_vm *vm, fn_entry *e) {
  if (e->moves) return e->moves;
  fn_moves *m = grace_realloc(vm, NULL, 0, sizeof *m);
  if (!m) { grace_set_error(vm, GRACE_ENOMEM, "compile: out of host memory"); return NULL; }
  memset(m, 0, sizeof *m);
  return e->moves = m;
}

/* The round trips of ir (moved with rewrite, else only why they stay), said in e's decisions; how many moved. */
static int round_trips(grace_vm *vm, fn_entry *e, grace_ir *ir, int rewrite) {
  char text[sizeof e->moves->text];
  text[0] = 0;
  int moved = ir_place_round_trips(ir, rewrite, text, sizeof text);
  fn_moves *m = text[0] ? moves_of(vm, e) : NULL;
  if (m) snprintf(m->text + strlen(m->text), sizeof m->text - strlen(m->text), "%s", text);
  return rewrite ? moved : 0;
}

void fn_place_explain(grace_vm *vm, fn_entry *e) {
  if (vm->cuda && e->ntree && !e->ir) round_trips(vm, e, e->tree[0], 0);
}

grace_status fn_place_rewrite(grace_vm *vm, fn_entry *e) {
  grace_ir *ir = e->ir;
  if (!ir || ir->nsub || !vm->cuda) return GRACE_OK;
  if (e->moves && !e->moves->nstaged && !e->moves->ncst) e->moves->text[0] = 0;   /* said of the paths merged into ir */
  int trips = round_trips(vm, e, ir, 1);
  fn_moves *m = e->moves;
  grace_status st = GRACE_OK;
  for (int i = 0; i < ir->ninst && st == GRACE_OK; i++) {
    const ir_inst *k = &ir->insts[i];
    int32_t v = k->first_result;
    ir_type *ty = &ir->vals[v].type;
    int input = k->op == IR_OP_INPUT, cst = k->op == IR_OP_CONST && !ir->consts[k->input_index].local;
    if ((!input && !cst) || ty->device != GRACE_CPU || ty->ndim == 0 || !only_moved(ir, v)) continue;
    if (input && k->input_index >= FN_MAXARGS) continue;
    if (!(m = moves_of(vm, e))) return vm->status;
    size_t bytes = (size_t)ir_type_numel(ty) * grace_dtype_size(ty->dtype);
    if (input) {
      if (!m->stage && !(m->stage = gpu_stage_new(vm))) return grace_set_error(vm, GRACE_ENOMEM, "compile: out of host memory");
      m->staged[k->input_index] = 1;
      m->nstaged++;
      say(m, ir, i, "%s #%d (%s) -> staged: copied to the device ahead of the program every call (page-locked buffer, "
          "asynchronous copy on the stream), %zu bytes per call, so the program can be a CUDA graph", "input", bytes);
    } else {
      if (m->ncst >= FN_MAXARGS) continue;
      grace_tensor *src = ir->consts[k->input_index].t, *dev = NULL;
      if ((st = vm_route(vm, GRACE_OP_TO_DEVICE, 1, &src, &(grace_attrs){.device = GRACE_CUDA}, 1, &dev)) != GRACE_OK) break;
      grace_tensor_retain(src);
      m->src[m->ncst] = src;
      m->dev[m->ncst] = dev;
      m->ver[m->ncst++] = grace_tensor_version(src);
      if ((st = grace_ir_bind_const(ir, k->input_index, dev)) != GRACE_OK) break;
      say(m, ir, i, "%s #%d (%s) -> device constant: copied to the device once (%zu bytes), again only when the tensor "
          "changes", "captured", bytes);
    }
    ty->device = GRACE_CUDA;
    forward(ir, v);
  }
  if (st != GRACE_OK || ((!m || (!m->nstaged && !m->ncst)) && !trips)) return st;
  grace_ir *opt = NULL;   /* the moves no one reads now go */
  if ((st = grace_ir_pass(ir, "dce", &opt)) != GRACE_OK) return st;
  grace_ir_free(e->ir);
  e->ir = opt;
  return grace_ir_verify(opt);
}

/* A captured tensor moved to the device that was written since: its device constant is written again, in place,
 * after the work already on the stream: a CUDA graph holds the constant's address, so it must stay the same. */
static grace_status refresh(grace_vm *vm, fn_entry *e) {
  fn_moves *m = e->moves;
  for (int c = 0; c < m->ncst; c++) {
    if (grace_tensor_version(m->src[c]) == m->ver[c]) continue;
    grace_tensor *dev = NULL;
    grace_status st = vm_route(vm, GRACE_OP_TO_DEVICE, 1, &m->src[c], &(grace_attrs){.device = GRACE_CUDA}, 1, &dev);
    if (st == GRACE_OK)
      st = vm_route(vm, GRACE_OP_COPY_, 2, (grace_tensor *[]){m->dev[c], dev}, &(grace_attrs){0}, 0, NULL);
    grace_tensor_release(dev);
    for (int k = 0; k < e->ir->nconst && st == GRACE_OK; k++)   /* the program takes the constant's new version */
      if (e->ir->consts[k].t == m->dev[c]) st = grace_ir_bind_const(e->ir, k, m->dev[c]);
    if (st != GRACE_OK) return st;
    m->ver[c] = grace_tensor_version(m->src[c]);
    m->remakes++;
  }
  return GRACE_OK;
}

grace_status fn_place_inputs(grace_vm *vm, fn_entry *e, grace_tensor **in, grace_tensor **staged) {
  fn_moves *m = e->moves;
  for (int k = 0; k < e->ninput; k++) staged[k] = NULL;
  if (!m) return GRACE_OK;
  grace_status st = refresh(vm, e);
  for (int k = 0; k < e->ninput && st == GRACE_OK; k++) {
    if (!m->staged[k]) continue;
    if ((st = gpu_stage_to_device(vm, m->stage, in[k], &staged[k])) == GRACE_OK) in[k] = staged[k];
  }
  return st;
}
