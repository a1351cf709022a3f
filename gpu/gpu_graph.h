/* gpu_graph.h: running a device program (a compiled partition) as a CUDA graph, chosen per program by measuring
 * on the device (see grace_graph_info in grace.h for the strategies). gpu_ir_run hands every program that is
 * not an eager one-op program to gpu_graph_call, which runs it through exec (the group executor) eagerly, or
 * captures exec's launches into a graph and replays that. */
#ifndef GRACE_GPU_GRAPH_H
#define GRACE_GPU_GRAPH_H
#include "ir/ir.h"
#include "base/base.h"

typedef grace_status (*gpu_exec_fn)(grace_ir *ir, int nin, grace_tensor *const *in, int nout, grace_tensor **out);
typedef struct gpu_part gpu_part;
typedef struct gpu_share gpu_share;

/* One call of ir with *part (made on first use) holding its graphs and measurements; share: the launch decision
 * ir shares with the other specialisations of its program with symbolic sizes (NULL: none). */
grace_status gpu_graph_call(grace_ir *ir, gpu_part **part, gpu_share *share, gpu_exec_fn exec, int nin,
                            grace_tensor *const *in, int nout, grace_tensor **out);
/* The launch decision of a program with symbolic sizes (gpu_exec.c), shared by its specialisations: the first to
 * decide publishes it, a later one starts decided with it (gpu_graph_choice.c). Keyed in the launch cache by the
 * symbolic program's text, which must outlive it; NULL when out of host memory. */
gpu_share *gpu_share_new(grace_ir *symbolic);
void gpu_share_free(gpu_share *share);
/* The sizes of the specialisation about to run ("s1=8"; NULL after it): named as the decision's source. */
void gpu_share_running(gpu_share *share, const char *sizes);
void gpu_part_free(grace_vm *vm, gpu_part *part);
/* While a graph is being captured: the value of instruction inst (an input, scalar input or capture that is a
 * host number) moves into the graph's argument table, rewritten before each replay. No-op otherwise. */
grace_status gpu_graph_lift(grace_ir *ir, int inst, grace_tensor **val);
/* Whether a graph is being captured on vm; then gpu_graph_number gives a device copy of host number t that
 * lives in the argument table (its value fixed at capture: only constants reach here). */
int gpu_graph_capturing(grace_vm *vm);
grace_status gpu_graph_number(grace_vm *vm, grace_tensor *t, grace_tensor **out);
/* While capturing: the generator's seed and offset words of a random op (offset: the one it took) as slots of the
 * argument table, rewritten per replay with the VM's seed and the offset that op takes then. An error unless the
 * capture uses indirection (a baked offset would repeat the same numbers every call). */
grace_status gpu_graph_rng(grace_vm *vm, uint64_t offset, uint64_t *seed_slot, uint64_t *offset_slot);
/* While capturing: an index check whose device flag (the first bad position, or more than n) is read back after
 * each replay instead of now; a bad index then fails at the next wait for the device (gpu_graph.c's header says
 * why). On success the graph owns the flag (8 bytes from cuda_malloc) and releases it. */
grace_status gpu_graph_defer_check(grace_vm *vm, uint64_t flag, const char *op, const grace_tensor *idx, int64_t n,
                                   int64_t size, int dim);
/* Whether index idx was already checked against bound size by the capture under way (unchanged since); 0 when no
 * capture is. */
int gpu_graph_check_seen(grace_vm *vm, const grace_tensor *idx, int64_t size);

/* While capturing: the iteration counter of a while_loop with max_iters (gpu_cond.c), read back after each replay
 * like an index check's flag: negative when the loop was stopped past max_iters, which raises the eager loop's error
 * at the next wait for the device. The graph owns the counter (8 bytes from cuda_malloc) on success. */
grace_status gpu_graph_defer_loop(grace_vm *vm, uint64_t counter, int64_t max_iters);
/* While capturing: whether the capture predicates the program's cond regions (gpu_pred.c) rather than making them
 * conditional nodes (gpu_cond.c); the launch measurement tries both. */
int gpu_graph_pred(grace_vm *vm);
/* While capturing: a conditional node was added (gpu_cond.c); counted per graph (grace_graph_info.cond_nodes). */
void gpu_graph_cond_added(grace_vm *vm);

#endif
