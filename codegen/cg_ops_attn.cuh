// cg_ops_attn.cuh: the attention kernels (the ATTN template of cg_ops.c): the tiled kernel, the decode kernel and
// the row kernel. Each body runs inside the generated entry (pointers out, q, kt, v, mask, sc and the parameter
// struct p) and is specialised by the #defines cg_ops.c writes before it: the variant's bits (CGO_ATTN_SCALE: the
// scale read through the 0-d tensor sc; CGO_ATTN_SVAL: the scale is the word scv, a host number passed by value;
// CGO_ATTN_DIV: scores divided by it, not multiplied; CGO_ATTN_MASK: masked where the mask is true, or with
// CGO_ATTN_KEEP where it is false; CGO_ATTN_F64; CGO_ATTN_SPLIT) and the kernels' sizes. Format: see cg_prelude.cuh.

// ATTN with CGO_ATTN_SPLIT: a cluster's barrier and loads of a peer's shared memory
//@ ops_cluster
__device__ __forceinline__ void cgo_cluster_sync() {
  asm volatile("barrier.cluster.arrive.release.aligned;\n\tbarrier.cluster.wait.acquire.aligned;" ::: "memory");
}
__device__ __forceinline__ float cgo_cluster_ld(const float *p, int rank) {
  unsigned a = cgo_saddr(p), r; float v;
  asm volatile("mapa.shared::cluster.u32 %0, %1, %2;" : "=r"(r) : "r"(a), "r"(rank));
  asm volatile("ld.shared::cluster.f32 %0, [%1];" : "=f"(v) : "r"(r) : "memory");
  return v;
}

// ATTN: CGO_ATTN_FIX(v, m), the score v scaled (when there is a scale) and masked by the mask element m: fill in
// place of a masked score
//@ ops_attn_common
#if CGO_ATTN_SCALE || CGO_ATTN_SVAL
#if CGO_ATTN_DIV
#define CGO_ATTN_SCALED(v) v = v / scale;
#else
#define CGO_ATTN_SCALED(v) v = v * scale;
#endif
#else
#define CGO_ATTN_SCALED(v)
#endif
#if CGO_ATTN_MASK && CGO_ATTN_KEEP
#define CGO_ATTN_MASKED(v, m) if (!(m != 0)) v = fill;
#elif CGO_ATTN_MASK
#define CGO_ATTN_MASKED(v, m) if ((m != 0)) v = fill;
#else
#define CGO_ATTN_MASKED(v, m)
#endif
#define CGO_ATTN_FIX(v, m) CGO_ATTN_SCALED(v) CGO_ATTN_MASKED(v, m)

// ATTN tiled (float compute): a block per R query rows of one batch index. Per chunk of C keys: keys and values
// staged in shared memory (ops_attn_stage, pasted after this for each), every score of the R x C tile from shared
// memory (key rows padded to D+4, read as float4: 8 lanes of a quarter-warp hit 8 distinct 16-byte slots; D+1 when
// D is not a multiple of 4), the rows' running maxima and sums updated by a warp each, then the outputs (row, dim)
// rescaled and accumulated. When R*Dv is less than the block, G = block / (R*Dv) threads share an output, each over
// every G-th key, and add up at the end (decode: one row of 64 dims, 4 threads each). Scores never reach global
// memory. Shared memory (floats): keys C*KP, values C*Dv, q R*D, probabilities R*C, max/sum/rescale 3R, the groups'
// sums CGO_ATTN_THREADS. With CGO_ATTN_SPLIT the keys are split over a cluster's S blocks (rank = block % S).
// This piece: the layout, the scale, the block's row tiles, q staged, then the chunks of keys
//@ ops_attn_tiled
  extern __shared__ __align__(16) unsigned char cgo_sh[];
  const int tid = threadIdx.x, nt = blockDim.x, lane = tid & 31, warp = tid >> 5, nw = nt >> 5;
  const int nR = (int)p.R, nC = (int)p.C, nD = (int)p.D, nDv = (int)p.Dv;
  const bool f4 = (nD & 3) == 0 && (nDv & 3) == 0;
  const int KP = f4 ? nD + 4 : nD + 1, nO = nR * nDv, G = nO < nt ? nt / nO : 1;
  const int grp = G > 1 ? tid / nO : 0, own = G > 1 ? tid - grp * nO : tid;
  float *ks = (float *)cgo_sh, *vs = ks + nC * KP, *qs = vs + nC * nDv, *ps = qs + nR * nD;
  float *ms = ps + nR * nC, *ls = ms + nR, *al = ls + nR, *red = al + nR;
  const float fill = (float)__longlong_as_double(p.fill), ninf = __int_as_float((int)0xff800000u);
  const long long tiles = (p.M + nR - 1) / nR, nblk = p.rows / p.M * tiles;
