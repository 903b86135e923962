// matmul_rows (gdl_matmul.cuh; f32, f16, bf16; few rows, b shared by every
// batch entry so the batch folds into M): memory-bound, streams b once.
// A block owns a 128-byte column strip of b (64 f16 / 32 f32 columns: 8
// threads x one 16-byte vector) and a range of K (split s of `splits`); its
// 32 groups of 8 threads take rows k, k + 32, ... of b, four 16-byte loads
// per thread per step with the next step's loads in flight. The rows of a
// are staged in shared memory as float (up to 8192 floats) and every loaded
// vector of b updates all R rows of a pass (R is 1, 8 or MR, a compile-time
// register tile; more rows of a take another pass over the same strip,
// which hits L1/L2). The 32 partial sums per column are added by warp
// shuffles, then across the 8 warps in shared memory. Its K splits add
// their parts through the scratch (gdl_split_tiles.cuh) or, as a cluster
// split, from the cluster's shared memory (gdl_matmul_tiles.cuh).
#pragma once

#include "gdl_matmul_prologue.cuh"

namespace gdl {

// ------------------------------------------------------------ matmul_rows

// One pass of matmul_rows: rows [m0, m0 + R) of a (those < M) against the
// strip [n0, n0 + BN) of b over K range [k_lo, k_hi); sink(m, n, sum) gets
// each sum of the strip (m < M; n may be >= N). With a norm prologue, st[r]
// holds the statistics of row m0 + r.
template <int R, bool TA, typename T, typename I, typename Pro, typename Sink>
GDL_DEV void rows_pass(const T* a, const T* b, I M, I N, I lda, I ldb, I m0, I n0, I k_lo, I k_hi, bool vec,
                       float* smem, const Pro& pro, const float2* st, const Sink& sink) {
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
    const T* bp = b + kc * ldb + n;
    uint4 cur[U], nxt[U];
#pragma unroll
    for (int u = 0; u < U; ++u) {  // in flight while a is staged
      const I kk = (I)(u * KG + kg);
      cur[u] = kk < len ? load16(bp + kk * ldb, n_valid, vec) : zero16();
      nxt[u] = zero16();
    }
    __syncthreads();  // the previous readers of smem are done
    for (I e = tid; e < (I)R * len; e += mm::kThreads) {
      const I r = e / len, kk = e - r * len, m = m0 + r;
      smem[kk * R + r] =
          m < M ? pro.apply((float)num(a[operand_index<TA>(m, kc + kk, lda)]), kc + kk, st, (int)r) : 0.0f;
    }
    __syncthreads();
    for (I g = 0; g < groups; ++g) {
      if (g + 1 < groups) {
#pragma unroll
        for (int u = 0; u < U; ++u) {
          const I kk = ((g + 1) * U + u) * KG + kg;
          nxt[u] = kk < len ? load16(bp + kk * ldb, n_valid, vec) : zero16();
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

// rows_pass for a transposed b (stored [N, K]: column n of b is stored row
// n, ldb elements apart, contiguous along K). Each warp takes C columns of
// the strip (n0 + warp, n0 + warp + 8, ...) and its lanes 16-byte vectors
// along K of all C at once; the staged rows of a lie along K too
// (smem[r * KCAP + k], zero past the valid positions up to a whole vector),
// so a lane reads its vector's values of a row as whole 16-byte words, the
// warp's reads one contiguous run. The lanes' sums are added by warp
// shuffles.
template <int R, bool TA, typename T, typename I, typename Pro, typename Sink>
GDL_DEV void rows_pass_nt(const T* a, const T* b, I M, I N, I lda, I ldb, I m0, I n0, I k_lo, I k_hi, bool vec,
                          float* smem, const Pro& pro, const float2* st, const Sink& sink) {
  constexpr int V = RowsTile<T>::V, BN = RowsTile<T>::BN, C = BN / mm::kWarps;
  constexpr int KCAP = mm::kStageFloats / R;  // positions of a staged at once, a whole number of vectors
  static_assert(KCAP % V == 0 && V % 4 == 0, "whole vectors of staged positions");
  const int lane = threadIdx.x & 31, warp = threadIdx.x >> 5;
  float acc[C][R];
#pragma unroll
  for (int c = 0; c < C; ++c)
#pragma unroll
    for (int r = 0; r < R; ++r) acc[c][r] = 0.0f;

  for (I kc = k_lo; kc < k_hi; kc += (I)KCAP) {
    const I len = k_hi - kc < (I)KCAP ? k_hi - kc : (I)KCAP;
    const I padded = ceil_div(len, (I)V) * V;
    __syncthreads();  // the previous readers of smem are done
    for (I e = threadIdx.x; e < (I)R * padded; e += mm::kThreads) {
      const I r = e / padded, kk = e - r * padded, m = m0 + r;
      smem[r * KCAP + kk] = m < M && kk < len
                                ? pro.apply((float)num(a[operand_index<TA>(m, kc + kk, lda)]), kc + kk, st, (int)r)
                                : 0.0f;
    }
    __syncthreads();
    for (I kk = (I)(lane * V); kk < len; kk += (I)(32 * V)) {
      const int valid = vec_valid<V>(kk, len);
      uint4 raw[C];
#pragma unroll
      for (int c = 0; c < C; ++c) {  // every column's vector in flight at once
        const I n = n0 + (I)(warp + c * mm::kWarps);
        raw[c] = n < N ? load16(b + n * ldb + kc + kk, valid, vec) : zero16();
      }
#pragma unroll
      for (int r = 0; r < R; ++r) {
        float x[V];
#pragma unroll
        for (int q = 0; q < V / 4; ++q) {
          const float4 f = *reinterpret_cast<const float4*>(smem + r * KCAP + kk + q * 4);
          x[q * 4] = f.x, x[q * 4 + 1] = f.y, x[q * 4 + 2] = f.z, x[q * 4 + 3] = f.w;
        }
#pragma unroll
        for (int c = 0; c < C; ++c) {
          float w[V];
          widen<T>(raw[c], w);
#pragma unroll
          for (int j = 0; j < V; ++j) acc[c][r] = fmaf(x[j], w[j], acc[c][r]);
        }
      }
    }
  }
#pragma unroll
  for (int c = 0; c < C; ++c)
#pragma unroll
    for (int r = 0; r < R; ++r) {
      float s = acc[c][r];
#pragma unroll
      for (int o = 16; o > 0; o >>= 1) s += __shfl_xor_sync(0xffffffffu, s, o);
      if (lane == 0 && m0 + (I)r < M) sink(m0 + (I)r, n0 + (I)(warp + c * mm::kWarps), s);
    }
  __syncthreads();  // smem is the next pass's stage
}

// a [M, K] (any batch folded into M), b [K, N] shared, c [M, N].
// ClusterSplits > 1: launched in clusters of that many blocks along y
// (sk.splits the same, M at most kRowsClusterRows), which split one strip's
// K among them; the parts stay in shared memory (cluster split,
// gdl_matmul_tiles.cuh) and each block adds and stores its share of the
// strip.
constexpr int kRowsClusterRows = 16;  // kernel_choice.h kMatmulRowsLimit
// TA, TB: a, b transposed (operand_index); lda, ldb their stored row lengths.
template <int MR, int ClusterSplits = 0, bool TA = false, bool TB = false, typename T, typename I, typename TC,
          typename Epi, typename Pro>
GDL_DEV void matmul_rows(const T* a, const T* b, TC* c, I M, I N, I K, I lda, I ldb, I k_valid, SplitScratch sk,
                         const Epi& epi, const Pro& pro, unsigned char* smem_bytes) {
  static_assert(!(TA && Pro::active), "a norm prologue reads the rows of a plain a");
  static_assert(MR == 1 || MR == 2 || MR == 4 || MR == 8 || MR == 16, "row tile");
  constexpr int V = RowsTile<T>::V, BN = RowsTile<T>::BN;
  constexpr bool cluster = ClusterSplits > 1;
  if (blockDim.x != mm::kThreads) __trap();  // a launch that breaks the LaunchRule
  float* smem = reinterpret_cast<float*>(smem_bytes);
  __shared__ float2 st[Pro::active ? MR : 1];  // norm prologue: the statistics of the pass's rows
  __shared__ __align__(16) float cluster_part[cluster ? kRowsClusterRows * BN : 1];  // this block's part of the strip
  const bool vec = ldb % V == 0 && aligned16(b);
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
      const auto pass = [&](auto held) {
        constexpr int R = decltype(held)::value;
        if constexpr (TB) rows_pass_nt<R, TA>(a, b, M, N, lda, ldb, m0, n0, k_lo, k_hi, vec, smem, pro, st, sink);
        else rows_pass<R, TA>(a, b, M, N, lda, ldb, m0, n0, k_lo, k_hi, vec, smem, pro, st, sink);
      };
      if (MR == 1 || rows <= 1) pass(mm::Int<1>{});
      else if (MR > 8 && rows <= 8) pass(mm::Int<mm::min_int<8, MR>::value>{});
      else pass(mm::Int<MR>{});
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

}  // namespace gdl
