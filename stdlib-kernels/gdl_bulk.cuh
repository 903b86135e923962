// Bulk copies and mbarriers (gdl_split.cuh, 4; sm_90): one thread moves a
// whole contiguous range of global memory (cp.async.bulk), or a box of a
// tensor through its tensor map (cp.async.bulk.tensor, TMA), into shared
// memory on the copy engine of the multiprocessor, no registers, and an
// mbarrier counts the bytes that have landed. A stage of a ring is one
// barrier: the issuing thread arms it with the bytes to expect, every
// reader waits on its phase.
//
// The one set of these wrappers: the streamed attention (gdl_attention.cuh)
// and the chain's ring (gdl_chain_kernel.cuh) both call them. Where the two
// write an operation in different PTX, each form has a wrapper of its own
// (barrier_init and barrier_init_unfenced, expect_bytes and
// arrive_expect_bytes, wait and wait_ptx_loop), so that each caller keeps
// the instructions it had.
#pragma once

#include "gdl_types.cuh"

namespace gdl {
namespace bulk {
// The 32-bit shared-memory address of p (a pointer into shared memory).
GDL_DEV unsigned shared_address(const void* p) { return (unsigned)__cvta_generic_to_shared(p); }

// ------------------------------------------------------------ barriers
// One thread, before any copy uses the barrier; a __syncthreads must follow.
// One arrival per phase (the issuing thread's expect_bytes), and the fence
// that makes the initialization visible to the copy engine.
GDL_DEV void barrier_init(unsigned long long* barrier) {
  asm volatile("mbarrier.init.shared::cta.b64 [%0], 1;" ::"r"(shared_address(barrier)) : "memory");
  asm volatile("fence.mbarrier_init.release.cluster;" ::: "memory");  // visible to the copy engine
}
// `count` arrivals per phase, and no fence.mbarrier_init (the chain's ring:
// its threads initialize the barriers, then the block's __syncthreads).
GDL_DEV void barrier_init_unfenced(unsigned long long* barrier, unsigned count) {
  asm volatile("mbarrier.init.shared::cta.b64 [%0], %1;" ::"r"(shared_address(barrier)), "r"(count) : "memory");
}

// One arrival on the barrier's current phase (a reader done with a stage).
GDL_DEV void arrive(unsigned long long* barrier) {
  asm volatile("mbarrier.arrive.shared::cta.b64 _, [%0];" ::"r"(shared_address(barrier)) : "memory");
}

// Arms the barrier's current phase: it completes once `bytes` have landed.
// The arrival's state goes to a scratch register.
GDL_DEV void expect_bytes(unsigned long long* barrier, unsigned bytes) {
  asm volatile("{\n\t.reg .b64 state;\n\tmbarrier.arrive.expect_tx.shared::cta.b64 state, [%0], %1;\n\t}" ::"r"(
                   shared_address(barrier)),
               "r"(bytes)
               : "memory");
}
// expect_bytes with the arrival's state discarded (the sink `_`): arrives
// and expects `bytes` more of copies before the phase completes.
GDL_DEV void arrive_expect_bytes(unsigned long long* barrier, unsigned bytes) {
  asm volatile("mbarrier.arrive.expect_tx.shared::cta.b64 _, [%0], %1;" ::"r"(shared_address(barrier)), "r"(bytes)
               : "memory");
}

// Until the barrier's phase `parity` (0 or 1) has completed (acquire): a
// loop here around one try_wait.
GDL_DEV void wait(unsigned long long* barrier, unsigned parity) {
  unsigned done = 0;
  while (!done)
    asm volatile(
        "{\n\t.reg .pred p;\n\tmbarrier.try_wait.parity.shared::cta.b64 p, [%1], %2;\n\tselp.u32 %0, 1, 0, p;\n\t}"
                 : "=r"(done)
                 : "r"(shared_address(barrier)), "r"(parity)
                 : "memory");
}
// The same wait with its loop inside the PTX (a branch back to the
// try_wait until it succeeds).
GDL_DEV void wait_ptx_loop(unsigned long long* barrier, unsigned parity) {
  asm volatile(
      "{\n .reg .pred done;\n wait_%=:\n"
      " mbarrier.try_wait.parity.shared::cta.b64 done, [%0], %1;\n"
      " @!done bra wait_%=;\n}" ::"r"(shared_address(barrier)),
      "r"(parity)
      : "memory");
}

// ------------------------------------------------------------ copies
// global [src, src + bytes) -> shared [dst, ...); both 16-byte aligned, bytes a multiple of 16.
GDL_DEV void copy(void* dst, const void* src, unsigned bytes, unsigned long long* barrier) {
  asm volatile("cp.async.bulk.shared::cluster.global.mbarrier::complete_tx::bytes [%0], [%1], %2, [%3];" ::"r"(
                   shared_address(dst)),
               "l"(src), "r"(bytes), "r"(shared_address(barrier))
               : "memory");
}

// The box of the 2-d tensor map `map` (global memory) at (column x, row y)
// into shared memory at dst; its bytes count against the barrier's expected
// ones as they land.
GDL_DEV void tensor_copy_2d(void* dst, const void* map, int x, int y, unsigned long long* barrier) {
  asm volatile(
      "cp.async.bulk.tensor.2d.shared::cluster.global.tile.mbarrier::complete_tx::bytes [%0], [%1, {%2, %3}], [%4];" ::"r"(
          shared_address(dst)),
      "l"(map), "r"(x), "r"(y), "r"(shared_address(barrier))
      : "memory");
}

// Orders this block's earlier shared-memory writes (the generic proxy)
// before the bulk copies it issues next into the same bytes (the async
// proxy); by the issuing thread, after a barrier of the writers.
GDL_DEV void fence_shared_for_copies() { asm volatile("fence.proxy.async.shared::cta;" ::: "memory"); }
}  // namespace bulk
}  // namespace gdl
