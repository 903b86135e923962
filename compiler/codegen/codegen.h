// CUDA C++ generation from a plan: one kernel per plan step (two for a
// matmul whose rows decide between the rows and the tiled kernel), one or
// two per chain of steps, and the input copy kernel; and the kernel table
// that says when each runs (kernel_table.h, which also states the ABI).
#pragma once

#include <string>
#include <vector>

#include "kernel_table.h"
#include "plan.h"

namespace gdl {

// Kernels that NVRTC compiles together, after the prelude: one unit per plan
// step (all of its kernels), per chain, and the input copy kernel. Units are
// compiled in parallel and cached one by one (nvrtc_compile.h).
struct SourceUnit {
  std::string label;                 // "step 3: matmul+gelu", "chain 0: steps 2-9", "input copy"
  std::string text;                  // its kernels' code
  std::vector<std::string> symbols;  // the extern "C" kernels it defines
};

struct GeneratedCode {
  std::string prelude;             // the header comment and the device library's include
  std::vector<SourceUnit> units;
  std::string source;              // prelude + every unit's text: the whole program (--emit=cuda, the artifact)
  KernelTable kernels;             // every kernel but the input copy, and each step's choices
};

// `arch` is the CUBIN target ("sm_90"): below sm_90 the kernels that need
// its bulk copies (the streamed attention) give way to portable ones.
GeneratedCode generate_cuda(const plan::Plan& p, const std::string& arch = "sm_90");

// The compute capability in an arch name: "sm_90" and "sm_90a" -> 90; 0 when
// it is not an sm_ name.
int sm_number(const std::string& arch);

}  // namespace gdl
