// The scratch area behind the arena: the working memory of the kernels that
// split their work across blocks (kernel_choice.h) and of the chain kernels
// (chains.h).
#pragma once

#include "plan.h"

namespace gdl::plan {

// Fills every step's tickets and partial tiles, every chain's
// scratch_offset, and scratch_bytes (deps are final: sharing adds none).
void lay_out_scratch(Plan& p);

}  // namespace gdl::plan
