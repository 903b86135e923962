// strided_copy_pieces: find the innermost padded axis r (rows are its valid
// part times the unpadded axes after it), then the innermost padded axis q
// before r (the unpadded axes between them merge into one 2D piece), and
// emit one piece per index of axes [0, q].
#include "strided_copy.h"

namespace gdl::rt {

std::vector<CopyPiece> strided_copy_pieces(const std::vector<int64_t>& count, const std::vector<int64_t>& src_extents,
                                           const std::vector<int64_t>& dst_extents, uint64_t unit) {
  const size_t rank = count.size();
  int64_t total = 1;
  for (int64_t c : count) total *= c;
  if (total <= 0) return {};
  auto matching = [&](size_t a) { return count[a] == src_extents[a] && count[a] == dst_extents[a]; };
  size_t r = rank;
  for (size_t a = rank; a-- > 0;)
    if (!matching(a)) {
      r = a;
      break;
    }
  if (r == rank) {
    auto bytes = static_cast<uint64_t>(total) * unit;
    return {CopyPiece{0, 0, bytes, 1, bytes, bytes}};
  }
  uint64_t inner = 1;
  for (size_t a = r + 1; a < rank; ++a) inner *= static_cast<uint64_t>(count[a]);
  CopyPiece row;
  row.width = static_cast<uint64_t>(count[r]) * inner * unit;
  row.src_pitch = static_cast<uint64_t>(src_extents[r]) * inner * unit;
  row.dst_pitch = static_cast<uint64_t>(dst_extents[r]) * inner * unit;
  size_t q = rank;  // innermost padded axis before r
  for (size_t a = r; a-- > 0;)
    if (!matching(a)) {
      q = a;
      break;
    }
  size_t first_merged = q == rank ? 0 : q + 1;
  row.height = 1;
  for (size_t a = first_merged; a < r; ++a) row.height *= static_cast<uint64_t>(count[a]);
  if (q == rank) return {row};

  std::vector<uint64_t> src_stride(rank, unit), dst_stride(rank, unit);
  for (size_t a = rank - 1; a-- > 0;) {
    src_stride[a] = src_stride[a + 1] * static_cast<uint64_t>(src_extents[a + 1]);
    dst_stride[a] = dst_stride[a + 1] * static_cast<uint64_t>(dst_extents[a + 1]);
  }
  std::vector<CopyPiece> pieces;
  std::vector<int64_t> index(q + 1, 0);
  while (true) {
    CopyPiece p = row;
    for (size_t a = 0; a <= q; ++a) {
      p.src += static_cast<uint64_t>(index[a]) * src_stride[a];
      p.dst += static_cast<uint64_t>(index[a]) * dst_stride[a];
    }
    pieces.push_back(p);
    size_t a = q + 1;
    while (a-- > 0) {
      if (++index[a] < count[a]) break;
      index[a] = 0;
    }
    if (a == SIZE_MAX) break;
  }
  return pieces;
}

}  // namespace gdl::rt
