// Attention over a KV cache with a run-time valid length (decode).
//
// q [rows, D], k [rows, T, D], v [rows, T, DV] -> out [rows, DV], where rows
// is every leading dim of q (batch, heads). Per row r, with
// L = clamp(len, 0, T) read from the device at run time:
//   out[r] = sum_t softmax_t(scale * q[r] . k[r, t]) * v[r, t],  t < L
// and a zero row when L == 0. Positions t >= L are never read.
//
// One block per row (a task). Positions are taken CHUNK at a time with an
// online softmax, so shared memory stays fixed whatever T is:
//  1. scores: each warp takes positions w, w + warps, ... (UNROLL in flight),
//     its lanes split D, a shuffle reduction gives scale * q.k;
//  2. the chunk's maximum (block reduction) updates the running maximum m;
//     the running sum l and the accumulators are rescaled by exp(m_old - m);
//  3. p_t = exp(s_t - m), l += sum p_t;
//  4. threads split into NS slices of TPS threads: a thread owns output
//     columns d = base + j * TPS (j < DPT) and sums p_t * v[t, d] over the
//     positions t = slice, slice + NS, ... (coalesced rows of v);
//  5. at the end the slices' partial sums are added and divided by l.
// Requires blockDim.x == BLOCK (a multiple of 32), D <= D_MAX, DV <= DV_MAX.
#pragma once

#include "gdl_reduce.cuh"

namespace gdl {

template <int D_MAX, int DV_MAX, int BLOCK, int CHUNK, typename I, typename T, typename TO, typename Len>
GDL_DEV void attention_decode(const T* q, const T* k, const T* v, TO* out, Len len_source, I rows, I positions,
                              I D, I DV, float scale) {
  static_assert(BLOCK % 32 == 0, "attention needs whole warps");
  constexpr int DPT = (DV_MAX + BLOCK - 1) / BLOCK;  // output columns per thread
  __shared__ float q_row[D_MAX];
  __shared__ float p[CHUNK];
  __shared__ float partial[BLOCK * DPT];

  if (blockDim.x != BLOCK) __trap();  // a launch that breaks the LaunchRule
  const int tid = threadIdx.x, lane = tid & 31, warp = tid >> 5;
  constexpr int WARPS = BLOCK / 32;
  constexpr int UNROLL = 8;                              // positions in flight per warp (scores)
  constexpr int UNROLL_V = DPT >= 8 ? 4 : 32 / DPT;      // and per thread (weighted sum), <= 32 loads
  const I tps = DPT == 1 ? DV : (I)BLOCK;  // threads per slice
  const I slices = (I)BLOCK / tps;
  const I slice = (I)tid / tps, column0 = (I)tid % tps;
  const bool accumulates = slice < slices;

  for (I row = task_first<I>(); row < rows; row += task_stride<I>()) {
    int len = len_source.get();
    const I valid = len <= 0 ? (I)0 : ((I)len < positions ? (I)len : positions);
    TO* o = out + row * DV;
    if (valid == 0) {
      for (I d = tid; d < DV; d += BLOCK) o[d] = cvt<TO>(0.0f);
      continue;
    }
    const T* kr = k + row * positions * D;
    const T* vr = v + row * positions * DV;
    for (I d = tid; d < D; d += BLOCK) q_row[d] = num(q[row * D + d]);
    __syncthreads();

    float m = -inf_f32(), l = 0.0f;
    float acc[DPT];
#pragma unroll
    for (int j = 0; j < DPT; ++j) acc[j] = 0.0f;

    for (I c0 = 0; c0 < valid; c0 += CHUNK) {
      const I n = valid - c0 < (I)CHUNK ? valid - c0 : (I)CHUNK;
      // 1. scores (loops over D_MAX unrolled, so every load is in flight at once)
      for (I t0 = warp; t0 < n; t0 += UNROLL * WARPS) {
        float dot[UNROLL];
#pragma unroll
        for (int u = 0; u < UNROLL; ++u) dot[u] = 0.0f;
#pragma unroll
        for (int d0 = 0; d0 < D_MAX; d0 += 32) {
          const I d = (I)(d0 + lane);
          const float qd = d < D ? q_row[d] : 0.0f;
#pragma unroll
          for (int u = 0; u < UNROLL; ++u) {
            const I t = t0 + u * WARPS;
            if (t < n && d < D) dot[u] += qd * num(kr[(c0 + t) * D + d]);
          }
        }
#pragma unroll
        for (int u = 0; u < UNROLL; ++u) {
#pragma unroll
          for (int offset = 16; offset > 0; offset >>= 1) dot[u] += __shfl_xor_sync(0xffffffffu, dot[u], offset);
          const I t = t0 + u * WARPS;
          if (lane == 0 && t < n) p[t] = dot[u] * scale;
        }
      }
      __syncthreads();
      // 2. running maximum
      float peak = -inf_f32();
      for (I t = tid; t < n; t += BLOCK) peak = fmaxf(peak, p[t]);
      peak = block_reduce<FloatPeak>(peak);
      const float m_new = fmaxf(m, peak);
      const float rescale = m == m_new ? 1.0f : expf(m - m_new);
      // 3. probabilities
      float total = 0.0f;
      for (I t = tid; t < n; t += BLOCK) {
        const float e = expf(p[t] - m_new);
        p[t] = e;
        total += e;
      }
      total = block_reduce<FloatSum>(total);  // its barriers also publish p[]
      l = l * rescale + total;
      m = m_new;
      // 4. weighted sum of v
      if (accumulates) {
#pragma unroll
        for (int j = 0; j < DPT; ++j) acc[j] *= rescale;
        for (I t = slice; t < n; t += UNROLL_V * slices) {
          float pt[UNROLL_V], vt[UNROLL_V][DPT];
#pragma unroll
          for (int u = 0; u < UNROLL_V; ++u) {
            const I tu = t + (I)u * slices;
            pt[u] = tu < n ? p[tu] : 0.0f;
#pragma unroll
            for (int j = 0; j < DPT; ++j) {
              const I d = column0 + (I)j * tps;
              vt[u][j] = tu < n && d < DV ? num(vr[(c0 + tu) * DV + d]) : 0.0f;
            }
          }
#pragma unroll
          for (int u = 0; u < UNROLL_V; ++u)
#pragma unroll
            for (int j = 0; j < DPT; ++j) acc[j] += pt[u] * vt[u][j];
        }
      }
      __syncthreads();  // p[] is rewritten by the next chunk
    }

    // 5. add the slices, normalise
    if (accumulates) {
#pragma unroll
      for (int j = 0; j < DPT; ++j) {
        const I d = column0 + (I)j * tps;
        if (d < DV) partial[slice * DV + d] = acc[j];
      }
    }
    __syncthreads();
    if (accumulates && slice == 0) {
#pragma unroll
      for (int j = 0; j < DPT; ++j) {
        const I d = column0 + (I)j * tps;
        if (d < DV) {
          float sum = 0.0f;
          for (I s = 0; s < slices; ++s) sum += partial[s * DV + d];
          o[d] = cvt<TO>(sum / l);
        }
      }
    }
    __syncthreads();  // q_row[] and partial[] are rewritten by the next row
  }
}

}  // namespace gdl
