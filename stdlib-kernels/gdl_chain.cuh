// A chain of square matmul steps in one persistent kernel (gdl::MatmulChain).
//
// Steps s = 0 .. S-1, each c_s = epi_s(pro_s(a_s) @ b_s) with a_{s+1} = c_s,
// every b_s a [K, K] param (f16 or bf16). Launched once, cooperatively, with
// a grid of (K / C) x G blocks of kLaunchThreads threads: block (j, g) owns the
// output columns [C j, C j + C) of rows [8 g, 8 g + 8) of every step, and
// all of K. The blocks of one row group hand each step's rows to the next
// step through a mailbox in global memory (below; at K above kMailboxMaxK,
// a grid barrier over the group's blocks, then a read of c, instead); the
// groups never read each other's rows.
//  - G = 1 (at most kMaxRows rows): C = cols_for(K), 8, 16 or 32, so that a
//    K of 1024, 2048 or 4096 runs 128 blocks.
//  - G > 1 (row groups, more rows at K = 1024): C = group_cols_for(K, G),
//    again 128 blocks; every group streams the same weights, the groups
//    after the first mostly from L2. A group without rows returns.
//
// Why one launch (bench/experiments/persistent_mlp.cu, docs/performance.md): a launch
// per step drains and refills the memory pipe at every step, and the next
// step's blocks cannot be resident while the current one's still are. Here
// each block streams its strip of every b_s (K rows of 2 C bytes) through
// one ring of slots in shared memory that runs across the step
// boundaries.
//
// The producer. A block has kWarps computing warps and one more warp whose
// first thread only issues the ring's copies, slot after slot of the whole
// launch: one tensor copy (cp.async.bulk.tensor, TMA) per slot, a box of
// kSlotRows rows of the block's C columns of b, through the tensor map the
// runtime wrote for the step (ChainKernel::tensor_maps_offset), swizzled
// as tile_at lays the tiles out. A slot has an mbarrier "landed" (the
// copy's bytes) and one "read" (every computing thread). So the weights
// keep streaming while the computing warps exchange rows between steps,
// until the ring is full. At most kInFlight copies are in flight: the
// exchange's loads and barrier go to L2 behind the copies, and a whole
// ring in flight made each step's exchange longer than the stream it
// saved (docs/performance.md: with contiguous copies, 4 slots in flight
// took W2 H=4096 B=1 from 99 to 87 us in a measurement build, 6 slots 90,
// 8 slots 94; with these tensor copies 4 slots 89.4-90.2 us, 3 slots
// 91.3-91.6, 6 slots 92.0-92.8, and at C = 64, 16 KiB slots, 3 slots 40.5
// us for H=1024 B=64 against 42.1 with 4).
// Before, four producer warps of per-lane 16-byte cp.async copies (93 us):
// the copies left the ring slowly enough to need no cap, and a cap made
// them slower (116 us).
//
// The mailbox. Every 8-byte word holds two elements of c and a 32-bit flag
// naming the launch and the step that wrote it, stored with one 64-bit
// store; an aligned 64-bit access is single-copy atomic, so a reader that
// sees the flag it expects holds the data written with it. A block reads
// the next step's rows as soon as they are there, polling only the words
// not yet written: one round trip through L2 where a grid barrier, then a
// read of the rows, took two or three (the barrier alone cost 1.3-1.4 us
// per step, docs/performance.md). Steps alternate between two mailboxes:
// a block writes step s + 2's rows only after it read all of step s + 1's,
// which every block wrote after it read step s's. The flag is the group's
// launch count (its counter, read in step 0, after the kernel's wait for
// the kernels before it, and advanced
// by the group's block 0 at the end, after every block of the group has
// read it) times the steps, plus the step plus one: never 0, what the
// scratch holds before the first launch. A stale word can match only after
// 2^32 steps' writes of its group, that is, never in practice.
//
// A step in a block:
//  1. the group's rows of a_s (step 0: from a; later: from the mailbox,
//     waiting for them, or from a after the barrier) into shared memory
//     (the block needs all of K), with the norm prologue's statistics (over
//     the whole row in step 0 and with mailboxes; after the barrier, from
//     the partial sums every block stored with its part of the rows), the
//     rows normalized (rounded to T, as the other matmul kernels do) or, for
//     a norm without weights or bias above kMailboxMaxK, as they are, the
//     norm then folded into the sums (MatmulChain::fold_of);
//  2. the strip, slot by slot: warp w takes 16 rows of each slot, the tensor
//     cores (mma.m16n8k16) compute out^T = b^T a^T with the C columns as
//     M (in 16-column halves; at C = 8 the upper half of M is zero) and the
//     rows of a as N (and, for a folded norm, the rows' sums and sums of
//     squares, and for layernorm the strip's column sums: the fold's
//     operands, from the rows the block staged);
//  3. the eight warps' sums added in shared memory, the epilogue, the store
//     (and, but in the last step, the rows into the mailbox, or without
//     mailboxes, where the next step's norm is not folded, each row's
//     partial sums for its statistics).
// The computing warps synchronize among themselves with a named barrier
// (computing_warps_sync); the producer warp leaves the kernel once its
// copies have landed.
//
// One header per job, included here in this order:
//  gdl_chain_layout.cuh      constants, columns per block, shared memory and
//                            exchange sizes (host C++ includes it too)
//  gdl_chain_primitives.cuh  swizzle, barriers of the computing warps, shared
//                            accesses, grid barrier, statistics, mailbox words
//  gdl_chain_kernel.cuh      MatmulChain: setup, step, producer, store, trace
//  gdl_chain_mma.cuh         step 2, the strip's mma
//  gdl_chain_rows.cuh        step 1, the rows of a staged
#pragma once

#include "gdl_matmul.cuh"
#include "gdl_chain_layout.cuh"
#include "gdl_chain_primitives.cuh"
#include "gdl_chain_kernel.cuh"
#include "gdl_chain_mma.cuh"
#include "gdl_chain_rows.cuh"
