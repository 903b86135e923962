// Pieces shared by the memory-bound kernels (matmul, attention):
//
// 1. Vec16<T> / load16: 16 bytes of storage elements (8 f16 or bf16, 4 f32)
//    as four 32-bit words, widened to float at use. load16 issues one
//    16-byte load when the caller vouches for the alignment and the vector
//    is whole; otherwise (an unaligned operand, a ragged edge) it loads the
//    valid elements one by one and zero-fills the rest, so every caller is
//    correct for any shape and only faster where the shape allows.
// 2. SplitScratch / split_arrive: one output tile computed in `splits`
//    parts by different blocks of one launch. Each block writes its part to
//    the step's scratch (a partial tile), then takes a ticket; the block
//    that takes the last ticket combines the parts and resets the ticket to
//    zero, so the next launch (a graph replay) starts from zero again. The
//    tickets start at zero because the runtime zeroes every step's scratch
//    once when a session starts (plan::Step::scratch). No block ever waits
//    for another, so any grid size and any block order is correct.
// 3. Thread-block clusters (sm_90): the block's rank in its cluster, the
//    cluster barrier, and loads from another block's shared memory of the
//    cluster (distributed shared memory), for a split whose parts stay in
//    shared memory (gdl_matmul.cuh, cluster split).
// 4. Bulk copies (sm_90): one thread moves a whole contiguous range of
//    global memory into shared memory (cp.async.bulk, the copy engine of
//    the multiprocessor, no registers), and an mbarrier counts the bytes
//    that have landed. A stage of a ring is one barrier: the issuing thread
//    arms it with the bytes to expect, every reader waits on its phase.
// 5. mma16816: one m16n8k16 tensor-core tile (f16 or bf16 in, f32
//    accumulators), for the chain and the streamed attention.
#pragma once

#include "gdl_types.cuh"

