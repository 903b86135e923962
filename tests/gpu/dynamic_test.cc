// Run-time dims on the GPU: buckets and node updates give the
// CPU reference's results for every batch size, padding poisoned with NaN
// never reaches an output, scalars change from the next run on, a KV length
// bound by copy needs no node update, a batch above the bound runs on the
// eager fallback, and nothing is ever instantiated twice.
#include <cuda_runtime_api.h>

#include <atomic>
#include <chrono>
#include <cmath>
#include <thread>

#include "../dynamic_program.h"
#include "gpu_test_util.h"

using namespace gdl;
using namespace gdl::gpu_test;

namespace {

const Program& dynamic_program() {
  static Program program = compile_text(gdl::testing::kDynamicProgram);
  return program;
}

bool any_nan(const std::map<std::string, TensorData>& outputs) {
  for (const auto& [name, t] : outputs) {
    size_t count = t.bytes.size() / element_size(t.dtype);
    for (double v : decode_elements(t.dtype, t.bytes.data(), count))
      if (std::isnan(v)) return true;
  }
  return false;
}

// The whole sequence for one policy; returns the outputs of every step.
std::vector<std::map<std::string, TensorData>> run_sequence(DimPolicyChoice policy, const std::vector<int64_t>& batches) {
  const Program& program = dynamic_program();
  SessionOptions options;
  options.dim_policy = policy;
  std::unique_ptr<Session> s = make_session(program, options, /*poison_padding=*/true);
  std::mt19937_64 rng(seed_for("dynamic sequence"));
  std::map<std::string, TensorData> tensors = random_bindings(program, {batches[0]}, rng);
  bind_all(*s, tensors);
  double alpha = 1.0;
  std::vector<std::map<std::string, TensorData>> outputs;
  int mismatches = 0, nan_steps = 0;
  uint64_t rows = 0, padded_rows = 0, updates_first_half = 0;
  for (size_t step = 0; step < batches.size(); ++step) {
    const int64_t b = batches[step];
    INFO("step " << step << ", B = " << b);
    if (step == batches.size() / 2) updates_first_half = s->stats().node_updates;
    if (step >= batches.size() / 2 && step % 25 == 0) {  // scalars change in the second half only
      alpha = 0.5 + static_cast<double>(step % 7) / 4;
      GDL_REQUIRE_OK(s->set_scalar("alpha", alpha));
    }
    for (const char* name : {"x", "m"}) tensors[name] = random_tensor(*program.find_input(name), {b}, rng, {});
    bind_inputs(*s, tensors);
    std::map<std::string, TensorData> got = run_and_read(*s, step % 10 == 9);  // every tenth eagerly
    std::map<std::string, TensorData> want = reference(program, tensors, {{"alpha", alpha}});
    if (!expect_match(got, want, "step against the CPU reference")) ++mismatches;
    if (any_nan(got)) ++nan_steps;
    CHECK(got.at("y").shape == std::vector<int64_t>{b, 32});
    CHECK(got.at("mscaled").shape == std::vector<int64_t>{8, b});
    rows += static_cast<uint64_t>(b);
    padded_rows += static_cast<uint64_t>(policy == DimPolicyChoice::kUpdate ? b : program.dims()[0].bucket_for(b));
    outputs.push_back(std::move(got));
  }
  CHECK(mismatches == 0);
  CHECK(nan_steps == 0);

  SessionStats st = s->stats();
  CHECK(st.reinstantiations == 0);
  CHECK(st.fallback_runs == 0);
  REQUIRE(st.dims.size() == 1);
  CHECK(st.dims[0].update == (policy == DimPolicyChoice::kUpdate));
  CHECK(st.dims[0].rows_valid == rows);
  CHECK(st.dims[0].rows_computed == padded_rows);
  uint64_t hits = 0;
  for (const SessionStats::BucketStats& bucket : st.buckets) hits += bucket.hits;
  CHECK(hits == st.runs + st.eager_runs);
  if (policy == DimPolicyChoice::kUpdate) {
    CHECK(st.graphs_built == 1);
    CHECK(st.node_updates > 0);  // launch dims followed B
  } else {
    CHECK(st.graphs_built <= 3);  // one per bucket used
    CHECK(st.graphs_built >= 2);
    CHECK(updates_first_half == 0);  // B changing within and across buckets changes no node
    CHECK(st.node_updates > 0);      // alpha did, in the second half
    CHECK(st.valid_block_writes > 0);
  }
  MESSAGE("policy " << (policy == DimPolicyChoice::kUpdate ? "update" : "buckets") << ":\n" << format_stats(st));
  return outputs;
}

// Blocks the legacy default stream until released (or 20 s pass), so that
// work on a session's (blocking) stream queued after it cannot start.
struct StreamGate {
  std::atomic<bool> entered{false}, release{false}, timed_out{false};
  static void CUDART_CB hold(void* self) {
    auto* gate = static_cast<StreamGate*>(self);
    gate->entered = true;
    auto start = std::chrono::steady_clock::now();
    while (!gate->release) {
      if (std::chrono::steady_clock::now() - start > std::chrono::seconds(20)) {
        gate->timed_out = true;
        return;
      }
      std::this_thread::yield();
    }
  }
  void close() {
    REQUIRE(cudaLaunchHostFunc(cudaStreamLegacy, &StreamGate::hold, this) == cudaSuccess);
    auto start = std::chrono::steady_clock::now();
    while (!entered && std::chrono::steady_clock::now() - start < std::chrono::seconds(5)) std::this_thread::yield();
    REQUIRE(entered);
  }
};

}  // namespace

