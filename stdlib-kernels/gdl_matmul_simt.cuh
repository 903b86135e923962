// matmul_simt (gdl_matmul.cuh; f32, full fp32 FMA, never TF32): tiles of
// 64 x 128, K in steps of 16, each thread an 8 x 4 register tile fed by
// 16-byte shared loads; operands staged through registers (two buffers, the
// next step's loads in flight), zero-filled past every edge; K split across
// blocks through the scratch (gdl_matmul_tiles.cuh).
#pragma once

#include "gdl_matmul_prologue.cuh"
#include "gdl_matmul_tiles.cuh"

namespace gdl {

// ------------------------------------------------------------ matmul_simt

// TA, TB: a, b transposed (operand_index; lda, ldb their stored row
// lengths), loaded as stored (16 bytes along M, or K) and put in place in
// shared memory by the stash.
template <bool TA = false, bool TB = false, typename I, typename TC, typename Epi, typename Pro, int NB>
GDL_DEV void matmul_simt(const float* a, const float* b, TC* c, I M, I N, I K, I lda, I ldb, I k_valid,
                         const BatchMap<NB, 2, I>& batches, SplitScratch sk, const Epi& epi, const Pro& pro,
                         unsigned char* smem) {
  static_assert(!((TA || TB) && Pro::active), "the norm prologue and its fold read a plain a and b");
  constexpr int BM = mm::kSimtBM, BN = mm::kSimtBN, BK = mm::kSimtBK, LDA = mm::kSimtLdA;
  constexpr int TM = mm::kSimtTM, TN = mm::kSimtTN;
  static_assert((BM / TM) * (BN / TN) == mm::kThreads, "one register tile per thread");
  if (blockDim.x != mm::kThreads) __trap();
  float* As = reinterpret_cast<float*>(smem);  // [2][BK][LDA], a transposed
  float* Bs = As + 2 * BK * LDA;               // [2][BK][BN]
  __shared__ FoldTile<BM, BN> fold;  // norm prologue (unused without one)
  const int tid = threadIdx.x;
  const int tx = tid % (BN / TN), ty = tid / (BN / TN);  // columns tx * 4 + j, rows ty * 8 + i
  const int a_row = tid / (BK / 4), a_col = (tid % (BK / 4)) * 4;
  const bool vec_a = lda % 4 == 0 && aligned16(a), vec_b = ldb % 4 == 0 && aligned16(b);
  const int S = sk.splits;
  const I mt = ceil_div(M, (I)BM), nt = ceil_div(N, (I)BN);
  const I tiles = batches.count * mt * nt;
  const I chunk = ceil_div(ceil_div(k_valid, (I)S), (I)BK) * BK;
  const I tasks = tiles * S;

  for (I task = task_first<I>(); task < tasks; task += task_stride<I>()) {
    const I tile = task % tiles, s = task / tiles;
    const I mi = tile % mt, ni = (tile / mt) % nt, batch = tile / (mt * nt);
    I off[2];
    batches.offsets(batch, off);
    const float* ab = a + off[0];
    const float* bb = b + off[1];
    const I m0 = mi * BM, n0 = ni * BN;
    const I k_lo = s * chunk;
    const I k_hi = k_valid < k_lo + chunk ? k_valid : k_lo + chunk;
    const I ksteps = k_hi > k_lo ? ceil_div(k_hi - k_lo, (I)BK) : (I)0;
    float cs = 0.0f, bs = 0.0f;  // the fold's column sums

    uint4 ra, rb[2];
    I ra_k = 0;  // the position of ra's first element
    // This thread's vectors: of a, (a_row, a_col), or transposed (at_row, at_col)
    // = (position, row); of b, (l / (BN / 4), 4 * (l % (BN / 4))), or
    // transposed (l / (BK / 4), 4 * (l % (BK / 4))) = (column, position).
    const int at_row = tid / (BM / 4), at_col = (tid % (BM / 4)) * 4;
    const auto fetch = [&](I k0) {
      if constexpr (TA) {
        const I ka = k0 + at_row, m = m0 + at_col;
        ra = ka < k_hi ? load16(ab + ka * lda + m, vec_valid<4>(m, M), vec_a) : zero16();
      } else {
        const I m = m0 + a_row, ka = k0 + a_col;
        ra_k = ka;
        ra = m < M ? load16(ab + m * lda + ka, vec_valid<4>(ka, k_hi), vec_a) : zero16();
      }
#pragma unroll
      for (int u = 0; u < 2; ++u) {
        const int l = tid + u * mm::kThreads;
        if constexpr (TB) {
          const I n = n0 + l / (BK / 4), kb = k0 + (l % (BK / 4)) * 4;
          rb[u] = n < N ? load16(bb + n * ldb + kb, vec_valid<4>(kb, k_hi), vec_b) : zero16();
        } else {
          const I kb = k0 + l / (BN / 4), n = n0 + (l % (BN / 4)) * 4;
          rb[u] = kb < k_hi ? load16(bb + kb * ldb + n, vec_valid<4>(n, N), vec_b) : zero16();
        }
      }
    };
    const auto stash = [&](int buf) {
      float* at = As + buf * BK * LDA;
      if constexpr (TA) {
        *reinterpret_cast<uint4*>(at + at_row * LDA + at_col) = ra;
      } else {
        ra = scale16<float>(pro, ra, ra_k, k_hi);
        at[(a_col + 0) * LDA + a_row] = __uint_as_float(ra.x);
        at[(a_col + 1) * LDA + a_row] = __uint_as_float(ra.y);
        at[(a_col + 2) * LDA + a_row] = __uint_as_float(ra.z);
        at[(a_col + 3) * LDA + a_row] = __uint_as_float(ra.w);
      }
#pragma unroll
      for (int u = 0; u < 2; ++u) {
        const int l = tid + u * mm::kThreads;
        float* bt = Bs + buf * BK * BN;
        if constexpr (TB) {
          const int col = l / (BK / 4), row = (l % (BK / 4)) * 4;
          bt[(row + 0) * BN + col] = __uint_as_float(rb[u].x);
          bt[(row + 1) * BN + col] = __uint_as_float(rb[u].y);
          bt[(row + 2) * BN + col] = __uint_as_float(rb[u].z);
          bt[(row + 3) * BN + col] = __uint_as_float(rb[u].w);
        } else {
          const int row = l / (BN / 4), col = (l % (BN / 4)) * 4;
          *reinterpret_cast<uint4*>(bt + row * BN + col) = rb[u];
        }
      }
    };

    float acc[TM][TN];
#pragma unroll
    for (int i = 0; i < TM; ++i)
#pragma unroll
      for (int j = 0; j < TN; ++j) acc[i][j] = 0.0f;
    if (ksteps > 0) fetch(k_lo);
    fold_stats_share<BM, BN, float>(pro, ab, M, K, k_valid, m0, s, tiles, tile, sk, fold);  // while those loads land
    if (ksteps > 0) stash(0);
    __syncthreads();
    for (I kt = 0; kt < ksteps; ++kt) {
      const int buf = (int)(kt & 1);
      const bool more = kt + 1 < ksteps;
      if (more) fetch(k_lo + (kt + 1) * BK);
      const float* at = As + buf * BK * LDA + ty * TM;
      const float* bt = Bs + buf * BK * BN + tx * TN;
#pragma unroll
      for (int kk = 0; kk < BK; ++kk) {
        const float4 a0 = *reinterpret_cast<const float4*>(at + kk * LDA);
        const float4 a1 = *reinterpret_cast<const float4*>(at + kk * LDA + 4);
        const float4 bv = *reinterpret_cast<const float4*>(bt + kk * BN);
        const float av[TM] = {a0.x, a0.y, a0.z, a0.w, a1.x, a1.y, a1.z, a1.w};
        const float bw[TN] = {bv.x, bv.y, bv.z, bv.w};
#pragma unroll
        for (int i = 0; i < TM; ++i)
#pragma unroll
          for (int j = 0; j < TN; ++j) acc[i][j] = fmaf(av[i], bw[j], acc[i][j]);
      }
      fold_column_step<BK>(pro, Bs + buf * BK * BN, BN, k_lo + kt * BK, k_hi, cs, bs);
      if (more) stash(buf ^ 1);
      __syncthreads();
    }
    fold_columns_done(pro, cs, bs, s, tiles, tile, sk, fold);
    const I base = batch * M * N;
    if (S == 1) {
#pragma unroll
      for (int i = 0; i < TM; ++i) {
        const I m = m0 + ty * TM + i;
#pragma unroll
        for (int j = 0; j < TN; ++j) {
          const I n = n0 + tx * TN + j;
          if (m < M && n < N)
            store_result(c, base + m * N + n, tile_value(pro, acc[i][j], (ty * TM + i) * BN + tx * TN + j, fold), epi);
        }
      }
    } else {
      float* part = tile_part<BM, BN>(sk, s, tiles, tile);
#pragma unroll
      for (int i = 0; i < TM; ++i)
        __stcg(reinterpret_cast<float4*>(part + (ty * TM + i) * BN + tx * TN),
               make_float4(acc[i][0], acc[i][1], acc[i][2], acc[i][3]));
      combine_tile<BM, BN>(c, M, N, base, m0, n0, tile, tiles, sk, epi, pro, fold);
    }
    __syncthreads();  // fold: the next task's statistics reuse its shared memory
  }
}

}  // namespace gdl
