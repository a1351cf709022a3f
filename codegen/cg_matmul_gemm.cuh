// cg_matmul_gemm.cuh: the GEMM bodies of the matmul kernels (cg_matmul.c): Hopper wgmma, FFMA (SIMT) and mma.sync
// tensor cores. As the GEMV bodies of cg_matmul.cuh, each runs after the generated entry block, specialised by the
// MM_* #defines. Format: see cg_prelude.cuh.

// Hopper tensor-core GEMM (sm_90a): A k-major, B k-major or n-major, fp32 accumulators in registers. First written
// and checked in bench/gemm_wgmma.cu; its rate against cuBLASLt is in bench/RESULTS.md. The descriptors and barrier
// addresses are built once, outside the k loop: nothing but the offsets' additions stands between a stage's arrival
// and its wgmma.
//@ matmul_gemm_wg
  /* 128x128 tile of C per block: warpgroups 0 and 1 compute 64 rows each (wgmma m64n128k16 from shared memory),
     warpgroup 2's first thread feeds a MM_WGS-stage ring of 128x64 tiles of A and B through TMA (128-byte swizzle,
     zeros past the edges), one mbarrier pair a stage */
  extern __shared__ unsigned char mm_wsm[];
  unsigned short *sA = (unsigned short *)(((unsigned long long)mm_wsm + 1023) & ~1023ull), *sB = sA + MM_WGS * 128 * 64;
  __shared__ __attribute__((aligned(8))) unsigned long long full[MM_WGS], empty[MM_WGS];
  const int wg = threadIdx.x >> 7, tid = threadIdx.x & 127, warp = tid >> 5, lane = tid & 31;
  const long long m0 = (long long)blockIdx.y * 128, n0 = (long long)blockIdx.x * 128;
  const int KT = (int)((K + 63) / 64);
  if (threadIdx.x == 0) {
    for (int s = 0; s < MM_WGS; s++) { mm_mbar_init(&full[s], 1); mm_mbar_init(&empty[s], 8); }
    asm volatile("fence.mbarrier_init.release.cluster;" ::: "memory");
  }
  __syncthreads();
  const unsigned full_a = mm_smem_addr(full), empty_a = mm_smem_addr(empty);   /* 8 bytes a stage */
  if (wg == 2) {
    if (tid == 0)
      for (int kt = 0; kt < KT; kt++) {
        const int s = kt % MM_WGS;
        if (kt >= MM_WGS) mm_mbar_wait(empty_a + 8 * s, (kt / MM_WGS - 1) & 1);
        mm_mbar_expect(&full[s], 2 * 128 * 64 * 2);
        mm_tma_load(sA + s * 128 * 64, &p.ta, kt * 64, (int)m0, &full[s]);
#if MM_BK
        mm_tma_load(sB + s * 128 * 64, &p.tb, kt * 64, (int)n0, &full[s]);
#else   /* B [K, N]: two boxes of 64 k-rows x 64 columns, side by side in n */
        mm_tma_load(sB + s * 128 * 64, &p.tb, (int)n0, kt * 64, &full[s]);
        mm_tma_load(sB + s * 128 * 64 + 64 * 64, &p.tb, (int)n0 + 64, kt * 64, &full[s]);
#endif
      }
    return;
  }
  float d[64];
#pragma unroll
  for (int i = 0; i < 64; i++) d[i] = 0.0f;
  /* descriptors built once: a stage (16384 bytes) or a k step further is an offset in 16-byte units added to the
     address field, so nothing but the additions sits between a stage's arrival and its wgmma */
  const unsigned long long da = mm_sdesc(sA + wg * 64 * 64, 16);
#if MM_BK
  const unsigned long long db = mm_sdesc(sB, 16), dbk = 2;     /* 16 elements: 32 bytes along the rows */
#else
  const unsigned long long db = mm_sdesc(sB, 8192), dbk = 128; /* 16 rows of 128 bytes */
