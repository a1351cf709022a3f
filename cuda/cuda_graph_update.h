/* cuda_graph_update.h: re-pointing a graph's library kernel nodes per replay.
 *
 * A vendor library (cuBLASLt) captured into a graph bakes the device addresses it was given into its kernels'
 * parameters; it cannot read grace's argument table. So that such a graph can still take new argument and result
 * tensors without copying them into fixed buffers, the parameters of those kernel nodes are read once after the
 * capture (cuGraphKernelNodeGetParams, with each parameter's offset and size from cuFuncGetParamInfo), the words
 * pointing into the buffers a replay changes are found, and each replay whose addresses differ rewrites them in
 * the instantiated graph (cuGraphExecKernelNodeSetParams: cheap, and it does not touch replays already queued).
 *
 * Safety rules (anything else makes the strategy unavailable, with the reason):
 *   - a word is taken for an address when it lies in [base, base + bytes) of a range; ranges lie above 4 GiB and
 *     do not overlap (device addresses do; a size or stride never reaches them). Such a word must sit at an
 *     8-byte aligned offset of the parameter block; one found straddling (4 bytes off) is refused;
 *   - every address a library call was given into a range must be found in some library kernel node, as a plain
 *     word (not found: the library passes it another way, e.g. through device memory or an encoded descriptor);
 *   - no copy or memset node may touch a range, and the graph may hold no node of another kind than kernels,
 *     copies, memsets, empty and event nodes (such a node cannot be re-pointed or checked);
 *   - on a device with tensor maps (TMA), the driver must keep a map's address as a plain word (probed by encoding
 *     one): a library kernel may hold a buffer's address inside a map, found and rewritten only then;
 *   - the driver must have the entry points (CUDA 12.4: cuFuncGetParamInfo) and let every parameter be read. */
#ifndef GRACE_CUDA_GRAPH_UPDATE_H
#define GRACE_CUDA_GRAPH_UPDATE_H
#include "cuda/cuda_graph.h"

/* A buffer whose address a replay may change. */
typedef struct cuda_range { CUdeviceptr base; size_t bytes; } cuda_range;
/* One word to rewrite: at byte `off` of the parameter block, range `range`'s new base + delta. */
typedef struct cuda_patch { uint32_t off; int32_t range; uint64_t delta; } cuda_patch;

/* The pure rule above for one kernel's parameters: bytes[0..nbytes) laid out as nparams parameters at off[i] of
 * size[i]; patches found go to out (at most max), *n of them. 0 on success; -1 with why set when the block
 * cannot be patched safely. */
int cuda_param_patches(const unsigned char *bytes, size_t nbytes, const size_t *off, const size_t *size, int nparams,
                       const cuda_range *r, int nr, cuda_patch *out, int max, int *n, char *why, size_t whylen);

typedef struct cuda_node_updates cuda_node_updates;
/* Finds the library kernel nodes of g (captured by cap) that hold addresses in r[0..nr), following the rules.
 * *out: NULL when no node needs one. GRACE_EUNSUPPORTED with the reason when the rules refuse. */
grace_status cuda_graph_updates_find(cuda_ctx *c, const cuda_capture *cap, CUgraph g, const cuda_range *r, int nr,
                                     cuda_node_updates **out);
/* Before a replay of x: range i now starts at base[i]; nodes whose words change are rewritten in x (*nset of
 * them, may be NULL). */
grace_status cuda_graph_updates_apply(cuda_ctx *c, cuda_node_updates *u, CUgraphExec x, const CUdeviceptr *base,
                                      int *nset);
/* Library kernel nodes re-pointed per replay. */
int cuda_graph_updates_nodes(const cuda_node_updates *u);
void cuda_graph_updates_free(cuda_ctx *c, cuda_node_updates *u);

#endif
