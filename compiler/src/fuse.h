// Fusion over the planner's steps (fuse.cc): groups the one-value steps of
// the schedule into fewer kernels. make_plan runs it right after the
// schedule and views are known, before any buffer is placed, so that
// liveness, offsets and deps are computed over the fused steps and a fused
// intermediate needs no buffer.
#pragma once

#include <vector>

#include "ir.h"
#include "plan.h"

namespace gdl::plan {

// `steps`: one step per computed value, in ValueId order, with its reads
// (make_plan's schedule; values that no step computes are leaves or views).
// Returns the fused steps in schedule order: each computes its `values` in
// order and writes only its `result`; `reads` are the values it loads from
// buffers; `deps` are left empty (make_plan computes them).
std::vector<Step> fuse_steps(const ir::Graph& g, std::vector<Step> steps, const PlanOptions& options);

}  // namespace gdl::plan
