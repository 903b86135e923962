// A tensor in host memory as the CPU reference interpreter holds it.
#pragma once

#include <cstdint>
#include <vector>

#include "types.h"

namespace gdl {

// Values are held as doubles, each rounded to the dtype, so that a value is
// exactly representable in its dtype and encodes to raw bytes without loss.
struct HostTensor {
  DType dtype = DType::kF32;
  std::vector<int64_t> shape;  // concrete extents
  std::vector<double> data;    // row-major, rounded to dtype
  int64_t size() const { return static_cast<int64_t>(data.size()); }
};

}  // namespace gdl
