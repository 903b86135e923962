// eliminate_dead_code: mark from the outputs, then compact.
//
// 1. Mark the outputs' values, the states' final values and every input,
//    param, scalar and state leaf live.
// 2. Walk the nodes backwards: a live node marks its arguments live (they
//    all have smaller ids, so one backward walk reaches every ancestor).
// 3. Walk forwards, keeping the live nodes in order and giving each the next
//    compact id; rewrite arguments through the old-to-new table.
// 4. Rewrite the outputs through the same table.
#include "passes/dce.h"

#include <vector>

namespace gdl {

void eliminate_dead_code(ir::Graph& g) {
  std::vector<bool> live(g.nodes.size(), false);
  for (const ir::Output& o : g.outputs) live.at(static_cast<size_t>(o.value)) = true;
  for (const ir::StateUpdate& u : g.state_updates) live.at(static_cast<size_t>(u.value)) = true;
  for (size_t id = 0; id < g.nodes.size(); ++id) {
    ir::Op op = g.nodes[id].op;
    if (op == ir::Op::kInput || op == ir::Op::kParam || op == ir::Op::kScalar || op == ir::Op::kState) live[id] = true;
  }
  for (size_t id = g.nodes.size(); id-- > 0;)
    if (live[id])
      for (ir::ValueId a : g.nodes[id].args) live.at(static_cast<size_t>(a)) = true;

  std::vector<ir::ValueId> new_id(g.nodes.size(), ir::kNoValue);
  std::vector<ir::Node> kept;
  for (size_t id = 0; id < g.nodes.size(); ++id) {
    if (!live[id]) continue;
    ir::Node n = std::move(g.nodes[id]);
    for (ir::ValueId& a : n.args) a = new_id[static_cast<size_t>(a)];
    new_id[id] = static_cast<ir::ValueId>(kept.size());
    kept.push_back(std::move(n));
  }
  g.nodes = std::move(kept);
  g.renumber_results(new_id);
}

}  // namespace gdl
