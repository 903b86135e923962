// gdlrun's option parsing and input binding (gdlrun_args.h).
#include "gdlrun_args.h"

#include "gdl/llama.h"
#include "gdl/weights.h"
#include "program_impl.h"

#include <fcntl.h>
#include <sys/stat.h>
#include <unistd.h>

#include <cerrno>
#include <charconv>
#include <cmath>
#include <cstdio>
#include <filesystem>
#include <cstring>
#include <limits>
#include <random>
#include <vector>

namespace gdl::gdlrun {
namespace {

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


}  // namespace

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
      } else if (a == "-D") {
        auto v = value_of("-D");
        if (!v) return std::nullopt;
        if (!split_assignment(*v, &name, &value)) { *error = "-D expects NAME=VALUE, got '" + *v + "'"; return std::nullopt; }
        args.consts[name] = value;
      } else if (a == "--weights" || a == "--weight-map") {
        auto v = value_of(a.c_str());
        if (!v) return std::nullopt;
        (a == "--weights" ? args.weights : args.weight_map) = *v;
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
  if (!args.weight_map.empty() && args.weights.empty()) { *error = "--weight-map needs --weights"; return std::nullopt; }
  return args;
}

namespace {

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

// The params --weights fills (none without it), by the mapping --weight-map names.
gdl::Expected<std::map<std::string, gdl::TensorData>> checkpoint_params(const gdl::ir::Graph& g, const Args& args) {
  if (args.weights.empty()) return std::map<std::string, gdl::TensorData>{};
  gdl::Expected<gdl::Checkpoint> checkpoint = gdl::Checkpoint::open(args.weights);
  if (!checkpoint) return checkpoint.status();
  gdl::Expected<gdl::WeightMapping> mapping = gdl::Status::NotFound("no mapping");
  if (args.weight_map.empty() || args.weight_map == "llama") {
    // The Llama mapping depends on config.json (a tied head), beside the weights.
    std::filesystem::path dir = args.weights;
    if (!std::filesystem::is_directory(dir)) dir = dir.parent_path();
    gdl::Expected<gdl::LlamaConfig> config = gdl::LlamaConfig::read((dir / "config.json").string());
    if (!config)
      return gdl::Status(config.status().code(), "--weights with the llama mapping reads config.json beside the weights: " +
                                                     config.status().message());
    mapping = gdl::llama_weight_mapping(*config);
  } else {
    mapping = gdl::WeightMapping::read(args.weight_map);
  }
  if (!mapping) return mapping.status();
  std::vector<gdl::TensorInfo> params;
  for (gdl::ir::ValueId v : g.leaves(gdl::ir::Op::kParam)) params.push_back(gdl::rt::describe_tensor(g.node(v), g.node(v).name, g));
  return gdl::assemble_params(*checkpoint, *mapping, params);
}

}  // namespace

gdl::Expected<gdl::Bindings> make_bindings(const gdl::ir::Graph& g, const Args& args) {
  std::string error;
  gdl::Bindings b;
  b.dims = bind_dims(g, args, &error);
  if (!error.empty()) return gdl::Status::InvalidArgument(error);
  std::mt19937_64 rng(args.seed);
  std::map<std::string, bool> used;
  gdl::Expected<std::map<std::string, gdl::TensorData>> weights = checkpoint_params(g, args);
  if (!weights) return weights.status();
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
    if (n.op == gdl::ir::Op::kState) {  // zero, as in a new session
      gdl::HostTensor t;
      t.dtype = n.type.dtype;
      t.shape = gdl::concrete_shape(n.type.shape, b.dims);
      int64_t count = 1;
      for (int64_t e : t.shape) count *= e;
      t.data.assign(static_cast<size_t>(count), 0.0);
      b.tensors[n.name] = std::move(t);
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
    if (auto w = weights->find(n.name); w != weights->end()) {
      std::vector<double> values = gdl::decode_elements(w->second.dtype, w->second.bytes.data(), t.data.size());
      t.data = std::move(values);
    }
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

}  // namespace gdl::gdlrun
