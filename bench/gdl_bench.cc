// gdl_bench: runs the benchmark workloads through gdl, checks every output
// against PyTorch's on the same data, then times graph replay, eager launches
// and the host cost of one run. bench/README.md describes the data exchange
// with bench/torch_bench.py and what each figure means.
//
//   gdl_bench --data DIR --out gdl.json [--repo ROOT] [--only w2,w3] [--runs 200] [--warmup 20] [--no-chains]
//             [--flush write|read]
//   gdl_bench --data DIR --out gdl.json --cpu-check   # no GPU: compile, CPU reference, compare
//
// 1. Read DIR/manifest.json (the small JSON reader below); keep the variants
//    that --only names.
// 2. Compile each .gdl program once (Program::compile, host clock).
// 3. Per variant: a Session with record_device_time; set_param from the
//    param files; each input set read into host memory and copied to device
//    memory (the source of the timed binds).
// 4. Check before timing, on every set: poison the arena, bind the inputs
//    (host memory), run the graph, read the output, compare it with torch's
//    output and with the float64 reference: ||gdl - torch|| / ||torch|| must be
//    within the variant's tolerance, and NaN (an element never written shows
//    up as NaN after the poison) fails. The same again with run_eager.
//    --cpu-check does this step with Program::run_reference instead.
// 5. Device time of run() and of run_eager(), per run, from the session's own
//    events (SessionOptions.record_device_time, stats().last_device_us).
//    Before each run the L2 is flushed (L2Flush below) by 256 MiB of memory
//    traffic that the session's stream waits for (gdl.h: its copies order
//    with the legacy stream): rotating inputs and cold weights are what is
//    timed, and the GPU is busy while the host submits, so the start event
//    fires when the run can start rather than before its submission reached
//    the GPU. Then the inputs are bound from device memory.
//    Median, p10 and p90 over --runs runs after --warmup, rotating over the
//    timed sets. A batch of runs timed on the host would instead report
//    max(host submit, device time) whenever a run is shorter than its
//    submission (W1, small batches); that figure is step 7.
//    The same for the graph with ordinary edges (a second session with
//    overlap_launches off), after one correctness check of its output.
// 6. Host time of one run, in a third session with default options (no
//    device-time events): synchronize (untimed), then bind every input +
//    run() on the host clock, no sync inside; from host memory (bind's
//    staging copy) and from device memory.
// 7. Loop: --loop-runs of (bind from device + run) between two synchronizes,
//    divided by the count; three loops, median.
// 8. Write every figure to --out as JSON; exit 1 when a check failed or a
//    variant could not run.
#include <cuda_runtime_api.h>

#include <algorithm>
#include <chrono>
#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <functional>
#include <limits>
#include <map>
#include <memory>
#include <optional>
#include <sstream>
#include <string>
#include <vector>

#include "gdl/gdl.h"
#include "gdl/jit.h"
#include "gdl/profile.h"
#include "gdl/testing.h"

namespace {

using gdl::ElementType;
using gdl::Status;

// ---------------------------------------------------------------- JSON in

// A parsed JSON value. Members keep their order; a missing key reads as null.
struct Json {
  enum class Kind { kNull, kBool, kNumber, kString, kArray, kObject } kind = Kind::kNull;
  bool boolean = false;
  double number = 0;
  std::string text;
  std::vector<Json> items;
  std::vector<std::pair<std::string, Json>> members;

  const Json& operator[](const std::string& key) const {
    static const Json null;
    for (const auto& [k, v] : members)
      if (k == key) return v;
    return null;
  }
  bool is_null() const { return kind == Kind::kNull; }
  int64_t as_int() const { return static_cast<int64_t>(std::llround(number)); }
};

class JsonReader {
 public:
  explicit JsonReader(const std::string& text) : s_(text) {}

  // The whole text as one value; on failure, `error` says where and why.
  std::optional<Json> parse(std::string& error) {
    Json v;
    if (!value(v, 0) || (skip(), pos_ != s_.size())) {
      error = error_.empty() ? "trailing characters" : error_;
      error += " at byte " + std::to_string(pos_);
      return std::nullopt;
    }
    return v;
  }

 private:
  void skip() {
    while (pos_ < s_.size() && std::isspace(static_cast<unsigned char>(s_[pos_]))) ++pos_;
  }
  bool fail(const char* why) {
    if (error_.empty()) error_ = why;
    return false;
  }
  bool literal(const char* word) {
    size_t n = std::strlen(word);
    if (s_.compare(pos_, n, word) != 0) return fail("unknown literal");
    pos_ += n;
    return true;
  }
  bool string(std::string& out) {
    ++pos_;  // the opening quote
    while (pos_ < s_.size() && s_[pos_] != '"') {
      char c = s_[pos_++];
      if (c != '\\') {
        out += c;
        continue;
      }
      if (pos_ >= s_.size()) return fail("unterminated escape");
      char e = s_[pos_++];
      switch (e) {
        case 'n': out += '\n'; break;
        case 't': out += '\t'; break;
        case 'r': out += '\r'; break;
        case 'b': out += '\b'; break;
        case 'f': out += '\f'; break;
        case 'u': {  // the manifest is ASCII; keep other code points as '?'
          if (pos_ + 4 > s_.size()) return fail("short \\u escape");
          unsigned code = static_cast<unsigned>(std::strtoul(s_.substr(pos_, 4).c_str(), nullptr, 16));
          out += code < 0x80 ? static_cast<char>(code) : '?';
          pos_ += 4;
          break;
        }
        default: out += e;
      }
    }
    if (pos_ >= s_.size()) return fail("unterminated string");
    ++pos_;
    return true;
  }
  bool value(Json& v, int depth) {
    if (depth > 64) return fail("nesting too deep");
    skip();
    if (pos_ >= s_.size()) return fail("unexpected end");
    char c = s_[pos_];
    if (c == '{') {
      v.kind = Json::Kind::kObject;
      ++pos_;
      skip();
      if (pos_ < s_.size() && s_[pos_] == '}') return ++pos_, true;
      for (;;) {
        skip();
        if (pos_ >= s_.size() || s_[pos_] != '"') return fail("expected a key");
        std::string key;
        if (!string(key)) return false;
        skip();
        if (pos_ >= s_.size() || s_[pos_] != ':') return fail("expected ':'");
        ++pos_;
        v.members.emplace_back(std::move(key), Json{});
        if (!value(v.members.back().second, depth + 1)) return false;
        skip();
        if (pos_ < s_.size() && s_[pos_] == ',') { ++pos_; continue; }
        if (pos_ < s_.size() && s_[pos_] == '}') return ++pos_, true;
        return fail("expected ',' or '}'");
      }
    }
    if (c == '[') {
      v.kind = Json::Kind::kArray;
      ++pos_;
      skip();
      if (pos_ < s_.size() && s_[pos_] == ']') return ++pos_, true;
      for (;;) {
        v.items.emplace_back();
        if (!value(v.items.back(), depth + 1)) return false;
        skip();
        if (pos_ < s_.size() && s_[pos_] == ',') { ++pos_; continue; }
        if (pos_ < s_.size() && s_[pos_] == ']') return ++pos_, true;
        return fail("expected ',' or ']'");
      }
    }
    if (c == '"') {
      v.kind = Json::Kind::kString;
      return string(v.text);
    }
    if (c == 't' || c == 'f') {
      v.kind = Json::Kind::kBool;
      v.boolean = c == 't';
      return literal(v.boolean ? "true" : "false");
    }
    if (c == 'n') return literal("null");
    const char* begin = s_.c_str() + pos_;
    char* end = nullptr;
    v.number = std::strtod(begin, &end);
    if (end == begin) return fail("unexpected character");
    v.kind = Json::Kind::kNumber;
    pos_ += static_cast<size_t>(end - begin);
    return true;
  }

