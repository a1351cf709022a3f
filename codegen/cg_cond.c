/* cg_cond.c: the source of the one kernel conditional graph nodes need: it reads a 0-d value (a cond's predicate,
 * a while_loop's cond result) on the device and sets the node's handle with cudaGraphSetConditional, so the
 * graph picks its branch or decides to loop again without the host. One kernel for every dtype: it reads the
 * value's bytes as an unsigned integer of its size and, for floats, drops the sign bit first (so -0 is false and
 * NaN true, as the host's `v != 0`). For a while_loop with max_iters it also counts the iterations in a device word
 * and stops the loop past the bound, marking the word -1 for the host to read after the replay. The predication
 * lowering's word kernel (cg_pred_source) reads the value the same way. */
#include "codegen/cg_cond.h"

/* the 0-d value at p.value as an unsigned integer v of its size (p.size bytes) */
#define GRACE_READ_VALUE \
  "  unsigned long long v;\n" \
  "  switch (p.size) {\n" \
  "  case 1: v = *(const unsigned char *)p.value; break;\n" \
  "  case 2: v = *(const unsigned short *)p.value; break;\n" \
  "  case 4: v = *(const unsigned int *)p.value; break;\n" \
  "  default: v = *(const unsigned long long *)p.value; break;\n" \
  "  }\n"

/* cudaGraphSetConditional lives in the device runtime (cuda_device_runtime_api.h declares it so, in an extern "C"
 * block; NVRTC sources include no headers here, so the declaration is written out). */
static const char source[] =
  "extern \"C\" __device__ __attribute__((cudart_builtin)) void cudaGraphSetConditional(unsigned long long handle,\n"
  "                                                                              unsigned int value);\n"
  "struct " CG_COND_KERNEL "_p { const void *value; unsigned long long handle, size, sign; long long *count, max; };\n"
  "extern \"C\" __global__ void " CG_COND_KERNEL "(const " CG_COND_KERNEL "_p p) {\n"
  GRACE_READ_VALUE
  "  unsigned go = (v & ~p.sign) != 0;\n"
  "  if (go && p.count) {   /* a bounded loop: one more iteration, or stopped with the count marked -1 */\n"
  "    if (*p.count >= p.max) { *p.count = -1; go = 0; } else ++*p.count;\n"
  "  }\n"
  "  cudaGraphSetConditional(p.handle, go);\n"
  "}\n";

const char *cg_cond_source(void) { return source; }

void cg_cond_pack(uint64_t w[CG_COND_WORDS], uint64_t value_ptr, grace_dtype dt, uint64_t handle, uint64_t count_ptr,
                  int64_t max) {
  uint64_t size = grace_dtype_size(dt);
  w[0] = value_ptr;
  w[1] = handle;
  w[2] = size;
  w[3] = grace_dtype_is_float(dt) ? (uint64_t)1 << (8 * size - 1) : 0;
  w[4] = count_ptr;
  w[5] = (uint64_t)max;
}

/* Launched as a plain (not programmatic) launch: it starts once every kernel before it is done. */
static const char pred_source[] =
  "struct " CG_PRED_KERNEL "_p { const void *value; unsigned long long size, sign; const unsigned *outer;\n"
  "  unsigned long long outer_want; unsigned *word; };\n"
  "extern \"C\" __global__ void " CG_PRED_KERNEL "(const " CG_PRED_KERNEL "_p p) {\n"
  "  unsigned w = 0;\n"
  "  if (!p.outer || *p.outer == (unsigned)p.outer_want) {\n"
  GRACE_READ_VALUE
  "    w = (v & ~p.sign) != 0 ? 1u : 2u;\n"
  "  }\n"
  "  *p.word = w;\n"
  "}\n";

const char *cg_pred_source(void) { return pred_source; }

void cg_pred_pack(uint64_t w[CG_PRED_WORDS], uint64_t value_ptr, grace_dtype dt, uint64_t outer_ptr, unsigned outer_want,
                  uint64_t word_ptr) {
  uint64_t c[CG_COND_WORDS];
  cg_cond_pack(c, value_ptr, dt, 0, 0, 0);
  w[0] = value_ptr;
  w[1] = c[2];
  w[2] = c[3];
  w[3] = outer_ptr;
  w[4] = outer_want;
  w[5] = word_ptr;
}
