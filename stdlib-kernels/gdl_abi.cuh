// The kernel ABI shared by every generated kernel (see compiler/src/codegen.h):
//
//   extern "C" __global__ void gdl_s<step>_<op>(unsigned char* arena,
//                                              const unsigned char* params,
//                                              gdl_args args);
//
// arena:  base of the per-session device arena (inputs, outputs, temporaries).
// params: base of the persistent params region (weights), read only.
// args:   passed by value; dims[i] is the layout extent of run-time dim i
//         (Graph::dims order): the capacity of the run's bucket under the
//         buckets policy, the value itself under the update policy;
//         scalars[i] the current value of run-time scalar i (an i32 scalar
//         travels as its bit pattern).
// The valid counts: a program with run-time dims reserves a block at a
// fixed arena offset (plan::kValidDimsOffset) holding int valid[8], the
// value of each run-time dim for this run (valid[i] <= dims[i]), written by
// the runtime before a run whenever it changed. Kernels that combine
// elements along a run-time axis read it (gdl::valid_dim) and ignore
// positions past it; every other kernel computes the padding too.
#pragma once

#define GDL_MAX_RUNTIME_DIMS 8
#define GDL_MAX_SCALARS 16

struct gdl_args {
  int dims[GDL_MAX_RUNTIME_DIMS];
  float scalars[GDL_MAX_SCALARS];
};

// The runtime's input copy node (gdl_input_copy, generated into every
// module): entry y copies bytes[y] bytes from src[y] (an input's pinned
// staging buffer, read over the bus, or the caller's device memory) to
// dst[y] (its arena buffer); bytes 0 skips the entry (an input with no bind
// since the last run).
#define GDL_MAX_INPUT_COPIES 16
struct gdl_input_copies {
  const unsigned char* src[GDL_MAX_INPUT_COPIES];
  unsigned char* dst[GDL_MAX_INPUT_COPIES];
  unsigned long long bytes[GDL_MAX_INPUT_COPIES];
};

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
// only when its work is short (gdl_matmul.cuh matmul_allow_dependents);
// otherwise its dependents launch as its blocks exit.
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
