// Constant folding and data-free identities on the IR.
#pragma once

#include "ir.h"

namespace gdl {

// Replaces every elementwise node whose arguments are all rank-0 constants by
// a constant holding its value (computed by the interpreter's eval_node, so
// folding rounds exactly as a run would), and redirects the uses of
//   cast to the argument's own dtype, reshape to the argument's own shape,
//   transpose by the identity permutation
// to their argument. Node ids do not change; values left unused stay in the
// graph for eliminate_dead_code to drop.
void fold_constants(ir::Graph& g);

}  // namespace gdl