  const std::string& s_;
  size_t pos_ = 0;
  std::string error_;
};

// --------------------------------------------------------------- JSON out

std::string quote(const std::string& s) {
  std::string out = "\"";
  for (char c : s) {
    if (c == '"' || c == '\\') out += '\\', out += c;
    else if (c == '\n') out += "\\n";
    else if (static_cast<unsigned char>(c) < 0x20) out += ' ';
    else out += c;
  }
  return out + "\"";
}

std::string number(double v) {  // JSON has no inf or NaN: those become null
  if (!std::isfinite(v)) return "null";
  char buf[40];
  if (v == std::floor(v) && std::fabs(v) < 9.0e15) std::snprintf(buf, sizeof buf, "%.0f", v);  // counts, bytes
  else std::snprintf(buf, sizeof buf, "%.9g", v);
  return buf;
}

// An object written member by member; values are JSON text.
class JsonObject {
 public:
  JsonObject& add(const std::string& key, const std::string& json) {
    body_ += (body_.empty() ? "" : ", ") + quote(key) + ": " + json;
    return *this;
  }
  JsonObject& num(const std::string& key, double v) { return add(key, number(v)); }
  JsonObject& str(const std::string& key, const std::string& v) { return add(key, quote(v)); }
  JsonObject& flag(const std::string& key, bool v) { return add(key, v ? "true" : "false"); }
  std::string text() const { return "{" + body_ + "}"; }

 private:
  std::string body_;
};

// -------------------------------------------------------------- manifest

struct TensorFile {
  std::string name;
  ElementType dtype = ElementType::kF32;
  std::vector<int64_t> shape;
  std::string file;
  size_t bytes() const {
    size_t n = gdl::element_size(dtype);
    for (int64_t e : shape) n *= static_cast<size_t>(e);
    return n;
  }
  size_t count() const { return bytes() / gdl::element_size(dtype); }
};

struct InputSet {
  std::vector<TensorFile> inputs;
  bool timed = true;
  std::string torch_out, ref64;  // relative to the data dir
};

struct Variant {
  std::string name, workload, program, gdl, dtype;
  std::vector<TensorFile> params;
  TensorFile output;
  std::vector<InputSet> sets;
  double tolerance = 0, bytes = 0, flops = 0;
};

std::optional<ElementType> parse_dtype(const std::string& s) {
  if (s == "f32") return ElementType::kF32;
  if (s == "f16") return ElementType::kF16;
  if (s == "bf16") return ElementType::kBF16;
  if (s == "i32") return ElementType::kI32;
  if (s == "bool") return ElementType::kBool;
  return std::nullopt;
}

Status read_tensor_file(const Json& j, TensorFile& t) {
  t.name = j["name"].text;
  std::optional<ElementType> dtype = parse_dtype(j["dtype"].text);
  if (t.name.empty() || !dtype) return Status::DataLoss("manifest: a tensor without name or known dtype");
  t.dtype = *dtype;
  for (const Json& e : j["shape"].items) t.shape.push_back(e.as_int());
  t.file = j["file"].text;
  return Status::Ok();
}

Status read_manifest(const std::string& path, std::vector<Variant>& out) {
  std::ifstream in(path, std::ios::binary);
  if (!in) return Status::NotFound("cannot open " + path + " (run bench/torch_bench.py --data DIR first)");
  std::stringstream buffer;
  buffer << in.rdbuf();
  std::string text = buffer.str(), error;
  std::optional<Json> root = JsonReader(text).parse(error);
  if (!root) return Status::DataLoss(path + ": " + error);
  if ((*root)["format"].text != "gdl-bench-data/1")
    return Status::DataLoss(path + ": format '" + (*root)["format"].text + "', expected gdl-bench-data/1");
  for (const Json& jv : (*root)["variants"].items) {
    Variant v;
    v.name = jv["name"].text;
    v.workload = jv["workload"].text;
    v.program = jv["program"].text;
    v.gdl = jv["gdl"].text;
    v.dtype = jv["dtype"].text;
    v.tolerance = jv["tolerance"].number;
    v.bytes = jv["bytes"].number;
    v.flops = jv["flops"].number;
    for (const Json& p : jv["params"].items) {
      v.params.emplace_back();
      if (Status s = read_tensor_file(p, v.params.back()); !s.ok()) return s;
    }
    if (Status s = read_tensor_file(jv["output"], v.output); !s.ok()) return s;
    for (const Json& js : jv["sets"].items) {
      InputSet set;
      for (const Json& t : js["inputs"].items) {
        set.inputs.emplace_back();
        if (Status s = read_tensor_file(t, set.inputs.back()); !s.ok()) return s;
      }
      set.timed = js["timed"].kind != Json::Kind::kBool || js["timed"].boolean;
      set.torch_out = js["torch_out"].text;
      set.ref64 = js["ref64"].text;
      v.sets.push_back(std::move(set));
    }
    if (v.name.empty() || v.gdl.empty() || v.sets.empty()) return Status::DataLoss(path + ": an incomplete variant");
    out.push_back(std::move(v));
  }
  return Status::Ok();
}

std::optional<std::vector<uint8_t>> read_bytes(const std::filesystem::path& path) {
  std::ifstream in(path, std::ios::binary);
  if (!in) return std::nullopt;
  return std::vector<uint8_t>(std::istreambuf_iterator<char>(in), std::istreambuf_iterator<char>());
}

Status load_tensor(const std::filesystem::path& dir, const TensorFile& t, std::vector<uint8_t>& out) {
  std::optional<std::vector<uint8_t>> data = read_bytes(dir / t.file);
  if (!data) return Status::NotFound("cannot read " + (dir / t.file).string());
  if (data->size() != t.bytes())
    return Status::DataLoss((dir / t.file).string() + " holds " + std::to_string(data->size()) + " bytes, expected " +
                            std::to_string(t.bytes()));
  out = std::move(*data);
  return Status::Ok();
}

// Torch's output (f32) or the float64 reference of one set; nullopt when absent.
std::optional<std::vector<double>> load_reference(const std::filesystem::path& dir, const std::string& file,
                                                  bool f64, size_t count) {
  if (file.empty()) return std::nullopt;
  std::optional<std::vector<uint8_t>> data = read_bytes(dir / file);
  if (!data || data->size() != count * (f64 ? 8 : 4)) return std::nullopt;
  if (f64) {
    std::vector<double> out(count);
    std::memcpy(out.data(), data->data(), data->size());
    return out;
  }
  return gdl::decode_elements(ElementType::kF32, data->data(), count);
}

// ---------------------------------------------------------------- checks

// ||got - want|| / ||want||; +inf when `got` holds a NaN or an infinity.
double relative_error(const std::vector<double>& got, const std::vector<double>& want) {
  if (got.size() != want.size()) return std::numeric_limits<double>::infinity();
  double diff = 0, norm = 0;
  for (size_t i = 0; i < got.size(); ++i) {
    if (!std::isfinite(got[i])) return std::numeric_limits<double>::infinity();
    diff += (got[i] - want[i]) * (got[i] - want[i]);
    norm += want[i] * want[i];
  }
  return norm > 0 ? std::sqrt(diff / norm) : std::sqrt(diff);
}

struct CheckResult {
  int sets = 0, sets_without_reference = 0;
  double err_vs_torch = 0, err_vs_ref64 = 0, eager_err_vs_torch = 0, eager_err_vs_ref64 = 0;
  bool passed = true, eager_checked = false;
  std::string note;

