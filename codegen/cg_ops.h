/* cg_ops.h: CUDA source templates for the ops that are not fused groups (data movement, scans, row
 * normalisations, creation, in-place writes). Each template is instantiated by dtype names and a variant into
 * one kernel following codegen/cg.h's calling convention; gpu/gpu_ops.c packs the parameter words documented
 * below and launches it.
 *
 * Word layouts (after the tensor pointers, in this order; "[16]" is an array of 16 words, unused entries 0;
 * dims are given innermost last; strides in elements):
 *   COPY    ptrs dst, src.            words n, nd, size[16], sstride[16], dstride[16]
 *                                     variant 1: both contiguous (only n is read)
 *   FILL    ptrs dst.                 words n, nd, size[16], dstride[16]; scalar: the value's bits (dst dtype)
 *   TRI     ptrs x (contiguous).      words n, rows, cols, k, upper
 *   ICHECK  ptrs idx, flag (i64).     words n, nd, size[16], istride[16], bound, base
 *                                     flag receives the smallest row-major position of an index outside [0, bound)
 *   IMOVE   ptrs dst, src, idx.       words n, nd, size[16], sstride[16], dstride[16], istride[16], len, lss, lds,
 *                                     lis, sq, dq, base: element (c, l) for c over size and l < len reads src at
 *                                     c.sstride + l*lss + q*sq and writes dst at c.dstride + l*lds + q*dq with
 *                                     q = idx[c.istride + l*lis] - base (the l loop runs in order: last write wins)
 *   CREATE  ptrs out (contiguous).    words n, w0, w1, w2, w3; scalars seed, offset. variant: CGO_ARANGE_F (w0 start,
 *                                     w1 step: double bits), CGO_ARANGE_I (w0 start, w1 step), CGO_LINSPACE (w0 start,
 *                                     w1 end, w2 step: double bits), CGO_EYE (w0 columns), CGO_RAND, CGO_RANDN,
 *                                     CGO_RANDINT (w0 low, w1 span)
 *   CUMSUM  ptrs out, x.              words rows, L, nd, size[16], xstride[16], ostride[16], xl, ol (the row dim is
 *                                     left out of size/strides; xl/ol are the strides along it)
 *   SOFTMAX as CUMSUM; variant bit 1: log_softmax, bit 2: compute in double, bit 4: a block per row (else a warp)
 *   NORM    ptrs y (contiguous), x, w, b.  words rows, D, nd, size[16], xstride[16], xl, wl, bl, eps (double bits);
 *                                     variant bit 1: weight, 2: bias, 4: rms, 8: compute in double,
 *                                     CGO_NORM_REGS: the row read once into registers (D at most
 *                                     CGO_NORM_REG * blockDim)
 *   SORT    ptrs vals, idx, x.        words rows, L, P (power of two >= L), k, nd, size[16], xstride[16],
 *                                     ostride[16], xl, ol, base, has_idx; variant bit 1: descending. Shared memory
 *                                     P * 12 bytes; one block per row. Variant bit 2: selection (topk of rows
 *                                     longer than CGO_SORT_MAX: k block-wide minimum rounds, no shared arrays).
 *   ATTN    ptrs out (contiguous), q, kt, v, mask (bool), scale (0-d).  words rows, M, N, D, Dv, nb, bsize[16],
 *                                     qb[16], kb[16], vb[16], mb[16] (batch dims and strides), qm, qd, kd, kn, vn,
 *                                     vd, mm, mn (matrix strides), fill (double bits); dtypes: out, q/kt/v, scale.
 *                                     Variant: CGO_ATTN_* bits. A block per query row, each warp chunks of 32
 *                                     keys (a lane per key's score) with a running maximum, merged in shared
 *                                     memory (blockDim / 32 * 258 elements of the compute type); Dv in chunks of
 *                                     256. Then R, C, kvec, vvec, scv for CGO_ATTN_TILED (float compute): a block of
 *                                     CGO_ATTN_THREADS per R query rows of one batch index, over chunks of C keys
 *                                     staged in shared memory (floats: C*KP + C*Dv + R*D + R*C + 3R +
 *                                     CGO_ATTN_THREADS, KP = D+4 when D and Dv are multiples of 4, else D+1; R*Dv
 *                                     at most CGO_ATTN_THREADS * CGO_ATTN_ACC); kvec/vvec: keys/values contiguous
 *                                     along D/Dv in 16-byte vectors (checked again against the pointers).
 *                                     CGO_ATTN_SVAL: the scale is the word scv (double bits), not a pointer.
 *                                     S: blocks per row tile, each over a 1/S share of the keys (1 unless
 *                                     CGO_ATTN_SPLIT: launched in clusters of S blocks, sm_90; rank 0 merges the
 *                                     others' maxima, sums and outputs through distributed shared memory; R*Dv
 *                                     at most CGO_ATTN_THREADS). CGO_ATTN_DECODE (float compute, one query row,
 *                                     M = 1): a block per row, warp w over key chunks w, w + nw, ... of 32, their
 *                                     rows loaded as 16-byte vectors (keys and values contiguous along D and Dv,
 *                                     kvec/vvec), the warps' states merged in shared memory (nw * Dv floats).
 *   CAT     ptrs dst, s0 .. s7 (one source dtype).  words n, k, start[8], base[8], nd[8], size[8][8], ss[8][8],
 *                                     ds[8][8]: k <= CGO_CAT_MAX strided copies in one launch (cat's and stack's
 *                                     pieces): piece t copies elements start[t] .. start[t+1] (start[k] = n) of
 *                                     the flat iteration from s_t over its own sizes and strides to dst + base[t]
 *                                     with strides ds[t]; at most CGO_CAT_MAXD dims a piece.
 *   NZ      ptrs out, m, x, cnt (i64).  words n, nd, size[16], ms[16], xs[16], base: the elements of m (over size,
 *                                     strides ms) that are nonzero, in row-major order, by one block (at most
 *                                     CGO_NZ_THREADS threads, each a contiguous run, their counts scanned in
 *                                     shared memory); cnt receives the count. Variant CGO_NZ_COUNT: only the
 *                                     count; CGO_NZ_POS: out (int64, [count, nd]) the positions + base;
 *                                     CGO_NZ_VALUES: out [count] the elements of x (strides xs) there.
 *                                     dtypes: out, m, x.
 *   IADD    ptrs dst, src, off (i64). words n, nd, size[16], ss[16], ds[16], is[16]: element c adds src at c.ss
 *                                     into dst at c.ds + off[c.is] atomically (dst float32, float64, int32 or
 *                                     int64: index_put_ with accumulate). */
