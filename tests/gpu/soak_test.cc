// Soak and concurrency: long runs that a leak, a stale node parameter or a
// race would fail. Each checks its results against the CPU reference and
// the process's device memory and host resident memory over the run.
//   GDL_SOAK_REPLAYS  replays of one session (default 20,000; gpu-check.sh soak: 1,000,000)
//   GDL_SOAK_SECONDS  how long 8 threads drive their sessions (default 3; soak: 60)
//   GDL_SOAK_SESSIONS sessions created and destroyed (default 300; soak: 10,000)
#include <atomic>
#include <chrono>
#include <thread>

#include "fuzz/corpus.h"
#include "gpu_test_util.h"

using namespace gdl;
using namespace gdl::gpu_test;

namespace {

constexpr int64_t kMiB = 1 << 20;

// f16 matmuls on the rows kernel (B <= 8) and the tensor-core kernel, a norm,
// a softmax, a scalar and a run-time batch with buckets. Every output is
// f16: h is of magnitude 100, where one f16 rounding step of it (0.06)
// moved an f32 softmax of h / 8 by far more than f32's tolerance.
const char* kSoakProgram = R"(program soak;
dim B in [1, 64] buckets(1, 8, 64);
param w1 : f16[256, 512];
param w2 : f16[512, 256];
param g : f16[256];
input x : f16[B, 256];
scalar alpha : f32 = 1.0;
output y : f16[B, 256];
output p : f16[B, 256];
let h = relu(rmsnorm(x, weight = g) @ w1) @ w2;
y = h * alpha + x;
p = softmax(h * 0.01);
)";

// Another program for the threads: f32, a reduction over a run-time axis
// served by node updates.
const char* kOtherProgram = R"(program other;
dim T in [1, 512] policy(update);
param wq : f32[64, 64];
input x : f32[T, 64];
input r : f32[64];
output o : f32[T, 64];
output s : f32[64];
o = softmax(x @ wq) * r;
s = sum(x, axis = 0);
)";

// One run's inputs and scalar, with the outputs the CPU reference gives.
struct Case {
  std::map<std::string, TensorData> inputs;
  double alpha = 1.0;
  std::map<std::string, TensorData> want;
};

// The params of `program`, drawn once.
std::map<std::string, TensorData> random_params(const Program& program, std::mt19937_64& rng) {
  std::map<std::string, TensorData> params;
  for (const TensorInfo& p : program.params()) params[p.name] = random_tensor(p, {}, rng, {});
  return params;
}

// `count` cases of random inputs at random run-time dims (the first one at
// each dim's bounds), each with its reference.
std::vector<Case> make_cases(const Program& program, const std::map<std::string, TensorData>& params, size_t count,
                             std::mt19937_64& rng) {
  std::vector<Case> cases;
  for (size_t c = 0; c < count; ++c) {
    std::vector<int64_t> dims;
    for (const RuntimeDimInfo& d : program.dims())
      dims.push_back(c == 0 ? d.lo : c == 1 ? d.hi : std::uniform_int_distribution<int64_t>(d.lo, d.hi)(rng));
    Case one;
    for (const TensorInfo& in : program.inputs()) one.inputs[in.name] = random_tensor(in, dims, rng, {});
    if (program.find_scalar("alpha")) one.alpha = std::uniform_real_distribution<double>(0.25, 2.0)(rng);
    std::map<std::string, TensorData> all = params;
    for (const auto& [name, t] : one.inputs) all[name] = t;
    std::map<std::string, double> scalars;
    if (program.find_scalar("alpha")) scalars["alpha"] = one.alpha;
    one.want = reference(program, all, scalars);
    cases.push_back(std::move(one));
  }
  return cases;
}

// Binds a case's inputs and scalar (no doctest assertion: threads call it).
Status bind_case(Session& s, const Case& c) {
  for (const auto& [name, t] : c.inputs)
    if (Status st = s.bind(name, t.bytes.data(), t.bytes.size(), t.dtype, t.shape); !st.ok()) return st;
  if (s.program().find_scalar("alpha")) return s.set_scalar("alpha", c.alpha);
  return Status::Ok();
}

// "" when the session's outputs are the case's reference within tolerance.
std::string outputs_match(Session& s, const Case& c) {
  Expected<std::map<std::string, TensorData>> got = try_read_outputs(s);
  if (!got.ok()) return "read: " + got.status().message();
  return first_mismatch(*got, c.want);
}

std::string mib(int64_t bytes) { return std::to_string(static_cast<double>(bytes) / kMiB) + " MiB"; }

}  // namespace

