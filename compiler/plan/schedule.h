// The first planning pass: IR -> a plan with one step per computed value.
#pragma once

#include "plan.h"

namespace gdl::plan {

// Takes the optimised graph; gives a plan whose steps compute one value each
// (in ValueId order, with their reads), whose views have no step, and with
// no buffers, deps or scratch yet.
Plan schedule_steps(ir::Graph graph);

}  // namespace gdl::plan
