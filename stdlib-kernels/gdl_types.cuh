// Element types: how each storage type loads into its compute type, and how a
// computed value is rounded back, with the CPU interpreter's semantics
// (core/types.h round_to_dtype):
//
//   storage         dtype  compute  number  fit (round a computed value into the dtype)
//   float           f32    float    float   as is
//   __half          f16    float    float   round to nearest even through f16
//   __nv_bfloat16   bf16   float    float   round to nearest even through bf16
//   int             i32    int      int     from float: toward zero, saturating, NaN -> 0
//   unsigned char   bool   int 0/1  float   nonzero (NaN included) -> 1
//
// "compute" is the type a value is held in inside a kernel; "number" is the
// domain its arithmetic (reductions, matmul) runs in: the interpreter does
// integer arithmetic only on i32.
#pragma once

#include <cuda_fp16.h>
#include <cuda_bf16.h>

#include "gdl_abi.cuh"

namespace gdl {

typedef unsigned char boolean;  // storage of a bool element: 0 or 1

GDL_DEV float inf_f32() { return __int_as_float(0x7f800000); }
GDL_DEV float nan_f32() { return __int_as_float(0x7fffffff); }
GDL_DEV bool is_nan(float x) { return x != x; }
GDL_DEV int int_min() { return -2147483647 - 1; }

// i32 results that wrap around (add, sub, mul, neg, abs, sum) as the
// interpreter's two's complement arithmetic does.
GDL_DEV int wrap_i32(long long v) { return (int)(unsigned int)(unsigned long long)v; }
// i32 results that saturate (matmul, and every conversion of a wider value).
GDL_DEV int sat_i32(long long v) {
  return v > 2147483647LL ? 2147483647 : (v < -2147483648LL ? int_min() : (int)v);
}

// ------------------------------------------------------------------ load
GDL_DEV float ld(float x) { return x; }
GDL_DEV float ld(__half x) { return __half2float(x); }
GDL_DEV float ld(__nv_bfloat16 x) { return __bfloat162float(x); }
GDL_DEV int ld(int x) { return x; }
GDL_DEV int ld(unsigned char x) { return x != 0 ? 1 : 0; }

// Storage element -> its arithmetic domain (bool counts as a float 0/1).
GDL_DEV float num(float x) { return x; }
GDL_DEV float num(__half x) { return __half2float(x); }
GDL_DEV float num(__nv_bfloat16 x) { return __bfloat162float(x); }
GDL_DEV int num(int x) { return x; }
GDL_DEV float num(unsigned char x) { return x != 0 ? 1.0f : 0.0f; }

// ------------------------------------------------------------------ traits
template <typename T> struct dtype_traits;
template <> struct dtype_traits<float> {
  typedef float compute;
  typedef float number;
  static GDL_DEV float fit(float x) { return x; }
  static GDL_DEV float fit(int x) { return __int2float_rn(x); }
  static GDL_DEV float store(float c) { return c; }
};
template <> struct dtype_traits<__half> {
  typedef float compute;
  typedef float number;
  static GDL_DEV float fit(float x) { return __half2float(__float2half_rn(x)); }
  // int -> float -> f16, the interpreter's double rounding through float.
  static GDL_DEV float fit(int x) { return fit(__int2float_rn(x)); }
  static GDL_DEV __half store(float c) { return __float2half_rn(c); }
};
template <> struct dtype_traits<__nv_bfloat16> {
  typedef float compute;
  typedef float number;
  static GDL_DEV float fit(float x) { return __bfloat162float(__float2bfloat16_rn(x)); }
  static GDL_DEV float fit(int x) { return fit(__int2float_rn(x)); }
  static GDL_DEV __nv_bfloat16 store(float c) { return __float2bfloat16_rn(c); }
};
template <> struct dtype_traits<int> {
  typedef int compute;
  typedef int number;
  // cvt.rzi saturates and turns NaN into 0, as round_to_dtype does.
  static GDL_DEV int fit(float x) { return __float2int_rz(x); }
  static GDL_DEV int fit(int x) { return x; }
  static GDL_DEV int store(int c) { return c; }
};
template <> struct dtype_traits<unsigned char> {
  typedef int compute;
  typedef float number;
  static GDL_DEV int fit(float x) { return x != 0.0f ? 1 : 0; }  // NaN != 0: true
  static GDL_DEV int fit(int x) { return x != 0 ? 1 : 0; }
  static GDL_DEV unsigned char store(int c) { return c != 0 ? 1 : 0; }
};

template <typename T> struct is_int_dtype { static constexpr bool value = false; };
template <> struct is_int_dtype<int> { static constexpr bool value = true; };

// A computed value (float or int) rounded into dtype T, held in T's compute type.
template <typename T, typename X>
GDL_DEV typename dtype_traits<T>::compute fit(X x) { return dtype_traits<T>::fit(x); }
// A computed value rounded into dtype T and encoded as T's storage.
template <typename T, typename X>
GDL_DEV T cvt(X x) { return dtype_traits<T>::store(dtype_traits<T>::fit(x)); }

// A run-time scalar from gdl_args::scalars: f32 as is, i32 as its bit pattern.
GDL_DEV float scalar_f32(float bits) { return bits; }
GDL_DEV int scalar_i32(float bits) { return __float_as_int(bits); }

// ------------------------------------------------------------------ operands
// Sources of a per-column operand (norm weight and bias) as the structured
// kernels read them: at(j) gives the value for column j in float.
template <typename T> struct Column {  // one element per column
  const T* p;
  GDL_DEV float at(long long j) const { return num(p[j]); }
};
struct One {
  GDL_DEV float at(long long) const { return 1.0f; }
};
struct Zero {
  GDL_DEV float at(long long) const { return 0.0f; }
};

// One normalized element at position j, given the row's statistics: the
// expression of gdl::layernorm_rows / rmsnorm_rows, and of the matmul's
// norm prologue, which must store the same values.
template <typename W, typename B>
GDL_DEV float layernorm_value(float x, float mean, float inv, const W& w, const B& b, long long j) {
  return (x - mean) * inv * w.at(j) + b.at(j);
}
template <typename W> GDL_DEV float rmsnorm_value(float x, float inv, const W& w, long long j) {
  return x * inv * w.at(j);
}

// A rank-0 i32 operand read at run time (the attention length): from a
// device buffer, or a value known when the kernel was generated.
// A length for attention row `row`: one for every row (a device scalar or a
// value), or one per sequence (IntPerRow: the rows of one sequence, its
// query heads, are consecutive).
struct IntAt {
  const int* p;
  template <typename I> GDL_DEV int get(I) const { return *p; }
};
struct IntValue {
  int v;
  template <typename I> GDL_DEV int get(I) const { return v; }
};
struct IntPerRow {
  const int* p;
  long long rows_per_value;
  template <typename I> GDL_DEV int get(I row) const { return p[(long long)row / rows_per_value]; }
};
// A causal row's length: query i of its sequence sits at position start + i
// and sees the positions up to its own, within the sequence's length.
// Rows are ordered (sequence, query, head).
template <typename L, typename S> struct CausalLen {
  L len;
  S start;
  long long heads, queries;
  template <typename I> GDL_DEV int get(I row) const {
    const long long query = (long long)row / heads % queries;
    const long long own = (long long)start.get(row) + query + 1, limit = len.get(row);
    return (int)(own < limit ? own : limit);
  }
};
// No positions for the rows past the valid ones of a padded leading axis
// (buckets): they are padding, whatever length their stale inputs give, so
// they read no k or v.
template <typename S> struct ValidRowsLen {
  S source;
  long long valid_rows;  // the leading axis's valid count times the rows under each of its entries
  template <typename I> GDL_DEV int get(I row) const { return (long long)row < valid_rows ? source.get(row) : 0; }
};
// A length clamped to the valid count of a padded axis (buckets, gdl_abi_types.cuh).
template <typename S> struct ClampedLen {
  S source;
  int valid;
  template <typename I> GDL_DEV int get(I row) const {
    const int len = source.get(row);
    return len < valid ? len : valid;
  }
};

}  // namespace gdl
