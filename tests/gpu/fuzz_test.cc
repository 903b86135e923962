// Random programs (tests/fuzz/program_gen.h) on the GPU: each is compiled
// (in parallel, on every core), then run in one session per dim policy
// (buckets, update) with the arena and the padding poisoned, over a random
// sequence of run-time dim values; at each, the graph run, the eager run
// and the CPU reference must agree within the dtype's tolerance. A failure
// is shrunk to a small program (fuzz/shrink.h), printed, and with
// GDL_FUZZ_OUT=DIR written there for tests/fuzz/regressions/.
// GDL_FUZZ_FIRST_SEED, GDL_FUZZ_GPU_COUNT (default 24) choose the programs;
// GDL_FUZZ_TRACE=1 prints each seed before its check; GDL_FUZZ_JOBS
// compiles that many programs at once (default: one per core).
// Every program in tests/fuzz/regressions/ runs the same way first.
#include <algorithm>
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <future>
#include <thread>

#include "fuzz/corpus.h"
#include "fuzz/program_gen.h"
#include "fuzz/shrink.h"
#include "gdl/jit.h"
#include "gpu_test_util.h"

using namespace gdl;
using namespace gdl::gpu_test;

namespace {

// "" when every output of `got` is within tolerance of `want`, else why not.
// The generator's inputs are of magnitude 0.1 to 1, and its sums and
// matmuls can cancel to a result far smaller than their terms (a sum of two
// products over 33 terms came to 0.02, its f32 rounding 1e-4 of that): an
// output is measured against elements of magnitude 1 at least.
std::string compare(const std::map<std::string, TensorData>& got, const std::map<std::string, TensorData>& want,
                    const std::string& what) {
  const std::string mismatch = first_mismatch(got, want, true);
  return mismatch.empty() ? "" : what + ": " + mismatch;
}

// The GPU check of one compiled program: "" or "kind: details".
std::string check_gpu(const Program& program, uint64_t seed) {
  std::mt19937_64 rng(seed);
  for (DimPolicyChoice policy : {DimPolicyChoice::kBuckets, DimPolicyChoice::kUpdate}) {
    SessionOptions options;
    options.dim_policy = policy;
    Expected<std::unique_ptr<Session>> created = Session::create(program, options);
    if (!created.ok()) return "session: " + created.status().message();
    Session& s = **created;
    if (Status st = testing::poison_padding(s); !st.ok()) return "poison: " + st.message();
    const std::string name = policy == DimPolicyChoice::kBuckets ? "buckets" : "update";
    for (int run = 0; run < 3; ++run) {
      std::vector<int64_t> dims;
      for (const RuntimeDimInfo& d : program.dims())
        dims.push_back(std::uniform_int_distribution<int64_t>(d.lo, d.hi)(rng));
      std::string dims_text;
      for (int64_t d : dims) dims_text += " " + std::to_string(d);
      const std::string at = " (" + name + ", dims" + dims_text + ")";
      const std::map<std::string, TensorData> tensors = random_bindings(program, dims, rng);
      if (Status st = try_bind_all(s, tensors); !st.ok()) return "bind: " + st.message() + at;
      Expected<std::map<std::string, TensorData>> by_graph = try_run_and_read(s, false);
      if (!by_graph.ok()) return "graph run: " + by_graph.status().message() + at;
      if (Status st = try_bind_all(s, tensors); !st.ok()) return "bind: " + st.message() + at;
      Expected<std::map<std::string, TensorData>> by_eager = try_run_and_read(s, true);
      if (!by_eager.ok()) return "eager run: " + by_eager.status().message() + at;
      Expected<std::map<std::string, TensorData>> want = jit::run_reference(program, tensors, {});
      if (!want.ok()) return "reference: " + want.status().message() + at;
      for (const TensorInfo& state : program.states()) want->erase(state.name);
      for (const std::string& f : {compare(*by_graph, *want, "graph vs reference"),
                                   compare(*by_eager, *want, "eager vs reference"),
                                   compare(*by_eager, *by_graph, "eager vs graph")})
        if (!f.empty()) return f + at;
    }
  }
  return "";
}

std::string check_text(const std::string& text, uint64_t seed) {
  Expected<Program> program = try_compile_text(text);
  if (!program.ok()) return "compile: " + program.status().message();
  return check_gpu(*program, seed);
}

fuzz::GenOptions options_for(uint64_t seed) {
  fuzz::GenOptions o;
  o.large_shapes = seed % 4 == 0;  // tensor cores, split K, chains
  return o;
}

}  // namespace

