// matmul (gdl_matmul.cuh; any dtype, i32 and bool included): the general
// tiled kernel (a TM x TN tile per block, RM x RN per thread), kept for the
// dtypes the fast kernels do not take.
#pragma once

#include "gdl_matmul_common.cuh"

namespace gdl {

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
// TransA, TransB: a, b transposed (operand_index; lda, ldb their stored
// row lengths).
template <int TM, int TN, int TK, int RM, int RN, typename I, bool TransA = false, bool TransB = false, typename TA,
          typename TB, typename TC, int NB, typename Epi>
GDL_DEV void matmul(const TA* a, const TB* b, TC* c, I M, I N, I K, I lda, I ldb, I k_valid,
                    const BatchMap<NB, 2, I>& batches, const Epi& epi) {
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
          a_tile[kk][r] = gm < M && gk < k_end ? (E)num(ab[operand_index<TransA>(gm, gk, lda)]) : (E)0;
        }
#pragma unroll
        for (int u = 0; u < (TK * TN + THREADS - 1) / THREADS; ++u) {
          const int l = tid + u * THREADS;
          if (TK * TN % THREADS != 0 && l >= TK * TN) break;
          const int kk = l / TN, cc = l % TN;
          const I gk = k0 + kk, gn = n0 + cc;
          b_tile[kk][cc] = gk < k_end && gn < N ? (E)num(bb[operand_index<TransB>(gk, gn, ldb)]) : (E)0;
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
