// Injected faults (gdl/testing.h fail_call, limit_shared_memory): every
// CUDA call of Session::create and of a graph's first run that a device can
// refuse is failed in turn. Each failure must come back as a clear Status,
// leave no device or host memory behind, and leave another session of
// another program running correctly. The NVRTC and NVRTC-cache faults are
// CPU tests (codegen_test.cc), corrupt and wrong-version artifacts too
// (artifact_test.cc).
#include <algorithm>
#include <cstdlib>

#include "gpu_test_util.h"

using namespace gdl;
using namespace gdl::gpu_test;

namespace {

// Two inputs (two pinned staging buffers), a param (the shared params
// region), a run-time dim (the valid-dims ring) and an arena of about 48 MiB
// at the bound, so that a leaked arena or staging buffer shows plainly in
// the memory figures.
const char* kFaultProgram = R"(program faults;
dim B in [1, 8192];
param w : f32[512, 512];
input x : f32[B, 512];
input r : f32[B, 512];
output y : f32[B, 512];
y = softmax(x @ w) + r;
)";

// The bystander: another program whose session runs between the faults.
const char* kBystander = R"(program bystander;
dim B in [1, 64];
param w : f32[33, 17];
input x : f32[B, 33];
output y : f32[B, 17];
y = softmax(x @ w) * 2.0;
)";

constexpr int64_t kMiB = 1 << 20;

// The status a refused call becomes (runtime/src/cuda_util.h cuda_error).
StatusCode code_for(const std::string& call) {
  return call == "cudaLibraryLoadData" ? StatusCode::kFailedPrecondition : StatusCode::kResourceExhausted;
}

struct Bystander {
  Program program = compile_text(kBystander);
  std::mt19937_64 rng{seed_for("bystander")};
  std::map<std::string, TensorData> tensors = random_bindings(program, {5}, rng);
  std::unique_ptr<Session> session = make_session(program);
  std::map<std::string, TensorData> want = reference(program, tensors);
  Bystander() { bind_all(*session, tensors); }
  bool still_right() { return expect_match(run_and_read(*session, false), want, "the bystander session"); }
};

}  // namespace

TEST_CASE("faults: each refusable CUDA call of Session::create fails in turn; a clear Status, nothing leaked, others unharmed") {
  const Program program = compile_text(kFaultProgram);
  if (cpu_only) return;
  Bystander bystander;
  SessionOptions options;
  options.record_device_time = true;       // its two events too
  options.build_buckets_at_create = true;  // every graph instantiated inside create
  std::mt19937_64 rng(seed_for("faults at create"));
  // The driver's first-use allocations happen here, before the baseline.
  {
    std::unique_ptr<Session> warm = make_session(program, options);
    CHECK(check_program(program, rng(), {37}));
  }
  const MemoryUse before = memory_use();
  for (const std::string call : {"cudaMalloc", "cudaMallocHost", "cudaStreamCreate", "cudaEventCreate",
                                 "cudaLibraryLoadData", "cudaGraphInstantiate"}) {
    int64_t failed = 0;
    for (int64_t n = 0; n < 200; ++n) {
      GDL_REQUIRE_OK(testing::fail_call(call, n));
      Expected<std::unique_ptr<Session>> created = Session::create(program, options);
      const bool taken = !testing::call_failure_pending(call);
      testing::clear_call_failures();
      if (!taken) {  // create makes at most n calls of this kind: each one has been failed
        CHECK(created.ok());
        break;
      }
      INFO(call << " #" << n << ": " << created.status().ToString());
      REQUIRE_FALSE(created.ok());
      CHECK(created.status().code() == code_for(call));
      CHECK(created.status().message().find(call == "cudaLibraryLoadData" ? "cudaErrorUnsupportedPtxVersion"
                                                                          : "cudaErrorMemoryAllocation") !=
            std::string::npos);
      ++failed;
      if (n % 8 == 0) CHECK(bystander.still_right());
    }
    MESSAGE(call << ": Session::create makes " << failed << " such calls; each failed in turn cleanly");
    CHECK(failed >= 1);
  }
  const MemoryUse after = memory_use();
  MESSAGE("after every fault: device memory in use " << (after.device_bytes - before.device_bytes) / double(kMiB)
                                                     << " MiB more, host resident "
                                                     << (after.host_bytes - before.host_bytes) / double(kMiB)
                                                     << " MiB more (the arena is ~48 MiB, each staging buffer 16 MiB)");
  // Exactly the blocks gdl held before. The device-wide figure (where a
  // leaked arena would show, and the driver's graphs and modules) also
  // moves with other processes on the GPU and a sanitizer's own pools: it
  // is checked only where the GPU is this process's alone (gpu-check.sh
  // sets GDL_GPU_SHARED under compute-sanitizer).
  CHECK(after.gdl.count == before.gdl.count);
  CHECK(after.gdl.device_bytes == before.gdl.device_bytes);
  CHECK(after.gdl.host_bytes == before.gdl.host_bytes);
  if (!std::getenv("GDL_GPU_SHARED")) CHECK(after.device_bytes - before.device_bytes < 4 * kMiB);
  CHECK(after.host_bytes - before.host_bytes < 12 * kMiB);
  CHECK(bystander.still_right());
  CHECK(check_program(program, rng(), {4096}));  // and the program itself still runs
}