TEST_CASE("dynamic: 200 random batch sizes under both policies equal the CPU reference every step") {
  if (cpu_only) return;
  std::mt19937_64 rng(seed_for("dynamic batches"));
  std::uniform_int_distribution<int64_t> batch(1, 48);
  std::vector<int64_t> batches;
  for (int i = 0; i < 200; ++i) batches.push_back(batch(rng));
  batches[1] = 48, batches[2] = 1, batches[3] = 4, batches[4] = 5, batches[5] = 16, batches[6] = 17;  // the edges
  std::vector<std::map<std::string, TensorData>> by_buckets = run_sequence(DimPolicyChoice::kAsDeclared, batches);
  std::vector<std::map<std::string, TensorData>> by_updates = run_sequence(DimPolicyChoice::kUpdate, batches);
  REQUIRE(by_buckets.size() == by_updates.size());
  int differing = 0;
  for (size_t i = 0; i < by_buckets.size(); ++i)
    for (const auto& [name, t] : by_buckets[i]) differing += relative_error(by_updates[i].at(name), t) > tolerance(t.dtype);
  CHECK(differing == 0);  // both policies give the same results
}

TEST_CASE("dynamic: padding poisoned with NaN never shows, for a dim padded inside a tensor") {
  if (cpu_only) return;
  // B is the middle axis of x and the last of the softmax: both bind and
  // read copy strided, and the softmax and the sum mask the padding.
  Program program = compile_text(R"(program inner;
dim B in [2, 32] buckets(8, 32);
input x : f16[3, B, 16];
output p : f16[3, B, 16];
output s : f32[3, 16];
output q : f16[3, 16, B];
p = softmax(x, axis = 1);
s = sum(cast(x, f32), axis = 1);
q = softmax(transpose(x, perm = [0, 2, 1]), axis = -1);
)");
  SessionOptions options;
  std::unique_ptr<Session> s = make_session(program, options, /*poison_padding=*/true);
  std::mt19937_64 rng(seed_for("inner padding"));
  for (int64_t b : {2, 7, 8, 9, 31, 32, 3}) {
    INFO("B = " << b);
    std::map<std::string, TensorData> tensors = random_bindings(program, {b}, rng);
    bind_inputs(*s, tensors);
    std::map<std::string, TensorData> got = run_and_read(*s, false);
    CHECK_FALSE(any_nan(got));
    CHECK(expect_match(got, reference(program, tensors), "graph"));
    CHECK(expect_match(run_and_read(*s, true), reference(program, tensors), "eager"));
  }
  SessionStats st = s->stats();
  CHECK(st.graphs_built == 2);
  CHECK(st.node_updates == 0);
  CHECK(st.reinstantiations == 0);
  CHECK(st.dims[0].rows_computed > st.dims[0].rows_valid);  // padding was computed (and masked)
}