  void add(const std::vector<double>& got, const std::optional<std::vector<double>>& torch,
           const std::optional<std::vector<double>>& ref64, double tolerance, bool eager) {
    eager_checked = eager_checked || eager;
    double& vs_torch = eager ? eager_err_vs_torch : err_vs_torch;
    double& vs_ref = eager ? eager_err_vs_ref64 : err_vs_ref64;
    if (torch) {
      double e = relative_error(got, *torch);
      vs_torch = std::max(vs_torch, e);
      if (!(e <= tolerance)) passed = false;
    }
    if (ref64) vs_ref = std::max(vs_ref, relative_error(got, *ref64));
  }
  std::string json(double tolerance) const {
    JsonObject o;
    o.flag("passed", passed && sets > 0).num("sets", sets).num("sets_without_reference", sets_without_reference);
    o.num("tolerance", tolerance).num("err_vs_torch", err_vs_torch).num("err_vs_ref64", err_vs_ref64);
    if (eager_checked) o.num("eager_err_vs_torch", eager_err_vs_torch).num("eager_err_vs_ref64", eager_err_vs_ref64);
    if (!note.empty()) o.str("note", note);
    return o.text();
  }
};

// --------------------------------------------------------------- timing

struct Summary {
  double median = NAN, p10 = NAN, p90 = NAN;
  size_t runs = 0;
  std::string json() const {
    return JsonObject().num("median_us", median).num("p10_us", p10).num("p90_us", p90).num("runs", double(runs)).text();
  }
};

Summary summarize(std::vector<double> v) {
  Summary s;
  s.runs = v.size();
  if (v.empty()) return s;
  std::sort(v.begin(), v.end());
  auto at = [&](double q) { return v[static_cast<size_t>(std::llround(q * double(v.size() - 1)))]; };
  size_t n = v.size();
  s.median = n % 2 ? v[n / 2] : 0.5 * (v[n / 2 - 1] + v[n / 2]);
  s.p10 = at(0.10);
  s.p90 = at(0.90);
  return s;
}

double now_us() {
  return std::chrono::duration<double, std::micro>(std::chrono::steady_clock::now().time_since_epoch()).count();
}

Status cuda_check(cudaError_t e, const std::string& what) {
  if (e == cudaSuccess) return Status::Ok();
  std::string text = what + ": " + cudaGetErrorName(e) + " (" + cudaGetErrorString(e) + ")";
  (void)cudaGetLastError();
  return Status::Internal(text);
}

#define BENCH_TRY(expr)                      \
  do {                                       \
    ::gdl::Status bench_status_ = (expr);    \
    if (!bench_status_.ok()) return bench_status_; \
  } while (0)

// Device memory that frees itself.
struct DeviceBuffer {
  void* ptr = nullptr;
  size_t bytes = 0;
  DeviceBuffer() = default;
  DeviceBuffer(const DeviceBuffer&) = delete;
  DeviceBuffer& operator=(const DeviceBuffer&) = delete;
  DeviceBuffer(DeviceBuffer&& o) noexcept : ptr(o.ptr), bytes(o.bytes) { o.ptr = nullptr; }
  ~DeviceBuffer() {
    if (ptr) (void)cudaFree(ptr);
  }
  Status upload(const std::vector<uint8_t>& host) {
    bytes = host.size();
    BENCH_TRY(cuda_check(cudaMalloc(&ptr, std::max<size_t>(bytes, 1)), "cudaMalloc"));
    return cuda_check(cudaMemcpy(ptr, host.data(), bytes, cudaMemcpyHostToDevice), "cudaMemcpy");
  }
};

// ------------------------------------------------------------------ run

struct Options {
  std::filesystem::path data, out, repo = ".";
  std::vector<std::string> only;
  int runs = 200, warmup = 20, loop_runs = 200;
  double max_mode_s = 3;     // a mode of a slow variant gets fewer runs (at least 50) to stay inside this
  double time_budget_s = 0;  // > 0: variants not started by then are skipped
  bool cpu_check = false;
  bool chains = true;  // --no-chains: SessionOptions::multi_step_kernels off in every session (an A/B of the chain kernels)
  std::string compile_cache = "-";  // no cache: compile_ms is a real compile
  size_t flush_bytes = size_t(256) << 20;
  std::string flush = "read";  // --flush: L2Flush's mode (bench/README.md, "L2 flush")
};

// Empties the L2 before a timed run, in one of two ways (--flush):
//  - "write": a memset of flush_bytes on the legacy stream. The L2 is then
//    full of dirty lines, which the timed run writes back to DRAM while it
//    reads its own bytes.
//  - "read": bench/l2_flush.gdl, which reads 256 MiB and writes 256 KiB, in
//    a session of its own, then a 4-byte memset on the legacy stream that
//    orders it before the timed session's stream. The L2 then holds clean
//    lines, as after the weight-reading kernels of a model's other layers.
class L2Flush {
 public:
  Status init(const Options& opt) {
    mode_ = opt.flush;
    if (mode_ == "write") {
      BENCH_TRY(cuda_check(cudaMalloc(&buffer_.ptr, opt.flush_bytes), "allocating the L2 flush buffer"));
      buffer_.bytes = opt.flush_bytes;
      return Status::Ok();
    }
    BENCH_TRY(cuda_check(cudaMalloc(&buffer_.ptr, 16), "allocating the flush's ordering word"));
    buffer_.bytes = 16;
    gdl::jit::CompileSettings settings;
    settings.cache_dir = opt.compile_cache;
    gdl::Expected<gdl::Program> p = gdl::jit::compile((opt.repo / "bench/l2_flush.gdl").string(), settings);
    if (!p.ok()) return p.status();
    program_ = std::move(p).value();
    gdl::Expected<std::unique_ptr<gdl::Session>> s = gdl::Session::create(*program_, gdl::SessionOptions{.device = 0});
    if (!s.ok()) return s.status();
    session_ = std::move(s).value();
    std::vector<float> x(size_t(65536) * 1024);
    for (size_t i = 0; i < x.size(); ++i) x[i] = float(i % 1000);
    return session_->set_param("x", x.data(), x.size() * sizeof(float));
  }
  Status run(int i) {
    if (mode_ == "write")
      return cuda_check(cudaMemsetAsync(buffer_.ptr, i & 0xFF, buffer_.bytes, cudaStreamLegacy), "flush memset");
    BENCH_TRY(session_->run());
    return cuda_check(cudaMemsetAsync(buffer_.ptr, i & 0xFF, 4, cudaStreamLegacy), "flush ordering memset");
  }

