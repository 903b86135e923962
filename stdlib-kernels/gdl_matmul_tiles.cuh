// The tiled kernels' output tiles (gdl_matmul.cuh; matmul_mma and
// matmul_simt): the store of a tile through the epilogue (store_tile), and
// the two ways a tile's K splits are added. Split tiles: each split writes
// a partial tile to the scratch, the last to arrive (gdl_split_tiles.cuh)
// adds them in split order, so the result does not depend on block timing,
// and applies the epilogue (combine_tile). Cluster split: the splits are
// the blocks of one thread-block cluster and add their parts from each
// other's shared memory (cluster_combine).
#pragma once

#include "gdl_matmul_prologue.cuh"

namespace gdl {

// ------------------------------------------------------------ split tiles

// Part s of `tiles` BM x BN tiles of one launch, in the step's scratch.
template <int BM, int BN, typename I> GDL_DEV float* tile_part(const SplitScratch& sk, I s, I tiles, I tile) {
  return sk.partials + (s * tiles + tile) * (I)(BM * BN);
}

// The value of element e = row * BN + col of a tile from its sum: the
// matmul's, or with a norm prologue the fold of it (f holds the tile's
// statistics and column sums).
template <int BM, int BN, typename Pro> GDL_DEV float tile_value(const Pro& pro, float v, int e, const FoldTile<BM, BN>& f) {
  if constexpr (Pro::active) return pro.fold(v, f.st[e / BN], f.cols[e % BN], f.cols[BN + e % BN]);
  else return v;
}

// Element i (0..3) of a float4.
GDL_DEV float lane4(const float4& v, int i) { return i == 0 ? v.x : i == 1 ? v.y : i == 2 ? v.z : v.w; }

// Stores elements [e_begin, e_end) of a BM x BN tile at (m0, n0) of c
// (`base` the result's batch entry offset; e = row * BN + col, both bounds
// multiples of 4) through the epilogue. Each thread takes kStoreVectors
// vectors of 4 elements at a time, e0 + j * kStoreStride for j <
// kStoreVectors: sums(e0, v) fills v[j] with their sums (those at or past
// e_end are not stored), and store_tile evaluates all their epilogues
// before it stores any.
// The loads are what costs here, not the bytes: a store may alias the
// epilogue's own loads (bias, residual), so storing element by element puts
// one load round trip per element on the thread's path (32 for a 64 x 128
// tile); this puts one per 16 elements.
constexpr int kStoreVectors = 4, kStoreStride = mm::kThreads * 4;
template <int BM, int BN, typename I, typename TC, typename Epi, typename Pro, typename Sums>
GDL_DEV void store_tile(TC* c, I M, I N, I base, I m0, I n0, const Epi& epi, const Pro& pro, const FoldTile<BM, BN>& f,
                        const Sums& sums, int e_begin = 0, int e_end = BM * BN) {
  constexpr int J = kStoreVectors, STEP = kStoreStride * J;
  static_assert(BN % 4 == 0, "whole vectors of whole rows");
  using R = decltype(epi(0.0f, I{}));
  for (int e0 = e_begin + (int)threadIdx.x * 4; e0 < e_end; e0 += STEP) {
    float4 v[J];
    sums(e0, v);
    R r[J][4] = {};
    // visit(j, i, e, index) for each element of the J vectors inside the tile and the range.
    const auto each = [&](const auto& visit) {
#pragma unroll
      for (int j = 0; j < J; ++j)
#pragma unroll
        for (int i = 0; i < 4; ++i) {
          const int e = e0 + j * kStoreStride + i;
          const I m = m0 + e / BN, n = n0 + e % BN;
          if (e < e_end && m < M && n < N) visit(j, i, e, base + m * N + n);
        }
    };
    each([&](int j, int i, int e, I index) { r[j][i] = epi(tile_value(pro, lane4(v[j], i), e, f), index); });
    each([&](int j, int i, int, I index) { c[index] = cvt<TC>(r[j][i]); });
  }
}

// After every thread stored its elements of part s (element e = row * BN +
// col of the tile at (m0, n0), `base` the result's batch entry offset): the
// last part to arrive adds the parts in split order and stores the results
// (with a norm prologue, after adding the parts' column sums and loading
// the row statistics that the parts computed). One block reads every part
// of the tile (256 KiB for 8 parts of 64 x 128) while the other blocks of
// the launch may be done, so this is the launch's tail: each thread keeps
// kCombineParts parts of its kStoreVectors vectors in flight at once.
constexpr int kCombineParts = 4;
template <int BM, int BN, typename I, typename TC, typename Epi, typename Pro>
GDL_DEV void combine_tile(TC* c, I M, I N, I base, I m0, I n0, I tile, I tiles, const SplitScratch& sk,
                          const Epi& epi, const Pro& pro, FoldTile<BM, BN>& f) {
  if (!split_arrive(sk.tickets + tile, sk.splits)) return;
  if constexpr (Pro::active) {
    for (int i = threadIdx.x; i < 2 * BN; i += mm::kThreads) {
      float v = 0.0f;
      for (I q = 0; q < (I)sk.splits; ++q) v += __ldcg(fold_columns<BM, BN>(sk, q, tiles, tile) + i);
      f.cols[i] = v;
    }
    for (int i = threadIdx.x; i < BM; i += mm::kThreads) f.st[i] = __ldcg(fold_stats<BM, BN>(sk, tiles, tile) + i);
    __syncthreads();
  }
  const auto sums = [&](int e0, float4 (&v)[kStoreVectors]) {
    constexpr int J = kStoreVectors, Q = kCombineParts;
#pragma unroll
    for (int j = 0; j < J; ++j) v[j] = make_float4(0.0f, 0.0f, 0.0f, 0.0f);
    for (I q0 = 0; q0 < (I)sk.splits; q0 += Q) {
      float4 p[Q][J];
#pragma unroll
      for (int u = 0; u < Q; ++u) {
        const float4* part = reinterpret_cast<const float4*>(tile_part<BM, BN>(sk, q0 + (I)u, tiles, tile) + e0);
#pragma unroll
        for (int j = 0; j < J; ++j)
          p[u][j] = q0 + (I)u < (I)sk.splits && e0 + j * kStoreStride < BM * BN  // a 16-row tile has two vectors a thread
                        ? __ldcg(part + j * (kStoreStride / 4))
                        : make_float4(0.0f, 0.0f, 0.0f, 0.0f);
      }
#pragma unroll
      for (int u = 0; u < Q; ++u)  // in split order
#pragma unroll
        for (int j = 0; j < J; ++j) v[j].x += p[u][j].x, v[j].y += p[u][j].y, v[j].z += p[u][j].z, v[j].w += p[u][j].w;
    }
  };
  store_tile<BM, BN>(c, M, N, base, m0, n0, epi, pro, f, sums);
}

// ------------------------------------------------------------ cluster split
// A tiled kernel launched with clusters of S blocks along y (codegen's
// __cluster_dims__) splits K among the S blocks of one cluster, which hold
// the S parts of one tile in their shared memory (distributed shared
// memory, sm_90): after a cluster barrier each block adds rows [s * share,
// (s + 1) * share) of every part, in rank order, and stores them through
// the epilogue. No global scratch, fence or ticket, and the epilogue of a
// tile is spread over its S blocks instead of run by the last one to
// arrive (ncu: that one block's epilogue over 8192 elements was the W2
// tiled layer's tail at B=64). matmul_rows does the same for a strip, by
// element ranges.
// Rows [first, first + count) of a BM-row tile: the share of part s of S.
template <int BM> GDL_DEV int share_first(int s, int S) { return s * ((BM + S - 1) / S); }
template <int BM> GDL_DEV int share_count(int s, int S) {
  const int share = (BM + S - 1) / S, first = s * share;
  return BM - first < share ? (BM - first > 0 ? BM - first : 0) : share;
}

// Every thread of every block of the cluster: `part` ([BM][LDC] floats)
// holds this block's part of the tile, f.cols its column sums (norm
// prologue) and f.st the statistics of its share of the rows.
template <int S, int BM, int BN, int LDC, typename I, typename TC, typename Epi, typename Pro>
GDL_DEV void cluster_combine(TC* c, I M, I N, I base, I m0, I n0, const Epi& epi, const Pro& pro, FoldTile<BM, BN>& f,
                             const float* part) {
  const unsigned s = cluster_rank();
  if constexpr (Pro::active)  // this part's column sums, where the other blocks read them
    for (int i = threadIdx.x; i < 2 * BN; i += mm::kThreads) f.halves[i] = f.cols[i];
  cluster_sync();  // every part and its column sums are in place
  if constexpr (Pro::active) {
    for (int i = threadIdx.x; i < 2 * BN; i += mm::kThreads) {
      float v = 0.0f;
#pragma unroll
      for (int q = 0; q < S; ++q) v += cluster_load(cluster_map(&f.halves[i], (unsigned)q));
      f.cols[i] = v;
    }
    __syncthreads();
  }
  const int e_begin = share_first<BM>((int)s, S) * BN, e_end = e_begin + share_count<BM>((int)s, S) * BN;
  const auto sums = [&](int e0, float4 (&v)[kStoreVectors]) {
#pragma unroll
    for (int j = 0; j < kStoreVectors; ++j) {
      const int e = e0 + j * kStoreStride;
      v[j] = make_float4(0.0f, 0.0f, 0.0f, 0.0f);
      if (e >= e_end) continue;
      const float* at = part + (e / BN) * LDC + e % BN;
#pragma unroll
      for (int q = 0; q < S; ++q) {  // in rank order
        const float4 p = cluster_load4(cluster_map(at, (unsigned)q));
        v[j].x += p.x, v[j].y += p.y, v[j].z += p.z, v[j].w += p.w;
      }
    }
  };
  store_tile<BM, BN>(c, M, N, base, m0, n0, epi, pro, f, sums, e_begin, e_end);
  cluster_sync();  // the other blocks are done reading this block's shared memory
}

}  // namespace gdl
