// eliminate_common_subexpressions: value numbering over a topological list.
//
// 1. Walk the nodes in order with a redirection table (replacement[id]).
// 2. Rewrite each node's arguments through the table, so two nodes whose
//    arguments were merged become identical themselves.
// 3. Build a key from everything that decides the value: op, arguments,
//    attrs (doubles by bit pattern) and result type. Named leaves get no key:
//    each is its own value.
// 4. The first node with a key is kept; a later one is redirected to it.
// 5. Outputs are rewritten through the table. Nothing is removed here.
#include "passes/cse.h"

#include <bit>
#include <string>
#include <unordered_map>
#include <vector>

namespace gdl {
namespace {

void append(std::string& key, int64_t v) {
  key += std::to_string(v);
  key += ',';
}

// Everything that decides a node's value, as one string.
std::string value_key(const ir::Node& n) {
  std::string key;
  append(key, static_cast<int64_t>(n.op));
  append(key, static_cast<int64_t>(n.type.dtype));
  key += "shape:";
  for (const Dim& d : n.type.shape) {
    append(key, d.extent);
    append(key, d.symbol);
  }
  key += "args:";
  for (ir::ValueId a : n.args) append(key, a);
  key += "attrs:";
  append(key, static_cast<int64_t>(std::bit_cast<uint64_t>(n.attrs.value)));
  append(key, n.attrs.axis);
  append(key, n.attrs.keepdims);
  for (int64_t i : n.attrs.ints) append(key, i);
  return key;
}

bool has_identity(ir::Op op) {
  return op == ir::Op::kInput || op == ir::Op::kParam || op == ir::Op::kScalar || op == ir::Op::kState;
}

}  // namespace

void eliminate_common_subexpressions(ir::Graph& g) {
  std::vector<ir::ValueId> replacement(g.nodes.size());
  std::unordered_map<std::string, ir::ValueId> first_with_key;
  for (size_t id = 0; id < g.nodes.size(); ++id) {
    replacement[id] = static_cast<ir::ValueId>(id);
    ir::Node& n = g.nodes[id];
    for (ir::ValueId& a : n.args) a = replacement.at(static_cast<size_t>(a));
    if (has_identity(n.op)) continue;
    auto [it, inserted] = first_with_key.try_emplace(value_key(n), static_cast<ir::ValueId>(id));
    if (!inserted) replacement[id] = it->second;
  }
  for (ir::Output& o : g.outputs) o.value = replacement.at(static_cast<size_t>(o.value));
  for (ir::StateUpdate& u : g.state_updates) u.value = replacement.at(static_cast<size_t>(u.value));
}

}  // namespace gdl
