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

// Runs n's type rule on its arguments in g: sets n.type and n.attrs
// (normalized) and returns "", or returns why the rule refuses it. Ops whose
// rule reads the result's own type (reshape's shape, cast's dtype) read the
// n.type given. For passes that build nodes (autodiff).
std::string infer(const Graph& g, Node& n);

}  // namespace gdl::ir