#endif
  for (int kt = 0; kt < KT; kt++) {
    const int s = kt % MM_WGS;
    mm_mbar_wait(full_a + 8 * s, (kt / MM_WGS) & 1);
    asm volatile("wgmma.fence.sync.aligned;" ::: "memory");
#pragma unroll
    for (int kk = 0; kk < 4; kk++)
      mm_wgmma<1 - MM_BK>(d, da + s * 1024 + kk * 2, db + s * 1024 + kk * dbk);
    asm volatile("wgmma.commit_group.sync.aligned;" ::: "memory");
    /* all of this stage's wgmma done before it goes back (keeping one group in flight was slower) */
    asm volatile("wgmma.wait_group.sync.aligned 0;" ::: "memory");
    if (lane == 0) mm_mbar_arrive(empty_a + 8 * s);
  }
  /* the accumulators: warp w of the warpgroup holds rows 16w..16w+15; registers 4j..4j+3 are columns
     8j + 2 (lane % 4) + {0, 1} of rows lane / 4 and lane / 4 + 8: stored in pairs where N is even and C aligned */
  const long long r = m0 + wg * 64 + warp * 16 + (lane >> 2);
  const bool pairs = (N & 1) == 0 && ((unsigned long long)C_ & (2 * sizeof(MM_OT) - 1)) == 0;
#pragma unroll
  for (int h = 0; h < 2; h++) {
    const long long m = r + h * 8;
    if (m >= M) continue;
    MM_OT *row = C_ + (bi * M + m) * N;
#pragma unroll
    for (int j = 0; j < 16; j++) {
      const long long n = n0 + j * 8 + (lane & 3) * 2;
      if (pairs && n + 1 < N) {
#if MM_PLAIN   /* no epilogue: the hardware's paired conversion */
        MM_STORE2F(row + n, d[4 * j + 2 * h], d[4 * j + 2 * h + 1]);
#else
        float o0, o1;
        MM_EPV(d[4 * j + 2 * h], m, n, o0);
        MM_EPV(d[4 * j + 2 * h + 1], m, n + 1, o1);
        mm_store2(row + n, MM_STO(o0), MM_STO(o1));
#endif
      } else {
        if (n < N) { MM_EPI(d[4 * j + 2 * h], m, n); }
        if (n + 1 < N) { MM_EPI(d[4 * j + 2 * h + 1], m, n + 1); }
      }
    }
  }

// FFMA GEMM: 128x128 tiles over k steps of 8, 8x8 outputs per thread; operands are read through their
// strides (converted to float on the way into shared memory), so any layout and dtype works.
//@ matmul_gemm_simt
  __shared__ float As[8][128 + 4], Bs[8][128 + 4];
  const int t = threadIdx.x, tx = t & 15, ty = t >> 4;
  const long long m0 = (long long)blockIdx.y * 128, n0 = (long long)blockIdx.x * 128;
  const MM_T *a = A_ + offA, *b = B_ + offB;
  float acc[8][8];
#pragma unroll
  for (int i = 0; i < 8; i++)
#pragma unroll
    for (int j = 0; j < 8; j++) acc[i][j] = 0.0f;
  for (long long k0 = 0; k0 < K; k0 += 8) {
#pragma unroll
    for (int r = 0; r < 4; r++) {
      const int e = t + r * 256;
#if MM_AK
      const int mm = e >> 3, kk = e & 7;
#else
      const int mm = e & 127, kk = e >> 7;
#endif
      const long long gm = m0 + mm, gk = k0 + kk;
      As[kk][mm] = gm < M && gk < K ? MM_LD(a[gm * A_SM + gk * A_SK]) : 0.0f;
#if MM_BK
      const int nn = e >> 3, kb = e & 7;
#else
      const int nn = e & 127, kb = e >> 7;
#endif
      const long long gn = n0 + nn, gkb = k0 + kb;
      Bs[kb][nn] = gn < N && gkb < K ? MM_LD(b[gkb * B_SK + gn * B_SN]) : 0.0f;
    }
    __syncthreads();
#pragma unroll
    for (int kk = 0; kk < 8; kk++) {
      float ar[8], br[8];
#pragma unroll
      for (int i = 0; i < 4; i++) {
        ar[i] = As[kk][ty * 4 + i]; ar[4 + i] = As[kk][64 + ty * 4 + i];
        br[i] = Bs[kk][tx * 4 + i]; br[4 + i] = Bs[kk][64 + tx * 4 + i];
      }
#pragma unroll
      for (int i = 0; i < 8; i++)
#pragma unroll
        for (int j = 0; j < 8; j++) acc[i][j] = fmaf(ar[i], br[j], acc[i][j]);
    }
    __syncthreads();
  }
