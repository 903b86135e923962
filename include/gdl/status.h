// Status and Expected<T>: how every public gdl operation reports failure.
// No exception crosses the public API; a failed call returns a Status whose
// message says what was wrong and, where it helps, what to do instead.
#pragma once

#include <cstdio>
#include <optional>
#include <string>
#include <utility>

namespace gdl {

enum class StatusCode {
  kOk = 0,
  kInvalidArgument,   // the caller passed something wrong (name, shape, dtype, size)
  kNotFound,          // a named input, param, scalar or output does not exist
  kOutOfRange,        // a run-time dim outside its declared bounds
  kFailedPrecondition,// the call is not valid in the current state (e.g. read before run)
  kDataLoss,          // a corrupt, truncated or mismatched artifact
  kUnavailable,       // no GPU, no driver
  kResourceExhausted, // the device or the host ran out of memory (or another resource)
  kCompileError,      // the program was rejected; message holds the diagnostics
  kInternal,          // a bug in gdl or an unexpected CUDA / NVRTC failure
};

class Status {
 public:
  Status() = default;
  Status(StatusCode code, std::string message) : code_(code), message_(std::move(message)) {}

  static Status Ok() { return {}; }
  static Status InvalidArgument(std::string m) { return {StatusCode::kInvalidArgument, std::move(m)}; }
  static Status NotFound(std::string m) { return {StatusCode::kNotFound, std::move(m)}; }
  static Status OutOfRange(std::string m) { return {StatusCode::kOutOfRange, std::move(m)}; }
  static Status FailedPrecondition(std::string m) { return {StatusCode::kFailedPrecondition, std::move(m)}; }
  static Status DataLoss(std::string m) { return {StatusCode::kDataLoss, std::move(m)}; }
  static Status Unavailable(std::string m) { return {StatusCode::kUnavailable, std::move(m)}; }
  static Status ResourceExhausted(std::string m) { return {StatusCode::kResourceExhausted, std::move(m)}; }
  static Status CompileError(std::string m) { return {StatusCode::kCompileError, std::move(m)}; }
  static Status Internal(std::string m) { return {StatusCode::kInternal, std::move(m)}; }

  bool ok() const { return code_ == StatusCode::kOk; }
  StatusCode code() const { return code_; }
  const std::string& message() const { return message_; }
  std::string ToString() const;

 private:
  StatusCode code_ = StatusCode::kOk;
  std::string message_;
};

const char* StatusCodeName(StatusCode code);

// A value or the Status that explains why there is none.
template <typename T>
class Expected {
 public:
  Expected(T value) : value_(std::move(value)) {}
  Expected(Status status) : status_(std::move(status)) {}

  bool ok() const { return value_.has_value(); }
  explicit operator bool() const { return ok(); }
  const Status& status() const { return status_; }

  T& value() & { return *value_; }
  const T& value() const& { return *value_; }
  T&& value() && { return std::move(*value_); }
  T& operator*() & { return *value_; }
  const T& operator*() const& { return *value_; }
  T* operator->() { return &*value_; }
  const T* operator->() const { return &*value_; }

 private:
  std::optional<T> value_;
  Status status_;
};

}  // namespace gdl

// For a host program's main-like function: evaluates an expression that
// gives a gdl::Status and, when it failed, prints the expression and the
// status to stderr and returns `exit_code` from the enclosing function.
#define GDL_EXIT_ON_ERROR(expr, exit_code)                                             \
  do {                                                                               \
    ::gdl::Status gdl_exit_status_ = (expr);                                         \
    if (!gdl_exit_status_.ok()) {                                                    \
      std::fprintf(stderr, "error: %s: %s\n", #expr, gdl_exit_status_.ToString().c_str()); \
      return exit_code;                                                              \
    }                                                                                \
  } while (0)
