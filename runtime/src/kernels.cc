// Loading the generated kernels and computing their launch dims.
//
// KernelLibrary::step_launch: the kernel of a step for a run's dims (its
// large kernel when the rows call for it) and that kernel's launch dims.
//
// KernelLibrary::load:
// 1. Read the device's compute capability; use the CUBIN if the artifact's
//    arch is exactly this one, else the PTX (the driver JIT-compiles it).
// 2. cudaLibraryLoadData the image (context-independent; the runtime loads
//    it into the device's context when needed).
// 3. cudaLibraryGetKernel for each step's symbol and its large kernel's
//    (codegen.h LargeKernel; steps may share a kernel).
// 4. For rules with dynamic shared memory, raise the kernel's limit on this
//    device (checked against the device's opt-in max).
// 4b. The input copy kernel (codegen.h kInputCopySymbol).
// 5. Each chain kernel (codegen.h ChainKernel) the same way, then whether
//    the device holds all its blocks at once (cooperative launch support,
//    the occupancy calculator times the multiprocessors): where it does
//    not, the chain is refused and its steps' kernels serve every run.
#include "kernels.h"

#include <map>

#include "cuda_util.h"

namespace gdl::rt {

Expected<LaunchDims> launch_dims(const LaunchRule& rule, const std::vector<int64_t>& dims) {
  int64_t work = element_count(rule.work, dims);
  int64_t blocks = std::max<int64_t>(1, (work + rule.items_per_block - 1) / rule.items_per_block);
  if (blocks > INT32_MAX)
    return Status::OutOfRange("a kernel needs " + std::to_string(blocks) + " blocks, more than a grid holds");
  LaunchDims l;
  l.grid = dim3(static_cast<unsigned>(blocks), rule.grid_y, 1);
  l.block = dim3(rule.block, 1, 1);
  l.shared_bytes = rule.shared_bytes;
  return l;
}

KernelLibrary::~KernelLibrary() {
  if (library_) (void)cudaLibraryUnload(library_);
}

Status KernelLibrary::load(const Program::Impl& program, int device) {
  const Artifact& a = program.artifact;
  if (a.kernels.empty()) return Status::Ok();
  int major = 0, minor = 0;
  GDL_CUDA_TRY(cudaDeviceGetAttribute(&major, cudaDevAttrComputeCapabilityMajor, device), "reading the compute capability");
  GDL_CUDA_TRY(cudaDeviceGetAttribute(&minor, cudaDevAttrComputeCapabilityMinor, device), "reading the compute capability");
  std::string device_arch = "sm_" + std::to_string(major * 10 + minor);

  const void* code = nullptr;
  if (a.module.arch == device_arch && !a.module.cubin.empty()) {
    code = a.module.cubin.data();
    image_ = "cubin " + a.module.arch;
  } else if (!a.module.ptx.empty()) {
    code = a.module.ptx.c_str();  // NUL-terminated, as cudaLibraryLoadData wants PTX
    image_ = "ptx (device is " + device_arch + ", cubin is " + a.module.arch + ")";
  } else {
    return Status::FailedPrecondition("the artifact holds a CUBIN for " + a.module.arch + " only and no PTX; device " +
                                      std::to_string(device) + " is " + device_arch + ": recompile for " + device_arch);
  }
  GDL_CUDA_TRY(cudaLibraryLoadData(&library_, code, nullptr, nullptr, 0, nullptr, nullptr, 0),
               "loading the kernel module (" + image_ + ")");

  int smem_optin = 0;
  GDL_CUDA_TRY(cudaDeviceGetAttribute(&smem_optin, cudaDevAttrMaxSharedMemoryPerBlockOptin, device),
               "reading the shared memory limit");
  std::map<std::string, cudaKernel_t> by_symbol;
  auto get = [&](const std::string& symbol, const LaunchRule& rule, cudaKernel_t& kernel) -> Status {
    kernel = by_symbol[symbol];
    if (!kernel) GDL_CUDA_TRY(cudaLibraryGetKernel(&kernel, library_, symbol.c_str()), "finding kernel '" + symbol + "'");
    by_symbol[symbol] = kernel;
    // Raised for any dynamic amount, not only above 48 KiB: the default
    // limit counts the kernel's static shared memory too (a 48 KiB request
    // beside a few static bytes was refused as an invalid argument).
    if (rule.shared_bytes > 0) {
      if (rule.shared_bytes > static_cast<unsigned>(smem_optin))
        return Status::FailedPrecondition("kernel '" + symbol + "' needs " + std::to_string(rule.shared_bytes) +
                                          " bytes of shared memory; device " + std::to_string(device) + " allows " +
                                          std::to_string(smem_optin));
      GDL_CUDA_TRY(cudaKernelSetAttributeForDevice(kernel, cudaFuncAttributeMaxDynamicSharedMemorySize,
                                                   static_cast<int>(rule.shared_bytes), device),
                   "raising the shared memory limit of kernel '" + symbol + "'");
    }
    return Status::Ok();
  };
  GDL_CUDA_TRY(cudaLibraryGetKernel(&input_copy_, library_, kInputCopySymbol), "finding the input copy kernel");
  for (const KernelInfo& k : a.kernels) {
    cudaKernel_t kernel = nullptr, large = nullptr;
    GDL_RETURN_IF_ERROR(get(k.symbol, k.launch, kernel));
    if (!k.large.symbol.empty()) GDL_RETURN_IF_ERROR(get(k.large.symbol, k.large.launch, large));
    kernels_.push_back(kernel);
    large_kernels_.push_back(large);
  }
  int sms = 0, cooperative = 0;
  GDL_CUDA_TRY(cudaDeviceGetAttribute(&sms, cudaDevAttrMultiProcessorCount, device), "reading the multiprocessor count");
  GDL_CUDA_TRY(cudaDeviceGetAttribute(&cooperative, cudaDevAttrCooperativeLaunch, device),
               "reading cooperative launch support");
  for (const ChainKernel& c : a.chains) {
    LaunchRule rule;
    rule.shared_bytes = c.shared_bytes;
    cudaKernel_t kernel = nullptr;
    std::string refusal;
    if (c.shared_bytes > static_cast<unsigned>(smem_optin)) {
      refusal = "needs " + std::to_string(c.shared_bytes) + " bytes of shared memory per block, the device allows " +
                std::to_string(smem_optin);
    } else {
      GDL_RETURN_IF_ERROR(get(c.symbol, rule, kernel));
      int per_sm = 0;
      GDL_CUDA_TRY(cudaOccupancyMaxActiveBlocksPerMultiprocessor(&per_sm, reinterpret_cast<const void*>(kernel),
                                                                 static_cast<int>(c.threads), c.shared_bytes),
                   "asking how many blocks of chain kernel '" + c.symbol + "' fit");
      const int64_t blocks = static_cast<int64_t>(c.blocks) * c.groups;
      if (!cooperative) refusal = "the device has no cooperative launch";
      else if (static_cast<int64_t>(per_sm) * sms < blocks)
        refusal = std::to_string(blocks) + " blocks, the device holds " + std::to_string(per_sm * sms) + " at once";
    }
    chain_kernels_.push_back(refusal.empty() ? kernel : nullptr);
    chain_refusals_.push_back(refusal);
  }
  return Status::Ok();
}

std::vector<int> KernelLibrary::chain_of_steps(const Artifact& a, const std::vector<int64_t>& dims) const {
  std::vector<int> chain(a.kernels.size(), -1);
  for (size_t c = 0; c < a.chains.size() && c < chain_kernels_.size(); ++c)
    if (chain_kernels_[c] && uses_chain(a.chains[c], dims))
      for (int s = a.chains[c].first; s <= a.chains[c].last; ++s) chain.at(static_cast<size_t>(s)) = static_cast<int>(c);
  return chain;
}

StepLaunch KernelLibrary::chain_launch(const Artifact& a, size_t c) const {
  const ChainKernel& k = a.chains.at(c);
  LaunchDims dims;
  dims.grid = dim3(k.blocks, k.groups, 1);
  dims.block = dim3(k.threads, 1, 1);
  dims.shared_bytes = k.shared_bytes;
  return StepLaunch{chain_kernels_.at(c), dims};
}

Expected<StepLaunch> KernelLibrary::step_launch(size_t step, const KernelInfo& info,
                                                const std::vector<int64_t>& dims) const {
  const bool large = uses_large_kernel(info, dims);
  Expected<LaunchDims> launch = launch_dims(large ? info.large.launch : info.launch, dims);
  if (!launch) return launch.status();
  return StepLaunch{large ? large_kernels_.at(step) : kernels_.at(step), *launch};
}

}  // namespace gdl::rt