#if CGO_ATTN_SVAL
  const float scale = (float)__longlong_as_double(p.scv);
#elif CGO_ATTN_SCALE
  const float scale = (float)C_ldf(sc);
#endif
  const int nS = (int)p.S, rank = (int)(blockIdx.x % nS);
  const long long per = (p.N + nS - 1) / nS, kbeg = rank * per, kend = kbeg + per < p.N ? kbeg + per : p.N;
  for (long long blk = blockIdx.x / nS; blk < nblk; blk += gridDim.x / nS) {
    long long bb = blk / tiles, i0 = (blk % tiles) * nR, bo = bb, qo = 0, ko = 0, vo = 0, mo = 0;
    for (int d = (int)p.nb - 1; d >= 0; d--) {
      long long x = bo % p.bs[d]; bo /= p.bs[d];
      qo += x * p.qb[d]; ko += x * p.kb[d]; vo += x * p.vb[d]; mo += x * p.mb[d];
    }
    for (int e = tid; e < nR * nD; e += nt) { const int r = e / nD, d = e - r * nD;
      qs[e] = i0 + r < p.M ? Q_ldf(q + qo + (i0 + r) * p.qm + (long long)d * p.qd) : 0.0f; }
    if (tid < nR) { ms[tid] = ninf; ls[tid] = 0.0f; }
    float acc[CGO_ATTN_ACC];
#pragma unroll
    for (int t = 0; t < CGO_ATTN_ACC; t++) acc[t] = 0.0f;
    for (long long j0 = kbeg; j0 < kend; j0 += nC) {
      const int nj = kend - j0 < nC ? (int)(kend - j0) : nC;

// ATTN tiled: keys j0 .. j0+nj of one [keys, dims] operand into shared rows of CGO_S_LD floats, pasted for the keys
// and for the values with the CGO_S_* names cg_ops.c writes before each (operand CGO_S_PTR of role type CGO_S_T at
// offset CGO_S_BASE; CGO_S_DIMS dims of stride CGO_S_SD, keys of stride CGO_S_SJ; CGO_S_VEC: contiguous dims; into
// CGO_S_DST). 16-byte vectors along the dims when they are contiguous and aligned and the shared rows are too (f4:
// row lengths multiples of 4 floats; float32 (CGO_ATTN_KV_F32) goes by cp.async straight into shared memory, so every
// copy of the chunk is in flight at once), else one element per thread, the stride-1 dim fastest
//@ ops_attn_stage
    if (CGO_S_VEC && f4 && ((unsigned long long)(CGO_S_PTR + CGO_S_BASE) & 15) == 0) {
      const int V = 16 / (int)sizeof(CGO_S_T), per = CGO_S_DIMS / V;
#pragma unroll 8
      for (int e = tid; e < nj * per; e += nt) {
        const int j = e / per, c = e - j * per;
        const CGO_S_T *src = CGO_S_PTR + CGO_S_BASE + (j0 + j) * CGO_S_SJ + (long long)c * V;
#if CGO_ATTN_KV_F32
#if __CUDA_ARCH__ >= 800
        asm volatile("cp.async.cg.shared.global [%0], [%1], 16;" :: "r"(cgo_saddr(CGO_S_DST + j * CGO_S_LD + c * V)), "l"(src));
#else
        *(float4 *)(CGO_S_DST + j * CGO_S_LD + c * V) = *(const float4 *)src;
#endif
#else
        union { uint4 u; CGO_S_T x[16 / sizeof(CGO_S_T)]; } w;
        w.u = *(const uint4 *)src;
#pragma unroll
        for (int u = 0; u < V; u++) CGO_S_DST[j * CGO_S_LD + c * V + u] = CGO_S_LDF(&w.x[u]);
#endif
      }
    } else if (CGO_S_SJ == 1) {
#pragma unroll 4
      for (int e = tid; e < nj * CGO_S_DIMS; e += nt) { const int j = e % nj, d = e / nj;
        CGO_S_DST[j * CGO_S_LD + d] = CGO_S_LDF(CGO_S_PTR + CGO_S_BASE + (long long)d * CGO_S_SD + (j0 + j)); }
    } else {
#pragma unroll 4
      for (int e = tid; e < nj * CGO_S_DIMS; e += nt) { const int j = e / CGO_S_DIMS, d = e - j * CGO_S_DIMS;
        CGO_S_DST[j * CGO_S_LD + d] = CGO_S_LDF(CGO_S_PTR + CGO_S_BASE + (long long)d * CGO_S_SD + (j0 + j) * CGO_S_SJ); }
    }
#undef CGO_S_T
#undef CGO_S_LDF
#undef CGO_S_PTR
#undef CGO_S_BASE
#undef CGO_S_DIMS
#undef CGO_S_SD
#undef CGO_S_SJ
#undef CGO_S_VEC
#undef CGO_S_DST
#undef CGO_S_LD

// ATTN tiled, after the keys and values are staged: the scores of the R x C tile, scaled and masked; the rows'
// running maxima and sums, the outputs accumulated; then each output's value e (acc[t]) stored, or with
// CGO_ATTN_SPLIT each block's maxima, sums and unnormalised outputs merged by rank 0: every rank's three values are
// loaded before any is used, so the loads overlap (one round trip through the cluster, not 4 * S one after another)
//@ ops_attn_tiled_tail
#if CGO_ATTN_KV_F32 && __CUDA_ARCH__ >= 800
      asm volatile("cp.async.wait_all;" ::: "memory");
#endif
      __syncthreads();
      for (int e = tid; e < nR * nC; e += nt) {
        const int r = e / nC, j = e - r * nC;
        float sc_ = ninf;
        if (j < nj && i0 + r < p.M) {
          const float *qr = qs + r * nD, *kr = ks + j * KP;
          if (f4) {
            float a0 = 0.0f, a1 = 0.0f, a2 = 0.0f, a3 = 0.0f;
#pragma unroll 4
            for (int d = 0; d < nD; d += 4) {
              const float4 x = *(const float4 *)(qr + d), y = *(const float4 *)(kr + d);
              a0 += x.x * y.x; a1 += x.y * y.y; a2 += x.z * y.z; a3 += x.w * y.w;
            }
            sc_ = (a0 + a1) + (a2 + a3);
          } else {
            sc_ = 0.0f;
            for (int d = 0; d < nD; d++) sc_ += qr[d] * kr[d];
          }
          CGO_ATTN_FIX(sc_, mask[mo + (i0 + r) * p.mm + (j0 + j) * p.mn])
        }
        ps[e] = sc_;
      }
      __syncthreads();
      for (int r = warp; r < nR; r += nw) {
        float cm = ninf;
        for (int j = lane; j < nj; j += 32) cm = fmaxf(cm, ps[r * nC + j]);
        for (int o = 16; o; o >>= 1) cm = fmaxf(cm, __shfl_xor_sync(0xffffffffu, cm, o));
        const float mold = ms[r], mnew = fmaxf(mold, cm), a = mnew == ninf ? 1.0f : expf(mold - mnew);
        float sum = 0.0f;
        for (int j = lane; j < nj; j += 32) {
          const float x = ps[r * nC + j], e = x == ninf ? 0.0f : expf(x - mnew);
          ps[r * nC + j] = e; sum += e;
        }
        for (int o = 16; o; o >>= 1) sum += __shfl_xor_sync(0xffffffffu, sum, o);
        if (lane == 0) { ms[r] = mnew; ls[r] = ls[r] * a + sum; al[r] = a; }
      }
      __syncthreads();
      if (grp < G) {
#pragma unroll
        for (int t = 0; t < CGO_ATTN_ACC; t++) {
          const int e = own + t * nt;
          if (e >= nO) break;
          const int r = e / nDv, d = e - r * nDv;
          const float *pr = ps + r * nC;
          float s0 = acc[t] * al[r], s1 = 0.0f;
          int j = grp;
          for (; j + G < nj; j += 2 * G) { s0 += pr[j] * vs[j * nDv + d]; s1 += pr[j + G] * vs[(j + G) * nDv + d]; }
          if (j < nj) s0 += pr[j] * vs[j * nDv + d];
          acc[t] = s0 + s1;
        }
      }
      __syncthreads();
    }
    if (G > 1) {   /* the key groups' partial sums meet in shared memory */
      if (grp < G) red[grp * nO + own] = acc[0];
      __syncthreads();
      if (grp == 0) { float t_ = 0.0f; for (int g = 0; g < G; g++) t_ += red[g * nO + own]; acc[0] = t_; }
    }
    if (grp == 0) {
#pragma unroll
      for (int t = 0; t < CGO_ATTN_ACC; t++) {
        const int e = own + t * nt;
        if (e >= nO) break;
        const int r = e / nDv, d = e - r * nDv;
#if CGO_ATTN_SPLIT
        red[e] = acc[t];
      }
    }
    cgo_cluster_sync();
    if (rank == 0 && grp == 0 && own < nO && i0 + own / nDv < p.M) {
      const int r = own / nDv, d = own - r * nDv;
      float mq[CGO_ATTN_MAXS], lq[CGO_ATTN_MAXS], oq[CGO_ATTN_MAXS], gm = ninf, gl = 0.0f, go = 0.0f;
#pragma unroll
      for (int q = 0; q < CGO_ATTN_MAXS; q++)
        if (q < nS) { mq[q] = cgo_cluster_ld(ms + r, q); lq[q] = cgo_cluster_ld(ls + r, q); oq[q] = cgo_cluster_ld(red + own, q); }
#pragma unroll
      for (int q = 0; q < CGO_ATTN_MAXS; q++) if (q < nS) gm = fmaxf(gm, mq[q]);
#pragma unroll
      for (int q = 0; q < CGO_ATTN_MAXS; q++)
        if (q < nS) { const float w = mq[q] == ninf ? 0.0f : expf(mq[q] - gm); gl += lq[q] * w; go += oq[q] * w; }
      O_stf(out + (bb * p.M + i0 + r) * p.Dv + d, go / gl);
    }
    cgo_cluster_sync();   /* rank 0 has read the others' shared memory */
  }
