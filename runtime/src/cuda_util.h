// Small helpers shared by the runtime files: CUDA errors as Status values and
// a host stopwatch. (The exception boundary of the public API is guarded(),
// internal_error.h.)
#pragma once

#include <cuda_runtime_api.h>

#include <chrono>
#include <string>

#include "gdl/status.h"
#include "internal_error.h"

namespace gdl::rt {

// "what: cudaErrorX (description)". No driver or no device is Unavailable:
// the caller cannot fix it by passing something else. Clears the last-error
// slot so that one failure is not reported again by an unrelated call.
inline Status cuda_error(cudaError_t e, const std::string& what) {
  std::string text = what + ": " + cudaGetErrorName(e) + " (" + cudaGetErrorString(e) + ")";
  (void)cudaGetLastError();
  if (e == cudaErrorInsufficientDriver || e == cudaErrorNoDevice || e == cudaErrorDevicesUnavailable)
    return Status::Unavailable("no usable GPU: " + text);
  return Status::Internal(text);
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
