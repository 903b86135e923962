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
//               with f32 accumulators. Tiles of 64 x 128, K in steps of 32,
//               8 warps of 32 x 32; operands staged in shared memory by
//               cp.async, kMmaStages steps in flight, zero-filled past every
//               edge, so any M, N, K is correct; results go through shared
//               memory to the epilogue.
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
// to fill the GPU (SplitScratch, gdl_split.cuh): each split writes a
// partial tile, the last to arrive adds them in split order (the result
// does not depend on block timing) and applies the epilogue. matmul_mma
// and matmul_rows may instead run a tile's (strip's) splits as one
// thread-block cluster (cluster split, below), the parts added from the
// blocks' shared memory.
//
// Only the first k_valid positions of K are summed (k_valid <= K; K is the
// row length of a and the row count of b). Floats accumulate in float.
// The epilogue `epi(float acc, I index)` gets each output element's sum and
// its flat index in the result and returns the value that is stored,
// converted to the output's dtype (IdentityEpilogue<T>: the sum rounded to
// the matmul's dtype). The fast kernels need blockDim.x == 256 and a shared
// buffer of kMatmul*Smem bytes aligned to 128.
#pragma once

#include <mma.h>

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

template <typename TC, typename I, typename Epi> GDL_DEV void store_result(TC* c, I index, float acc, const Epi& epi) {
  c[index] = cvt<TC>(epi(acc, index));
}

namespace mm {
constexpr int kThreads = 256;
constexpr int kWarps = kThreads / 32;
// matmul_rows
constexpr int kRowLanes = 8;                      // threads over one 128-byte strip of a row of b
constexpr int kKGroups = kThreads / kRowLanes;    // rows of b per load step
constexpr int kUnroll = 4;                        // 16-byte loads per thread per step
constexpr int kStageFloats = 8192;                // staged rows of a, then the cross-warp sums
// matmul_mma
constexpr int kMmaBM = 64, kMmaBN = 128, kMmaBK = 32;
constexpr int kMmaLdA = kMmaBK + 8, kMmaLdB = kMmaBN + 8, kMmaLdC = kMmaBN + 4;  // padded against bank conflicts
constexpr int kMmaStageA = kMmaBM * kMmaLdA, kMmaStageB = kMmaBK * kMmaLdB;       // elements per buffer
// Operand stages in flight: copies for steps k + 1 .. k + kMmaStages - 1
// land while the tensor cores work on step k. Three fit the static shared
// memory limit (48 KiB) with the fold's tile.
constexpr int kMmaStages = 3;
constexpr int kMmaOperandBytes = kMmaStages * (kMmaStageA + kMmaStageB) * 2;
constexpr int kMmaResultBytes = kMmaBM * kMmaLdC * 4;
// matmul_simt
constexpr int kSimtBM = 64, kSimtBN = 128, kSimtBK = 16;
constexpr int kSimtLdA = kSimtBM + 4;  // a is stored transposed: [k][m]
constexpr int kSimtTM = 8, kSimtTN = 4;

template <int A, int B> struct min_int { static constexpr int value = A < B ? A : B; };
}  // namespace mm

constexpr int kMatmulRowsSmem = mm::kStageFloats * 4;
constexpr int kMatmulMmaSmem = mm::kMmaOperandBytes > mm::kMmaResultBytes ? mm::kMmaOperandBytes : mm::kMmaResultBytes;
constexpr int kMatmulSimtSmem = (2 * mm::kSimtBK * mm::kSimtLdA + 2 * mm::kSimtBK * mm::kSimtBN) * 4;

template <typename T> struct RowsTile {
  static constexpr int V = Vec16<T>::n;            // columns per thread
  static constexpr int BN = mm::kRowLanes * V;     // columns per block: 64 (f16, bf16), 32 (f32)
};

// ------------------------------------------------------------ norm prologue
// A layernorm or rmsnorm whose only use is this matmul's a (fuse.cc) runs
// inside the matmul, which reads the norm's input x as its a; the
// normalized rows never go through memory and the norm's node is gone.
//  - matmul_rows: each block computes the statistics of the rows it takes
//    (norm_row_stats) and normalizes every element of a as it stages it,
//    rounded to a's dtype like the norm's own kernel's output (with
//    statistics that may differ from that kernel's in the last bits).
//  - matmul_mma / matmul_simt (the fold): the tensor cores or FMAs run on
//    x * w (w the norm's weight), and with mean and inv the row statistics,
//    w and beta the norm's weight and bias,
//      sum_k ((x_k - mean) * inv * w_k + beta_k) * b_kn
//        = inv * (sum_k x_k w_k b_kn - mean * sum_k w_k b_kn) + sum_k beta_k b_kn,
//    so each block also sums w_k b_kn and beta_k b_kn down its columns of
//    b while they are staged, and the statistics are needed only when the
//    parts are added: each of the S blocks of a tile computes them for
//    1 / S of the tile's rows. Every row of x is then read for its
//    statistics once per launch and tile column, not once per block. The
//    normalized a is not rounded to a's dtype on this path.
struct NoPrologue {
  static constexpr bool active = false, center = false, weighted = false, biased = false;
  template <typename I> GDL_DEV float apply(float x, I, const float2*, int) const { return x; }
};

template <typename S> struct is_one_source { static constexpr bool value = false; };
template <> struct is_one_source<One> { static constexpr bool value = true; };
template <typename S> struct is_zero_source { static constexpr bool value = false; };
template <> struct is_zero_source<Zero> { static constexpr bool value = true; };

// Center: layernorm ((x - mean) * inv * w + b); otherwise rmsnorm (x * inv * w).
template <typename T, bool Center, typename W, typename B> struct NormPrologue {
  static constexpr bool active = true;
  static constexpr bool center = Center;
  static constexpr bool weighted = !is_one_source<W>::value;
  static constexpr bool biased = !is_zero_source<B>::value;
  W w;
  B b;
  float eps;
  // matmul_rows: x at position k of the row whose (mean, inv) is st[r].
  template <typename I> GDL_DEV float apply(float x, I k, const float2* st, int r) const {
    return num(cvt<T>(normalized(x, k, st, r)));
  }
  // apply before its rounding to T, for a caller that rounds two at once
  // (Vec16<T>::pack, gdl_chain.cuh).
  template <typename I> GDL_DEV float normalized(float x, I k, const float2* st, int r) const {
    const float2 s = st[r];
    return Center ? layernorm_value(x, s.x, s.y, w, b, k) : rmsnorm_value(x, s.y, w, k);
  }
  // The fold: a staged as x * w, then the sum of a part acc, with the
  // column sums cs of w_k b_kn and bs of beta_k b_kn, into the matmul's sum.
  template <typename I> GDL_DEV float scale(float x, I k) const { return weighted ? x * w.at(k) : x; }
  GDL_DEV float fold(float acc, float2 st, float cs, float bs) const {
    return st.y * (Center ? acc - st.x * cs : acc) + (biased ? bs : 0.0f);
  }
};

template <typename T, typename W, typename B>
GDL_DEV NormPrologue<T, true, W, B> layernorm_prologue(W w, B b, float eps) { return {w, b, eps}; }
template <typename T, typename W> GDL_DEV NormPrologue<T, false, W, Zero> rmsnorm_prologue(W w, float eps) {
  return {w, Zero{}, eps};
}

GDL_DEV float warp_sum(float v) {
#pragma unroll
  for (int offset = 16; offset > 0; offset >>= 1) v += __shfl_xor_sync(0xffffffffu, v, offset);
  return v;
}

