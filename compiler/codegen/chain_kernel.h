// The persistent kernel of a plan chain (plan/chains.h, gdl_chain.cuh): one
// launch runs a run of matmul steps while the rows are few.
#pragma once

#include <cstdint>
#include <map>
#include <string>
#include <vector>

#include "kernel_table.h"
#include "plan.h"

namespace gdl {

// The kernel of plan chain `c` in `groups` row groups (1: the kernel for at
// most chain::kMaxRows rows): its source, and its Kernel appended to `out`
// (steps, rows range, cooperative launch, tensor maps). `scalar_slot` gives
// each run-time scalar leaf its slot in gdl_args; `sm` is the target's
// compute capability.
std::string chain_kernel(const plan::Plan& p, size_t c, int64_t groups, const std::map<ir::ValueId, int>& scalar_slot,
                         int sm, std::vector<Kernel>& out);

}  // namespace gdl
