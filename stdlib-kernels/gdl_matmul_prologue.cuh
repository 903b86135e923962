// The matmul's norm prologue (gdl_matmul.cuh): a layernorm or rmsnorm run
// inside the matmul that reads its input as a. NoPrologue / NormPrologue
// are the prologue functors the generated code passes; norm_row_stats
// computes the rows' statistics; the fold (scale16, fold_column_step,
// FoldTile and the fold_* helpers) carries the norm through the tiled
// kernels' sums.
#pragma once

#include "gdl_matmul_common.cuh"

namespace gdl {

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
  // (Vec16<T>::pack, gdl_chain_rows.cuh).
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

// (mean, 1 / sqrt(var + eps)) of a row of n elements from the sums of
// d = x - shift and of d * d: var = (sum d^2 - (sum d)^2 / n) / n does not
// cancel when the mean is far from zero. Without Center (rmsnorm, shift 0)
// the mean is 0 and var the mean square.
template <bool Center> GDL_DEV float2 shifted_row_statistics(float sum, float squares, float shift, float n, float eps) {
  const float mean_d = Center ? sum / n : 0.0f;  // mean - shift
  const float var = fmaxf(squares / n - mean_d * mean_d, 0.0f);
  return make_float2(shift + mean_d, 1.0f / sqrtf(var + eps));
}

// A 16-byte vector of a row's positions k, k + 1, ... through the norm with
// the row's statistics st[r], each rounded to T as pro.apply rounds it
// (f16/bf16 two per conversion, Vec16<T>::pack).
template <typename T, typename I, typename Pro>
GDL_DEV uint4 normalized16(const Pro& pro, uint4 raw, I k, const float2* st, int r) {
  constexpr int V = Vec16<T>::n;
  float x[V];
  widen<T>(raw, x);
  unsigned w[4];
  if constexpr (V == 8) {
#pragma unroll
    for (int j = 0; j < V; j += 2)
      w[j / 2] = Vec16<T>::pack(pro.normalized(x[j], k + (I)j, st, r), pro.normalized(x[j + 1], k + (I)(j + 1), st, r));
  } else {
#pragma unroll
    for (int j = 0; j < V; ++j) w[j] = Vec16<T>::bits(cvt<T>(pro.normalized(x[j], k + (I)j, st, r)));
  }
  return make_uint4(w[0], w[1], w[2], w[3]);
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
      if (lane == 0)
        st[r] = valid ? shifted_row_statistics<Pro::center>(sum, squares, shift, (float)k_valid, pro.eps) : make_float2(0.0f, 1.0f);
    }
    __syncthreads();
  }
}

// A norm prologue in front of a matmul whose product cuBLASLt computes
// (core/kernel_table.h LibraryMatmul): the rows of a [rows, K] normalized
// into out, rounded to T as the norm's own kernel rounds them. A block per
// row: its threads read the row as 16-byte vectors for the statistics (one
// pass, d = x - x_0 as in norm_row_stats; a block reduction), then read it
// again, now from L1, to write it normalized. The calls serve 17 to a few
// hundred rows of thousands of positions: a warp per row left most
// multiprocessors idle at such counts (8 blocks at 64 rows).
template <typename T, typename I, typename Pro>
GDL_DEV void matmul_library_norm_rows(const Pro& pro, const T* a, T* out, I rows, I K) {
  constexpr int V = Vec16<T>::n;
  __shared__ float2 partial[32];  // a warp's (sum, squares)
  __shared__ float2 st[1];        // the row's (mean, inv), as pro.normalized reads it
  const int lane = threadIdx.x & 31, warp = threadIdx.x >> 5, warps = (int)(blockDim.x >> 5);
  const I k_vec = K % V == 0 && aligned16(a) && aligned16(out) ? K : (I)0;  // the rest one by one
  const I first = (I)threadIdx.x * V, stride = (I)blockDim.x * V;
  for (I m = task_first<I>(); m < rows; m += task_stride<I>()) {
    const T* row = a + m * K;
    T* to = out + m * K;
    const float shift = Pro::center && K > 0 ? (float)num(row[0]) : 0.0f;
    float sum = 0.0f, squares = 0.0f;
    const auto add = [&](float x) {
      const float d = x - shift;
      sum += d;
      squares = fmaf(d, d, squares);
    };
    for (I c = first; c < k_vec; c += stride) {
      float x[V];
      widen<T>(__ldg(reinterpret_cast<const uint4*>(row + c)), x);
#pragma unroll
      for (int j = 0; j < V; ++j) add(x[j]);
    }
    for (I j = k_vec + (I)threadIdx.x; j < K; j += (I)blockDim.x) add((float)num(row[j]));
    sum = warp_sum(sum);
    squares = warp_sum(squares);
    if (lane == 0) partial[warp] = make_float2(sum, squares);
    __syncthreads();
    if (threadIdx.x == 0) {
      float total = 0.0f, total_squares = 0.0f;
      for (int w = 0; w < warps; ++w) {
        total += partial[w].x;
        total_squares += partial[w].y;
      }
      st[0] = shifted_row_statistics<Pro::center>(total, total_squares, shift, (float)K, pro.eps);
    }
    __syncthreads();  // st is set, and thread 0 is done with partial before the next row writes it
    for (I c = first; c < k_vec; c += stride)
      *reinterpret_cast<uint4*>(to + c) = normalized16<T>(pro, *reinterpret_cast<const uint4*>(row + c), c, st, 0);
    for (I j = k_vec + (I)threadIdx.x; j < K; j += (I)blockDim.x) to[j] = cvt<T>(pro.normalized(num(row[j]), j, st, 0));
    __syncthreads();  // st is read by every thread before the next row's is written
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

}  // namespace gdl
