/* gpu_exec.h: running ops and IR programs on the CUDA device. grace_run on CUDA tensors and the IR executor
 * meet here: an IR program runs group by group (ir/ir_fuse.h), each group by the runner of its kind:
 *   IR_FUSE_POINTWISE, IR_FUSE_ROW  -> gpu_fused_run  (gpu/gpu_fused.c,  kernels from codegen/cg_fused.c)
 *   IR_FUSE_MATMUL                  -> gpu_matmul_run (gpu/gpu_matmul.c, kernels from codegen/cg_matmul.c, cuBLASLt)
 *   IR_FUSE_SINGLE                  -> grace_run per instruction, which for CUDA tensors reaches
 *                                      gpu_op_run (gpu/gpu_ops.c, kernels from codegen/cg_ops.c) or a one-op program.
 * Views run on the host (they only make tensor headers). A runner that cannot lower a group returns
 * GRACE_EUNSUPPORTED having launched and allocated nothing; the executor then runs the group's instructions one
 * at a time through grace_run. */
#ifndef GRACE_GPU_EXEC_H
#define GRACE_GPU_EXEC_H

#include "ir/ir.h"
#include "ir/ir_fuse.h"
#include "base/base.h"
#include "cuda/cuda_api.h"
#include "codegen/cg_ops.h"

/* A runner's per-group memory (compiled kernels keyed by the layouts seen, launch plans): kept by the executor
 * for as long as the IR lives, released with free(vm, p). */
typedef struct gpu_slot {
  void *p;
  void (*free)(grace_vm *vm, void *p);
  int unfused;        /* the group ran an op at a time: no kernel of the generators could run it whole */
} gpu_slot;

/* Runs group g of f (kind POINTWISE or ROW) over ir. Values the group reads from outside are vals[v] (CUDA
 * tensors, any strides, broadcast as eager broadcasts); every member value that is read outside the group,
 * returned, or written back (ir->outputs, ir->writes) is stored: a new contiguous CUDA tensor put in vals[v]. */
grace_status gpu_fused_run(grace_vm *vm, grace_ir *ir, const ir_fusion *f, int g, gpu_slot *slot, grace_tensor **vals);

/* The same for a group of kind MATMUL (a matmul, or several sharing the left input, with a pointwise epilogue). */
grace_status gpu_matmul_run(grace_vm *vm, grace_ir *ir, const ir_fusion *f, int g, gpu_slot *slot, grace_tensor **vals);

/* One op on CUDA tensors with a hand-written kernel template, with grace_run's contract (new references in out,
 * errors as the CPU backend gives them): MOVE ops (contiguous, clone, cat, stack, index_select, gather, scatter,
 * triu, tril, repeat, embedding, slice_scatter), SCAN ops (cumsum, softmax, log_softmax, topk, sort), NORM ops
 * (layer_norm, rms_norm), CREATE ops (full, arange, linspace, eye, rand, randn, randint: same numbers as the CPU
 * for the same seed) and INPLACE ops (copy_, fill_, index_copy_). GRACE_EUNSUPPORTED for any other op. */
grace_status gpu_op_run(grace_vm *vm, grace_op op, int nin, grace_tensor *const *in, const grace_attrs *attrs,
                        int nout, grace_tensor **out);

/* The device context of a CUDA tensor's VM (probed already: a CUDA tensor exists). */
/* masked_select, nonzero, index_put_ (gpu/gpu_index.c), with gpu_ops.c's launch and index check. */
grace_status gpu_index_run(grace_vm *vm, grace_op op, int nin, grace_tensor *const *in, const grace_attrs *a, int nout,
                           grace_tensor **out);
grace_status gpu_ops_launch(grace_vm *vm, cgo_tmpl t, grace_dtype d0, grace_dtype d1, grace_dtype d2, int variant,
                            unsigned grid, unsigned block, const uint64_t *w, int nw);
grace_status gpu_ops_check_index(grace_vm *vm, const char *op, const grace_tensor *idx, int64_t size, int dim);
cuda_ctx *gpu_ctx(grace_vm *vm);
/* A CUDA tensor's element 0 (offset applied) as a device address. */
static inline CUdeviceptr gpu_ptr(const grace_tensor *t) { return (CUdeviceptr)(uintptr_t)vm_ptr(t); }

/* The backend's table, registered by grace_vm_new. */
extern const vm_backend gpu_backend;
/* Frees the VM's device-side caches (one-op programs); called before the device context goes. */
void gpu_state_free(grace_vm *vm);
/* Frees gpu_ops.c's table of loaded kernels (at VM teardown, before the device context goes). */
void gpu_ops_free(grace_vm *vm);

