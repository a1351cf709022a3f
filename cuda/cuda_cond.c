/* cuda_cond.c: conditional graph nodes during stream capture (see cuda_cond.h). A conditional node cannot be
 * captured from a stream operation: it is added to the graph being captured with cuGraphAddNode after the
 * stream's current dependencies (cuStreamGetCaptureInfo), and the stream is then made to depend on it
 * (cuStreamUpdateCaptureDependencies). Its bodies are filled by capturing into them from a second stream
 * (cuStreamBeginCaptureToGraph); the VM's launches all go to c->stream, so that stream is swapped for the body's
 * while it runs. One body stream per nesting depth: a body of a body captures from the next. */
#include <stdio.h>
#include <string.h>
#include "cuda/cuda_cond.h"
#include "cuda/cuda_internal.h"

enum { CU_STREAM_NON_BLOCKING = 1, COND_MIN_DRIVER = 12080 };
_Static_assert(sizeof(CUDA_CONDITIONAL_NODE_PARAMS) == 32, "CUDA_CONDITIONAL_NODE_PARAMS is 32 bytes (cuda.h)");
_Static_assert(sizeof(CUgraphNodeParams) == 256, "CUgraphNodeParams is 256 bytes (cuda.h)");

int cuda_cond_supported(cuda_ctx *c, char *why, size_t n) {
  const cuda_fns *f = &c->fn;
  if (!f->cuStreamGetCaptureInfo_v3 || !f->cuStreamUpdateCaptureDependencies_v2 || !f->cuGraphAddNode_v2 ||
      !f->cuGraphConditionalHandleCreate || !f->cuStreamBeginCaptureToGraph || !f->cuStreamEndCapture) {
    snprintf(why, n, "the CUDA driver lacks conditional graph nodes (CUDA 12.8 or later is needed)");
    return 0;
  }
  if (c->props.driver_version < COND_MIN_DRIVER) {
    snprintf(why, n, "the CUDA driver is version %d.%d; conditional nodes with an else body need 12.8",
             c->props.driver_version / 1000, c->props.driver_version % 1000 / 10);
    return 0;
  }
  return 1;
}

/* The graph being captured on the VM's stream and its current dependencies. The node added after them gets plain
 * (full) edges: a programmatic edge (from a kernel launched as a programmatic dependent) may only join two kernels. */
static grace_status capture_info(cuda_ctx *c, CUgraph *g, const CUgraphNode **deps, size_t *ndeps) {
  int status = 0;
  unsigned long long id = 0;
  const void *edges = NULL;   /* asked for (else a programmatic edge makes the query "lossy", an error), not used */
  *g = NULL;
  *deps = NULL;
  *ndeps = 0;
  grace_status st = cuda_check(c->vm, c->fn.cuStreamGetCaptureInfo_v3(c->stream, &status, &id, g, deps, &edges, ndeps),
                               "cuStreamGetCaptureInfo");
  if (st == GRACE_OK && (status != 1 || !*g))   /* CU_STREAM_CAPTURE_STATUS_ACTIVE */
    st = vm_err(c->vm, GRACE_EINTERNAL, "conditional node: the stream is not capturing (status %d)", status);
  return st;
}

grace_status cuda_cond_handle(cuda_ctx *c, CUgraphConditionalHandle *h) {
  CUgraph g;
  const CUgraphNode *deps;
  size_t nd;
  *h = 0;
  grace_status st = capture_info(c, &g, &deps, &nd);
  if (st == GRACE_OK)
    st = cuda_check(c->vm, c->fn.cuGraphConditionalHandleCreate(h, g, c->ctx, 0, 0), "cuGraphConditionalHandleCreate");
  return st;
}

grace_status cuda_cond_node(cuda_ctx *c, CUgraphConditionalHandle h, int type, unsigned nbody, CUgraph *bodies) {
  CUgraph g;
  const CUgraphNode *deps;
  size_t nd;
  grace_status st = capture_info(c, &g, &deps, &nd);
  if (st != GRACE_OK) return st;
  CUgraphNodeParams p;
  memset(&p, 0, sizeof p);
  p.type = CU_GRAPH_NODE_TYPE_CONDITIONAL;
  p.u.conditional = (CUDA_CONDITIONAL_NODE_PARAMS){h, type, nbody, NULL, c->ctx};
  CUgraphNode node = NULL;
  if ((st = cuda_check(c->vm, c->fn.cuGraphAddNode_v2(&node, g, deps, NULL, nd, &p), "cuGraphAddNode(conditional)")))
    return st;
  if (!p.u.conditional.phGraph_out)
    return vm_err(c->vm, GRACE_EINTERNAL, "cuGraphAddNode(conditional): the driver gave no body graphs");
  for (unsigned b = 0; b < nbody; b++) bodies[b] = p.u.conditional.phGraph_out[b];
  return cuda_check(c->vm, c->fn.cuStreamUpdateCaptureDependencies_v2(c->stream, &node, NULL, 1,
                                                                     CU_STREAM_SET_CAPTURE_DEPENDENCIES),
                    "cuStreamUpdateCaptureDependencies");
}

grace_status cuda_cond_body_begin(cuda_ctx *c, CUgraph body, cuda_cond_saved *saved) {
  saved->stream = c->stream;
  saved->pdl = c->pdl;
  if (c->body_depth >= CUDA_COND_MAX_DEPTH)
    return vm_err(c->vm, GRACE_EUNSUPPORTED, "conditional node: regions nested deeper than %d", CUDA_COND_MAX_DEPTH);
  CUstream *s = &c->body_streams[c->body_depth];
  grace_status st = GRACE_OK;
  if (!*s && (st = cuda_check(c->vm, c->fn.cuStreamCreate(s, CU_STREAM_NON_BLOCKING), "cuStreamCreate")) != GRACE_OK) {
    *s = NULL;
    return st;
  }
  st = cuda_check(c->vm, c->fn.cuStreamBeginCaptureToGraph(*s, body, NULL, NULL, 0, CU_STREAM_CAPTURE_MODE_RELAXED),
                  "cuStreamBeginCaptureToGraph");
  if (st != GRACE_OK) return st;
  c->body_depth++;
  c->stream = *s;
  c->pdl = 0;
  return GRACE_OK;
}

grace_status cuda_cond_body_end(cuda_ctx *c, const cuda_cond_saved *saved, grace_status st) {
  CUgraph g = NULL;
  CUresult r = c->fn.cuStreamEndCapture(c->stream, &g);
  c->stream = saved->stream;
  c->pdl = saved->pdl;
  c->body_depth--;
  if (st == GRACE_OK && r) st = cuda_check(c->vm, r, "cuStreamEndCapture(conditional body)");
  return st;
}

int cuda_cond_depth(const cuda_ctx *c) { return c->body_depth; }

void cuda_cond_free(cuda_ctx *c) {
  for (int d = 0; d < CUDA_COND_MAX_DEPTH; d++)
    if (c->body_streams[d]) c->fn.cuStreamDestroy_v2(c->body_streams[d]);
  memset(c->body_streams, 0, sizeof c->body_streams);
}
