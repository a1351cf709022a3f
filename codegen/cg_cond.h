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

#endif
