// A position in the source file a program was compiled from, carried by the
// IR and the artifact so that kernels and plans can name the line of gdl
// they came from.
#pragma once

#include <cstdint>

namespace gdl {

// line and col are 1-based; col counts bytes. line == 0 means "no position"
// (e.g. a compiler-made node).
struct SourceLoc {
  uint32_t line = 0;
  uint32_t col = 0;
  bool valid() const { return line != 0; }
  bool operator==(const SourceLoc&) const = default;
};

}  // namespace gdl