/* Runs op on CUDA tensors (grace_run's device branch); 0-d CPU tensors (host numbers) may take part. */
grace_status gpu_run(grace_vm *vm, grace_op op, int nin, grace_tensor *const *in, const grace_attrs *attrs, int nout,
                     grace_tensor **out);
/* A device copy of host number t (a 0-d CPU tensor) for a kernel to read. */
grace_status gpu_host_number(grace_vm *vm, grace_tensor *t, grace_tensor **out);
/* The launch strategy state of a program run on the device (gpu/gpu_graph.c), or NULL. */
struct gpu_part;
const struct gpu_part *gpu_ir_part(const grace_ir *ir);
/* How many fused groups of a program run on the device went an op at a time (no generated kernel runs them
 * whole), and why the first did ("" when none); 0 for a program not run on the device. */
int gpu_ir_unfused(const grace_ir *ir, char *why, size_t n);
/* gpu_cond.c: whether every region of ir (at any depth) can become CUDA conditional nodes when ir is captured;
 * else why (n bytes). Compiles the predicate kernel, outside any capture. */
int gpu_cond_available(grace_ir *ir, char *why, size_t n);
/* gpu_cond.c: after region instruction i ran as a host branch (outside a capture), runs once each sub-program of it
 * that has never run (on the same inputs; results and errors dropped), so that a capture finds its kernels compiled
 * and its matmuls tuned. */
void gpu_cond_warm(grace_ir *ir, int i, grace_tensor **val);
/* gpu_cond.c: during a capture, region instruction i of ir as conditional nodes: its results in val. */
grace_status gpu_cond_lower(grace_ir *ir, int i, grace_tensor **val);
/* gpu_cond.c: fresh device tensors typed as values v0 .. v0+n of ir: the addresses a region's results live at, made
 * before its bodies, which both write them. */
grace_status gpu_region_fresh(grace_ir *ir, int32_t v0, int n, grace_tensor **out);
/* gpu_cond.c: one body of a cond region: sub's launches (where the stream captures to; host numbers among in[] may
 * be table values of the graph), its results copied into dst. */
grace_status gpu_region_body(grace_ir *sub, int nin, grace_tensor *const *in, int nout, grace_tensor *const *dst);
/* gpu_cond.c: why a region of ir (or of its sub-programs, at any depth) cannot be lowered on the device, as
 * conditional nodes or (pred) predicated: random numbers, host results or tensors, a sub-program on the CPU, and
 * for predication a while_loop; "" (why[0] == 0 on entry) when all can. */
void gpu_region_why(const grace_ir *ir, int pred, char *why, size_t n);
/* gpu_pred.c: whether every region of ir (at any depth) can be predicated when ir is captured, else why (n bytes).
 * Compiles the predicate word's kernel, outside any capture. */
int gpu_pred_available(grace_ir *ir, char *why, size_t n);
/* gpu_pred.c: during a capture, cond instruction i of ir predicated: its results in val. */
grace_status gpu_pred_lower(grace_ir *ir, int i, grace_tensor **val);
/* gpu_pred.c: after cond instruction i ran as a host branch (outside a capture), launches both its sub-programs once
 * predicated, with a word neither body wants, so that their predicated kernels are compiled before a capture. */
void gpu_pred_warm(grace_ir *ir, int i, grace_tensor **val);
/* gpu_pred.c: the region lowering asked for (grace_set_regions, else GRACE_REGIONS): -1 auto, else a
 * grace_region_lowering. */
int gpu_region_mode(grace_vm *vm);
/* gpu_exec.c: the regions of a program run on the device (0: none, or not run there yet) and why each lowering
 * cannot take them (why[GRACE_REGION_*], "" when it can; a lowering the mode excludes says so). */
int gpu_ir_lowerings(const grace_ir *ir, char why[3][160]);
/* Runs an IR program on the device (grace_ir_run's device branch). */
grace_status gpu_ir_run(grace_ir *ir, int nin, grace_tensor *const *in, int nout, grace_tensor **out);

/* gpu_stage.c: host tensors copied ahead of a device program through page-locked staging buffers (one ring per
 * owner). gpu_stage_to_device: a fresh device tensor holding host's contents, its copy queued on the stream (a
 * tensor that is not a contiguous host tensor is copied plainly). gpu_stage_bytes: bytes moved so far. */
typedef struct gpu_stage gpu_stage;
gpu_stage *gpu_stage_new(grace_vm *vm);
void gpu_stage_free(grace_vm *vm, gpu_stage *s);
grace_status gpu_stage_to_device(grace_vm *vm, gpu_stage *s, grace_tensor *host, grace_tensor **out);
size_t gpu_stage_bytes(const gpu_stage *s);

#endif
