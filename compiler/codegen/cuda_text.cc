#include "codegen/cuda_text.h"

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <cstdlib>

#include "ops/op_def.h"
#include "plan.h"

namespace gdl {

const char* storage_type(DType t) {
  switch (t) {
    case DType::kF32: return "float";
    case DType::kF16: return "__half";
    case DType::kBF16: return "__nv_bfloat16";
    case DType::kI32: return "int";
    case DType::kBool: return "unsigned char";
  }
  return "float";
}

// The type a value is held in inside a kernel (gdl_types.cuh).
const char* compute_type(DType t) { return is_float(t) ? "float" : "int"; }

int64_t max_extent(const Dim& d, const ir::Graph& g) {
  return d.is_runtime() ? g.dims.at(static_cast<size_t>(d.symbol)).hi : d.extent;
}

bool all_constant(const Shape& s) {
  return std::none_of(s.begin(), s.end(), [](const Dim& d) { return d.is_runtime(); });
}

bool statically_one_element(const Shape& s) {
  return std::all_of(s.begin(), s.end(), [](const Dim& d) { return !d.is_runtime() && d.extent == 1; });
}

Shape sub_shape(const Shape& s, size_t from, size_t to) {
  return Shape(s.begin() + static_cast<std::ptrdiff_t>(from), s.begin() + static_cast<std::ptrdiff_t>(to));
}

// Shortest decimal that reads back as the same float, as a CUDA float literal.
std::string float_literal(double value) {
  auto f = static_cast<float>(value);
  if (std::isnan(f)) return "gdl::nan_f32()";
  if (std::isinf(f)) return f > 0 ? "gdl::inf_f32()" : "(-gdl::inf_f32())";
  char buf[64];
  for (int precision = 6; precision <= 9; ++precision) {
    std::snprintf(buf, sizeof buf, "%.*g", precision, static_cast<double>(f));
    if (std::strtof(buf, nullptr) == f) break;
  }
  std::string text = buf;
  if (text.find_first_of(".en") == std::string::npos) text += ".0";
  text += "f";
  return f < 0 || std::signbit(f) ? "(" + text + ")" : text;
}

std::string int_literal(int64_t v) {
  if (v == INT32_MIN) return "(-2147483647 - 1)";
  return v < 0 ? "(" + std::to_string(v) + ")" : std::to_string(v);
}

// A compile-time value in the compute type of its dtype, rounded as the
// interpreter rounds it.
std::string constant_literal(double value, DType t) {
  double v = round_to_dtype(value, t);
  if (is_float(t)) return float_literal(v);
  return int_literal(static_cast<int64_t>(v));
}

std::string one_line(std::string s) {
  std::replace(s.begin(), s.end(), '\n', ' ');
  std::replace(s.begin(), s.end(), '\r', ' ');
  return s;
}

// "%7 = softmax %6 {axis=1} : f16[B, 32]  "probs" at 12:9" for the kernel comment.
std::string describe_value(const ir::Graph& g, ir::ValueId v) {
  const ir::Node& n = g.node(v);
  std::string out = "%" + std::to_string(v) + " = " + ir::op_name(n.op);
  for (size_t i = 0; i < n.args.size(); ++i) out += (i ? ", %" : " %") + std::to_string(n.args[i]);
  out += ops::attrs_text(n);
  out += " : " + type_to_string(n.type, g.dims);
  if (!n.name.empty()) out += "  \"" + n.name + "\"";
  if (n.loc.valid()) out += " at line " + std::to_string(n.loc.line) + ":" + std::to_string(n.loc.col);
  return one_line(out);
}

// Launch rule for a kernel that loops over tasks (gdl::task_first): factors
// whose dims are all constant go into grid.y, the run-time ones into the
// work shape. With one run-time factor (or none) the grid has exactly one
// block per task; with several it has fewer and the task loop covers the
// rest.
LaunchRule task_launch(const std::vector<TaskFactor>& factors, uint32_t block) {
  LaunchRule rule;
  rule.block = block;
  rule.items_per_block = 1;
  int64_t grid_y = 1;
  std::vector<const TaskFactor*> runtime;
  for (const TaskFactor& f : factors) {
    if (all_constant(f.dims)) {
      int64_t count = element_count(f.dims, {});
      grid_y *= std::max<int64_t>(1, (count + f.tile - 1) / f.tile);
    } else {
      runtime.push_back(&f);
    }
  }
  for (const TaskFactor* f : runtime) {
    rule.work.insert(rule.work.end(), f->dims.begin(), f->dims.end());
    rule.items_per_block *= f->tile;
  }
  if (grid_y > 65535) {  // past grid.y's limit: fold it into the work (the task loop stays exact)
    rule.work.push_back(Dim::constant(grid_y));
    grid_y = 1;
  }
  rule.grid_y = static_cast<uint32_t>(grid_y);
  return rule;
}

// Threads for a one-block-per-row kernel over rows of at most `len` elements:
// at least 8 elements a thread up to 256 threads. A row's block reductions
// cost about the same whatever its block, so short rows take small blocks
// and an SM holds more rows at once (a softmax over rows of 512 in blocks
// of 256 left the SMs waiting on its reductions).
uint32_t row_block(int64_t len) {
  uint32_t block = 32;
  while (block < 256 && block * 8 < len) block *= 2;
  if (len >= 8192) block = 512;
  return block;
}

// The valid count of run-time dim `symbol` for this run, read from the
// arena's valid-dims block (plan.h): what a kernel that combines elements
// along a run-time axis stops at when the layout is padded (buckets).
std::string valid_count_expr(int symbol) {
  return "gdl::valid_dim(arena, " + std::to_string(plan::kValidDimsOffset) + "ull, " + std::to_string(symbol) + ")";
}

std::string valid_count_or_extent(const Dim& d) {
  return d.is_runtime() ? valid_count_expr(d.symbol) : std::to_string(d.extent);
}

}  // namespace gdl
