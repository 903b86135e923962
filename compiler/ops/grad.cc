// grad(loss, wrt): the gradient of a rank-0 float loss with respect to a
// float value the program computed or declared, of that value's type.
// Lowering writes it as the backward's own ops (Lowerer::gradient, through
// autodiff/gradient.h and every op's derivative rule, OpDef::vjp), so this
// entry is only its parameters and type rule.
#include "ops/families.h"

namespace gdl::ops {
namespace {

TypeResult infer_grad(TypeQuery& q) {
  const TensorType* loss = q.tensor(0, "grad");
  const TensorType* wrt = loss ? q.tensor(1, "grad") : nullptr;
  if (!wrt) return TypeResult::failed();
  if (loss->rank() != 0 || !is_float(loss->dtype))
    return q.error(0, "grad needs the loss as a float scalar (rank 0), got " + q.text(*loss),
                   "reduce it to one value first: sum(...) or mean(...)");
  if (!is_float(wrt->dtype))
    return q.error(1, "grad differentiates with respect to a float value, got " + q.text(*wrt),
                   "an integer or bool value has no gradient");
  return *wrt;
}

}  // namespace

void add_grad_ops(std::vector<OpDef>& defs) {
  OpDef d;
  d.op = ir::Op::kConstant;  // an expansion: no node of its own
  d.callable = "grad";
  d.params = {"loss", "wrt"};
  d.operands = d.required = 2;
  d.min_args = d.max_args = 2;
  d.expansion = Expansion::kGrad;
  d.infer = infer_grad;
  defs.push_back(d);
}

}  // namespace gdl::ops
