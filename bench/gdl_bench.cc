// gdl_bench: runs the benchmark workloads through gdl, checks every output
// against PyTorch's on the same data, then times graph replay, eager launches
// and the host cost of one run. bench/README.md describes the data exchange
// with bench/torch_bench.py and what each figure means.
//
//   gdl_bench --data DIR --out gdl.json [--repo ROOT] [--only w2,w3] [--runs 200] [--warmup 20] [--no-chains]
//             [--flush write|read]
//   gdl_bench --data DIR --out gdl.json --cpu-check   # no GPU: compile, CPU reference, compare
//   gdl_bench --data DIR --out gdl.json --sweep       # bench/sweep.py: check, graph time, host time
//
// 1. Read DIR/manifest.json (bench_data.cc, bench_json.cc); keep the variants
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

#include "command_line.h"

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

#include "bench_data.h"
#include "bench_json.h"

namespace {

using namespace gdl_bench;

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
  bool sweep = false;  // --sweep: check, graph device time and host time only, three sessions per program
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

// Every input set of `v`, in host memory and copied to device memory.
Status load_sets(const Options& opt, const Variant& v, std::vector<LoadedSet>& sets) {
  sets.clear();
  sets.resize(v.sets.size());  // LoadedSet holds move-only device buffers
  for (size_t k = 0; k < v.sets.size(); ++k)
    for (const TensorFile& t : v.sets[k].inputs) {
      sets[k].host.emplace_back();
      BENCH_TRY(load_tensor(opt.data, t, sets[k].host.back()));
      sets[k].device.emplace_back();
      BENCH_TRY(sets[k].device.back().upload(sets[k].host.back()));
    }
  return Status::Ok();
}

// How the timed binds give the inputs: copied from host memory, copied
// from device memory, or by reference to device memory (no copy; where the
// session refuses that, as for rows padded to a bucket, a device bind).
enum class BindPath { kHost, kDevice, kReference };

Status bind_set(gdl::Session& s, const InputSet& set, const LoadedSet& data, BindPath path) {
  for (size_t i = 0; i < set.inputs.size(); ++i) {
    const TensorFile& t = set.inputs[i];
    if (path == BindPath::kReference &&
        s.bind_reference(t.name, data.device[i].ptr, t.bytes(), t.dtype, t.shape).ok())
      continue;
    const void* src = path == BindPath::kHost ? static_cast<const void*>(data.host[i].data()) : data.device[i].ptr;
    BENCH_TRY(s.bind(t.name, src, t.bytes(), t.dtype, t.shape,
                     path == BindPath::kHost ? gdl::MemoryKind::kHost : gdl::MemoryKind::kDevice));
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

// Step 4: every set bound from host memory on a poisoned arena, the graph
// run (and an eager run when `with_eager`), the output against torch's and
// the float64 reference.
Status check_sets(const Options& opt, const Variant& v, gdl::Session& s, const std::vector<LoadedSet>& sets,
                  bool with_eager, CheckResult& check, BindPath path = BindPath::kHost) {
  for (size_t k = 0; k < v.sets.size(); ++k) {
    std::optional<std::vector<double>> torch = load_reference(opt.data, v.sets[k].torch_out, false, v.output.count());
    std::optional<std::vector<double>> ref64 = load_reference(opt.data, v.sets[k].ref64, true, v.output.count());
    if (!torch) check.sets_without_reference += 1;
    for (bool eager : {false, true}) {
      if (eager && !with_eager) continue;
      BENCH_TRY(gdl::testing::poison_arena(s, 0xFF));
      BENCH_TRY(bind_set(s, v.sets[k], sets[k], path));
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

  std::vector<LoadedSet> sets;
  BENCH_TRY(load_sets(opt, v, sets));

  // 4. Correctness first, graph and eager, every set.
  CheckResult check;
  BENCH_TRY(check_sets(opt, v, s, sets, /*with_eager=*/true, check));
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
    BENCH_TRY(bind_set(s, v.sets[pick(i)], sets[pick(i)], BindPath::kDevice));
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
    BENCH_TRY(bind_set(serial, v.sets[0], sets[0], BindPath::kHost));
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

  // 5. Device time per run: graph, graph with the inputs bound by reference
  //    (read in place: no copy node, where the session can), eager, and
  //    graph with ordinary edges;
  //    beside it the host time of each run's submission as the session
  //    times it (SessionStats::last_submit_us, last_eager_submit_us), the
  //    GPU busy with the flush: what the launch of each graph costs the host.
  std::map<std::string, double> medians;  // for the log line
  std::map<std::string, double> submit_medians;
  for (const char* mode : {"graph", "graph_reference", "eager", "graph_serial"}) {
    const bool eager = std::strcmp(mode, "eager") == 0;
    const BindPath path = std::strcmp(mode, "graph_reference") == 0 ? BindPath::kReference : BindPath::kDevice;
    gdl::Session& timed_session = std::strcmp(mode, "graph_serial") == 0 ? serial : s;
    std::vector<double> times, submits;
    for (int i = 0; i < opt.warmup + runs; ++i) {
      size_t k = pick(i);
      BENCH_TRY(flush.run(i));
      BENCH_TRY(bind_set(timed_session, v.sets[k], sets[k], path));
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
  for (BindPath path : {BindPath::kHost, BindPath::kDevice, BindPath::kReference}) {
    const bool from_device = path != BindPath::kHost;
    std::vector<double> times, binds, run_calls, submits;
    for (int i = 0; i < opt.warmup + runs; ++i) {
      size_t k = pick(i);
      BENCH_TRY(plain.synchronize());
      double begin = now_us();
      BENCH_TRY(bind_set(plain, v.sets[k], sets[k], path));
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
    const std::string key = path == BindPath::kHost     ? "host"
                            : path == BindPath::kDevice ? "host_device_bind"
                                                        : "host_reference_bind";
    Summary sum = summarize(times);
    medians[key] = sum.median;
    json.add(key, sum.json());
    const Summary bind = summarize(binds), run_call = summarize(run_calls), submit = summarize(submits);
    json.add(key + "_bind", bind.json());
    json.add(key + "_run", run_call.json());
    json.add(key + "_submit", submit.json());
    std::printf("  host %s: bind %.2f us, run() %.2f us (of which submit %.2f us), median of %zu\n",
                path == BindPath::kHost     ? "from host memory"
                : path == BindPath::kDevice ? "from device memory"
                                            : "by reference",
                bind.median, run_call.median, submit.median, bind.runs);
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
      BENCH_TRY(bind_set(plain, v.sets[k], sets[k], BindPath::kDevice));
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

// The host time of cudaGraphLaunch alone of an export of session `s`'s
// graph (export_graph with `set` bound from device memory, instantiated
// here), launched on the session's own stream (idle: `s` is never run),
// `runs` times after `warmup`. The export is the graph run() launches less
// its event node, plus a node that writes the valid dims where the program
// has run-time dims. FailedPrecondition where the graph cannot be exported.
Status time_own_graph_launches(gdl::Session& s, const InputSet& set, const LoadedSet& data, int warmup, int runs,
                               std::vector<double>& launches) {
  BENCH_TRY(bind_set(s, set, data, BindPath::kDevice));
  gdl::Expected<CUgraph_st*> exported = s.export_graph();
  if (!exported) return exported.status();
  cudaGraphExec_t exec = nullptr;
  Status made = cuda_check(cudaGraphInstantiate(&exec, *exported, 0), "instantiating the exported graph");
  for (int i = 0; made.ok() && i < warmup + runs; ++i) {
    const double begin = now_us();
    made = cuda_check(cudaGraphLaunch(exec, s.stream()), "launching the exported graph");
    const double end = now_us();
    if (made.ok()) made = cuda_check(cudaStreamSynchronize(s.stream()), "exported graph sync");
    if (made.ok() && i >= warmup) launches.push_back(end - begin);
  }
  if (exec) cudaGraphExecDestroy(exec);
  cudaGraphDestroy(*exported);
  if (!made.ok()) launches.clear();
  return made;
}

// The sessions of a program under --sweep, params set once for all its
// variants, each with its own copy of the params: one that records device
// time, one with default options for the host time (recording events
// costs the host time of its own), and one whose graphs are exported for
// a host-time control (an exported graph makes its session write the
// valid-dims block before every run, so it is never run; null where the
// device had no room for it).
struct SweepSessions {
  std::unique_ptr<gdl::Session> timed, plain, exported;
};

// --sweep (bench/sweep.py): the check of every set, then the graph's
// device time (`s.timed`), the host time of bind (from device memory) +
// run (`s.plain`), and the two controls that split its submit: the same
// set bound every run (`s.plain`) and the launch of an exported graph
// alone (`s.exported`).
Status run_variant_sweep(const Options& opt, const Variant& v, SweepSessions& sessions, L2Flush& flush,
                         JsonObject& json) {
  gdl::Session& s = *sessions.timed;
  std::vector<LoadedSet> sets;
  BENCH_TRY(load_sets(opt, v, sets));
  // Checked as the timed runs bind: from host memory, and by reference.
  CheckResult check;
  BENCH_TRY(check_sets(opt, v, s, sets, /*with_eager=*/false, check));
  BENCH_TRY(check_sets(opt, v, s, sets, /*with_eager=*/false, check, BindPath::kReference));
  json.add("check", check.json(v.tolerance));
  std::vector<size_t> timed;
  for (size_t k = 0; k < v.sets.size(); ++k)
    if (v.sets[k].timed) timed.push_back(k);
  if (timed.empty()) return Status::DataLoss("variant " + v.name + " has no timed set");
  auto pick = [&](int i) { return timed[static_cast<size_t>(i) % timed.size()]; };
  // Device time with the inputs bound from device memory (copied by the
  // graph's copy node), then bound by reference (read in place where the
  // kernels can: PyTorch's timed replay has its inputs in place too).
  // Inputs that a cuBLASLt call reads, or that bind_reference refuses, are
  // still copied in the second: reference_copies_per_run counts them.
  std::vector<double> device, by_reference, host;
  uint64_t copies_before = 0;
  for (BindPath path : {BindPath::kDevice, BindPath::kReference})
    for (int i = 0; i < opt.warmup + opt.runs; ++i) {
      if (path == BindPath::kReference && i == opt.warmup) copies_before = s.stats().reference_copies;
      const size_t k = pick(i);
      BENCH_TRY(flush.run(i));
      BENCH_TRY(bind_set(s, v.sets[k], sets[k], path));
      BENCH_TRY(s.run());
      if (i >= opt.warmup) (path == BindPath::kDevice ? device : by_reference).push_back(s.stats().last_device_us);
    }
  // The host time's parts, as in the workloads' step 6: bind, run() and the
  // session's own submit time within it, and after each run the launch of a
  // one-memset graph (what a launch costs this host at that moment).
  gdl::Session& plain = *sessions.plain;
  LaunchProbe probe;
  BENCH_TRY(probe.create());
  // One host-timed run of set k: bind, run(), then the probe on an idle GPU.
  struct HostRun {
    double bind_us = 0, run_us = 0, submit_us = 0, probe_us = 0;
  };
  auto host_run = [&](size_t k, HostRun& out) -> Status {
    BENCH_TRY(plain.synchronize());
    const double begin = now_us();
    BENCH_TRY(bind_set(plain, v.sets[k], sets[k], BindPath::kDevice));
    const double bound = now_us();
    BENCH_TRY(plain.run());
    const double end = now_us();
    out = {bound - begin, end - bound, plain.stats().last_submit_us, 0};
    BENCH_TRY(plain.synchronize());
    return probe.time_launch(out.probe_us);
  };
  std::vector<double> binds, run_calls, submits, probes;
  for (int i = 0; i < opt.warmup + opt.runs; ++i) {
    HostRun r;
    BENCH_TRY(host_run(pick(i), r));
    if (i < opt.warmup) continue;
    host.push_back(r.bind_us + r.run_us);
    binds.push_back(r.bind_us);
    run_calls.push_back(r.run_us);
    submits.push_back(r.submit_us);
    probes.push_back(r.probe_us);
  }
  // Two controls that split submit, each in a loop of its own right after
  // (so under the host's state of the moment, as the probe shows): the same
  // set bound before every run (the input copy node keeps its sources, so
  // no node update); and the launch alone of an export of this program's
  // graph.
  std::vector<double> same_set_submits, own_graph_launches;
  for (int i = 0; i < opt.warmup + opt.runs; ++i) {
    HostRun r;
    BENCH_TRY(host_run(pick(0), r));
    if (i >= opt.warmup) same_set_submits.push_back(r.submit_us);
  }
  // A graph that cannot be exported (an input padded to a bucket's rows), or
  // no session for it: the control is left out; any other error is the run's.
  if (!sessions.exported) {
    json.str("host_own_graph_launch_skipped", "no session for it (device memory)");
  } else if (const Status export_status = time_own_graph_launches(*sessions.exported, v.sets[pick(0)], sets[pick(0)],
                                                                  opt.warmup, opt.runs, own_graph_launches);
             !export_status.ok()) {
    if (export_status.code() != gdl::StatusCode::kFailedPrecondition) return export_status;
    json.str("host_own_graph_launch_skipped", export_status.message());
  }
  const Summary graph = summarize(device), host_sum = summarize(host);
  json.add("graph", graph.json());
  json.add("graph_reference", summarize(by_reference).json());
  json.num("reference_copies_per_run",
           static_cast<double>(s.stats().reference_copies - copies_before) / std::max(1, opt.runs));
  json.add("host_device_bind", host_sum.json());
  json.add("host_device_bind_bind", summarize(binds).json());
  json.add("host_device_bind_run", summarize(run_calls).json());
  json.add("host_device_bind_submit", summarize(submits).json());
  json.add("host_launch_probe", summarize(probes).json());
  json.add("host_same_set_submit", summarize(same_set_submits).json());
  json.add("host_own_graph_launch", summarize(own_graph_launches).json());
  char own_launch[32] = "-";
  if (!own_graph_launches.empty()) std::snprintf(own_launch, sizeof own_launch, "%.2f", summarize(own_graph_launches).median);
  std::printf("  check %s (error vs torch %.3g, tolerance %.3g); graph %.2f us (inputs by reference %.2f), host "
              "bind+run %.2f us (bind %.2f, run() %.2f, submit %.2f, with the same set bound %.2f; an export of "
              "this graph launched alone %s, a one-memset graph %.2f)\n",
              check.passed ? "ok" : "FAILED", check.err_vs_torch, v.tolerance, graph.median,
              summarize(by_reference).median, host_sum.median, summarize(binds).median, summarize(run_calls).median,
              summarize(submits).median, summarize(same_set_submits).median, own_launch,
              summarize(probes).median);
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

// The sessions of a program under --sweep, their params set; the params'
// host copies are dropped then (a sweep's caches reach 8 GiB each).
Status sweep_sessions_for(const Options& opt, const gdl::Program& program, const Variant& v,
                          std::vector<std::vector<uint8_t>>& params, SweepSessions& out) {
  for (std::unique_ptr<gdl::Session>* session : {&out.timed, &out.plain, &out.exported}) {
    const bool timed = session == &out.timed, control = session == &out.exported;
    gdl::Expected<std::unique_ptr<gdl::Session>> created = gdl::Session::create(
        program, gdl::SessionOptions{.device = 0, .record_device_time = timed, .multi_step_kernels = opt.chains});
    Status set = created.ok() ? Status::Ok() : created.status();
    for (size_t i = 0; set.ok() && i < v.params.size(); ++i)
      set = (*created)->set_param(v.params[i].name, params[i].data(), params[i].size());
    if (set.ok()) {
      *session = std::move(created).value();
    } else if (control && set.code() == gdl::StatusCode::kResourceExhausted) {
      std::printf("  no session for the exported-graph control: %s\n", set.message().c_str());
    } else {
      return set;
    }
  }
  for (std::vector<uint8_t>& p : params) std::vector<uint8_t>().swap(p);
  return Status::Ok();
}

// --only: a word is a part of the name, or with a trailing $ the whole name (as sweep.py's --only).
bool selected(const Options& opt, const Variant& v) {
  if (opt.only.empty()) return true;
  for (const std::string& w : opt.only) {
    const bool whole = !w.empty() && w.back() == '$';
    if (whole ? v.name == w.substr(0, w.size() - 1) : v.name.find(w) != std::string::npos) return true;
  }
  return false;
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
  SweepSessions sweep_sessions;  // --sweep: the program in hand's sessions, their params set
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
        sweep_sessions = {};
        cached_program.clear();
        for (size_t i = 0; i < v.params.size() && status.ok(); ++i) status = load_tensor(opt.data, v.params[i], params[i]);
        if (status.ok() && opt.sweep && !opt.cpu_check) status = sweep_sessions_for(opt, prog, v, params, sweep_sessions);
        if (status.ok()) cached_program = v.program;
      }
      if (status.ok())
        status = opt.cpu_check ? run_variant_cpu(opt, v, prog, params, json)
                 : opt.sweep   ? run_variant_sweep(opt, v, sweep_sessions, flush, json)
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
  using gdl::tools::strict_number;
  CLI::App app("gdl_bench: runs the benchmark workloads through gdl, checks every output against PyTorch's, then "
               "times graph replay, eager launches and the host cost of one run (bench/README.md)",
               "gdl_bench");
  gdl::tools::add_standard_flags(app, "gdl_bench");
  app.add_option("--data", opt.data, "bench/torch_bench.py's data (manifest.json)")->required()->type_name("DIR");
  app.add_option("--out", opt.out, "the JSON results")->required()->type_name("FILE");
  app.add_option("--repo", opt.repo, "the source tree (the .gdl programs)")->default_str(".")->type_name("ROOT");
  gdl::tools::one_word_each(app.add_option("--only", opt.only, "only these variants"))
      ->delimiter(',')
      ->type_name("NAME[,NAME...]");
  const auto count = [&](const char* flag, int& into, const char* help) {
    app.add_option(flag, into, help)->check(strict_number<int>("a positive count", 1))->default_val(into)->type_name("N");
  };
  count("--runs", opt.runs, "timed runs per mode");
  count("--warmup", opt.warmup, "untimed runs first");
  count("--loop-runs", opt.loop_runs, "runs per host-timed loop");
  const auto seconds = [&](const char* flag, double& into, const char* help) {
    app.add_option(flag, into, help)
        ->check(strict_number<double>("a positive number of seconds", 1e-9))
        ->default_str(into > 0 ? std::to_string(into) : "none")
        ->type_name("S");
  };
  seconds("--max-mode-s", opt.max_mode_s, "a slow variant's mode gets fewer runs (at least 50) to stay inside this");
  seconds("--time-budget-s", opt.time_budget_s, "variants not started by then are skipped (default: no budget)");
  app.add_option("--compile-cache", opt.compile_cache, "the NVRTC cache (\"-\": none, compile times are real)")
      ->default_val(opt.compile_cache)
      ->type_name("DIR|-");
  app.add_flag("--cpu-check", opt.cpu_check, "no GPU: compile, run the CPU reference and compare");
  app.add_flag("--sweep", opt.sweep, "check, graph device time and host time only, three sessions per program");
  app.add_flag("--no-chains", [&opt](int64_t) { opt.chains = false; }, "multi-step kernels off in every session");
  app.add_option("--flush", opt.flush, "how the L2 is emptied before a timed run")
      ->check(CLI::IsMember({"write", "read"}).description(""))
      ->default_val(opt.flush)
      ->type_name("write|read");
  gdl::tools::CommandLineOutcome outcome = gdl::tools::parse_command_line(app, argc, argv, 2);
  if (!outcome.go_on) return gdl::tools::report_command_line("gdl_bench", outcome);
  return run(opt);
}
