// Loading the generated kernels and choosing and launching them.
//
// KernelLibrary::load:
// 1. Read the device's compute capability; use the CUBINs if the artifact's
//    arch is exactly this one, else the PTX (the driver JIT-compiles it).
// 2. cudaLibraryLoadData each module unit's image (context-independent; the
//    runtime loads it into the device's context when needed).
// 3. The input copy kernel (kInputCopySymbol), then cudaLibraryGetKernel
//    for every kernel of the table from the unit that defines it (kernels
//    may share a symbol).
// 4. Where a rule asks for dynamic shared memory, raise the kernel's limit
//    on this device (checked against the device's opt-in max).
// 5. A cooperative kernel must have every block resident at once: the
//    device must support cooperative launches and hold its blocks (the
//    occupancy calculator times the multiprocessors). Where it does not, or
//    where its shared memory is more than the device allows, the kernel is
//    refused and the steps' other choices serve every run; for any other
//    kernel that is an error.
// KernelLibrary::choose: the first choice of the step that applies at the
// dims (kernel_applies) and is not refused (nor of several steps, when
// those are off).
#include "kernels.h"

#include <algorithm>
#include <atomic>
#include <map>

#include "cuda_util.h"
#include "gdl/testing.h"

namespace gdl::rt {
namespace {
std::atomic<int> shared_memory_cap{0};  // testing::limit_shared_memory; 0: the device's own
}  // namespace

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
  for (cudaLibrary_t library : libraries_) (void)cudaLibraryUnload(library);
}

