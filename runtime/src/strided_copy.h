// Strided copies between a packed and a padded layout: the runtime binds the
// valid rows of an input into its bucket's padded buffer, reads the valid
// rows of an output back, and packs inputs for the eager fallback with them.
#pragma once

#include <cstddef>
#include <cstdint>
#include <vector>

namespace gdl::rt {

// One rectangle of a strided copy: `height` rows of `width` units, the rows
// `src_pitch` / `dst_pitch` units apart, starting at `src` / `dst` (what
// cudaMemcpy2D takes, in units of `unit` bytes as given below).
struct CopyPiece {
  uint64_t src = 0, dst = 0, width = 0, height = 1, src_pitch = 0, dst_pitch = 0;
};

// The pieces that copy the leading `count` block of a row-major tensor
// stored with extents `src_extents` into one stored with `dst_extents`
// (same rank; count[a] <= both extents). Offsets and sizes are in units of
// `unit` (an element size in bytes, or 1 for element counts). Axes after
// the innermost padded one merge into each row; axes before it that are not
// padded merge into the height, so a padded leading dim is one piece and a
// padded inner dim one 2D piece per index of the outer padded axes.
std::vector<CopyPiece> strided_copy_pieces(const std::vector<int64_t>& count, const std::vector<int64_t>& src_extents,
                                           const std::vector<int64_t>& dst_extents, uint64_t unit);

}  // namespace gdl::rt