// (mean, inv) of rows [m0, m0 + count) of a [M, K] over their first
// k_valid positions into st[0, count); rows >= M get (0, 1). Called by every
// thread of the block; st may be read once it returns. A warp per row, each
// lane with up to kStatsVectors 16-byte loads in flight, and one pass: the
// sums of d and d * d with d = x - x_0 (the row's first element), so that
// var = (sum d^2 - (sum d)^2 / n) / n does not cancel when the mean is far
// from zero. The norm kernels take two passes; the statistics may differ
// from theirs in the last bits. Measured on the H200 (docs/performance.md):
// spreading one row over the whole block (barriers between the passes) was
// slower, and a fully unrolled version slower still (warps stalled on
// instruction fetch), so the code stays small.
constexpr int kStatsVectors = 4;

template <typename T, typename I, typename Pro>
GDL_DEV void norm_row_stats(const Pro& pro, const T* a, I M, I K, I k_valid, I m0, int count, float2* st) {
  if constexpr (Pro::active) {
    constexpr int V = Vec16<T>::n, U = kStatsVectors;
    const int lane = threadIdx.x & 31, warp = threadIdx.x >> 5;
    // Positions [0, k_vec) are read as whole aligned vectors, the rest one by one.
    const I k_vec = K % V == 0 && aligned16(a) ? k_valid / V * V : (I)0;
    constexpr int kStride = 32 * V;  // positions between one lane's vectors
    __syncthreads();  // the previous readers of st are done
    for (int r = warp; r < count; r += mm::kWarps) {
      const bool valid = m0 + (I)r < M && k_valid > 0;
      const T* row = a + (valid ? m0 + (I)r : (I)0) * K;
      const float shift = Pro::center && valid ? (float)num(row[0]) : 0.0f;
      float sum = 0.0f, squares = 0.0f;
      const auto add = [&](float x) {
        const float d = x - shift;
        sum += d;
        squares = fmaf(d, d, squares);
      };
      for (I c = (I)lane * V; valid && c < k_vec; c += (I)(kStride * U)) {
        uint4 raw[U];
#pragma unroll
        for (int u = 0; u < U; ++u)
          raw[u] = c + (I)(u * kStride) < k_vec ? __ldg(reinterpret_cast<const uint4*>(row + c + (I)(u * kStride)))
                                                : zero16();
#pragma unroll
        for (int u = 0; u < U; ++u)
          if (c + (I)(u * kStride) < k_vec) {
            float x[V];
            widen<T>(raw[u], x);
#pragma unroll
            for (int j = 0; j < V; ++j) add(x[j]);
          }
      }
      for (I j = k_vec + (I)lane; valid && j < k_valid; j += 32) add((float)num(row[j]));
      sum = warp_sum(sum);
      squares = warp_sum(squares);
      const float n = (float)k_valid;
      const float mean_d = Pro::center ? sum / n : 0.0f;  // mean - shift
      const float var = fmaxf(squares / n - mean_d * mean_d, 0.0f);
      if (lane == 0) st[r] = valid ? make_float2(shift + mean_d, 1.0f / sqrtf(var + pro.eps)) : make_float2(0.0f, 1.0f);
    }
    __syncthreads();
  }
}

// ------------------------------------------------------------ the fold
// A staged 16-byte vector of a at positions k, k + 1, ... scaled by the
// norm's weight (positions past k_end stay zero, the tiles' edges).
template <typename T, typename I, typename Pro> GDL_DEV uint4 scale16(const Pro& pro, uint4 raw, I k, I k_end) {
  if constexpr (!Pro::active || !Pro::weighted) {
    return raw;
  } else {
    constexpr int V = Vec16<T>::n, per_word = V / 4;
    float x[V];
    widen<T>(raw, x);
    unsigned w[4] = {0u, 0u, 0u, 0u};
    if constexpr (per_word == 2) {  // f16, bf16: two elements per conversion (Vec16::pack), zero past k_end
#pragma unroll
      for (int j = 0; j < V; j += 2)
        w[j / 2] = Vec16<T>::pack(k + (I)j < k_end ? pro.scale(x[j], k + (I)j) : 0.0f,
                                  k + (I)(j + 1) < k_end ? pro.scale(x[j + 1], k + (I)(j + 1)) : 0.0f);
    } else {
#pragma unroll
      for (int j = 0; j < V; ++j)
        if (k + (I)j < k_end) w[j] = Vec16<T>::bits(cvt<T>(pro.scale(x[j], k + (I)j)));
    }
    return make_uint4(w[0], w[1], w[2], w[3]);
  }
}

// The fold's column sums over one staged step of b (its rows r hold
// positions k0 + r, zero from k_hi on): 256 threads, two per column of the
// 128, each over half of the BK rows.
template <int BK, typename Pro, typename TB, typename I>
GDL_DEV void fold_column_step(const Pro& pro, const TB* bt, int ldb, I k0, I k_hi, float& cs, float& bs) {
  if constexpr (Pro::active && (Pro::center || Pro::biased)) {
    constexpr int R = BK / 2;
    const int c = threadIdx.x % mm::kMmaBN, r0 = (int)(threadIdx.x / mm::kMmaBN) * R;
#pragma unroll
    for (int i = 0; i < R; ++i) {
      const I k = k0 + (I)(r0 + i);
      if (k < k_hi) {
        const float x = (float)num(bt[(r0 + i) * ldb + c]);
        if (Pro::center) cs += Pro::weighted ? pro.w.at(k) * x : x;
        if (Pro::biased) bs += pro.b.at(k) * x;
      }
    }
  }
}

// The fold's shared memory in a tiled kernel: a tile's row statistics and
// its column sums (cs for columns [0, BN), bs for [BN, 2 BN)).
template <int BM, int BN> struct FoldTile {
  float2 st[BM];
  float cols[2 * BN];
  float halves[2 * 2 * BN];
};

// Scratch of the fold after the S parts of `tiles` BM x BN tiles: each
// part's column sums, then each tile's row statistics.
template <int BM, int BN, typename I> GDL_DEV float* fold_columns(const SplitScratch& sk, I s, I tiles, I tile) {
  return sk.partials + (I)sk.splits * tiles * (I)(BM * BN) + (s * tiles + tile) * (I)(2 * BN);
}
template <int BM, int BN, typename I> GDL_DEV float2* fold_stats(const SplitScratch& sk, I tiles, I tile) {
  return reinterpret_cast<float2*>(sk.partials + (I)sk.splits * tiles * (I)(BM * BN + 2 * BN)) + tile * (I)BM;
}

// At a task's start in a tiled kernel: the statistics of this part's share
// of the tile's rows, into scratch (split) or of all of them into f.st.
template <int BM, int BN, typename T, typename I, typename Pro>
GDL_DEV void fold_stats_share(const Pro& pro, const T* ab, I M, I K, I k_valid, I m0, I s, I tiles, I tile,
                              const SplitScratch& sk, FoldTile<BM, BN>& f) {
  if constexpr (Pro::active) {
    if (sk.splits == 1) {
      norm_row_stats<T>(pro, ab, M, K, k_valid, m0, BM, f.st);
      return;
    }
    const int share = (BM + sk.splits - 1) / sk.splits, r0 = (int)s * share;
    const int count = BM - r0 < share ? (BM - r0 > 0 ? BM - r0 : 0) : share;
    norm_row_stats<T>(pro, ab, M, K, k_valid, m0 + (I)r0, count, f.st);
    float2* out = fold_stats<BM, BN>(sk, tiles, tile);
    if ((int)threadIdx.x < count) __stcg(out + r0 + (int)threadIdx.x, f.st[threadIdx.x]);
  }
}

