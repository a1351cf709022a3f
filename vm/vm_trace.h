/* vm_trace.h: the state shared by recording (vm_trace.c) and replaying (vm_replay.c) a traced function:
 * the map from tensors to IR values and, in replay, the recorded paths being matched. */
#ifndef GRACE_VM_TRACE_H
#define GRACE_VM_TRACE_H

#include "ir/ir.h"
#include "base/base.h"

/* v: the tensor's current value; STALE: a view whose storage was written since it was made, remade from
 * its parent when next used. parent/vop/va: how a view was made, to turn a write through it into an
 * update of its base, and to remake it. */
#define STALE (-2)
#define VM_SEEN 8
typedef struct vm_parts vm_parts;
typedef struct {
  grace_tensor *t;
  grace_value v;
  grace_tensor *parent;
  grace_op vop;
  grace_attrs va;
} trace_slot;


struct vm_trace {
  grace_ir *ir;                 /* the IR being recorded */
  int owns_ir;                  /* recorded after a replay diverged: handed to the host at the end */
  grace_where_fn where;
  void *where_ud;
  int paused;
  trace_slot *slots;            /* open addressing on the tensor pointer */
  int nslots, used;
  grace_value *root;            /* per value: the input/const value it updates, or -1 */
  int *bumps;                   /* per input/const value: in-place writes to it so far */
  int nroot;
  char *problems;
  size_t plen, pcap;
  int nproblems;
  int nsynthetic;               /* instructions added for writes through views (not calls the host made) */
  /* replay (vm_replay.c) */
  int replay;                   /* matching recorded paths; 0 once the call left them (then recording) */
  grace_ir *const *paths;
  int npaths;
  uint64_t alive;               /* paths still matching the calls made so far */
  int lead;                     /* one alive path; alive paths number the shared prefix alike */
  int cursor;                   /* next instruction of the prefix */
  grace_tensor **val;           /* per value of the prefix: the tensor standing for it */
  int nval;
  int32_t *pending;             /* instructions matched but not run yet */
  vm_parts *parts;              /* the function's partitions as programs (vm_part.c); NULL: op by op */
  int npending, cap_pending;
  /* replay: what the host did at the first VM_SEEN breaks of the lead path this call passed (vm_auto.c), kept as a
   * recording keeps it on the break itself; a path recorded from here on copies it */
  ir_break seen[VM_SEEN];
  char seen_why[VM_SEEN][200];
  char seen_ahead[VM_SEEN][240];  /* the reason of a seen break whose ahead is 2 */
  /* replay: a call recording a branch's other outcome ahead (vm_auto.c): the read at the lead path's break after
   * instruction ahead_after is forced to give the comparison's outcome ahead_outcome (grace_trace_forced; then
   * ahead_forced is set); the call may not leave the path before, nor run an op after */
  int ahead_on, ahead_after, ahead_outcome, ahead_forced;
  double replay_ns;             /* host time spent matching, for the report */
  long replayed_ops;
  /* a region's sub-program being recorded (vm_region.c): the enclosing trace waits in parent; tensors of the
   * enclosing traces that the function touches become inputs of ir, listed in caps (references held) */
  vm_trace *parent;
  grace_tensor **caps;
  int ncap, cap_caps;
  /* the function's in-place writes to tensors of the enclosing traces: each tensor, a copy of its contents and its
   * version from before the first write, given back when the recording ends (vm_region.c) */
  struct { grace_tensor *t, *saved; uint64_t version; } wr[GRACE_SUB_WRITES];
  int nwr;
};

static inline int vm_tracing(const grace_vm *vm) { return vm->trace && grace_trace_active(vm); }
grace_status vm_trace_record(grace_vm *vm, grace_op op, int nin, grace_tensor *const *in, const grace_attrs *a,
                             int nout, grace_tensor **out);
/* The hooks base/ calls (vm_hooks): a host read of a traced tensor, a tensor made from host data. */
grace_status vm_trace_read(grace_vm *vm, const grace_tensor *t, const char *how);
grace_status vm_trace_created(grace_vm *vm, grace_tensor *t);
int vm_trace_replaying(const grace_vm *vm);