#else
        if (i0 + r < p.M) O_stf(out + (bb * p.M + i0 + r) * p.Dv + d, acc[t] / ls[r]);
      }
    }
    __syncthreads();
  }
#endif

// ATTN decode: one query row against at most CGO_ATTN_DECODE_MAXN keys, a block per row, warp w over the chunks of
// 32 keys w, w + nw, ... Each chunk's key and value rows are loaded first, all at once (16-byte vectors: LK lanes a
// key row, KPW keys a step; a row not 16-byte aligned is read element by element), then the chunk's scores (a lane
// per key after the LK lanes' sum: partial dot products summed, then moved to the key's lane), its running maximum
// and sum, and the values' products accumulated by LV lanes a row. The warps' states merge in shared memory as the
// tiled kernel's blocks do. A chunk of masked keys only adds nothing; one with a NaN score goes on, so the row is NaN
// as on the CPU. At the end the key slots of each lane group hold parts of the same dims: summed across them; a
// warp that saw no key weighs 0 (times its sum: NaN stays NaN)
//@ ops_attn_decode
  enum { LK = CGO_ATTN_LK, KPW = 32 / LK, LV = CGO_ATTN_LV, VPW = 32 / LV, KE = 16 / (int)sizeof(K_t), VE = 16 / (int)sizeof(V_t) };
  __shared__ float sm_m[CGO_ATTN_DECODE_WARPS], sm_l[CGO_ATTN_DECODE_WARPS];
  extern __shared__ __align__(16) unsigned char cgo_sh[];
  float *sacc = (float *)cgo_sh;
  const int lane = threadIdx.x & 31, warp = threadIdx.x >> 5, nw = blockDim.x >> 5;
  const int kg = lane / LK, kc = lane % LK, vg = lane / LV, vc = lane % LV;
  const float fill = (float)__longlong_as_double(p.fill), ninf = __int_as_float((int)0xff800000u);
