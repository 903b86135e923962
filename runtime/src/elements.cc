// Element types of the public API and conversions between doubles and raw
// element bytes (the same rounding as the compiler and the interpreter).
#include "gdl/gdl.h"
#include "program_impl.h"
#include "types.h"

namespace gdl {

static_assert(static_cast<int>(ElementType::kF32) == static_cast<int>(DType::kF32) &&
                  static_cast<int>(ElementType::kF16) == static_cast<int>(DType::kF16) &&
                  static_cast<int>(ElementType::kBF16) == static_cast<int>(DType::kBF16) &&
                  static_cast<int>(ElementType::kI32) == static_cast<int>(DType::kI32) &&
                  static_cast<int>(ElementType::kBool) == static_cast<int>(DType::kBool),
              "the public ElementType mirrors the compiler's DType");

const char* element_type_name(ElementType t) { return dtype_name(rt::to_internal(t)); }

size_t element_size(ElementType t) { return dtype_size(rt::to_internal(t)); }

std::vector<uint8_t> encode_elements(ElementType t, std::span<const double> values) {
  std::vector<uint8_t> out(values.size() * element_size(t));
  for (size_t i = 0; i < values.size(); ++i) store_element(out.data(), rt::to_internal(t), i, values[i]);
  return out;
}

std::vector<double> decode_elements(ElementType t, const void* data, size_t count) {
  std::vector<double> out(count);
  for (size_t i = 0; i < count; ++i) out[i] = load_element(data, rt::to_internal(t), i);
  return out;
}

}  // namespace gdl
