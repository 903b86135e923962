// A chain of square matmul steps in one persistent kernel (gdl::MatmulChain).
//
// Steps s = 0 .. S-1, each c_s = epi_s(pro_s(a_s) @ b_s) with a_{s+1} = c_s,
// every b_s a [K, K] param (f16 or bf16). Launched once, cooperatively, with
// a grid of (K / C) x G blocks of kThreads threads: block (j, g) owns the
// output columns [C j, C j + C) of rows [8 g, 8 g + 8) of every step, and
// all of K. A barrier over the K / C blocks of one row group separates two
// steps (the groups never read each other's rows).
//  - G = 1 (at most kMaxRows rows): C = cols_for(K), 8, 16 or 32, so that a
//    K of 1024, 2048 or 4096 runs 128 blocks.
//  - G > 1 (row groups, more rows at K = 1024): C = group_cols_for(K, G),
//    again 128 blocks; every group streams the same weights, the groups
//    after the first mostly from L2. A group without rows returns.
//
// Why one launch (bench/persistent_mlp.cu, docs/performance.md): a launch
// per step drains and refills the memory pipe at every step, and the next
// step's blocks cannot be resident while the current one's still are. Here
// each block streams its strip of every b_s (K rows of 2 C bytes) through
// one ring of cp.async slots in shared memory that runs across the step
// boundaries: while a block waits at the barrier, its first slots of the
// next step's weights are already in flight.
//
// A step in a block:
//  1. (after the barrier) the group's rows of a_s, the norm prologue's
//     statistics over the whole row, and the normalized rows (rounded to T,
//     as the other matmul kernels do) into shared memory: the block needs
//     all of K;
//  2. the strip, slot by slot: warp w takes 16 rows of each slot, the tensor
//     cores (mma.m16n8k16) compute out^T = b^T a^T with the C columns as
//     M (in 16-column halves; at C = 8 the upper half of M is zero) and the
//     rows of a as N;
//  3. the eight warps' sums added in shared memory, the epilogue, the store.
// Each warp reads back only the tiles it copied itself, so the ring needs
// no block barrier.
#pragma once

#include "gdl_matmul.cuh"

