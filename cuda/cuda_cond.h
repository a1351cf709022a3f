/* cuda_cond.h: conditional nodes (IF, IF/ELSE, WHILE) added to a graph being captured on the VM's stream, and
 * their bodies captured in turn. The node's handle is set on the device by a kernel (see gpu/gpu_cond.c), so a
 * branch or loop whose predicate is a device value runs inside one graph with no host synchronisation.
 *
 * In a capture: cuda_cond_handle makes a handle in the graph being captured (the body graph, when nested);
 * cuda_cond_node adds the node after everything captured so far (later work depends on it) and gives its body
 * graphs; cuda_cond_body_begin moves the VM's stream to a stream of the body's depth that captures into one body
 * graph, so whatever runs until cuda_cond_body_end (kernels, copies, nested conditional nodes) lands there.
 * Programmatic dependent launch is off inside bodies (their edges are plain). */
#ifndef GRACE_CUDA_COND_H
#define GRACE_CUDA_COND_H
#include "cuda/cuda_api.h"

enum { CUDA_COND_MAX_DEPTH = 8 };

/* Whether the driver has the entry points and version (12.8 for IF with an else body); why (n bytes) if not. */
int cuda_cond_supported(cuda_ctx *c, char *why, size_t n);
/* A handle in the graph being captured on the VM's stream (reset to 0 at each launch of that graph). */
grace_status cuda_cond_handle(cuda_ctx *c, CUgraphConditionalHandle *h);
/* Adds a conditional node of type (CU_GRAPH_COND_TYPE_IF / _WHILE) with nbody bodies (1 or 2; 2 only for IF)
 * after the captured work; bodies[0..nbody) receive its (empty) body graphs, owned by the node. */
grace_status cuda_cond_node(cuda_ctx *c, CUgraphConditionalHandle h, int type, unsigned nbody, CUgraph *bodies);
/* What body capture changed, to put back. */
typedef struct cuda_cond_saved { CUstream stream; int pdl; } cuda_cond_saved;
grace_status cuda_cond_body_begin(cuda_ctx *c, CUgraph body, cuda_cond_saved *saved);
/* Ends the body's capture and puts the stream back; returns st, or the capture's error when st is GRACE_OK. */
grace_status cuda_cond_body_end(cuda_ctx *c, const cuda_cond_saved *saved, grace_status st);
/* Bodies being captured now (0: the launches go to the graph itself). */
int cuda_cond_depth(const cuda_ctx *c);

#endif
