// The chain's device primitives (gdl::MatmulChain, gdl_chain.cuh): the
// ring's swizzle (tile_at), the L2 prefetch of a step's params, the
// computing warps' named barrier, shared-memory accesses by 32-bit address,
// the grid barrier of a row group (above kMailboxMaxK), the row statistics'
// arithmetic, and the mailbox's words (mail_store, MailVector). The ring's
// mbarriers and tensor copies are gdl_bulk.cuh's.
//
// The mailbox. Every 8-byte word holds two elements of c and a 32-bit flag
// naming the launch and the step that wrote it, stored with one 64-bit
// store; an aligned 64-bit access is single-copy atomic, so a reader that
// sees the flag it expects holds the data written with it (gdl_chain.cuh
// has the whole protocol).
#pragma once

#include "gdl_abi.cuh"
#include "gdl_chain_layout.cuh"
#include "gdl_types.cuh"

namespace gdl {
namespace chain {
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

// Shared-memory accesses by 32-bit shared address. The buffers reach the
// noinline step functions through a copy of the members, so plain accesses
// compile to generic ones (LD.E, ST.E), which go through the LSU's global
// path (docs/performance.md).
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
}  // namespace gdl
