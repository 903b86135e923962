// The leaves: values no kernel computes. An input is bound by copy before
// each run (a rank-0 i32 input is a device scalar), a param once; a
// run-time scalar reaches the kernels through node parameters (its default
// in attrs.value); a constant is a rank-0 compile-time value (attrs.value).
// Constants and scalars have no buffer: kernels take them by value. A state
// is a session-owned tensor that keeps its value from one run to the next
// (its buffer is a fixed arena slot; plan/memory.cc). A dim value is a
// run-time dim used as a number (`x / cast(B, f32)`): a rank-0 i32 that
// kernels read from the valid-dims block, so padding never changes it.
#include "ops/families.h"

namespace gdl::ops {

void add_leaf_ops(std::vector<OpDef>& defs) {
  for (ir::Op op : {ir::Op::kInput, ir::Op::kParam, ir::Op::kScalar, ir::Op::kConstant, ir::Op::kState, ir::Op::kDimValue}) {
    OpDef d;
    d.op = op;
    d.fusion = FusionClass::kLeaf;
    if (op == ir::Op::kDimValue) d.attr_text = [](const ir::Attrs& a) { return "dim=" + std::to_string(a.axis); };
    defs.push_back(d);
  }
}

}  // namespace gdl::ops