#if CGO_ATTN_SVAL
  const float scale = (float)__longlong_as_double(p.scv);
#elif CGO_ATTN_SCALE
  const float scale = (float)C_ldf(sc);
#endif
  for (long long bb = blockIdx.x; bb < p.rows; bb += gridDim.x) {
    long long bo = bb, qo = 0, ko = 0, vo = 0, mo = 0;
    for (int d = (int)p.nb - 1; d >= 0; d--) {
      long long x = bo % p.bs[d]; bo /= p.bs[d];
      qo += x * p.qb[d]; ko += x * p.kb[d]; vo += x * p.vb[d]; mo += x * p.mb[d];
    }
    const K_t *kb_ = kt + ko + kc * KE;
    const V_t *vb_ = v + vo + vc * VE;
    const bool kal = ((unsigned long long)kb_ & 15) == 0, val = ((unsigned long long)vb_ & 15) == 0;
    float qv[KE], acc[VE], m = ninf, l = 0.0f;
#pragma unroll
    for (int u = 0; u < KE; u++) qv[u] = Q_ldf(q + qo + (long long)(kc * KE + u) * p.qd);
#pragma unroll
    for (int u = 0; u < VE; u++) acc[u] = 0.0f;
    for (long long j0 = (long long)warp * 32; j0 < p.N; j0 += (long long)nw * 32) {
      union { uint4 u; K_t x[KE]; } kr[32 / KPW];
      union { uint4 u; V_t x[VE]; } vr[32 / VPW];
#pragma unroll
      for (int st = 0; st < 32 / KPW; st++) {
        const long long j = j0 + st * KPW + kg;
        kr[st].u.x = kr[st].u.y = kr[st].u.z = kr[st].u.w = 0u;
        if (j < p.N) {
          const K_t *src = kb_ + j * p.kn;
          if (kal) kr[st].u = *(const uint4 *)src;
          else {
#pragma unroll
            for (int u = 0; u < KE; u++) kr[st].x[u] = src[u];
          }
        }
      }
#pragma unroll
      for (int st = 0; st < 32 / VPW; st++) {
        const long long j = j0 + st * VPW + vg;
        vr[st].u.x = vr[st].u.y = vr[st].u.z = vr[st].u.w = 0u;
        if (j < p.N) {
          const V_t *src = vb_ + j * p.vn;
          if (val) vr[st].u = *(const uint4 *)src;
          else {
#pragma unroll
            for (int u = 0; u < VE; u++) vr[st].x[u] = src[u];
          }
        }
      }
      float sc = ninf;
#pragma unroll
      for (int st = 0; st < 32 / KPW; st++) {
        float part = 0.0f;
#pragma unroll
        for (int u = 0; u < KE; u++) part += qv[u] * K_ldf(&kr[st].x[u]);
#pragma unroll
        for (int o = 1; o < LK; o <<= 1) part += __shfl_xor_sync(0xffffffffu, part, o);
        const float got = __shfl_sync(0xffffffffu, part, (lane % KPW) * LK);
        if (lane / KPW == st) sc = got;
      }
      const long long jl = j0 + lane;
      if (jl < p.N) {
        CGO_ATTN_FIX(sc, mask[mo + jl * p.mn])
      } else sc = ninf;
      float cm = sc;
#pragma unroll
      for (int o = 16; o; o >>= 1) cm = fmaxf(cm, __shfl_xor_sync(0xffffffffu, cm, o));
      if (cm == ninf && !__any_sync(0xffffffffu, sc != sc)) continue;
      const float mn = fmaxf(m, cm), a = mn == ninf ? 1.0f : expf(m - mn), e = sc == ninf ? 0.0f : expf(sc - mn);
      float es = e;
#pragma unroll
      for (int o = 16; o; o >>= 1) es += __shfl_xor_sync(0xffffffffu, es, o);
      l = l * a + es;
      m = mn;
#pragma unroll
      for (int u = 0; u < VE; u++) acc[u] *= a;
#pragma unroll
      for (int st = 0; st < 32 / VPW; st++) {
        const float pj = __shfl_sync(0xffffffffu, e, st * VPW + vg);
#pragma unroll
        for (int u = 0; u < VE; u++) acc[u] += pj * V_ldf(&vr[st].x[u]);
      }
    }
#pragma unroll
    for (int o = LV; o < 32; o <<= 1)
#pragma unroll
      for (int u = 0; u < VE; u++) acc[u] += __shfl_xor_sync(0xffffffffu, acc[u], o);
    if (lane == 0) { sm_m[warp] = m; sm_l[warp] = l; }
    if (vg == 0) {
#pragma unroll
      for (int u = 0; u < VE; u++) sacc[warp * p.Dv + vc * VE + u] = acc[u];
    }
    __syncthreads();
    float gm = ninf, gl = 0.0f;
    for (int w = 0; w < nw; w++) gm = fmaxf(gm, sm_m[w]);
    for (int w = 0; w < nw; w++) gl += sm_l[w] * (sm_m[w] == ninf ? 0.0f : expf(sm_m[w] - gm));
    for (long long d = threadIdx.x; d < p.Dv; d += blockDim.x) {
      float o_ = 0.0f;
      for (int w = 0; w < nw; w++) o_ += sacc[w * p.Dv + d] * (sm_m[w] == ninf ? 0.0f : expf(sm_m[w] - gm));
      O_stf(out + bb * p.Dv + d, o_ / gl);
    }
    __syncthreads();
  }

