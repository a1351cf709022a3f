/* cg_matmul.h: CUDA sources of grace's matrix products: GEMV/skinny kernels (few rows of the left operand:
 * stream the weight once), a tensor-core GEMM (mma.sync m16n8k16, bf16/f16, fp32 accumulate, cp.async
 * pipeline), an exact FFMA-tiled SIMT GEMM (fp32, and any layout), the split-K reduction, each with a fused
 * pointwise epilogue. The products are C[b, m, n] = sum_k A[b, m, k] B[b, k, n] with up to 3 batch dims
 * (broadcast ones have stride 0); C is contiguous [batch..., M, N].
 *
 * Parameter struct of every kernel here (codegen/cg.h's convention):
 *   pointers: A, B, C (the output, or unused), WS (float32 split-K partials, or unused), E0..E<nop-1>
 *             (the epilogue's tensor operands), then with a norm prologue (desc norm) its weight NW and bias NB
 *             (either unused where absent);
 *   words:    CG_MM_NWORDS fixed words (enum cg_mm_word), then CG_MM_OPWORDS per tensor operand
 *             (its strides along m, n and the 3 batch dims);
 *   scalars:  one double per scalar operand of the epilogue. */
#ifndef GRACE_CG_MATMUL_H
#define GRACE_CG_MATMUL_H

#include "codegen/cg.h"

#define CG_MM_MAX_EPI 8       /* epilogue steps */
#define CG_MM_MAX_OPS 4       /* tensor operands of the epilogue */
#define CG_MM_MAX_SCALARS 4
#define CG_MM_BATCH 3         /* batch dims after folding */

enum cg_mm_word {
  CG_MM_M, CG_MM_N, CG_MM_K, CG_MM_NB, CG_MM_BD0, CG_MM_BD1, CG_MM_BD2,
  CG_MM_A_SM, CG_MM_A_SK, CG_MM_A_B0, CG_MM_A_B1, CG_MM_A_B2,
  CG_MM_B_SK, CG_MM_B_SN, CG_MM_B_B0, CG_MM_B_B1, CG_MM_B_B2,
  CG_MM_SPLITS, CG_MM_KCHUNK,
  CG_MM_NWORDS
};
enum { CG_MM_OPWORDS = 5 };   /* per operand: sm, sn, b0, b1, b2 */

typedef enum cg_mm_form {
  CG_MM_GEMV_NT,    /* few rows, B's k contiguous (x @ W:t() with W [N, K]): a warp per output column */
  CG_MM_GEMV_NN,    /* few rows, B's n contiguous (x @ W with W [K, N]): a thread per vector of columns */
  CG_MM_GEMM_TC,    /* tensor cores, 128x128x32 tiles, 3-stage cp.async; bf16/f16 */
  CG_MM_GEMM_SIMT,  /* FFMA 128x128x8 tiles, any strides, any float dtype */
  CG_MM_SPLITK,     /* sums the float32 partials of a split-K GEMV and applies the epilogue */
  CG_MM_GEMV_RW,    /* few rows, B's k contiguous, K short: a warp per rc columns holds them in registers, loaded
                       before it waits on the previous kernel (only where no kernel still running writes B) */
  CG_MM_GEMM_WG     /* Hopper (sm_90a) tensor cores: TMA into a 4-stage ring, wgmma 64x128x16 per warpgroup, 128x128
                       tiles; f16/bf16, A k-major, B either, one matrix (nb 1), tensor maps in the parameter struct */
} cg_mm_form;

/* One step of the epilogue chain: a pointwise op whose row in ir/ir_pointwise.h has an epilogue template (unary on
 * the accumulator, or binary with one operand), or GRACE_OP_CAST, which only rounds to the step's dtype. */
typedef struct cg_epi_step {
  int op;               /* GRACE_OP_* */
  int operand;          /* binary ops: tensor operand index, or -1 - scalar index */
  grace_dtype dtype;    /* the step's result dtype (f32, f16, bf16): the value is rounded to it */
  int flag;             /* the op's attrs.flag (gelu: the tanh approximation) */
  int reversed;         /* binary ops: operand op value (else value op operand) */
} cg_epi_step;

