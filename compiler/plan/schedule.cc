// schedule_steps (schedule.h):
// 1. An output that is a leaf (input, param, constant, run-time scalar)
//    gets an identity kReshape node appended to the graph, and the output
//    names that node instead: every output then owns a buffer that a step
//    writes, read after the run, which a later bind cannot change.
// 2. The graph's topological order (ValueId order) is the schedule. Every
//    non-leaf node becomes one Step, except a view, which runs nothing: a
//    kReshape shares its argument's buffer; a kSlice whose elements are one
//    contiguous row-major run for every binding of the run-time dims
//    (contiguous_slice_offset: `W[l]`, `bias[l]`, `x[1]` of
//    x : f32[3, T, 8], whose offset moves with T) is the part of its
//    argument's buffer that holds them. A view still gets a step when its
//    argument has no storage (a constant or scalar) or when it is an output
//    whose storage would otherwise be an input or a param (an output owns
//    its buffer). An update_slice whose value an in-place write already put
//    in its region (update_is_view) is a view of its base. Every other
//    in-place write is a step that writes over its base's buffer.
// 3. A step reads each argument that has storage, once, in argument order.
#include "plan/schedule.h"

#include <algorithm>
#include <numeric>

namespace gdl::plan {
namespace {

using ir::Op;
using ir::ValueId;


}  // namespace

Plan schedule_steps(ir::Graph graph) {
  Plan p;
  p.graph = std::move(graph);
  // 1. Outputs over leaves.
  for (ir::Output& o : p.graph.outputs) {
    const ir::Node& leaf = p.graph.node(o.value);
    if (!ir::is_leaf(leaf.op)) continue;
    ir::Node copy;
    copy.op = Op::kReshape;
    copy.args = {o.value};
    copy.type = leaf.type;
    copy.name = o.name;
    copy.loc = o.loc;
    o.value = p.graph.add(std::move(copy));
  }
  const ir::Graph& g = p.graph;
  const size_t count = g.nodes.size();
  std::vector<bool> is_output(count, false);
  for (const ir::Output& o : g.outputs) is_output.at(static_cast<size_t>(o.value)) = true;

  // 2-3. Steps; a view's storage is its argument's owner's.
  std::vector<ValueId> owner(count);
  std::iota(owner.begin(), owner.end(), 0);
  auto stored = [&](ValueId v) { return !ir::has_no_storage(g.node(owner[static_cast<size_t>(v)]).op); };
  for (size_t v = 0; v < count; ++v) {
    const ir::Node& n = g.nodes[v];
    if (ir::is_leaf(n.op)) continue;
    // An update_slice whose value already lies in its region is a view too (update_is_view).
    bool view = is_view_node(g, n) || update_is_view(g, n);
    if (view && stored(n.args[0])) {
      ValueId root = owner[static_cast<size_t>(n.args[0])];
      Op root_op = g.node(root).op;
      bool output_over_bound_leaf = is_output[v] && (root_op == Op::kInput || root_op == Op::kParam);
      if (!output_over_bound_leaf) {
        owner[v] = root;
        continue;
      }
    }
    Step s;
    s.values = {static_cast<ValueId>(v)};
    s.result = static_cast<ValueId>(v);
    for (ValueId a : n.args)
      if (stored(a) && std::find(s.reads.begin(), s.reads.end(), a) == s.reads.end()) s.reads.push_back(a);
    p.steps.push_back(std::move(s));
  }
  return p;
}

}  // namespace gdl::plan