// At a task's end: this block's column sums (two threads per column) into
// f.cols, and for a split tile into its part's scratch.
template <int BM, int BN, typename I, typename Pro>
GDL_DEV void fold_columns_done(const Pro&, float cs, float bs, I s, I tiles, I tile, const SplitScratch& sk,
                               FoldTile<BM, BN>& f) {
  if constexpr (Pro::active) {
    const int c = threadIdx.x % BN, half = threadIdx.x / BN;
    __syncthreads();  // the previous readers of f are done
    f.halves[half * 2 * BN + c] = cs;
    f.halves[half * 2 * BN + BN + c] = bs;
    __syncthreads();
    for (int i = threadIdx.x; i < 2 * BN; i += mm::kThreads) {
      f.cols[i] = f.halves[i] + f.halves[2 * BN + i];
      if (sk.splits > 1) __stcg(fold_columns<BM, BN>(sk, s, tiles, tile) + i, f.cols[i]);
    }
    __syncthreads();
  }
}

// ------------------------------------------------------------ tasks
// The first task of this block among `tiles` output tiles (or strips)
// split K ways, numbered part * tiles + tile as the kernels take them. In
// clusters of ClusterSplits blocks along y (cluster split, below) the
// block takes part `rank` of its cluster's tile, one task per block;
// otherwise task_first (gdl_index.cuh).
template <int ClusterSplits, typename I> GDL_DEV I split_task_first(I tiles) {
  if constexpr (ClusterSplits > 1)
    return (I)cluster_rank() * tiles + (I)blockIdx.x + (I)gridDim.x * ((I)blockIdx.y / ClusterSplits);
  else
    return task_first<I>();
}

// ------------------------------------------------------------ prefetch
// Before wait_for_producers (gdl_abi.cuh) a matmul whose b is a param pulls
// the start of the part of b that its block's first task reads into L2,
// while the kernels before it still run: rows [k_lo, k_hi) x columns
// [n0, n0 + cols) of b [K, N], at most kPrefetchBytes of them. The split of
// K mirrors the kernels' own (K in place of k_valid, so it may fetch a
// little more); only a hint, never a fault.
// The cap: at H=4096 a whole part is 128 KiB, so a launch prefetched the
// whole 32 MiB matrix while its blocks started loading it themselves. W2 on
// the H200, whole parts against the cap, same call, graph replay: f16
// H=4096 B=1 141 -> 136 us, B=64 322 -> 293; bf16 B=64 360 -> 339; f32
// H=4096 B=1 221 -> 196, B=64 671 -> 620; H=1024 (parts of 16-64 KiB)
// within 1%. No prefetch at all: H=1024 f16 B=1 41.3 -> 46.0 us.
constexpr int kPrefetchBytes = 16 * 1024;
template <typename T, typename I> GDL_DEV void prefetch_b_part(const T* b, I N, I k_lo, I k_hi, I n0, int cols) {
  constexpr int per_line = 128 / (int)sizeof(T);
  const int lines = (cols + per_line - 1) / per_line;
  const I most = (I)(kPrefetchBytes / (lines * 128));  // rows of the part within the cap
  if (k_hi > k_lo + most) k_hi = k_lo + most;
  const I total = k_hi > k_lo ? (k_hi - k_lo) * (I)lines : (I)0;
  for (I i = threadIdx.x; i < total; i += blockDim.x) {
    const I k = k_lo + i / lines, n = n0 + (I)(i % lines) * per_line;
    if (n < N) prefetch_l2(b + k * N + n);
  }
}

// After its wait, a matmul with prefetched weights lets the kernels after
// it launch at once (allow_dependents) only when its own work is short,
// under kEarlyLaunchMacs multiply-adds at this run's rows; a longer one
// lets them launch as its blocks exit. Measured on the H200 (W2, graph
// replay, every kernel triggering early against none): the early launch
// hid latency in the short layers (f16 H=1024 B=1 41.5 against 44.7 us,
// f32 H=1024 B=1 58.2 against 73.7, f32 H=4096 B=1 196 against 213; 1 to
// 17 M multiply-adds per matmul) and cost time in the long ones (f16
// H=4096 B=8 233 against 214, B=64 294 against 262, H=1024 B=64 84.6
// against 79.3; 67 M and more). Why the dependents' early blocks slow a
// long kernel is not established (docs/performance.md).
constexpr long long kEarlyLaunchMacs = 32ll << 20;
template <typename I> GDL_DEV void matmul_allow_dependents(I rows, I N, I K) {
  if ((long long)rows * (long long)N * (long long)K < kEarlyLaunchMacs) allow_dependents();
}

// The first task of this block in matmul_rows (below; ClusterSplits as there).
template <int ClusterSplits = 0, typename T, typename I>
GDL_DEV void matmul_rows_prefetch(const T* b, I N, I K, int splits) {
  constexpr int BN = RowsTile<T>::BN;
  const I tiles = ceil_div(N, (I)BN);
  const I task = split_task_first<ClusterSplits>(tiles);
  if (task >= tiles * (I)splits) return;
  const I chunk = ceil_div(ceil_div(K, (I)splits), (I)mm::kKGroups) * mm::kKGroups;
  const I k_lo = (task / tiles) * chunk, k_hi = K < k_lo + chunk ? K : k_lo + chunk;
  prefetch_b_part(b, N, k_lo, k_hi, (task % tiles) * BN, BN);
}

// The first task of this block in matmul_mma (BK = mm::kMmaBK) or
// matmul_simt (BK = mm::kSimtBK) with b shared by every row (one batch);
// ClusterSplits as in matmul_mma.
template <int BK, int ClusterSplits = 0, typename T, typename I>
GDL_DEV void matmul_tiles_prefetch(const T* b, I M, I N, I K, int splits) {
  constexpr int BM = mm::kMmaBM, BN = mm::kMmaBN;
  static_assert(BM == mm::kSimtBM && BN == mm::kSimtBN, "one tiling for both tiled kernels");
  const I mt = ceil_div(M, (I)BM), tiles = mt * ceil_div(N, (I)BN);
  const I task = split_task_first<ClusterSplits>(tiles);
  if (task >= tiles * (I)splits) return;
  const I chunk = ceil_div(ceil_div(K, (I)splits), (I)BK) * BK;
  const I k_lo = (task / tiles) * chunk, k_hi = K < k_lo + chunk ? K : k_lo + chunk;
  prefetch_b_part(b, N, k_lo, k_hi, ((task % tiles) / mt) * BN, BN);
}

// ------------------------------------------------------------ matmul_rows

