// Reductions (sum, mean, max, min) over one axis or several, softmax,
// cumsum, layernorm and rmsnorm.
//
// A tensor is viewed as [outer, len, inner] around the reduced axis.
//  - inner == 1 (the last axis): one block per row, threads stride over the
//    row, then a block-wide warp-shuffle reduction (works for any blockDim).
//  - inner > 1: a block takes 32 adjacent columns of one outer index; its
//    warps split the len axis (coalesced reads across the 32 columns) and
//    combine through shared memory.
// Floats accumulate in float; i32 sum/mean accumulate in 64 bits (the sum
// then wraps like the interpreter's, the mean truncates toward zero).
// Several axes: an AxesMap says where each result's positions lie.
//
// Padding (buckets, gdl_abi_types.cuh): every function takes `valid`, the
// number of positions along the combined axis that hold data (<= len, which
// is the layout extent). Reductions, softmax's peak and sum, and the norms'
// statistics use positions < valid only, and mean divides by valid; softmax
// and the norms still write every position (the padded ones from padding).
// The overloads without `valid` use valid == len.
#pragma once

#include "gdl_index.cuh"
#include "gdl_ops.cuh"

namespace gdl {

template <bool B, typename X, typename Y> struct pick { typedef X type; };
template <typename X, typename Y> struct pick<false, X, Y> { typedef Y type; };

// ------------------------------------------------------------ policies
// acc: accumulator type; lift: storage element -> acc; combine; finish:
// acc -> the value in the dtype's domain (then rounded by gdl::cvt).
template <typename T> struct Sum {
  typedef typename pick<is_int_dtype<T>::value, long long, float>::type acc;
  typedef typename pick<is_int_dtype<T>::value, int, float>::type result;
  static GDL_DEV acc identity() { return 0; }
  static GDL_DEV acc lift(T x) { return (acc)num(x); }
  static GDL_DEV acc combine(acc a, acc b) { return a + b; }
  template <typename I> static GDL_DEV result finish(long long a, I) { return wrap_i32(a); }
  template <typename I> static GDL_DEV result finish(float a, I) { return a; }
};
template <typename T> struct Mean {
  typedef typename pick<is_int_dtype<T>::value, long long, float>::type acc;
  typedef typename pick<is_int_dtype<T>::value, int, float>::type result;
  static GDL_DEV acc identity() { return 0; }
  static GDL_DEV acc lift(T x) { return (acc)num(x); }
  static GDL_DEV acc combine(acc a, acc b) { return a + b; }
  template <typename I> static GDL_DEV result finish(long long a, I len) { return sat_i32(a / (long long)len); }
  template <typename I> static GDL_DEV result finish(float a, I len) { return a / (float)len; }
};
template <typename T> struct Max {  // NaN propagates
  typedef typename pick<is_int_dtype<T>::value, int, float>::type acc;
  typedef acc result;
  static GDL_DEV acc identity() { return lowest(acc()); }
  static GDL_DEV acc lift(T x) { return num(x); }
  static GDL_DEV acc combine(acc a, acc b) { return op::max(a, b); }
  template <typename I> static GDL_DEV result finish(acc a, I) { return a; }
  static GDL_DEV float lowest(float) { return -inf_f32(); }
  static GDL_DEV int lowest(int) { return int_min(); }
};
template <typename T> struct Min {  // NaN propagates
  typedef typename pick<is_int_dtype<T>::value, int, float>::type acc;
  typedef acc result;
  static GDL_DEV acc identity() { return highest(acc()); }
  static GDL_DEV acc lift(T x) { return num(x); }
  static GDL_DEV acc combine(acc a, acc b) { return op::min(a, b); }
  template <typename I> static GDL_DEV result finish(acc a, I) { return a; }
  static GDL_DEV float highest(float) { return inf_f32(); }
  static GDL_DEV int highest(int) { return 2147483647; }
};
struct FloatSum {
  typedef float acc;
  static GDL_DEV float combine(float a, float b) { return a + b; }
};
struct FloatPeak {  // ignores NaN, like the interpreter's softmax peak
  typedef float acc;
  static GDL_DEV float combine(float a, float b) { return fmaxf(a, b); }
};

// ------------------------------------------------------------ block reduce
// Lane 0 of the warp gets the combination of lanes [0, valid); `mask` names
// the lanes of this warp that exist (the last warp of a block may be partial).
template <typename P> GDL_DEV typename P::acc warp_reduce(typename P::acc v, unsigned mask, unsigned valid) {
  const unsigned lane = threadIdx.x & 31u;
#pragma unroll
  for (unsigned offset = 16; offset > 0; offset >>= 1) {
    typename P::acc other = __shfl_down_sync(mask, v, offset);
    if (lane + offset < valid) v = P::combine(v, other);
  }
  return v;
}

// Every thread of the block gets the combination of all threads' v. Must be
// reached by all threads of the block.
template <typename P> GDL_DEV typename P::acc block_reduce(typename P::acc v) {
  typedef typename P::acc A;
  __shared__ A partial[32];
  __shared__ A total;  // not partial[0]: other lanes of warp 0 may still be reading that
  const unsigned lane = threadIdx.x & 31u, warp = threadIdx.x >> 5;
  const unsigned warps = (blockDim.x + 31u) >> 5;
  const unsigned rest = blockDim.x - (warp << 5);
  const unsigned here = rest < 32u ? rest : 32u;
  const unsigned mask = here == 32u ? 0xffffffffu : ((1u << here) - 1u);
  v = warp_reduce<P>(v, mask, here);
  __syncthreads();  // readers of partial[] from an earlier call are done
  if (lane == 0) partial[warp] = v;
  __syncthreads();
  if (warp == 0) {
    A w = lane < warps ? partial[lane] : partial[0];
    w = warp_reduce<P>(w, mask, warps);
    if (lane == 0) total = w;
  }
  __syncthreads();
  return total;
}

// ------------------------------------------------------------ sum/mean/max
// x [rows, len] -> y [rows]; one block per row.
template <typename P, typename I, typename TX, typename TY>
GDL_DEV void reduce_rows(const TX* x, TY* y, I rows, I len, I valid) {
  typedef typename P::acc A;
  valid = min_of(valid, len);
  for (I row = task_first<I>(); row < rows; row += task_stride<I>()) {
    const TX* xr = x + row * len;
    A acc = P::identity();
    for (I j = (I)threadIdx.x; j < valid; j += (I)blockDim.x) acc = P::combine(acc, P::lift(xr[j]));
    acc = block_reduce<P>(acc);
    if (threadIdx.x == 0) y[row] = cvt<TY>(P::finish(acc, valid));
  }
}
template <typename P, typename I, typename TX, typename TY>
GDL_DEV void reduce_rows(const TX* x, TY* y, I rows, I len) { reduce_rows<P, I>(x, y, rows, len, len); }

// Width of the column group a block takes: 32, or the whole block when smaller.
GDL_DEV unsigned column_group_width() { return blockDim.x < 32u ? blockDim.x : 32u; }

// x [outer, len, inner] -> y [outer, inner]; tasks: outer * ceil(inner / 32),
// task t -> outer index t % outer, column group t / outer.
template <typename P, typename I, typename TX, typename TY>
GDL_DEV void reduce_cols(const TX* x, TY* y, I outer, I len, I inner, I valid) {
  typedef typename P::acc A;
  valid = min_of(valid, len);
  __shared__ A partial[32][33];
  const unsigned width = column_group_width();
  const unsigned lane = threadIdx.x % width, group = threadIdx.x / width;
  const unsigned wanted = blockDim.x / width;
  const unsigned groups = wanted < 32u ? wanted : 32u;
  const I tasks = outer * ceil_div(inner, (I)width);
  for (I task = task_first<I>(); task < tasks; task += task_stride<I>()) {
    const I o = task % outer;
    const I col = (task / outer) * (I)width + (I)lane;
    A acc = P::identity();
    if (group < groups && col < inner)
      for (I r = (I)group; r < valid; r += (I)groups) acc = P::combine(acc, P::lift(x[(o * len + r) * inner + col]));
    if (group < groups) partial[group][lane] = acc;
    __syncthreads();
    if (group == 0 && col < inner) {
      A total = partial[0][lane];
      for (unsigned g = 1; g < groups; ++g) total = P::combine(total, partial[g][lane]);
      y[o * inner + col] = cvt<TY>(P::finish(total, valid));
    }
    __syncthreads();
  }
}
template <typename P, typename I, typename TX, typename TY>
GDL_DEV void reduce_cols(const TX* x, TY* y, I outer, I len, I inner) {
  reduce_cols<P, I>(x, y, outer, len, inner, len);
}

// ------------------------------------------------------------ several axes
// Where the positions of one result lie: result o's coordinates along the
// NK kept axes (row-major over `kept`) give its first element; position r
// (row-major over the valid `counts` of the NR reduced axes) is that plus
// the reduced coordinates times their strides. No kept axis: NK = 1 with
// kept {1}, stride {0}.
template <int NK, int NR, typename I> struct AxesMap {
  I kept[NK], kept_stride[NK];
  I counts[NR], stride[NR];
  GDL_DEV I positions() const {
    I n = 1;
#pragma unroll
    for (int d = 0; d < NR; ++d) n *= counts[d];
    return n;
  }
  GDL_DEV I first(I o) const {
    I off = 0;
#pragma unroll
    for (int d = NK - 1; d >= 0; --d) {
      const I q = o / kept[d];
      off += (o - q * kept[d]) * kept_stride[d];
      o = q;
    }
    return off;
  }
  GDL_DEV I offset(I r) const {
    I off = 0;
#pragma unroll
    for (int d = NR - 1; d >= 0; --d) {
      const I q = r / counts[d];
      off += (r - q * counts[d]) * stride[d];
      r = q;
    }
    return off;
  }
};

// y [results]: a block per result, its threads striding over the positions.
template <typename P, typename TX, typename TY, int NK, int NR, typename I>
GDL_DEV void reduce_axes_rows(const TX* x, TY* y, I results, AxesMap<NK, NR, I> m) {
  typedef typename P::acc A;
  const I positions = m.positions();
  for (I o = task_first<I>(); o < results; o += task_stride<I>()) {
    const TX* xo = x + m.first(o);
    A acc = P::identity();
    for (I r = (I)threadIdx.x; r < positions; r += (I)blockDim.x) acc = P::combine(acc, P::lift(xo[m.offset(r)]));
    acc = block_reduce<P>(acc);
    if (threadIdx.x == 0) y[o] = cvt<TY>(P::finish(acc, positions));
  }
}

// y [results]: a thread per result, over its positions in order.
template <typename P, typename TX, typename TY, int NK, int NR, typename I>
GDL_DEV void reduce_axes_cols(const TX* x, TY* y, I results, AxesMap<NK, NR, I> m) {
  typedef typename P::acc A;
  const I positions = m.positions();
  const I threads = (I)blockDim.x;
  for (I o = task_first<I>() * threads + (I)threadIdx.x; o < results; o += task_stride<I>() * threads) {
    const TX* xo = x + m.first(o);
    A acc = P::identity();
    for (I r = 0; r < positions; ++r) acc = P::combine(acc, P::lift(xo[m.offset(r)]));
    y[o] = cvt<TY>(P::finish(acc, positions));
  }
}

// ------------------------------------------------------------ cumsum
// Floats add in float; i32 adds in unsigned 32 bits, which wraps like the
// interpreter's 64-bit sum wrapped to 32.
template <typename T> struct ScanSum {
  typedef typename pick<is_int_dtype<T>::value, unsigned, float>::type acc;
  static GDL_DEV acc lift(T x) { return (acc)num(x); }
  static GDL_DEV float finish(float a) { return a; }
  static GDL_DEV int finish(unsigned a) { return wrap_i32((long long)a); }
};

// Inclusive prefix sum of v over the block's threads in order; *total gets
// the whole block's sum. blockDim.x must be a multiple of 32 (row_block's
// are); every thread of the block must call it.
template <typename A> GDL_DEV A block_inclusive_scan(A v, A* total) {
  __shared__ A warp_sums[32];
  const unsigned lane = threadIdx.x & 31u, warp = threadIdx.x >> 5, warps = blockDim.x >> 5;
#pragma unroll
  for (unsigned offset = 1; offset < 32; offset <<= 1) {
    const A other = __shfl_up_sync(0xffffffffu, v, offset);
    if (lane >= offset) v += other;
  }
  if (lane == 31) warp_sums[warp] = v;
  __syncthreads();
  if (warp == 0) {
    A w = lane < warps ? warp_sums[lane] : (A)0;
#pragma unroll
    for (unsigned offset = 1; offset < 32; offset <<= 1) {
      const A other = __shfl_up_sync(0xffffffffu, w, offset);
      if (lane >= offset) w += other;
    }
    if (lane < warps) warp_sums[lane] = w;
  }
  __syncthreads();
  if (warp > 0) v += warp_sums[warp - 1];
  *total = warp_sums[warps - 1];
  __syncthreads();  // the next call may overwrite warp_sums
  return v;
}

// x, y [rows, len]: a block per row, scanning it in chunks of blockDim.x.
template <typename P, typename I, typename TX, typename TY>
GDL_DEV void cumsum_rows(const TX* x, TY* y, I rows, I len) {
  typedef typename P::acc A;
  for (I row = task_first<I>(); row < rows; row += task_stride<I>()) {
    const TX* xr = x + row * len;
    TY* yr = y + row * len;
    A carry = 0;  // the sum of the chunks before this one
    for (I start = 0; start < len; start += (I)blockDim.x) {
      const I j = start + (I)threadIdx.x;
      A chunk;
      const A v = block_inclusive_scan<A>(j < len ? P::lift(xr[j]) : (A)0, &chunk);
      if (j < len) yr[j] = cvt<TY>(P::finish(carry + v));
      carry += chunk;
    }
  }
}

// x, y [outer, len, inner], the sum along len: a thread per column.
template <typename P, typename I, typename TX, typename TY>
GDL_DEV void cumsum_cols(const TX* x, TY* y, I outer, I len, I inner) {
  typedef typename P::acc A;
  const I columns = outer * inner;
  const I threads = (I)blockDim.x;
  for (I c = task_first<I>() * threads + (I)threadIdx.x; c < columns; c += task_stride<I>() * threads) {
    const I o = c / inner;
    const I base = o * len * inner + (c - o * inner);
    A total = 0;
    for (I r = 0; r < len; ++r) {
      total += P::lift(x[base + r * inner]);
      y[base + r * inner] = cvt<TY>(P::finish(total));
    }
  }
}

// ------------------------------------------------------------ rows in registers
// Softmax and the norms read a row of at most kRowRegs * blockDim.x elements
// from memory once: thread t keeps elements t, t + blockDim.x, ... in
// registers, all loads in flight together, and every later pass runs over
// the registers. The passes visit the elements in the same order as the
// loops over memory that longer rows take, so both give the same bits.
constexpr int kRowRegs = 16;

template <typename I> GDL_DEV bool row_fits_registers(I len) { return len <= (I)kRowRegs * (I)blockDim.x; }

template <typename I> struct RowInRegisters {
  float v[kRowRegs];
  template <typename TX> GDL_DEV void load(const TX* xr, I len) {
#pragma unroll
    for (int i = 0; i < kRowRegs; ++i) {
      const I j = at(i);
      v[i] = j < len ? num(xr[j]) : 0.0f;
    }
  }
  GDL_DEV I at(int i) const { return (I)threadIdx.x + (I)i * (I)blockDim.x; }  // the row index of v[i]
  // This thread's sum of f(x) over its elements at positions < valid.
  template <typename F> GDL_DEV float sum_valid(I valid, const F& f) const {
    float total = 0.0f;
#pragma unroll
    for (int i = 0; i < kRowRegs; ++i)
      if (at(i) < valid) total += f(v[i]);
    return total;
  }
  // yr[j] = g(x, j) for this thread's elements x at every position j < len.
  template <typename TY, typename G> GDL_DEV void store(TY* yr, I len, const G& g) const {
#pragma unroll
    for (int i = 0; i < kRowRegs; ++i)
      if (at(i) < len) yr[at(i)] = cvt<TY>(g(v[i], at(i)));
  }
};

// ------------------------------------------------------------ softmax
// x, y [rows, len]: y = exp(x - max) / sum(exp(x - max)) per row.
template <typename I, typename TX, typename TY>
GDL_DEV void softmax_rows(const TX* x, TY* y, I rows, I len, I valid) {
  valid = min_of(valid, len);
  for (I row = task_first<I>(); row < rows; row += task_stride<I>()) {
    const TX* xr = x + row * len;
    TY* yr = y + row * len;
    if (row_fits_registers(len)) {
      RowInRegisters<I> r;
      r.load(xr, len);
      float peak = -inf_f32();
#pragma unroll
      for (int i = 0; i < kRowRegs; ++i)
        if (r.at(i) < valid) peak = fmaxf(peak, r.v[i]);
      peak = block_reduce<FloatPeak>(peak);
      const float total = block_reduce<FloatSum>(r.sum_valid(valid, [&](float x) { return expf(x - peak); }));
      r.store(yr, len, [&](float x, I) { return expf(x - peak) / total; });
      continue;
    }
    float peak = -inf_f32();
    for (I j = (I)threadIdx.x; j < valid; j += (I)blockDim.x) peak = fmaxf(peak, num(xr[j]));
    peak = block_reduce<FloatPeak>(peak);
    float total = 0.0f;
    for (I j = (I)threadIdx.x; j < valid; j += (I)blockDim.x) total += expf(num(xr[j]) - peak);
    total = block_reduce<FloatSum>(total);
    for (I j = (I)threadIdx.x; j < len; j += (I)blockDim.x) yr[j] = cvt<TY>(expf(num(xr[j]) - peak) / total);
  }
}
template <typename I, typename TX, typename TY>
GDL_DEV void softmax_rows(const TX* x, TY* y, I rows, I len) { softmax_rows<I>(x, y, rows, len, len); }

// x, y [outer, len, inner], softmax over len: one thread per column.
template <typename I, typename TX, typename TY>
GDL_DEV void softmax_cols(const TX* x, TY* y, I outer, I len, I inner, I valid) {
  valid = min_of(valid, len);
  const I columns = outer * inner;
  const I threads = (I)blockDim.x;
  for (I c = task_first<I>() * threads + (I)threadIdx.x; c < columns; c += task_stride<I>() * threads) {
    const I o = c / inner;
    const I base = o * len * inner + (c - o * inner);
    float peak = -inf_f32();
    for (I r = 0; r < valid; ++r) peak = fmaxf(peak, num(x[base + r * inner]));
    float total = 0.0f;
    for (I r = 0; r < valid; ++r) total += expf(num(x[base + r * inner]) - peak);
    for (I r = 0; r < len; ++r) y[base + r * inner] = cvt<TY>(expf(num(x[base + r * inner]) - peak) / total);
  }
}
template <typename I, typename TX, typename TY>
GDL_DEV void softmax_cols(const TX* x, TY* y, I outer, I len, I inner) {
  softmax_cols<I>(x, y, outer, len, inner, len);
}

// ------------------------------------------------------------ norms
// x, y [rows, len]; w, b: gdl::Column / One / Zero.
// layernorm: (x - mean) / sqrt(var + eps) * w + b, biased variance, two
// passes (over registers when the row fits them, else over memory).
template <typename I, typename TX, typename W, typename B, typename TY>
GDL_DEV void layernorm_rows(const TX* x, W w, B b, TY* y, I rows, I len, I valid, float eps) {
  valid = min_of(valid, len);
  for (I row = task_first<I>(); row < rows; row += task_stride<I>()) {
    const TX* xr = x + row * len;
    TY* yr = y + row * len;
    if (row_fits_registers(len)) {
      RowInRegisters<I> r;
      r.load(xr, len);
      const float mean = block_reduce<FloatSum>(r.sum_valid(valid, [](float x) { return x; })) / (float)valid;
      const float squares = r.sum_valid(valid, [&](float x) {
        const float d = x - mean;
        return d * d;
      });
      const float inv = 1.0f / sqrtf(block_reduce<FloatSum>(squares) / (float)valid + eps);
      r.store(yr, len, [&](float x, I j) { return layernorm_value(x, mean, inv, w, b, j); });
      continue;
    }
    float total = 0.0f;
    for (I j = (I)threadIdx.x; j < valid; j += (I)blockDim.x) total += num(xr[j]);
    const float mean = block_reduce<FloatSum>(total) / (float)valid;
    float squares = 0.0f;
    for (I j = (I)threadIdx.x; j < valid; j += (I)blockDim.x) {
      const float d = num(xr[j]) - mean;
      squares += d * d;
    }
    const float inv = 1.0f / sqrtf(block_reduce<FloatSum>(squares) / (float)valid + eps);
    for (I j = (I)threadIdx.x; j < len; j += (I)blockDim.x)
      yr[j] = cvt<TY>(layernorm_value(num(xr[j]), mean, inv, w, b, j));
  }
}
template <typename I, typename TX, typename W, typename B, typename TY>
GDL_DEV void layernorm_rows(const TX* x, W w, B b, TY* y, I rows, I len, float eps) {
  layernorm_rows<I>(x, w, b, y, rows, len, len, eps);
}

// rmsnorm: x / sqrt(mean(x^2) + eps) * w.
template <typename I, typename TX, typename W, typename TY>
GDL_DEV void rmsnorm_rows(const TX* x, W w, TY* y, I rows, I len, I valid, float eps) {
  valid = min_of(valid, len);
  for (I row = task_first<I>(); row < rows; row += task_stride<I>()) {
    const TX* xr = x + row * len;
    TY* yr = y + row * len;
    if (row_fits_registers(len)) {
      RowInRegisters<I> r;
      r.load(xr, len);
      const float squares = r.sum_valid(valid, [](float x) { return x * x; });
      const float inv = 1.0f / sqrtf(block_reduce<FloatSum>(squares) / (float)valid + eps);
      r.store(yr, len, [&](float x, I j) { return rmsnorm_value(x, inv, w, j); });
      continue;
    }
    float squares = 0.0f;
    for (I j = (I)threadIdx.x; j < valid; j += (I)blockDim.x) {
      const float v = num(xr[j]);
      squares += v * v;
    }
    const float inv = 1.0f / sqrtf(block_reduce<FloatSum>(squares) / (float)valid + eps);
    for (I j = (I)threadIdx.x; j < len; j += (I)blockDim.x) yr[j] = cvt<TY>(rmsnorm_value(num(xr[j]), inv, w, j));
  }
}
template <typename I, typename TX, typename W, typename TY>
GDL_DEV void rmsnorm_rows(const TX* x, W w, TY* y, I rows, I len, float eps) {
  rmsnorm_rows<I>(x, w, y, rows, len, len, eps);
}

}  // namespace gdl