typedef struct cg_mm_desc {
  cg_mm_form form;
  grace_dtype dt;       /* A and B */
  grace_dtype out_dt;   /* C: the epilogue's last dtype */
  int a_kmajor;         /* A's k stride is 1 (else its m stride is: GEMM_TC only; the others take any) */
  int b_kmajor;         /* B's k stride is 1 (else its n stride is: GEMM_TC only) */
  int vec;              /* GEMV: elements of B per vector load (16 bytes), or 1 */
  int a_vec;            /* GEMV_NT: A rows loaded as vectors too (k contiguous, aligned) */
  int mtile;            /* GEMV_NT/NN: rows of A accumulated per pass (1..16); GEMV_RW: the most rows M may have
                         * (a compile-time bound of its loop over rows) */
  int tile;             /* GEMM_TC: 0: 8 warps of 64x32, 3 stages; 1: 4 warps of 64x64, 4 stages */
  int wpr;              /* GEMV_NT: warps sharing one output column (1, 2, 4: short rows, few columns) */
  int split;            /* GEMV: writes partials to WS (the epilogue runs in CG_MM_SPLITK) */
  int prefetch;         /* GEMV_NT: pull the weight into L2 before waiting on the previous kernel (a grid
                           of one wave: its blocks are resident while that kernel drains) */
  int rl, rc;           /* GEMV_RW: 16-byte vectors of a column per lane (K <= rl * 32 * vec), columns per warp */
  int rw_late;          /* GEMV_RW: weights loaded after griddepcontrol.wait (B not settled: a kernel still running
                         * may write it) */
  int indirect;
  int pred;             /* predicated (cg_pred_params) */
  int norm;             /* GEMV_NT/GEMV_RW: A is the input of a norm the kernel applies as it reads A (CG_MM_NORM_*),
                         * its weight and bias (norm_w, norm_b: present) in the pointers NW, NB after the operands' */
  int norm_w, norm_b;
  double eps;           /* the norm's epsilon, written into the source */
  int nop;              /* tensor operands */
  grace_dtype op_dtypes[CG_MM_MAX_OPS];
  int nscalar;
  int nepi;
  cg_epi_step epi[CG_MM_MAX_EPI];
} cg_mm_desc;

enum { CG_MM_NORM_NONE, CG_MM_NORM_LAYER, CG_MM_NORM_RMS };

/* Pointer words at the start of d's parameters: A, B, C, WS, the operands', and NW, NB with a norm. */
static inline int cg_matmul_nptrs(const cg_mm_desc *d) { return 4 + d->nop + (d->norm ? 2 : 0); }

/* Fills k (name, kind, indirect, variant, src) with the kernel of d; the name is derived from d so equal
 * descriptions give equal sources. GRACE_EUNSUPPORTED for a combination no kernel covers. */
grace_status cg_matmul_source(grace_vm *vm, const cg_mm_desc *d, cg_kernel *k);
/* Whether d's kernel places its own griddepcontrol.wait (the GEMVs: after their weights start streaming) instead of
 * waiting on entry (cg_pdl_enter) as every other generated kernel does. */
static inline int cg_matmul_waits_late(const cg_mm_desc *d) {
  return d->form == CG_MM_GEMV_NT || d->form == CG_MM_GEMV_RW;
}

/* Launch geometry: tensor-core tiles (threads and stages depend on desc.tile) */
enum { CG_MM_TC_BM = 128, CG_MM_TC_BN = 128, CG_MM_TC_BK = 32 };
enum { CG_MM_SIMT_BM = 128, CG_MM_SIMT_BN = 128, CG_MM_SIMT_THREADS = 256 };
enum { CG_MM_NT_WARPS = 4, CG_MM_NN_COLS = 32, CG_MM_NN_KSLICES = 8 };
/* GEMM_WG: 2 consumer warpgroups and a producer; 4 stages of 128x64 A and B tiles, aligned to 1024 bytes */
enum { CG_MM_WG_THREADS = 384, CG_MM_WG_STAGES = 4, CG_MM_WG_SMEM = CG_MM_WG_STAGES * 2 * 128 * 64 * 2 + 1024 };
/* GEMM_WG's parameter struct ends in two 128-byte tensor maps at the first 64-byte boundary after the words (in
 * uint64 words: the index of the first map); cg_launch words from there hold them. */
int cg_matmul_wg_maps(int nwords);
/* GEMV_RW: most 16-byte weight vectors a lane holds (rl * rc): 96 registers, so K <= 3072 in fp32, 6144 in bf16 */
enum { CG_MM_RW_MAX_VECS = 24 };

/* Dynamic shared memory of a GEMM_TC kernel. */
unsigned cg_matmul_tc_smem(const cg_mm_desc *d);
/* Fills grid/block/smem of l for d and the words already packed in l (M, N, K, NB, SPLITS). */
void cg_matmul_geometry(const cg_mm_desc *d, cg_launch *l);

#endif
