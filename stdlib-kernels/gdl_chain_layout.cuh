// The chain's compile-time constants and layout (gdl::MatmulChain,
// gdl_chain.cuh): its launch (threads, blocks, row groups), the columns a
// block owns, its dynamic shared memory and its exchange area in scratch.
//
// This header compiles both as CUDA (NVRTC, nvcc) and as plain host C++
// (g++ -std=c++20): no CUDA include, no device code, every function a
// constexpr one over plain ints, usable in constant expressions and at run
// time with run-time arguments. gdlc sizes the chain's launch, shared memory
// and scratch with these same functions (compiler/plan/chains.h), and the
// kernel's Layout<K, C> is defined from them, so the two cannot disagree.
#pragma once

#include "gdl_abi_types.cuh"

namespace gdl {
namespace chain {
constexpr int kThreads = 256, kWarps = kThreads / 32;  // the computing warps
// The producer's warp (its first thread issues the copies); the launch has
// kLaunchThreads threads.
constexpr int kProducerWarps = 1;
constexpr int kLaunchThreads = kThreads + 32 * kProducerWarps;
constexpr int kTensorMapBytes = GDL_TENSOR_MAP_BYTES;  // a step's weights' tensor map, in the chain's scratch
constexpr int kMaxRows = 8;      // the rows of a are mma's N
constexpr int kTileRows = 16;    // rows of b per warp per slot
constexpr int kSlotRows = kWarps * kTileRows;  // a chain's K is a multiple of it
constexpr int kSmemLimit = 227 * 1024;  // sm_90's largest shared memory per block
constexpr int kMaxSlots = 24;
constexpr int kBlocks = 128;     // at most one block per SM of an H100/H200 (132 SMs)
constexpr int kMaxGroups = 8;    // row groups of kMaxRows: up to 64 rows
constexpr int kGroupMaxK = 1024; // row groups only where measured (docs/performance.md)
// The exchange area of a chain's scratch: one launch counter per row group,
// each on a 128-byte line of its own, then per row group two mailboxes of
// kMaxRows rows of K / 2 words. The ungrouped kernel is row group 0: it
// shares group 0's counter and mailboxes with the grouped kernel (the two
// never run at once), so a flag never repeats in a mailbox. Chains without
// mailboxes (above kMailboxMaxK, one row group) have instead two sets
// (step parities) of row statistics: per row and block, the sum and the sum
// of squares of the block's columns of c, shifted by the row's first
// element of the step's a, which every block staged (a float2).
constexpr int kCounterBytes = kMaxGroups * 128;
// Mailboxes up to this K; above it, a grid barrier over the group's blocks
// and a read of the rows from c. At K = 4096 the mailbox words (twice the
// rows' bytes) were 2-16 us slower for W2 than the barrier, at K = 1024 1-3
// us faster (docs/performance.md); K = 2048 was not measured.
constexpr int kMailboxMaxK = 1024;
constexpr int kPartialStatsBytes = 2 * kMaxRows * kBlocks * 8;
// The exchange area of a chain over K whose kernel runs `groups` row groups
// (1 without row groups).
constexpr unsigned long long exchange_bytes(int k, int groups) {
  return kCounterBytes + (k <= kMailboxMaxK ? (unsigned long long)groups * 2 * kMaxRows * (k / 2) * 8 : kPartialStatsBytes);
}

// Output columns per block: the narrowest of 8, 16, 32 that needs at most
// kBlocks blocks. Narrower strips keep the small chains on all the SMs
// (K = 1024 with 32 columns ran on 32 of them, docs/performance.md).
constexpr int cols_for(int k) { return k <= 8 * kBlocks ? 8 : k <= 16 * kBlocks ? 16 : 32; }

// Output columns per block of a launch in `groups` row groups: the
// narrowest of 8 to 64 whose (K / C) x groups blocks are at most kBlocks.
constexpr int group_cols_for(int k, int groups) {
  int c = 8;
  while (c < 64 && (k / c) * groups > kBlocks) c *= 2;
  return c;
}

// Dynamic shared memory of a chain over K with C columns per block: the
// ring (aligned to 1024 bytes by hand, as the tensor copies' swizzle needs;
// dynamic shared memory is only 16-byte aligned), the normalized rows, the
// warps' column sums, the statistics, the slots' barriers. The functions
// take K and C at run time; Layout<K, C> below holds the same values as
// constants. (Functions rather than more namespace-scope constants: NVRTC's
// -default-device makes every such constant a variable of the module.)
constexpr int align_bytes() { return 1024; }  // the ring's alignment, and the most it skips
constexpr int slot_barrier_bytes() { return 2 * 8; }  // per slot: landed, read
// One warp's part of a slot: 16 rows of 2 C bytes (elements).
constexpr int tile_elems(int cols) { return kTileRows * cols; }
// A slot of the ring: every warp's tile.
constexpr int slot_bytes(int cols) { return kWarps * tile_elems(cols) * 2; }
// The rows of a as staged (xn): rows 16 bytes apart in the banks.
constexpr int xn_stride(int k) { return k + 8; }
constexpr int xn_bytes(int k) { return kMaxRows * xn_stride(k) * 2; }
constexpr int sums_bytes(int cols) { return kWarps * kMaxRows * cols * 4; }
// The group's rows of a in the block's columns, as read.
constexpr int raw_bytes(int cols) { return kMaxRows * cols * 2; }
// The warps' parts of the row statistics (sums, squares, shift), the
// block's flag for its producer warp (a group with rows), the rows'
// (mean, 1 / sqrt(var + eps)) for a norm applied as they are staged, the
// rows' first elements of a in the last two steps (the sums' shift), the
// warps' parts of the rows' sums of a folded step.
constexpr int misc_bytes() { return kWarps * 16 + 16 + kMaxRows * 8 + 2 * kMaxRows * 4 + kWarps * kMaxRows * 8; }
// Everything but the ring's slots.
constexpr int rest_bytes(int k, int cols) {
  return xn_bytes(k) + raw_bytes(cols) + sums_bytes(cols) + misc_bytes() + align_bytes();
}
// The slots that fit the shared memory, and the ring's slots (at most kMaxSlots).
constexpr int fitting_slots(int k, int cols) {
  return (kSmemLimit - rest_bytes(k, cols)) / (slot_bytes(cols) + slot_barrier_bytes());
}
constexpr int ring_slots(int k, int cols) {
  return fitting_slots(k, cols) < kMaxSlots ? fitting_slots(k, cols) : kMaxSlots;
}
// The launch's dynamic shared memory: Layout<K, C>::bytes.
constexpr int shared_bytes(int k, int cols) {
  return ring_slots(k, cols) * (slot_bytes(cols) + slot_barrier_bytes()) + rest_bytes(k, cols);
}
// Whether the kernel takes K with C columns per block (Layout's asserts).
constexpr bool layout_fits(int k, int cols) {
  return k % kSlotRows == 0 && k % cols == 0 && ring_slots(k, cols) >= 4;
}

// The same layout as compile-time constants, for the kernel.
template <int K, int C = cols_for(K)> struct Layout {
  static constexpr int cols = C;
  static constexpr int tile_elems = chain::tile_elems(cols);  // one warp's part of a slot: 16 rows of 2 C bytes
  static constexpr int slot_bytes = chain::slot_bytes(cols);
  static_assert(K % kSlotRows == 0 && K % cols == 0, "a chain's K is a multiple of 128");
  static constexpr int xn_stride = chain::xn_stride(K);  // rows 16 bytes apart in the banks
  static constexpr int xn_bytes = chain::xn_bytes(K);
  static constexpr int sums_bytes = chain::sums_bytes(cols);
  static constexpr int raw_bytes = chain::raw_bytes(cols);  // the group's rows of a in the block's columns, as read
  static constexpr int misc_bytes = chain::misc_bytes();
  static constexpr int align_bytes = chain::align_bytes();  // the ring's alignment, and the most it skips
  static constexpr int rest = rest_bytes(K, cols);
  static constexpr int slot_barrier_bytes = chain::slot_barrier_bytes();  // per slot: landed, read
  static constexpr int fit = fitting_slots(K, cols);
  static constexpr int slots = ring_slots(K, cols);
  static_assert(slots >= 4, "a chain's K leaves no room for its ring");
  static constexpr int bytes = shared_bytes(K, cols);
};
}  // namespace chain
}  // namespace gdl
