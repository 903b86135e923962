// A chain of square matmul steps in one persistent kernel (gdl::MatmulChain).
//
// Steps s = 0 .. S-1, each c_s = epi_s(pro_s(a_s) @ b_s) with a_{s+1} = c_s,
// every b_s a [K, K] param (f16 or bf16), at most kMaxRows rows. Launched
// once, cooperatively, with K / kCols blocks of kThreads threads: block j
// owns the output columns [kCols j, kCols j + kCols) of every step, and all
// of K. A grid-wide barrier separates two steps.
//
// Why one launch (bench/persistent_mlp.cu, docs/performance.md): a launch
// per step drains and refills the memory pipe at every step, and the next
// step's blocks cannot be resident while the current one's still are. Here
// each block streams its strip of every b_s (K rows of 64 bytes) through
// one ring of cp.async slots in shared memory that runs across the step
// boundaries: while a block waits at the barrier, its first slots of the
// next step's weights are already in flight.
//
// A step in a block:
//  1. (after the barrier) the rows of a_s, the norm prologue's statistics
//     over the whole row, and the normalized rows (rounded to T, as the
//     other matmul kernels do) into shared memory: the block needs all of K;
//  2. the strip, slot by slot: warp w takes 16 rows of each slot, the tensor
//     cores (mma.m16n8k16) compute out^T = b^T a^T with the 32 columns as
//     M (two 16-column halves) and the rows of a as N;
//  3. the eight warps' sums added in shared memory, the epilogue, the store.
// Each warp reads back only the tiles it copied itself, so the ring needs
// no block barrier.
#pragma once

#include "gdl_matmul.cuh"