TEST_CASE("dynamic: ids into the padded rows of a gather or take_along_axis read zero, as past the end") {
  if (cpu_only) return;
  // V is the indexed axis of both; ids run over [-2, 34), so every run has
  // some past V inside its bucket (the padded rows, NaN here) and some past
  // the bucket: both must read zero, as in the unpadded reference.
  Program program = compile_text(R"(program picks;
dim V in [1, 32] buckets(8, 32);
input table : f16[V, 16];
input x : f32[4, V];
input ids : i32[6];
input index : i32[4, 3];
output g : f16[6, 16];
output t : f32[4, 3];
g = gather(table, ids);
t = take_along_axis(x, index);
)");
  CHECK(program.dims().at(0).padding_blocker.empty());
  std::unique_ptr<Session> s = make_session(program, {}, /*poison_padding=*/true);
  std::mt19937_64 rng(seed_for("indexed padding"));
  const RangeFor ids = [](const TensorInfo& t) {
    ValueRange r;
    if (t.dtype == ElementType::kI32) r.int_lo = -2, r.int_hi = 33;
    return r;
  };
  for (int64_t v : {5, 3, 8, 20, 1}) {
    INFO("V = " << v);
    std::map<std::string, TensorData> tensors = random_bindings(program, {v}, rng, ids);
    bind_inputs(*s, tensors);
    std::map<std::string, TensorData> got = run_and_read(*s, false);
    CHECK_FALSE(any_nan(got));
    CHECK(expect_match(got, reference(program, tensors), "graph"));
    CHECK(expect_match(run_and_read(*s, true), reference(program, tensors), "eager"));
  }
  CHECK(s->stats().node_updates == 0);
  CHECK(s->stats().dims.at(0).rows_computed > s->stats().dims.at(0).rows_valid);
}

TEST_CASE("dynamic: a scalar change is seen by the next run and not by one already launched") {
  if (cpu_only) return;
  for (DimPolicyChoice policy : {DimPolicyChoice::kAsDeclared, DimPolicyChoice::kUpdate}) {
    INFO("policy " << (policy == DimPolicyChoice::kUpdate ? "update" : "buckets"));
    const Program& program = dynamic_program();
    std::mt19937_64 rng(seed_for("scalar in flight"));
    std::map<std::string, TensorData> tensors = random_bindings(program, {37}, rng);
    std::unique_ptr<Session> s = make_session(program, {.dim_policy = policy});
    bind_all(*s, tensors);
    GDL_REQUIRE_OK(s->run());  // builds the graph
    GDL_REQUIRE_OK(s->synchronize());

    StreamGate gate;
    gate.close();                      // the session's next run cannot start yet ...
    GDL_REQUIRE_OK(s->run());          // ... so this one is launched but pending,
    GDL_REQUIRE_OK(s->set_scalar("alpha", -0.75));  // updated while it is
    CHECK_FALSE(gate.release.load());
    CHECK_FALSE(gate.timed_out.load());  // set_scalar did not wait for the pending run
    CHECK(s->stats().node_updates > 0);
    gate.release = true;
    std::map<std::string, TensorData> launched_before = read_outputs(*s);
    CHECK_FALSE(gate.timed_out.load());
    CHECK(expect_match(launched_before, reference(program, tensors, {{"alpha", 1.0}}), "the run launched before set_scalar"));
    GDL_REQUIRE_OK(s->run());
    CHECK(expect_match(read_outputs(*s), reference(program, tensors, {{"alpha", -0.75}}), "the run after set_scalar"));
    CHECK(s->stats().reinstantiations == 0);
  }
}

