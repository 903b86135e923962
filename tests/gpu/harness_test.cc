// The GPU test harness (gpu_test_util.h) and tests of the harness itself:
// a comparison that could not fail, or all-zero data, would hide bugs.
#include <cuda_runtime_api.h>
#include <unistd.h>

#include <algorithm>
#include <atomic>
#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <limits>
#include <sstream>

#include "gpu_test_util.h"

namespace gdl::gpu_test {

bool cpu_only = false;

std::string source_dir() {
  if (const char* env = std::getenv("GDL_SOURCE_DIR"); env && *env) return env;
  return GDL_SOURCE_DIR;
}

Expected<Program> try_compile_text(const std::string& text) {
  static std::atomic<int> counter{0};
  std::filesystem::path path = std::filesystem::temp_directory_path() /
                               ("gdl_gpu_test_" + std::to_string(getpid()) + "_" + std::to_string(counter++) + ".gdl");
  {
    std::ofstream out(path);
    out << text;
  }
  Expected<Program> program = jit::compile(path.string());
  std::error_code ignored;
  std::filesystem::remove(path, ignored);
  return program;
}

Program compile_text(const std::string& text) {
  Expected<Program> program = try_compile_text(text);
  INFO("program:\n" << text << "\nstatus: " << program.status().message());
  REQUIRE(program.ok());
  return std::move(program).value();
}

uint64_t seed_for(const std::string& what) {
  return std::hash<std::string>{}(what) ^ 0x9e3779b97f4a7c15ull;
}

static std::vector<int64_t> concrete(const TensorInfo& info, const std::vector<int64_t>& dims) {
  std::vector<int64_t> shape;
  for (const AxisInfo& a : info.shape) shape.push_back(a.is_runtime() ? dims.at(static_cast<size_t>(a.dim)) : a.extent);
  return shape;
}

TensorData random_tensor(const TensorInfo& info, const std::vector<int64_t>& dims, std::mt19937_64& rng,
                         const ValueRange& range) {
  TensorData t;
  t.dtype = info.dtype;
  t.shape = concrete(info, dims);
  size_t count = 1;
  for (int64_t e : t.shape) count *= static_cast<size_t>(e);
  std::vector<double> values(count);
  std::uniform_real_distribution<double> magnitude(range.lo, range.hi);
  std::uniform_int_distribution<int64_t> integer(range.int_lo, range.int_hi);
  std::bernoulli_distribution coin(0.5);
  for (size_t i = 0; i < count; ++i) {
    switch (info.dtype) {
      case ElementType::kF32: case ElementType::kF16: case ElementType::kBF16:
        values[i] = magnitude(rng) * (range.positive || coin(rng) ? 1.0 : -1.0);
        break;
      case ElementType::kI32: {
        int64_t v = integer(rng);
        while (v == 0 && range.int_lo < 0 && range.int_hi > 0) v = integer(rng);
        values[i] = static_cast<double>(v);
        break;
      }
      case ElementType::kBool:
        values[i] = coin(rng) ? 1.0 : 0.0;
        break;
    }
  }
  if (info.dtype == ElementType::kBool && count > 1) {  // both values present
    values[0] = 1.0;
    values[count - 1] = 0.0;
  }
  t.bytes = encode_elements(t.dtype, values);
  return t;
}

RangeFor int_tensor_is(const std::string& name, int64_t value) {
  return [name, value](const TensorInfo& info) {
    ValueRange r;
    if (info.name == name) r.int_lo = r.int_hi = value;
    return r;
  };
}

static ValueRange default_range(const Program& program, const TensorInfo& info) {
  ValueRange r;
  if (info.dtype == ElementType::kI32 && info.shape.empty()) {
    // A device scalar such as a KV length: somewhere inside the largest extent.
    int64_t largest = 1;
    for (const std::vector<TensorInfo>* list : {&program.inputs(), &program.params()})
      for (const TensorInfo& t : *list)
        for (const AxisInfo& a : t.shape) largest = std::max(largest, a.extent);
    r.int_lo = 1;
    r.int_hi = largest;
  }
  return r;
}

std::map<std::string, TensorData> random_bindings(const Program& program, const std::vector<int64_t>& dims,
                                                  std::mt19937_64& rng, const RangeFor& range) {
  std::map<std::string, TensorData> out;
  for (const std::vector<TensorInfo>* list : {&program.params(), &program.inputs(), &program.states()})
    for (const TensorInfo& info : *list)
      out[info.name] = random_tensor(info, dims, rng, range ? range(info) : default_range(program, info));
  return out;
}

std::unique_ptr<Session> make_session(const Program& program, const SessionOptions& options, bool poison_padding) {
  Expected<std::unique_ptr<Session>> s = Session::create(program, options);
  INFO("Session::create: " << s.status().message());
  REQUIRE(s.ok());
  if (poison_padding) GDL_REQUIRE_OK(testing::poison_padding(**s));
  return std::move(s).value();
}

Status try_bind_inputs(Session& s, const std::map<std::string, TensorData>& tensors) {
  for (const auto& [name, t] : tensors)
    if (s.program().find_input(name))
      if (Status st = s.bind(name, t.bytes.data(), t.bytes.size(), t.dtype, t.shape); !st.ok()) return st;
  return Status::Ok();
}

Status try_bind_all(Session& s, const std::map<std::string, TensorData>& tensors) {
  for (const auto& [name, t] : tensors) {
    Status st = Status::Ok();
    if (s.program().find_param(name)) st = s.set_param(name, t.bytes.data(), t.bytes.size());
    else if (s.program().find_state(name)) st = s.set_state(name, t.bytes.data(), t.bytes.size());
    if (!st.ok()) return st;
  }
  return try_bind_inputs(s, tensors);
}

void bind_inputs(Session& s, const std::map<std::string, TensorData>& tensors) {
  GDL_REQUIRE_OK(try_bind_inputs(s, tensors));
}

void bind_all(Session& s, const std::map<std::string, TensorData>& tensors) { GDL_REQUIRE_OK(try_bind_all(s, tensors)); }

Expected<std::map<std::string, TensorData>> try_read_outputs(Session& s) {
  std::map<std::string, TensorData> out;
  for (const TensorInfo& info : s.program().outputs()) {
    Expected<std::vector<int64_t>> shape = s.shape_of(info.name);
    if (!shape.ok()) return shape.status();
    TensorData t;
    t.dtype = info.dtype;
    t.shape = *shape;
    size_t count = 1;
    for (int64_t e : t.shape) count *= static_cast<size_t>(e);
    t.bytes.assign(count * element_size(t.dtype), 0);
    if (Status st = s.read(info.name, t.bytes.data(), t.bytes.size()); !st.ok()) return st;
    out[info.name] = std::move(t);
  }
  return out;
}

MemoryUse memory_use() {
  MemoryUse m;
  size_t free = 0, total = 0;
  if (cudaMemGetInfo(&free, &total) == cudaSuccess) m.device_bytes = static_cast<int64_t>(total - free);
  int64_t size_pages = 0, resident_pages = 0;
  std::ifstream("/proc/self/statm") >> size_pages >> resident_pages;
  m.host_bytes = resident_pages * sysconf(_SC_PAGESIZE);
  m.gdl = testing::live_allocations();
  return m;
}

std::map<std::string, TensorData> read_outputs(Session& s) {
  Expected<std::map<std::string, TensorData>> out = try_read_outputs(s);
  INFO("read: " << out.status().message());
  REQUIRE(out.ok());
  return std::move(out).value();
}

Expected<std::map<std::string, TensorData>> try_run_and_read(Session& s, bool eager) {
  if (Status st = gdl::testing::poison_arena(s, 0xFF); !st.ok()) return st;
  if (Status st = eager ? s.run_eager() : s.run(); !st.ok()) return st;
  return try_read_outputs(s);
}

std::map<std::string, TensorData> run_and_read(Session& s, bool eager) {
  Expected<std::map<std::string, TensorData>> out = try_run_and_read(s, eager);
  INFO("run and read: " << out.status().message());
  REQUIRE(out.ok());
  return std::move(out).value();
}

std::map<std::string, TensorData> reference(const Program& program, const std::map<std::string, TensorData>& tensors,
                                            const std::map<std::string, double>& scalars) {
  Expected<std::map<std::string, TensorData>> ref = jit::run_reference(program, tensors, scalars);
  INFO("run_reference: " << ref.status().message());
  REQUIRE(ref.ok());
  return std::move(ref).value();
}

double tolerance(ElementType t) {
  switch (t) {
    case ElementType::kF32: return 1e-5;
    case ElementType::kF16: return 2e-3;
    case ElementType::kBF16: return 1e-2;
    default: return 0;
  }
}

double relative_error(const TensorData& got, const TensorData& want, double norm_floor) {
  const double inf = std::numeric_limits<double>::infinity();
  if (got.dtype != want.dtype || got.shape != want.shape || got.bytes.size() != want.bytes.size()) return inf;
  size_t count = want.bytes.size() / element_size(want.dtype);
  std::vector<double> g = decode_elements(got.dtype, got.bytes.data(), count);
  std::vector<double> w = decode_elements(want.dtype, want.bytes.data(), count);
  if (want.dtype == ElementType::kI32 || want.dtype == ElementType::kBool) {
    double differing = 0;
    for (size_t i = 0; i < count; ++i) differing += g[i] != w[i];
    return differing;
  }
  double diff = 0, norm = 0;
  for (size_t i = 0; i < count; ++i) {
    if (!std::isfinite(w[i])) {
      bool same = std::isnan(w[i]) ? std::isnan(g[i]) : g[i] == w[i];
      if (!same) return inf;
      continue;
    }
    if (!std::isfinite(g[i])) return inf;  // poison (NaN) that no kernel overwrote, or an overflow
    diff += (g[i] - w[i]) * (g[i] - w[i]);
    norm += w[i] * w[i];
  }
  norm = std::max(norm, norm_floor * norm_floor);
  return norm > 0 ? std::sqrt(diff / norm) : std::sqrt(diff);
}

static std::string first_difference(const TensorData& got, const TensorData& want) {
  if (got.shape != want.shape || got.dtype != want.dtype) return "shape or dtype differs";
  size_t count = want.bytes.size() / element_size(want.dtype);
  std::vector<double> g = decode_elements(got.dtype, got.bytes.data(), count);
  std::vector<double> w = decode_elements(want.dtype, want.bytes.data(), count);
  size_t worst = 0;
  double worst_diff = -1;
  for (size_t i = 0; i < count; ++i) {
    double d = std::isnan(g[i]) != std::isnan(w[i]) ? std::numeric_limits<double>::infinity() : std::fabs(g[i] - w[i]);
    if (d > worst_diff && !(std::isnan(g[i]) && std::isnan(w[i]))) worst_diff = d, worst = i;
  }
  std::ostringstream out;
  out << "largest difference at flat index " << worst << " of " << count << ": got " << g[worst] << ", want " << w[worst];
  return out.str();
}

bool expect_match(const std::map<std::string, TensorData>& got, const std::map<std::string, TensorData>& want,
                  const std::string& what) {
  bool all = true;
  for (const auto& output : want) {
    const std::string& name = output.first;
    const TensorData& w = output.second;
    auto it = got.find(name);
    INFO(what << ": output '" << name << "'");
    REQUIRE(it != got.end());
    double error = relative_error(it->second, w);
    INFO("error " << error << " (tolerance " << tolerance(w.dtype) << ", " << element_type_name(w.dtype) << "); "
                  << first_difference(it->second, w));
    CHECK(error <= tolerance(w.dtype));
    all &= error <= tolerance(w.dtype);
  }
  return all;
}

std::string first_mismatch(const std::map<std::string, TensorData>& got, const std::map<std::string, TensorData>& want,
                           bool unit_floor) {
  for (const auto& [name, w] : want) {
    auto it = got.find(name);
    if (it == got.end()) return "no output " + name;
    const double elements = static_cast<double>(w.bytes.size() / std::max<size_t>(1, element_size(w.dtype)));
    const double error = relative_error(it->second, w, unit_floor ? std::sqrt(elements) : 0.0);
    if (!(error <= tolerance(w.dtype)))
      return name + " error " + std::to_string(error) + " (" + element_type_name(w.dtype) + "); " +
             first_difference(it->second, w);
  }
  return "";
}

std::vector<int64_t> upper_dims(const Program& program) {
  std::vector<int64_t> dims;
  for (const RuntimeDimInfo& d : program.dims()) dims.push_back(d.hi);
  return dims;
}

bool check_program(const Program& program, uint64_t seed, const std::vector<int64_t>& dims, const RangeFor& range,
                   const std::map<std::string, double>& scalars, const Adjust& adjust) {
  std::mt19937_64 rng(seed);
  std::map<std::string, TensorData> tensors = random_bindings(program, dims, rng, range);
  if (adjust) adjust(tensors);
  if (cpu_only) {
    std::map<std::string, TensorData> want = reference(program, tensors, scalars);
    return !want.empty();
  }
  std::unique_ptr<Session> s = make_session(program);
  bind_all(*s, tensors);
  for (const auto& [name, value] : scalars) GDL_REQUIRE_OK(s->set_scalar(name, value));
  std::map<std::string, TensorData> by_graph = run_and_read(*s, false);
  bind_all(*s, tensors);  // the eager run starts from the same state as the graph run
  std::map<std::string, TensorData> by_eager = run_and_read(*s, true);
  std::map<std::string, TensorData> want = reference(program, tensors, scalars);
  for (const TensorInfo& state : program.states()) want.erase(state.name);  // outputs only: the runs read no state back
  bool ok = expect_match(by_graph, want, "graph vs CPU reference");
  ok &= expect_match(by_eager, want, "eager vs CPU reference");
  ok &= expect_match(by_eager, by_graph, "eager vs graph");
  return ok;
}

TensorData read_state(Session& s, const TensorInfo& info) {
  TensorData d;
  d.dtype = info.dtype;
  for (const AxisInfo& a : info.shape) d.shape.push_back(a.extent);
  d.bytes.resize(info.max_bytes);
  GDL_REQUIRE_OK(s.read_state(info.name, d.bytes.data(), d.bytes.size()));
  return d;
}

void check_runs(const Program& program, const std::string& what, int runs, const std::vector<int64_t>& batches,
                const RangeFor& range, const EditRun& edit) {
  std::mt19937_64 rng(seed_for(what));
  std::unique_ptr<Session> s = cpu_only ? nullptr : make_session(program);
  std::map<std::string, TensorData> states;
  for (const TensorInfo& info : program.states()) {
    states[info.name] = random_tensor(info, {}, rng, range ? range(info) : ValueRange{});
    if (s) GDL_REQUIRE_OK(s->set_state(info.name, states[info.name].bytes.data(), states[info.name].bytes.size()));
  }
  for (int run = 0; run < runs; ++run) {
    INFO(what << ": run " << run);
    std::vector<int64_t> dims;  // the batch of this run, for a program with one run-time dim
    if (!batches.empty()) dims = {batches[static_cast<size_t>(run) % batches.size()]};
    std::map<std::string, TensorData> inputs = random_bindings(program, dims, rng, range);
    for (const TensorInfo& info : program.states()) inputs.erase(info.name);  // they come from the run before
    if (edit) edit(run, inputs);
    std::map<std::string, TensorData> with_states = inputs;
    for (const auto& [name, data] : states) with_states[name] = data;
    std::map<std::string, TensorData> want = reference(program, with_states);
    if (cpu_only) {
      for (const auto& [name, data] : states) states[name] = want.at(name);
      continue;
    }
    bind_all(*s, inputs);
    std::map<std::string, TensorData> got = run_and_read(*s, run % 2 == 1);
    for (const TensorInfo& info : program.states()) got[info.name] = read_state(*s, info);
    REQUIRE(expect_match(got, want, what));
    for (const auto& [name, data] : states) states[name] = got.at(name);  // the next run starts from the device's
  }
}

}  // namespace gdl::gpu_test

