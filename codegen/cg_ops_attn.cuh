// cg_ops_attn.cuh: fixed pieces of the attention kernels (the ATTN template of cg_ops.c): the tiled kernel, the
// decode kernel and the row kernel. The generator writes the text between them (the scale, the score's scaling and
// masking, the staging of keys and values). Format: see cg_prelude.cuh.

// ATTN tiled (cg_ops.c body_attn_tiled), after the scale: the block's row tiles, q staged, then the chunks of keys
//@ ops_attn_tiled_rows
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

// ATTN tiled, after the keys and values are staged: the scores of the R x C tile (then scaled and masked by the
// generator)
//@ ops_attn_tiled_scores
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

// ATTN tiled, after the score fix: the rows' running maxima and sums, the outputs accumulated; then each output's
// value e (acc[t])
//@ ops_attn_tiled_softmax
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

// ATTN tiled with CGO_ATTN_SPLIT: each block's maxima, sums and unnormalised outputs; rank 0 merges them
// every rank's three values loaded before any is used: the loads overlap (one round trip through
// the cluster, not 4 * S one after the other)
//@ ops_attn_tiled_split_end
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

// ATTN tiled, one block a row tile: the outputs stored
//@ ops_attn_tiled_end
        if (i0 + r < p.M) O_stf(out + (bb * p.M + i0 + r) * p.Dv + d, acc[t] / ls[r]);
      }
    }
    __syncthreads();
  }

// ATTN decode (cg_ops.c body_attn_decode), after the scale: a block per row, warps over chunks of 32 keys; the score
// of key jl (then scaled and masked by the generator)
// the score of key j0 + lane: LK lanes' partial dot products summed, then moved to the key's lane
//@ ops_attn_decode_rows
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

// ATTN decode, after the score fix: the chunk's running maximum and sum, the values accumulated, the warps merged
// a chunk of masked keys only adds nothing; one with a NaN score goes on, so the row is NaN as on the CPU
// the key slots of each lane group hold parts of the same dims: summed across them
// a warp that saw no key weighs 0 (times its sum: NaN stays NaN)
//@ ops_attn_decode_end
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

// ATTN, a block per query row (cg_ops.c body_attn), after the scale: the row's offsets and the loop over chunks of
// keys, up to a key's score
//@ ops_attn_rows
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
