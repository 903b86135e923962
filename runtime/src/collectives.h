// Collectives on the GPU: NCCL loaded at first use, the communicators of
// gdl::Communicator, and the NCCL call of a collective step (core/
// kernel_table.h Kernel::collective).
//
// NCCL is opened with dlopen (libnccl.so.2, or the path in GDL_NCCL_LIBRARY)
// when the first communicator is made, so a program without collectives
// runs where NCCL is not installed, and the runtime library needs no NCCL to
// link.
#pragma once

#include <cuda_runtime_api.h>
#include <nccl.h>

#include <array>
#include <atomic>
#include <cstdint>
#include <shared_mutex>
#include <string>
#include <vector>

#include "gdl/gdl.h"
#include "kernel_table.h"
#include "plan.h"

namespace gdl::rt {

// The NCCL entry points the runtime calls: each member's name, and the
// symbol it is looked up by.
#define GDL_NCCL_ENTRY_POINTS(X)                                                                   \
  X(get_unique_id, ncclGetUniqueId) X(comm_init_rank, ncclCommInitRank) X(comm_init_all, ncclCommInitAll) \
  X(comm_destroy, ncclCommDestroy) X(comm_abort, ncclCommAbort) X(all_reduce, ncclAllReduce)          \
  X(all_gather, ncclAllGather) X(reduce_scatter, ncclReduceScatter) X(group_start, ncclGroupStart)   \
  X(group_end, ncclGroupEnd) X(get_error_string, ncclGetErrorString)

struct NcclApi {
#define GDL_NCCL_MEMBER(member, symbol) decltype(&symbol) member = nullptr;
  GDL_NCCL_ENTRY_POINTS(GDL_NCCL_MEMBER)
#undef GDL_NCCL_MEMBER
};

// The loaded library, opened once per process; Unavailable (saying where it
// looked) when it cannot be opened or lacks an entry point.
Expected<const NcclApi*> nccl();

// "what: ncclX (description)" as a Status: Internal, or Unavailable for a
// system or remote error (a peer that went away).
Status nccl_error(const NcclApi& api, ncclResult_t r, const std::string& what);

// What a collective call moves at these layout dims.
struct CollectiveCall {
  ir::Op op = ir::Op::kAllReduce;
  ncclDataType_t dtype = ncclFloat32;
  ncclRedOp_t reduce = ncclSum;
  size_t count = 0;   // all_reduce: elements; all_gather: per rank sent; reduce_scatter: per rank received
  const void* send = nullptr;
  void* receive = nullptr;
  size_t send_bytes = 0, receive_bytes = 0;
};
CollectiveCall collective_call(const plan::Plan& p, const Kernel& k, const std::vector<int64_t>& layout_dims,
                               unsigned char* arena, const unsigned char* params);

// Every call the program's collectives make over the buckets of the dims in
// their shapes, without addresses, each (op, dtype, reduction, count) once,
// in step order: what NCCL sets up for at a call's first use. The same on
// every rank whose signature matches.
std::vector<CollectiveCall> collective_shapes(const plan::Plan& p, const KernelTable& t);

// Enqueues the call on `stream`.
Status enqueue_collective(const NcclApi& api, ncclComm_t comm, const CollectiveCall& call, cudaStream_t stream);

// What every rank must agree on before its first collective: the group's
// size and, in step order, each collective's op, reduction, dtype and
// argument shape. Ranks that differ would wait for each other forever (or
// combine unrelated memory), so sessions compare this when they start.
struct CollectiveSignature {
  uint64_t hash = 0;   // FNV-1a 64 of the description
  uint64_t calls = 0;  // collectives in the program
  uint64_t ranks = 0;
};
CollectiveSignature collective_signature(const plan::Plan& p, const KernelTable& t);

// The run-time dims a collective's element count follows: they must be
// served by buckets (a captured NCCL call cannot change its count).
uint32_t collective_dims(const plan::Plan& p, const KernelTable& t);

}  // namespace gdl::rt

namespace gdl {

struct Communicator::Impl {
  const rt::NcclApi* api = nullptr;
  ncclComm_t comm = nullptr;
  // Set by abort (from any thread). A session holds `use` shared while it
  // checks the flag and enqueues an NCCL call or launches a graph holding
  // them (a graph already built would replay the aborted calls); abort
  // holds it exclusively, so it never frees `comm` under such a call. The
  // lock spans no wait for the device, which an abort must be able to end.
  std::shared_mutex use;
  std::atomic<bool> aborted{false};
  int rank = 0, ranks = 1, device = 0;
  ~Impl();
};

}  // namespace gdl
