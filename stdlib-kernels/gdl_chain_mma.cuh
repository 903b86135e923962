// The chain's mma (gdl::MatmulChain, gdl_chain.cuh, step 2): a step's slots
// of the ring through the tensor cores (mma.m16n8k16, out^T = b^T a^T with
// the block's columns as M and the rows of a as N), and for a folded norm
// the rows' statistics and the strip's column sums from more mma.
#pragma once

#include "gdl_chain_kernel.cuh"

namespace gdl {

// Step s's slots through the tensor cores; the warp's column sums into sums_.
// With kColumnSums (kFoldCenter) a second mma sums the strip's columns
// (b times ones) into cs, the same layout as d. A folded step (kFold) also
// sums its rows and their squares with a third mma (multiply, rs); the
// warps' parts of those are added here, and the fold then applies to the
// warp's own part of the sums, before they are added.
template <typename T, int K, int C>
template <int kFold>
GDL_DEV void MatmulChain<T, K, C>::multiply_slots(int s, float eps) {
  constexpr bool kColumnSums = kFold == kFoldCenter;
  float d[kHalves][4] = {};
  float cs[kHalves][4] = {};
  float rs[4] = {};
  // Layernorm's rows are summed shifted by their first element (first_of),
  // as the partial sums are: exact where x and the shift are within a
  // factor of two of each other.
  const unsigned shift = kFold == kFoldCenter ? pair_of(first_of(s, lane_ >> 2)) : 0u;
  for (int i = 0; i < kStepSlots; ++i) {
    const int g = s * kStepSlots + i;
    const long long since = trace_now();
    bulk::wait_ptx_loop(landed(g % kSlots), (g / kSlots) & 1);  // the producer's copy of the slot
    trace_wait(s, 4, since);
    multiply<kFold>(g, i, d, cs, rs, shift);
    bulk::arrive(read(g % kSlots));  // one of 256: this lane's ldmatrix has its values
  }
  const int m = lane_ >> 2, r = 2 * (lane_ & 3);
  if constexpr (kFold != kNoFold) {  // rows r and r + 1 of d: (mean, inv) of each
    // Row n's sum of squares is rs's element (n, n), its sum (8 + n, n):
    // lane 4 n + n / 2 holds both (mma's accumulator layout).
    const bool odd = m & 1;  // no indexing of rs by a run-time value: it would live in local memory
    if ((lane_ & 3) == (m >> 1))
      chain::shared_store(bulk::shared_address(row_parts() + warp_ * chain::kMaxRows + m),
                          make_float2(odd ? rs[3] : rs[2], odd ? rs[1] : rs[0]));
    chain::computing_warps_sync();
    const float2 lo = row_statistics_of<kFold>(s, r, eps), hi = row_statistics_of<kFold>(s, r + 1, eps);
#pragma unroll
    for (int h = 0; h < kHalves; ++h) {
      if constexpr (kColumnSums) {
        d[h][0] -= lo.x * cs[h][0];
        d[h][1] -= hi.x * cs[h][1];
        d[h][2] -= lo.x * cs[h][2];
        d[h][3] -= hi.x * cs[h][3];
      }
      d[h][0] *= lo.y;
      d[h][1] *= hi.y;
      d[h][2] *= lo.y;
      d[h][3] *= hi.y;
    }
  }
  const unsigned mine = bulk::shared_address(sums_ + warp_ * chain::kMaxRows * kCols);  // 4 bytes per column
#pragma unroll
  for (int h = 0; h < kHalves; ++h) {
    const int col = 16 * h + m;
    chain::shared_store(mine + 4 * (r * kCols + col), d[h][0]);
    chain::shared_store(mine + 4 * ((r + 1) * kCols + col), d[h][1]);
    if constexpr (kCols >= 16) {  // at C = 8, d[0][2..3] are the zero columns 8-15
      chain::shared_store(mine + 4 * (r * kCols + col + 8), d[h][2]);
      chain::shared_store(mine + 4 * ((r + 1) * kCols + col + 8), d[h][3]);
    }
  }
}

// (mean, 1 / sqrt(var + eps)) of row n from the warps' parts of its
// sums (multiply_slots), shifted for layernorm.
template <typename T, int K, int C>
template <int kFold>
GDL_DEV float2 MatmulChain<T, K, C>::row_statistics_of(int s, int n, float eps) const {
  constexpr bool kCenter = kFold == kFoldCenter;
  float sum = 0.0f, squares = 0.0f;
#pragma unroll
  for (int w = 0; w < chain::kWarps; ++w) {
    const float2 part = chain::shared_load_float2(bulk::shared_address(row_parts() + w * chain::kMaxRows + n));
    sum += part.x;
    squares += part.y;
  }
  return shifted_row_statistics<kCenter>(sum, squares, kCenter ? first_of(s, n) : 0.0f, (float)K, eps);
}

// mma over one slot: the warp's 16 rows of k, every 16-column half.
template <typename T, int K, int C>
template <int kFold>
GDL_DEV void MatmulChain<T, K, C>::multiply(int g, int i, float (&d)[kHalves][4], float (&cs)[kHalves][4],
                                          float (&rs)[4], unsigned shift) {
  constexpr bool kColumnSums = kFold == kFoldCenter;
  const T* tile = ring_ + ((g % kSlots) * chain::kWarps + warp_) * kTileElems;
  const int k = i * chain::kSlotRows + warp_ * chain::kTileRows + 2 * (lane_ & 3);
  const unsigned xb = bulk::shared_address(xn_ + (lane_ >> 2) * L::xn_stride + k);
  const unsigned b0 = chain::shared_load(xb);
  const unsigned b1 = chain::shared_load(xb + 16);
  if constexpr (kFold != kNoFold) {
    // The rows as both operands, and ones as rows 8-15 of A: element (m,
    // n) of rs sums x_m x_n over the warp's k, (8 + m, n) sums x_n.
    const unsigned x0 = kFold == kFoldCenter ? sub_pairs(b0, shift) : b0;
    const unsigned x1 = kFold == kFoldCenter ? sub_pairs(b1, shift) : b1;
    const unsigned rows[4] = {x0, ones(), x1, ones()};
    mma16816(rs, rows, x0, x1, T{});
  }
  if constexpr (kCols == 8) {
    // ldmatrix.x2.trans: lanes 0-7 give rows 0-7 of k, lanes 8-15 rows
    // 8-15 (the others' addresses are not read); columns 8-15 of M are zero.
    const unsigned addr = bulk::shared_address(tile + chain::tile_at<kCols>(lane_ & 15, 0));
    unsigned w[4] = {0u, 0u, 0u, 0u};
    asm volatile("ldmatrix.sync.aligned.m8n8.x2.trans.shared.b16 {%0,%1}, [%2];" : "=r"(w[0]), "=r"(w[2]) : "r"(addr));
    mma16816(d[0], w, b0, b1, T{});
    if constexpr (kColumnSums) mma16816(cs[0], w, ones(), ones(), T{});
  } else {
    // ldmatrix.x4.trans: lanes 8q .. 8q + 7 give the rows of matrix q: rows
    // 0-7 then 8-15 of k, columns 0-7 then 8-15 of the half.
    const int row = (lane_ & 7) + 8 * (lane_ >> 4);
#pragma unroll
    for (int h = 0; h < kHalves; ++h) {
      const int piece = 2 * h + ((lane_ >> 3) & 1);
      const unsigned addr = bulk::shared_address(tile + chain::tile_at<kCols>(row, piece));
      unsigned w[4];
      asm volatile("ldmatrix.sync.aligned.m8n8.x4.trans.shared.b16 {%0,%1,%2,%3}, [%4];"
                   : "=r"(w[0]), "=r"(w[1]), "=r"(w[2]), "=r"(w[3])
                   : "r"(addr));
      mma16816(d[h], w, b0, b1, T{});
      if constexpr (kColumnSums) mma16816(cs[h], w, ones(), ones(), T{});
    }
  }
}

}  // namespace gdl
