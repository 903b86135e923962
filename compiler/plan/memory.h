// Memory planning: where every value lives. Runs after fusion, so a value
// that a fused step computes in registers gets no buffer.
#pragma once

#include "plan.h"

namespace gdl::plan {

// Fills p.buffers (one per value), arena_bytes, params_bytes, naive_bytes
// and live_lower_bound from p.steps.
void plan_memory(Plan& p);

}  // namespace gdl::plan