TEST_CASE("dynamic: a KV length changed by bind alone gives the right attention with zero node updates") {
  if (cpu_only) return;
  Program program = compile_text(R"(program kv;
dim B in [1, 8] buckets(2, 8);
input q : f16[B, 4, 64];
input k : f16[B, 4, 256, 64];
input v : f16[B, 4, 256, 64];
input len : i32;
output o : f16[B, 4, 64];
o = attention(q, k, v, len);
)");
  std::mt19937_64 rng(seed_for("kv length"));
  std::map<std::string, TensorData> tensors = random_bindings(program, {5}, rng);
  std::unique_ptr<Session> s = make_session(program);
  bind_all(*s, tensors);
  std::map<std::string, TensorData> previous;
  for (int32_t len : {1, 17, 256, 100, 255, 64, 300}) {
    INFO("len = " << len);
    tensors["len"].bytes = encode_elements(ElementType::kI32, std::vector<double>{static_cast<double>(len)});
    const TensorData& l = tensors.at("len");
    GDL_REQUIRE_OK(s->bind("len", l.bytes.data(), l.bytes.size(), l.dtype, l.shape));  // only the length
    std::map<std::string, TensorData> got = run_and_read(*s, false);
    CHECK(expect_match(got, reference(program, tensors), "graph"));
    if (!previous.empty() && len != 300) CHECK(got.at("o").bytes != previous.at("o").bytes);
    previous = got;
  }
  CHECK(s->stats().node_updates == 0);
  CHECK(s->stats().graphs_built == 1);
  CHECK(s->stats().reinstantiations == 0);

  // A run-time T under buckets: positions past T are padding, whatever len says.
  Program padded_t = compile_text(R"(program kvt;
dim T in [1, 512] buckets(64, 512);
input q : f16[4, 64];
input k : f16[4, T, 64];
input v : f16[4, T, 64];
input len : i32;
output o : f16[4, 64];
o = attention(q, k, v, len);
)");
  SessionOptions options;
  std::unique_ptr<Session> st = make_session(padded_t, options, /*poison_padding=*/true);
  for (const std::pair<int64_t, int32_t> run : {std::pair<int64_t, int32_t>{40, 40}, {40, 64}, {60, 10}, {300, 300}, {300, 512}, {64, 64}}) {
    const int64_t t = run.first;
    const int32_t len = run.second;
    INFO("T = " << t << ", len = " << len);
    std::map<std::string, TensorData> tt = random_bindings(padded_t, {t}, rng);
    tt["len"].bytes = encode_elements(ElementType::kI32, std::vector<double>{static_cast<double>(len)});
    bind_inputs(*st, tt);
    std::map<std::string, TensorData> got = run_and_read(*st, false);
    CHECK_FALSE(any_nan(got));
    CHECK(expect_match(got, reference(padded_t, tt), "graph, padded T"));
  }
  CHECK(st->stats().node_updates == 0);
  CHECK(st->stats().reinstantiations == 0);
}

TEST_CASE("dynamic: a batch above the bound runs on the eager fallback, counted; without it, an error") {
  if (cpu_only) return;
  const std::string text = R"(program fb;
dim B in [1, 16] buckets(4, 16);
param w : f32[24, 12];
input x : f32[B, 24];
input m : f32[4, B];
output y : f32[B, 12];
output s : f32[12];
output n : f32[4];
let h = gelu(layernorm(x) @ w);
y = h;
s = sum(h, axis = 0);
n = mean(m, axis = 1);
)";
  Program program = compile_text(text);
  // The reference: the same program with a bound that admits the values.
  std::string wide_text = text;
  wide_text.replace(wide_text.find("[1, 16] buckets(4, 16)"), 22, "[1, 64]");
  Program wide = compile_text(wide_text);

  std::mt19937_64 rng(seed_for("fallback"));
  SessionOptions options;
  options.eager_fallback = jit::recompiler();
  std::unique_ptr<Session> s = make_session(program, options);
  std::map<std::string, TensorData> tensors = random_bindings(program, {5}, rng);
  bind_all(*s, tensors);
  int expected_fallbacks = 0;
  for (int64_t b : {40, 5, 33, 40, 16, 17, 3}) {
    INFO("B = " << b);
    for (const char* name : {"x", "m"}) tensors[name] = random_tensor(*program.find_input(name), {b}, rng, {});
    bind_inputs(*s, tensors);
    std::map<std::string, TensorData> got = run_and_read(*s, b == 33);  // run_eager above the bound falls back too
    CHECK(expect_match(got, reference(wide, tensors), "fallback or graph"));
    expected_fallbacks += b > 16;
    CHECK(s->stats().fallback_runs == static_cast<uint64_t>(expected_fallbacks));
  }
  SessionStats st = s->stats();
  CHECK(st.fallback_us > 0);
  CHECK(st.reinstantiations == 0);
  CHECK(st.graphs_built == 2);  // buckets 4 and 16; the fallback builds no graph
  // Below the lower bound there is no fallback.
  TensorData tiny = random_tensor(*program.find_input("x"), {1}, rng, {});
  CHECK(s->bind("x", tiny.bytes.data(), tiny.bytes.size(), tiny.dtype, {0, 24}).code() == StatusCode::kOutOfRange);

  // Without the option: an error before anything runs, and nothing changes.
  std::unique_ptr<Session> strict = make_session(program);
  std::map<std::string, TensorData> small = random_bindings(program, {6}, rng);
  bind_all(*strict, small);
  auto good = run_and_read(*strict, false);
  uint64_t copies = strict->stats().input_copies;
  TensorData big = random_tensor(*program.find_input("x"), {40}, rng, {});
  Status refused = strict->bind("x", big.bytes.data(), big.bytes.size(), big.dtype, big.shape);
  CHECK(refused.code() == StatusCode::kOutOfRange);
  CHECK(refused.message().find("eager_fallback") != std::string::npos);
  CHECK(strict->set_dim("B", 17).code() == StatusCode::kOutOfRange);
  CHECK(strict->stats().input_copies == copies);
  CHECK(expect_match(run_and_read(*strict, false), good, "after the refused bind"));
  CHECK(strict->stats().fallback_runs == 0);
}

