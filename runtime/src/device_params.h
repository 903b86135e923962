// The params region of one Program on one device, shared by every session
// of that program there (weights are bound once, not once per session).
#pragma once

#include <atomic>
#include <memory>
#include <mutex>
#include <vector>

#include "program_impl.h"

namespace gdl::rt {

class DeviceParams {
 public:
  DeviceParams(int device, unsigned char* base, size_t param_count)
      : device_(device), base_(base), set_(param_count, false), all_set_(param_count == 0) {}
  ~DeviceParams();
  DeviceParams(const DeviceParams&) = delete;
  DeviceParams& operator=(const DeviceParams&) = delete;

  unsigned char* base() const { return base_; }  // nullptr when the program has no params
  void mark_set(size_t param);
  bool all_set() const { return all_set_.load(std::memory_order_acquire); }
  // The first param never set, or -1.
  int first_unset() const;

 private:
  int device_;
  unsigned char* base_;
  mutable std::mutex mutex_;
  std::vector<bool> set_;
  std::atomic<bool> all_set_{false};
};

// The region of `program` on `device`: the existing one while any session
// holds it, else a new cudaMalloc of plan.params_bytes. The caller has made
// `device` current.
Expected<std::shared_ptr<DeviceParams>> acquire_device_params(const Program::Impl& program, int device);

}  // namespace gdl::rt
