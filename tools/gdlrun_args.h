// gdlrun's command line and its inputs: the options parsed into Args, and
// the bindings (dims, inputs, params, scalars) built from them for a
// program's graph, with input files checked and read. gdlrun.cc runs the
// program; these are apart so that a test or a fuzzer
// (tests/fuzzers/gdlrun_args_fuzzer.cc) can call them in its own process.
#pragma once

#include <cstdint>
#include <map>
#include <optional>
#include <string>

#include "command_line.h"
#include "gpu_run.h"
#include "interp/interp.h"
#include "ir.h"

namespace gdl::gdlrun {

struct Args {
  std::string program;
  std::map<std::string, int64_t> dims;
  uint64_t seed = 1;
  std::map<std::string, std::string> input_files;  // inputs and params alike
  std::map<std::string, double> fills;
  std::map<std::string, double> scalars;
  std::map<std::string, std::string> consts;  // -D NAME=VALUE (a .gdl source only)
  std::string weights;     // --weights: a safetensors checkpoint (gdl/weights.h Checkpoint::open)
  std::string weight_map;  // --weight-map: a mapping file, or "llama" for gdl/llama.h's (the default)
  std::string out_dir;
  int print_count = 8;
  enum class Device { kAuto, kCpu, kGpu } device = Device::kAuto;
  bool check = false;
  gdl::tools::GpuRunOptions gpu;
};

// The command line (CLI11, tools/command_line.h). `args` is set when gdlrun
// goes on; otherwise `outcome` holds the help, the version or the usage
// error to report (tools::report_command_line) and the exit code. Prints
// nothing itself.
struct ParsedArgs {
  std::optional<Args> args;
  tools::CommandLineOutcome outcome;
};
ParsedArgs parse_args(int argc, const char* const* argv);

// The dims, every input, param and scalar of g from args, and every state
// at zero (as a new session starts): given values
// checked against the program (dims within their bounds, files of exactly
// the tensor's bytes, numbers that fit the dtype), the rest drawn from
// args.seed. No tensor is allocated before its size is checked.
Expected<Bindings> make_bindings(const ir::Graph& g, const Args& args);

}  // namespace gdl::gdlrun