TEST_CASE("fuzz: saved regressions run on the GPU as on the CPU reference") {
  const auto saved = fuzz::saved_regressions(source_dir());
  CHECK_FALSE(saved.empty());
  for (const auto& regression : saved) {
    const std::string& name = regression.first;
    const std::string& text = regression.second;
    INFO(name);
    if (cpu_only) CHECK(try_compile_text(text).ok());
    else CHECK(check_text(text, seed_for(name)) == "");
  }
}

TEST_CASE("fuzz: random programs agree on the GPU, graph and eager, with the CPU reference") {
  const uint64_t first = fuzz::env_count("GDL_FUZZ_FIRST_SEED", 1), count = fuzz::env_count("GDL_FUZZ_GPU_COUNT", 24);
  const char* out_dir = std::getenv("GDL_FUZZ_OUT");
  const bool trace = fuzz::env_count("GDL_FUZZ_TRACE", 0) != 0;
  const auto started = std::chrono::steady_clock::now();
  // Compile ahead on every core (GDL_FUZZ_JOBS: on that many, for several
  // processes side by side); check one by one as they come.
  const size_t jobs = std::max<size_t>(1, fuzz::env_count("GDL_FUZZ_JOBS", std::thread::hardware_concurrency()));
  std::vector<std::future<Expected<Program>>> compiled(count);
  std::vector<fuzz::GenProgram> programs(count);
  size_t launched = 0;
  auto launch = [&] {
    const size_t i = launched++;
    programs[i] = fuzz::generate_program(first + i, options_for(first + i));
    compiled[i] = std::async(std::launch::async, [text = programs[i].text()] { return try_compile_text(text); });
  };
  while (launched < std::min<size_t>(count, jobs)) launch();
  int passed = 0, failures = 0;
  double waited_s = 0;  // for compiles: where the time goes, compiling or checking
  auto since = [](std::chrono::steady_clock::time_point t) {
    return std::chrono::duration<double>(std::chrono::steady_clock::now() - t).count();
  };
  for (size_t i = 0; i < count; ++i) {
    const auto wait_start = std::chrono::steady_clock::now();
    Expected<Program> program = compiled[i].get();
    waited_s += since(wait_start);
    if (launched < count) launch();
    const uint64_t seed = first + i;
    if (trace) {  // which program a run that stops making progress is in
      std::printf("fuzz: checking seed %llu\n", static_cast<unsigned long long>(seed));
      std::fflush(stdout);
    }
    std::string failure = !program.ok() ? "compile: " + program.status().message()
                          : cpu_only    ? ""
                                        : check_gpu(*program, seed);
    if ((i + 1) % 25 == 0) {  // progress, for a run cut by a time limit
      std::printf("fuzz: %zu programs checked, %d failed, %.0f s (%.0f s of it waiting for compiles)\n", i + 1,
                  failures + (failure.empty() ? 0 : 1), since(started), waited_s);
      std::fflush(stdout);
    }
    if (failure.empty()) {
      ++passed;
      continue;
    }
    ++failures;
    const fuzz::Shrunk small = fuzz::shrink(programs[i], failure, [&](const fuzz::GenProgram& p) {
      return cpu_only ? std::string(try_compile_text(p.text()).ok() ? "" : "compile: ") : check_text(p.text(), seed);
    }, 60);
    if (out_dir) {
      std::ofstream out(std::filesystem::path(out_dir) / ("seed" + std::to_string(seed) + ".gdl"));
      out << "# " << small.failure << "\n" << small.program.text();
    }
    INFO("seed " << seed << ": " << small.failure << "\nshrunk in " << small.checks << " checks from "
                 << programs[i].statements.size() << " to " << small.program.statements.size() << " statements:\n"
                 << small.program.text());
    CHECK(failure.empty());
    if (failures >= 20) break;
  }
  const double seconds = std::chrono::duration<double>(std::chrono::steady_clock::now() - started).count();
  MESSAGE(passed << " of " << count << " random programs passed on " << std::string(cpu_only ? "the CPU only" : "the GPU")
                 << " in " << seconds << " s");
  CHECK(passed + failures > 0);
}
