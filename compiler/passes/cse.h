// Common subexpression elimination on the IR.
#pragma once

#include "ir.h"

namespace gdl {

// Merges non-leaf nodes with the same op, arguments, attrs and result type,
// and constants with the same value (bit for bit, so 0.0 and -0.0 stay
// apart) and type, keeping the first of each; uses and outputs are
// redirected to it. Inputs, params and scalars are never merged. Node ids do
// not change; the duplicates stay behind for eliminate_dead_code to drop.
void eliminate_common_subexpressions(ir::Graph& g);

}  // namespace gdl