TEST_CASE("soak: one session replays with new inputs, batch sizes and scalars; results right, memory flat") {
  const int64_t replays = static_cast<int64_t>(fuzz::env_count("GDL_SOAK_REPLAYS", 20000));
  const int64_t check_every = std::max<int64_t>(1, std::min<int64_t>(1000, replays / 20));
  const Program program = compile_text(kSoakProgram);
  std::mt19937_64 rng(seed_for("soak replays"));
  const std::map<std::string, TensorData> params = random_params(program, rng);
  const std::vector<Case> cases = make_cases(program, params, 16, rng);
  if (cpu_only) return;  // the programs compile and their references run
  std::unique_ptr<Session> s = make_session(program);
  bind_all(*s, params);
  // Warm-up: every bucket's graph is built at its first use.
  for (const Case& c : cases) {
    GDL_REQUIRE_OK(bind_case(*s, c));
    GDL_REQUIRE_OK(s->run());
    const std::string f = outputs_match(*s, c);
    INFO(f);
    REQUIRE(f == "");
  }
  const MemoryUse start = memory_use();
  int64_t checked = 0, worst_host = 0, worst_device = 0;
  std::string failure;
  const auto began = std::chrono::steady_clock::now();
  for (int64_t i = 0; i < replays && failure.empty(); ++i) {
    const Case& c = cases[rng() % cases.size()];
    if (Status st = bind_case(*s, c); !st.ok()) failure = "bind at replay " + std::to_string(i) + ": " + st.message();
    else if (Status run = s->run(); !run.ok()) failure = "run at replay " + std::to_string(i) + ": " + run.message();
    else if ((i + 1) % check_every == 0 || i + 1 == replays) {
      if (std::string f = outputs_match(*s, c); !f.empty()) failure = "replay " + std::to_string(i) + ": " + f;
      ++checked;
      const MemoryUse now = memory_use();
      worst_host = std::max(worst_host, now.host_bytes - start.host_bytes);
      worst_device = std::max(worst_device, now.device_bytes - start.device_bytes);
    }
  }
  const double seconds = std::chrono::duration<double>(std::chrono::steady_clock::now() - began).count();
  const MemoryUse end = memory_use();
  const SessionStats stats = s->stats();
  MESSAGE(replays << " replays in " << seconds << " s (" << seconds * 1e6 / static_cast<double>(replays)
                  << " us each, bind + run), " << checked << " checked against the CPU reference; "
                  << stats.graphs_built << " graphs built, " << stats.node_updates << " node updates; device memory "
                  << mib(end.device_bytes - start.device_bytes) << " more at the end (at most " << mib(worst_device)
                  << "), host resident " << mib(end.host_bytes - start.host_bytes) << " more (at most "
                  << mib(worst_host) << ")");
  INFO(failure);
  CHECK(failure.empty());
  CHECK(checked >= 1);
  CHECK(stats.graphs_built == 3);  // one per bucket, however long it runs
  CHECK(end.device_bytes - start.device_bytes <= 2 * kMiB);
  CHECK(worst_host <= 16 * kMiB);
}

TEST_CASE("soak: 8 threads drive their own sessions of one program and of another; every run checked") {
  const double seconds = static_cast<double>(fuzz::env_count("GDL_SOAK_SECONDS", 3));
  const Program soak = compile_text(kSoakProgram);
  const Program other = compile_text(kOtherProgram);
  std::mt19937_64 rng(seed_for("soak threads"));
  const std::map<std::string, TensorData> soak_params = random_params(soak, rng);
  const std::map<std::string, TensorData> other_params = random_params(other, rng);
  const std::vector<Case> soak_cases = make_cases(soak, soak_params, 6, rng);
  const std::vector<Case> other_cases = make_cases(other, other_params, 6, rng);
  if (cpu_only) return;

  struct Worker {
    std::unique_ptr<Session> session;
    const std::vector<Case>* cases = nullptr;
    int64_t runs = 0;
    std::string failure;
  };
  std::vector<Worker> workers(8);
  for (size_t w = 0; w < workers.size(); ++w) {
    const bool same = w % 2 == 0;  // four sessions of each program; those of one program share its params
    workers[w].session = make_session(same ? soak : other);
    workers[w].cases = same ? &soak_cases : &other_cases;
    if (w < 2) bind_all(*workers[w].session, same ? soak_params : other_params);
  }
  // Every session builds its graphs (one per bucket) before the baseline.
  for (Worker& w : workers)
    for (const Case& c : *w.cases) {
      GDL_REQUIRE_OK(bind_case(*w.session, c));
      GDL_REQUIRE_OK(w.session->run());
      INFO(w.session->program().name() << ": " << outputs_match(*w.session, c));
      REQUIRE(outputs_match(*w.session, c) == "");
    }
  const MemoryUse start = memory_use();
  const auto deadline = std::chrono::steady_clock::now() + std::chrono::duration<double>(seconds);
  std::vector<std::thread> threads;
  for (size_t w = 0; w < workers.size(); ++w) {
    threads.emplace_back([&, w, seed = rng()] {
      Worker& me = workers[w];
      std::mt19937_64 pick(seed);
      while (me.failure.empty() && std::chrono::steady_clock::now() < deadline) {
        const Case& c = (*me.cases)[pick() % me.cases->size()];
        const bool eager = pick() % 4 == 0;
        if (Status st = bind_case(*me.session, c); !st.ok()) me.failure = "bind: " + st.message();
        else if (Status run = eager ? me.session->run_eager() : me.session->run(); !run.ok()) me.failure = "run: " + run.message();
        else if (std::string f = outputs_match(*me.session, c); !f.empty())
          me.failure = std::string(eager ? "eager" : "graph") + " run " + std::to_string(me.runs) + ": " + f;
        ++me.runs;
      }
    });
  }
  for (std::thread& t : threads) t.join();
  const MemoryUse end = memory_use();
  int64_t total = 0;
  for (size_t w = 0; w < workers.size(); ++w) {
    INFO("thread " << w << " (" << workers[w].session->program().name() << "): " << workers[w].failure);
    CHECK(workers[w].failure.empty());
    CHECK(workers[w].runs >= 1);
    total += workers[w].runs;
  }
  MESSAGE("8 threads, " << seconds << " s: " << total << " runs, each read back and checked; device memory "
                        << mib(end.device_bytes - start.device_bytes) << " more, host resident "
                        << mib(end.host_bytes - start.host_bytes) << " more");
  CHECK(end.device_bytes - start.device_bytes <= 2 * kMiB);
}

