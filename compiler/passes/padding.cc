// Buckets and padding of bounded run-time dims.
//
// The padding pass (record_padding_blockers):
// 1. One pass over the nodes, asking each op's entry which run-time dims it
//    cannot serve padded (OpDef::blocks_padding: a reshape that moves a dim
//    across other axes, attention whose head dim is run-time, a concat
//    along a run-time dim);
//    the first reason found per dim is kept (padding_blockers).
// 2. The reasons go into the dims, for the runtime, which serves a blocked
//    dim by node updates instead of buckets.
// Helpers: bucket_for, the first bucket >= value (buckets ascend and end at
// hi); uniform_padding_waste, the sums of bucket_for(v) and v over v in
// [lo, hi].
#include "passes/padding.h"

#include <algorithm>

#include "ops/op_def.h"

namespace gdl {
namespace {

std::string where(const ir::Node& n) {
  std::string out = std::string(ir::op_name(n.op));
  if (n.loc.valid()) out += " at " + std::to_string(n.loc.line) + ":" + std::to_string(n.loc.col);
  return out;
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
  for (const ir::Node& n : g.nodes) {
    const ops::OpDef& def = ops::op_def(n.op);
    if (!def.blocks_padding) continue;
    def.blocks_padding(g, n, [&](int symbol, const std::string& why) {
      if (symbol >= 0 && static_cast<size_t>(symbol) < reasons.size() && reasons[static_cast<size_t>(symbol)].empty())
        reasons[static_cast<size_t>(symbol)] = where(n) + why;
    });
  }
  return reasons;
}

void record_padding_blockers(ir::Graph& g) {
  std::vector<std::string> blockers = padding_blockers(g);
  for (size_t d = 0; d < g.dims.size(); ++d) g.dims[d].padding_blocker = blockers[d];
}

}  // namespace gdl
