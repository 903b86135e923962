// gdlrun: runs a gdl program (.gdl source or .gdlx artifact) once, with inputs
// from files or drawn from a seed, on the GPU when there is one and on the CPU
// reference interpreter otherwise, and prints or writes the outputs.
//
//   gdlrun PROGRAM [--dim B=8] [--seed N] [--input NAME=FILE] [--param NAME=FILE]
//                  [--set NAME=VALUE] [--scalar NAME=VALUE] [--out DIR]
//                  [--print N] [--cpu | --gpu] [--check]
//                  [--policy buckets|update] [--fallback] [--explain] [--stats]
//
// --policy serves every run-time dim by buckets or by node updates (default:
// each dim's policy(...)); --fallback lets a dim above its bound run on the
// eager fallback. --explain prints the timeline model's prediction of an
// eager and a graph run from measured per-node times beside the measured
// runs; --stats prints the session's stats (buckets, padding, node updates,
// re-instantiations, fallbacks, arena). Both need the GPU.
//
// FILE holds the raw little-endian elements of the tensor's dtype (f16/bf16
// as their 16-bit patterns), row-major: a regular file of exactly the
// tensor's size, checked before it is read. --set fills a tensor with one
// value (e.g. a KV length). Numbers are read whole and strictly: --dim takes
// an integer inside the dim's bounds (above them only with --fallback),
// --set and --scalar a finite number (an integer for an i32 tensor or
// scalar). Every input and param is held as doubles, at most 2^28 elements
// each (the CPU reference's limit for every value). Exit codes: 0 ok, 1 bad
// program or inputs, 2 usage or internal error, 3 --check found a GPU
// result that differs from the CPU one.
#include <fcntl.h>
#include <sys/stat.h>
#include <unistd.h>

#include <charconv>
#include <cerrno>
#include <cmath>
#include <cstdio>
#include <cstring>
#include <fstream>
#include <limits>
#include <map>
#include <optional>
#include <random>
#include <string>
#include <vector>

#include "artifact.h"
#include "gpu_run.h"
#include "interp/interp.h"
#include "pipeline.h"
#include "frontend/source_loader.h"

