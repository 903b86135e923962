// Small pieces of generated CUDA C++ that every emitter uses: type names,
// literals that read back exactly, shape arithmetic, and the launch rules of
// kernels that loop over tasks.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include "ir.h"
#include "kernel_table.h"

namespace gdl {

// Every generated kernel's parameters (the ABI of core/kernel_table.h).
inline constexpr const char* kKernelParameters =
    "(unsigned char* arena, const unsigned char* params, gdl_args args, gdl_offsets offsets)";

inline constexpr uint32_t kElementwiseBlock = 256;
inline constexpr int64_t kElementsPerBlock = 1024;  // four per thread, through the grid-stride loop

// The type a value is stored in ("__half") and held in inside a kernel
// ("float", gdl_types.cuh).
const char* storage_type(DType t);
const char* compute_type(DType t);

// A dim's largest extent (a run-time dim at its upper bound).
int64_t max_extent(const Dim& d, const ir::Graph& g);
bool all_constant(const Shape& s);
bool statically_one_element(const Shape& s);
Shape sub_shape(const Shape& s, size_t from, size_t to);

// Shortest decimal that reads back as the same float, as a CUDA float literal.
std::string float_literal(double value);
std::string int_literal(int64_t v);
// A compile-time value in the compute type of its dtype, rounded as the
// interpreter rounds it.
std::string constant_literal(double value, DType t);
std::string one_line(std::string s);  // newlines as spaces, for comments

// "%7 = softmax %6 {axis=1} : f16[B, 32]  "probs" at line 12:9" for a kernel's comment.
std::string describe_value(const ir::Graph& g, ir::ValueId v);

// One factor of a structured kernel's task count: ceil(count(dims) / tile).
struct TaskFactor {
  Shape dims;
  int64_t tile = 1;
};
// Launch rule for a kernel that loops over tasks (gdl::task_first): factors
// whose dims are all constant go into grid.y, the run-time ones into the
// work shape. With one run-time factor (or none) the grid has exactly one
// block per task; with several it has fewer and the task loop covers the
// rest.
LaunchRule task_launch(const std::vector<TaskFactor>& factors, uint32_t block);

// Threads for a one-block-per-row kernel over rows of at most `len` elements.
uint32_t row_block(int64_t len);

// The valid count of run-time dim `symbol` for this run, read from the
// arena's valid-dims block (plan.h): what a kernel that combines elements
// along a run-time axis stops at when the layout is padded (buckets).
std::string valid_count_expr(int symbol);
// A dim's count this run: a run-time dim's valid count, a static dim's extent.
std::string valid_count_or_extent(const Dim& d);

}  // namespace gdl
