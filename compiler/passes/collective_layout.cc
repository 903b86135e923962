// lay_out_collectives (collective_layout.h): one walk in id order that
// copies every node into a new node list, putting the nodes a rewritten
// collective needs (a copy of its argument, the transposes) right before and
// after it, so the list stays topological; every use of the collective then
// reads the last of them.
#include "passes/collective_layout.h"

#include "ops/op_def.h"

namespace gdl {
namespace {

using ir::Node;
using ir::Op;
using ir::ValueId;

bool is_collective(Op op) { return ops::fusion_class(op) == ops::FusionClass::kCollective; }

// Whether the parts of an all_gather or reduce_scatter along `axis` of
// `shape` are contiguous: every axis in front of it has extent 1.
bool parts_contiguous(const Shape& shape, int axis) {
  for (int i = 0; i < axis; ++i)
    if (shape[static_cast<size_t>(i)].is_runtime() || shape[static_cast<size_t>(i)].extent != 1) return false;
  return true;
}

// `t` with its axes in the order `perm` (axis i of the result is axis perm[i] of t).
TensorType permuted(const TensorType& t, const std::vector<int64_t>& perm) {
  TensorType out{t.dtype, {}};
  for (int64_t p : perm) out.shape.push_back(t.shape[static_cast<size_t>(p)]);
  return out;
}

// A transpose of `x` (of type `from`) by `perm`, at `loc`.
Node transpose_of(ValueId x, const TensorType& from, std::vector<int64_t> perm, const SourceLoc& loc) {
  Node t;
  t.op = Op::kTranspose;
  t.args = {x};
  t.type = permuted(from, perm);
  t.attrs.ints = std::move(perm);
  t.loc = loc;
  return t;
}

}  // namespace

void lay_out_collectives(ir::Graph& g) {
  bool any = false;
  for (const Node& n : g.nodes) any |= is_collective(n.op);
  if (!any) return;
  std::vector<Node> old = std::move(g.nodes);
  g.nodes.clear();
  std::vector<ValueId> new_id(old.size(), ir::kNoValue);
  for (size_t v = 0; v < old.size(); ++v) {
    Node n = std::move(old[v]);
    for (ValueId& a : n.args) a = new_id[static_cast<size_t>(a)];
    if (!is_collective(n.op)) {
      new_id[v] = g.add(std::move(n));
      continue;
    }
    ValueId x = n.args[0];
    if (ir::has_no_storage(g.node(x).op)) {  // 2: the call reads memory
      Node copy;
      copy.op = Op::kCast;
      copy.args = {x};
      copy.type = g.node(x).type;
      copy.loc = n.loc;
      x = g.add(std::move(copy));
    }
    const TensorType x_type = g.node(x).type;
    const int axis = n.attrs.axis;
    if (n.op == Op::kAllReduce || parts_contiguous(x_type.shape, axis)) {
      n.args[0] = x;
      new_id[v] = g.add(std::move(n));
      continue;
    }
    // 1: axis to the front, the collective along axis 0, and back.
    const auto rank = static_cast<int64_t>(x_type.rank());
    std::vector<int64_t> to_front{axis}, back(static_cast<size_t>(rank));
    for (int64_t i = 0; i < rank; ++i)
      if (i != axis) to_front.push_back(i);
    for (int64_t i = 0; i < rank; ++i) back[static_cast<size_t>(to_front[static_cast<size_t>(i)])] = i;
    const ValueId front = g.add(transpose_of(x, x_type, to_front, n.loc));
    Node along_front = n;
    along_front.args[0] = front;
    along_front.attrs.axis = 0;
    along_front.name.clear();  // the name goes to the value the program sees
    along_front.type = permuted(n.type, to_front);
    const ValueId moved = g.add(std::move(along_front));
    Node restored = transpose_of(moved, g.node(moved).type, back, n.loc);
    restored.name = n.name;
    new_id[v] = g.add(std::move(restored));
  }
  g.renumber_results(new_id);
}

}  // namespace gdl
