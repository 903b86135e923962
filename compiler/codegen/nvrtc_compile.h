// Compiling the generated CUDA C++ with NVRTC, through an on-disk cache.
#pragma once

#include <string>

#include "gdl/status.h"
#include "kernel_table.h"

namespace gdl {

struct CompileOptions {
  std::string arch = "sm_90";      // CUBIN target; PTX is always kept too
  std::string cache_dir;           // "" = $GDL_CACHE_DIR or ~/.cache/gdl; "-" = no cache
  std::string cuda_include_dir;    // "" = $CUDA_HOME/include or /usr/local/cuda/include
};

// CUBIN for options.arch and PTX, through the on-disk cache keyed by a hash
// of source, options and NVRTC version. NVRTC rejecting the source is a bug
// in the generated code: Internal, with NVRTC's program log in the message.
// An arch NVRTC does not know, or below sm_90 for a program whose kernels
// use thread-block clusters (f16/bf16 matmuls): InvalidArgument.
Expected<CompiledModule> compile_cuda(const std::string& source, const CompileOptions& options);

// Whether `arch` names a CUBIN target this NVRTC compiles for (sm_<N>, N in
// its list of supported architectures): InvalidArgument saying which it
// supports otherwise. compile_cuda checks it first; a driver can check an
// option before compiling anything.
Status check_arch(const std::string& arch);

}  // namespace gdl