#pragma unroll
  for (int i = 0; i < 8; i++) {
    const long long m = m0 + (i < 4 ? ty * 4 + i : 64 + ty * 4 + i - 4);
#pragma unroll
    for (int j = 0; j < 8; j++) {
      const long long n = n0 + (j < 4 ? tx * 4 + j : 64 + tx * 4 + j - 4);
      if (m < M && n < N) { MM_EPI(acc[i][j], m, n); }
    }
  }

// Tensor-core GEMM: 128x128x32 block tiles, 8 warps of 64x32 (tile 0) or 4 warps of 64x64 (tile 1), mma.sync
// m16n8k16 with fp32 accumulators. Tiles keep the operands' global layout in shared memory (rows padded by 8 halves
// so ldmatrix is free of bank conflicts); ldmatrix (.trans for m- or n-contiguous operands) builds the fragments.
// cp.async fills STAGES-1 tiles ahead; out-of-range 16-byte chunks are zero-filled.
//@ matmul_gemm_tc
#if MM_AK
#define MM_ALD 40
#define MM_AEL (128 * 40)
#else
#define MM_ALD 136
#define MM_AEL (32 * 136)
#endif
#if MM_BK
#define MM_BLD 40
#define MM_BEL (128 * 40)
#else
#define MM_BLD 136
#define MM_BEL (32 * 136)
#endif
  extern __shared__ __attribute__((aligned(16))) unsigned short mm_sm[];
  unsigned short *As = mm_sm, *Bs = mm_sm + MM_STAGES * MM_AEL;
  const int t = threadIdx.x, lane = t & 31, warp = t >> 5, wm = warp / MM_TCW, wn = warp % MM_TCW;
  const long long m0 = (long long)blockIdx.y * 128, n0 = (long long)blockIdx.x * 128;
  const MM_T *a = A_ + offA, *b = B_ + offB;
  const int KT = (int)((K + 31) / 32);
  float acc[4][MM_TCNJ][4];
#pragma unroll
  for (int i = 0; i < 4; i++)
#pragma unroll
    for (int j = 0; j < MM_TCNJ; j++)
#pragma unroll
      for (int e = 0; e < 4; e++) acc[i][j][e] = 0.0f;
#if MM_AK
#define MM_LOAD_A(st, k0) for (int r = 0; r < 512 / MM_TCT; r++) { const int c = t + r * MM_TCT, row = c >> 2, col = (c & 3) * 8; \
    const long long gm = m0 + row, gk = (k0) + col; const bool ok = gm < M && gk < K; \
    mm_cp16(mm_smem_addr(As + (st) * MM_AEL + row * MM_ALD + col), ok ? (const void *)(a + gm * A_SM + gk) : (const void *)a, ok ? 16 : 0); }
#else
#define MM_LOAD_A(st, k0) for (int r = 0; r < 512 / MM_TCT; r++) { const int c = t + r * MM_TCT, row = c >> 4, col = (c & 15) * 8; \
    const long long gk = (k0) + row, gm = m0 + col; const bool ok = gm < M && gk < K; \
    mm_cp16(mm_smem_addr(As + (st) * MM_AEL + row * MM_ALD + col), ok ? (const void *)(a + gk * A_SK + gm) : (const void *)a, ok ? 16 : 0); }
#endif
#if MM_BK
#define MM_LOAD_B(st, k0) for (int r = 0; r < 512 / MM_TCT; r++) { const int c = t + r * MM_TCT, row = c >> 2, col = (c & 3) * 8; \
    const long long gn = n0 + row, gk = (k0) + col; const bool ok = gn < N && gk < K; \
    mm_cp16(mm_smem_addr(Bs + (st) * MM_BEL + row * MM_BLD + col), ok ? (const void *)(b + gn * B_SN + gk) : (const void *)b, ok ? 16 : 0); }