// One pass of matmul_rows: rows [m0, m0 + R) of a (those < M) against the
// strip [n0, n0 + BN) of b over K range [k_lo, k_hi); sink(m, n, sum) gets
// each sum of the strip (m < M; n may be >= N). With a norm prologue, st[r]
// holds the statistics of row m0 + r.
template <int R, typename T, typename I, typename Pro, typename Sink>
GDL_DEV void rows_pass(const T* a, const T* b, I M, I N, I K, I m0, I n0, I k_lo, I k_hi, bool vec, float* smem,
                       const Pro& pro, const float2* st, const Sink& sink) {
  constexpr int V = RowsTile<T>::V, BN = RowsTile<T>::BN, KG = mm::kKGroups, U = mm::kUnroll;
  constexpr int KCAP = mm::kStageFloats / R;  // rows of a staged at once
  static_assert(mm::kWarps * R * BN <= mm::kStageFloats, "the cross-warp sums must fit the stage");
  const int tid = threadIdx.x, lane = tid & 31, warp = tid >> 5;
  const int kg = tid / mm::kRowLanes, ln = tid % mm::kRowLanes;
  const I n = n0 + (I)(ln * V);
  const int n_valid = vec_valid<V>(n, N);

  float acc[R][V];
#pragma unroll
  for (int r = 0; r < R; ++r)
#pragma unroll
    for (int j = 0; j < V; ++j) acc[r][j] = 0.0f;

  for (I kc = k_lo; kc < k_hi; kc += (I)KCAP) {
    const I len = k_hi - kc < (I)KCAP ? k_hi - kc : (I)KCAP;
    const I groups = ceil_div(len, (I)(KG * U));
    const T* bp = b + kc * N + n;
    uint4 cur[U], nxt[U];
#pragma unroll
    for (int u = 0; u < U; ++u) {  // in flight while a is staged
      const I kk = (I)(u * KG + kg);
      cur[u] = kk < len ? load16(bp + kk * N, n_valid, vec) : zero16();
      nxt[u] = zero16();
    }
    __syncthreads();  // the previous readers of smem are done
    for (I e = tid; e < (I)R * len; e += mm::kThreads) {
      const I r = e / len, kk = e - r * len, m = m0 + r;
      smem[kk * R + r] = m < M ? pro.apply((float)num(a[m * K + kc + kk]), kc + kk, st, (int)r) : 0.0f;
    }
    __syncthreads();
    for (I g = 0; g < groups; ++g) {
      if (g + 1 < groups) {
#pragma unroll
        for (int u = 0; u < U; ++u) {
          const I kk = ((g + 1) * U + u) * KG + kg;
          nxt[u] = kk < len ? load16(bp + kk * N, n_valid, vec) : zero16();
        }
      }
#pragma unroll
      for (int u = 0; u < U; ++u) {
        const I kk = (g * U + u) * KG + kg;
        if (kk < len) {
          float w[V];
          widen<T>(cur[u], w);
          const float* x = smem + kk * R;
#pragma unroll
          for (int r = 0; r < R; ++r) {
            const float xr = x[r];
#pragma unroll
            for (int j = 0; j < V; ++j) acc[r][j] = fmaf(xr, w[j], acc[r][j]);
          }
        }
        cur[u] = nxt[u];
      }
    }
  }

  // The four row groups of a warp (lanes ln, ln + 8, ln + 16, ln + 24), then the warps.
#pragma unroll
  for (int r = 0; r < R; ++r)
#pragma unroll
    for (int j = 0; j < V; ++j) {
      float s = acc[r][j];
      s += __shfl_xor_sync(0xffffffffu, s, 8);
      s += __shfl_xor_sync(0xffffffffu, s, 16);
      acc[r][j] = s;
    }
  __syncthreads();  // smem: staged a -> per-warp sums
  if (lane < mm::kRowLanes) {
#pragma unroll
    for (int r = 0; r < R; ++r)
#pragma unroll
      for (int j = 0; j < V; ++j) smem[(warp * R + r) * BN + ln * V + j] = acc[r][j];
  }
  __syncthreads();
  for (int e = tid; e < R * BN; e += mm::kThreads) {
    float s = 0.0f;
#pragma unroll
    for (int w = 0; w < mm::kWarps; ++w) s += smem[w * R * BN + e];
    const int r = e / BN, col = e % BN;
    if (m0 + r < M) sink(m0 + (I)r, n0 + (I)col, s);
  }
}

// a [M, K] (any batch folded into M), b [K, N] shared, c [M, N].
// ClusterSplits > 1: launched in clusters of that many blocks along y
// (sk.splits the same, M at most kRowsClusterRows), which split one strip's
// K among them; the parts stay in shared memory (cluster split, above
// matmul_mma) and each block adds and stores its share of the strip.
constexpr int kRowsClusterRows = 16;  // kernel_choice.h kMatmulRowsLimit
template <int MR, int ClusterSplits = 0, typename T, typename I, typename TC, typename Epi, typename Pro>
GDL_DEV void matmul_rows(const T* a, const T* b, TC* c, I M, I N, I K, I k_valid, SplitScratch sk, const Epi& epi,
                         const Pro& pro, unsigned char* smem_bytes) {
  static_assert(MR == 1 || MR == 2 || MR == 4 || MR == 8 || MR == 16, "row tile");
  constexpr int V = RowsTile<T>::V, BN = RowsTile<T>::BN;
  constexpr bool cluster = ClusterSplits > 1;
  if (blockDim.x != mm::kThreads) __trap();  // a launch that breaks the LaunchRule
  float* smem = reinterpret_cast<float*>(smem_bytes);
  __shared__ float2 st[Pro::active ? MR : 1];  // norm prologue: the statistics of the pass's rows
  __shared__ __align__(16) float cluster_part[cluster ? kRowsClusterRows * BN : 1];  // this block's part of the strip
  const bool vec = N % V == 0 && aligned16(b);
  const int S = sk.splits;
  const I tiles = ceil_div(N, (I)BN);
  const I chunk = ceil_div(ceil_div(k_valid, (I)S), (I)mm::kKGroups) * mm::kKGroups;
  const I tasks = tiles * S;
  if constexpr (cluster)  // one task per block
    if (S != ClusterSplits || M > (I)kRowsClusterRows || (I)gridDim.x * (I)gridDim.y != tasks) __trap();
  const I stride = cluster ? tasks : task_stride<I>();
  for (I task = split_task_first<ClusterSplits>(tiles); task < tasks; task += stride) {
    const I tile = task % tiles;
    const I s = task / tiles;
    const I n0 = tile * BN;
    const I k_lo = s * chunk;
    const I k_hi = k_valid < k_lo + chunk ? k_valid : k_lo + chunk;  // may be <= k_lo: an empty part
    float* part = cluster ? cluster_part : S > 1 ? sk.partials + (s * tiles + tile) * M * BN : nullptr;
    const auto sink = [&](I m, I n, float v) {
      if (cluster) {
        part[m * BN + (n - n0)] = v;
      } else if (S == 1) {
        if (n < N) store_result(c, m * N + n, v, epi);
      } else {
        __stcg(part + m * BN + (n - n0), v);
      }
    };
    for (I m0 = 0; m0 < M; m0 += MR) {
      const I rows = M - m0;
      norm_row_stats<T>(pro, a, M, K, k_valid, m0, rows < (I)MR ? (int)rows : MR, st);
      // Three row tiles at most (1, 8, MR): every variant inlined here costs
      // instruction fetches at each launch, more than the FMAs on the empty
      // rows of a larger tile (docs/performance.md, probe p10).
      if (MR == 1 || rows <= 1) rows_pass<1>(a, b, M, N, K, m0, n0, k_lo, k_hi, vec, smem, pro, st, sink);
      else if (MR > 8 && rows <= 8)
        rows_pass<mm::min_int<8, MR>::value>(a, b, M, N, K, m0, n0, k_lo, k_hi, vec, smem, pro, st, sink);
      else rows_pass<MR>(a, b, M, N, K, m0, n0, k_lo, k_hi, vec, smem, pro, st, sink);
    }
    if constexpr (cluster) {
      // Block s adds elements [s * share, (s + 1) * share) of the strip's
      // M x BN from every block's part, in rank order.
      cluster_sync();  // every part is in place
      const int count = (int)M * BN, share = (count + S - 1) / S;
      const int e_begin = (int)s * share, e_end = e_begin + share < count ? e_begin + share : count;
      for (int e = e_begin + (int)threadIdx.x; e < e_end; e += mm::kThreads) {
        const I m = e / BN, n = n0 + e % BN;
        float v = 0.0f;
#pragma unroll
        for (int q = 0; q < ClusterSplits; ++q) v += cluster_load(cluster_map(part + e, (unsigned)q));
        if (n < N) store_result(c, m * N + n, v, epi);
      }
      cluster_sync();  // the other blocks are done reading this block's part
    } else if (S > 1 && split_arrive(sk.tickets + tile, S)) {
      for (I e = threadIdx.x; e < M * BN; e += mm::kThreads) {
        const I m = e / BN, col = e - m * BN, n = n0 + col;
        if (n >= N) continue;
        float v = 0.0f;
        for (I q = 0; q < (I)S; ++q) v += __ldcg(sk.partials + ((q * tiles + tile) * M + m) * BN + col);
        store_result(c, m * N + n, v, epi);
      }
    }
  }
}

