#include "ir.h"

#include <set>


namespace gdl::ir {

const char* op_name(Op op) {
  static const char* const kNames[] = {
#define GDL_IR_OP_NAME(id, name) name,
      GDL_IR_OPS(GDL_IR_OP_NAME)
#undef GDL_IR_OP_NAME
  };
  return static_cast<size_t>(op) < kOpCount ? kNames[static_cast<size_t>(op)] : "?";
}

void Graph::renumber_results(const std::vector<ValueId>& new_id) {
  for (Output& o : outputs) o.value = new_id.at(static_cast<size_t>(o.value));
  for (StateUpdate& u : state_updates) {
    u.state = new_id.at(static_cast<size_t>(u.state));
    u.value = new_id.at(static_cast<size_t>(u.value));
  }
}

std::vector<ValueId> Graph::leaves(Op role) const {
  std::vector<ValueId> out;
  for (size_t i = 0; i < nodes.size(); ++i)
    if (nodes[i].op == role) out.push_back(static_cast<ValueId>(i));
  return out;
}

namespace {

bool is_named_leaf(Op op) { return op == Op::kInput || op == Op::kParam || op == Op::kScalar || op == Op::kState; }

std::string check_type(const Graph& g, const TensorType& t) {
  if (t.rank() > kMaxRank) return "rank " + std::to_string(t.rank()) + " exceeds " + std::to_string(kMaxRank);
  for (const Dim& d : t.shape) {
    if (d.is_runtime() && d.symbol >= static_cast<int>(g.dims.size()))
      return "run-time dim #" + std::to_string(d.symbol) + " is not declared";
    if (!d.is_runtime() && d.extent < 0) return "negative extent " + std::to_string(d.extent);
  }
  return "";
}

std::string check_leaf(const Graph& g, const Node& n) {
  if (!n.args.empty()) return "a leaf takes no arguments";
  if (is_named_leaf(n.op) && n.name.empty()) return "has no name";
  if ((n.op == Op::kScalar || n.op == Op::kConstant || n.op == Op::kDimValue) && n.type.rank() != 0)
    return "must be rank 0, is " + type_to_string(n.type, g.dims);
  if (n.op == Op::kScalar && n.type.dtype != DType::kF32 && n.type.dtype != DType::kI32)
    return "run-time scalars are f32 or i32, not " + std::string(dtype_name(n.type.dtype));
  if (n.op == Op::kDimValue &&
      (n.type != TensorType{DType::kI32, {}} || n.attrs.axis < 0 || static_cast<size_t>(n.attrs.axis) >= g.dims.size()))
    return "a run-time dim's value is a rank-0 i32 of a declared dim";
  if (n.op == Op::kState)
    for (const Dim& d : n.type.shape)
      if (d.is_runtime()) return "a state's shape is fixed, but it has a run-time dim";
  return "";
}

}  // namespace

std::string verify_structure(const Graph& g) {
  for (const DimInfo& d : g.dims) {
    if (d.lo < 1 || d.lo > d.hi)
      return "dim " + d.name + ": bounds [" + std::to_string(d.lo) + ", " + std::to_string(d.hi) + "] need 1 <= lo <= hi";
    bool ascending = !d.buckets.empty() && d.buckets.back() == d.hi && d.buckets.front() >= d.lo;
    for (size_t i = 1; ascending && i < d.buckets.size(); ++i) ascending = d.buckets[i - 1] < d.buckets[i];
    if (!ascending) return "dim " + d.name + ": its buckets are not ascending inside [lo, hi] ending at hi";
  }
  std::set<std::string> leaf_names;
  for (size_t i = 0; i < g.nodes.size(); ++i) {
    const Node& n = g.nodes[i];
    std::string problem;
    if (static_cast<size_t>(n.op) >= kOpCount) return "%" + std::to_string(i) + " has an unknown op";
    if (std::string p = check_type(g, n.type); !p.empty()) problem = "result type: " + p;
    for (ValueId a : n.args)
      if (problem.empty() && (a < 0 || static_cast<size_t>(a) >= i))
        problem = "argument %" + std::to_string(a) + " does not come before it (topological order)";
    if (problem.empty() && is_leaf(n.op)) problem = check_leaf(g, n);
    if (problem.empty() && is_named_leaf(n.op) && !leaf_names.insert(n.name).second)
      problem = "leaf name \"" + n.name + "\" is declared twice";
    if (!problem.empty()) return "%" + std::to_string(i) + " " + op_name(n.op) + ": " + problem;
  }
  std::set<std::string> output_names;
  for (const Output& o : g.outputs) {
    if (o.value < 0 || static_cast<size_t>(o.value) >= g.nodes.size())
      return "output \"" + o.name + "\" refers to %" + std::to_string(o.value) + ", which does not exist";
    if (!output_names.insert(o.name).second) return "output \"" + o.name + "\" is assigned twice";
  }
  std::set<ValueId> updated;
  for (const StateUpdate& u : g.state_updates) {
    auto valid = [&](ValueId v) { return v >= 0 && static_cast<size_t>(v) < g.nodes.size(); };
    if (!valid(u.state) || g.node(u.state).op != Op::kState) return "a state update names no state";
    if (!valid(u.value) || g.node(u.value).type != g.node(u.state).type)
      return "the update of state \"" + g.node(u.state).name + "\" is no value of its type";
    if (!updated.insert(u.state).second) return "state \"" + g.node(u.state).name + "\" is updated twice";
  }
  return "";
}

}  // namespace gdl::ir
