// A param's bytes as pieces of checkpoint tensors: the plan that
// Session::load_params copies to the device and assemble_params to the host.
#pragma once

#include <cstdint>
#include <vector>

#include "gdl/weights.h"

namespace gdl::rt {

struct WeightPiece {
  const uint8_t* src = nullptr;  // inside the mapped checkpoint
  uint64_t dst_offset = 0;       // bytes into the param
  uint64_t bytes = 0;
};

// The pieces that fill `param` by `rule`, which together cover it exactly
// once. InvalidArgument / NotFound naming the param and the tensor when a
// source is missing or its dtype or shape does not fit.
Expected<std::vector<WeightPiece>> weight_pieces(const Checkpoint& checkpoint, const WeightRule& rule,
                                                 const TensorInfo& param);

}  // namespace gdl::rt
