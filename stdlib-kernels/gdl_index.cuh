// Shapes, coordinates and strides of row-major tensors, built on the device
// from run-time dims, and the task loop every structured kernel uses.
//
// I is the index type: int when every tensor of a kernel holds at most 2^30
// elements, long long otherwise (the generator decides).
#pragma once

#include "gdl_abi.cuh"

namespace gdl {

template <typename I> GDL_DEV I ceil_div(I a, I b) { return (a + b - 1) / b; }
template <typename I> GDL_DEV I min_of(I a, I b) { return a < b ? a : b; }
template <typename I> GDL_DEV I max_of(I a, I b) { return a < b ? b : a; }

// Extents of a tensor, rank R >= 1 (a rank-0 value is Shape<1>{{1}}).
template <int R, typename I> struct Shape {
  I e[R];
  GDL_DEV I count() const {
    I n = 1;
#pragma unroll
    for (int d = 0; d < R; ++d) n *= e[d];
    return n;
  }
};

template <int R, typename I> struct Coords {
  I c[R];
};

// Flat row-major index -> coordinates (i must be inside the shape).
template <int R, typename I> GDL_DEV Coords<R, I> coords_of(const Shape<R, I>& s, I i) {
  Coords<R, I> c;
#pragma unroll
  for (int d = R - 1; d > 0; --d) {
    const I q = i / s.e[d];
    c.c[d] = i - q * s.e[d];
    i = q;
  }
  c.c[0] = i;
  return c;
}

template <int R, typename I> struct Strides {
  I s[R];
  GDL_DEV I at(const Coords<R, I>& c) const {
    I off = 0;
#pragma unroll
    for (int d = 0; d < R; ++d) off += c.c[d] * s[d];
    return off;
  }
};

template <int R, typename I> GDL_DEV Strides<R, I> row_major(const Shape<R, I>& s) {
  Strides<R, I> st;
  I run = 1;
#pragma unroll
  for (int d = R - 1; d >= 0; --d) {
    st.s[d] = run;
    run *= s.e[d];
  }
  return st;
}

// Strides that read an operand broadcast (numpy rules) into a result of rank
// R: `operand` is the operand's shape left-padded with 1s to rank R. An axis
// of extent 1 gets stride 0, so any coordinate there reads element 0.
template <int R, typename I> GDL_DEV Strides<R, I> broadcast_strides(const Shape<R, I>& operand) {
  Strides<R, I> st = row_major(operand);
#pragma unroll
  for (int d = 0; d < R; ++d)
    if (operand.e[d] == 1) st.s[d] = 0;
  return st;
}

// The batch dims of a batched op (matmul): batch index b of the result ->
// element offset of each of NOP operands, whose batch dims broadcast.
template <int NB, int NOP, typename I> struct BatchMap {
  I ext[NB];
  I stride[NOP][NB];
  I count;

  GDL_DEV explicit BatchMap(const Shape<NB, I>& result) {
    count = 1;
#pragma unroll
    for (int d = 0; d < NB; ++d) {
      ext[d] = result.e[d];
      count *= ext[d];
#pragma unroll
      for (int op = 0; op < NOP; ++op) stride[op][d] = 0;
    }
  }
  // Operand `op` has batch extents `s` (left-padded with 1s) and `matrix`
  // elements per batch entry.
  GDL_DEV void set(int op, const Shape<NB, I>& s, I matrix) {
    I run = matrix;
    for (int d = NB - 1; d >= 0; --d) {
      stride[op][d] = s.e[d] == 1 ? 0 : run;
      run *= s.e[d];
    }
  }
  GDL_DEV void offsets(I b, I (&off)[NOP]) const {
#pragma unroll
    for (int op = 0; op < NOP; ++op) off[op] = 0;
#pragma unroll
    for (int d = NB - 1; d >= 0; --d) {
      const I q = b / ext[d];
      const I cd = b - q * ext[d];
      b = q;
#pragma unroll
      for (int op = 0; op < NOP; ++op) off[op] += cd * stride[op][d];
    }
  }
};

// Structured kernels run a loop over tasks (a row, a tile, ...): the block
// with linear index blockIdx.y * gridDim.x + blockIdx.x takes that task and
// every gridDim.x * gridDim.y-th after it. Any grid is correct; the launch
// rule picks one with a block per task where the dims allow.
template <typename I> GDL_DEV I task_first() { return (I)blockIdx.y * (I)gridDim.x + (I)blockIdx.x; }
template <typename I> GDL_DEV I task_stride() { return (I)gridDim.x * (I)gridDim.y; }

}  // namespace gdl