TEST_CASE("faults: a graph that fails to instantiate at a run is built again by the next run") {
  const Program program = compile_text(kFaultProgram);
  if (cpu_only) return;
  std::mt19937_64 rng(seed_for("faults at run"));
  std::unique_ptr<Session> s = make_session(program);
  const std::map<std::string, TensorData> tensors = random_bindings(program, {300}, rng);
  bind_all(*s, tensors);
  GDL_REQUIRE_OK(testing::fail_call("cudaGraphInstantiate"));
  const Status refused = s->run();
  const bool taken = !testing::call_failure_pending("cudaGraphInstantiate");
  testing::clear_call_failures();
  REQUIRE(taken);
  CHECK(refused.code() == StatusCode::kResourceExhausted);
  CHECK(refused.message().find("instantiating the graph") != std::string::npos);
  CHECK(s->read("y", nullptr, 0).code() == StatusCode::kFailedPrecondition);  // nothing ran: no output yet
  CHECK(expect_match(run_and_read(*s, false), reference(program, tensors), "the run after the refused one"));
  CHECK(s->stats().graphs_built == 1);  // the refused graph was not kept
}

TEST_CASE("faults: a device with less shared memory than a kernel needs") {
  // The streamed attention kernel keeps its ring of K/V copies in dynamic
  // shared memory (96 KiB for examples/attention.gdl): on a device that
  // allows too little, Session::create says which kernel and how much.
  Expected<Program> attention = jit::compile(source_dir() + "/examples/attention.gdl");
  REQUIRE(attention.ok());
  if (cpu_only) return;
  testing::limit_shared_memory(1024);
  Expected<std::unique_ptr<Session>> refused = Session::create(*attention);
  // The chain kernel and the steps' kernels for a band of rows (the tiled
  // matmuls, whose tiles live in shared memory) are choices: refused, the
  // steps' next choices serve those rows (SessionStats::kernel_refusals says
  // why).
  Expected<Program> chain = jit::compile(source_dir() + "/bench/probes/p11_chain_h1024.gdl");
  REQUIRE(chain.ok());
  Expected<std::unique_ptr<Session>> without_chain = Session::create(*chain);
  testing::limit_shared_memory(0);

  INFO(refused.status().ToString());
  REQUIRE_FALSE(refused.ok());
  CHECK(refused.status().code() == StatusCode::kFailedPrecondition);
  CHECK(refused.status().message().find("shared memory per block, the device allows 1024") != std::string::npos);

  INFO(without_chain.status().ToString());
  REQUIRE(without_chain.ok());
  const SessionStats stats = (*without_chain)->stats();
  CHECK_FALSE(stats.kernel_refusals.empty());
  const bool tiled_refused = std::any_of(stats.kernel_refusals.begin(), stats.kernel_refusals.end(), [](const std::string& r) {
    return r.find("_tiled") != std::string::npos && r.find("shared memory per block") != std::string::npos;
  });
  CHECK(tiled_refused);
  std::mt19937_64 rng(seed_for("chain without shared memory"));
  std::vector<int64_t> dims = upper_dims(*chain);
  const std::map<std::string, TensorData> tensors = random_bindings(*chain, dims, rng);
  bind_all(**without_chain, tensors);
  CHECK(expect_match(run_and_read(**without_chain, false), reference(*chain, tensors), "chain steps on their own kernels"));
  CHECK(Session::create(*attention).ok());  // the limit lifted
}
