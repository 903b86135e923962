// Batched matmul [..., M, K] @ [..., K, N] -> [..., M, N], batch dims
// broadcast (gdl::BatchMap). Four kernels; codegen (kernel_choice.cc) picks
// one from the shapes, or the rows kernel and a tiled one as two generated
// kernels that the runtime chooses between per run (codegen.h LargeKernel):
//
//  matmul_rows  (f32, f16, bf16; few rows, b shared by every batch entry so
//               the batch folds into M): memory-bound, streams b once.
//               A block owns a 128-byte column strip of b (64 f16 / 32 f32
//               columns: 8 threads x one 16-byte vector) and a range of K
//               (split s of `splits`); its 32 groups of 8 threads take rows
//               k, k + 32, ... of b, four 16-byte loads per thread per step
//               with the next step's loads in flight. The rows of a are
//               staged in shared memory as float (up to 8192 floats) and
//               every loaded vector of b updates all R rows of a pass
//               (R is 1, 8 or MR, a compile-time register tile; more rows
//               of a take another pass over the same strip, which hits
//               L1/L2). The 32 partial sums per column are added by warp
//               shuffles, then across the 8 warps in shared memory.
//  matmul_mma   (f16, bf16): tensor cores through nvcuda::wmma 16x16x16
//               with f32 accumulators. Tiles of 16, 32 or 64 rows x 128
//               (MmaTile), K in steps of 32, 8 warps; operands staged in
//               dynamic shared memory by cp.async, STAGES - 1 steps in
//               flight, zero-filled past every edge, so any M, N, K is
//               correct; results go through shared memory to the epilogue.
//  matmul_simt  (f32, full fp32 FMA, never TF32): tiles of 64 x 128, K in
//               steps of 16, each thread an 8 x 4 register tile fed by
//               16-byte shared loads; operands staged through registers
//               (two buffers, the next step's loads in flight), same edges.
//  matmul       (any dtype, i32 and bool included): the general tiled kernel
//               (a TM x TN tile per block, RM x RN per thread), kept for the
//               dtypes the others do not take.
//
// Every fast kernel loads 16 bytes at a time where the operand's address
// and row length allow (checked at run time) and element by element
// otherwise, and splits K across blocks when the output has too few tiles
// to fill the GPU (SplitScratch, gdl_split_tiles.cuh): each split writes a
// partial tile, the last to arrive adds them in split order (the result
// does not depend on block timing) and applies the epilogue. matmul_mma
// and matmul_rows may instead run a tile's (strip's) splits as one
// thread-block cluster (cluster split, gdl_matmul_tiles.cuh), the parts
// added from the blocks' shared memory.
//
// Every kernel reads a and b through operand_index (gdl_matmul_common.cuh):
// as stored with a row pitch (lda, ldb: a column window of a wider b), or
// transposed (TA, TB template arguments), so a transpose or a column slice
// around a matmul is never copied (compiler/ops/matmul.h). matmul_rows
// reads a transposed b along its stored rows (rows_pass_nt).
//
// Only the first k_valid positions of K are summed (k_valid <= K; K is the
// row length of a and the row count of b). Floats accumulate in float.
// The epilogue `epi(float acc, I index)` gets each output element's sum and
// its flat index in the result and returns the value that is stored,
// converted to the output's dtype (IdentityEpilogue<T>: the sum rounded to
// the matmul's dtype). The fast kernels need blockDim.x == 256 and a shared
// buffer of kMatmul*Smem bytes aligned to 128.
//
// One header per piece, included here in this order:
//  gdl_matmul_common.cuh    the epilogue functor, constants, tilings, tasks
//  gdl_matmul_prologue.cuh  the norm prologue and the tiled kernels' fold
//  gdl_matmul_prefetch.cuh  weights into L2 before the wait, early launch
//  gdl_matmul_rows.cuh      matmul_rows
//  gdl_matmul_tiles.cuh     the tiled kernels' tile store, split and cluster combine
//  gdl_matmul_mma.cuh       matmul_mma
//  gdl_matmul_simt.cuh      matmul_simt
//  gdl_matmul_general.cuh   matmul (the general kernel)
#pragma once

#include <mma.h>

#include "gdl_index.cuh"
#include "gdl_split.cuh"
#include "gdl_types.cuh"
#include "gdl_matmul_common.cuh"
#include "gdl_matmul_prologue.cuh"
#include "gdl_matmul_prefetch.cuh"
#include "gdl_matmul_rows.cuh"
#include "gdl_matmul_tiles.cuh"
#include "gdl_matmul_mma.cuh"
#include "gdl_matmul_simt.cuh"
#include "gdl_matmul_general.cuh"
