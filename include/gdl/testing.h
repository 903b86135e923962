// Hooks for gdl's own tests and for users who test code built on gdl: they
// make failures show that would otherwise pass unseen. Not for production
// runs.
#pragma once

#include <cstdint>
#include <string>

#include "gdl/gdl.h"

namespace gdl::testing {

// Fills every arena byte of the session that does not belong to an input
// (or to the valid-dims block) with `byte` (ordered on the session's
// stream), so that elements a run fails to write show up.
Status poison_arena(Session& session, uint8_t byte = 0xFF);

// From now on, a bind of `session` that pads an input first fills the
// input's whole buffer with 0xFF bytes (NaN in every float dtype), so that
// padding which leaks into a valid result shows.
Status poison_padding(Session& session, bool on = true);

// Makes the next pass through a failpoint `site` ("planner", "codegen",
// "interpreter") fail as a bug in gdl would: the call that reaches it
// returns Status::Internal. NotFound for an unknown site. Process-wide until
// disarm_failpoints().
Status arm_failpoint(const std::string& site);
void disarm_failpoints();

// Fault injection: the `nth` call (0 = the next one) that gdl makes to
// `call` from now on fails as the device or NVRTC would refuse it (out of
// memory; for cudaLibraryLoadData PTX too new for the driver), once; the calls
// before and after it run normally. The calls: "cudaMalloc",
// "cudaMallocHost", "cudaStreamCreate", "cudaEventCreate",
// "cudaLibraryLoadData", "cudaGraphInstantiate", "nvrtcCompileProgram".
// NotFound for any other name. Process-wide, any thread.
Status fail_call(const std::string& call, int64_t nth = 0);
// How many times gdl has made `call` in this process (-1: no such call), so
// a test can count the calls of one operation and fail each in turn.
int64_t call_count(const std::string& call);
// Whether a failure armed by fail_call(call) has not been taken yet.
bool call_failure_pending(const std::string& call);
void clear_call_failures();

// The device memory (cudaMalloc) and pinned host memory (cudaMallocHost)
// that gdl holds now in this process, and in how many blocks: exact, where
// cudaMemGetInfo counts every process on the device and the driver's own
// memory, so a test can show that nothing leaked while the GPU is shared.
struct LiveAllocations {
  int64_t device_bytes = 0;
  int64_t host_bytes = 0;
  int64_t count = 0;
};
LiveAllocations live_allocations();

// Makes the runtime treat every device as allowing at most `bytes` of
// shared memory per block (0: the device's own limit), as a smaller GPU
// would: a kernel that needs more is refused when a session loads it.
void limit_shared_memory(int bytes);

}  // namespace gdl::testing
