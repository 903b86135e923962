// Buckets and padding of bounded run-time dims.
//
// bucket_for: the first bucket >= value (buckets ascend and end at hi).
// uniform_padding_waste: sums bucket_for(v) and v over v in [lo, hi].
// padding_blockers: one pass over the nodes:
// 1. A reshape keeps a padded layout meaningful only if it keeps every
//    run-time dim where it was relative to the others: the same sequence of
//    run-time dims, and the same product of constant extents before the
//    first, between consecutive ones and after the last. Then an element's
//    flat index is the same function of its coordinates before and after,
//    whatever the capacities. Otherwise every run-time dim it holds is
//    blocked.
// 2. A gather whose table rows are a run-time dim: ids in [value, capacity)
//    would read padding where the unpadded run gives a zero row.
// 3. Attention whose head dim D is run-time: q.k would sum over padding.
// 4. A concat along a run-time dim (the checker rejects it; kept for IR
//    made by hand).
// The first reason found per dim is kept.
// record_padding_blockers: padding_blockers into the dims, for the runtime.
#include "passes/padding.h"

#include <algorithm>

namespace gdl {
namespace {

std::string where(const ir::Node& n) {
  std::string out = std::string(ir::op_name(n.op));
  if (n.loc.valid()) out += " at " + std::to_string(n.loc.line) + ":" + std::to_string(n.loc.col);
  return out;
}

// (constant product, run-time symbol) pairs in order; the last symbol is -1.
std::vector<std::pair<int64_t, int>> layout_groups(const Shape& s) {
  std::vector<std::pair<int64_t, int>> groups;
  int64_t constant = 1;
  for (const Dim& d : s) {
    if (d.is_runtime()) {
      groups.push_back({constant, d.symbol});
      constant = 1;
    } else {
      constant *= d.extent;
    }
  }
  groups.push_back({constant, -1});
  return groups;
}

}  // namespace

int64_t bucket_for(const DimInfo& d, int64_t value) {
  if (value < d.lo || value > d.hi) return -1;
  for (int64_t b : d.buckets)
    if (b >= value) return b;
  return d.hi;  // buckets always end at hi; a hand-made DimInfo may not
}

PaddingWaste uniform_padding_waste(const DimInfo& d) {
  PaddingWaste w;
  for (int64_t v = d.lo; v <= d.hi; ++v) {
    w.rows_computed += static_cast<double>(bucket_for(d, v));
    w.rows_valid += static_cast<double>(v);
  }
  return w;
}

std::vector<std::string> padding_blockers(const ir::Graph& g) {
  std::vector<std::string> reasons(g.dims.size());
  auto block = [&](int symbol, const std::string& why) {
    if (symbol >= 0 && static_cast<size_t>(symbol) < reasons.size() && reasons[symbol].empty()) reasons[symbol] = why;
  };
  auto arg_shape = [&](const ir::Node& n, size_t i) -> const Shape& { return g.node(n.args.at(i)).type.shape; };
  for (const ir::Node& n : g.nodes) {
    switch (n.op) {
      case ir::Op::kReshape: {
        const Shape& from = arg_shape(n, 0);
        if (layout_groups(from) == layout_groups(n.type.shape)) break;
        for (const Dim& d : from)
          if (d.is_runtime())
            block(d.symbol, where(n) + " moves dim " + g.dims[d.symbol].name + " across other axes (" +
                                shape_to_string(from, g.dims) + " to " + shape_to_string(n.type.shape, g.dims) +
                                "): a padded layout would mix padding into valid rows");
        break;
      }
      case ir::Op::kGather: {
        const Shape& table = arg_shape(n, 0);
        if (!table.empty() && table[0].is_runtime())
          block(table[0].symbol, where(n) + " reads a table whose rows are dim " + g.dims[table[0].symbol].name +
                                     ": ids past the valid rows would read padding instead of zeros");
        break;
      }
      case ir::Op::kAttention: {
        const Shape& q = arg_shape(n, 0);
        if (!q.empty() && q.back().is_runtime())
          block(q.back().symbol, where(n) + " has the run-time head dim " + g.dims[q.back().symbol].name +
                                     ": q.k would sum over padding");
        break;
      }
      case ir::Op::kConcat: {
        auto axis = static_cast<size_t>(n.attrs.axis);
        if (n.args.size() > 1 && axis < n.type.shape.size() && n.type.shape[axis].is_runtime())
          block(n.type.shape[axis].symbol, where(n) + " joins along dim " + g.dims[n.type.shape[axis].symbol].name);
        break;
      }
      default: break;
    }
  }
  return reasons;
}

void record_padding_blockers(ir::Graph& g) {
  std::vector<std::string> blockers = padding_blockers(g);
  for (size_t d = 0; d < g.dims.size(); ++d) g.dims[d].padding_blocker = blockers[d];
}

}  // namespace gdl
