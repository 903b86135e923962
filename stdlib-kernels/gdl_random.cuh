// Counter-based random numbers: Philox-4x32-10 (Salmon et al., "Parallel
// random numbers: as easy as 1, 2, 3", SC'11), the generator cuRAND and
// PyTorch use. The 128-bit counter is (offset + base + i / 4, 0, 0) for
// element i of a random op, whose `base` the compiler gives it (its slice of
// the run's counters); the key is the seed. The state a program's random
// ops read is `rng.state` : i32[4] = {seed lo, seed hi, offset lo, offset
// hi}, which the run's last step advances (rng_advance). The CPU reference
// (compiler/ops/random.cc) computes the same words bit for bit.
#pragma once

#include "gdl_types.cuh"

namespace gdl {

struct Philox4 {
  unsigned int w[4];
};

GDL_DEV Philox4 philox4x32_10(unsigned int c0, unsigned int c1, unsigned int c2, unsigned int c3, unsigned int k0,
                              unsigned int k1) {
  for (int round = 0; round < 10; ++round) {
    const unsigned long long p0 = 0xD2511F53ull * c0, p1 = 0xCD9E8D57ull * c2;
    const unsigned int hi0 = (unsigned int)(p0 >> 32), lo0 = (unsigned int)p0;
    const unsigned int hi1 = (unsigned int)(p1 >> 32), lo1 = (unsigned int)p1;
    c0 = hi1 ^ c1 ^ k0;
    c1 = lo1;
    c2 = hi0 ^ c3 ^ k1;
    c3 = lo0;
    k0 += 0x9E3779B9u;
    k1 += 0xBB67AE85u;
  }
  return Philox4{{c0, c1, c2, c3}};
}

// Word `word` of counter (offset + base + block), as 64-bit arithmetic.
GDL_DEV unsigned int random_word(const int* state, unsigned long long base, unsigned long long block, int word) {
  const unsigned long long offset =
      ((unsigned long long)(unsigned int)state[3] << 32) | (unsigned long long)(unsigned int)state[2];
  const unsigned long long counter = offset + base + block;
  const Philox4 r = philox4x32_10((unsigned int)counter, (unsigned int)(counter >> 32), 0u, 0u,
                                  (unsigned int)state[0], (unsigned int)state[1]);
  return r.w[word];
}

// Uniform in [0, 1): the top 24 bits, exact in every float dtype's compute type.
GDL_DEV float random_uniform(const int* state, unsigned long long base, unsigned long long i) {
  return (float)(random_word(state, base, i / 4, (int)(i % 4)) >> 8) * 5.9604644775390625e-8f;
}

// Standard normal by Box-Muller from the two words 2i, 2i + 1.
GDL_DEV float random_normal(const int* state, unsigned long long base, unsigned long long i) {
  const unsigned long long j = 2 * i;
  const float u1 = (float)((random_word(state, base, j / 4, (int)(j % 4)) >> 8) + 1u) * 5.9604644775390625e-8f;
  const float u2 = (float)(random_word(state, base, (j + 1) / 4, (int)((j + 1) % 4)) >> 8) * 5.9604644775390625e-8f;
  return sqrtf(-2.0f * logf(u1)) * cospif(2.0f * u2);
}

}  // namespace gdl
