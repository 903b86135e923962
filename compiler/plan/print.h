// The plan in words (`gdlc --emit=plan`) and as pictures (`--emit=graph`,
// `--emit=memory-svg`).
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

// The arena as an SVG picture: each value with storage of its own in the
// arena a bar from the step that writes it (inputs and states: before the
// first) to the last step that reads it (outputs and states: past the
// last), at its offset and size; steps along x, offsets along y, each bar's
// value, size and steps in its tooltip. Values written in place over
// another's storage overlap it (the bars are translucent).
std::string plan_memory_svg(const Plan& p);

}  // namespace gdl::plan
