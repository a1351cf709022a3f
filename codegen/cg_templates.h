/* cg_templates.h: the CUDA template texts of the codegen/ .cuh files, one string a section (`//@ name` gives
 * cg_src_name), generated into $(BUILD)/obj/cg_templates.c by tools/bin2c.c -s and linked into libgrace. */
#ifndef GRACE_CG_TEMPLATES_H
#define GRACE_CG_TEMPLATES_H

/* cg_prelude.cuh */
extern const char cg_src_prelude[];
/* cg_fused.cuh */
extern const char cg_src_fused_helpers[];
/* cg_matmul.cuh, cg_matmul_gemm.cuh */
extern const char cg_src_matmul_helpers[];
extern const char cg_src_matmul_helpers_wg[];
extern const char cg_src_matmul_wgmma[];
extern const char cg_src_matmul_dot_avec[];
extern const char cg_src_matmul_dot[];
extern const char cg_src_matmul_norm[];
extern const char cg_src_matmul_gemv_nt[];
extern const char cg_src_matmul_gemv_nn[];
extern const char cg_src_matmul_gemv_rw[];
extern const char cg_src_matmul_splitk[];
extern const char cg_src_matmul_end[];
extern const char cg_src_matmul_gemm_wg[];
extern const char cg_src_matmul_gemm_simt[];
extern const char cg_src_matmul_gemm_tc[];
/* cg_ops.cuh */
extern const char cg_src_ops_common[];
extern const char cg_src_ops_copy[];
extern const char cg_src_ops_cat[];
extern const char cg_src_ops_fill[];
extern const char cg_src_ops_tri[];
extern const char cg_src_ops_icheck[];
extern const char cg_src_ops_nz[];
extern const char cg_src_ops_iadd[];
extern const char cg_src_ops_imove[];
extern const char cg_src_ops_create[];
/* cg_ops_rows.cuh */
extern const char cg_src_ops_block_sum[];
extern const char cg_src_ops_sort_key[];
extern const char cg_src_ops_cumsum[];
extern const char cg_src_ops_softmax[];
extern const char cg_src_ops_norm[];
extern const char cg_src_ops_sort[];
extern const char cg_src_ops_select[];
/* cg_ops_attn.cuh */
extern const char cg_src_ops_cluster[];
extern const char cg_src_ops_attn_common[];
extern const char cg_src_ops_attn_tiled[];
extern const char cg_src_ops_attn_stage[];
extern const char cg_src_ops_attn_tiled_tail[];
extern const char cg_src_ops_attn_decode[];
extern const char cg_src_ops_attn_rows[];

#endif
