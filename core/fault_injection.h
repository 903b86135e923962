// Injected failures of the calls gdl makes to CUDA and NVRTC (gdl/testing.h
// fail_call), so that tests can prove each one becomes a clean Status that
// leaks nothing and leaves other sessions working. The sites are the calls a
// healthy gdl can still see refused: memory, streams and events, module
// loads, graph instantiation, NVRTC running out of memory.
#pragma once

#include <cstdint>
#include <string>

namespace gdl {

enum class FaultSite : int {
  kDeviceMalloc,       // cudaMalloc
  kHostMalloc,         // cudaMallocHost
  kStreamCreate,       // cudaStreamCreate
  kEventCreate,        // cudaEventCreate, cudaEventCreateWithFlags
  kLibraryLoad,        // cudaLibraryLoadData
  kGraphInstantiate,   // cudaGraphInstantiate
  kNvrtcCompile,       // nvrtcCompileProgram
  kCount,
};
inline constexpr const char* kFaultSiteNames[] = {"cudaMalloc",          "cudaMallocHost",       "cudaStreamCreate",
                                                  "cudaEventCreate",     "cudaLibraryLoadData", "cudaGraphInstantiate",
                                                  "nvrtcCompileProgram"};
static_assert(sizeof kFaultSiteNames / sizeof kFaultSiteNames[0] == static_cast<size_t>(FaultSite::kCount));

// Counts one call at `site`; true when a test armed this call to fail (the
// caller then reports the failure the real call would have returned).
bool fault_injected(FaultSite site);

// The ledger of the memory gdl holds (gdl/testing.h live_allocations):
// every successful cudaMalloc (site kDeviceMalloc) or cudaMallocHost
// (kHostMalloc) is noted with its size, every free of it released.
void note_allocation(FaultSite site, const void* p, size_t bytes);
void note_release(const void* p);

}  // namespace gdl
