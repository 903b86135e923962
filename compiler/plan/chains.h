// Which consecutive matmul steps one persistent kernel may run
// (gdl::MatmulChain, stdlib-kernels/gdl_chain.cuh).
//
// A launch per layer drains the memory pipe at every layer boundary; a chain
// streams the weights of all its steps through one ring and hands each
// step's rows to the next through mailboxes in its scratch instead
// (docs/performance.md). The chain's
// kernel serves runs whose rows are at most kChainMaxRows; at K = 1024 a
// second kernel serves up to kChainMaxGroups row groups of kChainMaxRows
// (plan::Chain::row_groups); the steps' own kernels serve the others, so a
// chain never changes what a program computes.
#pragma once

#include <vector>

#include "plan.h"
#include "plan/plan_options.h"

namespace gdl {

inline constexpr int64_t kChainMaxRows = 8;        // gdl::chain::kMaxRows
inline constexpr int64_t kChainKMultiple = 128;    // gdl::chain::kSlotRows
inline constexpr int64_t kChainBlocks = 128;       // gdl::chain::kBlocks: one block per SM on an H100/H200
inline constexpr int64_t kChainMaxK = 4096;        // 32 columns per block at most
// Each block owns chain_block_columns(K) output columns (8, 16 or 32: the
// narrowest that needs at most kChainBlocks blocks), so K = 1024, 2048 and
// 4096 all run 128 blocks. With 32 columns at K = 1024 (32 blocks) the chain
// took 57.5 us for W2's eight layers at B=1 against 40.8 us for the steps'
// kernels (docs/performance.md), so narrower strips came before K = 1024.
inline constexpr int64_t kChainMinK = 1024;
inline constexpr uint32_t kChainThreads = 288;     // gdl::chain::kLaunchThreads: 8 computing warps, 1 producer warp
inline constexpr int64_t kChainComputingWarps = 8;  // gdl::chain::kWarps
inline constexpr int64_t kChainMaxGroups = 8;      // gdl::chain::kMaxGroups: up to 64 rows
inline constexpr int64_t kChainGroupMaxK = 1024;   // gdl::chain::kGroupMaxK
inline constexpr uint64_t kChainCounterBytes = kChainMaxGroups * 128;  // gdl::chain::kCounterBytes
inline constexpr int64_t kChainMailboxMaxK = 1024;  // gdl::chain::kMailboxMaxK

// gdl::chain::cols_for(K): the output columns of one block of a chain over K.
int64_t chain_block_columns(int64_t k);

// gdl::chain::group_cols_for(K, groups): the output columns of one block of
// a chain's kernel in row groups.
int64_t chain_group_columns(int64_t k, int64_t groups);

// The row groups of the second kernel of a chain over K whose rows reach
// max_rows (every run-time dim at its upper bound): 0 where the first
// kernel serves them all (max_rows <= kChainMaxRows), K is above
// kChainGroupMaxK, or the groups' blocks would not fit kChainBlocks with
// at most 64 columns each; else enough groups of kChainMaxRows for
// max_rows, at most kChainMaxGroups (more rows run the steps' kernels).
int64_t chain_row_groups(int64_t k, int64_t max_rows);

// The dynamic shared memory of a chain over K with `cols` columns per
// block: gdl::chain::Layout<K, C>::bytes (the generated kernel asserts that
// they agree).
uint32_t chain_shared_bytes(int64_t k, int64_t cols);

// The scratch a chain's kernels exchange rows through: its counters, and
// at K <= kChainMailboxMaxK its mailboxes (above it the kernel separates
// its steps by a grid barrier, and each block stores its rows' partial
// statistics for the next step's norm, two step parities of kChainMaxRows x
// kChainBlocks float4): gdl::chain::exchange_bytes(K, max(row_groups, 1)).
uint64_t chain_exchange_bytes(int64_t k, int64_t row_groups);

// The tensor maps of a chain's kernels, through which their producer thread
// copies the weights (cp.async.bulk.tensor): one CUtensorMap per step and
// kernel, written by the runtime when a session starts (it needs the params'
// device address), in the chain's scratch right after its exchange area.
inline constexpr uint64_t kChainTensorMapBytes = 128;  // sizeof(CUtensorMap), gdl::chain::kTensorMapBytes; also its alignment here
// The chain's kernels: 1, or 2 with row groups (ChainKernel, codegen.h).
int64_t chain_kernel_count(const plan::Chain& c);
// The chain's kernel that serves a launch in `groups` row groups: 0, the
// kernel for one group (at most kChainMaxRows rows), or 1 for more.
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
//     multiple of kChainKMultiple in [kChainMinK, kChainMaxK], K the same in
//     every step of the run, the rows kernel serving the smallest bindings;
//   - its result has a's dtype.
// Each chain gets row_groups = chain_row_groups at the largest binding and
// its scratch_bytes; lay_out_scratch places it. Runs after plan_memory (a
// chain's b must be a param).
void find_matmul_chains(plan::Plan& p, const plan::PlanOptions& options);

}  // namespace gdl
