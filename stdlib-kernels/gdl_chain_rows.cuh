// The chain's rows (gdl::MatmulChain, gdl_chain.cuh, step 1): a step's rows
// of a into shared memory, from a (step 0, or above kMailboxMaxK after the
// grid barrier) or from the mailbox the step before wrote, with the norm
// prologue's statistics, normalized or staged as they are for a folded
// norm.
#pragma once

#include "gdl_chain_kernel.cuh"

namespace gdl {

// Rows [0, rows) of a into xn_, through the norm prologue, with one read
// of a (step 0) or of the mailbox step s - 1 wrote (waiting for each
// vector's words until they carry its flag). Returns how the step's norm
// reaches its mma (fold_of). The rows rounded up to a power of two pick
// the split (stage_rows_of): the lane's vectors are then a compile-time
// count, with no test per vector. The general loop (16 vectors a lane at
// K = 4096, each behind a test of whether the lane had it) was a third of
// the computing warps' time at W2 H=4096 B=1, in instruction fetch and
// branches (docs/performance.md).
template <typename T, int K, int C>
template <typename Pro>
GDL_DEV int MatmulChain<T, K, C>::stage_rows(int s, const T* a, int rows, const Pro& pro) {
  if (rows <= 1) return stage_rows_of<1>(s, a, rows, pro);
  if (rows <= 2) return stage_rows_of<2>(s, a, rows, pro);
  if (rows <= 4) return stage_rows_of<4>(s, a, rows, pro);
  return stage_rows_of<8>(s, a, rows, pro);
}

// stage_rows for at most kRows rows (a power of two): warp w takes row r
// = w / kPerRow and its piece of kSpan 16-byte vectors, which each lane
// keeps in registers until it stores them, as they are (a folded norm, or
// none) or normalized. The statistics of a norm applied here (not
// folded; a folded step sums its rows in the mma): in step 0 and with
// mailboxes, the shifted sums of the lanes' own vectors (as
// norm_row_stats, gdl_matmul_prologue.cuh), added over the row's warps; later steps
// without mailboxes add the partial sums every block stored with its part
// of the rows (store), warp r for row r: a few loads instead of the pass
// over the whole row. a from c (step 0, or above kMailboxMaxK after the
// barrier) is read with __ldcg: other blocks of this launch wrote it, and
// L1 may hold an older copy. Rows of xn_ past `rows` keep what they held:
// mma's column n only reaches output row n, and store() writes rows below
// `rows` only.
template <typename T, int K, int C>
template <int kRows, typename Pro>
GDL_DEV int MatmulChain<T, K, C>::stage_rows_of(int s, const T* a, int rows, const Pro& pro) {
  static_assert(kRows <= chain::kWarps && chain::kWarps % kRows == 0, "a power of two of rows up to a warp each");
  constexpr int kRowVectors = K / 8;
  constexpr int kPerRow = chain::kWarps / kRows;  // warps per row
  constexpr int kSpan = kRowVectors / kPerRow;    // vectors per warp
  constexpr int kPerLane = (kSpan + 31) / 32;
  constexpr bool kEveryLane = kSpan % 32 == 0;  // else the last round of vectors leaves lanes out (K = 1024 at one row)
  static_assert(kRowVectors % kPerRow == 0, "a row's vectors split evenly over its warps");
  constexpr int kFold = fold_of<Pro>();
  constexpr int kBlocksPerRow = K / kCols, kPairsPerLane = (kBlocksPerRow / 2 + 31) / 32;
  static_assert(kBlocksPerRow % 2 == 0, "a row's parts in pairs: two blocks' float2 a load");
  const int r = warp_ / kPerRow, piece = warp_ % kPerRow;
  const bool mine = r < rows;
  // Whether the lane holds its vector j: a constant where every lane does.
  const auto has = [&](int j) { return kEveryLane || lane_ + 32 * j < kSpan; };
  const bool from_partials = !kMailbox && Pro::active && kFold == kNoFold && s > 0;
  if (from_partials && !published_) __trap();  // gdlc's publish_stats disagrees with fold_of
  const uint4* row = reinterpret_cast<const uint4*>(a) + (size_t)r * kRowVectors + piece * kSpan;
  uint4 v[kPerLane];
  float4 pairs[kPairsPerLane];  // row warp_'s partial sums, two blocks' a load
  if (s == 0 || !kMailbox) {
#pragma unroll
    for (int j = 0; j < kPerLane; ++j) v[j] = mine && has(j) ? __ldcg(row + lane_ + 32 * j) : zero16();
    if (from_partials) {
      const float4* row_pairs = reinterpret_cast<const float4*>(partial_stats(s - 1, warp_ < rows ? warp_ : 0, 0));
#pragma unroll
      for (int j = 0; j < kPairsPerLane; ++j) {
        const int b = lane_ + 32 * j;
        pairs[j] = warp_ < rows && b < kBlocksPerRow / 2 ? __ldcg(row_pairs + b) : make_float4(0, 0, 0, 0);
      }
    }
  } else {
    // Rounds of loads of the vectors whose words do not all carry the
    // flag yet (bit j of `awaited`), until none is left.
    static_assert(kPerLane <= 32, "a lane's vectors fit the mask of those awaited");
    const unsigned expect = flag(s - 1);
    const unsigned long long* words = mail_row(s - 1, mine ? r : 0) + (size_t)piece * kSpan * 4;
    unsigned awaited = 0;
#pragma unroll
    for (int j = 0; j < kPerLane; ++j)
      if (mine && has(j)) awaited |= 1u << j;
    chain::MailVector m[kPerLane] = {};
    while (awaited != 0) {
#pragma unroll
      for (int j = 0; j < kPerLane; ++j) m[j].fetch(words + 4 * (lane_ + 32 * j), awaited >> j & 1);
#pragma unroll
      for (int j = 0; j < kPerLane; ++j)
        if (m[j].carries(expect)) awaited &= ~(1u << j);
    }
#pragma unroll
    for (int j = 0; j < kPerLane; ++j) v[j] = m[j].data();
  }
  // The row's first element as read (lane 0 of the row's first warp holds
  // it): this step's shift of the partial sums (partial_stats).
  if (!kMailbox && mine && piece == 0 && lane_ == 0) first_of(s, r) = Vec16<T>::elem(v[0].x, 0);
  float2 st = make_float2(0.0f, 1.0f);  // (mean, 1 / sqrt(var + eps)) of row r
  if constexpr (Pro::active && kFold == kNoFold) {  // a folded step sums its rows in the mma
    if (from_partials) {
      if (warp_ < rows) {
        // Every block's sums share the shift first_of(s - 1, row), kept
        // for layernorm and moved to 0 for rmsnorm's plain mean square.
        float sum = 0.0f, squares = 0.0f;
#pragma unroll
        for (int j = 0; j < kPairsPerLane; ++j) {
          sum += pairs[j].x + pairs[j].z;
          squares += pairs[j].y + pairs[j].w;
        }
        sum = warp_sum(sum), squares = warp_sum(squares);
        const float first = first_of(s - 1, warp_), shift = Pro::center ? first : 0.0f;
        float shifted_sum = 0.0f, shifted_squares = 0.0f;
        chain::add_shifted_sums(make_float4(sum, squares, first, 0.0f), shift, (float)K, shifted_sum, shifted_squares);
        if (lane_ == 0)
          stats_[warp_] = shifted_row_statistics<Pro::center>(shifted_sum, shifted_squares, shift, (float)K, pro.eps);
      }
      chain::computing_warps_sync();  // the normalized rows below need every row's statistics
      st = stats_[r];
    } else {
      // Each warp shifts by the first element of its piece (lane 0's), a
      // value near the row's mean that it holds already; the row's warps
      // move their sums to the first warp's shift when they add them.
      const float shift = Pro::center ? __shfl_sync(0xffffffffu, Vec16<T>::elem(v[0].x, 0), 0) : 0.0f;
      float sum = 0.0f, squares = 0.0f;
#pragma unroll
      for (int j = 0; j < kPerLane; ++j) {
        if (!has(j)) continue;
        float x[8];
        widen<T>(v[j], x);
#pragma unroll
        for (int e = 0; e < 8; ++e) {
          const float d = x[e] - shift;
          sum += d;
          squares = fmaf(d, d, squares);
        }
      }
      // The row's sums of x - row_shift and of its squares.
      float row_sum = warp_sum(sum), row_squares = warp_sum(squares), row_shift = shift;
      if constexpr (kPerRow > 1) {  // the row's warps add their parts; a warp with a whole row has its sums already
        if (lane_ == 0) parts_[warp_] = make_float4(row_sum, row_squares, shift, 0.0f);
        chain::computing_warps_sync();
        row_shift = parts_[r * kPerRow].z;
        row_sum = 0.0f, row_squares = 0.0f;
#pragma unroll
        for (int w = 0; w < kPerRow; ++w)
          chain::add_shifted_sums(parts_[r * kPerRow + w], row_shift, (float)(kSpan * 8), row_sum, row_squares);
      }
      st = shifted_row_statistics<Pro::center>(row_sum, row_squares, row_shift, (float)K, pro.eps);
    }
  }
  if (mine) {
#pragma unroll
    for (int j = 0; j < kPerLane; ++j) {
      if (!has(j)) continue;
      const int k = (piece * kSpan + lane_ + 32 * j) * 8;
      uint4 out = v[j];
      // The block's columns as read, for an epilogue that reads a (a
      // residual). Not in the loop of loads: this store would wait for them.
      if (k >= n0_ && k < n0_ + kCols) chain::shared_store(bulk::shared_address(raw_ + r * kCols + (k - n0_)), out);
      if constexpr (Pro::active && kFold == kNoFold) out = normalized16<T>(pro, out, k, &st, 0);
      chain::shared_store(bulk::shared_address(xn_ + r * L::xn_stride + k), out);
    }
  }
  chain::computing_warps_sync();
  return kFold;
}

}  // namespace gdl