// ------------------------------------------------------------ split tiles

// Part s of `tiles` BM x BN tiles of one launch, in the step's scratch.
template <int BM, int BN, typename I> GDL_DEV float* tile_part(const SplitScratch& sk, I s, I tiles, I tile) {
  return sk.partials + (s * tiles + tile) * (I)(BM * BN);
}

// The value of element e = row * BN + col of a tile from its sum: the
// matmul's, or with a norm prologue the fold of it (f holds the tile's
// statistics and column sums).
template <int BM, int BN, typename Pro> GDL_DEV float tile_value(const Pro& pro, float v, int e, const FoldTile<BM, BN>& f) {
  if constexpr (Pro::active) return pro.fold(v, f.st[e / BN], f.cols[e % BN], f.cols[BN + e % BN]);
  else return v;
}

// Element i (0..3) of a float4.
GDL_DEV float lane4(const float4& v, int i) { return i == 0 ? v.x : i == 1 ? v.y : i == 2 ? v.z : v.w; }

// Stores elements [e_begin, e_end) of a BM x BN tile at (m0, n0) of c
// (`base` the result's batch entry offset; e = row * BN + col, both bounds
// multiples of 4) through the epilogue. Each thread takes kStoreVectors
// vectors of 4 elements at a time, e0 + j * kStoreStride for j <
// kStoreVectors: sums(e0, v) fills v[j] with their sums (those at or past
// e_end are not stored), and store_tile evaluates all their epilogues
// before it stores any.
// The loads are what costs here, not the bytes: a store may alias the
// epilogue's own loads (bias, residual), so storing element by element puts
// one load round trip per element on the thread's path (32 for a 64 x 128
// tile); this puts one per 16 elements.
constexpr int kStoreVectors = 4, kStoreStride = mm::kThreads * 4;
template <int BM, int BN, typename I, typename TC, typename Epi, typename Pro, typename Sums>
GDL_DEV void store_tile(TC* c, I M, I N, I base, I m0, I n0, const Epi& epi, const Pro& pro, const FoldTile<BM, BN>& f,
                        const Sums& sums, int e_begin = 0, int e_end = BM * BN) {
  constexpr int J = kStoreVectors, STEP = kStoreStride * J;
  static_assert(BN % 4 == 0, "whole vectors of whole rows");
  using R = decltype(epi(0.0f, I{}));
  for (int e0 = e_begin + (int)threadIdx.x * 4; e0 < e_end; e0 += STEP) {
    float4 v[J];
    sums(e0, v);
    R r[J][4] = {};
    // visit(j, i, e, index) for each element of the J vectors inside the tile and the range.
    const auto each = [&](const auto& visit) {
#pragma unroll
      for (int j = 0; j < J; ++j)
#pragma unroll
        for (int i = 0; i < 4; ++i) {
          const int e = e0 + j * kStoreStride + i;
          const I m = m0 + e / BN, n = n0 + e % BN;
          if (e < e_end && m < M && n < N) visit(j, i, e, base + m * N + n);
        }
    };
    each([&](int j, int i, int e, I index) { r[j][i] = epi(tile_value(pro, lane4(v[j], i), e, f), index); });
    each([&](int j, int i, int, I index) { c[index] = cvt<TC>(r[j][i]); });
  }
}

// After every thread stored its elements of part s (element e = row * BN +
// col of the tile at (m0, n0), `base` the result's batch entry offset): the
// last part to arrive adds the parts in split order and stores the results
// (with a norm prologue, after adding the parts' column sums and loading
// the row statistics that the parts computed). One block reads every part
// of the tile (256 KiB for 8 parts of 64 x 128) while the other blocks of
// the launch may be done, so this is the launch's tail: each thread keeps
// kCombineParts parts of its kStoreVectors vectors in flight at once.
constexpr int kCombineParts = 4;
template <int BM, int BN, typename I, typename TC, typename Epi, typename Pro>
GDL_DEV void combine_tile(TC* c, I M, I N, I base, I m0, I n0, I tile, I tiles, const SplitScratch& sk,
                          const Epi& epi, const Pro& pro, FoldTile<BM, BN>& f) {
  if (!split_arrive(sk.tickets + tile, sk.splits)) return;
  if constexpr (Pro::active) {
    for (int i = threadIdx.x; i < 2 * BN; i += mm::kThreads) {
      float v = 0.0f;
      for (I q = 0; q < (I)sk.splits; ++q) v += __ldcg(fold_columns<BM, BN>(sk, q, tiles, tile) + i);
      f.cols[i] = v;
    }
    for (int i = threadIdx.x; i < BM; i += mm::kThreads) f.st[i] = __ldcg(fold_stats<BM, BN>(sk, tiles, tile) + i);
    __syncthreads();
  }
  const auto sums = [&](int e0, float4 (&v)[kStoreVectors]) {
    constexpr int J = kStoreVectors, Q = kCombineParts;
#pragma unroll
    for (int j = 0; j < J; ++j) v[j] = make_float4(0.0f, 0.0f, 0.0f, 0.0f);
    for (I q0 = 0; q0 < (I)sk.splits; q0 += Q) {
      float4 p[Q][J];
#pragma unroll
      for (int u = 0; u < Q; ++u) {
        const float4* part = reinterpret_cast<const float4*>(tile_part<BM, BN>(sk, q0 + (I)u, tiles, tile) + e0);
#pragma unroll
        for (int j = 0; j < J; ++j)
          p[u][j] = q0 + (I)u < (I)sk.splits ? __ldcg(part + j * (kStoreStride / 4)) : make_float4(0.0f, 0.0f, 0.0f, 0.0f);
      }
#pragma unroll
      for (int u = 0; u < Q; ++u)  // in split order
#pragma unroll
        for (int j = 0; j < J; ++j) v[j].x += p[u][j].x, v[j].y += p[u][j].y, v[j].z += p[u][j].z, v[j].w += p[u][j].w;
    }
  };
  store_tile<BM, BN>(c, M, N, base, m0, n0, epi, pro, f, sums);
}

// ------------------------------------------------------------ cluster split
// A tiled kernel launched with clusters of S blocks along y (codegen's
// __cluster_dims__) splits K among the S blocks of one cluster, which hold
// the S parts of one tile in their shared memory (distributed shared
// memory, sm_90): after a cluster barrier each block adds rows [s * share,
// (s + 1) * share) of every part, in rank order, and stores them through
// the epilogue. No global scratch, fence or ticket, and the epilogue of a
// tile is spread over its S blocks instead of run by the last one to
// arrive (ncu: that one block's epilogue over 8192 elements was the W2
// tiled layer's tail at B=64). matmul_rows does the same for a strip, by
// element ranges.
// Rows [first, first + count) of a BM-row tile: the share of part s of S.
template <int BM> GDL_DEV int share_first(int s, int S) { return s * ((BM + S - 1) / S); }
template <int BM> GDL_DEV int share_count(int s, int S) {
  const int share = (BM + S - 1) / S, first = s * share;
  return BM - first < share ? (BM - first > 0 ? BM - first : 0) : share;
}

