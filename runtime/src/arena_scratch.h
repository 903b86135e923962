// The scratch area behind a plan's arena (plan::Plan::scratch_bytes): the
// kernels' working memory (split partial tiles and their tickets,
// kernel_choice.h). It is allocated with the arena, in the same block, and
// zeroed once right after: the tickets must start at zero, and the kernels
// leave them at zero after every launch, so a graph replays correctly
// forever. Nothing else may write it (the arena poisoning of the tests
// covers [0, arena_bytes) only).
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

// Zeroes the scratch area of a freshly allocated arena, in order on `stream`.
inline Status zero_scratch(unsigned char* arena, const plan::Plan& p, cudaStream_t stream) {
  if (p.scratch_bytes == 0) return Status::Ok();
  GDL_CUDA_TRY(cudaMemsetAsync(arena + p.arena_bytes, 0, p.scratch_bytes, stream),
               "zeroing the kernels' scratch (" + std::to_string(p.scratch_bytes) + " bytes)");
  return Status::Ok();
}

}  // namespace gdl::rt