 private:
  std::string mode_;
  DeviceBuffer buffer_;
  std::optional<gdl::Program> program_;
  std::unique_ptr<gdl::Session> session_;
};

struct CompiledProgram {
  std::optional<gdl::Program> program;
  Status status;
  double compile_ms = 0;
};

// A graph of one 4-byte memset on a stream of its own, timed on the host
// from cudaGraphLaunch's call to its return: what a launch costs this host
// and driver right now, printed beside gdl's host times.
class LaunchProbe {
 public:
  Status create() {
    BENCH_TRY(cuda_check(cudaStreamCreateWithFlags(&stream_, cudaStreamNonBlocking), "probe stream"));
    BENCH_TRY(cuda_check(cudaMalloc(&buffer_.ptr, 4), "probe buffer"));
    buffer_.bytes = 4;
    cudaGraph_t graph = nullptr;
    BENCH_TRY(cuda_check(cudaGraphCreate(&graph, 0), "probe graph"));
    cudaMemsetParams memset{};
    memset.dst = buffer_.ptr;
    memset.value = 0;
    memset.elementSize = 4;
    memset.width = 1;
    memset.height = 1;
    cudaGraphNode_t node = nullptr;
    Status added = cuda_check(cudaGraphAddMemsetNode(&node, graph, nullptr, 0, &memset), "probe memset node");
    if (added.ok()) added = cuda_check(cudaGraphInstantiate(&exec_, graph, 0), "probe instantiate");
    cudaGraphDestroy(graph);
    return added;
  }
  Status time_launch(double& us) {
    const double begin = now_us();
    BENCH_TRY(cuda_check(cudaGraphLaunch(exec_, stream_), "probe launch"));
    us = now_us() - begin;
    return cuda_check(cudaStreamSynchronize(stream_), "probe sync");
  }
  ~LaunchProbe() {
    if (exec_) cudaGraphExecDestroy(exec_);
    if (stream_) cudaStreamDestroy(stream_);
  }

 private:
  cudaStream_t stream_ = nullptr;
  cudaGraphExec_t exec_ = nullptr;
  DeviceBuffer buffer_;
};

// One input set as loaded: host bytes (for host binds and the CPU reference)
// and a device copy (for the timed binds).
struct LoadedSet {
  std::vector<std::vector<uint8_t>> host;
  std::vector<DeviceBuffer> device;
};

// A std::memcpy of a set's input bytes into pinned host memory, timed on
// the host: the copy a bind from host memory must make (the caller may free
// its bytes once bind returns), alone, printed beside gdl's host times.
// Timed right after the run whose bind read the same bytes, so the source
// is as warm in the host's caches as it gets: a lower bound of that copy.
class HostCopyProbe {
 public:
  Status create(size_t bytes) {
    bytes_ = std::max<size_t>(bytes, 1);
    return cuda_check(cudaMallocHost(&pinned_, bytes_), "probe pinned buffer");
  }
  Status time_copy(const LoadedSet& data, double& us) {
    const double begin = now_us();
    size_t at = 0;
    for (const std::vector<uint8_t>& input : data.host) {
      if (at + input.size() > bytes_) return Status::Internal("the copy probe's buffer is smaller than the inputs");
      std::memcpy(static_cast<unsigned char*>(pinned_) + at, input.data(), input.size());
      at += input.size();
    }
    us = now_us() - begin;
    return Status::Ok();
  }
  ~HostCopyProbe() {
    if (pinned_) cudaFreeHost(pinned_);
  }

