// The elementwise driver: a grid-stride loop over the flat indices of the
// result. The generated kernel passes a lambda that computes and stores the
// element at flat index i (a single op, a fused chain of ops, or a data
// movement op: transpose, slice, concat, gather, reshape, whose operand
// offsets come from the result's coordinates and the operands' strides).
#pragma once

#include "gdl_index.cuh"

namespace gdl {

template <typename I, typename F> GDL_DEV void for_each_element(I n, F&& body) {
  const I threads = (I)blockDim.x;
  const I stride = (I)gridDim.x * (I)gridDim.y * threads;
  for (I i = task_first<I>() * threads + (I)threadIdx.x; i < n; i += stride) body(i);
}

}  // namespace gdl
