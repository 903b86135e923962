// The plan executed on the CPU in host memory laid out exactly as planned:
// each step reads its arguments at their offsets and writes its result at
// its offset, so a plan that aliases wrongly gives wrong outputs on machines
// without a GPU.
#pragma once

#include <map>
#include <string>

#include "gdl/status.h"
#include "interp/interp.h"
#include "plan.h"

namespace gdl::plan {

// Outputs like interpret(); Internal when check_plan finds the plan unsound.
Expected<std::map<std::string, HostTensor>> run_planned(const Plan& p, const Bindings& b);

}  // namespace gdl::plan