namespace gdl {
namespace chain {
constexpr int kThreads = 256, kWarps = kThreads / 32;
constexpr int kMaxRows = 8;      // the rows of a are mma's N
constexpr int kTileRows = 16;    // rows of b per warp per slot
constexpr int kSlotRows = kWarps * kTileRows;
constexpr int kSmemLimit = 227 * 1024;  // sm_90's largest shared memory per block
constexpr int kMaxSlots = 24;
constexpr int kBlocks = 128;     // at most one block per SM of an H100/H200 (132 SMs)
constexpr int kMaxGroups = 8;    // row groups of kMaxRows: up to 64 rows
constexpr int kGroupMaxK = 1024; // row groups only where measured (docs/performance.md)
// The barrier counters: the ungrouped kernel's first, then one per row
// group, each on a 128-byte line of its own (the groups spin apart).
constexpr int kCounterStride = 128 / 8;
constexpr int kBarrierBytes = (1 + kMaxGroups) * 128;

// Output columns per block: the narrowest of 8, 16, 32 that needs at most
// kBlocks blocks. Narrower strips keep the small chains on all the SMs
// (K = 1024 with 32 columns ran on 32 of them, docs/performance.md).
constexpr int cols_for(int k) { return k <= 8 * kBlocks ? 8 : k <= 16 * kBlocks ? 16 : 32; }

// Output columns per block of a launch in `groups` row groups: the
// narrowest of 8 to 64 whose (K / C) x groups blocks are at most kBlocks.
constexpr int group_cols_for(int k, int groups) {
  int c = 8;
  while (c < 64 && (k / c) * groups > kBlocks) c *= 2;
  return c;
}

// Dynamic shared memory of a chain over K with C columns per block: the
// ring, the normalized rows, the warps' column sums, the statistics.
template <int K, int C = cols_for(K)> struct Layout {
  static constexpr int cols = C;
  static constexpr int tile_elems = kTileRows * cols;  // one warp's part of a slot: 16 rows of 2 C bytes
  static constexpr int slot_bytes = kWarps * tile_elems * 2;
  static_assert(K % kSlotRows == 0 && K % cols == 0, "a chain's K is a multiple of 128");
  static constexpr int xn_stride = K + 8;  // rows 16 bytes apart in the banks
  static constexpr int xn_bytes = kMaxRows * xn_stride * 2;
  static constexpr int sums_bytes = kWarps * kMaxRows * cols * 4;
  static constexpr int raw_bytes = kMaxRows * cols * 2;  // the group's rows of a in the block's columns, as read
  static constexpr int misc_bytes = kWarps * 8;  // the warps' parts of the row statistics
  static constexpr int rest = xn_bytes + raw_bytes + sums_bytes + misc_bytes;
  static constexpr int fit = (kSmemLimit - rest) / slot_bytes;
  static constexpr int slots = fit < kMaxSlots ? fit : kMaxSlots;
  static_assert(slots >= 4, "a chain's K leaves no room for its ring");
  static constexpr int bytes = slots * slot_bytes + rest;
};

// Row r of a warp's 16 x C tile holds its C / 8 16-byte pieces in a swizzled
// order, so that the eight rows one ldmatrix phase reads fall in distinct
// banks: at C = 64 (128-byte rows) piece ^ (r & 7), at C = 32 piece ^
// ((r >> 1) & 3), at C = 16 piece ^ ((r >> 2) & 1); at C = 8 eight rows are
// 128 contiguous bytes already.
template <int C> GDL_DEV int tile_at(int row, int piece) {
  const int swizzle = C == 64 ? row & 7 : C == 32 ? (row >> 1) & 3 : C == 16 ? (row >> 2) & 1 : 0;
  return row * C + ((piece ^ swizzle) << 3);
}

// [p, p + bytes) into L2, one 128-byte line per thread of the launch: a
// step's params besides b (bias, norm weights) are read once, after the
// barrier, and would come from DRAM; the step's scope calls this before it.
GDL_DEV void prefetch_l2(const void* p, unsigned long long bytes) {
  const char* c = static_cast<const char*>(p);
  const unsigned long long stride = 128ull * gridDim.x * gridDim.y * blockDim.x;
  const unsigned long long block = blockIdx.y * gridDim.x + blockIdx.x;
  for (unsigned long long at = 128ull * (block * blockDim.x + threadIdx.x); at < bytes; at += stride)
    gdl::prefetch_l2(c + at);
}

// Every block of a row group (gridDim.x of them) arrives once per barrier.
// The counter only grows (launches of one chain never overlap), so a
// barrier's target is the next multiple of the group's size above the
// count the block found: no reset.
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

template <typename T, int K, int C = chain::cols_for(K)> class MatmulChain {
  using L = chain::Layout<K, C>;
  static constexpr int kCols = L::cols;
  static constexpr int kPieces = kCols / 8;                   // 16-byte pieces per row of a tile
  static constexpr int kHalves = kCols >= 16 ? kCols / 16 : 1;  // mma M tiles of 16 columns
  static constexpr int kTileElems = L::tile_elems;
  static constexpr int kSlots = L::slots;
  static constexpr int kStepSlots = K / chain::kSlotRows;

 public:
  // weights[s]: step s's b. barrier: chain::kBarrierBytes of scratch, this
  // chain's only; row group g (blockIdx.y) counts on its own line of it.
  GDL_DEV MatmulChain(const T* const* weights, int steps, unsigned long long* barrier, unsigned char* smem)
      : weights_(weights), steps_(steps),
        barrier_(barrier + (gridDim.y > 1 ? chain::kCounterStride * (1 + blockIdx.y) : 0)) {
    ring_ = reinterpret_cast<T*>(smem);
    xn_ = ring_ + kSlots * chain::kWarps * kTileElems;
    raw_ = xn_ + chain::kMaxRows * L::xn_stride;
    sums_ = reinterpret_cast<float*>(raw_ + chain::kMaxRows * kCols);
    parts_ = reinterpret_cast<float2*>(sums_ + chain::kWarps * chain::kMaxRows * kCols);
    lane_ = threadIdx.x & 31;
    warp_ = threadIdx.x >> 5;
    n0_ = blockIdx.x * kCols;
    row0_ = blockIdx.y * chain::kMaxRows;
  }

  // The first slots of step 0: weights only, so a kernel may call it before
  // it waits for the kernels it depends on (gdl_abi.cuh).
  GDL_DEV void start() {
    if (blockDim.x != chain::kThreads || gridDim.x * kCols != K || gridDim.y > chain::kMaxGroups) __trap();
    for (int g = 0; g < kSlots - 1; ++g) issue(g);
  }

  // rows: all of a's rows; this block takes those of its row group.
  template <typename I, typename Epi, typename Pro>
  GDL_DEV void step(int s, const T* a, T* c, I rows, const Epi& epi, const Pro& pro) {
    if ((long long)rows > (long long)chain::kMaxRows * gridDim.y) __trap();  // the runtime launches the step kernels instead
    const int mine = (int)min((long long)rows - row0_, (long long)chain::kMaxRows);
    if (mine > 0) {
      trace(s, 0);
      if (s > 0) chain::grid_barrier(barrier_);  // a is the previous step's c
      trace(s, 1);
      load_rows(a + (size_t)row0_ * K, mine, pro);
      trace(s, 2);
      multiply_step(s);
      trace(s, 3);
      store(c, mine, epi);
      trace(s, 4);
    }
    if (s == steps_ - 1) {  // a group without rows only waits out its first slots
      cp_async_wait<0>();
      if (mine > 0) print_trace();
    }
  }

 private:
  // The loads of a and the strip's mma are the same code in every step, so
  // they are functions of their own (__noinline__), not inlined once per
  // step: this kernel's speed follows its code size (instruction fetch,
  // docs/performance.md). Only the epilogue (store) differs per step. Each
  // works on a copy of the members (`self`): through `this`, which points
  // to the caller's local memory, every asm "memory" clobber in the loop
  // would reload them from there.
  __device__ __noinline__ void multiply_step(int s) const {
    MatmulChain self = *this;
    self.multiply_slots(s);
  }
  template <typename Pro> __device__ __noinline__ void load_rows(const T* a, int rows, const Pro& pro) const {
    MatmulChain self = *this;
    const Pro p = pro;
    self.stage_rows(a, rows, p);
  }

  // Step s's slots through the tensor cores; the warp's column sums into sums_.
  GDL_DEV void multiply_slots(int s) {
    float d[kHalves][4] = {};
    for (int i = 0; i < kStepSlots; ++i) {
      const int g = s * kStepSlots + i;
      cp_async_wait<kSlots - 2>();  // this thread's copies of slot g have landed
      __syncwarp();                 // and the other lanes' of this warp's tile
      multiply(g, i, d);
      __syncwarp();                 // the slot read before it is refilled
      issue(g + kSlots - 1);
    }
    const int m = lane_ >> 2, r = 2 * (lane_ & 3);
    float* mine = sums_ + warp_ * chain::kMaxRows * kCols;
#pragma unroll
    for (int h = 0; h < kHalves; ++h) {
      const int col = 16 * h + m;
      mine[r * kCols + col] = d[h][0];
      mine[(r + 1) * kCols + col] = d[h][1];
      if constexpr (kCols >= 16) {  // at C = 8, d[0][2..3] are the zero columns 8-15
        mine[r * kCols + col + 8] = d[h][2];
        mine[(r + 1) * kCols + col + 8] = d[h][3];
      }
    }
  }

  // Slot g (of the whole launch): 16 rows per warp of the b of step
  // g / kStepSlots: 16 rows of kPieces 16-byte pieces, one copy per lane
  // and piece (two per lane at C = 32, four at C = 64, half the lanes idle at C = 8).
  GDL_DEV void issue(int g) {
    if (g < steps_ * kStepSlots) {
      const T* b = weights_[g / kStepSlots];
      T* tile = ring_ + ((g % kSlots) * chain::kWarps + warp_) * kTileElems;
      constexpr int kCopies = (chain::kTileRows * kPieces + 31) / 32;  // per lane
#pragma unroll
      for (int j = 0; j < kCopies; ++j) {
        const int q = lane_ + 32 * j;
        if (q >= chain::kTileRows * kPieces) break;  // C = 8: lanes 16-31
        const int row = q / kPieces, piece = q % kPieces;
        const int k = (g % kStepSlots) * chain::kSlotRows + warp_ * chain::kTileRows + row;
        cp_async16(tile + chain::tile_at<kCols>(row, piece), b + (size_t)k * K + n0_ + piece * 8);
      }
    }
    cp_async_commit();
  }

  // mma over one slot: the warp's 16 rows of k, every 16-column half.
  GDL_DEV void multiply(int g, int i, float (&d)[kHalves][4]) {
    const T* tile = ring_ + ((g % kSlots) * chain::kWarps + warp_) * kTileElems;
    const int k = i * chain::kSlotRows + warp_ * chain::kTileRows + 2 * (lane_ & 3);
    const T* xb = xn_ + (lane_ >> 2) * L::xn_stride + k;
    const unsigned b0 = *reinterpret_cast<const unsigned*>(xb);
    const unsigned b1 = *reinterpret_cast<const unsigned*>(xb + 8);
    if constexpr (kCols == 8) {
      // ldmatrix.x2.trans: lanes 0-7 give rows 0-7 of k, lanes 8-15 rows
      // 8-15 (the others' addresses are not read); columns 8-15 of M are zero.
      const unsigned addr = (unsigned)__cvta_generic_to_shared(tile + chain::tile_at<kCols>(lane_ & 15, 0));
      unsigned w[4] = {0u, 0u, 0u, 0u};
      asm volatile("ldmatrix.sync.aligned.m8n8.x2.trans.shared.b16 {%0,%1}, [%2];" : "=r"(w[0]), "=r"(w[2]) : "r"(addr));
      mma16816(d[0], w, b0, b1, T{});
    } else {
      // ldmatrix.x4.trans: lanes 8q .. 8q + 7 give the rows of matrix q: rows
      // 0-7 then 8-15 of k, columns 0-7 then 8-15 of the half.
      const int row = (lane_ & 7) + 8 * (lane_ >> 4);
#pragma unroll
      for (int h = 0; h < kHalves; ++h) {
        const int piece = 2 * h + ((lane_ >> 3) & 1);
        const unsigned addr = (unsigned)__cvta_generic_to_shared(tile + chain::tile_at<kCols>(row, piece));
        unsigned w[4];
        asm volatile("ldmatrix.sync.aligned.m8n8.x4.trans.shared.b16 {%0,%1,%2,%3}, [%4];"
                     : "=r"(w[0]), "=r"(w[1]), "=r"(w[2]), "=r"(w[3])
                     : "r"(addr));
        mma16816(d[h], w, b0, b1, T{});
      }
    }
  }

  // Rows [0, rows) of a into xn_, through the norm prologue, with one read
  // of a: warp w takes row r = w / per_row (per_row = kWarps over the rows
  // rounded up to a power of two) and its piece of `span` 16-byte vectors,
  // which each lane keeps in registers from the statistics (the shifted
  // sums of norm_row_stats, gdl_matmul.cuh, added over the row's warps) to
  // the normalized store. a was written by other blocks of this launch, so
  // it is read with __ldcg (L1 may hold an older copy). Rows of xn_ past
  // `rows` keep what they held: mma's column n only reaches output row n,
  // and store() writes rows below `rows` only.
  template <typename Pro> GDL_DEV void stage_rows(const T* a, int rows, const Pro& pro) {
    constexpr int kRowVectors = K / 8;
    constexpr int kPerLane = kRowVectors / 32;  // the most a lane holds: one warp per row
    int rows_p2 = 1;
    while (rows_p2 < rows) rows_p2 <<= 1;
    const int per_row = chain::kWarps / rows_p2, r = warp_ / per_row, piece = warp_ % per_row;
    const int span = kRowVectors / per_row;
    const bool mine = r < rows;
    const uint4* row = reinterpret_cast<const uint4*>(a) + (size_t)r * kRowVectors + piece * span;
    uint4 v[kPerLane];
#pragma unroll
    for (int j = 0; j < kPerLane; ++j) {
      const int i = lane_ + 32 * j;
      v[j] = mine && i < span ? __ldcg(row + i) : zero16();
    }
    float2 st = make_float2(0.0f, 1.0f);  // (mean, 1 / sqrt(var + eps)) of row r
    if constexpr (Pro::active) {
      const float shift = Pro::center && mine ? num(__ldcg(a + (size_t)r * K)) : 0.0f;
      float sum = 0.0f, squares = 0.0f;
#pragma unroll
      for (int j = 0; j < kPerLane; ++j) {
        if (lane_ + 32 * j >= span) continue;
        float x[8];
        widen<T>(v[j], x);
#pragma unroll
        for (int e = 0; e < 8; ++e) {
          const float d = x[e] - shift;
          sum += d;
          squares = fmaf(d, d, squares);
        }
      }
      float s = warp_sum(sum), q = warp_sum(squares);
      if (per_row > 1) {  // the row's warps add their parts; a warp with a whole row has its sums already
        if (lane_ == 0) parts_[warp_] = make_float2(s, q);
        __syncthreads();
        s = 0.0f, q = 0.0f;
        for (int w = r * per_row; w < (r + 1) * per_row; ++w) s += parts_[w].x, q += parts_[w].y;
      }
      const float mean_d = Pro::center ? s / K : 0.0f;
      const float var = fmaxf(q / K - mean_d * mean_d, 0.0f);
      st = make_float2(shift + mean_d, 1.0f / sqrtf(var + pro.eps));
    }
    if (mine) {
#pragma unroll
      for (int j = 0; j < kPerLane; ++j) {
        const int i = lane_ + 32 * j;
        if (i >= span) continue;
        const int k = (piece * span + i) * 8;
        uint4 out = v[j];
        // The block's columns as read, for an epilogue that reads a (a
        // residual). Not in the loop of loads: this store would wait for them.
        if (k >= n0_ && k < n0_ + kCols) *reinterpret_cast<uint4*>(raw_ + r * kCols + (k - n0_)) = out;
        if constexpr (Pro::active) {
          float x[8];
          widen<T>(out, x);
          unsigned w[4] = {0u, 0u, 0u, 0u};
#pragma unroll
          for (int e = 0; e < 8; ++e) w[e / 2] |= Vec16<T>::bits(cvt<T>(pro.apply(x[e], k + e, &st, 0))) << (16 * (e % 2));
          out = make_uint4(w[0], w[1], w[2], w[3]);
        }
        *reinterpret_cast<uint4*>(xn_ + r * L::xn_stride + k) = out;
      }
    }
    __syncthreads();
  }

  // The warps' sums per column added, then the epilogue: one thread per
  // element (two at C = 64). The epilogue takes the element's index in c and
  // a's element at that index (a residual), from the rows staged above.
  template <typename Epi> GDL_DEV void store(T* c, int rows, const Epi& epi) {
    __syncthreads();
    for (int e = threadIdx.x; e < rows * kCols; e += chain::kThreads) {
      const int row = e / kCols, col = e % kCols;
      float acc = 0.0f;
      for (int w = 0; w < chain::kWarps; ++w) acc += sums_[(w * chain::kMaxRows + row) * kCols + col];
      const long long index = (long long)(row0_ + row) * K + n0_ + col;
      c[index] = cvt<T>(epi(acc, index, num(raw_[row * kCols + col])));
    }
  }

  // GDL_CHAIN_TRACE (defined before this header, a measurement build only):
  // thread 0 of the first and the last block records clock64() at each
  // phase of each step and prints the phases' cycles at the end: the wait at
  // the barrier, the rows of a, the slots' mma, the epilogue and store.
#ifdef GDL_CHAIN_TRACE
  static constexpr int kTraceSteps = 16;
  // In shared memory, not a member: the noinline functions copy the members.
  GDL_DEV static long long* trace_slots() {
    __shared__ long long slots[kTraceSteps * 5];
    return slots;
  }
  GDL_DEV bool tracing() const { return threadIdx.x == 0 && (blockIdx.x == 0 || blockIdx.x == gridDim.x - 1); }
  GDL_DEV void trace(int s, int phase) {
    if (tracing() && s < kTraceSteps) trace_slots()[s * 5 + phase] = clock64();
  }
  GDL_DEV void print_trace() const {
    if (!tracing()) return;
    const long long* t = trace_slots();
    for (int s = 0; s < steps_ && s < kTraceSteps; ++s, t += 5)
      printf("chain trace K=%d block %d step %d: barrier %lld rows %lld mma %lld store %lld cycles\n", K, (int)blockIdx.x,
             s, t[1] - t[0], t[2] - t[1], t[3] - t[2], t[4] - t[3]);
  }
#else
  GDL_DEV void trace(int, int) {}
  GDL_DEV void print_trace() const {}
#endif

  const T* const* weights_;
  int steps_;
  unsigned long long* barrier_;
  T* ring_;
  T* xn_;
  T* raw_;
  float* sums_;
  float2* parts_;
  int lane_, warp_, n0_, row0_;
};

}  // namespace gdl
