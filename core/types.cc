#include "types.h"

#include <bit>
#include <cmath>
#include <cstring>
#include <limits>

namespace gdl {

const char* dtype_name(DType t) {
  switch (t) {
    case DType::kF32: return "f32";
    case DType::kF16: return "f16";
    case DType::kBF16: return "bf16";
    case DType::kI32: return "i32";
    case DType::kBool: return "bool";
  }
  return "?";
}

std::optional<DType> parse_dtype(std::string_view s) {
  for (DType t : {DType::kF32, DType::kF16, DType::kBF16, DType::kI32, DType::kBool})
    if (s == dtype_name(t)) return t;
  return std::nullopt;
}

size_t dtype_size(DType t) {
  switch (t) {
    case DType::kF32: case DType::kI32: return 4;
    case DType::kF16: case DType::kBF16: return 2;
    case DType::kBool: return 1;
  }
  return 4;
}

int64_t element_count(const Shape& s, const std::vector<int64_t>& dim_values) {
  int64_t n = 1;
  for (const Dim& d : s) n *= extent_of(d, dim_values);
  return n;
}

std::vector<int64_t> concrete_shape(const Shape& s, const std::vector<int64_t>& dim_values) {
  std::vector<int64_t> out;
  out.reserve(s.size());
  for (const Dim& d : s) out.push_back(extent_of(d, dim_values));
  return out;
}

int64_t max_element_count(const Shape& s, const std::vector<DimInfo>& dims) {
  int64_t n = 1;
  for (const Dim& d : s) n *= d.is_runtime() ? dims.at(d.symbol).hi : d.extent;
  return n;
}

std::string shape_to_string(const Shape& s, const std::vector<DimInfo>& dims) {
  std::string out = "[";
  for (size_t i = 0; i < s.size(); ++i) {
    if (i) out += ", ";
    out += s[i].is_runtime() ? (s[i].symbol < static_cast<int>(dims.size()) ? dims[s[i].symbol].name : "?")
                             : std::to_string(s[i].extent);
  }
  return out + "]";
}

std::string type_to_string(const TensorType& t, const std::vector<DimInfo>& dims) {
  std::string out = dtype_name(t.dtype);
  if (!t.shape.empty()) out += shape_to_string(t.shape, dims);
  return out;
}

std::optional<Shape> broadcast_shapes(const Shape& a, const Shape& b) {
  size_t rank = std::max(a.size(), b.size());
  Shape out(rank);
  for (size_t i = 0; i < rank; ++i) {
    // Align from the right, as numpy does.
    Dim da = i < rank - a.size() ? Dim::constant(1) : a[i - (rank - a.size())];
    Dim db = i < rank - b.size() ? Dim::constant(1) : b[i - (rank - b.size())];
    if (da == db) out[i] = da;
    else if (!da.is_runtime() && da.extent == 1) out[i] = db;
    else if (!db.is_runtime() && db.extent == 1) out[i] = da;
    else return std::nullopt;
  }
  return out;
}

uint16_t float_to_half_bits(float f) {
  uint32_t x = std::bit_cast<uint32_t>(f);
  uint32_t sign = (x >> 16) & 0x8000u;
  uint32_t exp = (x >> 23) & 0xffu;
  uint32_t mant = x & 0x7fffffu;
  if (exp == 0xff) return static_cast<uint16_t>(sign | 0x7c00u | (mant ? 0x200u : 0));
  int e = static_cast<int>(exp) - 127 + 15;
  if (e >= 31) return static_cast<uint16_t>(sign | 0x7c00u);  // overflow to inf
  if (e <= 0) {
    if (e < -10) return static_cast<uint16_t>(sign);  // underflow to zero
    mant |= 0x800000u;
    uint32_t shift = static_cast<uint32_t>(14 - e);
    uint32_t half = mant >> shift;
    uint32_t rem = mant & ((1u << shift) - 1);
    uint32_t mid = 1u << (shift - 1);
    if (rem > mid || (rem == mid && (half & 1))) ++half;
    return static_cast<uint16_t>(sign | half);
  }
  uint32_t half = sign | (static_cast<uint32_t>(e) << 10) | (mant >> 13);
  uint32_t rem = mant & 0x1fffu;
  if (rem > 0x1000u || (rem == 0x1000u && (half & 1))) ++half;  // may carry into exp: correct
  return static_cast<uint16_t>(half);
}

float half_bits_to_float(uint16_t h) {
  uint32_t sign = (h & 0x8000u) << 16;
  uint32_t exp = (h >> 10) & 0x1fu;
  uint32_t mant = h & 0x3ffu;
  if (exp == 0) {
    float v = std::ldexp(static_cast<float>(mant), -24);
    return sign ? -v : v;
  }
  if (exp == 31) return std::bit_cast<float>(sign | 0x7f800000u | (mant << 13));
  return std::bit_cast<float>(sign | ((exp - 15 + 127) << 23) | (mant << 13));
}

uint16_t float_to_bf16_bits(float f) {
  uint32_t x = std::bit_cast<uint32_t>(f);
  if ((x & 0x7fffffffu) > 0x7f800000u) return static_cast<uint16_t>((x >> 16) | 0x40u);  // quiet NaN
  uint32_t rounding = 0x7fffu + ((x >> 16) & 1u);
  return static_cast<uint16_t>((x + rounding) >> 16);
}

float bf16_bits_to_float(uint16_t h) { return std::bit_cast<float>(static_cast<uint32_t>(h) << 16); }

double round_to_dtype(double v, DType t) {
  switch (t) {
    case DType::kF32: return static_cast<double>(static_cast<float>(v));
    case DType::kF16: return half_bits_to_float(float_to_half_bits(static_cast<float>(v)));
    case DType::kBF16: return bf16_bits_to_float(float_to_bf16_bits(static_cast<float>(v)));
    case DType::kI32: {
      if (std::isnan(v)) return 0;
      double r = std::trunc(v);
      if (r > std::numeric_limits<int32_t>::max()) return std::numeric_limits<int32_t>::max();
      if (r < std::numeric_limits<int32_t>::min()) return std::numeric_limits<int32_t>::min();
      return r + 0.0;  // an integer has no -0: trunc(-0.4) is -0.0, which would print and compare as such
    }
    case DType::kBool: return v != 0 ? 1.0 : 0.0;
  }
  return v;
}

double load_element(const void* data, DType t, size_t i) {
  const auto* bytes = static_cast<const unsigned char*>(data);
  switch (t) {
    case DType::kF32: { float f; std::memcpy(&f, bytes + 4 * i, 4); return f; }
    case DType::kF16: { uint16_t h; std::memcpy(&h, bytes + 2 * i, 2); return half_bits_to_float(h); }
    case DType::kBF16: { uint16_t h; std::memcpy(&h, bytes + 2 * i, 2); return bf16_bits_to_float(h); }
    case DType::kI32: { int32_t v; std::memcpy(&v, bytes + 4 * i, 4); return v; }
    case DType::kBool: return bytes[i] != 0 ? 1.0 : 0.0;
  }
  return 0;
}

void store_element(void* data, DType t, size_t i, double v) {
  auto* bytes = static_cast<unsigned char*>(data);
  switch (t) {
    case DType::kF32: { float f = static_cast<float>(v); std::memcpy(bytes + 4 * i, &f, 4); return; }
    case DType::kF16: { uint16_t h = float_to_half_bits(static_cast<float>(v)); std::memcpy(bytes + 2 * i, &h, 2); return; }
    case DType::kBF16: { uint16_t h = float_to_bf16_bits(static_cast<float>(v)); std::memcpy(bytes + 2 * i, &h, 2); return; }
    case DType::kI32: { int32_t x = static_cast<int32_t>(round_to_dtype(v, DType::kI32)); std::memcpy(bytes + 4 * i, &x, 4); return; }
    case DType::kBool: bytes[i] = v != 0 ? 1 : 0; return;
  }
}

}  // namespace gdl