 private:
  void* pinned_ = nullptr;
  size_t bytes_ = 0;
};

Status bind_set(gdl::Session& s, const InputSet& set, const LoadedSet& data, bool from_device) {
  for (size_t i = 0; i < set.inputs.size(); ++i) {
    const TensorFile& t = set.inputs[i];
    const void* src = from_device ? data.device[i].ptr : static_cast<const void*>(data.host[i].data());
    BENCH_TRY(s.bind(t.name, src, t.bytes(), t.dtype, t.shape,
                     from_device ? gdl::MemoryKind::kDevice : gdl::MemoryKind::kHost));
  }
  return Status::Ok();
}

Status read_output(gdl::Session& s, const TensorFile& out, std::vector<double>& values) {
  gdl::Expected<std::vector<int64_t>> shape = s.shape_of(out.name);
  if (!shape.ok()) return shape.status();
  if (*shape != out.shape) return Status::Internal("output '" + out.name + "' has another shape than the manifest says");
  std::vector<uint8_t> bytes(out.bytes());
  BENCH_TRY(s.read(out.name, bytes.data(), bytes.size()));
  values = gdl::decode_elements(out.dtype, bytes.data(), out.count());
  return Status::Ok();
}

// Steps 3-7 for one variant on the GPU; fills `json` with what it measured.
Status run_variant_gpu(const Options& opt, const Variant& v, const gdl::Program& program,
                       const std::vector<std::vector<uint8_t>>& params, L2Flush& flush, JsonObject& json) {
  gdl::Expected<std::unique_ptr<gdl::Session>> created =
      gdl::Session::create(program, gdl::SessionOptions{.device = 0, .record_device_time = true, .multi_step_kernels = opt.chains});
  if (!created.ok()) return created.status();
  gdl::Session& s = **created;
  for (size_t i = 0; i < v.params.size(); ++i)
    BENCH_TRY(s.set_param(v.params[i].name, params[i].data(), params[i].size()));

  std::vector<LoadedSet> sets(v.sets.size());
  for (size_t k = 0; k < v.sets.size(); ++k)
    for (const TensorFile& t : v.sets[k].inputs) {
      sets[k].host.emplace_back();
      BENCH_TRY(load_tensor(opt.data, t, sets[k].host.back()));
      sets[k].device.emplace_back();
      BENCH_TRY(sets[k].device.back().upload(sets[k].host.back()));
    }

  // 4. Correctness first, graph and eager, every set.
  CheckResult check;
  for (size_t k = 0; k < v.sets.size(); ++k) {
    std::optional<std::vector<double>> torch = load_reference(opt.data, v.sets[k].torch_out, false, v.output.count());
    std::optional<std::vector<double>> ref64 = load_reference(opt.data, v.sets[k].ref64, true, v.output.count());
    if (!torch) check.sets_without_reference += 1;
    for (bool eager : {false, true}) {
      BENCH_TRY(gdl::testing::poison_arena(s, 0xFF));
      BENCH_TRY(bind_set(s, v.sets[k], sets[k], false));
      BENCH_TRY(eager ? s.run_eager() : s.run());
      std::vector<double> got;
      BENCH_TRY(read_output(s, v.output, got));
      check.add(got, torch, ref64, v.tolerance, eager);
    }
    check.sets += 1;
  }
  if (check.sets_without_reference == check.sets) {
    check.passed = false;
    check.note = "no torch output to compare with";
  }
  json.add("check", check.json(v.tolerance));
  std::printf("  check: %s, max error vs torch %.3g (graph) %.3g (eager), vs f64 %.3g, tolerance %.3g\n",
              check.passed ? "ok" : "FAILED", check.err_vs_torch, check.eager_err_vs_torch, check.err_vs_ref64,
              v.tolerance);

  std::vector<size_t> timed;
  for (size_t k = 0; k < v.sets.size(); ++k)
    if (v.sets[k].timed) timed.push_back(k);
  if (timed.empty()) return Status::DataLoss("variant " + v.name + " has no timed set");
  auto pick = [&](int i) { return timed[static_cast<size_t>(i) % timed.size()]; };

  // A variant so slow that --runs runs of a mode would take more than
  // --max-mode-s gets fewer runs (never under 50); the JSON says how many.
  double t0 = now_us();
  for (int i = 0; i < 3; ++i) {
    BENCH_TRY(bind_set(s, v.sets[pick(i)], sets[pick(i)], true));
    BENCH_TRY(s.run_eager());  // eager is the slower mode
    BENCH_TRY(s.synchronize());
  }
  double per_run_us = (now_us() - t0) / 3 + 100;  // + the flush
  int runs = std::clamp(static_cast<int>(opt.max_mode_s * 1e6 / per_run_us), std::min(50, opt.runs), opt.runs);
  int loop_runs = std::clamp(static_cast<int>(opt.max_mode_s * 1e6 / 3 / per_run_us), std::min(50, opt.loop_runs),
                             opt.loop_runs);

  // The same graph with ordinary edges (SessionOptions::overlap_launches
  // off), checked on the first set, to show what launch overlap is worth;
  // and a session with default options, whose run() records no events,
  // for the host time.
  gdl::Expected<std::unique_ptr<gdl::Session>> serial_created = gdl::Session::create(
      program, gdl::SessionOptions{.device = 0, .record_device_time = true, .overlap_launches = false,
                                   .multi_step_kernels = opt.chains});
  if (!serial_created.ok()) return serial_created.status();
  gdl::Session& serial = **serial_created;
  gdl::Expected<std::unique_ptr<gdl::Session>> plain_created =
      gdl::Session::create(program, gdl::SessionOptions{.device = 0, .multi_step_kernels = opt.chains});
  if (!plain_created.ok()) return plain_created.status();
  gdl::Session& plain = **plain_created;
  {
    std::optional<std::vector<double>> torch = load_reference(opt.data, v.sets[0].torch_out, false, v.output.count());
    std::optional<std::vector<double>> ref64 = load_reference(opt.data, v.sets[0].ref64, true, v.output.count());
    CheckResult serial_check;
    BENCH_TRY(gdl::testing::poison_arena(serial, 0xFF));
    BENCH_TRY(bind_set(serial, v.sets[0], sets[0], false));
    BENCH_TRY(serial.run());
    std::vector<double> got;
    BENCH_TRY(read_output(serial, v.output, got));
    serial_check.add(got, torch, ref64, v.tolerance, false);
    serial_check.sets = 1;  // json() reports a check of no set as failed
    if (!torch) serial_check.sets_without_reference = 1;
    json.add("check_no_overlap", serial_check.json(v.tolerance));
    if (!serial_check.passed) check.passed = false;
    std::printf("  check without launch overlap: %s, error vs torch %.3g\n", serial_check.passed ? "ok" : "FAILED",
                serial_check.err_vs_torch);
  }

  // 5. Device time per run: graph, eager, and graph with ordinary edges;
  //    beside it the host time of each run's submission as the session
  //    times it (SessionStats::last_submit_us, last_eager_submit_us), the
  //    GPU busy with the flush: what the launch of each graph costs the host.
  std::map<std::string, double> medians;  // for the log line
  std::map<std::string, double> submit_medians;
  for (const char* mode : {"graph", "eager", "graph_serial"}) {
    const bool eager = std::strcmp(mode, "eager") == 0;
    gdl::Session& timed_session = std::strcmp(mode, "graph_serial") == 0 ? serial : s;
    std::vector<double> times, submits;
    for (int i = 0; i < opt.warmup + runs; ++i) {
      size_t k = pick(i);
      BENCH_TRY(flush.run(i));
      BENCH_TRY(bind_set(timed_session, v.sets[k], sets[k], true));
      BENCH_TRY(eager ? timed_session.run_eager() : timed_session.run());
      const gdl::SessionStats st = timed_session.stats();  // a copy: one per run
      if (st.last_device_us < 0) return Status::Internal("no device time recorded");
      if (i < opt.warmup) continue;
      times.push_back(st.last_device_us);
      submits.push_back(eager ? st.last_eager_submit_us : st.last_submit_us);
    }
    Summary sum = summarize(times);
    medians[mode] = sum.median;
    json.add(mode, sum.json());
    const Summary submit = summarize(submits);
    submit_medians[mode] = submit.median;
    json.add(std::string(mode) + "_submit", submit.json());
  }
  std::printf("  submit (host, GPU busy): graph %.2f us, eager %.2f us, graph without overlap %.2f us, median of %d\n",
              submit_medians["graph"], submit_medians["eager"], submit_medians["graph_serial"], runs);

  // 6. Host time of bind + run, from host and from device memory.
  //    Beside the sum, its parts: the binds, run() as a whole, and the part
  //    of run() the session times itself (SessionStats::last_submit_us:
  //    node updates, copy-node switches, the valid-dims copy, the launch);
  //    and, after each run from device memory, the host time of launching
  //    a graph of one 4-byte memset (LaunchProbe): the driver's own cost on
  //    this host at that moment, so that a slow host shows as such.
  LaunchProbe probe;
  BENCH_TRY(probe.create());
  std::vector<double> probes;
  HostCopyProbe copy_probe;
  size_t input_bytes = 0;
  for (const LoadedSet& set : sets) {
    size_t total = 0;
    for (const std::vector<uint8_t>& input : set.host) total += input.size();
    input_bytes = std::max(input_bytes, total);
  }
  BENCH_TRY(copy_probe.create(input_bytes));
  std::vector<double> copies;
  for (bool from_device : {false, true}) {
    std::vector<double> times, binds, run_calls, submits;
    for (int i = 0; i < opt.warmup + runs; ++i) {
      size_t k = pick(i);
      BENCH_TRY(plain.synchronize());
      double begin = now_us();
      BENCH_TRY(bind_set(plain, v.sets[k], sets[k], from_device));
      double bound = now_us();
      BENCH_TRY(plain.run());
      double end = now_us();
      if (from_device) {
        BENCH_TRY(plain.synchronize());
        double launch_us = 0;
        BENCH_TRY(probe.time_launch(launch_us));
        if (i >= opt.warmup) probes.push_back(launch_us);
      } else {
        double copy_us = 0;
        BENCH_TRY(copy_probe.time_copy(sets[k], copy_us));
        if (i >= opt.warmup) copies.push_back(copy_us);
      }
      if (i < opt.warmup) continue;
      times.push_back(end - begin);
      binds.push_back(bound - begin);
      run_calls.push_back(end - bound);
      submits.push_back(plain.stats().last_submit_us);
    }
    const std::string key = from_device ? "host_device_bind" : "host";
    Summary sum = summarize(times);
    medians[key] = sum.median;
    json.add(key, sum.json());
    const Summary bind = summarize(binds), run_call = summarize(run_calls), submit = summarize(submits);
    json.add(key + "_bind", bind.json());
    json.add(key + "_run", run_call.json());
    json.add(key + "_submit", submit.json());
    std::printf("  host %s: bind %.2f us, run() %.2f us (of which submit %.2f us), median of %zu\n",
                from_device ? "from device memory" : "from host memory", bind.median, run_call.median,
                submit.median, bind.runs);
  }
  const Summary probe_sum = summarize(probes), copy_sum = summarize(copies);
  json.add("host_launch_probe", probe_sum.json());
  json.add("host_copy_probe", copy_sum.json());
  std::printf("  host launch of a one-memset graph: %.2f us; memcpy of the inputs' %zu bytes into pinned memory: "
              "%.2f us; medians of %zu\n",
              probe_sum.median, input_bytes, copy_sum.median, probe_sum.runs);

  // 7. Back-to-back loop.
  std::vector<double> loops;
  for (int rep = 0; rep < 3; ++rep) {
    BENCH_TRY(plain.synchronize());
    t0 = now_us();
    for (int i = 0; i < loop_runs; ++i) {
      size_t k = pick(i);
      BENCH_TRY(bind_set(plain, v.sets[k], sets[k], true));
      BENCH_TRY(plain.run());
    }
    BENCH_TRY(plain.synchronize());
    loops.push_back((now_us() - t0) / loop_runs);
  }
  Summary loop = summarize(loops);
  loop.p10 = *std::min_element(loops.begin(), loops.end());
  loop.p90 = *std::max_element(loops.begin(), loops.end());
  loop.runs = static_cast<size_t>(3 * loop_runs);
  json.add("loop", loop.json());
  std::printf("  device time (median of %d): graph %.2f us, eager %.2f us, graph without overlap %.2f us; host "
              "bind+run %.2f us (host memory), %.2f us (device memory); loop %.2f us/run\n",
              runs, medians["graph"], medians["eager"], medians["graph_serial"], medians["host"],
              medians["host_device_bind"], loop.median);

  gdl::SessionStats st = s.stats();
  json.add("session", JsonObject()
                          .num("nodes", double(st.node_count))
                          .num("arena_bytes", double(st.arena_bytes))
                          .num("params_bytes", double(st.params_bytes))
                          .num("graph_build_us", st.graph_build_us)
                          .num("instantiate_us", st.instantiate_us)
                          .num("upload_us", st.upload_us)
                          .num("library_load_us", st.library_load_us)
                          .num("mean_submit_us", st.mean_submit_us)
                          .num("mean_eager_submit_us", st.mean_eager_submit_us)
                          .num("node_updates", double(st.node_updates))
                          .text());
  if (!check.passed) return Status::FailedPrecondition("output check failed (timings kept for reference)");
  return Status::Ok();
}

// Step 4 on the CPU reference interpreter (--cpu-check).
Status run_variant_cpu(const Options& opt, const Variant& v, const gdl::Program& program,
                       const std::vector<std::vector<uint8_t>>& params, JsonObject& json) {
  std::map<std::string, gdl::TensorData> tensors;
  for (size_t i = 0; i < v.params.size(); ++i)
    tensors[v.params[i].name] = gdl::TensorData{v.params[i].dtype, v.params[i].shape, params[i]};
  CheckResult check;
  for (const InputSet& set : v.sets) {
    std::optional<std::vector<double>> torch = load_reference(opt.data, set.torch_out, false, v.output.count());
    std::optional<std::vector<double>> ref64 = load_reference(opt.data, set.ref64, true, v.output.count());
    if (!torch && !ref64) continue;  // the dry run writes references for a few sets only
    for (const TensorFile& t : set.inputs) {
      std::vector<uint8_t> bytes;
      BENCH_TRY(load_tensor(opt.data, t, bytes));
      tensors[t.name] = gdl::TensorData{t.dtype, t.shape, std::move(bytes)};
    }
    gdl::Expected<std::map<std::string, gdl::TensorData>> out = gdl::jit::run_reference(program, tensors);
    if (!out.ok()) return out.status();
    auto it = out->find(v.output.name);
    if (it == out->end()) return Status::Internal("the reference run has no output '" + v.output.name + "'");
    if (it->second.shape != v.output.shape) return Status::Internal("the reference output has another shape");
    std::vector<double> got = gdl::decode_elements(it->second.dtype, it->second.bytes.data(), v.output.count());
    check.add(got, torch, ref64, v.tolerance, false);
    check.sets += 1;
  }
  if (check.sets == 0) {
    check.passed = false;
    check.note = "no set with a reference output";
  }
  json.add("check", check.json(v.tolerance));
  std::printf("  cpu check: %s on %d sets, error vs torch %.3g, vs f64 %.3g, tolerance %.3g\n",
              check.passed ? "ok" : "FAILED", check.sets, check.err_vs_torch, check.err_vs_ref64, v.tolerance);
  if (!check.passed) return Status::FailedPrecondition("output check failed");
  return Status::Ok();
}

bool selected(const Options& opt, const Variant& v) {
  if (opt.only.empty()) return true;
  for (const std::string& w : opt.only)
    if (v.name.find(w) != std::string::npos) return true;
  return false;
}

int usage(const char* why) {
  std::fprintf(stderr,
               "gdl_bench: %s\n"
               "usage: gdl_bench --data DIR --out FILE [--repo ROOT] [--only a,b] [--runs N] [--warmup N] [--no-chains]\n"
               "                 [--flush write|read]\n"
               "                 [--loop-runs N] [--max-mode-s S] [--time-budget-s S] [--compile-cache DIR|-]\n"
               "                 [--cpu-check]\n",
               why);
  return 2;
}

int run(const Options& opt) {
  std::vector<Variant> variants;
  if (Status s = read_manifest((opt.data / "manifest.json").string(), variants); !s.ok()) {
    std::fprintf(stderr, "gdl_bench: %s\n", s.message().c_str());
    return 2;
  }
  std::string device = "cpu reference";
  L2Flush flush;
  if (!opt.cpu_check) {
    int count = 0;
    cudaError_t e = cudaGetDeviceCount(&count);
    if (e != cudaSuccess || count == 0) {
      std::fprintf(stderr, "gdl_bench: no usable GPU (%s); --cpu-check runs the checks on the CPU\n",
                   e != cudaSuccess ? cudaGetErrorString(e) : "no device");
      return 3;
    }
    cudaDeviceProp prop{};
    if (cudaGetDeviceProperties(&prop, 0) == cudaSuccess) device = prop.name;
    if (Status s = flush.init(opt); !s.ok()) {
      std::fprintf(stderr, "gdl_bench: the L2 flush: %s\n", s.message().c_str());
      return 3;
    }
  }

  JsonObject settings;
  settings.num("runs", opt.runs).num("warmup", opt.warmup).num("loop_runs", opt.loop_runs);
  settings.num("max_mode_s", opt.max_mode_s).num("time_budget_s", opt.time_budget_s);
  settings.num("flush_bytes", double(opt.flush_bytes)).str("flush", opt.flush).str("compile_cache", opt.compile_cache);
  std::string variants_json;
  // Rewritten after every variant, so that a run stopped by a time limit
  // still leaves what it measured.
  auto write_json = [&]() {
    std::error_code ignored;
    if (opt.out.has_parent_path()) std::filesystem::create_directories(opt.out.parent_path(), ignored);
    std::ofstream out(opt.out);
    out << "{\"tool\": \"gdl\", \"mode\": " << quote(opt.cpu_check ? "cpu-check" : "gpu")
        << ", \"device\": " << quote(device) << ", \"data\": " << quote(std::filesystem::absolute(opt.data).string())
        << ", \"settings\": " << settings.text() << ",\n \"variants\": {" << variants_json << "\n}}\n";
    return static_cast<bool>(out);
  };

  std::map<std::string, CompiledProgram> programs;
  std::string cached_program;  // params of the program in hand, read once for all its variants
  std::vector<std::vector<uint8_t>> params;
  int failures = 0;
  double start_us = now_us();
  for (const Variant& v : variants) {
    if (!selected(opt, v)) continue;
    std::printf("%s\n", v.name.c_str());
    JsonObject json;
    json.str("workload", v.workload).str("dtype", v.dtype).str("program", v.program);
    json.num("bytes", v.bytes).num("flops", v.flops);
    Status status;
    CompiledProgram& compiled = programs[v.gdl];
    if (opt.time_budget_s > 0 && now_us() - start_us > opt.time_budget_s * 1e6) {
      status = Status::Unavailable("skipped: the time budget of " + number(opt.time_budget_s) + " s is spent");
    } else if (!compiled.program && compiled.status.ok()) {
      double t0 = now_us();
      gdl::jit::CompileSettings compile_settings;
      compile_settings.cache_dir = opt.compile_cache;
      gdl::Expected<gdl::Program> p = gdl::jit::compile((opt.repo / v.gdl).string(), compile_settings);
      compiled.compile_ms = (now_us() - t0) / 1000.0;
      if (p.ok()) compiled.program = std::move(p).value();
      else compiled.status = p.status();
    }
    if (compiled.program && status.ok()) {
      const gdl::Program& prog = *compiled.program;
      json.add("compile", JsonObject()
                              .num("compile_ms", compiled.compile_ms)
                              .num("nodes", double(prog.node_count()))
                              .num("arena_bytes", double(prog.arena_bytes()))
                              .num("params_bytes", double(prog.params_bytes()))
                              .num("naive_bytes", double(prog.naive_bytes()))
                              .str("arch", prog.kernel_arch())
                              .text());
      if (cached_program != v.program) {
        params.assign(v.params.size(), {});
        cached_program.clear();
        for (size_t i = 0; i < v.params.size() && status.ok(); ++i) status = load_tensor(opt.data, v.params[i], params[i]);
        if (status.ok()) cached_program = v.program;
      }
      if (status.ok())
        status = opt.cpu_check ? run_variant_cpu(opt, v, prog, params, json)
                               : run_variant_gpu(opt, v, prog, params, flush, json);
    } else if (status.ok()) {
      status = compiled.status;
    }
    if (!status.ok()) {
      failures += 1;
      json.str("error", status.ToString());
      std::printf("  error: %s\n", status.ToString().c_str());
    } else {
      json.add("error", "null");
    }
    variants_json += (variants_json.empty() ? "\n  " : ",\n  ") + quote(v.name) + ": " + json.text();
    write_json();
  }

  if (!write_json()) {
    std::fprintf(stderr, "gdl_bench: cannot write %s\n", opt.out.c_str());
    return 2;
  }
  std::printf("wrote %s (%d of the variants failed)\n", opt.out.c_str(), failures);
  return failures ? 1 : 0;
}

}  // namespace

