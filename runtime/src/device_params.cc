// Shared params regions: one per (Program, device), reference counted by the
// sessions that use it. The Program keeps a weak pointer per device; the
// last session to go frees the memory.
#include "device_params.h"

#include <algorithm>

#include "cuda_util.h"

namespace gdl::rt {

DeviceParams::~DeviceParams() {
  if (!base_) return;
  int current = -1;
  (void)cudaGetDevice(&current);
  (void)cudaSetDevice(device_);
  (void)rt::device_free(base_);
  if (current >= 0) (void)cudaSetDevice(current);
}

void DeviceParams::mark_set(size_t param) {
  std::lock_guard lock(mutex_);
  set_.at(param) = true;
  all_set_.store(std::all_of(set_.begin(), set_.end(), [](bool b) { return b; }), std::memory_order_release);
}

int DeviceParams::first_unset() const {
  std::lock_guard lock(mutex_);
  for (size_t i = 0; i < set_.size(); ++i)
    if (!set_[i]) return static_cast<int>(i);
  return -1;
}

Expected<std::shared_ptr<DeviceParams>> acquire_device_params(const Program::Impl& program, int device) {
  std::lock_guard lock(program.params_mutex);
  if (auto existing = program.params_by_device[device].lock()) return existing;
  unsigned char* base = nullptr;
  uint64_t bytes = program.plan().params_bytes;
  if (bytes > 0) {
    GDL_CUDA_TRY(rt::device_malloc(reinterpret_cast<void**>(&base), bytes),
                 "allocating the params region (" + std::to_string(bytes) + " bytes) on device " + std::to_string(device));
  }
  auto params = std::make_shared<DeviceParams>(device, base, program.params.size());
  program.params_by_device[device] = params;
  return params;
}

}  // namespace gdl::rt