#ifndef GRACE_CG_OPS_H
#define GRACE_CG_OPS_H

#include "codegen/cg.h"

#define CGO_MAXD 16          /* dims of a template's iteration (repeat views its result with 2 per input dim) */
#define CGO_SORT_MAX 8192      /* longest row the shared-memory sort takes; the backend runs longer ones on the host */
#define CGO_SELECT_MAXK 1024   /* largest k of a topk over longer rows (k selection passes over the row) */

typedef enum cgo_tmpl {
  CGO_COPY, CGO_FILL, CGO_TRI, CGO_ICHECK, CGO_IMOVE, CGO_CREATE, CGO_CUMSUM, CGO_SOFTMAX, CGO_NORM, CGO_SORT,
  CGO_ATTN, CGO_CAT, CGO_NZ, CGO_IADD, CGO_NTMPL
} cgo_tmpl;
enum { CGO_NZ_COUNT, CGO_NZ_POS, CGO_NZ_VALUES, CGO_NZ_THREADS = 1024 };
/* Whether the IADD template adds atomically into dt (float32, float64, int32, int64): the dtypes a device
 * index_put_ with accumulate takes; the backend runs the others on the host. */
static inline int cg_ops_iadd_dtype(grace_dtype dt) {
  return dt == GRACE_FLOAT32 || dt == GRACE_FLOAT64 || dt == GRACE_INT32 || dt == GRACE_INT64;
}

