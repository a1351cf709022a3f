/* cg_fused.h: CUDA kernels for fused POINTWISE and ROW groups (ir/ir_fuse.h). The host side is split in three:
 * cg_fused_io finds what a group reads (external tensors) and what it stores; cg_fused_plan looks at the actual
 * tensors and decides everything the source depends on (a cg_fused_spec: layout classes, coalesced rank, vector
 * width, index width, row strategy) plus the per-launch geometry; cg_fused_generate writes the kernel for
 * (group, spec) -- deterministic, so equal specs give byte-identical sources -- and cg_fused_pack fills the launch.
 *
 * Kernel arguments (codegen/cg.h convention): tensor pointers a0.. = the externals in io order, then the stored
 * values in io order, then (a split row: cg_fused_split) the workspace; words:
 *   POINTWISE: n, sizes[ndim], then strides[ndim] of each STRIDED external, then of each CG_PARTIAL stored
 *        value (iteration order, coalesced).
 *   ROW: rows, inner, sizes[ndim] (kept dims then reduced dims), strides[ndim] of each external, then
 *        strides[ndim] of each stored value over the base shape (values of the reduced shape are stored at the
 *        row index; a stride 0 where a CG_PARTIAL value is broadcast), then (a split row) nchunk. */
#ifndef GRACE_CG_FUSED_H
#define GRACE_CG_FUSED_H

#include "codegen/cg.h"
#include "ir/ir.h"
#include "ir/ir_fuse.h"

/* Layout classes of external operands (and of stored values: CG_LINEAR, or CG_PARTIAL for a value smaller than the
 * iteration shape, which the kernel computes on every element it is broadcast over and stores from those whose
 * coordinates are 0 along the broadcast dims). */
enum { CG_LINEAR = 0, CG_SCALAR = 1, CG_STRIDED = 2, CG_PARTIAL = 3 };
/* ROW strategy: a warp per row, a block per row, or a row split over several blocks (few rows, long ones): each
 * block folds its chunk into a partial state in a workspace and the partials are combined in a fixed order, so
 * results do not depend on timing. CG_ROW_SPLIT (one level of reductions, nothing stored over the row): the last
 * block of a row to finish (a counter per row) combines them and finishes the row. CG_ROW_SYNC (anything else:
 * softmax, layer_norm): every block of the row waits for all of them at each level (the same counter), combines
 * them itself and goes on over its own chunk; the blocks must all be resident at once, so it is launched
 * cooperatively with no more blocks than the device holds (cuda_coresident_blocks). */
enum { CG_ROW_WARP = 0, CG_ROW_BLOCK = 1, CG_ROW_SPLIT = 2, CG_ROW_SYNC = 3 };
/* A block's row passes read CG_ROW_UNROLL elements a thread per step, so that many loads are in flight (a long
 * row of one block is otherwise bound by one load's latency); a warp's row keeps one a step. */
enum { CG_ROW_UNROLL = 4 };

typedef struct cg_group_io {
  int next, nstore;
  int32_t ext[CG_MAX_ARGS];      /* values read from outside the group (0-d tensors for dynamic scalars) */
  int32_t store[CG_MAX_ARGS];    /* member values stored (read elsewhere, returned, written back) */
} cg_group_io;

/* Everything a generated source depends on besides the group itself (memset to 0 before filling: it is
 * compared and hashed as bytes). */
typedef struct cg_fused_spec {
  int32_t kind;                  /* CG_POINTWISE or CG_ROW */
  int32_t indirect;
  int32_t ndim;                  /* POINTWISE: coalesced iteration rank; ROW: base rank */
  int32_t nkept;                 /* ROW: kept dims (the first nkept of the iteration order) */
  int32_t wide;                  /* 64-bit element indices */
  int32_t vec;                   /* POINTWISE: elements per vector access (1: scalar path only) */
  int32_t strategy;              /* ROW: CG_ROW_WARP, CG_ROW_BLOCK, CG_ROW_SPLIT or CG_ROW_SYNC */
  int32_t block;                 /* threads per block */
  int32_t inplace;               /* a copy_ member may store into storage the kernel also reads: no __restrict__,
                                    no read-only cache loads */
  uint8_t layout[CG_MAX_ARGS];   /* per external: CG_LINEAR / CG_SCALAR / CG_STRIDED (ROW: all strided); then per
                                    stored value (layout[next + s]): CG_LINEAR or CG_PARTIAL */
} cg_fused_spec;

/* The per-launch numbers cg_fused_pack needs. */
typedef struct cg_fused_geom {
  int64_t n;                     /* elements of the iteration shape */
  int64_t rows, inner;           /* ROW */
  int64_t nchunk;                /* a split row: blocks per row (CG_ROW_SYNC: the most; the launch may use fewer) */
  size_t ws_bytes;               /* a split row: workspace (zeroed before the launch): a counter per row, then
                                    the partial states, 8 bytes a field */
  int ndim;
  int64_t sizes[GRACE_MAX_DIMS];                     /* iteration order */
  int64_t ext_strides[CG_MAX_ARGS][GRACE_MAX_DIMS];   /* iteration order, 0 on broadcast dims */
  int64_t store_strides[CG_MAX_ARGS][GRACE_MAX_DIMS]; /* ROW: base-shape stores; POINTWISE: CG_PARTIAL stores;
                                                         iteration order, 0 on broadcast dims */
} cg_fused_geom;

/* Whether a row group of `rows` rows of `inner` elements splits each row over blocks on a device of `sms` SMs
 * (fewer rows than SMs, long ones; cg_fused_plan then also needs two chunks of 8192 elements at least). */
static inline int cg_fused_few_long_rows(int64_t rows, int64_t inner, int sms) {
  return rows < sms && inner >= 32768;
}

/* Whether the spec splits rows over blocks (a workspace argument and an nchunk word). */
static inline int cg_fused_split(const cg_fused_spec *s) {
  return s->kind == CG_ROW && (s->strategy == CG_ROW_SPLIT || s->strategy == CG_ROW_SYNC);
}

/* The group's external operands and stored values. GRACE_EUNSUPPORTED (with a message) for groups this
 * generator cannot lower (views of member values read inside the group, too many operands, ...). */
grace_status cg_fused_io(grace_vm *vm, const grace_ir *ir, const ir_fusion *f, int g, cg_group_io *io);

/* Chooses the spec and geometry from the externals' actual tensors (ext[k] for io->ext[k]; their sizes are the
 * IR types' sizes) and the device's SM count. */
grace_status cg_fused_plan(grace_vm *vm, const grace_ir *ir, const ir_fusion *f, int g, const cg_group_io *io,
                           const cg_tensor *ext, int indirect, int sms, cg_fused_spec *spec, cg_fused_geom *geom);

/* Writes the kernel (prelude included) into k (k->src owned; free with cg_kernel_free). */
grace_status cg_fused_generate(grace_vm *vm, const grace_ir *ir, const ir_fusion *f, int g, const cg_group_io *io,
                               const cg_fused_spec *spec, cg_kernel *k);

/* Fills the launch: ptrs are the device addresses of the args (externals, stores, workspace; offsets applied). With
 * indirect kernels the caller passes the addresses of the slots holding them instead. */
grace_status cg_fused_pack(grace_vm *vm, const cg_kernel *k, const cg_fused_spec *spec, const cg_fused_geom *geom,
                           const uint64_t *ptrs, int sms, cg_launch *out);

#endif
