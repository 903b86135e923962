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

std::string number_text(double v) {
  char text[32];
  std::snprintf(text, sizeof text, "%.17g", v);
  return text;
}

bool is_i32(double v) {
  return v == std::trunc(v) && v >= std::numeric_limits<int32_t>::min() && v <= std::numeric_limits<int32_t>::max();
}


}  // namespace

ParsedArgs parse_args(int argc, const char* const* argv) {
  using tools::add_assignments;
  using tools::strict_number;
  ParsedArgs parsed;
  Args& args = parsed.args.emplace();
  CLI::App app("gdlrun: runs a gdl program (.gdl source or .gdlx artifact) once, with inputs from files or drawn from "
               "a seed, on the GPU when there is one and on the CPU reference otherwise, and prints or writes the "
               "outputs",
               "gdlrun");
  tools::add_standard_flags(app, "gdlrun");
  app.add_option("PROGRAM", args.program, "a .gdl source or a .gdlx artifact")->required();
  add_assignments<int64_t>(app, "--dim", args.dims, "a run-time dim's value (default: its upper bound)", "NAME=N",
                           "an integer");
  add_assignments<std::string>(app, "--input", args.input_files,
                               "an input's raw little-endian elements, row-major, exactly the tensor's bytes",
                               "NAME=FILE");
  add_assignments<std::string>(app, "--param", args.input_files, "a param's contents, as --input", "NAME=FILE");
  add_assignments<double>(app, "--set", args.fills, "fill an input or param with one value", "NAME=VALUE",
                          "a finite number");
  add_assignments<double>(app, "--scalar", args.scalars, "a run-time scalar's value", "NAME=VALUE",
                          "a finite number");
  add_assignments<std::string>(app, "-D", args.consts, "set a const of a .gdl source", "NAME=VALUE");
  app.add_option("--seed", args.seed, "draws the inputs not given")
      ->check(strict_number<uint64_t>("an integer from 0 to 2^64-1"))
      ->default_val(args.seed)
      ->type_name("N");
  app.add_option("--out", args.out_dir, "write each output as DIR/NAME.bin")->type_name("DIR");
  app.add_option("--print", args.print_count, "elements of each output to print")
      ->check(strict_number<int>("a count of elements", 0))
      ->default_val(args.print_count)
      ->type_name("N");
  CLI::Option* cpu = app.add_flag_callback("--cpu", [&args] { args.device = Args::Device::kCpu; },
                                           "the CPU reference interpreter only");
  CLI::Option* gpu = app.add_flag_callback("--gpu", [&args] { args.device = Args::Device::kGpu; }, "the GPU only");
  cpu->excludes(gpu);
  app.add_flag("--check", args.check, "run on both and compare (exit 3 when the GPU differs)");
  app.add_flag("--explain", args.gpu.explain,
               "per-node times and the timeline model's prediction beside measured eager and graph runs (GPU)");
  app.add_flag("--stats", args.gpu.stats, "the session's stats: buckets, padding, node updates, fallbacks (GPU)");
  app.add_flag("--fallback", args.gpu.eager_fallback, "a dim above its bound runs on the eager fallback (GPU)");
  app.add_option_function<std::string>(
         "--policy",
         [&args](const std::string& policy) {
           args.gpu.policy = policy == "update" ? DimPolicyChoice::kUpdate : DimPolicyChoice::kBuckets;
         },
         "serve every run-time dim by buckets or by node updates (default: each dim's policy)")
      ->check(CLI::IsMember({"buckets", "update"}).description(""))
      ->type_name("buckets|update");
  CLI::Option* weights =
      app.add_option("--weights", args.weights, "a safetensors checkpoint (a file, a shard index or a directory)")
          ->type_name("CHECKPOINT");
  app.add_option("--weight-map", args.weight_map, "a weight mapping file, or llama (the default)")
      ->needs(weights)
      ->type_name("FILE|llama");
  app.footer(
      "FILE holds the raw little-endian elements of the tensor's dtype (f16/bf16 as their 16-bit patterns).\n"
      "Exit codes: 0 ok, 1 bad program or inputs, 2 usage or internal error, 3 --check found a GPU result\n"
      "that differs from the CPU one.");
  parsed.outcome = tools::parse_command_line(app, argc, argv, 2);
  if (!parsed.outcome.go_on) parsed.args.reset();
  return parsed;
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
