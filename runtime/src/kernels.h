// The generated kernels on the device: loading the module image, the kernel
// ABI's argument block, and launch dims from a step's LaunchRule.
#pragma once

#include <cuda_runtime_api.h>

#include <algorithm>
#include <cstdint>
#include <string>
#include <vector>

#include "codegen.h"
#include "program_impl.h"

namespace gdl::rt {

// Host mirror of the kernels' `gdl_args` (codegen.h): passed by value as the
// third kernel parameter.
struct KernelArgs {
  int32_t dims[kMaxRuntimeDims] = {};
  float scalars[kMaxScalars] = {};
};
static_assert(sizeof(KernelArgs) == 4 * (kMaxRuntimeDims + kMaxScalars), "gdl_args has no padding");

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
  cudaKernel_t kernel;
  LaunchDims dims;
};

// Host mirror of gdl_input_copies (gdl_abi.cuh), the input copy kernel's
// parameter (codegen.h kInputCopySymbol), passed by value.
inline constexpr int kMaxInputCopies = 16;  // GDL_MAX_INPUT_COPIES
struct InputCopies {
  const void* src[kMaxInputCopies] = {};
  void* dst[kMaxInputCopies] = {};
  unsigned long long bytes[kMaxInputCopies] = {};
};
static_assert(sizeof(InputCopies) == 24 * kMaxInputCopies, "gdl_input_copies has no padding");

// Its launch: an entry per blockIdx.y, blocks of kInputCopyThreads over x,
// one 16-byte vector per thread and block step, at most kInputCopyMaxBlocks
// blocks (what the bus delivers needs no more).
inline constexpr unsigned kInputCopyThreads = 256, kInputCopyMaxBlocks = 64;
inline unsigned input_copy_blocks(unsigned long long bytes) {
  const unsigned long long blocks = (bytes + 16ull * kInputCopyThreads - 1) / (16ull * kInputCopyThreads);
  return static_cast<unsigned>(std::min<unsigned long long>(std::max<unsigned long long>(blocks, 1), kInputCopyMaxBlocks));
}

// The loaded module and one kernel handle per plan step (two for a step
// with a large kernel).
class KernelLibrary {
 public:
  KernelLibrary() = default;
  ~KernelLibrary();
  KernelLibrary(const KernelLibrary&) = delete;
  KernelLibrary& operator=(const KernelLibrary&) = delete;

  // Loads the CUBIN when it was built for this device's arch, else the PTX
  // (JIT-compiled by the driver); gets every step's kernel and raises the
  // dynamic shared memory limit where a rule asks for more than 48 KiB.
  // `device` is current. `image` says which one was loaded.
  Status load(const Program::Impl& program, int device);

  // Step `step` (described by `info`) at these layout dims: its kernel,
  // or its large kernel where the rows call for it, and the launch dims.
  Expected<StepLaunch> step_launch(size_t step, const KernelInfo& info, const std::vector<int64_t>& dims) const;

  // Per plan step, the chain kernel (an index in Artifact::chains, codegen.h
  // ChainKernel) that runs it at these layout dims, or -1 where the step's
  // own kernel runs: a chain kernel runs while the rows lie in its range, if
  // the device holds every one of its blocks at once (load() checks).
  std::vector<int> chain_of_steps(const Artifact& a, const std::vector<int64_t>& dims) const;
  // Chain kernel c and its launch dims (grid = its blocks x row groups, launched cooperatively).
  StepLaunch chain_launch(const Artifact& a, size_t c) const;
  // Why chain kernel c never runs on this device ("" when it may).
  const std::string& chain_refusal(size_t c) const { return chain_refusals_.at(c); }
  const std::string& image() const { return image_; }
  // The module's input copy kernel.
  cudaKernel_t input_copy() const { return input_copy_; }

 private:
  cudaLibrary_t library_ = nullptr;
  cudaKernel_t input_copy_ = nullptr;
  std::vector<cudaKernel_t> kernels_;
  std::vector<cudaKernel_t> large_kernels_;  // nullptr where a step has one kernel
  std::vector<cudaKernel_t> chain_kernels_;  // per chain kernel; nullptr where the device cannot hold its blocks
  std::vector<std::string> chain_refusals_;
  std::string image_;
};

}  // namespace gdl::rt
