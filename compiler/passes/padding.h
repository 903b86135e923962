// Buckets and padding of bounded run-time dims: which capacity serves a
// value, what padding costs, and which programs padding cannot serve.
//
// Under the buckets policy a run with value v of dim d uses the graph built
// for the smallest bucket >= v: every value is laid out with that capacity
// as d's extent and positions past v along d are padding. Ops that treat
// positions independently compute the padding too (the padding waste); ops
// that combine elements along a padded axis (sum/mean/max, softmax, norms
// over it, a matmul contracting over it, attention over padded positions)
// read the valid count and ignore the padding. Nothing else changes, so the
// valid part of every value equals the unpadded run (docs/dynamic.md).
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include "ir.h"

namespace gdl {

// The buckets a dim [lo, hi] gets when it names none: the powers of two
// from the first >= lo up to below hi, then hi itself.
inline std::vector<int64_t> default_buckets(int64_t lo, int64_t hi) {
  std::vector<int64_t> out;
  int64_t p = 1;
  while (p < lo) p *= 2;
  for (; p < hi; p *= 2) out.push_back(p);
  out.push_back(hi);
  return out;
}

// The smallest bucket of `d` that holds `value`; -1 when value is outside [lo, hi].
int64_t bucket_for(const DimInfo& d, int64_t value);

// Rows computed against rows wanted by d's buckets when every value in
// [lo, hi] is equally likely (pure arithmetic: sum of bucket_for(v) and sum of v).
struct PaddingWaste {
  double rows_computed = 0, rows_valid = 0;
  // The share of computed rows that are padding.
  double waste() const { return rows_computed > 0 ? 1.0 - rows_valid / rows_computed : 0.0; }
};
PaddingWaste uniform_padding_waste(const DimInfo& d);

// Why padding run-time dim d (capacity > value) could change a valid result,
// per dim ("" when it cannot): ops whose valid result is not a function of
// the valid positions of a padded layout (a reshape that moves the dim
// across other axes, attention whose head dim is run-time, a concat along
// it). Every op that combines elements along a padded axis masks it, and a
// gather along one reads only its valid rows, on the GPU (the valid-dims
// block) and in the interpreter's capacity mode alike. A dim with a reason
// is served by node updates instead of buckets.
std::vector<std::string> padding_blockers(const ir::Graph& g);

// The pass: padding_blockers into each dim's padding_blocker (types.h),
// which the artifact carries to the runtime.
void record_padding_blockers(ir::Graph& g);

}  // namespace gdl