trace_slot *tr_find(vm_trace *tr, const grace_tensor *t);
/* grace_trace_begin without its argument checks: a replay starts with no IR (it makes one if it records a path). */
grace_status vm_trace_begin(grace_vm *vm, grace_ir *ir, grace_where_fn where, void *ud);
grace_status tr_map_put(grace_vm *vm, grace_tensor *t, grace_value v);
grace_status tr_problem(grace_vm *vm, const char *fmt, ...) __attribute__((format(printf, 2, 3)));
grace_status tr_set_root(grace_vm *vm, grace_value v, grace_value root);
grace_value tr_root_of(vm_trace *tr, grace_value v);
/* Inside a region's sub-program: tensor t of an enclosing trace becomes the next input of the sub-program. */
grace_status vm_region_capture(grace_vm *vm, grace_tensor *t, grace_value *out);
/* Before op runs inside a region's sub-program: an in-place write to a tensor from outside the function is refused
 * (an error of the op, so the write does not happen), as a branch may not run on every call. */
grace_status vm_region_check_op(grace_vm *vm, grace_op op, int nin, grace_tensor *const *in);
/* The tensor whose storage t views, through the views the trace made (t itself when none). */
grace_tensor *tr_base_of(vm_trace *tr, grace_tensor *t);

/* Frees the trace state (references, map, replay arrays); vm->trace becomes NULL. */
void tr_free(grace_vm *vm);

/* replay (vm_replay.c) */
/* grace_run's hook while replaying: *handled says whether the op was matched (deferred) or the call left
 * the recorded paths (then the trace records from here and grace_run executes the op). */
grace_status vm_replay_op(grace_vm *vm, grace_op op, int nin, grace_tensor *const *in, const grace_attrs *a, int nout,
                          grace_tensor **out, int *handled);
/* Runs the deferred instructions, so every tensor of the call holds its value: as the partition's program when
 * the replay has parts, else op by op. */
grace_status vm_replay_flush(grace_vm *vm);
/* grace_replay_begin with the partitions of the function (kept by its owner across calls; NULL: op by op). */
grace_status vm_replay_begin(grace_vm *vm, grace_ir *const *paths, int npaths, grace_where_fn where, void *ud,
                             vm_parts *parts);
/* Runs instructions list[0..n) of the lead path one at a time through grace_run. */
grace_status vm_replay_run_ops(grace_vm *vm, const int32_t *list, int n);
/* Pending tensor shell takes r's storage and layout (r keeps its own reference). */
void vm_replay_become(grace_tensor *shell, grace_tensor *r);

/* Leaves the recorded paths at the cursor (what was deferred runs first): the call is recorded from here on as a new
 * path whose prefix is the one matched so far. */
grace_status vm_replay_diverge(grace_vm *vm);

/* branches read on the host (vm_auto.c) */
/* A host read (how: what it reads) while the trace is active, before the hook reads t: in a replay, a read of
 * elements counts on the break it passes (a recording counts every read on the break it makes). */
void vm_auto_read(grace_vm *vm, const char *how);
/* The last break dst got (a copy of break bi of the lead path, made as a call leaves the paths): what this call
 * did there, or a plain read where the call has not passed it. */
grace_status vm_auto_copy_break(grace_vm *vm, grace_ir *dst, int bi);

/* partitions (vm_part.c) */
vm_parts *vm_parts_new(grace_vm *vm);
void vm_parts_free(grace_vm *vm, vm_parts *p);
/* The deferred instructions list[0..n) of the lead path, run as their partition's program (made the first time). */
grace_status vm_part_flush(grace_vm *vm, const int32_t *list, int n);
/* Partitions made into programs; the k-th of them (its path and its index among the path's partitions). */
int vm_parts_count(const vm_parts *p);
grace_ir *vm_parts_prog(const vm_parts *p, int k, int *path, int *index);
/* Calls of partitions that ran their program. */
long vm_parts_runs(const vm_parts *p);
/* A partition's value kept internal, asked for (read by the host, used by an op outside the recorded paths, kept
 * by Lua past the call): its partition's program with every value an output runs again on the inputs it ran on,
 * which must be unchanged (their versions, its captured tensors'); else t stays pending and the error is set. */
grace_status vm_lazy_compute(grace_vm *vm, grace_tensor *t);
/* t no longer needs its way of being computed again (computed, or dying). */
void vm_lazy_drop(grace_tensor *t);
/* Tensors the k-th partition program computes but keeps inside. */
int vm_parts_internal(const vm_parts *p, int k);
/* Outputs of the partition programs made, and values they keep internal. */
void vm_parts_outputs(const vm_parts *p, long *outputs, long *internal);
/* grace_trace_input/_scalar while replaying: t stands for the next input of the paths. */
grace_status vm_replay_input(grace_vm *vm, grace_tensor *t, int scalar, grace_value *out);

#endif
