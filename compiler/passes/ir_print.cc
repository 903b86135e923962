#include "passes/ir_print.h"

#include "ops/families.h"  // number_text
#include "ops/op_def.h"

namespace gdl::ir {

std::string print_ir(const Graph& g) {
  std::string out = "program " + g.program_name + "\n";
  if (g.group.ranks > 0) out += "group " + g.group.name + " ranks(" + std::to_string(g.group.ranks) + ")\n";
  for (const DimInfo& d : g.dims) {
    out += "dim " + d.name + " in [" + std::to_string(d.lo) + ", " + std::to_string(d.hi) + "] buckets(";
    for (size_t i = 0; i < d.buckets.size(); ++i) out += (i ? ", " : "") + std::to_string(d.buckets[i]);
    out += std::string(") policy(") + (d.policy == DimPolicy::kUpdate ? "update" : "buckets") + ")\n";
  }
  for (size_t i = 0; i < g.nodes.size(); ++i) {
    const Node& n = g.nodes[i];
    out += "%" + std::to_string(i) + " = " + op_name(n.op);
    if (n.op == Op::kInput || n.op == Op::kParam || n.op == Op::kScalar || n.op == Op::kState) out += " \"" + n.name + "\"";
    if (n.op == Op::kConstant) out += " " + ops::number_text(n.attrs.value);
    if (n.op == Op::kScalar) out += " default " + ops::number_text(n.attrs.value);
    for (size_t a = 0; a < n.args.size(); ++a) out += (a ? ", %" : " %") + std::to_string(n.args[a]);
    out += ops::attrs_text(n);
    out += " : " + type_to_string(n.type, g.dims) + "\n";
  }
  for (const Output& o : g.outputs) out += "output \"" + o.name + "\" = %" + std::to_string(o.value) + "\n";
  for (const StateUpdate& u : g.state_updates)
    out += "state \"" + g.node(u.state).name + "\" = %" + std::to_string(u.value) + "\n";
  return out;
}

}  // namespace gdl::ir
