// The kernel ABI's device side: the launch-overlap calls, the L2 prefetch,
// the input copy and the valid counts of run-time dims. The kernel
// signature, gdl_args and gdl_input_copies are in gdl_abi_types.cuh (host
// C++ includes that one too).
#pragma once

#include "gdl_abi_types.cuh"

#define GDL_DEV __device__ __forceinline__

namespace gdl {

// Launch overlap (programmatic dependent launch; the runtime makes every
// graph edge between two kernels programmatic): a kernel may start while
// the kernels it depends on still run. Every generated kernel therefore
// calls wait_for_producers() before it touches the arena; before that call
// it may only read params, which no kernel writes (the matmul prefetches
// its weights into L2 there). allow_dependents() lets the kernels after
// this one launch; a kernel that prefetches calls it only after its wait,
// so at most one prefetching kernel runs ahead of the one computing, and
// only when its work is short (gdl_matmul_prefetch.cuh,
// matmul_allow_dependents); otherwise its dependents launch as its blocks
// exit.
// Without a programmatic edge (eager launches) both are no-ops.
GDL_DEV void wait_for_producers() {
#if defined(__CUDA_ARCH__) && __CUDA_ARCH__ >= 900
  asm volatile("griddepcontrol.wait;" ::: "memory");
#endif
}
GDL_DEV void allow_dependents() {
#if defined(__CUDA_ARCH__) && __CUDA_ARCH__ >= 900
  asm volatile("griddepcontrol.launch_dependents;" :::);
#endif
}

// Pulls the 128-byte line holding p into L2 (a hint: no fault, no result).
GDL_DEV void prefetch_l2(const void* p) { asm volatile("prefetch.global.L2 [%0];" ::"l"(p)); }

// One entry of gdl_input_copies over the blocks of x: 16 bytes per thread
// and step; src and dst are 16-byte aligned (page-aligned staging, device
// sources checked by bind, kAlignment-aligned arena buffers).
GDL_DEV void copy_bytes(const unsigned char* src, unsigned char* dst, unsigned long long bytes) {
  const unsigned long long first = (unsigned long long)blockIdx.x * blockDim.x + threadIdx.x;
  const unsigned long long threads = (unsigned long long)gridDim.x * blockDim.x, vectors = bytes / 16;
  for (unsigned long long i = first; i < vectors; i += threads)
    reinterpret_cast<uint4*>(dst)[i] = reinterpret_cast<const uint4*>(src)[i];
  for (unsigned long long i = vectors * 16 + first; i < bytes; i += threads) dst[i] = src[i];
}

// The valid count of run-time dim d for this run, from the block at
// `block_offset` in the arena.
GDL_DEV int valid_dim(const unsigned char* arena, unsigned long long block_offset, int d) {
  return reinterpret_cast<const int*>(arena + block_offset)[d];
}

}  // namespace gdl
