// The plan in words (`gdlc --emit=plan`) and as a picture (`--emit=graph`).
#pragma once

#include <string>

#include "plan.h"

namespace gdl::plan {

// Each step with its kernel node, the values and their offsets, the chains,
// and the memory summary line
//   "arena 12.3 KiB (naive 40.0 KiB, live lower bound 12.0 KiB), params 8.0 MiB".
std::string print_plan(const Plan& p);

// Graphviz DOT of the steps and their deps.
std::string plan_to_dot(const Plan& p);

}  // namespace gdl::plan
