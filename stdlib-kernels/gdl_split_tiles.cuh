// Split tiles (gdl_split.cuh, 2): SplitScratch / split_arrive, one output
// tile computed in `splits` parts by different blocks of one launch. Each
// block writes its part to the step's scratch (a partial tile), then takes
// a ticket; the block that takes the last ticket combines the parts and
// resets the ticket to zero, so the next launch (a graph replay) starts
// from zero again. The tickets start at zero because the runtime zeroes
// every step's scratch once when a session starts (plan::Step::scratch). No
// block ever waits for another, so any grid size and any block order is
// correct.
#pragma once

#include "gdl_types.cuh"

namespace gdl {

struct SplitScratch {
  unsigned* tickets;  // one per output tile; zero between launches
  float* partials;    // [splits][tiles][tile elements], written before the ticket is taken
  int splits;         // 1: no scratch, the block writes its tile directly
};

// Called by every thread of the block once its part of the tile is stored
// (with __stcg). True in every thread of the block that arrived last; that
// block may then read every part (with __ldcg) and has already reset the
// ticket for the next launch. One thread fences for the block: the barrier
// orders the other threads' stores before its fence, and a device-scope
// fence is cumulative (the pattern of a grid-wide barrier). A fence in
// every thread cost each of them a wait for its own stores and an L1
// invalidation (MEMBAR.SC, CCTL.IVALL in the SASS); in ncu's samples of the
// W2 tiled matmul it was the instruction with the most warp stalls.
GDL_DEV bool split_arrive(unsigned* ticket, int splits) {
  __shared__ int last;
  __syncthreads();  // every thread's part is stored
  if (threadIdx.x == 0) {
    __threadfence();  // the block's part is visible device-wide before the ticket is taken
    const unsigned arrived = atomicAdd(ticket, 1u);
    last = arrived + 1u == (unsigned)splits;
    if (last) {
      atomicExch(ticket, 0u);  // every part has arrived: nobody else touches it in this launch
      __threadfence();         // the other parts' stores are visible to the reads after the barrier
    }
  }
  __syncthreads();
  return last != 0;
}

}  // namespace gdl
