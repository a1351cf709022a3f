/* gemv_grace_gen.c: prints the CUDA source of grace's GEMV_NT kernels (fp32 / bf16, 1 and 2 warps per column,
 * with and without the L2 prefetch) and its GEMV_RW kernels (K 768 and 3072) as one file, so
 * bench/gemv_explore.cu can time them in its own harness beside its hand-written variants: a gap between the two
 * is in the kernel, not in grace's launch path. Names go to stderr in the order gemv_explore.cu expects them.
 * Built and run by `bench/device.sh gemv`. */
#include <stdio.h>
#include <string.h>
#include "grace.h"
#include "codegen/cg_matmul.h"

int main(void) {
  char err[256];
  grace_vm *vm = grace_vm_new(&(grace_config){0}, err, sizeof err);
  if (!vm) { fprintf(stderr, "no VM: %s\n", err); return 1; }
  grace_dtype dts[2] = {GRACE_FLOAT32, GRACE_BFLOAT16};
  int first = 1;
  for (int t = 0; t < 2; t++)
    for (int wpr = 1; wpr <= 2; wpr++)
      for (int pf = 0; pf < 2; pf++) {
        cg_mm_desc d;
        memset(&d, 0, sizeof d);
        d.form = CG_MM_GEMV_NT; d.dt = d.out_dt = dts[t]; d.a_kmajor = d.b_kmajor = 1;
        d.vec = t ? 8 : 4; d.mtile = 1; d.wpr = wpr; d.a_vec = 1; d.prefetch = pf;
        cg_kernel k;
        if (cg_matmul_source(vm, &d, &k)) { fprintf(stderr, "%s\n", grace_last_error(vm)); return 1; }
        /* the prelude and helpers once (the helpers are guarded; the prelude is not) */
        fputs(first ? k.src : strstr(k.src, "/* gmm_"), stdout);
        first = 0;
        printf("#define GRACE_GEMV_%s_W%d_P%d %s\n", t ? "BF16" : "F32", wpr, pf, k.name);
        cg_kernel_free(vm, &k);
      }
  for (int t = 0; t < 2; t++)
    for (int kk = 768; kk <= 3072; kk *= 4) {
      cg_mm_desc d;
      memset(&d, 0, sizeof d);
      d.form = CG_MM_GEMV_RW; d.dt = d.out_dt = dts[t]; d.a_kmajor = d.b_kmajor = 1;
      d.vec = t ? 8 : 4; d.mtile = 1; d.a_vec = 1;
      d.rl = kk / (32 * d.vec); d.rc = 2 * d.rl <= 12 ? 2 : 1;   /* as gpu/gpu_matmul.c picks them */
      cg_kernel k;
      if (cg_matmul_source(vm, &d, &k)) { fprintf(stderr, "%s\n", grace_last_error(vm)); return 1; }
      fputs(strstr(k.src, "/* gmm_"), stdout);
      printf("#define GRACE_GEMV_RW_%s_K%d %s\n#define GRACE_GEMV_RW_%s_K%d_RC %d\n", t ? "BF16" : "F32", kk, k.name,
             t ? "BF16" : "F32", kk, d.rc);
      cg_kernel_free(vm, &k);
    }
  grace_vm_free(vm);
  return 0;
}
