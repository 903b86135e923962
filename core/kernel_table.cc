#include "kernel_table.h"

namespace gdl {

bool kernel_applies(const Kernel& k, const std::vector<int64_t>& dims) {
  if (applies_always(k)) return true;
  const int64_t rows = element_count(k.rows, dims);
  return rows >= k.min_rows && rows <= k.max_rows;
}

}  // namespace gdl