// Every thread of every block of the cluster: `part` ([BM][LDC] floats)
// holds this block's part of the tile, f.cols its column sums (norm
// prologue) and f.st the statistics of its share of the rows.
template <int S, int BM, int BN, int LDC, typename I, typename TC, typename Epi, typename Pro>
GDL_DEV void cluster_combine(TC* c, I M, I N, I base, I m0, I n0, const Epi& epi, const Pro& pro, FoldTile<BM, BN>& f,
                             const float* part) {
  const unsigned s = cluster_rank();
  if constexpr (Pro::active)  // this part's column sums, where the other blocks read them
    for (int i = threadIdx.x; i < 2 * BN; i += mm::kThreads) f.halves[i] = f.cols[i];
  cluster_sync();  // every part and its column sums are in place
  if constexpr (Pro::active) {
    for (int i = threadIdx.x; i < 2 * BN; i += mm::kThreads) {
      float v = 0.0f;
#pragma unroll
      for (int q = 0; q < S; ++q) v += cluster_load(cluster_map(&f.halves[i], (unsigned)q));
      f.cols[i] = v;
    }
    __syncthreads();
  }
  const int e_begin = share_first<BM>((int)s, S) * BN, e_end = e_begin + share_count<BM>((int)s, S) * BN;
  const auto sums = [&](int e0, float4 (&v)[kStoreVectors]) {
#pragma unroll
    for (int j = 0; j < kStoreVectors; ++j) {
      const int e = e0 + j * kStoreStride;
      v[j] = make_float4(0.0f, 0.0f, 0.0f, 0.0f);
      if (e >= e_end) continue;
      const float* at = part + (e / BN) * LDC + e % BN;
#pragma unroll
      for (int q = 0; q < S; ++q) {  // in rank order
        const float4 p = cluster_load4(cluster_map(at, (unsigned)q));
        v[j].x += p.x, v[j].y += p.y, v[j].z += p.z, v[j].w += p.w;
      }
    }
  };
  store_tile<BM, BN>(c, M, N, base, m0, n0, epi, pro, f, sums, e_begin, e_end);
  cluster_sync();  // the other blocks are done reading this block's shared memory
}

// ------------------------------------------------------------ matmul_mma

// 16 bytes global -> shared without passing through registers (cp.async;
// the copy lands by the matching cp_async_wait), and the group fences.
GDL_DEV void cp_async16(void* smem_dst, const void* src) {
  const unsigned dst = (unsigned)__cvta_generic_to_shared(smem_dst);
  asm volatile("cp.async.cg.shared.global [%0], [%1], 16;" ::"r"(dst), "l"(src) : "memory");
}
GDL_DEV void cp_async_commit() { asm volatile("cp.async.commit_group;" ::: "memory"); }
template <int Pending> GDL_DEV void cp_async_wait() { asm volatile("cp.async.wait_group %0;" ::"n"(Pending) : "memory"); }

// Stages one 16-byte vector: an asynchronous copy when it is whole and
// aligned, else (an edge, an unaligned operand) a load and a store here,
// zero-filled past `valid` elements.
template <typename T> GDL_DEV void stage16(T* dst, const T* src, int valid, bool vector) {
  if (vector && valid >= Vec16<T>::n) cp_async16(dst, src);
  else *reinterpret_cast<uint4*>(dst) = valid > 0 ? load16(src, valid, vector) : zero16();
}

// ClusterSplits > 1: launched in clusters of that many blocks along y, which
// split K among them (cluster split, above; sk.splits must be the same).
template <int ClusterSplits = 0, typename T, typename I, typename TC, typename Epi, typename Pro, int NB>
GDL_DEV void matmul_mma(const T* a, const T* b, TC* c, I M, I N, I K, I k_valid, const BatchMap<NB, 2, I>& batches,
                        SplitScratch sk, const Epi& epi, const Pro& pro, unsigned char* smem) {
  using namespace nvcuda;
  constexpr int BM = mm::kMmaBM, BN = mm::kMmaBN, BK = mm::kMmaBK;
  constexpr int LDA = mm::kMmaLdA, LDB = mm::kMmaLdB, LDC = mm::kMmaLdC;
  if (blockDim.x != mm::kThreads) __trap();
  constexpr int STAGES = mm::kMmaStages;
  T* As = reinterpret_cast<T*>(smem);          // [STAGES][BM][LDA]
  T* Bs = As + STAGES * mm::kMmaStageA;        // [STAGES][BK][LDB]
  float* Cs = reinterpret_cast<float*>(smem);  // [BM][LDC], after the k loop
  __shared__ FoldTile<BM, BN> fold;  // norm prologue (unused without one)
  const int tid = threadIdx.x, warp = tid >> 5;
  const int wm = warp / 4, wn = warp % 4;     // 2 x 4 warps of 32 x 32
  const int a_row = tid / 4, a_col = (tid % 4) * 8;  // this thread's vector of the a stage
  const bool vec_a = K % 8 == 0 && aligned16(a), vec_b = N % 8 == 0 && aligned16(b);
  const int S = sk.splits;
  const I mt = ceil_div(M, (I)BM), nt = ceil_div(N, (I)BN);
  const I tiles = batches.count * mt * nt;
  const I chunk = ceil_div(ceil_div(k_valid, (I)S), (I)BK) * BK;
  const I tasks = tiles * S;
  if constexpr (ClusterSplits > 1)  // one task per block
    if (S != ClusterSplits || (I)gridDim.x * (I)gridDim.y != tasks) __trap();  // a launch that breaks the rule
  const I stride = ClusterSplits > 1 ? tasks : task_stride<I>();

  for (I task = split_task_first<ClusterSplits>(tiles); task < tasks; task += stride) {
    const I tile = task % tiles, s = task / tiles;
    const I mi = tile % mt, ni = (tile / mt) % nt, batch = tile / (mt * nt);
    I off[2];
    batches.offsets(batch, off);
    const T* ab = a + off[0];
    const T* bb = b + off[1];
    const I m0 = mi * BM, n0 = ni * BN;
    const I k_lo = s * chunk;
    const I k_hi = k_valid < k_lo + chunk ? k_valid : k_lo + chunk;
    const I ksteps = k_hi > k_lo ? ceil_div(k_hi - k_lo, (I)BK) : (I)0;
    float cs = 0.0f, bs = 0.0f;  // the fold's column sums

    // Step kt's operands into stage buffer kt % STAGES: a's vector of this
    // thread and two of b's.
    const auto issue = [&](I kt) {
      const int buf = (int)(kt % STAGES);
      const I k0 = k_lo + kt * BK;
      const I m = m0 + a_row, ka = k0 + a_col;
      stage16(As + buf * mm::kMmaStageA + a_row * LDA + a_col, ab + (m < M ? m : (I)0) * K + ka,
              m < M ? vec_valid<8>(ka, k_hi) : 0, vec_a);
#pragma unroll
      for (int u = 0; u < 2; ++u) {
        const int l = tid + u * mm::kThreads, row = l / (BN / 8), col = (l % (BN / 8)) * 8;
        const I kb = k0 + row, n = n0 + col;
        stage16(Bs + buf * mm::kMmaStageB + row * LDB + col, bb + (kb < k_hi ? kb : (I)0) * N + n,
                kb < k_hi ? vec_valid<8>(n, N) : 0, vec_b);
      }
    };

    wmma::fragment<wmma::accumulator, 16, 16, 16, float> acc[2][2];
#pragma unroll
    for (int i = 0; i < 2; ++i)
#pragma unroll
      for (int j = 0; j < 2; ++j) wmma::fill_fragment(acc[i][j], 0.0f);
#pragma unroll
    for (int kt = 0; kt < STAGES - 1; ++kt) {  // one group per step, empty past the last
      if ((I)kt < ksteps) issue((I)kt);
      cp_async_commit();
    }
    if constexpr (ClusterSplits > 1) {  // the statistics of the rows this block will combine, while those copies land
      const int r0 = share_first<BM>((int)s, S);
      norm_row_stats<T>(pro, ab, M, K, k_valid, m0 + (I)r0, share_count<BM>((int)s, S), fold.st + r0);
    } else {
      fold_stats_share<BM, BN, T>(pro, ab, M, K, k_valid, m0, s, tiles, tile, sk, fold);  // while those copies land
    }
    for (I kt = 0; kt < ksteps; ++kt) {
      const int buf = (int)(kt % STAGES);
      cp_async_wait<STAGES - 2>();  // this thread's copies of step kt have landed
      if constexpr (Pro::active && Pro::weighted) {  // the fold stages a as x * w: this thread's own vector
        uint4* own = reinterpret_cast<uint4*>(As + buf * mm::kMmaStageA + a_row * LDA + a_col);
        *own = scale16<T>(pro, *own, k_lo + kt * BK + a_col, k_hi);
      }
      __syncthreads();  // everyone's copies of step kt are visible; step kt - 1's readers are done
      if (kt + STAGES - 1 < ksteps) issue(kt + STAGES - 1);  // into step kt - 1's buffer
      cp_async_commit();
      const T* at = As + buf * mm::kMmaStageA;
      const T* bt = Bs + buf * mm::kMmaStageB;
#pragma unroll
      for (int kk = 0; kk < BK; kk += 16) {
        wmma::fragment<wmma::matrix_a, 16, 16, 16, T, wmma::row_major> fa[2];
        wmma::fragment<wmma::matrix_b, 16, 16, 16, T, wmma::row_major> fb[2];
#pragma unroll
        for (int i = 0; i < 2; ++i) wmma::load_matrix_sync(fa[i], at + (wm * 32 + i * 16) * LDA + kk, LDA);
#pragma unroll
        for (int j = 0; j < 2; ++j) wmma::load_matrix_sync(fb[j], bt + kk * LDB + wn * 32 + j * 16, LDB);
#pragma unroll
        for (int i = 0; i < 2; ++i)
#pragma unroll
          for (int j = 0; j < 2; ++j) wmma::mma_sync(acc[i][j], fa[i], fb[j], acc[i][j]);
      }
      fold_column_step<BK>(pro, bt, LDB, k_lo + kt * BK, k_hi, cs, bs);
    }
    cp_async_wait<0>();
    __syncthreads();  // Cs overlays the stage buffers
#pragma unroll
    for (int i = 0; i < 2; ++i)
#pragma unroll
      for (int j = 0; j < 2; ++j)
        wmma::store_matrix_sync(Cs + (wm * 32 + i * 16) * LDC + wn * 32 + j * 16, acc[i][j], LDC, wmma::mem_row_major);
    // (its barriers also publish Cs; a cluster split's column sums stay here)
    fold_columns_done(pro, cs, bs, s, tiles, tile, ClusterSplits > 1 ? SplitScratch{nullptr, nullptr, 1} : sk, fold);
    __syncthreads();
    const I base = batch * M * N;
    const auto cs4 = [&](int e) { return *reinterpret_cast<const float4*>(Cs + (e / BN) * LDC + e % BN); };
    if constexpr (ClusterSplits > 1) {
      cluster_combine<ClusterSplits, BM, BN, LDC>(c, M, N, base, m0, n0, epi, pro, fold, Cs);
    } else if (S == 1) {
      const auto sums = [&](int e0, float4 (&v)[kStoreVectors]) {
#pragma unroll
        for (int j = 0; j < kStoreVectors; ++j) v[j] = cs4(e0 + j * kStoreStride);
      };
      store_tile<BM, BN>(c, M, N, base, m0, n0, epi, pro, fold, sums);
    } else {
      float* part = tile_part<BM, BN>(sk, s, tiles, tile);
      for (int e = tid * 4; e < BM * BN; e += mm::kThreads * 4) __stcg(reinterpret_cast<float4*>(part + e), cs4(e));
      combine_tile<BM, BN>(c, M, N, base, m0, n0, tile, tiles, sk, epi, pro, fold);
    }
    __syncthreads();  // Cs is the next task's operand buffer
  }
}

