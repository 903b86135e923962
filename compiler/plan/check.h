// The compiler's proof that a plan is sound: verify_plan (plan.h: the plan
// as data) and what the kernels need of it.
#pragma once

#include <string>

#include "plan.h"

namespace gdl::plan {

// verify_plan, then: every step has the scratch its kernel needs
// (kernel_choice.h), every chain a launch its kernel can run and the scratch
// its kernels use (chains.h). "" when sound, else the first violation.
std::string check_plan(const Plan& p);

}  // namespace gdl::plan
