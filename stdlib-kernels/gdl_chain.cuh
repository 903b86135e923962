// A chain of square matmul steps in one persistent kernel (gdl::MatmulChain).
//
// Steps s = 0 .. S-1, each c_s = epi_s(pro_s(a_s) @ b_s) with a_{s+1} = c_s,
// every b_s a [K, K] param (f16 or bf16). Launched once, cooperatively, with
// a grid of (K / C) x G blocks of kLaunchThreads threads: block (j, g) owns the
// output columns [C j, C j + C) of rows [8 g, 8 g + 8) of every step, and
// all of K. The blocks of one row group hand each step's rows to the next
// step through a mailbox in global memory (below; at K above kMailboxMaxK,
// a grid barrier over the group's blocks, then a read of c, instead); the
// groups never read each other's rows.
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
// one ring of slots in shared memory that runs across the step
// boundaries.
//
// The producer. A block has kWarps computing warps and one more warp whose
// first thread only issues the ring's copies, slot after slot of the whole
// launch: one tensor copy (cp.async.bulk.tensor, TMA) per slot, a box of
// kSlotRows rows of the block's C columns of b, through the tensor map the
// runtime wrote for the step (ChainKernel::tensor_maps_offset), swizzled
// as tile_at lays the tiles out. A slot has an mbarrier "landed" (the
// copy's bytes) and one "read" (every computing thread). So the weights
// keep streaming while the computing warps exchange rows between steps,
// until the ring is full. At most kInFlight copies are in flight: the
// exchange's loads and barrier go to L2 behind the copies, and a whole
// ring in flight made each step's exchange longer than the stream it
// saved (docs/performance.md, session 15: with contiguous copies, 4 slots
// in flight took W2 H=4096 B=1 from 99 to 87 us in a measurement build, 6
// slots 90, 8 slots 94; with these tensor copies 4 slots 89.4-90.2 us, 3
// slots 91.3-91.6, 6 slots 92.0-92.8, and at C = 64, 16 KiB slots, 3 slots
// 40.5 us for H=1024 B=64 against 42.1 with 4).
// Before, four producer warps of per-lane 16-byte cp.async copies (93 us):
// the copies left the ring slowly enough to need no cap, and a cap made
// them slower (116 us).
//
// The mailbox. Every 8-byte word holds two elements of c and a 32-bit flag
// naming the launch and the step that wrote it, stored with one 64-bit
// store; an aligned 64-bit access is single-copy atomic, so a reader that
// sees the flag it expects holds the data written with it. A block reads
// the next step's rows as soon as they are there, polling only the words
// not yet written: one round trip through L2 where a grid barrier, then a
// read of the rows, took two or three (the barrier alone cost 1.3-1.4 us
// per step, docs/performance.md). Steps alternate between two mailboxes:
// a block writes step s + 2's rows only after it read all of step s + 1's,
// which every block wrote after it read step s's. The flag is the group's
// launch count (its counter, read in step 0, after the kernel's wait for
// the kernels before it, and advanced
// by the group's block 0 at the end, after every block of the group has
// read it) times the steps, plus the step plus one: never 0, what the
// scratch holds before the first launch. A stale word can match only after
// 2^32 steps' writes of its group, that is, never in practice.
//
// A step in a block:
//  1. the group's rows of a_s (step 0: from a; later: from the mailbox,
//     waiting for them, or from a after the barrier) into shared memory
//     (the block needs all of K), with the norm prologue's statistics (over
//     the whole row in step 0 and with mailboxes; after the barrier, from
//     the partial sums every block stored with its part of the rows), the
//     rows normalized (rounded to T, as the other matmul kernels do) or, for
//     a norm without weights or bias above kMailboxMaxK, as they are, the
//     norm then folded into the sums (MatmulChain::fold_of);
//  2. the strip, slot by slot: warp w takes 16 rows of each slot, the tensor
//     cores (mma.m16n8k16) compute out^T = b^T a^T with the C columns as
//     M (in 16-column halves; at C = 8 the upper half of M is zero) and the
//     rows of a as N (and, for a folded norm, the rows' sums and sums of
//     squares, and for layernorm the strip's column sums: the fold's
//     operands, from the rows the block staged);
//  3. the eight warps' sums added in shared memory, the epilogue, the store
//     (and, but in the last step, the rows into the mailbox, or without
//     mailboxes, where the next step's norm is not folded, each row's
//     partial sums for its statistics).
// The computing warps synchronize among themselves with a named barrier
// (computing_warps_sync); the producer warp leaves the kernel once its
// copies have landed.
#pragma once

#include "gdl_matmul.cuh"