using namespace gdl;
using namespace gdl::gpu_test;

TEST_CASE("harness: random tensors are non-zero and differ per seed") {
  TensorInfo info{"x", ElementType::kF16, {{7, -1}, {33, -1}}, 7 * 33 * 2, "f16[7, 33]"};
  std::mt19937_64 a(seed_for("a")), b(seed_for("b"));
  TensorData ta = random_tensor(info, {}, a, {}), tb = random_tensor(info, {}, b, {});
  std::vector<double> va = decode_elements(ta.dtype, ta.bytes.data(), 7 * 33);
  CHECK(std::none_of(va.begin(), va.end(), [](double v) { return v == 0; }));
  CHECK(ta.bytes != tb.bytes);
}

TEST_CASE("harness: relative_error sees poison, wrong values and integer differences") {
  TensorData want{ElementType::kF32, {3}, encode_elements(ElementType::kF32, std::vector<double>{1, 2, 3})};
  TensorData poisoned = want;
  poisoned.bytes[4] = poisoned.bytes[5] = poisoned.bytes[6] = poisoned.bytes[7] = 0xFF;
  CHECK(relative_error(want, want) == 0);
  CHECK(relative_error(poisoned, want) == std::numeric_limits<double>::infinity());
  TensorData off{ElementType::kF32, {3}, encode_elements(ElementType::kF32, std::vector<double>{1, 2, 3.1})};
  CHECK(relative_error(off, want) > tolerance(ElementType::kF32));
  TensorData wi{ElementType::kI32, {2}, encode_elements(ElementType::kI32, std::vector<double>{5, -7})};
  TensorData gi{ElementType::kI32, {2}, encode_elements(ElementType::kI32, std::vector<double>{5, -6})};
  CHECK(relative_error(gi, wi) == 1);
}
