// The generated kernels on the device: loading the module image, choosing
// each step's kernel, the kernel ABI's argument blocks, and launch dims from
// a kernel's LaunchRule.
#pragma once

#include <cuda_runtime_api.h>

#include <algorithm>
#include <cstdint>
#include <functional>
#include <string>
#include <vector>

#include "kernel_table.h"
#include "program_impl.h"

namespace gdl::rt {

// The kernels' `gdl_args` (gdl_abi_types.cuh) with zeroed members: passed
// by value as the third kernel parameter.
struct KernelArgs {
  int32_t dims[kMaxRuntimeDims] = {};
  float scalars[kMaxScalars] = {};
  const unsigned char* inputs[kMaxInputPointers] = {};
};
static_assert(sizeof(KernelArgs) == sizeof(gdl_args), "the kernels' gdl_args");

// The kernels' `gdl_offsets`: passed by value as the fourth kernel
// parameter, Kernel::offsets and zeros after them.
struct KernelOffsets {
  unsigned long long at[kMaxKernelOffsets] = {};
};
static_assert(sizeof(KernelOffsets) == sizeof(gdl_offsets), "the kernels' gdl_offsets");

struct LaunchDims {
  dim3 grid, block;
  unsigned shared_bytes = 0;
  bool operator==(const LaunchDims& o) const {
    return grid.x == o.grid.x && grid.y == o.grid.y && block.x == o.block.x && shared_bytes == o.shared_bytes;
  }
};

// grid.x = max(1, ceil(work elements / items_per_block)), the rest from the rule.
Expected<LaunchDims> launch_dims(const LaunchRule& rule, const std::vector<int64_t>& dims);

// What one launch of a step runs.
struct StepLaunch {
  cudaKernel_t kernel;  // nullptr for a collective step (an NCCL call, collectives.h)
  LaunchDims dims;
  bool cooperative = false;  // every block resident at once (cudaLaunchAttributeCooperative)
  KernelOffsets offsets;     // its buffers' offsets (kernel_table.h)
};

// The input copy kernel's gdl_input_copies (gdl_abi_types.cuh,
// kInputCopySymbol) with zeroed members, passed by value.
struct InputCopies {
  const void* src[kMaxInputCopies] = {};
  void* dst[kMaxInputCopies] = {};
  unsigned long long bytes[kMaxInputCopies] = {};
};
static_assert(sizeof(InputCopies) == sizeof(gdl_input_copies), "the kernel's gdl_input_copies");

// Its launch: an entry per blockIdx.y, blocks of kInputCopyThreads over x,
// one 16-byte vector per thread and block step, at most kInputCopyMaxBlocks
// blocks (what the bus delivers needs no more).
inline constexpr unsigned kInputCopyThreads = 256, kInputCopyMaxBlocks = 64;
inline unsigned input_copy_blocks(unsigned long long bytes) {
  const unsigned long long blocks = (bytes + 16ull * kInputCopyThreads - 1) / (16ull * kInputCopyThreads);
  return static_cast<unsigned>(std::min<unsigned long long>(std::max<unsigned long long>(blocks, 1), kInputCopyMaxBlocks));
}

// The loaded module: a handle per kernel of the program's kernel table,
// and which of them this device can run.
class KernelLibrary {
 public:
  KernelLibrary() = default;
  ~KernelLibrary();
  KernelLibrary(const KernelLibrary&) = delete;
  KernelLibrary& operator=(const KernelLibrary&) = delete;

  // Loads the CUBIN when it was built for this device's arch, else the PTX
  // (JIT-compiled by the driver); gets every kernel and raises the dynamic
  // shared memory limit where a rule asks for it. A cooperative kernel whose
  // blocks do not all fit on this device at once is refused (refusals());
  // any other kernel that cannot run is an error. `device` is current.
  Status load(const Program::Impl& program, int device);

  // The kernel (an index in the kernel table) that computes step `step` at
  // these layout dims: the first of its choices that applies and that this
  // device runs; with multi_step false, kernels of several steps are passed
  // over, and a kernel with a library matmul (kernel_table.h) only where
  // library_ok(kernel index) says the caller can make its call.
  int choose(const KernelTable& t, size_t step, const std::vector<int64_t>& dims, bool multi_step,
             const std::function<bool(int)>& library_ok = {}) const;
  // Kernel k's handle, launch dims at these layout dims and offsets.
  Expected<StepLaunch> launch(const KernelTable& t, int k, const std::vector<int64_t>& dims) const;

  // "kernel 'NAME': why" for each kernel this device cannot run.
  const std::vector<std::string>& refusals() const { return refusals_; }
  const std::string& image() const { return image_; }
  // The module's input copy kernel.
  cudaKernel_t input_copy() const { return input_copy_; }

 private:
  std::vector<cudaLibrary_t> libraries_;  // one per module unit
  cudaKernel_t input_copy_ = nullptr;
  std::vector<cudaKernel_t> kernels_;  // per table kernel; nullptr where this device cannot run it
  std::vector<std::string> refusals_;
  std::string image_;
};

}  // namespace gdl::rt