// ATTN, a block per query row (T: double with CGO_ATTN_F64, else float): online softmax per warp over chunks of 32
// keys (chunk c of the row goes to warp c % nw): each lane scores one key of the chunk (a dot product over D; the
// lanes' loads are independent, so they overlap), the chunk's maximum rescales the running sum and accumulators,
// then the chunk's keys are added in order, each weight broadcast from its lane (lane t of output chunk d0 holds
// dims d0 + lane + 32 t). The lanes' maximum ignores NaN, so every lane has the same one and takes the same branch.
// The warps' states merge in shared memory. A row whose keys are all masked gives 0 / 0, as softmax does
//@ ops_attn_rows
#if CGO_ATTN_F64
  typedef double T;
#define CGO_QLD Q_ld
#define CGO_KLD K_ld
#define CGO_VLD V_ld
#define CGO_CLD C_ld
#define CGO_OST O_st
#define CGO_EXP exp
#else
  typedef float T;
#define CGO_QLD Q_ldf
#define CGO_KLD K_ldf
#define CGO_VLD V_ldf
#define CGO_CLD C_ldf
#define CGO_OST O_stf
#define CGO_EXP expf
#endif
  extern __shared__ __align__(16) unsigned char cgo_sh[];
  T *sw = (T *)cgo_sh;
  const int lane = threadIdx.x & 31, warp = threadIdx.x >> 5, nw = blockDim.x >> 5;
  const long long W = 258;
  const T fill = (T)__longlong_as_double(p.fill), ninf = (T)__int_as_float((int)0xff800000u);
