// Compiling .gdl programs inside the host process (library gdl_jit, which
// links the compiler: ANTLR, NVRTC). A host that ships compiled .gdlx
// files needs none of this: gdl/gdl.h and gdl_runtime load and run them.
//
//   auto program = gdl::jit::compile("mlp.gdl");                // Expected<Program>
//   auto reference = gdl::jit::run_reference(*program, tensors); // CPU outputs
//   gdl::SessionOptions options;
//   options.eager_fallback = gdl::jit::recompiler();           // dims above their bounds run eagerly
#pragma once

#include <map>
#include <memory>
#include <string>
#include <vector>

#include "gdl/gdl.h"

namespace gdl::jit {

struct CompileSettings {
  std::string arch;       // CUBIN target, e.g. "sm_90"; "" = device 0's arch when a GPU is usable, else sm_90
  std::string cache_dir;  // "" = $GDL_CACHE_DIR or ~/.cache/gdl; "-" = no cache
  // Values of the program's consts by name (gdlc -D NAME=VALUE): integers,
  // floats, true/false, or a dtype for a dtype const (`const DT = f32;`).
  std::map<std::string, std::string> consts;
};

// Compiles a .gdl file (parse, check, lower, optimise, plan, codegen, NVRTC).
// A rejected program: CompileError with the rendered diagnostics; a missing
// file: NotFound; a bug in gdl: Internal.
Expected<Program> compile(const std::string& path, const CompileSettings& settings = {});

// Runs the program on the CPU reference interpreter. `tensors` holds every
// input, param and state (its value at the run's start) by name; run-time
// dims are read from the inputs' shapes; scalars not given take their
// defaults. Returns every output, and every state's value after the run, by name.
Expected<std::map<std::string, TensorData>> run_reference(const Program& program,
                                                          const std::map<std::string, TensorData>& tensors,
                                                          const std::map<std::string, double>& scalars = {});

// The same for every rank of a program's process group, each with its own
// tensors (and scalars, when given: one map per rank), run together so that
// their collectives combine their values (docs/language.md "Collectives").
// Returns each rank's outputs and states, in rank order.
Expected<std::vector<std::map<std::string, TensorData>>> run_reference_ranks(
    const Program& program, const std::vector<std::map<std::string, TensorData>>& tensors,
    const std::vector<std::map<std::string, double>>& scalars = {});

// The compiler behind SessionOptions::eager_fallback.
std::shared_ptr<const Recompiler> recompiler();

}  // namespace gdl::jit
