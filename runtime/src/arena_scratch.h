// The scratch area behind a plan's arena (plan::Plan::scratch_bytes): the
// kernels' working memory (split partial tiles and their tickets,
// kernel_choice.h). It is allocated with the arena, in the same block, and
// zeroed once right after: the tickets must start at zero, and the kernels
// leave them at zero after every launch, so a graph replays correctly
// forever. Nothing else may write it (the arena poisoning of the tests
// covers [0, arena_bytes) only). The arena is zeroed with it: the padding
// of an input bound below its bucket is read by kernels that compute the
// padded rows (and discard them), and it then holds defined values, never
// uninitialized memory (compute-sanitizer initcheck stays clean).
#pragma once

#include <cuda_runtime_api.h>

#include <algorithm>
#include <cstdint>
#include <string>

#include "cuda_util.h"
#include "plan.h"

namespace gdl::rt {

// Bytes to allocate for the arena of `p` with its scratch area (at least kAlignment).
inline uint64_t arena_allocation_bytes(const plan::Plan& p) {
  return std::max<uint64_t>(p.arena_bytes + p.scratch_bytes, plan::kAlignment);
}

// Zeroes a freshly allocated arena and its scratch area, in order on `stream`.
inline Status zero_arena(unsigned char* arena, const plan::Plan& p, cudaStream_t stream) {
  const uint64_t bytes = arena_allocation_bytes(p);
  GDL_CUDA_TRY(cudaMemsetAsync(arena, 0, bytes, stream), "zeroing the arena (" + std::to_string(bytes) + " bytes)");
  return Status::Ok();
}

}  // namespace gdl::rt
