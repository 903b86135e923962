// Which consecutive matmul steps one persistent kernel may run
// (gdl::MatmulChain, stdlib-kernels/gdl_chain.cuh).
//
// A launch per layer drains the memory pipe at every layer boundary; a chain
// streams the weights of all its steps through one ring and hands each
// step's rows to the next through mailboxes in its scratch instead
// (docs/performance.md). The chain's
// kernel serves runs whose rows are at most chain::kMaxRows; at K = 1024
// a second kernel serves up to chain::kMaxGroups row groups of chain::kMaxRows
// (plan::Chain::row_groups); the steps' own kernels serve the others, so a
// chain never changes what a program computes.
#pragma once

#include <algorithm>
#include <cstdint>
#include <vector>

#include "gdl_chain_layout.cuh"

#include "plan.h"
#include "plan/plan_options.h"

namespace gdl {

// The kernel's constants and layout (threads, blocks, rows, columns per
// block, shared memory, exchange area) are gdl::chain's, from the header the
// kernel is built from; what follows is gdlc's policy on top of them.

// The K a chain takes: a multiple of chain::kSlotRows in [kChainMinK,
// kChainMaxK]. Up to 4096 a block owns at most 32 columns. Below 1024 it
// was not measured to pay off: with 32 columns at K = 1024 (32 blocks) the
// chain took 57.5 us for W2's eight layers at B=1 against 40.8 us for the
// steps' kernels, before narrower strips (chain::cols_for) fixed that
// (docs/performance.md).
inline constexpr int64_t kChainMinK = 1024;
inline constexpr int64_t kChainMaxK = 4096;

// The row groups of the second kernel of a chain over K whose rows reach
// max_rows (every run-time dim at its upper bound): 0 where the first
// kernel serves them all (max_rows <= chain::kMaxRows), K is above
// chain::kGroupMaxK, or the groups' blocks would not fit chain::kBlocks
// with at most 64 columns each; else enough groups of chain::kMaxRows for
// max_rows, at most chain::kMaxGroups (more rows run the steps' kernels).
int64_t chain_row_groups(int64_t k, int64_t max_rows);

// The scratch a chain's kernels exchange rows through (chain::exchange_bytes;
// a chain without row groups runs one).
inline uint64_t chain_exchange_bytes(int64_t k, int64_t row_groups) {
  return chain::exchange_bytes(static_cast<int>(k), static_cast<int>(std::max<int64_t>(row_groups, 1)));
}

// The tensor maps of a chain's kernels, through which their producer thread
// copies the weights (cp.async.bulk.tensor): one CUtensorMap
// (chain::kTensorMapBytes, also its alignment here) per step and kernel,
// written by the runtime when a session starts (it needs the params' device
// address), in the chain's scratch right after its exchange area.

// The chain's kernels: 1, or 2 with row groups (codegen/chain_kernel.h).
int64_t chain_kernel_count(const plan::Chain& c);
// The chain's kernel that serves a launch in `groups` row groups: 0, the
// kernel for one group (at most chain::kMaxRows rows), or 1 for more.
inline int64_t chain_kernel_index(int64_t groups) { return groups > 1 ? 1 : 0; }
// Where the tensor maps of the chain's kernel `kernel` (0 or 1) lie, in bytes
// from the start of the chain's scratch, and the chain's whole scratch: its
// exchange area, then its kernels' tensor maps.
uint64_t chain_tensor_maps_at(const plan::Chain& c, int64_t kernel);
uint64_t chain_scratch_bytes(const plan::Chain& c);

// The pass: with options.chain_matmuls, p.chains = the maximal runs of at
// least two consecutive plan steps where every step is a matmul (with its
// norm prologue and epilogue, if any) that the chain kernel can compute, and
// each step after the first takes the step before it as its a:
//   - a [rows..., K] (f16 or bf16) @ a param b [K, K] of the same dtype, K a
//     multiple of chain::kSlotRows in [kChainMinK, kChainMaxK], K the same in
//     every step of the run, the rows kernel serving the smallest bindings;
//   - its result has a's dtype.
// Each chain gets row_groups = chain_row_groups at the largest binding and
// its scratch_bytes; lay_out_scratch places it. Runs after plan_memory (a
// chain's b must be a param).
void find_matmul_chains(plan::Plan& p, const plan::PlanOptions& options);

}  // namespace gdl
