// CUDA C++ generation from a plan: one kernel per plan step (two for a
// matmul whose rows decide between the rows and the tiled kernel), one or
// two per chain of steps, and the input copy kernel; and the kernel table
// that says when each runs (kernel_table.h, which also states the ABI).
#pragma once

#include <string>

#include "kernel_table.h"
#include "plan.h"

namespace gdl {

struct GeneratedCode {
  std::string source;   // one CUDA C++ translation unit
  KernelTable kernels;  // every kernel but the input copy, and each step's choices
};

// `arch` is the CUBIN target ("sm_90"): below sm_90 the kernels that need
// its bulk copies (the streamed attention) give way to portable ones.
GeneratedCode generate_cuda(const plan::Plan& p, const std::string& arch = "sm_90");

// The compute capability in an arch name: "sm_90" and "sm_90a" -> 90; 0 when
// it is not an sm_ name.
int sm_number(const std::string& arch);

}  // namespace gdl