namespace gdl {
namespace chain {
constexpr int kThreads = 256, kWarps = kThreads / 32;
constexpr int kCols = 32;        // output columns per block: 64 bytes of each row of b
constexpr int kMaxRows = 8;      // the rows of a are mma's N
constexpr int kTileRows = 16;    // rows of b per warp per slot
constexpr int kSlotRows = kWarps * kTileRows;
constexpr int kTileElems = kTileRows * kCols;  // one warp's part of a slot: 1 KiB
constexpr int kSlotBytes = kWarps * kTileElems * 2;
constexpr int kSmemLimit = 227 * 1024;  // sm_90's largest shared memory per block
constexpr int kMaxSlots = 24;

// Dynamic shared memory of a chain over K: the ring, the normalized rows,
// the warps' column sums, the statistics.
template <int K> struct Layout {
  static_assert(K % kSlotRows == 0 && K % kCols == 0, "a chain's K is a multiple of 128");
  static constexpr int xn_stride = K + 8;  // rows 16 bytes apart in the banks
  static constexpr int xn_bytes = kMaxRows * xn_stride * 2;
  static constexpr int sums_bytes = kWarps * kMaxRows * kCols * 4;
  static constexpr int misc_bytes = (kWarps * kMaxRows + kMaxRows) * 8;  // parts (kWarps used) and stats
  static constexpr int fit = (kSmemLimit - xn_bytes - sums_bytes - misc_bytes) / kSlotBytes;
  static constexpr int slots = fit < kMaxSlots ? fit : kMaxSlots;
  static_assert(slots >= 4, "a chain's K leaves no room for its ring");
  static constexpr int bytes = slots * kSlotBytes + xn_bytes + sums_bytes + misc_bytes;
};

// Row r of a warp's 16 x 32 tile holds its four 16-byte pieces in the order
// piece ^ ((r >> 1) & 3): the eight rows one ldmatrix phase reads then fall
// in distinct banks.
GDL_DEV int tile_at(int row, int piece) { return row * kCols + ((piece ^ ((row >> 1) & 3)) << 3); }

GDL_DEV void mma16816(float (&d)[4], const unsigned (&a)[4], unsigned b0, unsigned b1, __half) {
  asm volatile("mma.sync.aligned.m16n8k16.row.col.f32.f16.f16.f32 {%0,%1,%2,%3}, {%4,%5,%6,%7}, {%8,%9}, {%0,%1,%2,%3};"
               : "+f"(d[0]), "+f"(d[1]), "+f"(d[2]), "+f"(d[3])
               : "r"(a[0]), "r"(a[1]), "r"(a[2]), "r"(a[3]), "r"(b0), "r"(b1));
}
GDL_DEV void mma16816(float (&d)[4], const unsigned (&a)[4], unsigned b0, unsigned b1, __nv_bfloat16) {
  asm volatile(
      "mma.sync.aligned.m16n8k16.row.col.f32.bf16.bf16.f32 {%0,%1,%2,%3}, {%4,%5,%6,%7}, {%8,%9}, {%0,%1,%2,%3};"
      : "+f"(d[0]), "+f"(d[1]), "+f"(d[2]), "+f"(d[3])
      : "r"(a[0]), "r"(a[1]), "r"(a[2]), "r"(a[3]), "r"(b0), "r"(b1));
}

// Every block of the launch arrives once per barrier. The counter only
// grows (launches of one chain never overlap), so a barrier's target is the
// next multiple of the grid size above the count the block found: no reset.
GDL_DEV void grid_barrier(unsigned long long* counter) {
  __syncthreads();
  if (threadIdx.x == 0) {
    unsigned long long old, now;
    asm volatile("atom.add.release.gpu.u64 %0, [%1], 1;" : "=l"(old) : "l"(counter) : "memory");
    const unsigned long long target = (old / gridDim.x + 1) * gridDim.x;
    do {
      asm volatile("ld.acquire.gpu.u64 %0, [%1];" : "=l"(now) : "l"(counter) : "memory");
    } while (now < target);
  }
  __syncthreads();
}
}  // namespace chain

template <typename T, int K> class MatmulChain {
  using L = chain::Layout<K>;
  static constexpr int kSlots = L::slots;
  static constexpr int kStepSlots = K / chain::kSlotRows;

 public:
  // weights[s]: step s's b. barrier: 8 bytes of scratch, this chain's only.
  GDL_DEV MatmulChain(const T* const* weights, int steps, unsigned long long* barrier, unsigned char* smem)
      : weights_(weights), steps_(steps), barrier_(barrier) {
    ring_ = reinterpret_cast<T*>(smem);
    xn_ = ring_ + kSlots * chain::kWarps * chain::kTileElems;
    sums_ = reinterpret_cast<float*>(xn_ + chain::kMaxRows * L::xn_stride);
    parts_ = reinterpret_cast<float2*>(sums_ + chain::kWarps * chain::kMaxRows * chain::kCols);
    stats_ = parts_ + chain::kWarps * chain::kMaxRows;
    lane_ = threadIdx.x & 31;
    warp_ = threadIdx.x >> 5;
    n0_ = blockIdx.x * chain::kCols;
  }

  // The first slots of step 0: weights only, so a kernel may call it before
  // it waits for the kernels it depends on (gdl_abi.cuh).
  GDL_DEV void start() {
    if (blockDim.x != chain::kThreads || gridDim.x * chain::kCols != K) __trap();
    for (int g = 0; g < kSlots - 1; ++g) issue(g);
  }

  template <typename I, typename Epi, typename Pro>
  GDL_DEV void step(int s, const T* a, T* c, I rows, const Epi& epi, const Pro& pro) {
    if (rows > chain::kMaxRows) __trap();  // the runtime launches the step kernels instead
    if (s > 0) chain::grid_barrier(barrier_);  // a is the previous step's c
    load_rows(a, (int)rows, pro);
    float d[2][4] = {{0.0f, 0.0f, 0.0f, 0.0f}, {0.0f, 0.0f, 0.0f, 0.0f}};
    for (int i = 0; i < kStepSlots; ++i) {
      const int g = s * kStepSlots + i;
      cp_async_wait<kSlots - 2>();  // this thread's copies of slot g have landed
      __syncwarp();                 // and the other lanes' of this warp's tile
      multiply(g, i, d);
      __syncwarp();                 // the slot read before it is refilled
      issue(g + kSlots - 1);
    }
    store(c, (int)rows, d, epi);
    if (s == steps_ - 1) cp_async_wait<0>();
  }

 private:
  // Slot g (of the whole launch): 16 rows per warp of the b of step
  // g / kStepSlots, two 16-byte copies per lane, each covering 8 rows of 64 bytes.
  GDL_DEV void issue(int g) {
    if (g < steps_ * kStepSlots) {
      const T* b = weights_[g / kStepSlots];
      T* tile = ring_ + ((g % kSlots) * chain::kWarps + warp_) * chain::kTileElems;
      const int piece = lane_ & 3;
#pragma unroll
      for (int h = 0; h < 2; ++h) {
        const int row = (lane_ >> 2) + 8 * h;
        const int k = (g % kStepSlots) * chain::kSlotRows + warp_ * chain::kTileRows + row;
        cp_async16(tile + chain::tile_at(row, piece), b + (size_t)k * K + n0_ + piece * 8);
      }
    }
    cp_async_commit();
  }

  // mma over one slot: the warp's 16 rows of k, both 16-column halves.
  GDL_DEV void multiply(int g, int i, float (&d)[2][4]) {
    const T* tile = ring_ + ((g % kSlots) * chain::kWarps + warp_) * chain::kTileElems;
    const int k = i * chain::kSlotRows + warp_ * chain::kTileRows + 2 * (lane_ & 3);
    const T* xb = xn_ + (lane_ >> 2) * L::xn_stride + k;
    const unsigned b0 = *reinterpret_cast<const unsigned*>(xb);
    const unsigned b1 = *reinterpret_cast<const unsigned*>(xb + 8);
    // ldmatrix.x4.trans: lanes 8q .. 8q + 7 give the rows of matrix q: rows
    // 0-7 then 8-15 of k, columns 0-7 then 8-15 of the half.
    const int row = (lane_ & 7) + 8 * (lane_ >> 4);
#pragma unroll
    for (int h = 0; h < 2; ++h) {
      const int piece = 2 * h + ((lane_ >> 3) & 1);
      const unsigned addr = (unsigned)__cvta_generic_to_shared(tile + chain::tile_at(row, piece));
      unsigned w[4];
      asm volatile("ldmatrix.sync.aligned.m8n8.x4.trans.shared.b16 {%0,%1,%2,%3}, [%4];"
                   : "=r"(w[0]), "=r"(w[1]), "=r"(w[2]), "=r"(w[3])
                   : "r"(addr));
      chain::mma16816(d[h], w, b0, b1, T{});
    }
  }

  // Rows [0, rows) of a into xn_, through the norm prologue; rows past them
  // are zero. a was written by other blocks of this launch, so it is read
  // with __ldcg (L1 may hold an older copy). The loops stay small on
  // purpose: fully unrolled over rows and vectors this ran once per step
  // as straight-line code and the warps stalled on instruction fetch.
  template <typename Pro> GDL_DEV void load_rows(const T* a, int rows, const Pro& pro) {
    constexpr int kRowVectors = K / 8;
    const uint4* av = reinterpret_cast<const uint4*>(a);
    if constexpr (Pro::active) {
      // A row over kWarps / rows_p2 warps: the shifted sums of norm_row_stats (gdl_matmul.cuh).
      int rows_p2 = 1;
      while (rows_p2 < rows) rows_p2 <<= 1;
      const int per_row = chain::kWarps / rows_p2, r = warp_ / per_row, piece = warp_ % per_row;
      const int span = kRowVectors / per_row;
      float sum = 0.0f, squares = 0.0f;
      if (r < rows) {
        const float shift = Pro::center ? num(__ldcg(a + (size_t)r * K)) : 0.0f;
        const uint4* row = av + (size_t)r * kRowVectors + piece * span;
#pragma unroll 4
        for (int i = lane_; i < span; i += 32) {
          float x[8];
          widen<T>(__ldcg(row + i), x);
#pragma unroll
          for (int e = 0; e < 8; ++e) {
            const float d = x[e] - shift;
            sum += d;
            squares = fmaf(d, d, squares);
          }
        }
      }
      sum = warp_sum(sum);
      squares = warp_sum(squares);
      if (lane_ == 0) parts_[warp_] = make_float2(sum, squares);
      __syncthreads();
      if ((int)threadIdx.x < rows) {
        const int row = threadIdx.x;
        float s = 0.0f, q = 0.0f;
        for (int w = row * per_row; w < (row + 1) * per_row; ++w) s += parts_[w].x, q += parts_[w].y;
        const float mean_d = Pro::center ? s / K : 0.0f;
        const float var = fmaxf(q / K - mean_d * mean_d, 0.0f);
        const float shift = Pro::center ? num(__ldcg(a + (size_t)row * K)) : 0.0f;
        stats_[row] = make_float2(shift + mean_d, 1.0f / sqrtf(var + pro.eps));
      }
      __syncthreads();
    }
    const int count = rows * kRowVectors;
#pragma unroll 4
    for (int q = threadIdx.x; q < chain::kMaxRows * kRowVectors; q += chain::kThreads) {
      const int r = q / kRowVectors, k = (q % kRowVectors) * 8;
      uint4 out = zero16();
      if (q < count) {
        out = __ldcg(av + q);
        if constexpr (Pro::active) {
          float x[8];
          widen<T>(out, x);
          unsigned w[4] = {0u, 0u, 0u, 0u};
#pragma unroll
          for (int e = 0; e < 8; ++e) w[e / 2] |= Vec16<T>::bits(cvt<T>(pro.apply(x[e], k + e, stats_, r))) << (16 * (e % 2));
          out = make_uint4(w[0], w[1], w[2], w[3]);
        }
      }
      *reinterpret_cast<uint4*>(xn_ + r * L::xn_stride + k) = out;
    }
    __syncthreads();
  }

  // The warps' sums per column, then the epilogue: one thread per element.
  template <typename Epi> GDL_DEV void store(T* c, int rows, const float (&d)[2][4], const Epi& epi) {
    const int m = lane_ >> 2, r = 2 * (lane_ & 3);
    float* mine = sums_ + warp_ * chain::kMaxRows * chain::kCols;
#pragma unroll
    for (int h = 0; h < 2; ++h) {
      const int col = 16 * h + m;
      mine[r * chain::kCols + col] = d[h][0];
      mine[(r + 1) * chain::kCols + col] = d[h][1];
      mine[r * chain::kCols + col + 8] = d[h][2];
      mine[(r + 1) * chain::kCols + col + 8] = d[h][3];
    }
    __syncthreads();
    if ((int)threadIdx.x < rows * chain::kCols) {
      const int row = threadIdx.x / chain::kCols, col = threadIdx.x % chain::kCols;
      float acc = 0.0f;
      for (int w = 0; w < chain::kWarps; ++w) acc += sums_[(w * chain::kMaxRows + row) * chain::kCols + col];
      store_result(c, (long long)row * K + n0_ + col, acc, epi);
    }
  }

  const T* const* weights_;
  int steps_;
  unsigned long long* barrier_;
  T* ring_;
  T* xn_;
  float* sums_;
  float2* parts_;
  float2* stats_;
  int lane_, warp_, n0_;
};

}  // namespace gdl