int main(int argc, char** argv) {
  std::setvbuf(stdout, nullptr, _IOLBF, 0);  // the log is read while a run is in progress
  Options opt;
  for (int i = 1; i < argc; ++i) {
    std::string a = argv[i];
    auto next = [&]() -> const char* { return i + 1 < argc ? argv[++i] : nullptr; };
    auto int_arg = [&](int& target) {
      const char* v = next();
      if (!v) return false;
      target = std::atoi(v);
      return target >= 1;
    };
    if (a == "--data") {
      const char* v = next();
      if (!v) return usage("--data needs a directory");
      opt.data = v;
    } else if (a == "--out") {
      const char* v = next();
      if (!v) return usage("--out needs a file");
      opt.out = v;
    } else if (a == "--repo") {
      const char* v = next();
      if (!v) return usage("--repo needs a directory");
      opt.repo = v;
    } else if (a == "--only") {
      const char* v = next();
      if (!v) return usage("--only needs a list");
      std::stringstream list(v);
      for (std::string w; std::getline(list, w, ',');)
        if (!w.empty()) opt.only.push_back(w);
    } else if (a == "--compile-cache") {
      const char* v = next();
      if (!v) return usage("--compile-cache needs a directory or -");
      opt.compile_cache = v;
    } else if (a == "--runs") {
      if (!int_arg(opt.runs)) return usage("--runs needs a positive count");
    } else if (a == "--warmup") {
      if (!int_arg(opt.warmup)) return usage("--warmup needs a positive count");
    } else if (a == "--loop-runs") {
      if (!int_arg(opt.loop_runs)) return usage("--loop-runs needs a positive count");
    } else if (a == "--max-mode-s" || a == "--time-budget-s") {
      const char* v = next();
      double value = v ? std::atof(v) : -1;
      if (value <= 0) return usage((a + " needs a positive number of seconds").c_str());
      (a == "--max-mode-s" ? opt.max_mode_s : opt.time_budget_s) = value;
    } else if (a == "--cpu-check") {
      opt.cpu_check = true;
    } else if (a == "--no-chains") {
      opt.chains = false;
    } else if (a == "--flush") {
      const char* v = next();
      if (!v || (std::strcmp(v, "write") != 0 && std::strcmp(v, "read") != 0)) return usage("--flush needs write or read");
      opt.flush = v;
    } else {
      return usage(("unknown argument " + a).c_str());
    }
  }
  if (opt.data.empty() || opt.out.empty()) return usage("--data and --out are required");
  return run(opt);
}
