/* ir_place.h: CUDA-Graph-aware placement, as an analysis of one IR function (it rewrites nothing: the device
 * executor already does what it decides, see below). A device partition meant to run as one CUDA graph must hold
 * no host work; for every value the host hands to device ops, and every device op that would need the host, this
 * says how it runs and why, with the script line:
 *   - a host number (0-d CPU input, dynamic scalar, captured 0-d CPU tensor) read by device ops becomes a
 *     device-resident scalar: a word of the graph's argument table, rewritten per call (gpu/gpu_graph.c lifts it);
 *   - a CPU tensor with dims read by device ops is a synchronous host-to-device copy inside the partition, which
 *     ends a capture: the partition cannot be a CUDA graph (it runs eagerly today);
 *   - a device op with no device kernel (gpu/gpu_exec.c runs it on the host through copies) or a copy back to the
 *     host splits the partition where device work depends on it;
 * and counts the device partitions that result. grace_ir_place_report (grace.h) is the public, text form. */
#ifndef GRACE_IR_PLACE_H
#define GRACE_IR_PLACE_H

#include "ir/ir.h"

typedef enum ir_place_kind {
  IR_PLACE_SCALAR,       /* host number read by the device: argument table word, rewritten per call */
  IR_PLACE_HOST_NUMBER,  /* 0-d result of host work over host tensors, read by the device: fixed at capture */
  IR_PLACE_HOST_COPY,    /* CPU tensor with dims read by the device: synchronous copy inside the partition */
  IR_PLACE_HOST_INPUT,   /* per-call CPU tensor input with dims of a device program: no graph takes it */
  IR_PLACE_NO_KERNEL,    /* device op run on the host (no device kernel for the case) */
  IR_PLACE_TO_HOST       /* device value copied to the host inside the program */
} ir_place_kind;

typedef struct ir_place_decision {
  ir_place_kind kind;
  int32_t value;         /* the value decided on */
  int32_t at;            /* the instruction where it meets the device (its first device reader, or the op) */
  int32_t via;           /* SCALAR / HOST_NUMBER: the first host op between value and reader, -1 none */
  int splits;            /* NO_KERNEL / TO_HOST: device work depends on it, so the partition splits there */
  int partition;         /* the device partition it belongs to (for a split: the one it ends), -1 none */
} ir_place_decision;

typedef struct ir_placement {
  ir_place_decision *d;
  int nd, capd;
  int ninst;
  int32_t *partition;    /* per instruction: its device partition (0-based, in order), -1 for host work, inputs,
                            literals and views (views make no kernel) */
  int npartitions;       /* device partitions: maximal device work between breaks and splitting host work */
  int nsplits;           /* decisions with splits set */
  int break_bounds;      /* partitions after the first that a graph break starts (the others follow host work) */
  int on_device;         /* a CUDA input or capture: grace_ir_run (vm/vm_interp.c) hands it to gpu/gpu_exec.c */
  int kernels;           /* device instructions that launch work */
  char no_graph[200];    /* why no partition can be a CUDA graph today ("" when they are candidates) */
} ir_placement;

/* Analyses ir into *p (zeroed first). On failure the VM has the message and *p holds nothing to free. */
grace_status ir_place(grace_ir *ir, ir_placement *p);
void ir_place_free(grace_vm *vm, ir_placement *p);
/* The report: one line per decision ("%v (what, type) -> decision: reason; at file:line"), then one summary line
 * ("no device partition ...", "one device partition ...", "N device partitions ..."). Writes at most n bytes
 * (terminated when n > 0) and returns the length the whole report needs, without the terminator. */
size_t ir_place_report(const grace_ir *ir, const ir_placement *p, char *buf, size_t n);
/* Why ir as a whole is never run as a CUDA graph (it returns a host tensor), into why
 * (n bytes); "" when it may be. The device executor (gpu/gpu_graph.c) and the report above share this rule. */
void ir_graph_eligibility(const grace_ir *ir, char *why, size_t n);
/* Round trips in ir: a device value copied to the host (`x:cpu()`), host work on it, and its result copied back
 * (`:cuda()`). Where the device has a kernel for every op of it, the dtypes stay, no host value of it is read by
 * anything else (other host work, a result, a write, the host at a graph break), it can run on the device: with
 * rewrite its values become device values and the two copies are bypassed (dce drops them). One line per round
 * trip, moved or not and why, appended to text (n bytes, may be NULL). Returns how many could move. */
int ir_place_round_trips(grace_ir *ir, int rewrite, char *text, size_t n);

#endif