#if CGO_ATTN_SVAL
  const T scale = (T)__longlong_as_double(p.scv);
#elif CGO_ATTN_SCALE
  const T scale = (T)CGO_CLD(sc);
#endif
  for (long long row = blockIdx.x; row < p.rows; row += gridDim.x) {
    long long bb = row / p.M, i = row % p.M, qo = i * p.qm, ko = 0, vo = 0, mo = i * p.mm;
    for (int d = (int)p.nb - 1; d >= 0; d--) {
      long long x = bb % p.bs[d]; bb /= p.bs[d];
      qo += x * p.qb[d]; ko += x * p.kb[d]; vo += x * p.vb[d]; mo += x * p.mb[d];
    }
    for (long long d0 = 0; d0 < p.Dv; d0 += 256) {
      T m = ninf, l = 0, acc[8];
      for (int t = 0; t < 8; t++) acc[t] = 0;
      for (long long j0 = (long long)warp * 32; j0 < p.N; j0 += (long long)nw * 32) {
        long long j = j0 + lane;
        T s = ninf;
        if (j < p.N) {
          s = 0;
#pragma unroll 8
          for (long long d = 0; d < p.D; d++) s += CGO_QLD(q + qo + d * p.qd) * CGO_KLD(kt + ko + d * p.kd + j * p.kn);
          CGO_ATTN_FIX(s, mask[mo + j * p.mn])
        }
        T cm = s;
        for (int o = 16; o; o >>= 1) { T x = __shfl_xor_sync(0xffffffffu, cm, o); if (x > cm || cm != cm) cm = x; }
        if (cm == ninf && !__any_sync(0xffffffffu, s != s)) continue;
        T nm = cm > m ? cm : m, r = CGO_EXP(m - nm), e = s == ninf ? (T)0 : CGO_EXP(s - nm), cs = e;
        for (int o = 16; o; o >>= 1) cs += __shfl_xor_sync(0xffffffffu, cs, o);
        l = l * r + cs;
        for (int t = 0; t < 8; t++) acc[t] *= r;
        const long long nj = p.N - j0 < 32 ? p.N - j0 : 32;
        for (int jj = 0; jj < nj; jj++) {
          const T ej = __shfl_sync(0xffffffffu, e, jj);
          const long long vr = vo + (j0 + jj) * p.vn;
#pragma unroll
          for (int t = 0; t < 8; t++) {
            long long dv = d0 + lane + 32 * t;
            if (dv < p.Dv) acc[t] += ej * CGO_VLD(v + vr + dv * p.vd);
          }
        }
        m = nm;
      }
      T *mine = sw + warp * W;
      if (lane == 0) { mine[0] = m; mine[1] = l; }
      for (int t = 0; t < 8; t++) mine[2 + lane + 32 * t] = acc[t];
      __syncthreads();
      T gm = ninf, gl = 0;
      for (int w = 0; w < nw; w++) if (sw[w * W] > gm) gm = sw[w * W];
      for (int w = 0; w < nw; w++) gl += sw[w * W + 1] * (sw[w * W] == ninf ? (T)0 : CGO_EXP(sw[w * W] - gm));
      for (long long t = threadIdx.x; t < 256 && d0 + t < p.Dv; t += blockDim.x) {
        T o = 0;
        for (int w = 0; w < nw; w++) o += sw[w * W + 2 + t] * (sw[w * W] == ninf ? (T)0 : CGO_EXP(sw[w * W] - gm));
        CGO_OST(out + row * p.Dv + d0 + t, o / gl);
      }
      __syncthreads();
    }
  }