namespace {

constexpr int kExitOk = 0, kExitBadInput = 1, kExitUsage = 2, kExitMismatch = 3;

struct Args {
  std::string program;
  std::map<std::string, int64_t> dims;
  uint64_t seed = 1;
  std::map<std::string, std::string> input_files;  // inputs and params alike
  std::map<std::string, double> fills;
  std::map<std::string, double> scalars;
  std::string out_dir;
  int print_count = 8;
  enum class Device { kAuto, kCpu, kGpu } device = Device::kAuto;
  bool check = false;
  gdl::tools::GpuRunOptions gpu;
};

bool split_assignment(const std::string& text, std::string* name, std::string* value) {
  size_t eq = text.find('=');
  if (eq == std::string::npos || eq == 0) return false;
  *name = text.substr(0, eq);
  *value = text.substr(eq + 1);
  return true;
}

// The whole text as a number: "8x", "1e3" (for an integer), "" and
// out-of-range values are refused, as are inf and nan.
template <typename T>
std::optional<T> parse_number(const std::string& text) {
  T value{};
  const char* end = text.data() + text.size();
  auto [stop, ec] = std::from_chars(text.data(), end, value);
  if (ec != std::errc() || stop != end) return std::nullopt;
  if constexpr (std::is_floating_point_v<T>)
    if (!std::isfinite(value)) return std::nullopt;
  return value;
}

std::string number_text(double v) {
  char text[32];
  std::snprintf(text, sizeof text, "%.17g", v);
  return text;
}

bool is_i32(double v) {
  return v == std::trunc(v) && v >= std::numeric_limits<int32_t>::min() && v <= std::numeric_limits<int32_t>::max();
}

std::optional<Args> parse_args(int argc, char** argv, std::string* error) {
  Args args;
  for (int i = 1; i < argc; ++i) {
    std::string a = argv[i];
    auto value_of = [&](const char* flag) -> std::optional<std::string> {
      if (i + 1 >= argc) { *error = std::string(flag) + " needs a value"; return std::nullopt; }
      return std::string(argv[++i]);
    };
    std::string name, value;
    auto bad_number = [&](const std::string& text, const char* want) {
      *error = a + " " + text + ": '" + (name.empty() ? text : value) + "' is not " + want;
      return std::nullopt;
    };
    {
      if (a == "--dim" || a == "--input" || a == "--param" || a == "--set" || a == "--scalar") {
        auto v = value_of(a.c_str());
        if (!v) return std::nullopt;
        if (!split_assignment(*v, &name, &value)) { *error = a + " expects NAME=VALUE, got '" + *v + "'"; return std::nullopt; }
        if (a == "--dim") {
          auto n = parse_number<int64_t>(value);
          if (!n) return bad_number(*v, "an integer");
          args.dims[name] = *n;
        } else if (a == "--set" || a == "--scalar") {
          auto x = parse_number<double>(value);
          if (!x) return bad_number(*v, "a finite number");
          (a == "--set" ? args.fills : args.scalars)[name] = *x;
        } else {
          args.input_files[name] = value;
        }
      } else if (a == "--seed") {
        auto v = value_of("--seed"); if (!v) return std::nullopt;
        auto n = parse_number<uint64_t>(*v);
        if (!n) return bad_number(*v, "an integer from 0 to 2^64-1");
        args.seed = *n;
      } else if (a == "--out") {
        auto v = value_of("--out"); if (!v) return std::nullopt;
        args.out_dir = *v;
      } else if (a == "--print") {
        auto v = value_of("--print"); if (!v) return std::nullopt;
        auto n = parse_number<int>(*v);
        if (!n || *n < 0) return bad_number(*v, "a count of elements");
        args.print_count = *n;
      } else if (a == "--cpu") {
        args.device = Args::Device::kCpu;
      } else if (a == "--gpu") {
        args.device = Args::Device::kGpu;
      } else if (a == "--check") {
        args.check = true;
      } else if (a == "--explain") {
        args.gpu.explain = true;
      } else if (a == "--stats") {
        args.gpu.stats = true;
      } else if (a == "--fallback") {
        args.gpu.eager_fallback = true;
      } else if (a == "--policy") {
        auto v = value_of("--policy"); if (!v) return std::nullopt;
        if (*v == "buckets") args.gpu.policy = gdl::DimPolicyChoice::kBuckets;
        else if (*v == "update") args.gpu.policy = gdl::DimPolicyChoice::kUpdate;
        else { *error = "--policy takes buckets or update, got '" + *v + "'"; return std::nullopt; }
      } else if (!a.empty() && a[0] == '-') {
        *error = "unknown option '" + a + "'";
        return std::nullopt;
      } else if (args.program.empty()) {
        args.program = a;
      } else {
        *error = "more than one program given";
        return std::nullopt;
      }
    }
  }
  if (args.program.empty()) { *error = "no program given"; return std::nullopt; }
  return args;
}

// The program's IR, from source (compiled to IR only) or from an artifact.
gdl::Expected<gdl::ir::Graph> load_graph(const std::string& path) {
  if (path.size() > 5 && path.substr(path.size() - 5) == ".gdlx") {
    gdl::Expected<gdl::Artifact> artifact = gdl::read_artifact(path);
    if (!artifact.ok()) return artifact.status();
    return std::move(artifact->plan.graph);
  }
  gdl::DiagnosticSink diags;
  std::string fatal;
  std::optional<gdl::SourceFile> file = gdl::load_source(path, diags, &fatal);
  if (!fatal.empty()) return gdl::Status::NotFound(fatal);
  if (!file) return gdl::Status::CompileError(diags.render(gdl::SourceFile(path, "")));
  std::optional<gdl::ir::Graph> graph = gdl::compile_to_ir(*file, diags);
  std::fputs(diags.render(*file).c_str(), stderr);
  if (!graph) return gdl::Status::CompileError("the program was rejected (diagnostics above)");
  return std::move(*graph);
}

// Checked before anything is allocated at these dims.
std::vector<int64_t> bind_dims(const gdl::ir::Graph& g, const Args& args, std::string* error) {
  std::vector<int64_t> values;
  for (const gdl::DimInfo& d : g.dims) {
    auto it = args.dims.find(d.name);
    const int64_t v = it != args.dims.end() ? it->second : d.hi;
    // Above the bound only the GPU's eager fallback can run it (a dim is 32-bit).
    const int64_t hi = args.gpu.eager_fallback ? std::numeric_limits<int32_t>::max() : d.hi;
    if ((v < d.lo || v > hi) && error->empty())
      *error = "--dim " + d.name + "=" + std::to_string(v) + " is outside [" + std::to_string(d.lo) + ", " +
               std::to_string(d.hi) + "], the dim's bounds" +
               (args.gpu.eager_fallback ? "" : " (--fallback runs a value above them on the GPU)");
    values.push_back(v);
  }
  for (const auto& [name, v] : args.dims) {
    bool known = false;
    for (const gdl::DimInfo& d : g.dims) known |= d.name == name;
    if (!known) *error = "--dim " + name + ": the program has no dim named '" + name + "'";
  }
  return values;
}

// Random values that keep a deep network's activations in range: uniform in
// [-1, 1), params of rank >= 2 (weight matrices) scaled by 1/sqrt(fan-in);
// i32 in [0, 16).
gdl::HostTensor random_tensor(const gdl::ir::Node& leaf, const std::vector<int64_t>& dims, std::mt19937_64& rng) {
  gdl::HostTensor t;
  t.dtype = leaf.type.dtype;
  t.shape = gdl::concrete_shape(leaf.type.shape, dims);
  int64_t n = 1;
  for (int64_t e : t.shape) n *= e;
  bool weight_matrix = leaf.op == gdl::ir::Op::kParam && t.shape.size() >= 2;
  double scale = weight_matrix ? 1.0 / std::sqrt(static_cast<double>(t.shape[t.shape.size() - 2])) : 1.0;
  std::uniform_real_distribution<double> uniform(-1.0, 1.0);
  std::uniform_int_distribution<int> small_int(0, 15);
  t.data.resize(static_cast<size_t>(n));
  for (double& v : t.data) {
    if (t.dtype == gdl::DType::kI32) v = small_int(rng);
    else if (t.dtype == gdl::DType::kBool) v = small_int(rng) & 1;
    else v = gdl::round_to_dtype(uniform(rng) * scale, t.dtype);
  }
  return t;
}

// The file's size is checked (a regular file of exactly the tensor's bytes)
// before anything is read or allocated.
gdl::Expected<gdl::HostTensor> tensor_from_file(const gdl::ir::Node& leaf, const std::vector<int64_t>& dims,
                                                const std::string& path) {
  gdl::HostTensor t;
  t.dtype = leaf.type.dtype;
  t.shape = gdl::concrete_shape(leaf.type.shape, dims);
  size_t n = 1;
  for (int64_t e : t.shape) n *= static_cast<size_t>(e);  // within kMaxReferenceElements: make_bindings checked
  const size_t want = n * gdl::dtype_size(t.dtype);
  const int fd = ::open(path.c_str(), O_RDONLY | O_CLOEXEC);
  if (fd < 0) return gdl::Status::NotFound("cannot read '" + path + "' for " + leaf.name + ": " + std::strerror(errno));
  struct stat info;
  std::string problem;
  if (::fstat(fd, &info) != 0)
    problem = "cannot read '" + path + "' for " + leaf.name + ": " + std::strerror(errno);
  else if (!S_ISREG(info.st_mode))
    problem = "'" + path + "' is not a regular file; " + leaf.name + " needs a file of " + std::to_string(want) + " bytes";
  else if (static_cast<uint64_t>(info.st_size) != want)
    problem = "'" + path + "' holds " + std::to_string(info.st_size) + " bytes; " + leaf.name + " needs " +
              std::to_string(want);
  std::vector<char> bytes(problem.empty() ? want : 0);
  for (size_t got = 0; problem.empty() && got < want;) {
    const ssize_t r = ::read(fd, bytes.data() + got, want - got);
    if (r < 0 && errno == EINTR) continue;
    if (r <= 0) problem = "cannot read '" + path + "' for " + leaf.name + ": it changed while being read";
    else got += static_cast<size_t>(r);
  }
  ::close(fd);
  if (!problem.empty()) return gdl::Status::InvalidArgument(problem);
  t.data.resize(n);
  for (size_t i = 0; i < n; ++i) t.data[i] = gdl::load_element(bytes.data(), t.dtype, i);
  return t;
}

gdl::Expected<gdl::Bindings> make_bindings(const gdl::ir::Graph& g, const Args& args) {
  std::string error;
  gdl::Bindings b;
  b.dims = bind_dims(g, args, &error);
  if (!error.empty()) return gdl::Status::InvalidArgument(error);
  std::mt19937_64 rng(args.seed);
  std::map<std::string, bool> used;
  for (const gdl::ir::Node& n : g.nodes) {
    if (n.op == gdl::ir::Op::kScalar) {
      auto it = args.scalars.find(n.name);
      const double v = it != args.scalars.end() ? it->second : n.attrs.value;
      if (n.type.dtype == gdl::DType::kI32 && !is_i32(v))
        return gdl::Status::InvalidArgument("--scalar " + n.name + ": the scalar is i32, and " + number_text(v) +
                                            " is no i32 value");
      b.scalars[n.name] = v;
      used[n.name] = it != args.scalars.end();
      continue;
    }
    if (n.op != gdl::ir::Op::kInput && n.op != gdl::ir::Op::kParam) continue;
    if (!gdl::reference_elements(n.type.shape, b.dims))
      return gdl::Status::OutOfRange("'" + n.name + "' : " + gdl::type_to_string(n.type, g.dims) +
                                     " holds more than 2^28 elements at these dims, the most gdlrun holds (as doubles, "
                                     "8 bytes each)");
    if (auto f = args.fills.find(n.name); f != args.fills.end() && n.type.dtype == gdl::DType::kI32 && !is_i32(f->second))
      return gdl::Status::InvalidArgument("--set " + n.name + ": '" + n.name + "' is i32, and " +
                                          number_text(f->second) + " is no i32 value");
    gdl::HostTensor t = random_tensor(n, b.dims, rng);  // drawn always, so one input's file keeps the others' values
    if (auto f = args.input_files.find(n.name); f != args.input_files.end()) {
      gdl::Expected<gdl::HostTensor> loaded = tensor_from_file(n, b.dims, f->second);
      if (!loaded.ok()) return loaded.status();
      t = std::move(loaded).value();
      used[n.name] = true;
    }
    if (auto f = args.fills.find(n.name); f != args.fills.end()) {
      for (double& v : t.data) v = gdl::round_to_dtype(f->second, t.dtype);
      used[n.name] = true;
    }
    b.tensors[n.name] = std::move(t);
  }
  for (const auto* group : {&args.input_files}) for (const auto& [name, _] : *group)
    if (!used[name]) return gdl::Status::NotFound("--input/--param " + name + ": the program has no input or param named '" + name + "'");
  for (const auto& [name, _] : args.fills)
    if (!used[name]) return gdl::Status::NotFound("--set " + name + ": the program has no input or param named '" + name + "'");
  for (const auto& [name, _] : args.scalars)
    if (!used[name]) return gdl::Status::NotFound("--scalar " + name + ": the program has no scalar named '" + name + "'");
  return b;
}

void print_output(const std::string& name, const gdl::HostTensor& t, int count) {
  std::string shape;
  for (size_t i = 0; i < t.shape.size(); ++i) shape += (i ? "," : "") + std::to_string(t.shape[i]);
  double lo = INFINITY, hi = -INFINITY, sum = 0;
  for (double v : t.data) { lo = std::min(lo, v); hi = std::max(hi, v); sum += v; }
  std::printf("%s : %s[%s]  min %.6g  max %.6g  mean %.6g\n  ", name.c_str(), gdl::dtype_name(t.dtype), shape.c_str(),
              lo, hi, t.data.empty() ? 0.0 : sum / static_cast<double>(t.data.size()));
  for (int i = 0; i < count && i < t.size(); ++i) std::printf("%.6g ", t.data[static_cast<size_t>(i)]);
  std::printf("%s\n", t.size() > count ? "..." : "");
}

bool write_output(const std::string& dir, const std::string& name, const gdl::HostTensor& t) {
  std::vector<unsigned char> bytes(t.data.size() * gdl::dtype_size(t.dtype));
  for (size_t i = 0; i < t.data.size(); ++i) gdl::store_element(bytes.data(), t.dtype, i, t.data[i]);
  std::ofstream out(dir + "/" + name + ".bin", std::ios::binary);
  out.write(reinterpret_cast<const char*>(bytes.data()), static_cast<std::streamsize>(bytes.size()));
  return static_cast<bool>(out);
}

double relative_error(const gdl::HostTensor& got, const gdl::HostTensor& want) {
  double num = 0, den = 0;
  for (size_t i = 0; i < want.data.size(); ++i) {
    double d = got.data[i] - want.data[i];
    num += d * d;
    den += want.data[i] * want.data[i];
  }
  if (std::isnan(num)) return INFINITY;
  return den > 0 ? std::sqrt(num / den) : std::sqrt(num);
}

int run(const Args& args) {
  gdl::Expected<gdl::ir::Graph> graph = load_graph(args.program);
  if (!graph.ok()) {
    // A source that cannot be read says so as "FILE: error: ...".
    const std::string& message = graph.status().message();
    const bool located = message.rfind(args.program + ": error: ", 0) == 0;
    std::fprintf(stderr, "gdlrun: %s%s\n", located ? "" : "error: ", message.c_str());
    return graph.status().code() == gdl::StatusCode::kCompileError ? kExitBadInput : kExitUsage;
  }
  gdl::Expected<gdl::Bindings> bindings = make_bindings(*graph, args);
  if (!bindings.ok()) {
    std::fprintf(stderr, "gdlrun: error: %s\n", bindings.status().message().c_str());
    return kExitBadInput;
  }
  std::string dims_text;
  for (size_t i = 0; i < graph->dims.size(); ++i)
    dims_text += " " + graph->dims[i].name + "=" + std::to_string(bindings->dims[i]);

  std::map<std::string, gdl::HostTensor> outputs;
  std::optional<std::map<std::string, gdl::HostTensor>> gpu_outputs;
  std::string gpu_report;  // --explain, --stats
  if (args.device != Args::Device::kCpu) {
    std::string why_not;
    gpu_outputs = gdl::tools::run_on_gpu(args.program, *bindings, &why_not, args.gpu, &gpu_report);
    if (!gpu_outputs) {
      if (args.device == Args::Device::kGpu) {
        std::fprintf(stderr, "gdlrun: error: --gpu: %s\n", why_not.c_str());
        return kExitUsage;
      }
      std::fprintf(stderr, "gdlrun: no GPU run (%s); running on the CPU reference interpreter\n", why_not.c_str());
    }
  }
  if (!gpu_outputs || args.check) {
    gdl::Expected<std::map<std::string, gdl::HostTensor>> cpu = gdl::interpret(*graph, *bindings);
    if (!cpu.ok()) {
      std::fprintf(stderr, "gdlrun: error: %s\n", cpu.status().message().c_str());
      return kExitBadInput;
    }
    outputs = std::move(cpu).value();
  }
  int status = kExitOk;
  if (gpu_outputs && args.check) {
    for (const auto& [name, ref] : outputs) {
      double err = relative_error(gpu_outputs->at(name), ref);
      double tol = ref.dtype == gdl::DType::kF32 ? 1e-4 : ref.dtype == gdl::DType::kBF16 ? 2e-2 : 5e-3;
      if (!gdl::is_float(ref.dtype)) tol = 0;
      std::printf("check %s: relative error GPU vs CPU %.3g (tolerance %.1g) %s\n", name.c_str(), err, tol,
                  err <= tol ? "ok" : "MISMATCH");
      if (!(err <= tol)) status = kExitMismatch;
    }
  }
  if (gpu_outputs) outputs = std::move(*gpu_outputs);
  std::printf("program %s on %s,%s seed %llu\n", graph->program_name.c_str(), gpu_outputs ? "GPU" : "CPU reference",
              dims_text.empty() ? " no run-time dims," : dims_text.c_str(), static_cast<unsigned long long>(args.seed));
  for (const gdl::ir::Output& o : graph->outputs) {
    print_output(o.name, outputs.at(o.name), args.print_count);
    if (!args.out_dir.empty() && !write_output(args.out_dir, o.name, outputs.at(o.name))) {
      std::fprintf(stderr, "gdlrun: error: cannot write %s/%s.bin\n", args.out_dir.c_str(), o.name.c_str());
      return kExitUsage;
    }
  }
  if ((args.gpu.explain || args.gpu.stats) && !gpu_outputs)
    std::fprintf(stderr, "gdlrun: --explain and --stats need the GPU run\n");
  std::fputs(gpu_report.c_str(), stdout);
  return status;
}

}  // namespace

int main(int argc, char** argv) {
  std::string error;
  std::optional<Args> args = parse_args(argc, argv, &error);
  if (!args) {
    std::fprintf(stderr,
                 "gdlrun: error: %s\nusage: gdlrun PROGRAM.gdl|PROGRAM.gdlx [--dim NAME=N] [--seed N] "
                 "[--input NAME=FILE] [--param NAME=FILE] [--set NAME=VALUE] [--scalar NAME=VALUE] "
                 "[--out DIR] [--print N] [--cpu|--gpu] [--check] [--policy buckets|update] [--fallback] "
                 "[--explain] [--stats]\n",
                 error.c_str());
    return kExitUsage;
  }
  try {
    return run(*args);
  } catch (const std::bad_alloc&) {
    std::fprintf(stderr, "gdlrun: error: out of host memory (the CPU reference holds every element as a double)\n");
    return kExitBadInput;
  } catch (const std::exception& e) {
    std::fprintf(stderr, "gdlrun: internal error: %s\n", e.what());
    return kExitUsage;
  }
}
