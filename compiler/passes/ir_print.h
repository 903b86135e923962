// The IR's stable text form, printed by `gdlc --emit=ir` and read by the
// golden tests:
//   program mlp
//   dim B in [1, 64] buckets(1, 8, 64) policy(buckets)
//   %0 = input "x" : f16[B, 1024]
//   %3 = matmul %1, %2 : f16[B, 1024]
//   %4 = layernorm %3 {eps=1e-05} : f16[B, 1024]
//   output "y" = %9
#pragma once

#include <string>

#include "ir.h"

namespace gdl::ir {

std::string print_ir(const Graph& g);

}  // namespace gdl::ir
