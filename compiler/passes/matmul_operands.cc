// fold_matmul_operands (matmul_operands.h).
//
// Transposes are folded first, node by node, so a slice of a matmul sees
// the matmul's final operands. A slice is rewritten in place into the
// windowed matmul: it comes after the matmul and its operands, so the graph
// stays topological and every use of the slice keeps its value id.
#include "passes/matmul_operands.h"

#include <vector>

#include "ops/matmul.h"
#include "ops/op_def.h"

namespace gdl {
namespace {

using ir::Node;
using ir::Op;
using ir::ValueId;

// A transpose that swaps the last two axes and leaves the others in place.
bool swaps_last_two(const Node& n) {
  if (n.op != Op::kTranspose) return false;
  const std::vector<int64_t>& perm = n.attrs.ints;
  const size_t r = perm.size();
  if (r < 2 || perm[r - 1] != static_cast<int64_t>(r - 2) || perm[r - 2] != static_cast<int64_t>(r - 1)) return false;
  for (size_t i = 0; i + 2 < r; ++i)
    if (perm[i] != static_cast<int64_t>(i)) return false;
  return true;
}

void fold_transposes(ir::Graph& g, Node& matmul) {
  ops::MatmulLayout layout = ops::matmul_layout(matmul);
  for (size_t operand = 0; operand < 2; ++operand) {
    bool& flag = operand == 0 ? layout.transpose_a : layout.transpose_b;
    while (swaps_last_two(g.node(matmul.args[operand]))) {
      matmul.args[operand] = g.node(matmul.args[operand]).args[0];
      flag = !flag;  // a window names columns of b as read, which no transpose of the storage changes
    }
  }
  matmul.attrs.ints = ops::matmul_layout_ints(layout);
}

// The [begin, end) a slice takes of its last axis when every other axis is
// whole and the last axis is static; false otherwise.
bool last_axis_range(const ir::Graph& g, const Node& slice, int64_t* begin, int64_t* end) {
  const Shape& in = g.node(slice.args[0]).type.shape;
  const std::vector<int64_t>& b = slice.attrs.ints;
  if (in.empty() || b.size() != 2 * in.size()) return false;
  for (size_t axis = 0; axis + 1 < in.size(); ++axis) {
    const int64_t start = b[2 * axis], stop = b[2 * axis + 1];
    const bool whole = start == 0 && (stop == -1 || (!in[axis].is_runtime() && stop == in[axis].extent));
    if (!whole) return false;
  }
  const Dim& last = in.back();
  if (last.is_runtime()) return false;
  const int64_t start = b[b.size() - 2], stop = b.back() == -1 ? last.extent : b.back();
  if (start < 0 || stop <= start || stop > last.extent) return false;
  *begin = start;
  *end = stop;
  return true;
}

}  // namespace

void fold_matmul_operands(ir::Graph& g) {
  for (Node& n : g.nodes)
    if (n.op == Op::kMatMul) fold_transposes(g, n);

  // A matmul read whole anywhere (an output, a state's value, any use but a
  // column slice) keeps its product: windows would compute it twice.
  const size_t count = g.nodes.size();
  std::vector<bool> whole_use(count, false);
  for (const ir::Output& o : g.outputs) whole_use[static_cast<size_t>(o.value)] = true;
  for (const ir::StateUpdate& s : g.state_updates) whole_use[static_cast<size_t>(s.value)] = true;
  for (size_t v = 0; v < count; ++v) {
    const Node& n = g.nodes[v];
    int64_t begin = 0, end = 0;
    for (size_t i = 0; i < n.args.size(); ++i) {
      const bool window = n.op == Op::kSlice && i == 0 && last_axis_range(g, n, &begin, &end);
      if (!window) whole_use[static_cast<size_t>(n.args[i])] = true;
    }
  }
  for (size_t v = 0; v < count; ++v) {
    Node& slice = g.nodes[v];
    int64_t begin = 0, end = 0;
    if (slice.op != Op::kSlice || !last_axis_range(g, slice, &begin, &end)) continue;
    const ValueId product = slice.args[0];
    const Node& matmul = g.node(product);
    if (matmul.op != Op::kMatMul || whole_use[static_cast<size_t>(product)]) continue;
    ops::MatmulLayout layout = ops::matmul_layout(matmul);
    layout.col_begin += begin;
    layout.col_count = end - begin;
    slice.op = Op::kMatMul;
    slice.args = matmul.args;
    slice.attrs = ir::Attrs{};
    slice.attrs.ints = ops::matmul_layout_ints(layout);
  }
}

}  // namespace gdl
