// What the ops' CPU rules (compiler/ops/) share: strides, broadcasting and
// the view of a tensor around one axis, over HostTensors.
#pragma once

#include <algorithm>
#include <cstdint>
#include <string>
#include <vector>

#include "interp/host_tensor.h"

namespace gdl::host {

using Extents = std::vector<int64_t>;

int64_t product(const Extents& s, size_t from = 0, size_t to = SIZE_MAX);
Extents row_major_strides(const Extents& shape);
std::string extents_text(const Extents& s);  // "[2, 3]"
HostTensor make_tensor(DType dtype, Extents shape);  // zeros

// Two's complement wrap-around of an integer result to 32 bits.
double wrap_i32(int64_t v);

// Visits the indices of `out_shape` in row-major order and keeps, for each
// operand, the flat offset of the element that numpy broadcasting maps there.
class BroadcastCursor {
 public:
  BroadcastCursor(const Extents& out_shape, const std::vector<Extents>& operand_shapes);
  int64_t offset(size_t operand) const { return offsets_[operand]; }
  void next();

 private:
  Extents out_shape_;
  Extents index_;
  Extents offsets_;
  std::vector<Extents> strides_;
};

// out[i] = in[base + sum_k index_k * strides[k]] over the indices of
// out.shape: the common core of transpose and slice.
void copy_strided(const HostTensor& in, int64_t base, const Extents& strides, HostTensor& out);

// A tensor viewed as [outer, len, inner] around one axis.
struct AxisView {
  int64_t outer, len, inner;
};
AxisView view_around(const Extents& shape, int axis);

}  // namespace gdl::host
