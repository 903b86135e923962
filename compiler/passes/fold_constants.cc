// fold_constants: evaluate what needs no run-time data, skip what does nothing.
//
// 1. Walk the nodes in topological order with a redirection table
//    (replacement[id], initially id itself).
// 2. Rewrite each node's arguments through the table first, so a chain of
//    foldable nodes folds in one walk.
// 3. An elementwise node whose arguments are all rank-0 constants becomes a
//    constant in place (same id, so the order stays topological); its value
//    comes from eval_node, rounded to the node's dtype.
// 4. A node that its op says computes its argument unchanged (OpDef::
//    is_identity: a cast to the same dtype, a reshape to the same shape, a
//    transpose by the identity permutation) is redirected to its argument.
// 5. Outputs are rewritten through the table. Nothing is removed here.
#include "passes/fold_constants.h"

#include <vector>

#include "interp/interp.h"
#include "ops/op_def.h"

namespace gdl {
namespace {

bool is_rank0_constant(const ir::Node& n) { return n.op == ir::Op::kConstant && n.type.rank() == 0; }

bool is_identity(const ir::Node& n, const ir::Node& arg) {
  const ops::OpDef& def = ops::op_def(n.op);
  return def.is_identity != nullptr && def.is_identity(n, arg);
}

// The node's value, computed from its constant arguments.
double evaluate(const ir::Node& n, const ir::Graph& g) {
  std::vector<HostTensor> values;
  for (ir::ValueId a : n.args) {
    const ir::Node& c = g.node(a);
    values.push_back(HostTensor{c.type.dtype, {}, {round_to_dtype(c.attrs.value, c.type.dtype)}});
  }
  std::vector<const HostTensor*> pointers;
  for (const HostTensor& v : values) pointers.push_back(&v);
  return eval_node(n, pointers, {}).data.at(0);
}

}  // namespace

void fold_constants(ir::Graph& g) {
  std::vector<ir::ValueId> replacement(g.nodes.size());
  for (size_t id = 0; id < g.nodes.size(); ++id) {
    replacement[id] = static_cast<ir::ValueId>(id);
    ir::Node& n = g.nodes[id];
    for (ir::ValueId& a : n.args) a = replacement.at(static_cast<size_t>(a));
    if (ir::is_leaf(n.op)) continue;

    bool all_constant = true;
    for (ir::ValueId a : n.args) all_constant = all_constant && is_rank0_constant(g.node(a));
    if (all_constant && ops::is_elementwise(n.op) && n.type.rank() == 0) {
      double value = evaluate(n, g);
      n.op = ir::Op::kConstant;
      n.args.clear();
      n.attrs = ir::Attrs{};
      n.attrs.value = value;
      continue;
    }
    if (n.args.size() == 1 && is_identity(n, g.node(n.args[0]))) replacement[id] = n.args[0];
  }
  for (ir::Output& o : g.outputs) o.value = replacement.at(static_cast<size_t>(o.value));
  for (ir::StateUpdate& u : g.state_updates) u.value = replacement.at(static_cast<size_t>(u.value));
}

}  // namespace gdl
