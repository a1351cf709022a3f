/* cg_cond.h: the kernel that sets a conditional graph node's handle from a 0-d device value (gpu/gpu_cond.c). */
#ifndef GRACE_CG_COND_H
#define GRACE_CG_COND_H
#include <stdint.h>
#include "grace.h"

/* Its name and source. It calls the device runtime, so it is compiled relocatable and linked with libcudadevrt.a
 * (cuda_module_get_linked), not loaded as a plain NVRTC cubin. */
#define CG_COND_KERNEL "grace_cond_set"
const char *cg_cond_source(void);
/* Its one parameter (cg.h's convention: 8-byte words): the value's address, the handle, how to read the value of
 * dtype dt as true or false (nonzero; for floats -0 is false and NaN true, as the host's truth test), and for a
 * bounded loop the address of its iteration count (an int64 the graph zeroes before the loop; 0: no bound) and
 * max_iters: a true value with the count at max_iters is made false and the count set to -1. */
enum { CG_COND_WORDS = 6 };
void cg_cond_pack(uint64_t w[CG_COND_WORDS], uint64_t value_ptr, grace_dtype dt, uint64_t handle, uint64_t count_ptr,
                  int64_t max);

/* Predication (gpu/gpu_pred.c): the kernel that writes a cond region's predicate word, the 32-bit word every
 * predicated kernel of its bodies compares with its wanted value (cg_pred_params): 1 when the then body runs, 2
 * when the else body runs, 0 when neither (a region nested in a body that does not run). It reads the value as
 * grace_cond_set does, and first the enclosing region's word when there is one (nested regions: a conjunction).
 * A plain NVRTC kernel (no device runtime). Its words: the value's address, its size and sign mask (as
 * cg_cond_pack), the enclosing word's address (0: none) and the value it must hold, and the word's address. */
#define CG_PRED_KERNEL "grace_pred_set"
enum { CG_PRED_WORDS = 6, CG_PRED_THEN = 1, CG_PRED_ELSE = 2 };
const char *cg_pred_source(void);
void cg_pred_pack(uint64_t w[CG_PRED_WORDS], uint64_t value_ptr, grace_dtype dt, uint64_t outer_ptr, unsigned outer_want,
                  uint64_t word_ptr);

#endif
