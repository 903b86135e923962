// The matmul's launch overlap (gdl_matmul.cuh, gdl_abi.cuh): before its wait
// for the kernels before it, a matmul whose b is a param pulls the start of
// its block's first part of b into L2 (matmul_rows_prefetch,
// matmul_tiles_prefetch); after the wait, a short one lets its dependents
// launch at once (matmul_allow_dependents).
#pragma once

#include "gdl_matmul_common.cuh"

namespace gdl {

// ------------------------------------------------------------ prefetch
// Before wait_for_producers (gdl_abi.cuh) a matmul whose b is a param pulls
// the start of the part of b that its block's first task reads into L2,
// while the kernels before it still run: rows [k_lo, k_hi) x columns
// [n0, n0 + cols) of b [K, N] (ldb elements per row), at most
// kPrefetchBytes of them. The split of K mirrors the kernels' own (K in
// place of k_valid, so it may fetch a little more); only a hint, never a
// fault.
// The cap: at H=4096 a whole part is 128 KiB, so a launch prefetched the
// whole 32 MiB matrix while its blocks started loading it themselves. W2 on
// the H200, whole parts against the cap, same call, graph replay: f16
// H=4096 B=1 141 -> 136 us, B=64 322 -> 293; bf16 B=64 360 -> 339; f32
// H=4096 B=1 221 -> 196, B=64 671 -> 620; H=1024 (parts of 16-64 KiB)
// within 1%. No prefetch at all: H=1024 f16 B=1 41.3 -> 46.0 us.
constexpr int kPrefetchBytes = 16 * 1024;
// TB: b transposed (stored [N, K], ldb elements per stored row): the part's
// columns are stored rows, fetched along K.
template <bool TB = false, typename T, typename I>
GDL_DEV void prefetch_b_part(const T* b, I N, I ldb, I k_lo, I k_hi, I n0, int cols) {
  constexpr int per_line = 128 / (int)sizeof(T);
  if constexpr (TB) {
    const I most = (I)(kPrefetchBytes / 128 / cols) * per_line;  // positions of each column within the cap
    if (k_hi > k_lo + most) k_hi = k_lo + most;
    const I lines = k_hi > k_lo ? ceil_div(k_hi - k_lo, (I)per_line) : (I)0;
    for (I i = threadIdx.x; i < lines * (I)cols; i += blockDim.x) {
      const I n = n0 + i / lines, k = k_lo + (i % lines) * per_line;
      if (n < N) prefetch_l2(b + n * ldb + k);
    }
  } else {
    const int lines = (cols + per_line - 1) / per_line;
    const I most = (I)(kPrefetchBytes / (lines * 128));  // rows of the part within the cap
    if (k_hi > k_lo + most) k_hi = k_lo + most;
    const I total = k_hi > k_lo ? (k_hi - k_lo) * (I)lines : (I)0;
    for (I i = threadIdx.x; i < total; i += blockDim.x) {
      const I k = k_lo + i / lines, n = n0 + (I)(i % lines) * per_line;
      if (n < N) prefetch_l2(b + k * ldb + n);
    }
  }
}

// After its wait, a matmul with prefetched weights lets the kernels after
// it launch at once (allow_dependents) only when its own work is short,
// under kEarlyLaunchMacs multiply-adds at this run's rows; a longer one
// lets them launch as its blocks exit. Measured on the H200 (W2, graph
// replay, every kernel triggering early against none): the early launch
// hid latency in the short layers (f16 H=1024 B=1 41.5 against 44.7 us,
// f32 H=1024 B=1 58.2 against 73.7, f32 H=4096 B=1 196 against 213; 1 to
// 17 M multiply-adds per matmul) and cost time in the long ones (f16
// H=4096 B=8 233 against 214, B=64 294 against 262, H=1024 B=64 84.6
// against 79.3; 67 M and more). Why the dependents' early blocks slow a
// long kernel is not established (docs/performance.md).
constexpr long long kEarlyLaunchMacs = 32ll << 20;
template <typename I> GDL_DEV void matmul_allow_dependents(I rows, I N, I K) {
  if ((long long)rows * (long long)N * (long long)K < kEarlyLaunchMacs) allow_dependents();
}

// The first task of this block in matmul_rows (gdl_matmul_rows.cuh;
// ClusterSplits as there).
template <int ClusterSplits = 0, bool TB = false, typename T, typename I>
GDL_DEV void matmul_rows_prefetch(const T* b, I N, I K, I ldb, int splits) {
  constexpr int BN = RowsTile<T>::BN;
  const I tiles = ceil_div(N, (I)BN);
  const I task = split_task_first<ClusterSplits>(tiles);
  if (task >= tiles * (I)splits) return;
  const I chunk = ceil_div(ceil_div(K, (I)splits), (I)mm::kKGroups) * mm::kKGroups;
  const I k_lo = (task / tiles) * chunk, k_hi = K < k_lo + chunk ? K : k_lo + chunk;
  prefetch_b_part<TB>(b, N, ldb, k_lo, k_hi, (task % tiles) * BN, BN);
}

// The first task of this block in matmul_mma (BM its tile rows, BK =
// mm::kMmaBK) or matmul_simt (mm::kSimtBM, mm::kSimtBK) with b shared by
// every row (one batch); ClusterSplits as in matmul_mma.
template <int BM, int BK, int ClusterSplits = 0, bool TB = false, typename T, typename I>
GDL_DEV void matmul_tiles_prefetch(const T* b, I M, I N, I K, I ldb, int splits) {
  constexpr int BN = mm::kMmaBN;
  static_assert(BN == mm::kSimtBN, "one tile width for both tiled kernels");
  const I mt = ceil_div(M, (I)BM), tiles = mt * ceil_div(N, (I)BN);
  const I task = split_task_first<ClusterSplits>(tiles);
  if (task >= tiles * (I)splits) return;
  const I chunk = ceil_div(ceil_div(K, (I)splits), (I)BK) * BK;
  const I k_lo = (task / tiles) * chunk, k_hi = K < k_lo + chunk ? K : k_lo + chunk;
  prefetch_b_part<TB>(b, N, ldb, k_lo, k_hi, ((task % tiles) / mt) * BN, BN);
}

}  // namespace gdl
