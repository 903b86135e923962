// gdl::MatmulChain (gdl_chain.cuh has the design): the chain's members and
// layout in shared memory, the launch's setup (produce), one step (step),
// the producer's stream of the weights through the ring, and the store of a
// step's results through its epilogue into c and the mailbox. The step's
// mma and its staging of the rows are in gdl_chain_mma.cuh and
// gdl_chain_rows.cuh; the ring's barriers and copies in gdl_bulk.cuh.
#pragma once

#include "gdl_bulk.cuh"
#include "gdl_chain_layout.cuh"
#include "gdl_chain_primitives.cuh"
#include "gdl_matmul_prologue.cuh"
#include "gdl_mma16816.cuh"
#include "gdl_vec16.cuh"

namespace gdl {

template <typename T, int K, int C = chain::cols_for(K)> class MatmulChain {
  using L = chain::Layout<K, C>;
  static constexpr int kCols = L::cols;
  static constexpr int kHalves = kCols >= 16 ? kCols / 16 : 1;  // mma M tiles of 16 columns
  static constexpr int kTileElems = L::tile_elems;
  static constexpr int kSlots = L::slots;
  static constexpr int kStepSlots = K / chain::kSlotRows;
  static constexpr int kRowWords = K / 2;  // a row in the mailbox: two elements per word
  static constexpr bool kMailbox = K <= chain::kMailboxMaxK;  // else a grid barrier between steps
  static constexpr int kInFlight = kCols == 64 ? 3 : 4;  // the producer's copies issued and not landed, at most

 public:
  // maps: step s's tensor map at maps + kTensorMapBytes s, in global
  // memory. exchange: chain::exchange_bytes(K, groups) of scratch, zero when
  // the session starts, this chain's only; row group g (blockIdx.y) has its
  // own counter (of launches, or of barrier arrivals above kMailboxMaxK)
  // and mailboxes in it.
  GDL_DEV MatmulChain(const unsigned char* maps, int steps, unsigned char* exchange, unsigned char* smem)
      : maps_(maps), steps_(steps),
        counter_(reinterpret_cast<unsigned long long*>(exchange + 128 * blockIdx.y)),
        mail_(reinterpret_cast<unsigned long long*>(exchange + chain::kCounterBytes) +
              (size_t)blockIdx.y * 2 * chain::kMaxRows * kRowWords) {
    ring_ = reinterpret_cast<T*>(smem +
                                 (L::align_bytes - bulk::shared_address(smem) % L::align_bytes) % L::align_bytes);
    xn_ = ring_ + kSlots * chain::kWarps * kTileElems;
    raw_ = xn_ + chain::kMaxRows * L::xn_stride;
    sums_ = reinterpret_cast<float*>(raw_ + chain::kMaxRows * kCols);
    parts_ = reinterpret_cast<float4*>(sums_ + chain::kWarps * chain::kMaxRows * kCols);
    active_ = reinterpret_cast<int*>(parts_ + chain::kWarps);
    stats_ = reinterpret_cast<float2*>(reinterpret_cast<unsigned char*>(active_) + 16);
    firsts_ = reinterpret_cast<float*>(stats_ + chain::kMaxRows);
    bars_ = reinterpret_cast<unsigned long long*>(row_parts() + chain::kWarps * chain::kMaxRows);
    lane_ = threadIdx.x & 31;
    warp_ = threadIdx.x >> 5;
    n0_ = blockIdx.x * kCols;
    row0_ = blockIdx.y * chain::kMaxRows;
  }

  // Sets up the ring's barriers. Then the producer warp streams every
  // step's weights through the ring and returns true (the kernel returns:
  // it reads only the weights and their tensor maps, which no kernel
  // writes, so it need not wait for the kernels before,
  // gdl_abi.cuh); the computing warps return false at once.
  GDL_DEV bool produce() {
    if (blockDim.x != chain::kLaunchThreads || gridDim.x * kCols != K || gridDim.y > chain::kMaxGroups) __trap();
    for (int i = threadIdx.x; i < kSlots * 2; i += blockDim.x)  // landed: the producer's arrival; read: every computing thread
      bulk::barrier_init_unfenced(bars_ + i, i % 2 == 0 ? 1 : chain::kThreads);
    trace_clear();
    __syncthreads();  // the only barrier of all the block's warps
    if (warp_ < chain::kWarps) return false;
    stream();
    return true;
  }

  // rows: all of a's rows; this block takes those of its row group.
  // publish_stats: the next step's norm is not folded (fold_of), so above
  // kMailboxMaxK it reads the rows' statistics from the blocks' partial
  // sums, which this step's store then writes (gdlc knows the next step).
  template <typename I, typename Epi, typename Pro>
  GDL_DEV void step(int s, const T* a, T* c, I rows, const Epi& epi, const Pro& pro, bool publish_stats) {
    if ((long long)rows > (long long)chain::kMaxRows * gridDim.y) __trap();  // the runtime launches the step kernels instead
    const int mine = (int)min((long long)rows - row0_, (long long)chain::kMaxRows);
    // The group's launch count, in the arena: read after the wait for the
    // kernels before (gdl_abi.cuh), with acquire, so before any of this
    // block's mailbox stores, which block 0's advance of it waits for.
    if (kMailbox && s == 0) asm volatile("ld.acquire.gpu.u64 %0, [%1];" : "=l"(launch_) : "l"(counter_) : "memory");
    if (s == 0) {  // tell the producer warp whether the group has rows to stream weights for
      if (threadIdx.x == 0) *active_ = mine > 0;
      asm volatile("bar.arrive %0, %1;" ::"n"(chain::kHandshakeBarrier), "n"(chain::kLaunchThreads) : "memory");
    }
    if (mine > 0) {
      trace(s, 0);
      if (!kMailbox && s > 0) chain::grid_barrier(counter_);  // a is the previous step's c
      const int fold = load_rows(s, a + (size_t)row0_ * K, mine, pro);  // from the mailbox where there is one
      trace(s, 1);
      float eps = 0.0f;
      if constexpr (Pro::active) eps = pro.eps;
      multiply_step(s, fold, eps);
      trace(s, 2);
      store(s, c, mine, epi, publish_stats);
      published_ = publish_stats;
      trace(s, 3);
    }
    if (s == steps_ - 1 && mine > 0) {
      // Every block of the group has read the count: each read it before
      // its first mailbox store, and this block has read all of them.
      if (kMailbox && blockIdx.x == 0 && threadIdx.x == 0)
        asm volatile("st.relaxed.gpu.u64 [%0], %1;" ::"l"(counter_), "l"(launch_ + 1) : "memory");
      print_trace();
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
  __device__ __noinline__ void multiply_step(int s, int fold, float eps) const {
    MatmulChain self = *this;
    if (fold == kFoldCenter)
      self.multiply_slots<kFoldCenter>(s, eps);
    else if (fold == kFoldScale)
      self.multiply_slots<kFoldScale>(s, eps);
    else
      self.multiply_slots<kNoFold>(s, eps);
  }
  template <typename Pro> __device__ __noinline__ int load_rows(int s, const T* a, int rows, const Pro& pro) const {
    MatmulChain self = *this;
    const Pro p = pro;
    return self.stage_rows(s, a, rows, p);
  }

  // How a step's norm prologue reaches its mma (stage_rows decides, per
  // step): kNoFold, the rows staged as the mma reads them (normalized, or no
  // norm); kFoldScale, x staged and the sums scaled by each row's 1 / sqrt(
  // mean square + eps) (rmsnorm); kFoldCenter, x staged and each sum taken
  // to inv (x b - mean sum_k b) (layernorm), with the strip's column sums
  // from a second mma. A folded step takes its rows' statistics from one more
  // mma over the staged rows (multiply_slots), so after the grid barrier it
  // reads no other block's partial sums. Folded only without mailboxes
  // (above kMailboxMaxK; with mailboxes the statistics come with the pass
  // over the rows as they arrive), and only without norm weights or bias
  // (their fold would need them staged).
  static constexpr int kNoFold = 0, kFoldScale = 1, kFoldCenter = 2;
  template <typename Pro> static constexpr int fold_of() {
    return !kMailbox && Pro::active && !Pro::weighted && !Pro::biased ? (Pro::center ? kFoldCenter : kFoldScale) : kNoFold;
  }

  // Row r's statistics as block b stored them in step s (no mailboxes):
  // the sum and the sum of squares of x - first_of(s, r) over the block's
  // columns of c. One shift for every block: the row's first element of
  // step s's a, which every block staged, so that each block's part is 8
  // bytes and the parts add as they are. The parts' loads after the
  // barrier slowed the weights' stream (all of them, 16 bytes a part: 2.4
  // us of W2 H=4096 B=8, docs/performance.md).
  GDL_DEV float2* partial_stats(int s, int r, int b) const {
    return reinterpret_cast<float2*>(mail_) + ((s & 1) * chain::kMaxRows + r) * chain::kBlocks + b;
  }
  GDL_DEV float& first_of(int s, int r) const { return firsts_[(s & 1) * chain::kMaxRows + r]; }
  // Per warp and row: the sum and the sum of squares of a folded step's
  // rows over the warp's k (multiply_slots), after firsts_.
  GDL_DEV float2* row_parts() const { return reinterpret_cast<float2*>(firsts_ + 2 * chain::kMaxRows); }

  // The mailbox words of row r (of this group's kMaxRows) written by step s,
  // and the flag step s writes there in this launch.
  GDL_DEV unsigned long long* mail_row(int s, int r) const { return mail_ + ((s & 1) * chain::kMaxRows + r) * kRowWords; }
  GDL_DEV unsigned flag(int s) const { return (unsigned)(launch_ * (unsigned long long)steps_ + s + 1); }

  // The landed and read barriers of a slot.
  GDL_DEV unsigned long long* landed(int slot) const { return bars_ + slot * 2; }
  GDL_DEV unsigned long long* read(int slot) const { return landed(slot) + 1; }

  // The producer's loop: its first thread copies slot after slot of the
  // whole launch, each once the computing warps have read the slot's last
  // contents, so the stream goes on while they exchange rows between steps.
  // After the first round of slots the warp waits for step 0's word on
  // whether the group has rows; without rows it stops there. The thread
  // leaves once its last copies have landed.
  GDL_DEV void stream() {
    const int total = steps_ * kStepSlots, first = total < kSlots ? total : kSlots;
    if (lane_ == 0)
      for (int g = 0; g < first; ++g) issue_slot(g);
    __syncwarp();
    asm volatile("bar.sync %0, %1;" ::"n"(chain::kHandshakeBarrier), "n"(chain::kLaunchThreads) : "memory");
    if (lane_ != 0) return;
    const int issued = *active_ ? total : first;
    for (int g = first; g < issued; ++g) issue_slot(g);
    for (int g = issued > kSlots ? issued - kSlots : 0; g < issued; ++g)
      bulk::wait_ptx_loop(landed(g % kSlots), (g / kSlots) & 1);
  }
  // Slot g of the launch: step g / kStepSlots's rows [kSlotRows i, kSlotRows
  // (i + 1)), i = g % kStepSlots, of the block's columns.
  GDL_DEV void issue_slot(int g) {
    const int slot = g % kSlots, round = g / kSlots;
    const long long since = trace_now();
    const int landing = g - kInFlight;  // at most kInFlight in flight
    if (landing >= 0) bulk::wait_ptx_loop(landed(landing % kSlots), (landing / kSlots) & 1);
    if (round > 0) bulk::wait_ptx_loop(read(slot), (round - 1) & 1);
    trace_wait(g / kStepSlots, 5, since);
    bulk::arrive_expect_bytes(landed(slot), L::slot_bytes);
    bulk::tensor_copy_2d(ring_ + slot * chain::kWarps * kTileElems, maps_ + chain::kTensorMapBytes * (g / kStepSlots),
                         n0_, (g % kStepSlots) * chain::kSlotRows, landed(slot));
  }

  // Step s's slots through the tensor cores, and the mma of one slot
  // (gdl_chain_mma.cuh).
  template <int kFold> GDL_DEV void multiply_slots(int s, float eps);
  template <int kFold> GDL_DEV float2 row_statistics_of(int s, int n, float eps) const;
  template <int kFold>
  GDL_DEV void multiply(int g, int i, float (&d)[kHalves][4], float (&cs)[kHalves][4], float (&rs)[4], unsigned shift);
  // Two ones of T in a word: the column sums' mma operand.
  static GDL_DEV unsigned ones() { return Vec16<T>::pack(1.0f, 1.0f); }
  // x twice in a word of T (x is a T's value: exact).
  static GDL_DEV unsigned pair_of(float x) { return Vec16<T>::pack(x, x); }
  static GDL_DEV unsigned sub_pairs(unsigned a, unsigned b) { return chain::sub_pairs(a, b, T{}); }

  // Rows [0, rows) of a into xn_, through the norm prologue
  // (gdl_chain_rows.cuh).
  template <typename Pro> GDL_DEV int stage_rows(int s, const T* a, int rows, const Pro& pro);
  template <int kRows, typename Pro> GDL_DEV int stage_rows_of(int s, const T* a, int rows, const Pro& pro);

  // The warps' sums per column added, then the epilogue: one thread per
  // element, or per pair with a mailbox (its words hold two). The epilogue
  // takes the element's index in c and a's element at that index (a
  // residual), from the rows staged above. The elements go to c and, but in
  // the last step, into the mailbox, or without mailboxes (where
  // publish_stats) each row's sum and sum of squares over the block's
  // columns into the partial sums of the next step's statistics
  // (stage_rows_of).
  template <typename Epi> GDL_DEV void store(int s, T* c, int rows, const Epi& epi, bool publish_stats) {
    chain::computing_warps_sync();
    const auto value = [&](int row, int col, long long index) {
      float acc = 0.0f;
      const unsigned sums = bulk::shared_address(sums_ + row * kCols + col);
      for (int w = 0; w < chain::kWarps; ++w) acc += chain::shared_load_float(sums + 4 * w * chain::kMaxRows * kCols);
      return cvt<T>(epi(acc, index, num(raw_[row * kCols + col])));
    };
    if constexpr (kMailbox) {
      const bool mail = s + 1 < steps_;
      const unsigned written = flag(s);
      for (int e = threadIdx.x; e < rows * kCols / 2; e += chain::kThreads) {
        const int row = e / (kCols / 2), col = 2 * (e % (kCols / 2));
        const long long index = (long long)(row0_ + row) * K + n0_ + col;
        const unsigned bits = Vec16<T>::bits(value(row, col, index)) | Vec16<T>::bits(value(row, col + 1, index + 1)) << 16;
        *reinterpret_cast<unsigned*>(c + index) = bits;
        if (mail) chain::mail_store(mail_row(s, row) + (n0_ + col) / 2, bits, written);
      }
      // sums_ and raw_ read before the next step's rows overwrite raw_.
      chain::computing_warps_sync();
    } else {
      // One element per thread (rows * kCols <= kThreads); a row's kCols
      // elements are kCols lanes of one warp (the grid barrier's first
      // synchronization orders sums_ and raw_ before the next step's rows).
      static_assert(chain::kMaxRows * kCols <= chain::kThreads && kCols <= 32, "a row's columns in one warp");
      const int row = threadIdx.x / kCols, col = threadIdx.x % kCols;
      const bool live = row < rows;
      float x = 0.0f;
      if (live) {
        const long long index = (long long)(row0_ + row) * K + n0_ + col;
        const T y = value(row, col, index);
        c[index] = y;
        x = num(y);
      }
      if (publish_stats && s + 1 < steps_ && warp_ * 32 < rows * kCols) {  // the warp holds a row (all its lanes shuffle)
        float sum = live ? x - first_of(s, row) : 0.0f, squares = sum * sum;
#pragma unroll
        for (int o = kCols / 2; o > 0; o >>= 1) {
          sum += __shfl_xor_sync(0xffffffffu, sum, o);
          squares += __shfl_xor_sync(0xffffffffu, squares, o);
        }
        if (live && col == 0) *partial_stats(s, row, blockIdx.x) = make_float2(sum, squares);
      }
    }
  }

  // GDL_CHAIN_TRACE (defined before this header, a measurement build only):
  // thread 0 of the first and the last block records clock64() at each
  // phase of each step and prints the phases' cycles at the end: the rows of
  // a (with the wait for them), the slots' mma, the epilogue and store; and
  // the cycles of the step's slots that thread 0 waited for them to land,
  // and that the producer thread waited before issuing them (for the slot
  // kInFlight before to land, then for the slot to be read: the ring full).
#ifdef GDL_CHAIN_TRACE
  static constexpr int kTraceSteps = 16, kPhases = 6;
  // In global memory, one record per traced block (the ring leaves no
  // shared memory at K = 1024); not a member: the noinline functions copy
  // the members.
  GDL_DEV static bool traced_block() { return blockIdx.y == 0 && (blockIdx.x == 0 || blockIdx.x == gridDim.x - 1); }
  GDL_DEV static long long* trace_slots() {
    static __device__ long long slots[2][kTraceSteps * kPhases];
    return slots[blockIdx.x == 0 ? 0 : 1];
  }
  GDL_DEV bool tracing() const { return threadIdx.x == 0 && traced_block(); }
  GDL_DEV void trace(int s, int phase) {
    if (tracing() && s < kTraceSteps) trace_slots()[s * kPhases + phase] = clock64();
  }
  GDL_DEV static long long trace_now() { return clock64(); }
  GDL_DEV static void trace_clear() {
    if (threadIdx.x == 0 && traced_block())
      for (int i = 0; i < kTraceSteps * kPhases; ++i) trace_slots()[i] = 0;
  }
  GDL_DEV static void trace_wait(int s, int phase, long long since) {
    const bool who = threadIdx.x == 0 || threadIdx.x == chain::kThreads;
    if (who && traced_block() && s < kTraceSteps)
      trace_slots()[s * kPhases + phase] += clock64() - since;
  }
  GDL_DEV void print_trace() const {
    if (!tracing()) return;
    const long long* t = trace_slots();
    for (int s = 0; s < steps_ && s < kTraceSteps; ++s, t += kPhases)
      printf("chain trace K=%d block %d step %d: rows %lld mma %lld store %lld cycles; waited for landed %lld, "
             "producer waited %lld\n",
             K, (int)blockIdx.x, s, t[1] - t[0], t[2] - t[1], t[3] - t[2], t[4], t[5]);
  }
#else
  GDL_DEV void trace(int, int) {}
  GDL_DEV static long long trace_now() { return 0; }
  GDL_DEV static void trace_clear() {}
  GDL_DEV static void trace_wait(int, int, long long) {}
  GDL_DEV void print_trace() const {}
#endif

  // The members are 128 bytes: the noinline functions' copy of them (self)
  // is passed in registers; at 144 bytes it went through the stack.
  const unsigned char* maps_;  // the steps' tensor maps
  int steps_;
  bool published_ = true;  // the step before wrote its partial statistics (step's publish_stats)
  unsigned long long* counter_;  // the group's launch count
  unsigned long long* mail_;     // the group's two mailboxes
  unsigned long long launch_ = 0;  // the count at the start of this launch
  T* ring_;
  T* xn_;
  T* raw_;
  float* sums_;
  float4* parts_;
  int* active_;                 // the block's group has rows (step 0 sets it)
  float2* stats_;               // per row: (mean, 1 / sqrt(var + eps)) of a norm applied as the rows are staged
  float* firsts_;               // per step parity and row: a's first element (first_of)
  unsigned long long* bars_;    // per slot: landed, read
  int lane_, warp_, n0_, row0_;
};
static_assert(sizeof(MatmulChain<__half, 4096>) == 128, "the members of a chain stay at 128 bytes (see maps_)");

}  // namespace gdl