#else
#define MM_LOAD_B(st, k0) for (int r = 0; r < 512 / MM_TCT; r++) { const int c = t + r * MM_TCT, row = c >> 4, col = (c & 15) * 8; \
    const long long gk = (k0) + row, gn = n0 + col; const bool ok = gn < N && gk < K; \
    mm_cp16(mm_smem_addr(Bs + (st) * MM_BEL + row * MM_BLD + col), ok ? (const void *)(b + gk * B_SK + gn) : (const void *)b, ok ? 16 : 0); }
#endif
  for (int s = 0; s < MM_STAGES - 1; s++) {
    if (s < KT) { MM_LOAD_A(s, (long long)s * 32); MM_LOAD_B(s, (long long)s * 32); }
    mm_cp_commit();
  }
  for (int kt = 0; kt < KT; kt++) {
    mm_cp_wait<MM_STAGES - 2>();
    __syncthreads();
    {
      const int nk = kt + MM_STAGES - 1;
      if (nk < KT) { MM_LOAD_A(nk % MM_STAGES, (long long)nk * 32); MM_LOAD_B(nk % MM_STAGES, (long long)nk * 32); }
      mm_cp_commit();
    }
    const unsigned short *as = As + (kt % MM_STAGES) * MM_AEL, *bs = Bs + (kt % MM_STAGES) * MM_BEL;
#pragma unroll
    for (int kk = 0; kk < 32; kk += 16) {
      unsigned af[4][4], bfr[MM_TCNJ][2];
#pragma unroll
      for (int mi = 0; mi < 4; mi++) {
#if MM_AK
        mm_ldsm4(mm_smem_addr(as + (wm * 64 + mi * 16 + (lane & 15)) * MM_ALD + kk + (lane >> 4) * 8), af[mi]);
#else
        mm_ldsm4t(mm_smem_addr(as + (kk + (lane & 7) + (lane >> 4) * 8) * MM_ALD + wm * 64 + mi * 16 + ((lane >> 3) & 1) * 8), af[mi]);
#endif
      }
#pragma unroll
      for (int p = 0; p < MM_TCNJ / 2; p++) {
        unsigned r[4];
#if MM_BK
        mm_ldsm4(mm_smem_addr(bs + (wn * MM_TCNJ * 8 + p * 16 + (lane & 7) + (lane >> 4) * 8) * MM_BLD + kk + ((lane >> 3) & 1) * 8), r);
#else
        mm_ldsm4t(mm_smem_addr(bs + (kk + (lane & 7) + ((lane >> 3) & 1) * 8) * MM_BLD + wn * MM_TCNJ * 8 + p * 16 + (lane >> 4) * 8), r);
#endif
        bfr[2 * p][0] = r[0]; bfr[2 * p][1] = r[1]; bfr[2 * p + 1][0] = r[2]; bfr[2 * p + 1][1] = r[3];
      }
#pragma unroll
      for (int mi = 0; mi < 4; mi++)
#pragma unroll
        for (int nj = 0; nj < MM_TCNJ; nj++) MM_MMA(acc[mi][nj], af[mi], bfr[nj][0], bfr[nj][1]);
    }
  }
  mm_cp_wait<0>();
#pragma unroll
  for (int mi = 0; mi < 4; mi++)
#pragma unroll
    for (int nj = 0; nj < MM_TCNJ; nj++)
#pragma unroll
      for (int e = 0; e < 4; e++) {
        const long long m = m0 + wm * 64 + mi * 16 + (lane >> 2) + (e >> 1) * 8;
        const long long n = n0 + wn * MM_TCNJ * 8 + nj * 8 + (lane & 3) * 2 + (e & 1);
        if (m < M && n < N) { MM_EPI(acc[mi][nj][e], m, n); }
      }
#undef MM_LOAD_A
#undef MM_LOAD_B
#undef MM_ALD
#undef MM_AEL
#undef MM_BLD
#undef MM_BEL
