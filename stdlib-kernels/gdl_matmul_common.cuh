// The matmul kernels' shared pieces (gdl_matmul.cuh): the default epilogue
// functor (IdentityEpilogue) and store_result, the kernels' tilings and
// constants (namespace mm), the shared memory each fast kernel needs
// (kMatmul*Smem), the rows kernel's strip (RowsTile), and the first task of
// a block in a split launch (split_task_first). The batch dims' offsets
// come from gdl::BatchMap (gdl_index.cuh).
#pragma once

#include "gdl_index.cuh"
#include "gdl_split.cuh"
#include "gdl_types.cuh"

namespace gdl {

template <typename T> struct IdentityEpilogue {
  // A chain step's epilogue also takes a's element at the index (gdl_chain.cuh).
  template <typename X, typename I>
  GDL_DEV typename dtype_traits<T>::compute operator()(X acc, I, float /*a_staged*/ = 0.0f) const {
    return fit<T>(acc);
  }
};

// Where a matmul operand's logical element (r, c) lies: a's (m, k), b's
// (k, n). A plain operand is stored row-major with `ld` elements from one
// row to the next (its row length, or more for a column window of a wider
// matrix); a Transposed one is stored [cols, rows], `ld` elements per
// stored row. Folding `transpose(w)` or `qkv[..., a:b]` into the matmul
// this way reads the operand where it lies instead of copying it first.
template <bool Transposed, typename I> GDL_DEV I operand_index(I r, I c, I ld) {
  return Transposed ? c * ld + r : r * ld + c;
}

template <typename TC, typename I, typename Epi> GDL_DEV void store_result(TC* c, I index, float acc, const Epi& epi) {
  c[index] = cvt<TC>(epi(acc, index));
}

// The epilogue of a matmul whose product cuBLASLt computed in front of
// this kernel (core/kernel_table.h LibraryMatmul): the product, rounded to
// the matmul's dtype and laid out as the result, through the step's
// epilogue into c.
template <typename I, typename T, typename TC, typename Epi>
GDL_DEV void matmul_library_epilogue(const T* product, TC* c, I count, const Epi& epi) {
  const I threads = (I)blockDim.x, stride = task_stride<I>() * threads;
  for (I i = task_first<I>() * threads + (I)threadIdx.x; i < count; i += stride)
    c[i] = cvt<TC>(epi(num(__ldcs(product + i)), i));  // read once: not kept in L2
}

namespace mm {
constexpr int kThreads = 256;
constexpr int kWarps = kThreads / 32;
// matmul_rows
constexpr int kRowLanes = 8;                      // threads over one 128-byte strip of a row of b
constexpr int kKGroups = kThreads / kRowLanes;    // rows of b per load step
constexpr int kUnroll = 4;                        // 16-byte loads per thread per step
constexpr int kStageFloats = 8192;                // staged rows of a, then the cross-warp sums
// matmul_mma: tiles of BM x 128 (BM = 16, 32 or 64, MmaTile), K in steps of 32
constexpr int kMmaBN = 128, kMmaBK = 32;
constexpr int kMmaLdC = kMmaBN + 4;  // padded against bank conflicts
// matmul_simt
constexpr int kSimtBM = 64, kSimtBN = 128, kSimtBK = 16;
constexpr int kSimtLdA = kSimtBM + 4;  // a is stored transposed: [k][m]
constexpr int kSimtTM = 8, kSimtTN = 4;

template <int A, int B> struct min_int { static constexpr int value = A < B ? A : B; };
template <int V> struct Int { static constexpr int value = V; };  // a compile-time int passed as an argument
template <bool C, typename A, typename B> struct Pick { using type = A; };  // A when C, else B
template <typename A, typename B> struct Pick<false, A, B> { using type = B; };
}  // namespace mm

constexpr int kMatmulRowsSmem = mm::kStageFloats * 4;
constexpr int kMatmulSimtSmem = (2 * mm::kSimtBK * mm::kSimtLdA + 2 * mm::kSimtBK * mm::kSimtBN) * 4;

// matmul_mma's tile of BM rows: its warps (WM x WN, each FI x FJ wmma
// tiles of 16 x 16) and its stage buffers (padded against bank conflicts;
// a's buffer holds either layout, plain [BM][BK + 8] or transposed
// [BK][BM + 8]), so that few rows do not pay for 64. The dynamic shared
// memory of a launch with S stages is bytes(S, TB) (kernel_choice.cc
// picks S from the multiprocessor's shared memory).
template <int BM> struct MmaTile {
  static_assert(BM == 16 || BM == 32 || BM == 64, "tile rows");
  static constexpr int BN = mm::kMmaBN, BK = mm::kMmaBK;
  static constexpr int WM = BM == 16 ? 1 : 2, WN = mm::kWarps / WM;  // warps along M and N
  static constexpr int FI = BM / WM / 16, FJ = BN / WN / 16;          // 16 x 16 tiles per warp
  static constexpr int kStageA = BM * (BK + 8) > BK * (BM + 8) ? BM * (BK + 8) : BK * (BM + 8);
  static constexpr int stage_b(bool tb) { return tb ? BN * (BK + 8) : BK * (BN + 8); }
  static constexpr int bytes(int stages, bool tb) {
    const int operands = stages * (kStageA + stage_b(tb)) * 2, result = BM * mm::kMmaLdC * 4;
    return operands > result ? operands : result;
  }
};

template <typename T> struct RowsTile {
  static constexpr int V = Vec16<T>::n;            // columns per thread
  static constexpr int BN = mm::kRowLanes * V;     // columns per block: 64 (f16, bf16), 32 (f32)
};

// ------------------------------------------------------------ tasks
// The first task of this block among `tiles` output tiles (or strips)
// split K ways, numbered part * tiles + tile as the kernels take them. In
// clusters of ClusterSplits blocks along y (cluster split,
// gdl_matmul_tiles.cuh) the block takes part `rank` of its cluster's tile,
// one task per block; otherwise task_first (gdl_index.cuh).
template <int ClusterSplits, typename I> GDL_DEV I split_task_first(I tiles) {
  if constexpr (ClusterSplits > 1)
    return (I)cluster_rank() * tiles + (I)blockIdx.x + (I)gridDim.x * ((I)blockIdx.y / ClusterSplits);
  else
    return task_first<I>();
}

}  // namespace gdl
