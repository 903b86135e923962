// Elementwise operations on compute values, overloaded for float (f32, f16,
// bf16 in float) and int (i32, and bool as 0/1). Semantics follow the CPU
// interpreter (compiler/ops/, the op table's CPU rules): i32 arithmetic wraps around, i32
// division truncates with x / 0 == 0 and INT_MIN / -1 == INT_MIN, i32 // and
// % floor (x // 0 == 0, x % 0 == x), shifts by any count are floor(x * 2^n)
// wrapped, min / max / relu / sign / clamp propagate NaN, round is half to
// even, gelu is the exact erf form, comparisons give 0/1 and are false on
// NaN except ne. Results are rounded into the value's dtype by the caller
// (gdl::fit), so these return plain float or int.
#pragma once

#include "gdl_types.cuh"

namespace gdl {
namespace op {

// ---------------------------------------------------------------- unary
GDL_DEV float neg(float x) { return -x; }
GDL_DEV int neg(int x) { return wrap_i32(-(long long)x); }
GDL_DEV float abs(float x) { return fabsf(x); }
GDL_DEV int abs(int x) { return wrap_i32(x < 0 ? -(long long)x : (long long)x); }
GDL_DEV float relu(float x) { return x < 0.0f ? 0.0f : x; }  // NaN stays NaN
GDL_DEV int relu(int x) { return x < 0 ? 0 : x; }
GDL_DEV int not_(int x) { return x == 0 ? 1 : 0; }
GDL_DEV float exp(float x) { return expf(x); }
GDL_DEV float log(float x) { return logf(x); }
GDL_DEV float sqrt(float x) { return sqrtf(x); }
GDL_DEV float rsqrt(float x) { return 1.0f / sqrtf(x); }
GDL_DEV float tanh(float x) { return tanhf(x); }
GDL_DEV float sigmoid(float x) { return 1.0f / (1.0f + expf(-x)); }
GDL_DEV float gelu(float x) { return 0.5f * x * (1.0f + erff(x * 0.707106781186547524f)); }
GDL_DEV float silu(float x) { return x / (1.0f + expf(-x)); }
GDL_DEV float cos(float x) { return cosf(x); }
GDL_DEV float sin(float x) { return sinf(x); }
GDL_DEV float erf(float x) { return erff(x); }
GDL_DEV float floor(float x) { return floorf(x); }
GDL_DEV float ceil(float x) { return ceilf(x); }
GDL_DEV float round(float x) { return rintf(x); }  // half to even, like the interpreter's nearbyint
GDL_DEV float sign(float x) { return x > 0.0f ? 1.0f : (x < 0.0f ? -1.0f : x); }  // 0 and NaN stay
GDL_DEV int sign(int x) { return x > 0 ? 1 : (x < 0 ? -1 : 0); }
GDL_DEV float copy(float x) { return x; }
GDL_DEV int copy(int x) { return x; }

// ---------------------------------------------------------------- binary
GDL_DEV float add(float a, float b) { return a + b; }
GDL_DEV int add(int a, int b) { return wrap_i32((long long)a + b); }
GDL_DEV float sub(float a, float b) { return a - b; }
GDL_DEV int sub(int a, int b) { return wrap_i32((long long)a - b); }
GDL_DEV float mul(float a, float b) { return a * b; }
GDL_DEV int mul(int a, int b) { return wrap_i32((long long)a * b); }
GDL_DEV float div(float a, float b) { return a / b; }
GDL_DEV int div(int a, int b) {
  if (b == 0) return 0;
  if (b == -1) return wrap_i32(-(long long)a);  // INT_MIN / -1 wraps to INT_MIN
  return a / b;
}
GDL_DEV float min(float a, float b) { return is_nan(a) || is_nan(b) ? nan_f32() : (b < a ? b : a); }
GDL_DEV int min(int a, int b) { return b < a ? b : a; }
GDL_DEV float max(float a, float b) { return is_nan(a) || is_nan(b) ? nan_f32() : (a < b ? b : a); }
GDL_DEV int max(int a, int b) { return a < b ? b : a; }
GDL_DEV float pow(float a, float b) { return powf(a, b); }
// The interpreter's std::pow in double rounded like a cast (toward zero,
// saturating), computed exactly in integers: the device's double pow can
// miss an exact integer result by an ulp, which truncation turns into an
// off-by-one.
GDL_DEV int pow(int a, int b) {
  if (b == 0 || a == 1) return 1;
  if (a == -1) return (b & 1) ? -1 : 1;
  if (b < 0) return a == 0 ? 2147483647 : 0;  // 0^-n = +inf saturates; |a^-n| < 1 truncates to 0
  if (a == 0) return 0;
  const bool negative = a < 0 && (b & 1);
  const long long base = a < 0 ? -(long long)a : (long long)a;
  long long result = 1;
  for (int i = 0; i < b; ++i) {  // |a| >= 2: at most 32 steps before it saturates
    result *= base;
    if (result > 2147483648LL) return negative ? int_min() : 2147483647;
  }
  return sat_i32(negative ? -result : result);
}

// Python's floor division and remainder: a == b * (a // b) + a % b for
// every pair, with x // 0 == 0 (as x / 0) and so x % 0 == x.
GDL_DEV int floordiv(int a, int b) {
  if (b == 0) return 0;
  if (b == -1) return wrap_i32(-(long long)a);  // INT_MIN // -1 wraps to INT_MIN
  const int q = a / b;
  return (a % b != 0 && (a < 0) != (b < 0)) ? q - 1 : q;
}
GDL_DEV int mod(int a, int b) {
  if (b == 0) return a;
  if (b == -1) return 0;  // INT_MIN % -1 would trap
  const int r = a % b;
  return (r != 0 && (r < 0) != (b < 0)) ? r + b : r;
}
GDL_DEV int bitand_(int a, int b) { return a & b; }
GDL_DEV int bitor_(int a, int b) { return a | b; }
GDL_DEV int bitxor_(int a, int b) { return a ^ b; }
// floor(x * 2^n) wrapped to 32 bits, for every n: C leaves counts outside
// [0, 31] undefined, so those are spelled out.
GDL_DEV int shift_by(int x, int n) {
  if (n >= 32) return 0;
  if (n <= -32) return x < 0 ? -1 : 0;
  return n >= 0 ? (int)((unsigned int)x << n) : x >> -n;  // >> of a signed int is arithmetic
}
GDL_DEV int shl(int x, int n) { return shift_by(x, n); }
GDL_DEV int shr(int x, int n) { return n <= -32 ? 0 : shift_by(x, -n); }

template <typename C> GDL_DEV int lt(C a, C b) { return a < b ? 1 : 0; }
template <typename C> GDL_DEV int le(C a, C b) { return a <= b ? 1 : 0; }
template <typename C> GDL_DEV int gt(C a, C b) { return a > b ? 1 : 0; }
template <typename C> GDL_DEV int ge(C a, C b) { return a >= b ? 1 : 0; }
template <typename C> GDL_DEV int eq(C a, C b) { return a == b ? 1 : 0; }
template <typename C> GDL_DEV int ne(C a, C b) { return a != b ? 1 : 0; }
GDL_DEV int and_(int a, int b) { return a != 0 && b != 0 ? 1 : 0; }
GDL_DEV int or_(int a, int b) { return a != 0 || b != 0 ? 1 : 0; }

template <typename C> GDL_DEV C where(int cond, C a, C b) { return cond != 0 ? a : b; }
GDL_DEV float clamp(float x, float lo, float hi) { return min(max(x, lo), hi); }
GDL_DEV int clamp(int x, int lo, int hi) { return min(max(x, lo), hi); }

}  // namespace op
}  // namespace gdl