namespace gdl {
namespace chain {
constexpr int kThreads = 256, kWarps = kThreads / 32;  // the computing warps
// The producer's warp (its first thread issues the copies); the launch has
// kLaunchThreads threads.
constexpr int kProducerWarps = 1;
constexpr int kLaunchThreads = kThreads + 32 * kProducerWarps;
constexpr int kTensorMapBytes = 128;  // one CUtensorMap: a step's, in the chain's scratch
constexpr int kMaxRows = 8;      // the rows of a are mma's N
constexpr int kTileRows = 16;    // rows of b per warp per slot
constexpr int kSlotRows = kWarps * kTileRows;
constexpr int kSmemLimit = 227 * 1024;  // sm_90's largest shared memory per block
constexpr int kMaxSlots = 24;
constexpr int kBlocks = 128;     // at most one block per SM of an H100/H200 (132 SMs)
constexpr int kMaxGroups = 8;    // row groups of kMaxRows: up to 64 rows
constexpr int kGroupMaxK = 1024; // row groups only where measured (docs/performance.md)
// The exchange area of a chain's scratch: one launch counter per row group,
// each on a 128-byte line of its own, then per row group two mailboxes of
// kMaxRows rows of K / 2 words. The ungrouped kernel is row group 0: it
// shares group 0's counter and mailboxes with the grouped kernel (the two
// never run at once), so a flag never repeats in a mailbox. Chains without
// mailboxes (above kMailboxMaxK, one row group) have instead two sets
// (step parities) of row statistics: per row and block, the sum and the sum
// of squares of the block's columns of c, shifted by the row's first
// element of the step's a, which every block staged (a float2).
constexpr int kCounterBytes = kMaxGroups * 128;
// Mailboxes up to this K; above it, a grid barrier over the group's blocks
// and a read of the rows from c. At K = 4096 the mailbox words (twice the
// rows' bytes) were 2-16 us slower for W2 than the barrier, at K = 1024 1-3
// us faster (docs/performance.md); K = 2048 was not measured.
constexpr int kMailboxMaxK = 1024;
constexpr int kPartialStatsBytes = 2 * kMaxRows * kBlocks * 8;
constexpr unsigned long long exchange_bytes(int k, int groups) {
  return kCounterBytes + (k <= kMailboxMaxK ? (unsigned long long)groups * 2 * kMaxRows * (k / 2) * 8 : kPartialStatsBytes);
}

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
// ring (aligned to 1024 bytes by hand, as the tensor copies' swizzle needs;
// dynamic shared memory is only 16-byte aligned), the normalized rows, the
// warps' column sums, the statistics, the slots' barriers.
template <int K, int C = cols_for(K)> struct Layout {
  static constexpr int cols = C;
  static constexpr int tile_elems = kTileRows * cols;  // one warp's part of a slot: 16 rows of 2 C bytes
  static constexpr int slot_bytes = kWarps * tile_elems * 2;
  static_assert(K % kSlotRows == 0 && K % cols == 0, "a chain's K is a multiple of 128");
  static constexpr int xn_stride = K + 8;  // rows 16 bytes apart in the banks
  static constexpr int xn_bytes = kMaxRows * xn_stride * 2;
  static constexpr int sums_bytes = kWarps * kMaxRows * cols * 4;
  static constexpr int raw_bytes = kMaxRows * cols * 2;  // the group's rows of a in the block's columns, as read
  // The warps' parts of the row statistics (sums, squares, shift), the
  // block's flag for its producer warp (a group with rows), the rows'
  // (mean, 1 / sqrt(var + eps)) for a norm applied as they are staged, the
  // rows' first elements of a in the last two steps (the sums' shift), the
  // warps' parts of the rows' sums of a folded step.
  static constexpr int misc_bytes = kWarps * 16 + 16 + kMaxRows * 8 + 2 * kMaxRows * 4 + kWarps * kMaxRows * 8;
  static constexpr int align_bytes = 1024;  // the ring's alignment, and the most it skips
  static constexpr int rest = xn_bytes + raw_bytes + sums_bytes + misc_bytes + align_bytes;
  static constexpr int slot_barrier_bytes = 2 * 8;  // per slot: landed, read
  static constexpr int fit = (kSmemLimit - rest) / (slot_bytes + slot_barrier_bytes);
  static constexpr int slots = fit < kMaxSlots ? fit : kMaxSlots;
  static_assert(slots >= 4, "a chain's K leaves no room for its ring");
  static constexpr int bytes = slots * (slot_bytes + slot_barrier_bytes) + rest;
};

// Row r of a warp's 16 x C tile holds its C / 8 16-byte pieces in a swizzled
// order, so that the eight rows one ldmatrix phase reads fall in distinct
// banks: at C = 64 (128-byte rows) piece ^ (r & 7), at C = 32 piece ^
// ((r >> 1) & 3), at C = 16 piece ^ ((r >> 2) & 1); at C = 8 eight rows are
// 128 contiguous bytes already. These are the tensor copies' 128-, 64- and
// 32-byte swizzles of a slot whose address is a multiple of 1024 (the
// runtime's maps, chain_tensor_maps.cc).
template <int C> GDL_DEV int tile_at(int row, int piece) {
  const int swizzle = C == 64 ? row & 7 : C == 32 ? (row >> 1) & 3 : C == 16 ? (row >> 2) & 1 : 0;
  return row * C + ((piece ^ swizzle) << 3);
}

// [p, p + bytes) into L2, one 128-byte line per thread of the launch: a
// step's params besides b (bias, norm weights) are read once, after the
// wait for the rows, and would come from DRAM; the step's scope calls this
// before it.
GDL_DEV void prefetch_l2(const void* p, unsigned long long bytes) {
  const char* c = static_cast<const char*>(p);
  const unsigned long long stride = 128ull * gridDim.x * gridDim.y * kThreads;  // the computing warps call it
  const unsigned long long block = blockIdx.y * gridDim.x + blockIdx.x;
  for (unsigned long long at = 128ull * (block * kThreads + threadIdx.x); at < bytes; at += stride)
    gdl::prefetch_l2(c + at);
}

// The computing warps' own barrier (the producer warp never joins it; it
// may have left the kernel).
GDL_DEV void computing_warps_sync() { asm volatile("bar.sync 1, %0;" ::"n"(kThreads) : "memory"); }
// The block's one meeting of both kinds of warps: the computing warps
// arrive (and go on) in step 0, the producer warp waits for them.
constexpr int kHandshakeBarrier = 2;

// The ring's mbarriers (shared memory, 8 bytes each).
GDL_DEV unsigned smem_address(const void* p) { return (unsigned)__cvta_generic_to_shared(p); }
// Shared-memory accesses by 32-bit shared address. The buffers reach the
// noinline step functions through a copy of the members, so plain accesses
// compile to generic ones (LD.E, ST.E), which go through the LSU's global
// path (docs/performance.md, session 17).
GDL_DEV unsigned shared_load(unsigned at) {
  unsigned v;
  asm volatile("ld.shared.b32 %0, [%1];" : "=r"(v) : "r"(at));
  return v;
}
GDL_DEV float shared_load_float(unsigned at) { return __uint_as_float(shared_load(at)); }
GDL_DEV float2 shared_load_float2(unsigned at) {
  float2 v;
  asm volatile("ld.shared.v2.f32 {%0, %1}, [%2];" : "=f"(v.x), "=f"(v.y) : "r"(at));
  return v;
}
GDL_DEV void shared_store(unsigned at, float2 v) {
  asm volatile("st.shared.v2.f32 [%0], {%1, %2};" ::"r"(at), "f"(v.x), "f"(v.y) : "memory");
}
GDL_DEV void shared_store(unsigned at, float v) { asm volatile("st.shared.f32 [%0], %1;" ::"r"(at), "f"(v) : "memory"); }
GDL_DEV void shared_store(unsigned at, uint4 v) {
  asm volatile("st.shared.v4.b32 [%0], {%1, %2, %3, %4};" ::"r"(at), "r"(v.x), "r"(v.y), "r"(v.z), "r"(v.w) : "memory");
}
GDL_DEV void barrier_init(unsigned long long* bar, unsigned count) {
  asm volatile("mbarrier.init.shared::cta.b64 [%0], %1;" ::"r"(smem_address(bar)), "r"(count) : "memory");
}
GDL_DEV void barrier_arrive(unsigned long long* bar) {
  asm volatile("mbarrier.arrive.shared::cta.b64 _, [%0];" ::"r"(smem_address(bar)) : "memory");
}
// Arrives and expects `bytes` more of copies before the phase completes.
GDL_DEV void barrier_arrive_expect(unsigned long long* bar, unsigned bytes) {
  asm volatile("mbarrier.arrive.expect_tx.shared::cta.b64 _, [%0], %1;" ::"r"(smem_address(bar)), "r"(bytes) : "memory");
}
// The box of `map` at (column x, row y) into shared memory at dst; its bytes
// count against bar's expected ones as they land.
GDL_DEV void tensor_copy(void* dst, const void* map, int x, int y, unsigned long long* bar) {
  asm volatile(
      "cp.async.bulk.tensor.2d.shared::cluster.global.tile.mbarrier::complete_tx::bytes [%0], [%1, {%2, %3}], [%4];" ::"r"(
          smem_address(dst)),
      "l"(map), "r"(x), "r"(y), "r"(smem_address(bar))
      : "memory");
}
// Until the phase of the given parity has completed (acquire).
GDL_DEV void barrier_wait(unsigned long long* bar, unsigned parity) {
  asm volatile(
      "{\n .reg .pred done;\n wait_%=:\n"
      " mbarrier.try_wait.parity.shared::cta.b64 done, [%0], %1;\n"
      " @!done bra wait_%=;\n}" ::"r"(smem_address(bar)),
      "r"(parity)
      : "memory");
}

// Every block of a row group (gridDim.x of them) arrives once per barrier
// (chains above kMailboxMaxK). The counter only grows (launches of one
// chain never overlap), so a barrier's target is the next multiple of the
// group's size above the count the block found: no reset.
GDL_DEV void grid_barrier(unsigned long long* counter) {
  computing_warps_sync();
  if (threadIdx.x == 0) {
    unsigned long long old, now;
    asm volatile("atom.add.release.gpu.u64 %0, [%1], 1;" : "=l"(old) : "l"(counter) : "memory");
    const unsigned long long target = (old / gridDim.x + 1) * gridDim.x;
    do {
      asm volatile("ld.acquire.gpu.u64 %0, [%1];" : "=l"(now) : "l"(counter) : "memory");
    } while (now < target);
  }
  computing_warps_sync();
}

// Adds part's sums of n elements, shifted by part.z (part.x: of x - c_p,
// part.y: of its squares), to sum and squares, shifted by c:
// sum (x - c) = s_p + n d and sum (x - c)^2 = q_p + 2 d s_p + n d^2 for
// d = c_p - c.
GDL_DEV void add_shifted_sums(float4 part, float c, float n, float& sum, float& squares) {
  const float d = part.z - c;
  sum += part.x + n * d;
  squares += part.y + d * fmaf(n, d, 2.0f * part.x);
}
// (mean, 1 / sqrt(var + eps)) of a row of K elements from the sums of x -
// shift and of its squares; without kCenter (rmsnorm, shift 0) the mean is
// 0 and var the mean square.
template <bool kCenter, int K> GDL_DEV float2 row_statistics(float sum, float squares, float shift, float eps) {
  const float mean_d = kCenter ? sum / K : 0.0f;
  const float var = fmaxf(squares / K - mean_d * mean_d, 0.0f);
  return make_float2(shift + mean_d, 1.0f / sqrtf(var + eps));
}

// a - b on two elements of T in a word each, rounded to T.
GDL_DEV unsigned sub_pairs(unsigned a, unsigned b, __half) {
  unsigned d;
  asm("sub.rn.f16x2 %0, %1, %2;" : "=r"(d) : "r"(a), "r"(b));
  return d;
}
GDL_DEV unsigned sub_pairs(unsigned a, unsigned b, __nv_bfloat16) {
  unsigned d;
  asm("sub.rn.bf16x2 %0, %1, %2;" : "=r"(d) : "r"(a), "r"(b));
  return d;
}

// Two elements and a flag, one 64-bit store (the mailbox, above).
GDL_DEV void mail_store(unsigned long long* word, unsigned pair, unsigned flag) {
  asm volatile("st.volatile.global.u64 [%0], %1;" ::"l"(word), "l"((unsigned long long)flag << 32 | pair) : "memory");
}

// Eight elements of c: their 4 words, reloaded only where `again` (a
// predicated load, no branch, so that one round's loads all issue before
// the first is compared). Each word is loaded as one 64-bit element (a
// vector access is one access per element), so its data and its flag come
// from the same store.
struct MailVector {
  unsigned long long w[4];
  GDL_DEV void fetch(const unsigned long long* words, bool again) {
    asm volatile(
        "{\n .reg .pred p;\n setp.ne.b32 p, %5, 0;\n"
        " @p ld.volatile.global.v2.u64 {%0, %1}, [%4];\n"
        " @p ld.volatile.global.v2.u64 {%2, %3}, [%4+16];\n}"
        : "+l"(w[0]), "+l"(w[1]), "+l"(w[2]), "+l"(w[3])
        : "l"(words), "r"((int)again));
  }
  GDL_DEV bool carries(unsigned flag) const {
    return (unsigned)(w[0] >> 32) == flag && (unsigned)(w[1] >> 32) == flag && (unsigned)(w[2] >> 32) == flag &&
           (unsigned)(w[3] >> 32) == flag;
  }
  GDL_DEV uint4 data() const { return make_uint4((unsigned)w[0], (unsigned)w[1], (unsigned)w[2], (unsigned)w[3]); }
};
}  // namespace chain

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
    ring_ = reinterpret_cast<T*>(smem + (L::align_bytes - chain::smem_address(smem) % L::align_bytes) % L::align_bytes);
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
      chain::barrier_init(bars_ + i, i % 2 == 0 ? 1 : chain::kThreads);
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
  // us of W2 H=4096 B=8, docs/performance.md, session 18).
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
      chain::barrier_wait(landed(g % kSlots), (g / kSlots) & 1);
  }
  // Slot g of the launch: step g / kStepSlots's rows [kSlotRows i, kSlotRows
  // (i + 1)), i = g % kStepSlots, of the block's columns.
  GDL_DEV void issue_slot(int g) {
    const int slot = g % kSlots, round = g / kSlots;
    const long long since = trace_now();
    const int landing = g - kInFlight;  // at most kInFlight in flight
    if (landing >= 0) chain::barrier_wait(landed(landing % kSlots), (landing / kSlots) & 1);
    if (round > 0) chain::barrier_wait(read(slot), (round - 1) & 1);
    trace_wait(g / kStepSlots, 5, since);
    chain::barrier_arrive_expect(landed(slot), L::slot_bytes);
    chain::tensor_copy(ring_ + slot * chain::kWarps * kTileElems, maps_ + chain::kTensorMapBytes * (g / kStepSlots), n0_,
                       (g % kStepSlots) * chain::kSlotRows, landed(slot));
  }

  // Step s's slots through the tensor cores; the warp's column sums into sums_.
  // With kColumnSums (kFoldCenter) a second mma sums the strip's columns
  // (b times ones) into cs, the same layout as d. A folded step (kFold) also
  // sums its rows and their squares with a third mma (multiply, rs); the
  // warps' parts of those are added here, and the fold then applies to the
  // warp's own part of the sums, before they are added.
  template <int kFold> GDL_DEV void multiply_slots(int s, float eps) {
    constexpr bool kColumnSums = kFold == kFoldCenter;
    float d[kHalves][4] = {};
    float cs[kHalves][4] = {};
    float rs[4] = {};
    // Layernorm's rows are summed shifted by their first element (first_of),
    // as the partial sums are: exact where x and the shift are within a
    // factor of two of each other.
    const unsigned shift = kFold == kFoldCenter ? pair_of(first_of(s, lane_ >> 2)) : 0u;
    for (int i = 0; i < kStepSlots; ++i) {
      const int g = s * kStepSlots + i;
      const long long since = trace_now();
      chain::barrier_wait(landed(g % kSlots), (g / kSlots) & 1);  // the producer's copy of the slot
      trace_wait(s, 4, since);
      multiply<kFold>(g, i, d, cs, rs, shift);
      chain::barrier_arrive(read(g % kSlots));  // one of 256: this lane's ldmatrix has its values
    }
    const int m = lane_ >> 2, r = 2 * (lane_ & 3);
    if constexpr (kFold != kNoFold) {  // rows r and r + 1 of d: (mean, inv) of each
      // Row n's sum of squares is rs's element (n, n), its sum (8 + n, n):
      // lane 4 n + n / 2 holds both (mma's accumulator layout).
      const bool odd = m & 1;  // no indexing of rs by a run-time value: it would live in local memory
      if ((lane_ & 3) == (m >> 1))
        chain::shared_store(chain::smem_address(row_parts() + warp_ * chain::kMaxRows + m),
                            make_float2(odd ? rs[3] : rs[2], odd ? rs[1] : rs[0]));
      chain::computing_warps_sync();
      const float2 lo = row_statistics_of<kFold>(s, r, eps), hi = row_statistics_of<kFold>(s, r + 1, eps);
#pragma unroll
      for (int h = 0; h < kHalves; ++h) {
        if constexpr (kColumnSums) {
          d[h][0] -= lo.x * cs[h][0];
          d[h][1] -= hi.x * cs[h][1];
          d[h][2] -= lo.x * cs[h][2];
          d[h][3] -= hi.x * cs[h][3];
        }
        d[h][0] *= lo.y;
        d[h][1] *= hi.y;
        d[h][2] *= lo.y;
        d[h][3] *= hi.y;
      }
    }
    const unsigned mine = chain::smem_address(sums_ + warp_ * chain::kMaxRows * kCols);  // 4 bytes per column
#pragma unroll
    for (int h = 0; h < kHalves; ++h) {
      const int col = 16 * h + m;
      chain::shared_store(mine + 4 * (r * kCols + col), d[h][0]);
      chain::shared_store(mine + 4 * ((r + 1) * kCols + col), d[h][1]);
      if constexpr (kCols >= 16) {  // at C = 8, d[0][2..3] are the zero columns 8-15
        chain::shared_store(mine + 4 * (r * kCols + col + 8), d[h][2]);
        chain::shared_store(mine + 4 * ((r + 1) * kCols + col + 8), d[h][3]);
      }
    }
  }

  // (mean, 1 / sqrt(var + eps)) of row n from the warps' parts of its
  // sums (multiply_slots), shifted for layernorm.
  template <int kFold> GDL_DEV float2 row_statistics_of(int s, int n, float eps) const {
    constexpr bool kCenter = kFold == kFoldCenter;
    float sum = 0.0f, squares = 0.0f;
#pragma unroll
    for (int w = 0; w < chain::kWarps; ++w) {
      const float2 part = chain::shared_load_float2(chain::smem_address(row_parts() + w * chain::kMaxRows + n));
      sum += part.x;
      squares += part.y;
    }
    return chain::row_statistics<kCenter, K>(sum, squares, kCenter ? first_of(s, n) : 0.0f, eps);
  }

  // mma over one slot: the warp's 16 rows of k, every 16-column half.
  template <int kFold>
  GDL_DEV void multiply(int g, int i, float (&d)[kHalves][4], float (&cs)[kHalves][4], float (&rs)[4], unsigned shift) {
    constexpr bool kColumnSums = kFold == kFoldCenter;
    const T* tile = ring_ + ((g % kSlots) * chain::kWarps + warp_) * kTileElems;
    const int k = i * chain::kSlotRows + warp_ * chain::kTileRows + 2 * (lane_ & 3);
    const unsigned xb = chain::smem_address(xn_ + (lane_ >> 2) * L::xn_stride + k);
    const unsigned b0 = chain::shared_load(xb);
    const unsigned b1 = chain::shared_load(xb + 16);
    if constexpr (kFold != kNoFold) {
      // The rows as both operands, and ones as rows 8-15 of A: element (m,
      // n) of rs sums x_m x_n over the warp's k, (8 + m, n) sums x_n.
      const unsigned x0 = kFold == kFoldCenter ? sub_pairs(b0, shift) : b0;
      const unsigned x1 = kFold == kFoldCenter ? sub_pairs(b1, shift) : b1;
      const unsigned rows[4] = {x0, ones(), x1, ones()};
      mma16816(rs, rows, x0, x1, T{});
    }
    if constexpr (kCols == 8) {
      // ldmatrix.x2.trans: lanes 0-7 give rows 0-7 of k, lanes 8-15 rows
      // 8-15 (the others' addresses are not read); columns 8-15 of M are zero.
      const unsigned addr = (unsigned)__cvta_generic_to_shared(tile + chain::tile_at<kCols>(lane_ & 15, 0));
      unsigned w[4] = {0u, 0u, 0u, 0u};
      asm volatile("ldmatrix.sync.aligned.m8n8.x2.trans.shared.b16 {%0,%1}, [%2];" : "=r"(w[0]), "=r"(w[2]) : "r"(addr));
      mma16816(d[0], w, b0, b1, T{});
      if constexpr (kColumnSums) mma16816(cs[0], w, ones(), ones(), T{});
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
        if constexpr (kColumnSums) mma16816(cs[h], w, ones(), ones(), T{});
      }
    }
  }
  // Two ones of T in a word: the column sums' mma operand.
  static GDL_DEV unsigned ones() { return Vec16<T>::pack(1.0f, 1.0f); }
  // x twice in a word of T (x is a T's value: exact).
  static GDL_DEV unsigned pair_of(float x) { return Vec16<T>::pack(x, x); }
  static GDL_DEV unsigned sub_pairs(unsigned a, unsigned b) { return chain::sub_pairs(a, b, T{}); }

  // Rows [0, rows) of a into xn_, through the norm prologue, with one read
  // of a (step 0) or of the mailbox step s - 1 wrote (waiting for each
  // vector's words until they carry its flag). Returns how the step's norm
  // reaches its mma (fold_of). The rows rounded up to a power of two pick
  // the split (stage_rows_of): the lane's vectors are then a compile-time
  // count, with no test per vector. The general loop (16 vectors a lane at
  // K = 4096, each behind a test of whether the lane had it) was a third of
  // the computing warps' time at W2 H=4096 B=1, in instruction fetch and
  // branches (docs/performance.md, session 17).
  template <typename Pro> GDL_DEV int stage_rows(int s, const T* a, int rows, const Pro& pro) {
    if (rows <= 1) return stage_rows_of<1>(s, a, rows, pro);
    if (rows <= 2) return stage_rows_of<2>(s, a, rows, pro);
    if (rows <= 4) return stage_rows_of<4>(s, a, rows, pro);
    return stage_rows_of<8>(s, a, rows, pro);
  }

  // stage_rows for at most kRows rows (a power of two): warp w takes row r
  // = w / kPerRow and its piece of kSpan 16-byte vectors, which each lane
  // keeps in registers until it stores them, as they are (a folded norm, or
  // none) or normalized. The statistics of a norm applied here (not
  // folded; a folded step sums its rows in the mma): in step 0 and with
  // mailboxes, the shifted sums of the lanes' own vectors (as
  // norm_row_stats, gdl_matmul.cuh), added over the row's warps; later steps
  // without mailboxes add the partial sums every block stored with its part
  // of the rows (store), warp r for row r: a few loads instead of the pass
  // over the whole row. a from c (step 0, or above kMailboxMaxK after the
  // barrier) is read with __ldcg: other blocks of this launch wrote it, and
  // L1 may hold an older copy. Rows of xn_ past `rows` keep what they held:
  // mma's column n only reaches output row n, and store() writes rows below
  // `rows` only.
  template <int kRows, typename Pro> GDL_DEV int stage_rows_of(int s, const T* a, int rows, const Pro& pro) {
    static_assert(kRows <= chain::kWarps && chain::kWarps % kRows == 0, "a power of two of rows up to a warp each");
    constexpr int kRowVectors = K / 8;
    constexpr int kPerRow = chain::kWarps / kRows;  // warps per row
    constexpr int kSpan = kRowVectors / kPerRow;    // vectors per warp
    constexpr int kPerLane = (kSpan + 31) / 32;
    constexpr bool kEveryLane = kSpan % 32 == 0;  // else the last round of vectors leaves lanes out (K = 1024 at one row)
    static_assert(kRowVectors % kPerRow == 0, "a row's vectors split evenly over its warps");
    constexpr int kFold = fold_of<Pro>();
    constexpr int kBlocksPerRow = K / kCols, kPairsPerLane = (kBlocksPerRow / 2 + 31) / 32;
    static_assert(kBlocksPerRow % 2 == 0, "a row's parts in pairs: two blocks' float2 a load");
    const int r = warp_ / kPerRow, piece = warp_ % kPerRow;
    const bool mine = r < rows;
    // Whether the lane holds its vector j: a constant where every lane does.
    const auto has = [&](int j) { return kEveryLane || lane_ + 32 * j < kSpan; };
    const bool from_partials = !kMailbox && Pro::active && kFold == kNoFold && s > 0;
    if (from_partials && !published_) __trap();  // gdlc's publish_stats disagrees with fold_of
    const uint4* row = reinterpret_cast<const uint4*>(a) + (size_t)r * kRowVectors + piece * kSpan;
    uint4 v[kPerLane];
    float4 pairs[kPairsPerLane];  // row warp_'s partial sums, two blocks' a load
    if (s == 0 || !kMailbox) {
#pragma unroll
      for (int j = 0; j < kPerLane; ++j) v[j] = mine && has(j) ? __ldcg(row + lane_ + 32 * j) : zero16();
      if (from_partials) {
        const float4* row_pairs = reinterpret_cast<const float4*>(partial_stats(s - 1, warp_ < rows ? warp_ : 0, 0));
#pragma unroll
        for (int j = 0; j < kPairsPerLane; ++j) {
          const int b = lane_ + 32 * j;
          pairs[j] = warp_ < rows && b < kBlocksPerRow / 2 ? __ldcg(row_pairs + b) : make_float4(0, 0, 0, 0);
        }
      }
    } else {
      // Rounds of loads of the vectors whose words do not all carry the
      // flag yet (bit j of `awaited`), until none is left.
      static_assert(kPerLane <= 32, "a lane's vectors fit the mask of those awaited");
      const unsigned expect = flag(s - 1);
      const unsigned long long* words = mail_row(s - 1, mine ? r : 0) + (size_t)piece * kSpan * 4;
      unsigned awaited = 0;
#pragma unroll
      for (int j = 0; j < kPerLane; ++j)
        if (mine && has(j)) awaited |= 1u << j;
      chain::MailVector m[kPerLane] = {};
      while (awaited != 0) {
#pragma unroll
        for (int j = 0; j < kPerLane; ++j) m[j].fetch(words + 4 * (lane_ + 32 * j), awaited >> j & 1);
#pragma unroll
        for (int j = 0; j < kPerLane; ++j)
          if (m[j].carries(expect)) awaited &= ~(1u << j);
      }
#pragma unroll
      for (int j = 0; j < kPerLane; ++j) v[j] = m[j].data();
    }
    // The row's first element as read (lane 0 of the row's first warp holds
    // it): this step's shift of the partial sums (partial_stats).
    if (!kMailbox && mine && piece == 0 && lane_ == 0) first_of(s, r) = Vec16<T>::elem(v[0].x, 0);
    float2 st = make_float2(0.0f, 1.0f);  // (mean, 1 / sqrt(var + eps)) of row r
    if constexpr (Pro::active && kFold == kNoFold) {  // a folded step sums its rows in the mma
      if (from_partials) {
        if (warp_ < rows) {
          // Every block's sums share the shift first_of(s - 1, row), kept
          // for layernorm and moved to 0 for rmsnorm's plain mean square.
          float sum = 0.0f, squares = 0.0f;
#pragma unroll
          for (int j = 0; j < kPairsPerLane; ++j) {
            sum += pairs[j].x + pairs[j].z;
            squares += pairs[j].y + pairs[j].w;
          }
          sum = warp_sum(sum), squares = warp_sum(squares);
          const float first = first_of(s - 1, warp_), shift = Pro::center ? first : 0.0f;
          float shifted_sum = 0.0f, shifted_squares = 0.0f;
          chain::add_shifted_sums(make_float4(sum, squares, first, 0.0f), shift, (float)K, shifted_sum, shifted_squares);
          if (lane_ == 0)
            stats_[warp_] = chain::row_statistics<Pro::center, K>(shifted_sum, shifted_squares, shift, pro.eps);
        }
        chain::computing_warps_sync();  // the normalized rows below need every row's statistics
        st = stats_[r];
      } else {
        // Each warp shifts by the first element of its piece (lane 0's), a
        // value near the row's mean that it holds already; the row's warps
        // move their sums to the first warp's shift when they add them.
        const float shift = Pro::center ? __shfl_sync(0xffffffffu, Vec16<T>::elem(v[0].x, 0), 0) : 0.0f;
        float sum = 0.0f, squares = 0.0f;
#pragma unroll
        for (int j = 0; j < kPerLane; ++j) {
          if (!has(j)) continue;
          float x[8];
          widen<T>(v[j], x);
#pragma unroll
          for (int e = 0; e < 8; ++e) {
            const float d = x[e] - shift;
            sum += d;
            squares = fmaf(d, d, squares);
          }
        }
        // The row's sums of x - row_shift and of its squares.
        float row_sum = warp_sum(sum), row_squares = warp_sum(squares), row_shift = shift;
        if constexpr (kPerRow > 1) {  // the row's warps add their parts; a warp with a whole row has its sums already
          if (lane_ == 0) parts_[warp_] = make_float4(row_sum, row_squares, shift, 0.0f);
          chain::computing_warps_sync();
          row_shift = parts_[r * kPerRow].z;
          row_sum = 0.0f, row_squares = 0.0f;
#pragma unroll
          for (int w = 0; w < kPerRow; ++w)
            chain::add_shifted_sums(parts_[r * kPerRow + w], row_shift, (float)(kSpan * 8), row_sum, row_squares);
        }
        st = chain::row_statistics<Pro::center, K>(row_sum, row_squares, row_shift, pro.eps);
      }
    }
    if (mine) {
#pragma unroll
      for (int j = 0; j < kPerLane; ++j) {
        if (!has(j)) continue;
        const int k = (piece * kSpan + lane_ + 32 * j) * 8;
        uint4 out = v[j];
        // The block's columns as read, for an epilogue that reads a (a
        // residual). Not in the loop of loads: this store would wait for them.
        if (k >= n0_ && k < n0_ + kCols) chain::shared_store(chain::smem_address(raw_ + r * kCols + (k - n0_)), out);
        if constexpr (Pro::active && kFold == kNoFold) {
          float x[8];
          widen<T>(out, x);
          unsigned w[4];
          // pro.apply rounded to T, two elements per conversion.
#pragma unroll
          for (int e = 0; e < 8; e += 2)
            w[e / 2] = Vec16<T>::pack(pro.normalized(x[e], k + e, &st, 0), pro.normalized(x[e + 1], k + e + 1, &st, 0));
          out = make_uint4(w[0], w[1], w[2], w[3]);
        }
        chain::shared_store(chain::smem_address(xn_ + r * L::xn_stride + k), out);
      }
    }
    chain::computing_warps_sync();
    return kFold;
  }

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
      const unsigned sums = chain::smem_address(sums_ + row * kCols + col);
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
