// The IR's invariants, which a compiler bug would break: topological order,
// declared run-time dims, named leaves, and every node's result type equal to
// what its op's type rule (ops/) gives for its arguments. Cheap: the
// pipeline runs it after the IR passes, the tests after every pass.
#pragma once

#include <string>

#include "ir.h"

namespace gdl::ir {

// "" when valid, otherwise the first problem found, naming the node as "%id op".
std::string verify(const Graph& g);

}  // namespace gdl::ir