namespace gdl {

// ------------------------------------------------------------ 16-byte vectors
template <typename T> struct Vec16;
template <> struct Vec16<float> {
  static constexpr int n = 4;
  static GDL_DEV unsigned bits(float x) { return __float_as_uint(x); }
  static GDL_DEV float elem(unsigned w, int) { return __uint_as_float(w); }
};
// pack(lo, hi): both rounded to the nearest T (ties to even), lo in the low
// half of the word, by one paired conversion: the bf16 conversion of one
// element is a slow one on sm_90 (docs/performance.md, session 14).
template <> struct Vec16<__half> {
  static constexpr int n = 8;
  static GDL_DEV unsigned bits(__half x) { return __half_as_ushort(x); }
  static GDL_DEV unsigned pack(float lo, float hi) {
    const __half2 h = __floats2half2_rn(lo, hi);
    return *reinterpret_cast<const unsigned*>(&h);
  }
  static GDL_DEV float elem(unsigned w, int half) {
    return __half2float(__ushort_as_half((unsigned short)(half ? w >> 16 : w & 0xffffu)));
  }
};
template <> struct Vec16<__nv_bfloat16> {
  static constexpr int n = 8;
  static GDL_DEV unsigned bits(__nv_bfloat16 x) { return __bfloat16_as_ushort(x); }
  static GDL_DEV unsigned pack(float lo, float hi) {
    const __nv_bfloat162 h = __floats2bfloat162_rn(lo, hi);
    return *reinterpret_cast<const unsigned*>(&h);
  }
  // A bf16 is the upper half of the float with the same bits.
  static GDL_DEV float elem(unsigned w, int half) { return __uint_as_float(half ? w & 0xffff0000u : w << 16); }
};

// Element j of a vector (j a compile-time constant after unrolling).
template <typename T> GDL_DEV float vec_elem(const uint4& r, int j) {
  constexpr int per_word = Vec16<T>::n / 4;  // 1 or 2
  const int word = j / per_word;
  const unsigned w = word == 0 ? r.x : word == 1 ? r.y : word == 2 ? r.z : r.w;
  return Vec16<T>::elem(w, j % per_word);
}

template <typename T> GDL_DEV void widen(const uint4& r, float (&f)[Vec16<T>::n]) {
#pragma unroll
  for (int j = 0; j < Vec16<T>::n; ++j) f[j] = vec_elem<T>(r, j);
}
// f16 pairs at once: one conversion per element, straight from either half of a word.
template <> GDL_DEV void widen<__half>(const uint4& r, float (&f)[8]) {
  const unsigned words[4] = {r.x, r.y, r.z, r.w};
#pragma unroll
  for (int i = 0; i < 4; ++i) {
    const float2 pair = __half22float2(*reinterpret_cast<const __half2*>(&words[i]));
    f[2 * i] = pair.x;
    f[2 * i + 1] = pair.y;
  }
}

GDL_DEV uint4 zero16() { return make_uint4(0u, 0u, 0u, 0u); }

// p[0, n) as one vector, zeros at j >= valid (valid may be <= 0 or > n).
// `vector`: p is 16-byte aligned whenever valid >= n.
template <typename T> GDL_DEV uint4 load16(const T* p, int valid, bool vector) {
  constexpr int n = Vec16<T>::n, per_word = n / 4;
  if (vector && valid >= n) return __ldg(reinterpret_cast<const uint4*>(p));
  unsigned w[4] = {0u, 0u, 0u, 0u};
#pragma unroll
  for (int j = 0; j < n; ++j)
    if (j < valid) w[j / per_word] |= Vec16<T>::bits(p[j]) << (16 * (j % per_word));
  return make_uint4(w[0], w[1], w[2], w[3]);
}

// How many of the n elements of a vector starting at `offset` lie before `end` (0..n).
template <int n, typename I> GDL_DEV int vec_valid(I offset, I end) {
  const I left = end - offset;
  return left >= (I)n ? n : (left > 0 ? (int)left : 0);
}

template <typename T> GDL_DEV bool aligned16(const T* p) { return (reinterpret_cast<unsigned long long>(p) & 15ull) == 0; }

// ------------------------------------------------------------ split tiles
struct SplitScratch {
  unsigned* tickets;  // one per output tile; zero between launches
  float* partials;    // [splits][tiles][tile elements], written before the ticket is taken
  int splits;         // 1: no scratch, the block writes its tile directly
};

// Called by every thread of the block once its part of the tile is stored
// (with __stcg). True in every thread of the block that arrived last; that
// block may then read every part (with __ldcg) and has already reset the
// ticket for the next launch. One thread fences for the block: the barrier
// orders the other threads' stores before its fence, and a device-scope
// fence is cumulative (the pattern of a grid-wide barrier). A fence in
// every thread cost each of them a wait for its own stores and an L1
// invalidation (MEMBAR.SC, CCTL.IVALL in the SASS); in ncu's samples of the
// W2 tiled matmul it was the instruction with the most warp stalls.
GDL_DEV bool split_arrive(unsigned* ticket, int splits) {
  __shared__ int last;
  __syncthreads();  // every thread's part is stored
  if (threadIdx.x == 0) {
    __threadfence();  // the block's part is visible device-wide before the ticket is taken
    const unsigned arrived = atomicAdd(ticket, 1u);
    last = arrived + 1u == (unsigned)splits;
    if (last) {
      atomicExch(ticket, 0u);  // every part has arrived: nobody else touches it in this launch
      __threadfence();         // the other parts' stores are visible to the reads after the barrier
    }
  }
  __syncthreads();
  return last != 0;
}

// ------------------------------------------------------------ clusters
GDL_DEV unsigned cluster_rank() {
  unsigned r;
  asm volatile("mov.u32 %0, %%cluster_ctarank;" : "=r"(r));
  return r;
}
GDL_DEV void cluster_sync() {
  asm volatile("barrier.cluster.arrive.release.aligned;\n\tbarrier.cluster.wait.acquire.aligned;" ::: "memory");
}
// The address of p (this block's shared memory) in block `rank`'s.
GDL_DEV unsigned cluster_map(const void* p, unsigned rank) {
  const unsigned local = (unsigned)__cvta_generic_to_shared(p);
  unsigned remote;
  asm volatile("mapa.shared::cluster.u32 %0, %1, %2;" : "=r"(remote) : "r"(local), "r"(rank));
  return remote;
}
GDL_DEV float cluster_load(unsigned address) {
  float v;
  asm volatile("ld.shared::cluster.f32 %0, [%1];" : "=f"(v) : "r"(address) : "memory");
  return v;
}
GDL_DEV float4 cluster_load4(unsigned address) {
  float4 v;
  asm volatile("ld.shared::cluster.v4.f32 {%0, %1, %2, %3}, [%4];" : "=f"(v.x), "=f"(v.y), "=f"(v.z), "=f"(v.w)
               : "r"(address) : "memory");
  return v;
}

// ------------------------------------------------------------ tensor cores
// d += a b for one m16n8k16 tile (row.col, f32 accumulators), f16 or bf16
// by the type of the last argument; the fragments as the PTX ISA lays them.
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

// ------------------------------------------------------------ bulk copies
namespace bulk {
GDL_DEV unsigned shared_address(const void* p) { return (unsigned)__cvta_generic_to_shared(p); }

// One thread, before any copy uses the barrier; a __syncthreads must follow.
GDL_DEV void barrier_init(unsigned long long* barrier) {
  asm volatile("mbarrier.init.shared::cta.b64 [%0], 1;" ::"r"(shared_address(barrier)) : "memory");
  asm volatile("fence.mbarrier_init.release.cluster;" ::: "memory");  // visible to the copy engine
}

// Arms the barrier's current phase: it completes once `bytes` have landed.
GDL_DEV void expect_bytes(unsigned long long* barrier, unsigned bytes) {
  asm volatile("{\n\t.reg .b64 state;\n\tmbarrier.arrive.expect_tx.shared::cta.b64 state, [%0], %1;\n\t}" ::"r"(
                   shared_address(barrier)),
               "r"(bytes)
               : "memory");
}

// global [src, src + bytes) -> shared [dst, ...); both 16-byte aligned, bytes a multiple of 16.
GDL_DEV void copy(void* dst, const void* src, unsigned bytes, unsigned long long* barrier) {
  asm volatile("cp.async.bulk.shared::cluster.global.mbarrier::complete_tx::bytes [%0], [%1], %2, [%3];" ::"r"(
                   shared_address(dst)),
               "l"(src), "r"(bytes), "r"(shared_address(barrier))
               : "memory");
}

// Orders this block's earlier shared-memory writes (the generic proxy)
// before the bulk copies it issues next into the same bytes (the async
// proxy); by the issuing thread, after a barrier of the writers.
GDL_DEV void fence_shared_for_copies() { asm volatile("fence.proxy.async.shared::cta;" ::: "memory"); }

// Until the barrier's phase `parity` (0 or 1) has completed.
GDL_DEV void wait(unsigned long long* barrier, unsigned parity) {
  unsigned done = 0;
  while (!done)
    asm volatile(
        "{\n\t.reg .pred p;\n\tmbarrier.try_wait.parity.shared::cta.b64 p, [%1], %2;\n\tselp.u32 %0, 1, 0, p;\n\t}"
                 : "=r"(done)
                 : "r"(shared_address(barrier)), "r"(parity)
                 : "memory");
}
}  // namespace bulk

}  // namespace gdl
