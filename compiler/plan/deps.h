// Dependencies between steps: which kernel nodes must wait for which.
#pragma once

#include "plan.h"

namespace gdl::plan {

// Fills every step's deps from the buffers (plan_memory has run).
void add_step_dependencies(Plan& p);

}  // namespace gdl::plan
