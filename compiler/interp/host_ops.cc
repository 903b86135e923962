#include "interp/host_ops.h"

#include "internal_error.h"

namespace gdl::host {

int64_t product(const Extents& s, size_t from, size_t to) {
  int64_t n = 1;
  for (size_t i = from; i < std::min(to, s.size()); ++i) n *= s[i];
  return n;
}

Extents row_major_strides(const Extents& shape) {
  Extents strides(shape.size(), 1);
  for (size_t i = shape.size(); i-- > 1;) strides[i - 1] = strides[i] * shape[i];
  return strides;
}

std::string extents_text(const Extents& s) {
  std::string out = "[";
  for (size_t i = 0; i < s.size(); ++i) out += (i ? ", " : "") + std::to_string(s[i]);
  return out + "]";
}

HostTensor make_tensor(DType dtype, Extents shape) {
  HostTensor t;
  t.dtype = dtype;
  t.data.assign(static_cast<size_t>(product(shape)), 0.0);
  t.shape = std::move(shape);
  return t;
}

double wrap_i32(int64_t v) { return static_cast<int32_t>(static_cast<uint32_t>(static_cast<uint64_t>(v))); }

BroadcastCursor::BroadcastCursor(const Extents& out_shape, const std::vector<Extents>& operand_shapes)
    : out_shape_(out_shape), index_(out_shape.size(), 0), offsets_(operand_shapes.size(), 0) {
  for (const Extents& s : operand_shapes) {
    GDL_INTERNAL_ASSERT(s.size() <= out_shape.size(), "broadcast operand has a higher rank than the result");
    Extents own = row_major_strides(s);
    Extents aligned(out_shape.size(), 0);
    size_t lead = out_shape.size() - s.size();
    for (size_t i = 0; i < s.size(); ++i) {
      GDL_INTERNAL_ASSERT(s[i] == out_shape[lead + i] || s[i] == 1,
                          "shape " + extents_text(s) + " does not broadcast to " + extents_text(out_shape));
      aligned[lead + i] = s[i] == 1 ? 0 : own[i];
    }
    strides_.push_back(std::move(aligned));
  }
}

void BroadcastCursor::next() {
  for (size_t axis = out_shape_.size(); axis-- > 0;) {
    ++index_[axis];
    for (size_t o = 0; o < offsets_.size(); ++o) offsets_[o] += strides_[o][axis];
    if (index_[axis] < out_shape_[axis]) return;
    for (size_t o = 0; o < offsets_.size(); ++o) offsets_[o] -= strides_[o][axis] * out_shape_[axis];
    index_[axis] = 0;
  }
}

void copy_strided(const HostTensor& in, int64_t base, const Extents& strides, HostTensor& out) {
  Extents index(out.shape.size(), 0);
  int64_t offset = base;
  for (double& v : out.data) {
    v = in.data[static_cast<size_t>(offset)];
    for (size_t axis = out.shape.size(); axis-- > 0;) {
      ++index[axis];
      offset += strides[axis];
      if (index[axis] < out.shape[axis]) break;
      offset -= strides[axis] * out.shape[axis];
      index[axis] = 0;
    }
  }
}

AxisView view_around(const Extents& shape, int axis) {
  GDL_INTERNAL_ASSERT(axis >= 0 && static_cast<size_t>(axis) < shape.size(), "axis out of range");
  auto a = static_cast<size_t>(axis);
  return {product(shape, 0, a), shape[a], product(shape, a + 1)};
}

}  // namespace gdl::host