TEST_CASE("dynamic: every bucket built at creation; the runs then build nothing and update nothing") {
  if (cpu_only) return;
  const Program& program = dynamic_program();
  SessionOptions options;
  options.build_buckets_at_create = true;
  std::unique_ptr<Session> s = make_session(program, options);
  SessionStats created = s->stats();
  CHECK(created.graphs_built == 3);
  CHECK(created.buckets.size() == 3);
  std::mt19937_64 rng(seed_for("prebuilt"));
  for (int64_t b : {3, 20, 48, 1, 16}) {
    INFO("B = " << b);
    std::map<std::string, TensorData> tensors = random_bindings(program, {b}, rng);
    bind_all(*s, tensors);
    CHECK(expect_match(run_and_read(*s, false), reference(program, tensors), "prebuilt bucket"));
  }
  SessionStats st = s->stats();
  CHECK(st.graphs_built == 3);
  CHECK(st.instantiate_us == created.instantiate_us);
  CHECK(st.node_updates == 0);
  CHECK(st.reinstantiations == 0);
  for (const SessionStats::BucketStats& b : st.buckets) CHECK(b.built);

  // A session that asks for buckets of a dim that padding cannot serve gets updates, and says why.
  Program moved = compile_text(R"(program moved;
dim B in [1, 8];
input x : f32[2, B];
output y : f32[B, 2];
y = reshape(x, [B, 2]) * 3.0;
)");
  std::unique_ptr<Session> u = make_session(moved, {.dim_policy = DimPolicyChoice::kBuckets});
  CHECK(u->stats().dims.at(0).update);
  CHECK(u->stats().dims.at(0).why_update.find("reshape") != std::string::npos);
  for (int64_t b : {3, 8, 5}) {
    std::map<std::string, TensorData> tensors = random_bindings(moved, {b}, rng);
    bind_all(*u, tensors);
    CHECK(expect_match(run_and_read(*u, false), reference(moved, tensors), "served by updates"));
  }
}

TEST_CASE("dynamic: per-node device times and graph update costs are measured") {
  if (cpu_only) return;
  const Program& program = dynamic_program();
  std::mt19937_64 rng(seed_for("profile"));
  std::map<std::string, TensorData> tensors = random_bindings(program, {20}, rng);
  std::unique_ptr<Session> s = make_session(program);
  bind_all(*s, tensors);
  Expected<std::vector<NodeTime>> nodes = profile_nodes(*s, 5);
  REQUIRE(nodes.ok());
  REQUIRE(nodes->size() == program.node_count());
  double device = 0;
  for (const NodeTime& n : *nodes) {
    CHECK(n.device_us > 0);
    CHECK(n.submit_us > 0);
    CHECK(!n.kernel.empty());
    device += n.device_us;
  }
  CHECK(expect_match(read_outputs(*s), reference(program, tensors), "outputs of the profiled eager runs"));
  Expected<GraphUpdateCosts> costs = measure_graph_update_costs(*s, 5);
  REQUIRE(costs.ok());
  CHECK(costs->nodes == program.node_count());
  CHECK(costs->set_params_us_per_node > 0);
  CHECK(costs->exec_update_us > 0);
  CHECK(costs->reinstantiate_us > 0);
  CHECK(s->stats().reinstantiations == 0);
  // The graph still computes the right thing after the measurement.
  CHECK(expect_match(run_and_read(*s, false), reference(program, tensors), "graph after the measurement"));
  MESSAGE("dyn at B=20: " << nodes->size() << " nodes, " << device << " us on the device eagerly; SetParams "
                          << costs->set_params_us_per_node << " us/node, ExecUpdate " << costs->exec_update_us
                          << " us, instantiate " << costs->reinstantiate_us << " us");
}
