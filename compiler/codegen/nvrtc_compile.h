// Compiling the generated CUDA C++ with NVRTC, through an on-disk cache.
#pragma once

#include <functional>
#include <string>
#include <vector>

#include "codegen/codegen.h"
#include "gdl/status.h"
#include "kernel_table.h"

namespace gdl {

// One unit done (from the cache or compiled), `done` of `total`.
struct CompileProgress {
  size_t done = 0, total = 0;
  std::string label;  // SourceUnit::label
  bool from_cache = false;
  double seconds = 0;  // NVRTC's time for it (0 from the cache)
};

struct CompileOptions {
  std::string arch = "sm_90";      // CUBIN target; PTX is always kept too
  std::string cache_dir;           // "" = $GDL_CACHE_DIR or ~/.cache/gdl; "-" = no cache
  std::string cuda_include_dir;    // "" = $CUDA_HOME/include or /usr/local/cuda/include
  int jobs = 0;                    // units compiled at once; 0 = the machine's cores
  // Called once per unit as it is done, one call at a time (from the
  // compiling threads); nothing when empty.
  std::function<void(const CompileProgress&)> progress;
};

// Each unit, `prelude` first, as a translation unit of its own: CUBIN for
// options.arch and PTX, through the on-disk cache keyed per unit by a hash
// of its text, the options and NVRTC's version; the units not cached are
// compiled on options.jobs threads. NVRTC rejecting a unit is a bug in the
// generated code: Internal, with NVRTC's program log in the message. An
// arch NVRTC does not know, or below sm_90 for a program whose kernels use
// thread-block clusters (f16/bf16 matmuls): InvalidArgument.
Expected<CompiledModule> compile_units(const std::string& prelude, const std::vector<SourceUnit>& units,
                                       const CompileOptions& options);
// A whole source as one unit, its kernels found in its text (extern "C"
// __global__ definitions).
Expected<CompiledModule> compile_cuda(const std::string& source, const CompileOptions& options);

// Whether `arch` names a CUBIN target this NVRTC compiles for (sm_<N>, N in
// its list of supported architectures): InvalidArgument saying which it
// supports otherwise. compile_cuda checks it first; a driver can check an
// option before compiling anything.
Status check_arch(const std::string& arch);

}  // namespace gdl
