// What the matmul's norm prologue (ops/matmul.cc) shares with the norms'
// own kernels (ops/norm.cc).
#pragma once

#include <string>

#include "ir.h"

namespace gdl {
class StepEmitter;
}

namespace gdl::ops {

// A norm's weight or bias (argument `arg` of `norm`) as the stdlib kernels
// take it: gdl::Column<T> over its elements, one per position of the last
// axis.
std::string norm_column_source(StepEmitter& e, const ir::Node& norm, size_t arg);

}  // namespace gdl::ops
