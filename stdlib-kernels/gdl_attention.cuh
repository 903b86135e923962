// Attention over a KV cache with a run-time valid length (decode).
//
// q [rows, D], k [rows, T, D], v [rows, T, DV] -> out [rows, DV], where rows
// is every leading dim of q (batch, heads). Per row r, with
// L = clamp(len, 0, T) read from the device at run time (a padded T comes
// with a len source that is already clamped to its valid count, ClampedLen):
//   out[r] = sum_t softmax_t(scale * q[r] . k[r, t]) * v[r, t],  t < L
// and a zero row when L == 0. Positions t >= L are never read.
//
// The positions of a row are split across `splits` blocks so that small
// row counts still fill the GPU: task (row, split) takes positions
// [split * c, min(L, (split + 1) * c)), c = ceil(L / splits). A block:
//  1. stages q * scale * log2(e) in shared memory (scores in base 2, so
//     exp2f does the exponentials);
//  2. per chunk of up to CHUNK positions: scores, each warp taking RPW
//     positions per load step (LPR lanes per row of k, 16-byte loads, U
//     steps in flight), a shuffle reduction over the row's lanes;
//  3. the chunk's maximum updates the running maximum m; the running sum l
//     and the accumulators are rescaled by exp2(m_old - m); p_t = exp2(s_t - m);
//  4. threads split into SLICES slices of TPR_V threads: a thread owns
//     16-byte column vectors of the output and sums p_t * v[t] over the
//     positions t = slice, slice + SLICES, ... (coalesced rows of v);
//  5. the slices are added in shared memory. With one split the block
//     writes acc / l; otherwise it stores (m, l, acc) as its part and the
//     last block of the row to arrive (gdl_split.cuh) combines the parts:
//     M = max m_i, out = sum_i exp2(m_i - M) acc_i / sum_i exp2(m_i - M) l_i.
// An empty part (m = -inf, l = 0) weighs nothing. Requires blockDim.x ==
// kAttentionThreads, D <= D_MAX, DV <= DV_MAX, splits <= kAttentionMaxSplits.
#pragma once

#include "gdl_reduce.cuh"
#include "gdl_split.cuh"

