// Program::compile: the whole compiler pipeline on a .gdl file, for the
// arch of the GPU that will run it (device 0's when there is one). Kept apart
// from program.cc so that loading artifacts needs no compiler pipeline.
#include "cuda_util.h"
#include "pipeline.h"
#include "program_impl.h"

namespace gdl {
namespace rt {
namespace {

// The arch of device 0 ("sm_90") when a GPU is usable, else "".
std::string device_zero_arch() {
  int count = 0;
  if (cudaGetDeviceCount(&count) != cudaSuccess || count == 0) {
    (void)cudaGetLastError();
    return "";
  }
  int major = 0, minor = 0;
  if (cudaDeviceGetAttribute(&major, cudaDevAttrComputeCapabilityMajor, 0) != cudaSuccess ||
      cudaDeviceGetAttribute(&minor, cudaDevAttrComputeCapabilityMinor, 0) != cudaSuccess) {
    (void)cudaGetLastError();
    return "";
  }
  return "sm_" + std::to_string(major * 10 + minor);
}

}  // namespace
}  // namespace rt

Expected<Program> Program::compile(const std::string& path, const CompileSettings& settings) {
  return rt::guarded("Program::compile", [&]() -> Expected<Program> {
    PipelineOptions options;
    options.codegen.arch = settings.arch;
    if (options.codegen.arch.empty()) options.codegen.arch = rt::device_zero_arch();
    if (options.codegen.arch.empty()) options.codegen.arch = "sm_90";
    options.codegen.cache_dir = settings.cache_dir;
    Expected<Artifact> artifact = compile_program_file(path, options);
    if (!artifact) return artifact.status();
    Expected<std::shared_ptr<Impl>> impl = rt::make_program_impl(std::move(artifact).value());
    // The compiler just made this artifact: an inconsistency is a compiler bug.
    if (!impl) return Status::Internal("compiled " + path + " into an inconsistent program: " + impl.status().message());
    return Program(std::move(impl).value());
  });
}

}  // namespace gdl
