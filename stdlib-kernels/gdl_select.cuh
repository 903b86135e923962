// Selection along one axis: argmax, argmin and topk.
//
// Every op picks in one strict order (Order): NaN before any number (the
// lower index first among NaNs), then the larger value for argmax and topk
// (the smaller for argmin), ties to the lower index. So argmax and argmin
// give the first NaN when there is one (as torch does), and topk lists its
// k elements best first.
//
// A tensor is viewed as [outer, len, inner] around the axis.
//  - inner == 1 (the last axis): one block per row; each thread keeps the
//    best of its positions, then the block combines them (block_best).
//  - inner > 1: one thread per column, over the positions in order.
// topk along the last axis (one block per row) finds its k elements by a
// radix select on an order-preserving 32-bit key of each element (four
// passes of one byte each), gathers them (of the ties at the k-th key, the
// lower positions) and ranks the k in shared memory: five passes over the
// row whatever k is. Along another axis (a thread per
// column) it picks in k rounds, each the best of the positions after the
// previous pick in the order; neither needs working memory.
//
// Padding (buckets): `valid` (<= len) is how many positions along the axis
// hold data; only those are candidates. topk's type rule keeps k <= valid.
#pragma once

#include "gdl_index.cuh"
#include "gdl_ops.cuh"

namespace gdl {

template <bool kLargest> struct Order {
  // Whether a at position ia comes before b at ib.
  static GDL_DEV bool before(float a, int ia, float b, int ib) {
    const bool na = is_nan(a), nb = is_nan(b);
    if (na || nb) return na && (!nb || ia < ib);
    if (a != b) return kLargest ? a > b : a < b;
    return ia < ib;
  }
  static GDL_DEV bool before(int a, int ia, int b, int ib) {
    if (a != b) return kLargest ? a > b : a < b;
    return ia < ib;
  }
};

// The value type an element is compared in: float, or int for i32.
template <typename T> struct select_value { typedef float type; };
template <> struct select_value<int> { typedef int type; };

// (v, i) becomes (ov, oi) when that comes first; i < 0 means no element yet.
template <typename O, typename A> GDL_DEV void keep_better(A& v, int& i, A ov, int oi) {
  if (oi >= 0 && (i < 0 || O::before(ov, oi, v, i))) v = ov, i = oi;
}

// Every thread of the block gets the first (v, i) in the order over all
// threads' (i < 0 when none had one). blockDim.x must be a multiple of 32
// (row_block's are); every thread of the block must call it.
template <typename O, typename A> GDL_DEV void block_best(A& v, int& i) {
  __shared__ A part_v[32];
  __shared__ int part_i[32];
  __shared__ A best_v;
  __shared__ int best_i;
  const unsigned lane = threadIdx.x & 31u, warp = threadIdx.x >> 5, warps = blockDim.x >> 5;
#pragma unroll
  for (unsigned offset = 16; offset > 0; offset >>= 1) {
    const A ov = __shfl_down_sync(0xffffffffu, v, offset);
    const int oi = __shfl_down_sync(0xffffffffu, i, offset);
    keep_better<O>(v, i, ov, oi);
  }
  __syncthreads();  // readers of part_* and best_* from an earlier call are done
  if (lane == 0) part_v[warp] = v, part_i[warp] = i;
  __syncthreads();
  if (warp == 0) {
    i = lane < warps ? part_i[lane] : -1;
    v = part_v[lane < warps ? lane : 0];
#pragma unroll
    for (unsigned offset = 16; offset > 0; offset >>= 1) {
      const A ov = __shfl_down_sync(0xffffffffu, v, offset);
      const int oi = __shfl_down_sync(0xffffffffu, i, offset);
      keep_better<O>(v, i, ov, oi);
    }
    if (lane == 0) best_v = v, best_i = i;
  }
  __syncthreads();
  v = best_v;
  i = best_i;
}

// ------------------------------------------------------------ argmax, argmin
// x [rows, len] -> y [rows] (i32 positions).
template <typename O, typename I, typename TX>
GDL_DEV void arg_rows(const TX* x, int* y, I rows, I len, I valid) {
  typedef typename select_value<TX>::type A;
  valid = min_of(valid, len);
  for (I row = task_first<I>(); row < rows; row += task_stride<I>()) {
    const TX* xr = x + row * len;
    A v = 0;
    int i = -1;
    for (I j = (I)threadIdx.x; j < valid; j += (I)blockDim.x) keep_better<O>(v, i, (A)num(xr[j]), (int)j);
    block_best<O>(v, i);
    if (threadIdx.x == 0) y[row] = i;
  }
}

// x [outer, len, inner] -> y [outer, inner]: a thread per column.
template <typename O, typename I, typename TX>
GDL_DEV void arg_cols(const TX* x, int* y, I outer, I len, I inner, I valid) {
  typedef typename select_value<TX>::type A;
  valid = min_of(valid, len);
  const I columns = outer * inner;
  const I threads = (I)blockDim.x;
  for (I c = task_first<I>() * threads + (I)threadIdx.x; c < columns; c += task_stride<I>() * threads) {
    const I o = c / inner;
    const TX* xc = x + o * len * inner + (c - o * inner);
    A v = 0;
    int i = -1;
    for (I r = 0; r < valid; ++r) keep_better<O>(v, i, (A)num(xc[r * inner]), (int)r);
    y[c] = i;
  }
}

// ------------------------------------------------------------ topk
// What topk writes for the pick at position i of a line of elements
// `stride` apart: the element itself, or its position.
struct TopValues {
  template <typename TX, typename I> static GDL_DEV TX of(const TX* line, int i, I stride) { return line[(I)i * stride]; }
};
struct TopIndices {
  template <typename TX, typename I> static GDL_DEV int of(const TX*, int i, I) { return i; }
};

// The most elements topk selects (compiler/ops/select.cc kMaxTopK).
constexpr int kTopKMax = 256;

// A key whose unsigned order is Order<true>'s for values: NaN above
// everything, then the larger value; -0 and +0 are one value (ties between
// equal keys go to the lower position, as Order's do).
GDL_DEV unsigned topk_key(float v) {
  if (is_nan(v)) return 0xffffffffu;
  if (v == 0.0f) v = 0.0f;
  const unsigned b = __float_as_uint(v);
  return (b & 0x80000000u) ? ~b : (b | 0x80000000u);
}
GDL_DEV unsigned topk_key(int v) { return static_cast<unsigned>(v) ^ 0x80000000u; }

// Block-wide exclusive prefix count of `flag` in thread order, and the
// block's total. Every thread of the block calls it; blockDim.x is a
// multiple of 32.
GDL_DEV unsigned block_prefix_count(bool flag, unsigned* total) {
  __shared__ unsigned warp_counts[32];
  const unsigned lane = threadIdx.x & 31u, warp = threadIdx.x >> 5, warps = blockDim.x >> 5;
  const unsigned ballot = __ballot_sync(0xffffffffu, flag);
  __syncthreads();  // an earlier call's readers are done
  if (lane == 0) warp_counts[warp] = __popc(ballot);
  __syncthreads();
  unsigned before = __popc(ballot & ((1u << lane) - 1u)), all = 0;
  for (unsigned w = 0; w < warps; ++w) {
    if (w < warp) before += warp_counts[w];
    all += warp_counts[w];
  }
  *total = all;
  return before;
}

// f(key, position, in_row) for every position of a row of `valid`
// elements, this thread's share, four loads in flight at a time (a row is
// read by one block: its rate is the loads it keeps in flight). Every
// thread of a warp calls f the same number of times (in_row false past the
// end), so f may use warp-wide intrinsics.
template <typename A, typename I, typename TX, typename F>
GDL_DEV void for_each_key(const TX* xr, I valid, F f) {
  const I step = (I)blockDim.x;
  const I rounds = (valid + 4 * step - 1) / (4 * step);
  for (I r = 0; r < rounds; ++r) {
    unsigned keys[4];
#pragma unroll
    for (int u = 0; u < 4; ++u) {
      const I j = (r * 4 + (I)u) * step + (I)threadIdx.x;
      keys[u] = j < valid ? topk_key((A)num(xr[j])) : 0u;
    }
#pragma unroll
    for (int u = 0; u < 4; ++u) {
      const I j = (r * 4 + (I)u) * step + (I)threadIdx.x;
      f(keys[u], j, j < valid);
    }
  }
}

// x [rows, len] -> y [rows, k], best first (topk is always largest first:
// O is Order<true>).
template <typename O, typename W, typename I, typename TX, typename TY>
GDL_DEV void topk_rows(const TX* x, TY* y, I rows, I len, I valid, int k) {
  typedef typename select_value<TX>::type A;
  __shared__ unsigned histogram[256];
  __shared__ unsigned chosen_prefix, chosen_need;
  __shared__ unsigned cand_key[kTopKMax];
  __shared__ int cand_pos[kTopKMax];
  __shared__ int equal_pos[kTopKMax];
  __shared__ unsigned count_above, count_equal;
  valid = min_of(valid, len);
  for (I row = task_first<I>(); row < rows; row += task_stride<I>()) {
    const TX* xr = x + row * len;
    // 1. The k-th largest key, a byte at a time from the top: `need` is how
    // many of the elements that match `prefix` so far are still to be taken.
    unsigned prefix = 0, mask = 0, need = (unsigned)k;
    for (int shift = 24; shift >= 0; shift -= 8) {
      for (unsigned b = threadIdx.x; b < 256u; b += blockDim.x) histogram[b] = 0;
      __syncthreads();
      for_each_key<A>(xr, valid, [&](unsigned key, I, bool in_row) {
        const bool counted = in_row && (key & mask) == prefix;
        const unsigned digit = counted ? (key >> shift) & 255u : 256u;
        // Logits share their top bits: one atomic per distinct digit in the warp.
        const unsigned same = __match_any_sync(0xffffffffu, digit);  // for_each_key: every lane calls f
        if (counted && (__ffs(same) - 1) == (int)(threadIdx.x & 31u)) atomicAdd(&histogram[digit], (unsigned)__popc(same));
      });
      __syncthreads();
      if (threadIdx.x == 0) {
        unsigned above = 0;
        int b = 255;
        for (; b > 0 && above + histogram[b] < need; --b) above += histogram[b];
        chosen_prefix = prefix | ((unsigned)b << shift);
        chosen_need = need - above;
      }
      __syncthreads();
      prefix = chosen_prefix;
      need = chosen_need;
      mask |= 255u << shift;
    }
    // 2. The k elements: every key above the k-th (in any order: step 3
    // ranks them), and the first `need` positions holding the k-th key.
    // Those are gathered unordered when at most kTopKMax elements hold it
    // (then ranked by position), else in position order, chunk by chunk.
    const unsigned above = (unsigned)k - need;
    if (threadIdx.x == 0) count_above = 0, count_equal = 0;
    __syncthreads();
    for_each_key<A>(xr, valid, [&](unsigned key, I j, bool in_row) {
      if (in_row && key > prefix) {
        const unsigned at = atomicAdd(&count_above, 1u);
        cand_key[at] = key, cand_pos[at] = (int)j;
      } else if (in_row && key == prefix) {
        const unsigned at = atomicAdd(&count_equal, 1u);
        if (at < (unsigned)kTopKMax) equal_pos[at] = (int)j;
      }
    });
    __syncthreads();
    const unsigned equal = count_equal;
    if (equal <= (unsigned)kTopKMax) {
      for (unsigned e = threadIdx.x; e < equal; e += blockDim.x) {
        const int pos = equal_pos[e];
        unsigned before = 0;
        for (unsigned f = 0; f < equal; ++f) before += equal_pos[f] < pos;
        if (before < need) cand_key[above + before] = prefix, cand_pos[above + before] = pos;
      }
    } else {
      unsigned taken = 0;
      for (I base = 0; base < valid && taken < need; base += (I)blockDim.x) {  // block-uniform
        const I j = base + (I)threadIdx.x;
        const bool is_equal = j < valid && topk_key((A)num(xr[j])) == prefix;
        unsigned total = 0;
        const unsigned at = taken + block_prefix_count(is_equal, &total);
        if (is_equal && at < need) cand_key[above + at] = prefix, cand_pos[above + at] = (int)j;
        taken += total;
      }
    }
    __syncthreads();
    // 3. Each candidate's rank: the candidates before it in the order.
    for (int c = (int)threadIdx.x; c < k; c += (int)blockDim.x) {
      const unsigned key = cand_key[c];
      const int pos = cand_pos[c];
      int rank = 0;
      for (int d = 0; d < k; ++d) rank += cand_key[d] > key || (cand_key[d] == key && cand_pos[d] < pos);
      y[row * (I)k + rank] = W::of(xr, pos, (I)1);
    }
    __syncthreads();  // the candidates are read before the next row writes them
  }
}

// x [outer, len, inner] -> y [outer, k, inner]: a thread per column.
template <typename O, typename W, typename I, typename TX, typename TY>
GDL_DEV void topk_cols(const TX* x, TY* y, I outer, I len, I inner, I valid, int k) {
  typedef typename select_value<TX>::type A;
  valid = min_of(valid, len);
  const I columns = outer * inner;
  const I threads = (I)blockDim.x;
  for (I c = task_first<I>() * threads + (I)threadIdx.x; c < columns; c += task_stride<I>() * threads) {
    const I o = c / inner, col = c - o * inner;
    const TX* xc = x + o * len * inner + col;
    A last_v = 0;
    int last_i = -1;
    for (int r = 0; r < k; ++r) {
      A v = 0;
      int i = -1;
      for (I j = 0; j < valid; ++j) {
        const A e = (A)num(xc[j * inner]);
        if (last_i < 0 || O::before(last_v, last_i, e, (int)j)) keep_better<O>(v, i, e, (int)j);
      }
      y[(o * (I)k + r) * inner + col] = W::of(xc, i, inner);
      last_v = v, last_i = i;
    }
  }
}

}  // namespace gdl
