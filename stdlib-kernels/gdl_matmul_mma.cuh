// matmul_mma (gdl_matmul.cuh; f16, bf16): tensor cores through
// nvcuda::wmma 16x16x16 with f32 accumulators. Tiles of BM x 128 (BM 16,
// 32 or 64: MmaTile), K in steps of 32, 8 warps; operands staged in
// dynamic shared memory by cp.async, STAGES - 1 steps in flight,
// zero-filled past every edge, so any M, N, K is correct; results go
// through shared memory to the epilogue (gdl_matmul_tiles.cuh), with K
// split across blocks or a cluster.
#pragma once

#include <mma.h>

#include "gdl_cp_async.cuh"
#include "gdl_matmul_prologue.cuh"
#include "gdl_matmul_tiles.cuh"

namespace gdl {

// ------------------------------------------------------------ matmul_mma

// Stages one 16-byte vector: an asynchronous copy when it is whole and
// aligned, else (an edge, an unaligned operand) a load and a store here,
// zero-filled past `valid` elements.
template <typename T> GDL_DEV void stage16(T* dst, const T* src, int valid, bool vector) {
  if (vector && valid >= Vec16<T>::n) cp_async16(dst, src);
  else *reinterpret_cast<uint4*>(dst) = valid > 0 ? load16(src, valid, vector) : zero16();
}

// BM: the tile's rows; STAGES: stage buffers (`smem` holds
// MmaTile<BM>::bytes(STAGES, TB)). ClusterSplits > 1: launched in clusters
// of that many blocks along y, which split K among them (cluster split,
// gdl_matmul_tiles.cuh; sk.splits must be the same). TA, TB: a, b
// transposed (operand_index; lda, ldb their stored row lengths): a
// transposed operand is staged as stored, contiguous along M (a) or K (b),
// and read by the tensor cores as column-major.
template <int BM, int STAGES, int ClusterSplits = 0, bool TA = false, bool TB = false, typename T, typename I,
          typename TC, typename Epi, typename Pro, int NB>
GDL_DEV void matmul_mma(const T* a, const T* b, TC* c, I M, I N, I K, I lda, I ldb, I k_valid,
                        const BatchMap<NB, 2, I>& batches, SplitScratch sk, const Epi& epi, const Pro& pro,
                        unsigned char* smem) {
  using namespace nvcuda;
  static_assert(!((TA || TB) && Pro::active), "the norm prologue and its fold read a plain a and b");
  using Tile = MmaTile<BM>;
  constexpr int BN = Tile::BN, BK = Tile::BK, FI = Tile::FI, FJ = Tile::FJ;
  constexpr int LDA = TA ? BM + 8 : BK + 8, LDB = TB ? BK + 8 : BN + 8, LDC = mm::kMmaLdC;
  constexpr int STAGE_A = Tile::kStageA, STAGE_B = Tile::stage_b(TB);  // elements per buffer
  static_assert(STAGES >= 2 && (TA ? BK * LDA : BM * LDA) <= STAGE_A, "the stages fit their buffers");
  using LayoutA = typename mm::Pick<TA, wmma::col_major, wmma::row_major>::type;
  using LayoutB = typename mm::Pick<TB, wmma::col_major, wmma::row_major>::type;
  if (blockDim.x != mm::kThreads) __trap();
  T* As = reinterpret_cast<T*>(smem);          // [STAGES][BM][LDA], transposed [STAGES][BK][LDA]
  T* Bs = As + STAGES * STAGE_A;               // [STAGES][BK][LDB], transposed [STAGES][BN][LDB]
  float* Cs = reinterpret_cast<float*>(smem);  // [BM][LDC], after the k loop
  __shared__ FoldTile<BM, BN> fold;  // norm prologue (unused without one)
  const int tid = threadIdx.x, warp = tid >> 5;
  const int wm = warp / Tile::WN, wn = warp % Tile::WN;  // this warp's FI x FJ tiles of 16 x 16
  const int a_row = tid / 4, a_col = (tid % 4) * 8;  // this thread's vector of the a stage
  const bool stages_a = tid < BM * BK / 8;           // a stage has BM * BK / 8 vectors
  const bool vec_a = lda % 8 == 0 && aligned16(a), vec_b = ldb % 8 == 0 && aligned16(b);
  const int S = sk.splits;
  const I mt = ceil_div(M, (I)BM), nt = ceil_div(N, (I)BN);
  const I tiles = batches.count * mt * nt;
  const I chunk = ceil_div(ceil_div(k_valid, (I)S), (I)BK) * BK;
  const I tasks = tiles * S;
  if constexpr (ClusterSplits > 1)  // one task per block
    if (S != ClusterSplits || (I)gridDim.x * (I)gridDim.y != tasks) __trap();  // a launch that breaks the rule
  const I stride = ClusterSplits > 1 ? tasks : task_stride<I>();

  for (I task = split_task_first<ClusterSplits>(tiles); task < tasks; task += stride) {
    const I tile = task % tiles, s = task / tiles;
    const I mi = tile % mt, ni = (tile / mt) % nt, batch = tile / (mt * nt);
    I off[2];
    batches.offsets(batch, off);
    const T* ab = a + off[0];
    const T* bb = b + off[1];
    const I m0 = mi * BM, n0 = ni * BN;
    const I k_lo = s * chunk;
    const I k_hi = k_valid < k_lo + chunk ? k_valid : k_lo + chunk;
    const I ksteps = k_hi > k_lo ? ceil_div(k_hi - k_lo, (I)BK) : (I)0;
    float cs = 0.0f, bs = 0.0f;  // the fold's column sums

    // Step kt's operands into stage buffer kt % STAGES: a's vector of this
    // thread and two of b's.
    const auto issue = [&](I kt) {
      const int buf = (int)(kt % STAGES);
      const I k0 = k_lo + kt * BK;
      if (!stages_a) {
      } else if constexpr (TA) {  // BK stored rows of BM positions: one vector each
        const int row = tid / (BM / 8), col = (tid % (BM / 8)) * 8;
        const I ka = k0 + row, m = m0 + col;
        stage16(As + buf * STAGE_A + row * LDA + col, ab + (ka < k_hi ? ka : (I)0) * lda + m,
                ka < k_hi ? vec_valid<8>(m, M) : 0, vec_a);
      } else {
        const I m = m0 + a_row, ka = k0 + a_col;
        stage16(As + buf * STAGE_A + a_row * LDA + a_col, ab + (m < M ? m : (I)0) * lda + ka,
                m < M ? vec_valid<8>(ka, k_hi) : 0, vec_a);
      }
#pragma unroll
      for (int u = 0; u < 2; ++u) {
        const int l = tid + u * mm::kThreads;
        if constexpr (TB) {  // BN stored rows of BK positions
          const int row = l / (BK / 8), col = (l % (BK / 8)) * 8;
          const I n = n0 + row, kb = k0 + col;
          stage16(Bs + buf * STAGE_B + row * LDB + col, bb + (n < N ? n : (I)0) * ldb + kb,
                  n < N ? vec_valid<8>(kb, k_hi) : 0, vec_b);
        } else {
          const int row = l / (BN / 8), col = (l % (BN / 8)) * 8;
          const I kb = k0 + row, n = n0 + col;
          stage16(Bs + buf * STAGE_B + row * LDB + col, bb + (kb < k_hi ? kb : (I)0) * ldb + n,
                  kb < k_hi ? vec_valid<8>(n, N) : 0, vec_b);
        }
      }
    };

    wmma::fragment<wmma::accumulator, 16, 16, 16, float> acc[FI][FJ];
#pragma unroll
    for (int i = 0; i < FI; ++i)
#pragma unroll
      for (int j = 0; j < FJ; ++j) wmma::fill_fragment(acc[i][j], 0.0f);
#pragma unroll
    for (int kt = 0; kt < STAGES - 1; ++kt) {  // one group per step, empty past the last
      if ((I)kt < ksteps) issue((I)kt);
      cp_async_commit();
    }
    if constexpr (ClusterSplits > 1) {  // the statistics of the rows this block will combine, while those copies land
      const int r0 = share_first<BM>((int)s, S);
      norm_row_stats<T>(pro, ab, M, K, k_valid, m0 + (I)r0, share_count<BM>((int)s, S), fold.st + r0);
    } else {
      fold_stats_share<BM, BN, T>(pro, ab, M, K, k_valid, m0, s, tiles, tile, sk, fold);  // while those copies land
    }
    for (I kt = 0; kt < ksteps; ++kt) {
      const int buf = (int)(kt % STAGES);
      cp_async_wait<STAGES - 2>();  // this thread's copies of step kt have landed
      if constexpr (Pro::active && Pro::weighted) {  // the fold stages a as x * w: this thread's own vector
        if (stages_a) {
          uint4* own = reinterpret_cast<uint4*>(As + buf * STAGE_A + a_row * LDA + a_col);
          *own = scale16<T>(pro, *own, k_lo + kt * BK + a_col, k_hi);
        }
      }
      __syncthreads();  // everyone's copies of step kt are visible; step kt - 1's readers are done
      if (kt + STAGES - 1 < ksteps) issue(kt + STAGES - 1);  // into step kt - 1's buffer
      cp_async_commit();
      const T* at = As + buf * STAGE_A;
      const T* bt = Bs + buf * STAGE_B;
#pragma unroll
      for (int kk = 0; kk < BK; kk += 16) {
        wmma::fragment<wmma::matrix_a, 16, 16, 16, T, LayoutA> fa[FI];
        wmma::fragment<wmma::matrix_b, 16, 16, 16, T, LayoutB> fb[FJ];
#pragma unroll
        for (int i = 0; i < FI; ++i)
          wmma::load_matrix_sync(fa[i], at + operand_index<TA>(wm * FI * 16 + i * 16, kk, LDA), LDA);
#pragma unroll
        for (int j = 0; j < FJ; ++j)
          wmma::load_matrix_sync(fb[j], bt + operand_index<TB>(kk, wn * FJ * 16 + j * 16, LDB), LDB);
#pragma unroll
        for (int i = 0; i < FI; ++i)
#pragma unroll
          for (int j = 0; j < FJ; ++j) wmma::mma_sync(acc[i][j], fa[i], fb[j], acc[i][j]);
      }
      fold_column_step<BK>(pro, bt, LDB, k_lo + kt * BK, k_hi, cs, bs);
    }
    cp_async_wait<0>();
    __syncthreads();  // Cs overlays the stage buffers
#pragma unroll
    for (int i = 0; i < FI; ++i)
#pragma unroll
      for (int j = 0; j < FJ; ++j)
        wmma::store_matrix_sync(Cs + (wm * FI * 16 + i * 16) * LDC + wn * FJ * 16 + j * 16, acc[i][j], LDC,
                                wmma::mem_row_major);
    // (its barriers also publish Cs; a cluster split's column sums stay here)
    fold_columns_done(pro, cs, bs, s, tiles, tile, ClusterSplits > 1 ? SplitScratch{nullptr, nullptr, 1} : sk, fold);
    __syncthreads();
    const I base = batch * M * N;
    const auto cs4 = [&](int e) { return *reinterpret_cast<const float4*>(Cs + (e / BN) * LDC + e % BN); };
    if constexpr (ClusterSplits > 1) {
      cluster_combine<ClusterSplits, BM, BN, LDC>(c, M, N, base, m0, n0, epi, pro, fold, Cs);
    } else if (S == 1) {
      const auto sums = [&](int e0, float4 (&v)[kStoreVectors]) {
#pragma unroll
        for (int j = 0; j < kStoreVectors; ++j)  // a 16-row tile has two vectors a thread
          v[j] = e0 + j * kStoreStride < BM * BN ? cs4(e0 + j * kStoreStride) : make_float4(0.0f, 0.0f, 0.0f, 0.0f);
      };
      store_tile<BM, BN>(c, M, N, base, m0, n0, epi, pro, fold, sums);
    } else {
      float* part = tile_part<BM, BN>(sk, s, tiles, tile);
      for (int e = tid * 4; e < BM * BN; e += mm::kThreads * 4) __stcg(reinterpret_cast<float4*>(part + e), cs4(e));
      combine_tile<BM, BN>(c, M, N, base, m0, n0, tile, tiles, sk, epi, pro, fold);
    }
    __syncthreads();  // Cs is the next task's operand buffer
  }
}

}  // namespace gdl
