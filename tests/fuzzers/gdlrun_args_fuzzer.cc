// libFuzzer target: gdlrun's command line and input files
// (tools/gdlrun_args.h), in-process, against one fixed program that has a
// run-time dim, every dtype among its inputs, a param and two scalars.
//
// The input is [u16 n, little-endian][n bytes: an input file][the rest:
// arguments, split at NUL bytes]. The arguments go through parse_args as
// gdlrun's argv; every --input/--param file they name is replaced by one
// temporary file holding the n bytes, so the fuzzer never opens a path it
// made up. Then make_bindings reads that file, checks it and draws the rest.
//
// Findings: a sanitizer report, a crash, an uncaught exception, a refusal
// without a message, or bindings that make_bindings accepts and the CPU
// reference then refuses or fails to run.
#include <unistd.h>

#include <algorithm>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <map>
#include <optional>
#include <string>
#include <vector>

#include "frontend/diagnostics.h"
#include "frontend/source_loader.h"
#include "gdlrun_args.h"
#include "interp/interp.h"
#include "pipeline.h"

namespace {

constexpr const char* kProgram = R"(program gdlrun_inputs;
dim B in [1, 8] buckets(4, 8);
input x : f32[B, 3];
input h : f16[2, B];
input g : bf16[4];
input n : i32[B];
input m : bool[2];
param w : f32[3, 3];
scalar s : i32 = 1;
scalar t : f32 = 0.5;
output y : f32[B, 3];
output z : f32[2, B];
output k : i32[B];
output v : bf16[4];
output c : bool[2];
y = (x @ w) * t;
z = cast(h, f32) + 1.0;
k = n + s;
v = g * g;
c = m;
)";

// --fallback accepts any dim up to 2^31-1, and gdlrun then holds every
// input as doubles, up to 2^28 of them (2 GiB) by design. Larger dims than
// this are left out rather than reported as running out of memory.
constexpr int64_t kMaxDim = 1024;

[[noreturn]] void fail(const std::string& what) {
  std::fprintf(stderr, "%s\n", what.c_str());
  std::abort();
}

const gdl::ir::Graph& program() {
  static const gdl::ir::Graph graph = [] {
    gdl::DiagnosticSink diags;
    const gdl::SourceFile file = gdl::source_from_string("gdlrun_inputs.gdl", kProgram);
    std::optional<gdl::ir::Graph> g = gdl::compile_to_ir(file, diags);
    if (!g) fail("the fuzzer's program does not compile:\n" + diags.render(file));
    return std::move(*g);
  }();
  return graph;
}

// The one input file, rewritten for every run that names one and removed
// when the fuzzer exits.
class InputFile {
 public:
  InputFile() {
    const char* dir = std::getenv("TMPDIR");
    path_ = std::string(dir && *dir ? dir : "/tmp") + "/gdlrun_args_fuzzer.XXXXXX";
    const int fd = ::mkstemp(path_.data());
    if (fd < 0) fail("cannot create a temporary file " + path_);
    ::close(fd);
  }
  ~InputFile() { ::unlink(path_.c_str()); }

  const std::string& write(const uint8_t* data, size_t size) {
    std::FILE* f = std::fopen(path_.c_str(), "wb");
    if (!f || std::fwrite(data, 1, size, f) != size || std::fclose(f) != 0) fail("cannot write " + path_);
    return path_;
  }

 private:
  std::string path_;
};

}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  size_t file_size = size >= 2 ? data[0] | size_t{data[1]} << 8 : 0;
  const size_t header = size >= 2 ? 2 : size;
  file_size = std::min(file_size, size - header);
  const uint8_t* file_bytes = data + header;

  std::vector<std::string> words{"gdlrun"};
  std::string word;
  for (size_t i = header + file_size; i < size; ++i) {
    if (data[i] == 0) {
      words.push_back(word);
      word.clear();
    } else {
      word += static_cast<char>(data[i]);
    }
  }
  if (header + file_size < size) words.push_back(word);
  std::vector<char*> argv;
  for (std::string& w : words) argv.push_back(w.data());
  argv.push_back(nullptr);

  gdl::gdlrun::ParsedArgs parsed = gdl::gdlrun::parse_args(static_cast<int>(words.size()), argv.data());
  if (!parsed.args) {
    if (parsed.outcome.go_on) fail("parse_args returned no arguments and no outcome");
    if (parsed.outcome.text.empty()) fail("parse_args refused the arguments without a message");
    if (parsed.outcome.is_error != (parsed.outcome.exit_code != 0)) fail("an error outcome with exit code 0, or the reverse");
    return 0;
  }
  std::optional<gdl::gdlrun::Args>& args = parsed.args;
  for (const auto& [name, value] : args->dims)
    if (value > kMaxDim) return 0;
  if (!args->input_files.empty()) {
    static InputFile input_file;
    const std::string& path = input_file.write(file_bytes, file_size);
    for (auto& [name, file] : args->input_files) file = path;
  }

  const gdl::ir::Graph& g = program();
  gdl::Expected<gdl::Bindings> bindings = gdl::gdlrun::make_bindings(g, *args);
  if (!bindings.ok()) {
    if (bindings.status().message().empty()) fail("make_bindings refused the inputs without a message");
    return 0;
  }
  // Above a dim's bound (--fallback) only the GPU's eager fallback runs.
  for (size_t i = 0; i < g.dims.size(); ++i)
    if (bindings->dims[i] > g.dims[i].hi) return 0;
  if (gdl::Status valid = gdl::validate_bindings(g, *bindings); !valid.ok())
    fail("the CPU reference refuses bindings gdlrun accepted: " + valid.ToString());
  gdl::Expected<std::map<std::string, gdl::HostTensor>> outputs = gdl::interpret(g, *bindings);
  if (!outputs.ok()) fail("the CPU reference fails on bindings gdlrun accepted: " + outputs.status().ToString());
  return 0;
}
