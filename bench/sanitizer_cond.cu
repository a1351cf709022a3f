// sanitizer_cond.cu: whether compute-sanitizer's memcheck runs kernels inside conditional graph nodes cleanly.
// A counter in a small cudaMalloc'd buffer; a graph holding (1) a WHILE node whose body kernel increments the
// counter and sets the condition to counter < limit, and (2) an IF node with an else body, each body a kernel
// reading and writing the counter; the body kernels are captured into the bodies from a second stream, the way
// grace builds its conditional nodes, optionally launched as programmatic dependents (PDL). Every access is in
// bounds by construction: an error reported under memcheck here is the tool's, not the program's.
// build: nvcc -arch=sm_90 -o sanitizer_cond bench/sanitizer_cond.cu
// usage: sanitizer_cond [pdl]    (prints the counter after each of two launches, and the value expected)
#include <cuda_runtime.h>
#include <stdio.h>
#include <string.h>

#define CK(x) do { cudaError_t e_ = (x); if (e_ != cudaSuccess) { \
  printf("FAIL %s: %s (line %d)\n", #x, cudaGetErrorString(e_), __LINE__); return 1; } } while (0)

enum { LIMIT = 5 };

__global__ void step_while(long long *n, cudaGraphConditionalHandle h, long long stop) {
  long long v = n[0] + 1;
  n[0] = v;
  cudaGraphSetConditional(h, v < stop);
}
__global__ void add(long long *n, long long k) { n[0] += k; }
__global__ void set_if(const long long *n, cudaGraphConditionalHandle h) { cudaGraphSetConditional(h, n[0] % 2); }

static int add_cond(cudaGraph_t g, cudaGraphNode_t *dep, int ndep, cudaGraphConditionalHandle h,
                    cudaGraphConditionalNodeType type, unsigned size, cudaGraphNode_t *node, cudaGraph_t *bodies) {
  alignas(cudaGraphNodeParams) static unsigned char raw[sizeof(cudaGraphNodeParams)];   // a union with no default constructor in C++
  memset(raw, 0, sizeof raw);
  cudaGraphNodeParams &p = *reinterpret_cast<cudaGraphNodeParams *>(raw);
  p.type = cudaGraphNodeTypeConditional;
  p.conditional.handle = h;
  p.conditional.type = type;
  p.conditional.size = size;
#if CUDART_VERSION >= 13000
  CK(cudaGraphAddNode(node, g, dep, NULL, ndep, &p));
#else
  CK(cudaGraphAddNode(node, g, dep, ndep, &p));
#endif
  for (unsigned i = 0; i < size; i++) bodies[i] = p.conditional.phGraph_out[i];
  return 0;
}

// a kernel launch captured into body graph b from stream s; with pdl, after a plain add(n, 0) and as its
// programmatic dependent (a programmatic edge inside the body, as grace's kernels have)
template <typename F, typename... A>
static int capture_into(cudaStream_t s, cudaGraph_t b, int pdl, long long *n, F kern, A... args) {
  CK(cudaStreamBeginCaptureToGraph(s, b, NULL, NULL, 0, cudaStreamCaptureModeRelaxed));
  cudaLaunchConfig_t cfg;
  memset(&cfg, 0, sizeof cfg);
  cfg.gridDim = dim3(1);
  cfg.blockDim = dim3(1);
  cfg.stream = s;
  cudaLaunchAttribute at;
  at.id = cudaLaunchAttributeProgrammaticStreamSerialization;
  at.val.programmaticStreamSerializationAllowed = 1;
  cfg.attrs = &at;
  if (pdl) CK(cudaLaunchKernelEx(&cfg, add, n, 0LL));
  cfg.numAttrs = pdl ? 1 : 0;
  CK(cudaLaunchKernelEx(&cfg, kern, args...));
  cudaGraph_t out;
  CK(cudaStreamEndCapture(s, &out));
  return 0;
}

int main(int argc, char **argv) {
  int pdl = argc > 1 && !strcmp(argv[1], "pdl");
  long long *n;
  CK(cudaMalloc(&n, 512));
  CK(cudaMemset(n, 0, 512));
  cudaStream_t s;
  CK(cudaStreamCreateWithFlags(&s, cudaStreamNonBlocking));
  cudaGraph_t g;
  CK(cudaGraphCreate(&g, 0));
  cudaGraphConditionalHandle hw, hi;
  CK(cudaGraphConditionalHandleCreate(&hw, g, 1, cudaGraphCondAssignDefault));
  CK(cudaGraphConditionalHandleCreate(&hi, g, 0, cudaGraphCondAssignDefault));
  cudaGraphNode_t wn, sn, in;
  cudaGraph_t wb[1], ib[2];
  if (add_cond(g, NULL, 0, hw, cudaGraphCondTypeWhile, 1, &wn, wb)) return 1;
  if (capture_into(s, wb[0], pdl, n, step_while, n, hw, (long long)LIMIT)) return 1;
  // set the IF condition from the counter after the loop, then an if/else on it
  cudaKernelNodeParams kp;
  memset(&kp, 0, sizeof kp);
  void *args[] = {&n, &hi};
  kp.func = (void *)set_if;
  kp.gridDim = dim3(1);
  kp.blockDim = dim3(1);
  kp.kernelParams = args;
  CK(cudaGraphAddKernelNode(&sn, g, &wn, 1, &kp));
  if (add_cond(g, &sn, 1, hi, cudaGraphCondTypeIf, 2, &in, ib)) return 1;
  if (capture_into(s, ib[0], pdl, n, add, n, 100LL)) return 1;
  if (capture_into(s, ib[1], pdl, n, add, n, 1000LL)) return 1;
  cudaGraphExec_t ge;
  CK(cudaGraphInstantiate(&ge, g, 0));
  long long v = 0;
  for (int i = 0; i < 2; i++) {
    CK(cudaMemset(n, 0, 8));
    CK(cudaGraphLaunch(ge, s));
    CK(cudaStreamSynchronize(s));
    CK(cudaMemcpy(&v, n, 8, cudaMemcpyDeviceToHost));
    printf("launch %d: counter %lld (expected %d: %d loop steps, then the %s body)\n", i + 1, v,
           LIMIT + (LIMIT % 2 ? 100 : 1000), LIMIT, LIMIT % 2 ? "if" : "else");
  }
  CK(cudaGraphExecDestroy(ge));
  CK(cudaGraphDestroy(g));
  CK(cudaStreamDestroy(s));
  CK(cudaFree(n));
  printf("SANITIZER_COND_DONE\n");
  return 0;
}
