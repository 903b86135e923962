// Dead code elimination on the IR.
#pragma once

#include "ir.h"

namespace gdl {

// Drops every node that no output depends on, except inputs, params and
// run-time scalars, which always stay so that the binding API of a program
// does not change when it stops using one. The remaining nodes are
// renumbered 0..n-1 in their old order (still topological); arguments and
// outputs follow.
void eliminate_dead_code(ir::Graph& g);

}  // namespace gdl
