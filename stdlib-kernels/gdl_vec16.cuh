// 16-byte vectors (gdl_split.cuh, 1): Vec16<T> / load16, 16 bytes of
// storage elements (8 f16 or bf16, 4 f32) as four 32-bit words, widened to
// float at use. load16 issues one 16-byte load when the caller vouches for
// the alignment and the vector is whole; otherwise (an unaligned operand, a
// ragged edge) it loads the valid elements one by one and zero-fills the
// rest, so every caller is correct for any shape and only faster where the
// shape allows.
#pragma once

#include "gdl_types.cuh"

namespace gdl {

template <typename T> struct Vec16;
template <> struct Vec16<float> {
  static constexpr int n = 4;
  static GDL_DEV unsigned bits(float x) { return __float_as_uint(x); }
  static GDL_DEV float elem(unsigned w, int) { return __uint_as_float(w); }
};
// pack(lo, hi): both rounded to the nearest T (ties to even), lo in the low
// half of the word, by one paired conversion: the bf16 conversion of one
// element is a slow one on sm_90 (docs/performance.md).
template <> struct Vec16<__half> {
  static constexpr int n = 8;
  static GDL_DEV unsigned bits(__half x) { return __half_as_ushort(x); }
  static GDL_DEV unsigned pack(float lo, float hi) {
    const __half2 h = __floats2half2_rn(lo, hi);
    return *reinterpret_cast<const unsigned*>(&h);
  }
  static GDL_DEV float elem(unsigned w, int half) {
    return __half2float(__ushort_as_half((unsigned short)(half ? w >> 16 : w & 0xffffu)));
  }
};
template <> struct Vec16<__nv_bfloat16> {
  static constexpr int n = 8;
  static GDL_DEV unsigned bits(__nv_bfloat16 x) { return __bfloat16_as_ushort(x); }
  static GDL_DEV unsigned pack(float lo, float hi) {
    const __nv_bfloat162 h = __floats2bfloat162_rn(lo, hi);
    return *reinterpret_cast<const unsigned*>(&h);
  }
  // A bf16 is the upper half of the float with the same bits.
  static GDL_DEV float elem(unsigned w, int half) { return __uint_as_float(half ? w & 0xffff0000u : w << 16); }
};

// Element j of a vector (j a compile-time constant after unrolling).
template <typename T> GDL_DEV float vec_elem(const uint4& r, int j) {
  constexpr int per_word = Vec16<T>::n / 4;  // 1 or 2
  const int word = j / per_word;
  const unsigned w = word == 0 ? r.x : word == 1 ? r.y : word == 2 ? r.z : r.w;
  return Vec16<T>::elem(w, j % per_word);
}

template <typename T> GDL_DEV void widen(const uint4& r, float (&f)[Vec16<T>::n]) {
#pragma unroll
  for (int j = 0; j < Vec16<T>::n; ++j) f[j] = vec_elem<T>(r, j);
}
// f16 pairs at once: one conversion per element, straight from either half of a word.
template <> GDL_DEV void widen<__half>(const uint4& r, float (&f)[8]) {
  const unsigned words[4] = {r.x, r.y, r.z, r.w};
#pragma unroll
  for (int i = 0; i < 4; ++i) {
    const float2 pair = __half22float2(*reinterpret_cast<const __half2*>(&words[i]));
    f[2 * i] = pair.x;
    f[2 * i + 1] = pair.y;
  }
}

GDL_DEV uint4 zero16() { return make_uint4(0u, 0u, 0u, 0u); }

// p[0, n) as one vector, zeros at j >= valid (valid may be <= 0 or > n).
// `vector`: p is 16-byte aligned whenever valid >= n.
template <typename T> GDL_DEV uint4 load16(const T* p, int valid, bool vector) {
  constexpr int n = Vec16<T>::n, per_word = n / 4;
  if (vector && valid >= n) return __ldg(reinterpret_cast<const uint4*>(p));
  unsigned w[4] = {0u, 0u, 0u, 0u};
#pragma unroll
  for (int j = 0; j < n; ++j)
    if (j < valid) w[j / per_word] |= Vec16<T>::bits(p[j]) << (16 * (j % per_word));
  return make_uint4(w[0], w[1], w[2], w[3]);
}

// How many of the n elements of a vector starting at `offset` lie before `end` (0..n).
template <int n, typename I> GDL_DEV int vec_valid(I offset, I end) {
  const I left = end - offset;
  return left >= (I)n ? n : (left > 0 ? (int)left : 0);
}

template <typename T> GDL_DEV bool aligned16(const T* p) { return (reinterpret_cast<unsigned long long>(p) & 15ull) == 0; }

}  // namespace gdl