enum { CGO_ATTN_SCALE = 1, CGO_ATTN_DIV = 2, CGO_ATTN_MASK = 4, CGO_ATTN_KEEP = 8, CGO_ATTN_F64 = 16,
       CGO_ATTN_TILED = 32, CGO_ATTN_SVAL = 64, CGO_ATTN_SPLIT = 128, CGO_ATTN_DECODE = 256 };
/* The decode kernel (CGO_ATTN_DECODE): lanes a key row of K and of V (16-byte vectors, powers of two up to
 * CGO_ATTN_LANES_MAX) in variant bits 9-11 and 12-14 as log2; warps a block at most CGO_ATTN_DECODE_WARPS; keys at
 * most CGO_ATTN_DECODE_MAXN (longer rows split over a cluster with the tiled kernel). */
enum { CGO_ATTN_LK_SHIFT = 9, CGO_ATTN_LV_SHIFT = 12, CGO_ATTN_LANES_MAX = 16, CGO_ATTN_DECODE_WARPS = 8,
       CGO_ATTN_DECODE_MAXN = 512 };
enum { CGO_ATTN_THREADS = 256, CGO_ATTN_ACC = 8, CGO_ATTN_MAXS = 8 };   /* the tiled kernel: block size, outputs per
                                                                           * thread, blocks of a cluster split */
enum { CGO_CAT_MAX = 8, CGO_CAT_MAXD = 8 };   /* a CAT launch: pieces, dims a piece */
enum { CGO_NORM_REGS = 16, CGO_NORM_REG = 8 };   /* norm rows held in registers: variant bit, elements a thread */
enum { CGO_ARANGE_F, CGO_ARANGE_I, CGO_LINSPACE, CGO_EYE, CGO_RAND, CGO_RANDN, CGO_RANDINT, CGO_NCREATE };

/* Which kernel: dt[] are the dtypes of the template's pointers in order (COPY: dst, src; FILL/TRI/CREATE: the
 * tensor; ICHECK: idx; IMOVE: dst, src, idx; CUMSUM/SOFTMAX: out, x; NORM: y (= x), w, b; SORT: values). */
typedef struct cgo_spec {
  cgo_tmpl tmpl;
  grace_dtype dt[3];
  int variant;
  int indirect;
  int pred;          /* predicated (cg_pred_params) */
} cgo_spec;

/* Fills k (name, kind CG_OP, args, src) for spec; errors: GRACE_ENOMEM, GRACE_EARG for an invalid spec. */
grace_status cg_ops_source(grace_vm *vm, const cgo_spec *spec, cg_kernel *k);
const char *cg_ops_tmpl_name(cgo_tmpl t);
/* Number of tensor pointers (then words) in a template's parameter struct. */
int cg_ops_nptr(cgo_tmpl t);
/* Number of scalar words ending the struct (passed through pointers when indirect). */
int cg_ops_nscalar(cgo_tmpl t);

/* An attention's launch plan (the ATTN template): R query rows a block (halved from 16 while the row tiles would
 * not fill the SMs), S blocks a row tile splitting its keys (a cluster; only where clusters exist, the tiles are
 * fewer than half the SMs and each block keeps 16 keys), C keys a chunk (all of a block's keys, rounded up to 8, when
 * that fits smem_limit, else halved), the shared memory, and whether the tiled kernel takes it (float compute and
 * the chunk fits); otherwise the per-row kernel runs. */
typedef struct cgo_attn_plan {
  int64_t R, S, C, tiles;
  unsigned smem;
  int tiled;
} cgo_attn_plan;
void cg_ops_attn_plan(int64_t rows, int64_t M, int64_t N, int64_t D, int64_t Dv, int f64, int64_t sms,
                      int64_t smem_limit, int clusters, cgo_attn_plan *out);

#endif
