/* cuda_graph.h: capturing the work queued on the VM's stream into a CUDA graph, the memory such a graph keeps,
 * and the record of what its kernels were given, so the caller can tell which arguments a replay must change.
 *
 * While a capture is open (cuda_capture_open .. cuda_capture_close):
 *   - every device allocation comes from the graphs' arena (a free block of it, else a new one that joins it):
 *     its address stays graph memory after the tensor that asked for it is released; no allocation outside a
 *     capture takes it while any graph lives, and captures share the arena's free blocks (the blocks a capture
 *     took are counted in cuda_capture_bytes);
 *   - launches and copies note the raw 8-byte words they pass (pointers among them), so that pointers into the
 *     caller's per-call tensors can be found afterwards (cuda_capture_raw); vendor library calls note theirs
 *     apart (cuda_capture_lib);
 *   - with indirection on, runners that can dereference ask cuda_capture_slot for the address of a slot of the
 *     device-resident argument table holding a word, and pass that instead: the caller rewrites the slot before
 *     each replay. Nothing here prints or aborts; a driver error ends the capture and is returned. */
#ifndef GRACE_CUDA_GRAPH_H
#define GRACE_CUDA_GRAPH_H
#include "cuda/cuda_api.h"

typedef struct cuda_capture cuda_capture;

/* Starts routing allocations to the graphs' arena (no stream capture yet: placeholders and the table come first).
 * indirect: runners should use cuda_capture_slot. */
grace_status cuda_capture_open(cuda_ctx *c, int indirect, cuda_capture **out);
/* The argument table: nslots 8-byte slots at dev: device memory the caller allocated before opening the capture,
 * so not arena memory, which other graphs use as scratch (the table's fixed words persist between replays). */
grace_status cuda_capture_set_table(cuda_ctx *c, cuda_capture *cap, CUdeviceptr dev, int nslots);
/* Begins stream capture (relaxed mode: allocation is allowed, synchronizing calls fail and end the capture). */
grace_status cuda_capture_begin(cuda_ctx *c);
/* Ends stream capture (when begun) and the arena's routing. *g: the graph, or NULL when st (the status of the
 * captured work) is an error or the driver invalidated the capture; the status returned says why. */
grace_status cuda_capture_close(cuda_ctx *c, grace_status st, CUgraph *g);
/* Frees the capture's record. When no capture is left (its graph was the last), the arena's blocks go back to the
 * cache (those a tensor still holds, when that tensor goes). */
void cuda_capture_free(cuda_ctx *c, cuda_capture *cap);

/* The capture in progress on c with indirection on, or NULL. */
cuda_capture *cuda_capture_indirect(cuda_ctx *c);
/* The device address of the table slot that holds word (the same slot for the same word); 0 when the table is
 * full (the capture is then marked failed). */
CUdeviceptr cuda_capture_slot(cuda_capture *cap, uint64_t word);
/* A launch of grace's kernel f with its parameter struct during an open capture: its words are noted (below)
 * and f is known as one of grace's (cuda_graph_remap_slots rewrites only those). */
void cuda_capture_kernel(cuda_ctx *c, CUfunction f, const void *params, size_t bytes);
/* A slot of its own for word (never shared with an equal word): for a value the caller rewrites per replay. */
CUdeviceptr cuda_capture_slot_own(cuda_capture *cap, uint64_t word);
/* Notes words passed to the device directly (by launches and copies) during an open capture. */
void cuda_capture_note(cuda_ctx *c, const uint64_t *words, size_t n);

/* A vendor library call (cuBLASLt) given these device words: counted (cuda_library_calls), and during an open
 * capture noted apart from the raw words, so that a graph may re-point the library's kernel nodes per replay
 * (cuda_graph_update.h) instead of pinning what they point into. */
void cuda_capture_library(cuda_ctx *c, const uint64_t *words, size_t n);
uint64_t cuda_library_calls(const cuda_ctx *c);
const uint64_t *cuda_capture_lib(const cuda_capture *cap, size_t *n);
/* Whether f is one of grace's kernels launched in the capture (the other kernel nodes are a library's). */
int cuda_capture_is_own(const cuda_capture *cap, CUfunction f);

/* What the capture recorded: the slots' words (nslots of them), the raw words noted, the bytes of the arena blocks
 * it took. */
const uint64_t *cuda_capture_slots(const cuda_capture *cap, int *nslots);
const uint64_t *cuda_capture_raw(const cuda_capture *cap, size_t *n);
size_t cuda_capture_bytes(const cuda_capture *cap);
/* The block at ptr is not the graph's after all (a placeholder or output its replays never touch): no longer
 * counted as its memory. */
void cuda_capture_drop(cuda_ctx *c, cuda_capture *cap, CUdeviceptr ptr);
/* Device bytes in the graphs' arena (shared by all graphs of the VM; see cuda_graph.c). */
size_t cuda_graph_arena_bytes(const cuda_ctx *c);
/* Whether ptr lies in an arena block the capture took; *base, *size: that block. */
int cuda_capture_owns(const cuda_capture *cap, CUdeviceptr ptr, CUdeviceptr *base, size_t *size);

/* Renumbers the argument-table slots the kernels of g read: a word equal to slot i's address (table + 8 i,
 * i < nslots) in a node's parameter struct becomes slot map[i]'s. Only grace's own kernels launched in the capture
 * are looked at. GRACE_EUNSUPPORTED with g untouched when the driver cannot read or rewrite kernel nodes. */
grace_status cuda_graph_remap_slots(cuda_ctx *c, const cuda_capture *cap, CUgraph g, const int *map);
/* Instantiates g; counts its kernel nodes into *nkernels. */
grace_status cuda_graph_instantiate(cuda_ctx *c, CUgraph g, CUgraphExec *x, int *nkernels);
grace_status cuda_graph_launch(cuda_ctx *c, CUgraphExec x);
void cuda_graph_destroy(cuda_ctx *c, CUgraph g, CUgraphExec x);
/* Whether the driver has the graph entry points. */
int cuda_graph_supported(cuda_ctx *c);

/* A program's launch decision (n bytes) kept with the compiled kernels ($GRACE_CACHE_DIR), keyed by text (the
 * program) with the device and the driver, so that another process need not measure again. load: 1 when an
 * entry of exactly n bytes was read. Failures only mean no cache (no error is set). */
int cuda_graph_decision_load(cuda_ctx *c, const char *text, void *buf, size_t n);
void cuda_graph_decision_store(cuda_ctx *c, const char *text, const void *buf, size_t n);

/* Page-locked host memory (for the argument table's staging copies). */
grace_status cuda_host_alloc(cuda_ctx *c, size_t n, void **p);
void cuda_host_free(cuda_ctx *c, void *p);
/* Asynchronous host-to-device copy on the VM's stream (src must be page-locked and stay untouched until the
 * copy has run: record an event after it). */
grace_status cuda_copy_to_device_async(cuda_ctx *c, CUdeviceptr dst, const void *src, size_t n);
grace_status cuda_event_sync(cuda_ctx *c, CUevent e);
/* Asynchronous device-to-host copy on the VM's stream (dst page-locked; read it after a synchronize). */
grace_status cuda_copy_to_host_async(cuda_ctx *c, void *dst, CUdeviceptr src, size_t n);

#endif