namespace gdl {

constexpr int kAttentionThreads = 256;
constexpr int kAttentionMaxSplits = 64;

namespace att {
__host__ __device__ constexpr int pow2_at_least(int n) { return n <= 1 ? 1 : 2 * pow2_at_least((n + 1) / 2); }
__host__ __device__ constexpr int min_of(int a, int b) { return a < b ? a : b; }
__host__ __device__ constexpr int max_of(int a, int b) { return a < b ? b : a; }
}  // namespace att

template <int D_MAX, int DV_MAX, int CHUNK, typename I, typename T, typename TO, typename Len>
GDL_DEV void attention_split(const T* q, const T* k, const T* v, TO* out, Len len_source, I rows, I positions, I D,
                             I DV, float scale, SplitScratch sk) {
  constexpr int BLOCK = kAttentionThreads, WARPS = BLOCK / 32;
  constexpr int V = Vec16<T>::n;
  // Scores: a row of k is QV vectors, LPR lanes per row, NQ vectors per lane, RPW rows per warp step.
  constexpr int QV = (D_MAX + V - 1) / V;
  constexpr int LPR = att::min_of(32, att::pow2_at_least(QV));
  constexpr int NQ = (QV + LPR - 1) / LPR;
  constexpr int RPW = 32 / LPR;
  constexpr int U = att::max_of(1, 8 / NQ);
  // Weighted sum: a row of v is VV vectors, TPR_V threads per row, NV vectors per thread.
  constexpr int VV = (DV_MAX + V - 1) / V;
  constexpr int TPR_V = att::min_of(BLOCK, att::pow2_at_least(VV));
  constexpr int NV = (VV + TPR_V - 1) / TPR_V;
  constexpr int SLICES = BLOCK / TPR_V;
  constexpr int UV = att::max_of(1, 8 / NV);
  constexpr int ROW_W = TPR_V * NV * V;  // floats of one slice's accumulators
  constexpr float kLog2e = 1.4426950408889634f;
  __shared__ __align__(16) float q_s[QV * V];
  __shared__ float p_s[CHUNK];
  __shared__ __align__(16) float slice_s[SLICES * ROW_W];

  if (blockDim.x != BLOCK) __trap();  // a launch that breaks the LaunchRule
  const int tid = threadIdx.x, lane = tid & 31, warp = tid >> 5;
  const int sub = lane % LPR, rw = lane / LPR;
  const int cv = tid % TPR_V, slice = tid / TPR_V;
  const int S = sk.splits;
  const bool vec = D % V == 0 && DV % V == 0 && aligned16(k) && aligned16(v);
  const I tasks = rows * S;

  for (I task = task_first<I>(); task < tasks; task += task_stride<I>()) {
    const I row = task / S, split = task % S;
    const int len = len_source.get();
    const I valid = len <= 0 ? (I)0 : ((I)len < positions ? (I)len : positions);
    TO* o = out + row * DV;
    if (valid <= 0) {
      if (split == 0)
        for (I d = tid; d < DV; d += BLOCK) o[d] = cvt<TO>(0.0f);
      continue;
    }
    const I chunk = ceil_div(valid, (I)S);
    const I p_lo = split * chunk;
    const I p_hi = valid < p_lo + chunk ? valid : p_lo + chunk;
    const T* kr = k + row * positions * D;
    const T* vr = v + row * positions * DV;
    for (int d = tid; d < QV * V; d += BLOCK) q_s[d] = (I)d < D ? num(q[row * D + d]) * scale * kLog2e : 0.0f;
    __syncthreads();

    float m = -inf_f32(), l = 0.0f;
    float acc[NV][V];
#pragma unroll
    for (int i = 0; i < NV; ++i)
#pragma unroll
      for (int j = 0; j < V; ++j) acc[i][j] = 0.0f;

    for (I c0 = p_lo; c0 < p_hi; c0 += CHUNK) {
      const int n = (int)(p_hi - c0 < (I)CHUNK ? p_hi - c0 : (I)CHUNK);
      // 2. scores (base 2)
      for (int t0 = warp * RPW; t0 < n; t0 += U * WARPS * RPW) {
        uint4 kv[U][NQ];
#pragma unroll
        for (int u = 0; u < U; ++u) {
          const int t = t0 + u * WARPS * RPW + rw;
#pragma unroll
          for (int i = 0; i < NQ; ++i) {
            const int vi = sub + i * LPR;
            kv[u][i] = t < n && vi < QV ? load16(kr + (c0 + t) * D + vi * V, vec_valid<V>((I)(vi * V), D), vec)
                                        : zero16();
          }
        }
#pragma unroll
        for (int u = 0; u < U; ++u) {
          float dot = 0.0f;
#pragma unroll
          for (int i = 0; i < NQ; ++i) {
            const int vi = sub + i * LPR;
            if (vi < QV) {
              float f[V];
              widen<T>(kv[u][i], f);
#pragma unroll
              for (int j = 0; j < V; ++j) dot = fmaf(q_s[vi * V + j], f[j], dot);
            }
          }
#pragma unroll
          for (int offset = LPR / 2; offset > 0; offset >>= 1) dot += __shfl_xor_sync(0xffffffffu, dot, offset);
          const int t = t0 + u * WARPS * RPW + rw;
          if (sub == 0 && t < n) p_s[t] = dot;
        }
      }
      __syncthreads();
      // 3. running maximum and probabilities
      float peak = -inf_f32();
      for (int t = tid; t < n; t += BLOCK) peak = fmaxf(peak, p_s[t]);
      peak = block_reduce<FloatPeak>(peak);
      const float m_new = fmaxf(m, peak);
      const float rescale = m == m_new ? 1.0f : exp2f(m - m_new);
      float total = 0.0f;
      for (int t = tid; t < n; t += BLOCK) {
        const float e = exp2f(p_s[t] - m_new);
        p_s[t] = e;
        total += e;
      }
      total = block_reduce<FloatSum>(total);  // its barriers also publish p_s
      l = l * rescale + total;
      m = m_new;
      // 4. weighted sum of v
#pragma unroll
      for (int i = 0; i < NV; ++i)
#pragma unroll
        for (int j = 0; j < V; ++j) acc[i][j] *= rescale;
      for (int t0 = slice; t0 < n; t0 += UV * SLICES) {
        uint4 vv[UV][NV];
        float pt[UV];
#pragma unroll
        for (int u = 0; u < UV; ++u) {
          const int t = t0 + u * SLICES;
          pt[u] = t < n ? p_s[t] : 0.0f;
#pragma unroll
          for (int i = 0; i < NV; ++i) {
            const int vi = cv + i * TPR_V;
            vv[u][i] = t < n && vi < VV ? load16(vr + (c0 + t) * DV + vi * V, vec_valid<V>((I)(vi * V), DV), vec)
                                        : zero16();
          }
        }
#pragma unroll
        for (int u = 0; u < UV; ++u)
#pragma unroll
          for (int i = 0; i < NV; ++i) {
            float f[V];
            widen<T>(vv[u][i], f);
#pragma unroll
            for (int j = 0; j < V; ++j) acc[i][j] = fmaf(pt[u], f[j], acc[i][j]);
          }
      }
      __syncthreads();  // p_s is rewritten by the next chunk
    }

    // 5. add the slices; write the row or this split's part
#pragma unroll
    for (int i = 0; i < NV; ++i)
#pragma unroll
      for (int j = 0; j < V; ++j) slice_s[slice * ROW_W + (cv + i * TPR_V) * V + j] = acc[i][j];
    __syncthreads();
    float* part_ml = S > 1 ? sk.partials : nullptr;                 // [rows][splits][2]: m, l
    float* part_acc = S > 1 ? sk.partials + rows * S * 2 : nullptr;  // [rows][splits][DV]
    const I part = row * S + split;
    for (I d = tid; d < DV; d += BLOCK) {
      float sum = 0.0f;
#pragma unroll
      for (int sl = 0; sl < SLICES; ++sl) sum += slice_s[sl * ROW_W + (int)d];
      if (S == 1) o[d] = cvt<TO>(sum / l);
      else __stcg(part_acc + part * DV + d, sum);
    }
    if (S > 1) {
      if (tid == 0) {
        __stcg(part_ml + part * 2, m);
        __stcg(part_ml + part * 2 + 1, l);
      }
      if (split_arrive(sk.tickets + row, S)) {
        float peak_all = -inf_f32();
        for (int i = 0; i < S; ++i) peak_all = fmaxf(peak_all, __ldcg(part_ml + (row * S + i) * 2));
        float weight_sum = 0.0f;
        for (int i = 0; i < S; ++i) {
          const float mi = __ldcg(part_ml + (row * S + i) * 2);
          if (mi != -inf_f32()) weight_sum += __ldcg(part_ml + (row * S + i) * 2 + 1) * exp2f(mi - peak_all);
        }
        for (I d = tid; d < DV; d += BLOCK) {
          float sum = 0.0f;
          for (int i = 0; i < S; ++i) {
            const float mi = __ldcg(part_ml + (row * S + i) * 2);
            if (mi != -inf_f32()) sum += __ldcg(part_acc + (row * S + i) * DV + d) * exp2f(mi - peak_all);
          }
          o[d] = cvt<TO>(sum / weight_sum);
        }
      }
    }
    __syncthreads();  // q_s and slice_s are rewritten by the next task
  }
}

}  // namespace gdl
