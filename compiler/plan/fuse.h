// Fusion over the planner's steps: groups the one-value steps of the
// schedule into fewer kernels. It runs right after the schedule, before any
// buffer is placed, so that liveness, offsets and deps are computed over the
// fused steps and a fused intermediate needs no buffer.
#pragma once

#include "plan.h"
#include "plan/plan_options.h"

namespace gdl::plan {

// Takes a plan with one step per computed value, in ValueId order, with its
// reads (schedule_steps; values that no step computes are leaves and views).
// Leaves the fused steps in schedule order: each computes its `values` in
// order and writes only its `result`; `reads` are the values it loads from
// buffers; no deps yet.
void fuse_steps(Plan& p, const PlanOptions& options);

}  // namespace gdl::plan