// ------------------------------------------------------------ matmul_simt

template <typename I, typename TC, typename Epi, typename Pro, int NB>
GDL_DEV void matmul_simt(const float* a, const float* b, TC* c, I M, I N, I K, I k_valid,
                         const BatchMap<NB, 2, I>& batches, SplitScratch sk, const Epi& epi, const Pro& pro,
                         unsigned char* smem) {
  constexpr int BM = mm::kSimtBM, BN = mm::kSimtBN, BK = mm::kSimtBK, LDA = mm::kSimtLdA;
  constexpr int TM = mm::kSimtTM, TN = mm::kSimtTN;
  static_assert((BM / TM) * (BN / TN) == mm::kThreads, "one register tile per thread");
  if (blockDim.x != mm::kThreads) __trap();
  float* As = reinterpret_cast<float*>(smem);  // [2][BK][LDA], a transposed
  float* Bs = As + 2 * BK * LDA;               // [2][BK][BN]
  __shared__ FoldTile<BM, BN> fold;  // norm prologue (unused without one)
  const int tid = threadIdx.x;
  const int tx = tid % (BN / TN), ty = tid / (BN / TN);  // columns tx * 4 + j, rows ty * 8 + i
  const int a_row = tid / (BK / 4), a_col = (tid % (BK / 4)) * 4;
  const bool vec_a = K % 4 == 0 && aligned16(a), vec_b = N % 4 == 0 && aligned16(b);
  const int S = sk.splits;
  const I mt = ceil_div(M, (I)BM), nt = ceil_div(N, (I)BN);
  const I tiles = batches.count * mt * nt;
  const I chunk = ceil_div(ceil_div(k_valid, (I)S), (I)BK) * BK;
  const I tasks = tiles * S;

  for (I task = task_first<I>(); task < tasks; task += task_stride<I>()) {
    const I tile = task % tiles, s = task / tiles;
    const I mi = tile % mt, ni = (tile / mt) % nt, batch = tile / (mt * nt);
    I off[2];
    batches.offsets(batch, off);
    const float* ab = a + off[0];
    const float* bb = b + off[1];
    const I m0 = mi * BM, n0 = ni * BN;
    const I k_lo = s * chunk;
    const I k_hi = k_valid < k_lo + chunk ? k_valid : k_lo + chunk;
    const I ksteps = k_hi > k_lo ? ceil_div(k_hi - k_lo, (I)BK) : (I)0;
    float cs = 0.0f, bs = 0.0f;  // the fold's column sums

    uint4 ra, rb[2];
    I ra_k = 0;  // the position of ra's first element
    const auto fetch = [&](I k0) {
      const I m = m0 + a_row, ka = k0 + a_col;
      ra_k = ka;
      ra = m < M ? load16(ab + m * K + ka, vec_valid<4>(ka, k_hi), vec_a) : zero16();
#pragma unroll
      for (int u = 0; u < 2; ++u) {
        const int l = tid + u * mm::kThreads, row = l / (BN / 4), col = (l % (BN / 4)) * 4;
        const I kb = k0 + row, n = n0 + col;
        rb[u] = kb < k_hi ? load16(bb + kb * N + n, vec_valid<4>(n, N), vec_b) : zero16();
      }
    };
    const auto stash = [&](int buf) {
      float* at = As + buf * BK * LDA;
      ra = scale16<float>(pro, ra, ra_k, k_hi);
      at[(a_col + 0) * LDA + a_row] = __uint_as_float(ra.x);
      at[(a_col + 1) * LDA + a_row] = __uint_as_float(ra.y);
      at[(a_col + 2) * LDA + a_row] = __uint_as_float(ra.z);
      at[(a_col + 3) * LDA + a_row] = __uint_as_float(ra.w);
#pragma unroll
      for (int u = 0; u < 2; ++u) {
        const int l = tid + u * mm::kThreads, row = l / (BN / 4), col = (l % (BN / 4)) * 4;
        *reinterpret_cast<uint4*>(Bs + buf * BK * BN + row * BN + col) = rb[u];
      }
    };

    float acc[TM][TN];
#pragma unroll
    for (int i = 0; i < TM; ++i)
#pragma unroll
      for (int j = 0; j < TN; ++j) acc[i][j] = 0.0f;
    if (ksteps > 0) fetch(k_lo);
    fold_stats_share<BM, BN, float>(pro, ab, M, K, k_valid, m0, s, tiles, tile, sk, fold);  // while those loads land
    if (ksteps > 0) stash(0);
    __syncthreads();
    for (I kt = 0; kt < ksteps; ++kt) {
      const int buf = (int)(kt & 1);
      const bool more = kt + 1 < ksteps;
      if (more) fetch(k_lo + (kt + 1) * BK);
      const float* at = As + buf * BK * LDA + ty * TM;
      const float* bt = Bs + buf * BK * BN + tx * TN;
#pragma unroll
      for (int kk = 0; kk < BK; ++kk) {
        const float4 a0 = *reinterpret_cast<const float4*>(at + kk * LDA);
        const float4 a1 = *reinterpret_cast<const float4*>(at + kk * LDA + 4);
        const float4 bv = *reinterpret_cast<const float4*>(bt + kk * BN);
        const float av[TM] = {a0.x, a0.y, a0.z, a0.w, a1.x, a1.y, a1.z, a1.w};
        const float bw[TN] = {bv.x, bv.y, bv.z, bv.w};
#pragma unroll
        for (int i = 0; i < TM; ++i)
#pragma unroll
          for (int j = 0; j < TN; ++j) acc[i][j] = fmaf(av[i], bw[j], acc[i][j]);
      }
      fold_column_step<BK>(pro, Bs + buf * BK * BN, BN, k_lo + kt * BK, k_hi, cs, bs);
      if (more) stash(buf ^ 1);
      __syncthreads();
    }
    fold_columns_done(pro, cs, bs, s, tiles, tile, sk, fold);
    const I base = batch * M * N;
    if (S == 1) {
#pragma unroll
      for (int i = 0; i < TM; ++i) {
        const I m = m0 + ty * TM + i;
#pragma unroll
        for (int j = 0; j < TN; ++j) {
          const I n = n0 + tx * TN + j;
          if (m < M && n < N)
            store_result(c, base + m * N + n, tile_value(pro, acc[i][j], (ty * TM + i) * BN + tx * TN + j, fold), epi);
        }
      }
    } else {
      float* part = tile_part<BM, BN>(sk, s, tiles, tile);
#pragma unroll
      for (int i = 0; i < TM; ++i)
        __stcg(reinterpret_cast<float4*>(part + (ty * TM + i) * BN + tx * TN),
               make_float4(acc[i][0], acc[i][1], acc[i][2], acc[i][3]));
      combine_tile<BM, BN>(c, M, N, base, m0, n0, tile, tiles, sk, epi, pro, fold);
    }
    __syncthreads();  // fold: the next task's statistics reuse its shared memory
  }
}

