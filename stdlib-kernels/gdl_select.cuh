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
// topk picks its k elements in k rounds, each the best of the positions
// after the previous pick in the order, so it needs no working memory.
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

// x [rows, len] -> y [rows, k], best first.
template <typename O, typename W, typename I, typename TX, typename TY>
GDL_DEV void topk_rows(const TX* x, TY* y, I rows, I len, I valid, int k) {
  typedef typename select_value<TX>::type A;
  valid = min_of(valid, len);
  for (I row = task_first<I>(); row < rows; row += task_stride<I>()) {
    const TX* xr = x + row * len;
    A last_v = 0;
    int last_i = -1;  // the previous pick; none before the first
    for (int r = 0; r < k; ++r) {
      A v = 0;
      int i = -1;
      for (I j = (I)threadIdx.x; j < valid; j += (I)blockDim.x) {
        const A e = (A)num(xr[j]);
        if (last_i < 0 || O::before(last_v, last_i, e, (int)j)) keep_better<O>(v, i, e, (int)j);
      }
      block_best<O>(v, i);
      if (threadIdx.x == 0) y[row * (I)k + r] = W::of(xr, i, (I)1);  // i >= 0: k <= valid
      last_v = v, last_i = i;
    }
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
