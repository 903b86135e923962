// Element types, shapes with bounded run-time dims, and the numeric helpers
// (f16 / bf16 rounding) that the checker, the interpreter and the runtime share.
#pragma once

#include <cstdint>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

namespace gdl {

enum class DType : uint8_t { kF32, kF16, kBF16, kI32, kBool };

const char* dtype_name(DType t);                       // "f32", "f16", ...
std::optional<DType> parse_dtype(std::string_view s);  // inverse of dtype_name
size_t dtype_size(DType t);                            // bytes per element; bool is 1
inline bool is_float(DType t) { return t == DType::kF32 || t == DType::kF16 || t == DType::kBF16; }

// How a run-time dim is served on the GPU: one graph per bucket, or one
// graph whose launch dims are updated per run (docs/dynamic.md).
enum class DimPolicy : uint8_t { kBuckets, kUpdate };

// `dim B in [lo, hi] buckets(...)`: a dim whose value is known only at run time.
struct DimInfo {
  std::string name;
  int64_t lo = 1, hi = 1;
  std::vector<int64_t> buckets;  // ascending, last == hi
  DimPolicy policy = DimPolicy::kBuckets;
  // Why padded buckets cannot serve this dim exactly ("" when they can): set
  // by the compiler from the program's ops (passes/padding.h), read by the
  // runtime, which then serves the dim by node updates.
  std::string padding_blocker;
};

// One axis of a shape: a compile-time extent, or the run-time dim `symbol`
// (an index into the program's DimInfo list).
struct Dim {
  int64_t extent = 1;
  int symbol = -1;

  static Dim constant(int64_t n) { return {n, -1}; }
  static Dim runtime(int sym) { return {0, sym}; }
  bool is_runtime() const { return symbol >= 0; }
  bool operator==(const Dim&) const = default;
};

using Shape = std::vector<Dim>;
inline constexpr int kMaxRank = 6;

struct TensorType {
  DType dtype = DType::kF32;
  Shape shape;
  int rank() const { return static_cast<int>(shape.size()); }
  bool operator==(const TensorType&) const = default;
};

// Extent of a dim for a binding of the run-time dims (dim_values[symbol]).
inline int64_t extent_of(const Dim& d, const std::vector<int64_t>& dim_values) {
  return d.is_runtime() ? dim_values.at(d.symbol) : d.extent;
}
int64_t element_count(const Shape& s, const std::vector<int64_t>& dim_values);
// The extents of a shape for a binding of the run-time dims.
std::vector<int64_t> concrete_shape(const Shape& s, const std::vector<int64_t>& dim_values);
// Largest element count over every allowed binding (each run-time dim at hi).
int64_t max_element_count(const Shape& s, const std::vector<DimInfo>& dims);

// "f16[B, 1024]"; "f32" for rank 0.
std::string type_to_string(const TensorType& t, const std::vector<DimInfo>& dims);
std::string shape_to_string(const Shape& s, const std::vector<DimInfo>& dims);

// numpy broadcasting of two shapes; nullopt if incompatible. A run-time dim
// broadcasts only against 1 or the same run-time dim.
std::optional<Shape> broadcast_shapes(const Shape& a, const Shape& b);

// IEEE half and bfloat16, round to nearest even; NaN stays NaN.
uint16_t float_to_half_bits(float f);
float half_bits_to_float(uint16_t h);
uint16_t float_to_bf16_bits(float f);
float bf16_bits_to_float(uint16_t h);

// The value `v` as the dtype would store it (rounding f32/f16/bf16, truncating
// i32 toward zero with saturation, bool as 0/1).
double round_to_dtype(double v, DType t);

// Element i of a raw buffer of dtype t, and the inverse.
double load_element(const void* data, DType t, size_t i);
void store_element(void* data, DType t, size_t i, double v);

}  // namespace gdl
