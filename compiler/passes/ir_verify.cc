// ir::verify: the IR's invariants.
//
// 1. ir::verify_structure (core/ir.h): dims, types, topological order,
//    leaves, outputs.
// 2. Every other node, in order: its argument count fits its op
//    (OpDef::min_args, max_args), and its op's type rule (OpDef::infer, the
//    one lowering checks programs with) gives exactly its result type from
//    its arguments' types and its attributes, and the attributes unchanged
//    (normalized: an axis in [0, rank), a permutation of [0, rank)).
// The first problem found is returned, naming the node as "%id op".
#include "passes/ir_verify.h"

#include <string_view>

#include "internal_error.h"
#include "ops/op_def.h"

namespace gdl::ir {
namespace {

// A type rule's questions answered from a node: its arguments' types, its
// attributes, and for reshape and cast the type it claims.
class NodeQuery final : public ops::TypeQuery {
 public:
  NodeQuery(const Graph& g, const Node& n, const ops::OpDef& def)
      : TypeQuery(g.dims, g.group.ranks, op_name(n.op), n.attrs), g_(g), n_(n), def_(def) {}

  size_t operand_count() const override { return def_.operands == 0 ? n_.args.size() : def_.operands; }
  bool given(size_t slot) const override { return slot >= operand_count() || slot < n_.args.size(); }
  const TensorType* tensor(size_t slot, const std::string&) override { return arg(slot); }
  const TensorType* value(size_t slot, const std::string&, DType, std::string*) override { return arg(slot); }
  bool unify(size_t, size_t) override { return true; }
  // An axis is Attrs::axis; any other integer attribute is in Attrs::ints
  // at its position among the op's attributes (ir.h).
  bool integer(size_t slot, const std::string&, int64_t* out) override {
    if (std::string_view(param(slot)) == "axis") return *out = n_.attrs.axis, true;
    const size_t at = slot - operand_count();
    return at < n_.attrs.ints.size() && (*out = n_.attrs.ints[at], true);
  }
  bool axes(size_t, const std::string&, std::vector<int64_t>* out) override {
    *out = n_.attrs.ints.empty() ? std::vector<int64_t>{n_.attrs.axis} : n_.attrs.ints;
    return true;
  }
  bool extent(size_t slot, const std::string& what, size_t result_axis, Dim* out) override {
    if (result_axis < n_.type.shape.size() && n_.type.shape[result_axis].is_runtime())
      return *out = n_.type.shape[result_axis], true;
    int64_t v = 0;
    return integer(slot, what, &v) && (*out = Dim::constant(v), true);
  }
  bool flag(size_t, const std::string&, bool* out) override { return *out = n_.attrs.keepdims, true; }
  bool number(size_t, const std::string&, double* out) override { return *out = n_.attrs.value, true; }
  bool integers(size_t, const std::string&, std::vector<int64_t>* out) override { return *out = n_.attrs.ints, true; }
  bool shape(size_t, Shape* out) override { return *out = n_.type.shape, true; }
  bool dtype(size_t, DType* out) override { return *out = n_.type.dtype, true; }
  bool reduction(size_t, int64_t* out) override {
    return !n_.attrs.ints.empty() && (*out = n_.attrs.ints[0], true);
  }

 private:
  // The parameter a slot stands for (a variadic op's attributes follow its operands).
  const char* param(size_t slot) const { return def_.params.at(slot - operand_count() + def_.operands); }
  const TensorType* arg(size_t slot) const {
    return slot < n_.args.size() ? &g_.node(n_.args[slot]).type : nullptr;
  }
  const Graph& g_;
  const Node& n_;
  const ops::OpDef& def_;
};

std::string check_node(const Graph& g, const Node& n) {
  const ops::OpDef& def = ops::op_def(n.op);
  if (n.args.size() < def.min_args || n.args.size() > def.max_args)
    return "takes " +
           (def.min_args == def.max_args ? std::to_string(def.min_args)
                                         : std::to_string(def.min_args) + " to " +
                                               (def.max_args == SIZE_MAX ? "any" : std::to_string(def.max_args))) +
           " argument(s), has " + std::to_string(n.args.size());
  NodeQuery q(g, n, def);
  const ops::TypeResult result = def.infer(q);
  if (!result.ok()) return result.error ? result.error->message : "its type rule rejects it";
  if (!(*result.type == n.type))
    return "result type " + type_to_string(n.type, g.dims) + " should be " + type_to_string(*result.type, g.dims);
  // The rule normalizes attributes (a negative axis counts from the end);
  // a node holds them normalized, as the later passes and the kernels read them.
  if (!(q.attrs() == n.attrs)) {
    ir::Node normal = n;
    normal.attrs = q.attrs();
    return "attributes" + ops::attrs_text(n) + " should be" + ops::attrs_text(normal);
  }
  return "";
}

}  // namespace

std::string infer(const Graph& g, Node& n) {
  const ops::OpDef& def = ops::op_def(n.op);
  GDL_INTERNAL_ASSERT(def.infer, std::string("infer on ") + op_name(n.op) + ", which has no type rule");
  NodeQuery q(g, n, def);
  const ops::TypeResult result = def.infer(q);
  if (!result.ok()) return result.error ? result.error->message : "its type rule rejects it";
  n.type = *result.type;
  n.attrs = q.attrs();
  return "";
}

std::string verify(const Graph& g) {
  if (std::string problem = verify_structure(g); !problem.empty()) return problem;
  for (size_t i = 0; i < g.nodes.size(); ++i) {
    const Node& n = g.nodes[i];
    if (is_leaf(n.op)) continue;
    if (std::string problem = check_node(g, n); !problem.empty())
      return "%" + std::to_string(i) + " " + op_name(n.op) + ": " + problem;
  }
  return "";
}

}  // namespace gdl::ir