Status KernelLibrary::load(const Program::Impl& program, int device) {
  const Artifact& a = program.artifact;
  if (a.kernels.kernels.empty()) return Status::Ok();
  int major = 0, minor = 0;
  GDL_CUDA_TRY(cudaDeviceGetAttribute(&major, cudaDevAttrComputeCapabilityMajor, device), "reading the compute capability");
  GDL_CUDA_TRY(cudaDeviceGetAttribute(&minor, cudaDevAttrComputeCapabilityMinor, device), "reading the compute capability");
  std::string device_arch = "sm_" + std::to_string(major * 10 + minor);

  // Each unit's CUBIN where the arch is this device's, else its PTX.
  const bool arch_matches = a.module.arch == device_arch;
  for (const ModuleUnit& unit : a.module.units)
    if (unit.ptx.empty() && !(arch_matches && !unit.cubin.empty()))
      return Status::FailedPrecondition("the artifact holds a CUBIN for " + a.module.arch + " only and no PTX; device " +
                                        std::to_string(device) + " is " + device_arch + ": recompile for " + device_arch);
  const bool use_cubin = arch_matches && std::all_of(a.module.units.begin(), a.module.units.end(),
                                                      [](const ModuleUnit& u) { return !u.cubin.empty(); });
  image_ = use_cubin ? "cubin " + a.module.arch : "ptx (device is " + device_arch + ", cubin is " + a.module.arch + ")";
  image_ += ", " + std::to_string(a.module.units.size()) + " units";
  std::map<std::string, cudaLibrary_t> library_of;  // symbol -> the unit's library that defines it
  for (const ModuleUnit& unit : a.module.units) {
    // PTX is NUL-terminated, as cudaLibraryLoadData wants it.
    const void* code = use_cubin ? static_cast<const void*>(unit.cubin.data()) : unit.ptx.c_str();
    cudaLibrary_t library = nullptr;
    GDL_CUDA_TRY(library_load(&library, code), "loading the kernel module (" + image_ + ")");
    libraries_.push_back(library);
    for (const std::string& symbol : unit.symbols) library_of[symbol] = library;
  }
  if (!library_of.count(kInputCopySymbol))  // verify_artifact requires it where there are kernels
    return Status::DataLoss("the artifact's module has no input copy kernel");
  GDL_CUDA_TRY(cudaLibraryGetKernel(&input_copy_, library_of.at(kInputCopySymbol), kInputCopySymbol),
               "finding the input copy kernel");
  int smem_optin = 0, sms = 0, cooperative_launch = 0;
  GDL_CUDA_TRY(cudaDeviceGetAttribute(&smem_optin, cudaDevAttrMaxSharedMemoryPerBlockOptin, device),
               "reading the shared memory limit");
  if (const int cap = shared_memory_cap.load(std::memory_order_relaxed); cap > 0) smem_optin = std::min(smem_optin, cap);
  GDL_CUDA_TRY(cudaDeviceGetAttribute(&sms, cudaDevAttrMultiProcessorCount, device), "reading the multiprocessor count");
  GDL_CUDA_TRY(cudaDeviceGetAttribute(&cooperative_launch, cudaDevAttrCooperativeLaunch, device),
               "reading cooperative launch support");
  // A kernel that is one of a step's choices but not its last can be left
  // out where the device cannot run it: the step's next choice serves its
  // rows (KernelLibrary::choose). Any other kernel the device cannot run
  // refuses the session.
  std::vector<bool> optional(a.kernels.kernels.size(), false);
  for (const std::vector<int>& choices : a.kernels.step_choices)
    for (size_t i = 0; i + 1 < choices.size(); ++i) optional.at(static_cast<size_t>(choices[i])) = true;
  for (const std::vector<int>& choices : a.kernels.step_choices)
    if (!choices.empty()) optional.at(static_cast<size_t>(choices.back())) = false;
  std::map<std::string, cudaKernel_t> by_symbol;
  for (size_t index = 0; index < a.kernels.kernels.size(); ++index) {
    const Kernel& k = a.kernels.kernels[index];
    if (k.is_collective()) {  // an NCCL call (collectives.h), no kernel
      kernels_.push_back(nullptr);
      continue;
    }
    const LaunchRule& rule = k.launch;
    std::string refusal;
    if (rule.shared_bytes > static_cast<unsigned>(smem_optin))
      refusal = "needs " + std::to_string(rule.shared_bytes) + " bytes of shared memory per block, the device allows " +
                std::to_string(smem_optin);
    cudaKernel_t kernel = nullptr;
    if (refusal.empty()) {
      kernel = by_symbol[k.symbol];
      if (!kernel) {
        auto unit = library_of.find(k.symbol);
        if (unit == library_of.end()) return Status::DataLoss("no module unit of the artifact defines kernel '" + k.symbol + "'");
        GDL_CUDA_TRY(cudaLibraryGetKernel(&kernel, unit->second, k.symbol.c_str()), "finding kernel '" + k.symbol + "'");
      }
      by_symbol[k.symbol] = kernel;
      // Raised for any dynamic amount, not only above 48 KiB: the default
      // limit counts the kernel's static shared memory too (a 48 KiB request
      // beside a few static bytes was refused as an invalid argument).
      if (rule.shared_bytes > 0)
        GDL_CUDA_TRY(cudaKernelSetAttributeForDevice(kernel, cudaFuncAttributeMaxDynamicSharedMemorySize,
                                                     static_cast<int>(rule.shared_bytes), device),
                     "raising the shared memory limit of kernel '" + k.symbol + "'");
    }
    if (refusal.empty() && k.cooperative) {
      Expected<LaunchDims> dims = launch_dims(rule, {});
      if (!dims) return dims.status();
      int per_sm = 0;
      GDL_CUDA_TRY(cudaOccupancyMaxActiveBlocksPerMultiprocessor(&per_sm, reinterpret_cast<const void*>(kernel),
                                                                 static_cast<int>(rule.block), rule.shared_bytes),
                   "asking how many blocks of kernel '" + k.symbol + "' fit");
      const int64_t blocks = static_cast<int64_t>(dims->grid.x) * dims->grid.y;
      if (!cooperative_launch) refusal = "the device has no cooperative launch";
      else if (static_cast<int64_t>(per_sm) * sms < blocks)
        refusal = std::to_string(blocks) + " blocks, the device holds " + std::to_string(per_sm * sms) + " at once";
    }
    if (!refusal.empty() && !optional[index])
      return Status::FailedPrecondition("kernel '" + k.symbol + "' cannot run on device " + std::to_string(device) + ": " +
                                        refusal);
    if (!refusal.empty()) {  // once for all entries of a shared kernel
      const std::string line = "kernel '" + k.symbol + "': " + refusal;
      if (std::find(refusals_.begin(), refusals_.end(), line) == refusals_.end()) refusals_.push_back(line);
    }
    kernels_.push_back(refusal.empty() ? kernel : nullptr);
  }
  return Status::Ok();
}

}  // namespace gdl::rt

void gdl::testing::limit_shared_memory(int bytes) { rt::shared_memory_cap.store(std::max(bytes, 0)); }

namespace gdl::rt {

int KernelLibrary::choose(const KernelTable& t, size_t step, const std::vector<int64_t>& dims, bool multi_step,
                          const std::function<bool(int)>& library_ok) const {
  const std::vector<int>& choices = t.step_choices.at(step);
  for (int c : choices) {
    const Kernel& k = t.kernels.at(static_cast<size_t>(c));
    if (!kernels_.at(static_cast<size_t>(c)) || (!multi_step && k.first_step != k.last_step)) continue;
    if (kernel_applies(k, dims) && (!k.library.active || (library_ok && library_ok(c)))) return c;
  }
  return choices.back();  // always applies and always loads (verify_artifact, load)
}

Expected<StepLaunch> KernelLibrary::launch(const KernelTable& t, int k, const std::vector<int64_t>& dims) const {
  const Kernel& kernel = t.kernels.at(static_cast<size_t>(k));
  Expected<LaunchDims> launch = launch_dims(kernel.launch, dims);
  if (!launch) return launch.status();
  StepLaunch out{kernels_.at(static_cast<size_t>(k)), *launch, kernel.cooperative, {}};
  for (size_t i = 0; i < kernel.offsets.size() && i < static_cast<size_t>(kMaxKernelOffsets); ++i)
    out.offsets.at[i] = kernel.offsets[i];
  return out;
}

}  // namespace gdl::rt
