// How a matmul node reads its operands. `a @ b` reads them as stored; the
// matmul-operands pass (passes/matmul_operands.h) folds a transpose of
// either operand, and a column window of the result, into the matmul
// instead of copying: the kernels then read the operand where it lies
// (gdl_matmul_common.cuh operand_index). Kept in Attrs::ints as
// [transpose_a, transpose_b, col_begin, col_count], empty for as stored.
#pragma once

#include <cstdint>
#include <vector>

#include "ir.h"

namespace gdl::ops {

struct MatmulLayout {
  bool transpose_a = false;  // a is stored [..., K, M]
  bool transpose_b = false;  // b is stored [..., N, K]
  // The result's columns are columns [col_begin, col_begin + col_count) of
  // b (as read, after any transpose); col_count 0: all of them.
  int64_t col_begin = 0;
  int64_t col_count = 0;
  bool as_stored() const { return !transpose_a && !transpose_b && col_begin == 0 && col_count == 0; }
  bool windowed() const { return col_count != 0; }
};

// nullopt when the attributes are not a layout (a corrupt node).
std::optional<MatmulLayout> matmul_layout(const ir::Attrs& attrs);
MatmulLayout matmul_layout(const ir::Node& n);  // of a verified node
std::vector<int64_t> matmul_layout_ints(const MatmulLayout& layout);

// The operands as the matmul reads them: a as [..., M, K], b as [..., K, N]
// (a window's N is its col_count). Shapes of the stored operands in, of rank >= 2.
Shape matmul_a_shape(const Shape& stored_a, const MatmulLayout& layout);
Shape matmul_b_shape(const Shape& stored_b, const MatmulLayout& layout);
Shape matmul_a_shape(const ir::Graph& g, const ir::Node& matmul);
Shape matmul_b_shape(const ir::Graph& g, const ir::Node& matmul);

}  // namespace gdl::ops
