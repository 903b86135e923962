// Which consecutive matmul steps one persistent kernel may run
// (gdl::MatmulChain, stdlib-kernels/gdl_chain.cuh).
//
// A launch per layer drains the memory pipe at every layer boundary; a chain
// streams the weights of all its steps through one ring and separates the
// steps by a grid-wide barrier instead (docs/performance.md). The chain
// serves runs whose rows are at most kChainMaxRows; the steps' own kernels
// serve the others, so a chain never changes what a program computes.
#pragma once

#include <vector>

#include "plan.h"

namespace gdl {

inline constexpr int64_t kChainMaxRows = 8;        // gdl::chain::kMaxRows
inline constexpr int64_t kChainBlockColumns = 32;  // gdl::chain::kCols: one block per 32 columns
inline constexpr int64_t kChainKMultiple = 128;    // gdl::chain::kSlotRows
inline constexpr int64_t kChainMaxK = 4096;        // one block per SM on an H100/H200 (132 SMs)
// A chain runs K / kChainBlockColumns blocks, one per SM: below half the
// SMs (K < 2048) it streams the weights through too few of them. Measured
// on the H200 (docs/performance.md): at K = 1024 (32 blocks) the chain took
// 57.5 us for W2's eight layers at B=1 against 40.8 us for the steps'
// kernels; at K = 4096 (128 blocks) 164 against 213 us at B=8.
inline constexpr int64_t kChainMinK = 2048;
inline constexpr uint32_t kChainThreads = 256;     // gdl::chain::kThreads

// The dynamic shared memory of a chain over K: gdl::chain::Layout<K>::bytes
// (the generated kernel asserts that they agree).
uint32_t chain_shared_bytes(int64_t k);

// The maximal runs of at least two consecutive plan steps where every step
// is a matmul (with its norm prologue and epilogue, if any) that the chain
// kernel can compute, and each step after the first takes the step before
// it as its a:
//   - a [rows..., K] (f16 or bf16) @ a param b [K, K] of the same dtype, K a
//     multiple of kChainKMultiple in [kChainMinK, kChainMaxK], K the same in
//     every step of the run, the rows kernel serving the smallest bindings;
//   - its result has a's dtype.
// barrier_offset is left 0 for make_plan to place.
std::vector<plan::Chain> find_matmul_chains(const plan::Plan& p);

}  // namespace gdl
