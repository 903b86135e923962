// Pieces shared by the memory-bound kernels (matmul, attention, the chain),
// one header each:
//
// 1. gdl_vec16.cuh: Vec16<T> / load16, 16 bytes of storage elements (8 f16
//    or bf16, 4 f32) as four 32-bit words, widened to float at use; one
//    16-byte load where the alignment and the shape allow, element by
//    element (zero-filled) otherwise.
// 2. gdl_split_tiles.cuh: SplitScratch / split_arrive, one output tile
//    computed in `splits` parts by different blocks of one launch, the last
//    block to take its ticket combining the parts.
// 3. gdl_cluster.cuh: thread-block clusters (sm_90), the block's rank, the
//    cluster barrier and loads from another block's shared memory, for a
//    split whose parts stay in shared memory (cluster split).
// 4. gdl_bulk.cuh: bulk copies and tensor copies (sm_90) into shared memory
//    and the mbarriers that count their bytes: the one set of wrappers of
//    the streamed attention and the chain.
// 5. gdl_mma16816.cuh: one m16n8k16 tensor-core tile (f16 or bf16 in, f32
//    accumulators), for the chain and the streamed attention.
#pragma once

#include "gdl_vec16.cuh"
#include "gdl_split_tiles.cuh"
#include "gdl_cluster.cuh"
#include "gdl_mma16816.cuh"
#include "gdl_bulk.cuh"
