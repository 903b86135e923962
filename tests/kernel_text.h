// Reading a kernel's addresses in generated code (codegen tests).
#pragma once

#include <cstdint>
#include <string>

#include "kernel_table.h"

namespace gdl::testing {

// Whether `source` addresses `offset` the way kernel k's code does:
// `<head>offsets.at[i])` where k's i-th offset is `offset`, or, past
// kMaxKernelOffsets, `<head>OFFSETull)`. `head` is the code before the
// offset, e.g. "reinterpret_cast<float*>(arena + ".
inline bool addresses(const std::string& source, const Kernel& k, const std::string& head, uint64_t offset) {
  for (size_t i = 0; i < k.offsets.size(); ++i)
    if (k.offsets[i] == offset && source.find(head + "offsets.at[" + std::to_string(i) + "])") != std::string::npos)
      return true;
  return source.find(head + std::to_string(offset) + "ull)") != std::string::npos;
}

}  // namespace gdl::testing