// ------------------------------------------------------------ general

template <typename T> struct matmul_types {
  typedef float element;
  typedef float acc;
  static GDL_DEV float finish(float a) { return a; }
};
template <> struct matmul_types<int> {
  typedef int element;
  typedef long long acc;
  static GDL_DEV int finish(long long a) { return sat_i32(a); }
};

// The general kernel: a task is one TM x TN tile of one batch entry (task t
// -> m tile t % mt, n tile (t / mt) % nt, batch t / (mt * nt)); per TK-deep
// slice of K the block stages a [TM x TK] (transposed, padded) and b [TK x TN]
// in shared memory, zero-filled past the edges, and each thread accumulates
// an RM x RN register tile: rows ty + i * (TM / RM), columns tx + j * (TN / RN).
// i32 accumulates in 64 bits and saturates, as the interpreter's double sum
// rounded to i32 does. Needs at least (TM / RM) * (TN / RN) threads.
template <int TM, int TN, int TK, int RM, int RN, typename I, typename TA, typename TB, typename TC, int NB,
          typename Epi>
GDL_DEV void matmul(const TA* a, const TB* b, TC* c, I M, I N, I K, I k_valid, const BatchMap<NB, 2, I>& batches,
                    const Epi& epi) {
  constexpr int TX = TN / RN, TY = TM / RM, THREADS = TX * TY;
  static_assert(TM % RM == 0 && TN % RN == 0, "register tile must divide the block tile");
  typedef typename matmul_types<TA>::element E;
  typedef typename matmul_types<TA>::acc A;
  __shared__ E a_tile[TK][TM + 1];
  __shared__ E b_tile[TK][TN];

  if (blockDim.x < THREADS) __trap();  // a launch that breaks the LaunchRule
  const int tid = threadIdx.x;
  const bool computes = tid < THREADS;
  const int tx = tid % TX, ty = tid / TX;
  const I mt = ceil_div(M, (I)TM), nt = ceil_div(N, (I)TN);
  const I tasks = batches.count * mt * nt;
  const I k_end = k_valid < K ? k_valid : K;

  for (I task = task_first<I>(); task < tasks; task += task_stride<I>()) {
    const I m0 = (task % mt) * TM;
    const I n0 = ((task / mt) % nt) * TN;
    const I batch = task / (mt * nt);
    I off[2];
    batches.offsets(batch, off);
    const TA* ab = a + off[0];
    const TB* bb = b + off[1];
    const I base = batch * M * N;

    A acc[RM][RN];
#pragma unroll
    for (int i = 0; i < RM; ++i)
#pragma unroll
      for (int j = 0; j < RN; ++j) acc[i][j] = 0;

    for (I k0 = 0; k0 < k_end; k0 += TK) {
      // Trip counts known at compile time: unrolled, every load of the slice is in flight at once.
      if (computes) {
#pragma unroll
        for (int u = 0; u < (TM * TK + THREADS - 1) / THREADS; ++u) {
          const int l = tid + u * THREADS;
          if (TM * TK % THREADS != 0 && l >= TM * TK) break;
          const int r = l / TK, kk = l % TK;
          const I gm = m0 + r, gk = k0 + kk;
          a_tile[kk][r] = gm < M && gk < k_end ? (E)num(ab[gm * K + gk]) : (E)0;
        }
#pragma unroll
        for (int u = 0; u < (TK * TN + THREADS - 1) / THREADS; ++u) {
          const int l = tid + u * THREADS;
          if (TK * TN % THREADS != 0 && l >= TK * TN) break;
          const int kk = l / TN, cc = l % TN;
          const I gk = k0 + kk, gn = n0 + cc;
          b_tile[kk][cc] = gk < k_end && gn < N ? (E)num(bb[gk * N + gn]) : (E)0;
        }
      }
      __syncthreads();
      if (computes) {
#pragma unroll
        for (int kk = 0; kk < TK; ++kk) {
          E av[RM], bv[RN];
#pragma unroll
          for (int i = 0; i < RM; ++i) av[i] = a_tile[kk][ty + i * TY];
#pragma unroll
          for (int j = 0; j < RN; ++j) bv[j] = b_tile[kk][tx + j * TX];
#pragma unroll
          for (int i = 0; i < RM; ++i)
#pragma unroll
            for (int j = 0; j < RN; ++j) acc[i][j] += (A)av[i] * (A)bv[j];
        }
      }
      __syncthreads();
    }

    if (computes) {
#pragma unroll
      for (int i = 0; i < RM; ++i) {
        const I gm = m0 + ty + i * TY;
#pragma unroll
        for (int j = 0; j < RN; ++j) {
          const I gn = n0 + tx + j * TX;
          if (gm < M && gn < N) {
            const I index = base + gm * N + gn;
            c[index] = cvt<TC>(epi(matmul_types<TA>::finish(acc[i][j]), index));
          }
        }
      }
    }
  }
}

}  // namespace gdl
