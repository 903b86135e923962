// share_ragged_attention (ragged_attention.h).
//
// The graph is rebuilt in order with the decode part inserted in front of
// each split attention (which becomes paged_attention_shared, keeping its
// place), the arguments, outputs and state updates renumbered through an
// old-to-new table, as eliminate_dead_code does.
#include "passes/ragged_attention.h"

#include <vector>

#include "ops/attention.h"
#include "plan/kernel_choice.h"

namespace gdl {

void share_ragged_attention(ir::Graph& g) {
  std::vector<ir::ValueId> new_id(g.nodes.size(), ir::kNoValue);
  std::vector<ir::Node> nodes;
  nodes.reserve(g.nodes.size());
  for (size_t id = 0; id < g.nodes.size(); ++id) {
    const SharedTokenBlocksChoice blocks = choose_shared_token_blocks(g, g.nodes[id]);
    ir::Node n = g.nodes[id];
    for (ir::ValueId& a : n.args) a = new_id[static_cast<size_t>(a)];
    if (blocks.block > 0) {
      ir::Node partial = n;  // the decode kernels' part: (q, k_pool, v_pool, len, blocks, sequence)
      partial.attrs = ops::shared_blocks_attrs(n.attrs, blocks.block, blocks.min_tokens);
      partial.name = n.name.empty() ? std::string() : n.name + "_decoded";
      nodes.push_back(std::move(partial));
      n.op = ir::Op::kPagedAttentionShared;
      n.attrs = nodes.back().attrs;
      n.args.push_back(static_cast<ir::ValueId>(nodes.size() - 1));
    }
    new_id[id] = static_cast<ir::ValueId>(nodes.size());
    nodes.push_back(std::move(n));
  }
  if (nodes.size() == g.nodes.size()) return;
  g.nodes = std::move(nodes);
  g.renumber_results(new_id);
}

}  // namespace gdl