TEST_CASE("soak: sessions created and destroyed many times leak no device or host memory") {
  const int64_t sessions = static_cast<int64_t>(fuzz::env_count("GDL_SOAK_SESSIONS", 300));
  const Program program = compile_text(kSoakProgram);
  std::mt19937_64 rng(seed_for("soak sessions"));
  const std::map<std::string, TensorData> params = random_params(program, rng);
  const std::vector<Case> cases = make_cases(program, params, 4, rng);
  if (cpu_only) return;
  // One session holds the params throughout; the others come and go.
  std::unique_ptr<Session> holder = make_session(program);
  bind_all(*holder, params);
  auto one_session = [&](int64_t i) -> std::string {
    SessionOptions options;
    options.dim_policy = i % 2 ? DimPolicyChoice::kUpdate : DimPolicyChoice::kBuckets;
    Expected<std::unique_ptr<Session>> created = Session::create(program, options);
    if (!created.ok()) return "create: " + created.status().message();
    if (i % 10 != 0) return "";
    const Case& c = cases[static_cast<size_t>(i / 10) % cases.size()];
    if (Status st = bind_case(**created, c); !st.ok()) return "bind: " + st.message();
    if (Status st = (*created)->run(); !st.ok()) return "run: " + st.message();
    return outputs_match(**created, c);
  };
  for (int64_t i = 0; i < 20; ++i) {  // the driver's first-use allocations
    const std::string f = one_session(i);
    INFO("session " << i << ": " << f);
    REQUIRE(f == "");
  }
  const MemoryUse start = memory_use();
  int64_t worst_host = 0, worst_device = 0;
  std::string failure;
  const auto began = std::chrono::steady_clock::now();
  for (int64_t i = 0; i < sessions && failure.empty(); ++i) {
    if (std::string f = one_session(i); !f.empty()) failure = "session " + std::to_string(i) + ": " + f;
    if (i % 100 == 99) {
      const MemoryUse now = memory_use();
      worst_host = std::max(worst_host, now.host_bytes - start.host_bytes);
      worst_device = std::max(worst_device, now.device_bytes - start.device_bytes);
    }
  }
  const double seconds = std::chrono::duration<double>(std::chrono::steady_clock::now() - began).count();
  const MemoryUse end = memory_use();
  MESSAGE(sessions << " sessions created and destroyed in " << seconds << " s (every tenth bound, run and checked); "
                   << "device memory " << mib(end.device_bytes - start.device_bytes) << " more at the end (at most "
                   << mib(worst_device) << "), host resident " << mib(end.host_bytes - start.host_bytes)
                   << " more (at most " << mib(worst_host) << ")");
  INFO(failure);
  CHECK(failure.empty());
  CHECK(end.gdl.count == start.gdl.count);  // every block gdl allocated was freed
  CHECK(end.gdl.device_bytes == start.gdl.device_bytes);
  CHECK(end.gdl.host_bytes == start.gdl.host_bytes);
  CHECK(end.device_bytes - start.device_bytes <= 2 * kMiB);
  CHECK(worst_host <= 16 * kMiB);
}
