// The shared body of the example host programs.
//
// 1. Load the .gdlx given, or compile the .gdl given (default:
//    examples/<name>.gdl, found through $GDL_SOURCE_DIR, the source tree,
//    or ./examples).
// 2. Print the program's memory plan: nodes, arena vs naive vs live lower
//    bound, params.
// 3. Make random non-zero params and inputs for the chosen dims and run the
//    CPU reference on them.
// 4. Without a GPU: say so and stop (exit 0). With one: create a session,
//    set params, bind inputs, set scalars; run by graph and eagerly; read
//    every output; compare with the reference (relative error per dtype).
// 5. Print the one-time graph costs, then the median over 200 timed
//    iterations (after a warm-up; 1 with GDL_EXAMPLE_QUICK=1) of: graph replay, eager launch (each to
//    completion), the host submit time of each, the input copy, and a whole
//    request (bind + run + read).
// 6. Explain what the graph saves: the timeline model's prediction from
//    measured per-node device and submit times beside the measured runs
//    (explain_graph), then the session's stats (format_stats).
#include "example_runner.h"

#include "command_line.h"

#include <algorithm>
#include <chrono>
#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <filesystem>
#include <random>
#include <vector>

#include "gdl/jit.h"
#include "gdl/profile.h"

namespace gdl::examples {
namespace {

using Clock = std::chrono::steady_clock;

double us_since(Clock::time_point start) {
  return std::chrono::duration<double, std::micro>(Clock::now() - start).count();
}

double median(std::vector<double> v) {
  std::sort(v.begin(), v.end());
  return v.empty() ? 0 : v[v.size() / 2];
}

std::string human(uint64_t bytes) {
  char buf[64];
  if (bytes >= (1u << 20))
    std::snprintf(buf, sizeof buf, "%.2f MiB", static_cast<double>(bytes) / (1 << 20));
  else if (bytes >= 1024)
    std::snprintf(buf, sizeof buf, "%.1f KiB", static_cast<double>(bytes) / 1024);
  else
    std::snprintf(buf, sizeof buf, "%llu B", static_cast<unsigned long long>(bytes));
  return buf;
}

std::string default_source(const std::string& name) {
  std::vector<std::filesystem::path> roots;
  if (const char* env = std::getenv("GDL_SOURCE_DIR"); env && *env) roots.push_back(std::filesystem::path(env) / "examples");
  roots.push_back(GDL_EXAMPLES_DIR);
  roots.push_back("examples");
  for (const auto& root : roots)
    if (std::filesystem::exists(root / (name + ".gdl"))) return (root / (name + ".gdl")).string();
  return (roots.back() / (name + ".gdl")).string();
}

size_t element_count(const std::vector<int64_t>& shape) {
  size_t n = 1;
  for (int64_t e : shape) n *= static_cast<size_t>(e);
  return n;
}

TensorData random_tensor(const TensorInfo& info, const std::vector<int64_t>& dims, const Values& v, std::mt19937_64& rng) {
  TensorData t;
  t.dtype = info.dtype;
  for (const AxisInfo& a : info.shape) t.shape.push_back(a.is_runtime() ? dims[static_cast<size_t>(a.dim)] : a.extent);
  size_t count = element_count(t.shape);
  std::vector<double> values(count);
  std::uniform_real_distribution<double> magnitude(v.lo, v.hi);
  std::uniform_int_distribution<int64_t> integer(v.int_lo, v.int_hi);
  std::bernoulli_distribution coin(0.5);
  for (double& x : values) {
    if (t.dtype == ElementType::kI32)
      x = static_cast<double>(integer(rng));
    else if (t.dtype == ElementType::kBool)
      x = coin(rng) ? 1 : 0;
    else
      x = magnitude(rng) * (coin(rng) ? 1 : -1);
  }
  t.bytes = encode_elements(t.dtype, values);
  return t;
}

double tolerance(ElementType t) {
  return t == ElementType::kF32 ? 1e-5 : t == ElementType::kF16 ? 2e-3 : t == ElementType::kBF16 ? 1e-2 : 0;
}

// ||got - want|| / ||want|| for floats (inf on a non-finite result), count of differences otherwise.
double relative_error(const TensorData& got, const TensorData& want) {
  size_t count = element_count(want.shape);
  if (got.bytes.size() != want.bytes.size()) return INFINITY;
  std::vector<double> g = decode_elements(got.dtype, got.bytes.data(), count);
  std::vector<double> w = decode_elements(want.dtype, want.bytes.data(), count);
  double diff = 0, norm = 0, differing = 0;
  for (size_t i = 0; i < count; ++i) {
    if (std::isfinite(w[i]) && !std::isfinite(g[i])) return INFINITY;
    differing += g[i] != w[i];
    diff += (g[i] - w[i]) * (g[i] - w[i]);
    norm += w[i] * w[i];
  }
  if (want.dtype == ElementType::kI32 || want.dtype == ElementType::kBool) return differing;
  return norm > 0 ? std::sqrt(diff / norm) : std::sqrt(diff);
}

// Reads every output; false (with a message) on an error.
bool read_all(Session& s, std::map<std::string, TensorData>& out) {
  for (const TensorInfo& info : s.program().outputs()) {
    Expected<std::vector<int64_t>> shape = s.shape_of(info.name);
    if (!shape) return std::fprintf(stderr, "shape_of(%s): %s\n", info.name.c_str(), shape.status().ToString().c_str()), false;
    TensorData t{info.dtype, *shape, std::vector<uint8_t>(element_count(*shape) * element_size(info.dtype))};
    Status st = s.read(info.name, t.bytes.data(), t.bytes.size());
    if (!st.ok()) return std::fprintf(stderr, "read(%s): %s\n", info.name.c_str(), st.ToString().c_str()), false;
    out[info.name] = std::move(t);
  }
  return true;
}

bool compare(const char* how, const std::map<std::string, TensorData>& got, const std::map<std::string, TensorData>& want) {
  bool ok = true;
  for (const auto& [name, w] : want) {
    double e = got.count(name) ? relative_error(got.at(name), w) : INFINITY;
    bool match = e <= tolerance(w.dtype);
    std::printf("  %-6s %-10s relative error %.3g (tolerance %.0e, %s)  %s\n", how, name.c_str(), e, tolerance(w.dtype),
                element_type_name(w.dtype), match ? "ok" : "MISMATCH");
    ok &= match;
  }
  return ok;
}

}  // namespace

int run_example(int argc, char** argv, ExampleSpec spec) {
  std::string path = default_source(spec.name);
  const std::string tool = "run_" + spec.name;
  std::vector<std::string> words;
  CLI::App app("compiles examples/" + spec.name + ".gdl (or runs an artifact), checks graph and eager runs against "
               "the CPU reference and prints their costs",
               tool);
  tools::add_standard_flags(app, tool);
  app.add_option("ARGS", words, "[PROGRAM.gdl|PROGRAM.gdlx] [DIM=VALUE ...] (default: " + path + ", dims at their upper bounds)")
      ->take_all();
  tools::CommandLineOutcome outcome = tools::parse_command_line(app, argc, argv, 2);
  for (size_t i = 0; outcome.go_on && i < words.size(); ++i) {
    std::string name, value;
    if (words[i].find('/') != std::string::npos || !tools::split_assignment(words[i], &name, &value)) {
      path = words[i];
    } else if (std::optional<int64_t> v = tools::parse_number<int64_t>(value)) {
      spec.dims[name] = *v;
    } else {
      outcome = {false, 2, true, words[i] + ": '" + value + "' is not an integer"};
    }
  }
  if (!outcome.go_on) return tools::report_command_line(tool, outcome);
  if (!spec.note.empty()) std::printf("%s\n", spec.note.c_str());

  // 1. The program.
  Clock::time_point t0 = Clock::now();
  bool is_artifact = std::filesystem::path(path).extension() == ".gdlx";
  Expected<Program> loaded = is_artifact ? Program::load(path) : jit::compile(path);
  if (!loaded) {
    std::fprintf(stderr, "error: %s: %s\n", path.c_str(), loaded.status().ToString().c_str());
    return 2;
  }
  const Program& program = *loaded;
  std::printf("program %s (%s %s in %.1f ms)\n", program.name().c_str(), is_artifact ? "loaded" : "compiled",
              path.c_str(), us_since(t0) / 1000);

  // 2. The memory plan.
  std::printf("  nodes %zu; arena %s (naive %s, live lower bound %s); params %s; kernels for %s\n", program.node_count(),
              human(program.arena_bytes()).c_str(), human(program.naive_bytes()).c_str(),
              human(program.live_lower_bound()).c_str(), human(program.params_bytes()).c_str(),
              program.kernel_arch().c_str());

  // 3. Bindings and the CPU reference.
  std::vector<int64_t> dims;
  for (const RuntimeDimInfo& d : program.dims()) {
    int64_t v = spec.dims.count(d.name) ? spec.dims.at(d.name) : d.hi;
    dims.push_back(v);
    std::printf("  dim %s = %lld (bounds [%lld, %lld])\n", d.name.c_str(), static_cast<long long>(v),
                static_cast<long long>(d.lo), static_cast<long long>(d.hi));
  }
  std::mt19937_64 rng(0x6d6c70 + std::hash<std::string>{}(spec.name));
  std::map<std::string, TensorData> tensors;
  for (const std::vector<TensorInfo>* list : {&program.params(), &program.inputs()})
    for (const TensorInfo& info : *list)
      tensors[info.name] = random_tensor(info, dims, spec.values.count(info.name) ? spec.values.at(info.name) : Values{}, rng);
  t0 = Clock::now();
  Expected<std::map<std::string, TensorData>> want = jit::run_reference(program, tensors, spec.scalars);
  if (!want) {
    std::fprintf(stderr, "error: CPU reference: %s\n", want.status().ToString().c_str());
    return 2;
  }
  std::printf("  CPU reference: %.1f ms\n", us_since(t0) / 1000);

  // 4. The GPU, if there is one.
  Expected<std::unique_ptr<Session>> created = Session::create(program, {.device = 0, .record_device_time = true});
  if (!created && created.status().code() == StatusCode::kUnavailable) {
    std::printf("no GPU here (%s): ran the CPU reference path only\n", created.status().message().c_str());
    return 0;
  }
  if (!created) {
    std::fprintf(stderr, "error: Session::create: %s\n", created.status().ToString().c_str());
    return 2;
  }
  Session& s = **created;
  for (const TensorInfo& p : program.params())
    GDL_EXIT_ON_ERROR(s.set_param(p.name, tensors[p.name].bytes.data(), tensors[p.name].bytes.size()), 2);
  auto bind_inputs = [&]() -> Status {
    for (const TensorInfo& in : program.inputs()) {
      const TensorData& t = tensors[in.name];
      Status st = s.bind(in.name, t.bytes.data(), t.bytes.size(), t.dtype, t.shape);
      if (!st.ok()) return st;
    }
    return Status::Ok();
  };
  GDL_EXIT_ON_ERROR(bind_inputs(), 2);
  for (const auto& [name, value] : spec.scalars) GDL_EXIT_ON_ERROR(s.set_scalar(name, value), 2);

  std::map<std::string, TensorData> by_graph, by_eager;
  GDL_EXIT_ON_ERROR(s.run(), 2);
  if (!read_all(s, by_graph)) return 2;
  GDL_EXIT_ON_ERROR(s.run_eager(), 2);
  if (!read_all(s, by_eager)) return 2;
  bool ok = compare("graph", by_graph, *want);
  ok &= compare("eager", by_eager, *want);

  // 5. Costs.
  SessionStats st = s.stats();
  std::printf("  graph: build %.1f us, instantiate %.1f us, upload %.1f us; module load %.1f us (%s)\n",
              st.graph_build_us, st.instantiate_us, st.upload_us, st.library_load_us, st.module_image.c_str());
  // GDL_EXAMPLE_QUICK=1 (e.g. under compute-sanitizer): a few iterations only.
  const bool quick = std::getenv("GDL_EXAMPLE_QUICK") && *std::getenv("GDL_EXAMPLE_QUICK") == '1';
  const int kWarmup = quick ? 1 : 20, kTimed = quick ? 1 : 200;
  std::vector<double> replay, eager, request, copy;
  for (int i = 0; i < kWarmup; ++i) {
    GDL_EXIT_ON_ERROR(s.run(), 2);
    GDL_EXIT_ON_ERROR(s.run_eager(), 2);
  }
  GDL_EXIT_ON_ERROR(s.synchronize(), 2);
  double submit_sum = 0, eager_submit_sum = 0, device_sum = 0, eager_device_sum = 0;
  for (int i = 0; i < kTimed; ++i) {
    t0 = Clock::now();
    GDL_EXIT_ON_ERROR(s.run(), 2);
    GDL_EXIT_ON_ERROR(s.synchronize(), 2);
    replay.push_back(us_since(t0));
    st = s.stats();
    submit_sum += st.last_submit_us;
    device_sum += st.last_device_us;
  }
  for (int i = 0; i < kTimed; ++i) {
    t0 = Clock::now();
    GDL_EXIT_ON_ERROR(s.run_eager(), 2);
    GDL_EXIT_ON_ERROR(s.synchronize(), 2);
    eager.push_back(us_since(t0));
    st = s.stats();
    eager_submit_sum += st.last_eager_submit_us;
    eager_device_sum += st.last_device_us;
  }
  std::map<std::string, TensorData> last;
  for (int i = 0; i < kTimed; ++i) {
    t0 = Clock::now();
    GDL_EXIT_ON_ERROR(bind_inputs(), 2);
    GDL_EXIT_ON_ERROR(s.synchronize(), 2);
    copy.push_back(us_since(t0));
    t0 = Clock::now();
    GDL_EXIT_ON_ERROR(bind_inputs(), 2);
    GDL_EXIT_ON_ERROR(s.run(), 2);
    if (!read_all(s, last)) return 2;
    request.push_back(us_since(t0));
  }
  ok &= compare("last", last, *want);
  double r = median(replay), e = median(eager);
  std::printf("  graph replay %.1f us (median of %d; host submit %.1f us, device %.1f us)\n", r, kTimed,
              submit_sum / kTimed, device_sum / kTimed);
  std::printf("  eager launch %.1f us (median of %d; host submit %.1f us, device %.1f us); graph/eager = %.2fx faster\n",
              e, kTimed, eager_submit_sum / kTimed, eager_device_sum / kTimed, r > 0 ? e / r : 0);
  std::printf("  input copy (bind every input + wait) %.1f us, whole request (bind + run + read) %.1f us (medians)\n", median(copy), median(request));

  // 6. Prediction beside measurement, and the stats.
  GDL_EXIT_ON_ERROR(bind_inputs(), 2);
  Expected<GraphExplanation> explained = explain_graph(s, quick ? 1 : 50);
  if (!explained) {
    std::fprintf(stderr, "error: explain_graph: %s\n", explained.status().ToString().c_str());
    return 2;
  }
  std::printf("%s", explained->table.c_str());
  std::printf("session stats:\n%s", format_stats(s.stats()).c_str());
  std::printf("%s: %s\n", program.name().c_str(), ok ? "all outputs match the CPU reference" : "MISMATCH");
  return ok ? 0 : 1;
}

}  // namespace gdl::examples
