// Reverse-mode differentiation on the IR: `grad(loss, wrt)` in a program
// (docs/language.md, "Gradients"). The backward is ordinary IR appended to
// the graph, built by each op's derivative rule (ops::OpDef::vjp), so
// fusion, memory planning and codegen treat it like the forward, and the
// forward values it reads live until their last backward use.
#pragma once

#include <map>
#include <optional>
#include <set>
#include <string>
#include <vector>

#include "ir.h"

namespace gdl::autodiff {

// The backward of one loss built so far, which later grad calls of the same
// loss reuse: grad(loss, w1) then grad(loss, w2) share the backward of the
// part of the forward that both weights feed.
struct LossBackward {
  std::map<ir::ValueId, std::vector<ir::ValueId>> parts;  // adjoint parts each value's consumers gave
  std::set<ir::ValueId> expanded;                         // nodes whose derivative rule has run
  std::map<ir::ValueId, ir::ValueId> adjoint;             // a value's whole adjoint, once summed
};
using Backwards = std::map<ir::ValueId, LossBackward>;  // by loss

struct Gradient {
  ir::ValueId value = ir::kNoValue;  // wrt's type
  // Why not: the forward node on the way from wrt to the loss that cannot
  // be differentiated, and why ("which has no derivative rule").
  ir::ValueId blocked_at = ir::kNoValue;
  std::string why;
};

// d loss / d wrt for a rank-0 float `loss` and a float `wrt`, as new nodes
// at the end of g located at `at` (zeros where the loss does not depend on
// wrt, or only through values that are not floats).
Gradient gradient(ir::Graph& g, ir::ValueId loss, ir::ValueId wrt, SourceLoc at, Backwards& backwards);

}  // namespace gdl::autodiff
