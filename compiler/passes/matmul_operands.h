// Folds data movement around a matmul into how it reads its operands.
#pragma once

#include "ir.h"

namespace gdl {

// 1. A matmul operand that is a transpose swapping the last two axes (and
//    keeping the others) is read through the transpose: the matmul takes
//    the transpose's input and a transposed layout (ops/matmul.h).
// 2. A matmul whose every use is a slice taking a range of its last axis
//    (every other axis whole) is read through those slices: each slice
//    becomes a matmul over the same operands whose layout keeps only its
//    columns (`qkv[..., 0:D]` of a fused projection reads D columns of the
//    weight, not a copy of the product).
// Neither changes a value; the transposes and matmuls left without uses
// stay behind for eliminate_dead_code.
void fold_matmul_operands(ir::Graph& g);

}  // namespace gdl
