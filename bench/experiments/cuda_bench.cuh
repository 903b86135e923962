// What the standalone CUDA experiments in bench/experiments/ (each built
// alone with nvcc, README.md there) share: failing loudly on a
// CUDA error, and reproducible fill values without a host round trip.
#pragma once

#include <cuda_fp16.h>
#include <cuda_runtime.h>

#include <cstdio>
#include <cstdlib>

#define CK(call)                                                               \
  do {                                                                         \
    cudaError_t e_ = (call);                                                   \
    if (e_ != cudaSuccess) {                                                   \
      fprintf(stderr, "%s failed at %s:%d: %s\n", #call, __FILE__, __LINE__,  \
              cudaGetErrorString(e_));                                         \
      exit(1);                                                                 \
    }                                                                          \
  } while (0)

// A value in [-1, 1) from element index i and a seed.
__device__ __forceinline__ float hash_unit(unsigned long long i, unsigned seed) {
  unsigned h = (unsigned)i ^ (unsigned)(i >> 32) * 0x9E3779B9u ^ seed;
  h ^= h >> 16; h *= 0x7feb352du; h ^= h >> 15; h *= 0x846ca68bu; h ^= h >> 16;
  return (float)h * (2.0f / 4294967296.0f) - 1.0f;
}

__global__ void fill_half(__half* p, size_t n, unsigned seed, float scale) {
  for (size_t i = blockIdx.x * (size_t)blockDim.x + threadIdx.x; i < n; i += (size_t)gridDim.x * blockDim.x)
    p[i] = __float2half_rn(hash_unit(i, seed) * scale);
}
