// Small helpers shared by the runtime files: CUDA errors as Status values and
// a host stopwatch. (The exception boundary of the public API is guarded(),
// internal_error.h.)
#pragma once

#include <cuda_runtime_api.h>

#include <chrono>
#include <string>

#include "fault_injection.h"
#include "gdl/status.h"
#include "internal_error.h"

namespace gdl::rt {

// "what: cudaErrorX (description)". No driver or no device is Unavailable:
// the caller cannot fix it by passing something else; out of memory is
// ResourceExhausted: a smaller program or fewer sessions may fit; PTX the
// driver cannot read is FailedPrecondition. Clears the last-error
// slot so that one failure is not reported again by an unrelated call.
inline Status cuda_error(cudaError_t e, const std::string& what) {
  std::string text = what + ": " + cudaGetErrorName(e) + " (" + cudaGetErrorString(e) + ")";
  (void)cudaGetLastError();
  if (e == cudaErrorInsufficientDriver || e == cudaErrorNoDevice || e == cudaErrorDevicesUnavailable)
    return Status::Unavailable("no usable GPU: " + text);
  if (e == cudaErrorMemoryAllocation) return Status::ResourceExhausted(text);
  if (e == cudaErrorUnsupportedPtxVersion)  // PTX from a newer toolkit than the driver
    return Status::FailedPrecondition(text + ": update the driver, or compile for this device's arch so its CUBIN is used");
  return Status::Internal(text);
}

// Whether `device` names a device of this machine: Unavailable without any,
// InvalidArgument for an index out of range.
inline Status check_device_index(int device) {
  int count = 0;
  if (const cudaError_t e = cudaGetDeviceCount(&count); e != cudaSuccess) return cuda_error(e, "counting CUDA devices");
  if (count == 0) return Status::Unavailable("no usable GPU: the CUDA runtime found no device");
  if (device < 0 || device >= count)
    return Status::InvalidArgument("device " + std::to_string(device) + " does not exist; there are " +
                                   std::to_string(count) + " devices");
  return Status::Ok();
}

// The CUDA calls that tests can make fail (gdl/testing.h fail_call): each
// asks its fault site first and returns what the device would on refusal.
// The allocations are noted in the ledger (testing::live_allocations) and
// freed through device_free and host_free, which release them there.
inline cudaError_t device_malloc(void** p, size_t bytes) {
  if (fault_injected(FaultSite::kDeviceMalloc)) return cudaErrorMemoryAllocation;
  const cudaError_t e = cudaMalloc(p, bytes);
  if (e == cudaSuccess) note_allocation(FaultSite::kDeviceMalloc, *p, bytes);
  return e;
}
inline cudaError_t host_malloc(void** p, size_t bytes) {
  if (fault_injected(FaultSite::kHostMalloc)) return cudaErrorMemoryAllocation;
  const cudaError_t e = cudaMallocHost(p, bytes);
  if (e == cudaSuccess) note_allocation(FaultSite::kHostMalloc, *p, bytes);
  return e;
}
inline cudaError_t device_free(void* p) {
  note_release(p);
  return cudaFree(p);
}
inline cudaError_t host_free(void* p) {
  note_release(p);
  return cudaFreeHost(p);
}
inline cudaError_t stream_create(cudaStream_t* s) {
  return fault_injected(FaultSite::kStreamCreate) ? cudaErrorMemoryAllocation : cudaStreamCreate(s);
}
inline cudaError_t event_create(cudaEvent_t* e, unsigned flags = cudaEventDefault) {
  return fault_injected(FaultSite::kEventCreate) ? cudaErrorMemoryAllocation : cudaEventCreateWithFlags(e, flags);
}
inline cudaError_t graph_instantiate(cudaGraphExec_t* exec, cudaGraph_t graph) {
  return fault_injected(FaultSite::kGraphInstantiate) ? cudaErrorMemoryAllocation : cudaGraphInstantiate(exec, graph, 0);
}
inline cudaError_t library_load(cudaLibrary_t* library, const void* code) {
  if (fault_injected(FaultSite::kLibraryLoad)) return cudaErrorUnsupportedPtxVersion;
  return cudaLibraryLoadData(library, code, nullptr, nullptr, 0, nullptr, nullptr, 0);
}

// Evaluates `what` (a std::string expression) only when the call failed.
#define GDL_CUDA_TRY(call, what)                                 \
  do {                                                           \
    cudaError_t gdl_cuda_err_ = (call);                          \
    if (gdl_cuda_err_ != cudaSuccess)                            \
      return ::gdl::rt::cuda_error(gdl_cuda_err_, (what));       \
  } while (0)

#define GDL_RETURN_IF_ERROR(expr)              \
  do {                                         \
    ::gdl::Status gdl_status_ = (expr);        \
    if (!gdl_status_.ok()) return gdl_status_; \
  } while (0)

class Stopwatch {
 public:
  Stopwatch() : start_(std::chrono::steady_clock::now()) {}
  double elapsed_us() const {
    return std::chrono::duration<double, std::micro>(std::chrono::steady_clock::now() - start_).count();
  }

 private:
  std::chrono::steady_clock::time_point start_;
};

}  // namespace gdl::rt
