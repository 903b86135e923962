// The runtime semantics the seeds ask for: bind by copy, output lifetime,
// stable replays, node-parameter updates for scalars and run-time dims,
// device scalars as content, validation that changes nothing, concurrency.
#include <cuda_runtime_api.h>

#include <unistd.h>

#include <filesystem>
#include <fstream>
#include <thread>

#include "gpu_test_util.h"

using namespace gdl;
using namespace gdl::gpu_test;

namespace {

// y uses the scalar, z does not: set_scalar must update some nodes, not all.
const char* kSemantics = R"(program semantics;
dim B in [1, 64];
param w : f32[33, 17];
param bias : f32[17];
input x : f32[B, 33];
scalar alpha : f32 = 1.0;
output y : f32[B, 17];
output z : f32[B, 33];
let h = x @ w + bias;
y = softmax(h) * alpha;
z = x * 2.0 - 1.0;
)";

const Program& semantics_program() {
  static Program program = compile_text(kSemantics);
  return program;
}

struct Fixture {
  const Program& program = semantics_program();
  std::mt19937_64 rng;
  std::map<std::string, TensorData> tensors;
  std::unique_ptr<Session> session;

  Fixture(const std::string& test, int64_t batch, const SessionOptions& options = {}) : rng(seed_for(test)) {
    tensors = random_bindings(program, {batch}, rng);
    session = make_session(program, options);
    bind_all(*session, tensors);
  }
  TensorData new_x(int64_t batch) { return random_tensor(*program.find_input("x"), {batch}, rng, {}); }
  Status bind_x(const TensorData& x) {
    return session->bind("x", x.bytes.data(), x.bytes.size(), x.dtype, x.shape);
  }
  std::map<std::string, TensorData> want(const TensorData& x, double alpha = 1.0) {
    std::map<std::string, TensorData> t = tensors;
    t["x"] = x;
    return reference(program, t, {{"alpha", alpha}});
  }
};

bool same_bytes(const std::map<std::string, TensorData>& a, const std::map<std::string, TensorData>& b) {
  if (a.size() != b.size()) return false;
  for (const auto& [name, t] : a)
    if (!b.count(name) || b.at(name).bytes != t.bytes || b.at(name).shape != t.shape) return false;
  return true;
}

}  // namespace

TEST_CASE("semantics: two inputs bound one after the other give two different correct results") {
  Fixture f("two inputs", 9);
  TensorData x1 = f.tensors.at("x"), x2 = f.new_x(9);
  auto r1 = run_and_read(*f.session, false);
  GDL_REQUIRE_OK(f.bind_x(x2));
  auto r2 = run_and_read(*f.session, false);
  CHECK(expect_match(r1, f.want(x1), "first input"));
  CHECK(expect_match(r2, f.want(x2), "second input"));
  CHECK(r1.at("y").bytes != r2.at("y").bytes);
  CHECK(r1.at("z").bytes != r2.at("z").bytes);
}

TEST_CASE("semantics: changing the caller's array after bind changes nothing") {
  Fixture f("caller array", 12);
  TensorData original = f.new_x(12);
  TensorData caller = original;
  GDL_REQUIRE_OK(f.bind_x(caller));
  std::fill(caller.bytes.begin(), caller.bytes.end(), 0x7F);  // overwrite right after bind returns
  auto graph = run_and_read(*f.session, false);
  CHECK(expect_match(graph, f.want(original), "graph after the caller changed its array"));
  // Rebinding the caller's (now changed) array is what changes the input.
  GDL_REQUIRE_OK(f.bind_x(caller));
  CHECK_FALSE(same_bytes(run_and_read(*f.session, false), graph));
}

TEST_CASE("semantics: an output is overwritten by the next run; a read() copy keeps the old values") {
  Fixture f("output lifetime", 5);
  TensorData x1 = f.tensors.at("x"), x2 = f.new_x(5);
  GDL_REQUIRE_OK(f.session->run());
  std::map<std::string, TensorData> kept = read_outputs(*f.session);
  std::map<std::string, TensorData> kept_before = kept;
  GDL_REQUIRE_OK(f.bind_x(x2));
  GDL_REQUIRE_OK(f.session->run());
  std::map<std::string, TensorData> after = read_outputs(*f.session);
  CHECK(expect_match(after, f.want(x2), "read after the next run"));
  CHECK(same_bytes(kept, kept_before));
  CHECK(expect_match(kept, f.want(x1), "copy read before the next run"));
}

TEST_CASE("semantics: 10,000 replays give stable results") {
  Fixture f("replays", 33);
  auto first = run_and_read(*f.session, false);
  CHECK(expect_match(first, f.want(f.tensors.at("x")), "first replay"));
  int unstable = 0;
  for (int i = 1; i <= 10000; ++i) {
    Status s = f.session->run();
    if (!s.ok()) FAIL("run " << i << ": " << s.message());
    if (i % 2500 == 0 && !same_bytes(read_outputs(*f.session), first)) ++unstable;
  }
  CHECK(unstable == 0);
  CHECK(same_bytes(read_outputs(*f.session), first));
  SessionStats st = f.session->stats();
  CHECK(st.runs == 10001);
  CHECK(st.node_count == f.program.node_count());
  CHECK(st.mean_submit_us > 0);
  CHECK(st.instantiate_us > 0);
  MESSAGE("replay: mean host submit " << st.mean_submit_us << " us over " << st.runs << " runs, "
                                      << st.node_count << " nodes; build " << st.graph_build_us << " us, instantiate "
                                      << st.instantiate_us << " us, upload " << st.upload_us << " us");
}

TEST_CASE("semantics: set_scalar is seen by the next run, through node updates only") {
  Fixture f("set_scalar", 7);
  TensorData x = f.tensors.at("x");
  CHECK(expect_match(run_and_read(*f.session, false), f.want(x, 1.0), "default alpha"));
  uint64_t updates_before = f.session->stats().node_updates;
  GDL_REQUIRE_OK(f.session->set_scalar("alpha", 0.25));
  uint64_t updated = f.session->stats().node_updates - updates_before;
  CHECK(updated >= 1);
  CHECK(updated < f.program.node_count());  // z's nodes do not read alpha
  CHECK(expect_match(run_and_read(*f.session, false), f.want(x, 0.25), "graph, alpha = 0.25"));
  CHECK(expect_match(run_and_read(*f.session, true), f.want(x, 0.25), "eager, alpha = 0.25"));
  GDL_REQUIRE_OK(f.session->set_scalar("alpha", -3.5));
  CHECK(expect_match(run_and_read(*f.session, false), f.want(x, -3.5), "graph, alpha = -3.5"));
  double built = f.session->stats().graph_build_us;
  CHECK(f.session->stats().graph_build_us == built);  // no rebuild
  CHECK(f.session->set_scalar("beta", 1.0).code() == StatusCode::kNotFound);
  CHECK(f.session->set_scalar("x", 1.0).code() == StatusCode::kInvalidArgument);
}

TEST_CASE("semantics: set_scalar before the first run is used by the graph built then") {
  Fixture f("set_scalar early", 3);
  GDL_REQUIRE_OK(f.session->set_scalar("alpha", 2.0));
  CHECK(expect_match(run_and_read(*f.session, false), f.want(f.tensors.at("x"), 2.0), "alpha set before the build"));
}

TEST_CASE("semantics: a run-time dim bound to different values gives correct results each time") {
  // Under update one graph follows B by node updates; under buckets (the
  // default) each bucket has its graph and B changes no node. Neither
  // instantiates a graph twice.
  for (DimPolicyChoice policy : {DimPolicyChoice::kUpdate, DimPolicyChoice::kAsDeclared}) {
    const bool update = policy == DimPolicyChoice::kUpdate;
    INFO("policy " << (update ? "update" : "buckets"));
    Fixture f(update ? "dims/update" : "dims/buckets", 17, SessionOptions{.dim_policy = policy});
    SessionStats st0{};
    bool first = true;
    for (int64_t batch : {17, 1, 64, 5, 17}) {
      INFO("B = " << batch);
      TensorData x = f.new_x(batch);
      GDL_REQUIRE_OK(f.bind_x(x));
      CHECK(expect_match(run_and_read(*f.session, false), f.want(x), "graph"));
      CHECK(expect_match(run_and_read(*f.session, true), f.want(x), "eager"));
      Expected<std::vector<int64_t>> shape = f.session->shape_of("y");
      REQUIRE(shape.ok());
      CHECK((*shape)[0] == batch);
      if (first) st0 = f.session->stats(), first = false;
    }
    SessionStats st = f.session->stats();
    CHECK(st.reinstantiations == 0);
    if (update) {
      CHECK(st.node_updates > st0.node_updates);        // launch dims were updated ...
      CHECK(st.instantiate_us == st0.instantiate_us);   // ... without instantiating again
      CHECK(st.graph_build_us == st0.graph_build_us);
      CHECK(st.graphs_built == 1);
    } else {
      CHECK(st.node_updates == 0);
      CHECK(st.graphs_built == 4);  // buckets 32, 1, 64 and 8 of the default powers of two
    }
  }
}

TEST_CASE("semantics: bad binds return an error and change nothing") {
  Fixture f("bad binds", 6);
  TensorData x = f.tensors.at("x");
  auto good = run_and_read(*f.session, false);
  SessionStats before = f.session->stats();
  std::vector<float> junk(64 * 33 + 1, 9.0f);
  std::vector<uint16_t> junk16(6 * 33, 0x3C00);
  auto bind = [&](const std::string& name, const void* data, size_t bytes, ElementType t, std::vector<int64_t> shape,
                  MemoryKind kind = MemoryKind::kHost) { return f.session->bind(name, data, bytes, t, shape, kind); };
  CHECK(bind("nope", junk.data(), 6 * 33 * 4, ElementType::kF32, {6, 33}).code() == StatusCode::kNotFound);
  CHECK(bind("w", junk.data(), 33 * 17 * 4, ElementType::kF32, {33, 17}).code() == StatusCode::kInvalidArgument);
  CHECK(bind("y", junk.data(), 6 * 17 * 4, ElementType::kF32, {6, 17}).code() == StatusCode::kInvalidArgument);
  CHECK(bind("x", junk16.data(), 6 * 33 * 2, ElementType::kF16, {6, 33}).code() == StatusCode::kInvalidArgument);
  CHECK(bind("x", junk.data(), 6 * 33 * 4, ElementType::kF32, {6 * 33}).code() == StatusCode::kInvalidArgument);
  CHECK(bind("x", junk.data(), 6 * 32 * 4, ElementType::kF32, {6, 32}).code() == StatusCode::kInvalidArgument);
  CHECK(bind("x", junk.data(), 65 * 33 * 4, ElementType::kF32, {65, 33}).code() == StatusCode::kOutOfRange);
  CHECK(bind("x", junk.data(), 0, ElementType::kF32, {0, 33}).code() == StatusCode::kOutOfRange);
  CHECK(bind("x", junk.data(), 6 * 33 * 4 - 4, ElementType::kF32, {6, 33}).code() == StatusCode::kInvalidArgument);
  CHECK(bind("x", junk.data(), 6 * 33 * 4 + 4, ElementType::kF32, {6, 33}).code() == StatusCode::kInvalidArgument);
  CHECK(bind("x", nullptr, 6 * 33 * 4, ElementType::kF32, {6, 33}).code() == StatusCode::kInvalidArgument);
  CHECK(bind("x", junk.data(), 6 * 33 * 4, ElementType::kF32, {6, 33}, MemoryKind::kDevice).code() ==
        StatusCode::kInvalidArgument);  // a host pointer passed as device memory
  CHECK(f.session->set_param("w", junk.data(), 33 * 17 * 4 - 4).code() == StatusCode::kInvalidArgument);
  CHECK(f.session->set_param("x", junk.data(), 6 * 33 * 4).code() == StatusCode::kInvalidArgument);
  CHECK(f.session->set_dim("B", 65).code() == StatusCode::kOutOfRange);
  CHECK(f.session->set_dim("Q", 3).code() == StatusCode::kNotFound);
  std::vector<float> out(6 * 17);
  CHECK(f.session->read("y", out.data(), out.size() * 4 + 4).code() == StatusCode::kInvalidArgument);
  CHECK(f.session->read("x", out.data(), 6 * 33 * 4).code() == StatusCode::kInvalidArgument);
  CHECK(f.session->read("q", out.data(), out.size() * 4).code() == StatusCode::kNotFound);

  SessionStats after = f.session->stats();
  CHECK(after.input_copies == before.input_copies);
  auto again = run_and_read(*f.session, false);
  CHECK(same_bytes(again, good));
  CHECK(expect_match(again, f.want(x), "after the bad binds"));
}

TEST_CASE("semantics: preconditions of run and read") {
  const Program& program = semantics_program();
  std::unique_ptr<Session> s = make_session(program);
  std::vector<float> out(64 * 17);
  CHECK(s->read("y", out.data(), 64 * 17 * 4).code() == StatusCode::kFailedPrecondition);
  CHECK(s->run().code() == StatusCode::kFailedPrecondition);  // nothing bound
  std::mt19937_64 rng(seed_for("preconditions"));
  auto tensors = random_bindings(program, {4}, rng);
  bind_inputs(*s, tensors);
  Status unset = s->run();
  // No other session of this program is alive, so its params region is new and unset.
  CHECK(unset.code() == StatusCode::kFailedPrecondition);
  CHECK(unset.message().find("param") != std::string::npos);
  CHECK(s->run_eager().code() == StatusCode::kFailedPrecondition);
  bind_all(*s, tensors);
  CHECK(expect_match(run_and_read(*s, false), reference(program, tensors), "after binding everything"));
}

TEST_CASE("semantics: inputs that disagree on a run-time dim cannot run together") {
  Program program = compile_text(R"(program disagree;
dim B in [1, 16];
input x : f32[B, 8];
input m : f32[B, 1];
output y : f32[B, 8];
y = x * m;
)");
  std::mt19937_64 rng(seed_for("disagree"));
  std::unique_ptr<Session> s = make_session(program);
  auto t4 = random_bindings(program, {4}, rng);
  auto t8 = random_bindings(program, {8}, rng);
  const TensorData &x4 = t4.at("x"), &m8 = t8.at("m"), &x8 = t8.at("x");
  GDL_REQUIRE_OK(s->bind("x", x4.bytes.data(), x4.bytes.size(), x4.dtype, x4.shape));
  GDL_REQUIRE_OK(s->bind("m", m8.bytes.data(), m8.bytes.size(), m8.dtype, m8.shape));
  Status mixed = s->run();
  CHECK(mixed.code() == StatusCode::kFailedPrecondition);
  CHECK(mixed.message().find("'x'") != std::string::npos);
  GDL_REQUIRE_OK(s->bind("x", x8.bytes.data(), x8.bytes.size(), x8.dtype, x8.shape));
  CHECK(expect_match(run_and_read(*s, false), reference(program, t8), "after rebinding x"));
}

TEST_CASE("semantics: a device scalar is content: changing it needs no node update") {
  Program program = compile_text(R"(program decode;
input q : f16[8, 64];
input k : f16[8, 128, 64];
input v : f16[8, 128, 64];
input len : i32;
output y : f16[8, 64];
y = attention(q, k, v, len);
)");
  std::mt19937_64 rng(seed_for("device scalar"));
  auto tensors = random_bindings(program, {}, rng);
  std::unique_ptr<Session> s = make_session(program);
  bind_all(*s, tensors);
  std::map<std::string, TensorData> previous;
  uint64_t updates = 0;
  for (int32_t len : {5, 77, 128, 1}) {
    INFO("len = " << len);
    tensors["len"].bytes = encode_elements(ElementType::kI32, std::vector<double>{static_cast<double>(len)});
    bind_inputs(*s, tensors);
    auto got = run_and_read(*s, false);
    CHECK(expect_match(got, reference(program, tensors), "graph"));
    if (!previous.empty()) CHECK(got.at("y").bytes != previous.at("y").bytes);
    previous = got;
    if (len == 5) updates = s->stats().node_updates;
  }
  CHECK(s->stats().node_updates == updates);
}

// A device bind is read by the next run: by the graph's copy node (a
// 16-byte aligned pointer and an unpadded input: B = 8 and 64 are bucket
// capacities) or by a copy bind enqueues (B = 10 is padded; a pointer 4 bytes
// off alignment). The contract: the source stays unchanged until that run is
// done. After it the source may change: the run copied it, and a second run
// without a bind keeps what was bound.
TEST_CASE("semantics: binding from device memory") {
  Fixture f("device bind", 8);
  unsigned char* device = nullptr;
  REQUIRE(cudaMalloc(reinterpret_cast<void**>(&device), 64 * 33 * sizeof(float) + 16) == cudaSuccess);
  struct Case {
    int64_t batch;
    size_t offset;
    bool eager;
  };
  for (const Case c : {Case{8, 0, false}, Case{64, 0, false}, Case{10, 0, false}, Case{8, 4, false}, Case{64, 0, true},
                       Case{8, 0, false}}) {
    INFO("B = " << c.batch << ", pointer offset " << c.offset << (c.eager ? ", eager" : ", graph"));
    TensorData x = f.new_x(c.batch);
    unsigned char* source = device + c.offset;
    REQUIRE(cudaMemcpy(source, x.bytes.data(), x.bytes.size(), cudaMemcpyHostToDevice) == cudaSuccess);
    GDL_REQUIRE_OK(f.session->bind("x", source, x.bytes.size(), x.dtype, x.shape, MemoryKind::kDevice));
    GDL_REQUIRE_OK(c.eager ? f.session->run_eager() : f.session->run());
    // Legacy stream: waits for the run. The input buffer keeps what the run copied.
    REQUIRE(cudaMemset(device, 0x7F, 64 * 33 * sizeof(float) + 16) == cudaSuccess);
    std::map<std::string, TensorData> want = f.want(x);
    CHECK(expect_match(read_outputs(*f.session), want, "device-bound input"));
    CHECK(expect_match(run_and_read(*f.session, false), want, "a second run without a bind"));
  }
  cudaFree(device);
}

// A host bind leaves the input in its staging buffer and the graph's copy
// node moves it (session_impl.h, InputSlot); a device bind gives that node
// its pointer instead, or copies at once where the input is padded (B = 3).
// Alternating them, with graph and eager runs and a bucket change in
// between, every run must see the last bind.
TEST_CASE("semantics: host and device binds alternate; every run sees the last bind") {
  Fixture f("alternating binds", 8);
  void* device = nullptr;
  REQUIRE(cudaMalloc(&device, 64 * 33 * sizeof(float)) == cudaSuccess);
  const int64_t batches[] = {8, 8, 3, 64, 64, 8};
  for (int i = 0; i < 12; ++i) {
    const int64_t batch = batches[i % 6];
    INFO("step " << i << ", B = " << batch);
    TensorData x = f.new_x(batch);
    const bool from_device = i % 3 == 1;
    if (from_device) {
      REQUIRE(cudaMemcpy(device, x.bytes.data(), x.bytes.size(), cudaMemcpyHostToDevice) == cudaSuccess);
      GDL_REQUIRE_OK(f.session->bind("x", device, x.bytes.size(), x.dtype, x.shape, MemoryKind::kDevice));
    } else {
      GDL_REQUIRE_OK(f.bind_x(x));
    }
    const bool eager = i % 4 == 3;
    CHECK(expect_match(run_and_read(*f.session, eager), f.want(x),
                       std::string(from_device ? "device" : "host") + " bind, " + (eager ? "eager" : "graph") + " run"));
  }
  cudaFree(device);
}

TEST_CASE("semantics: 18 inputs, each bound from host or device memory at random, through two input copy nodes") {
  // 18 inputs: the graph copies every bind in two copy nodes (16 entries
  // and 2, session_run.cc); each run's mix changes the entries' sources
  // (a staging buffer or the caller's device memory).
  std::string text = "program many_inputs;\n";
  std::string sum;
  for (int i = 0; i < 18; ++i) {
    text += "input x" + std::to_string(i) + " : f32[96];\n";
    sum += (i ? " + x" : "x") + std::to_string(i) + " * " + std::to_string(i + 1) + ".0";
  }
  text += "output y : f32[96];\ny = " + sum + ";\n";
  INFO(text);
  Program program = compile_text(text);
  std::unique_ptr<Session> s = make_session(program);
  std::mt19937_64 rng(seed_for("18 inputs"));
  std::vector<void*> device(18, nullptr);
  for (void*& d : device) REQUIRE(cudaMalloc(&d, 96 * sizeof(float)) == cudaSuccess);
  for (int round = 0; round < 8; ++round) {
    std::map<std::string, TensorData> tensors = random_bindings(program, {}, rng);
    std::string how;
    for (int i = 0; i < 18; ++i) {
      const std::string name = "x" + std::to_string(i);
      const TensorData& t = tensors.at(name);
      // round 0 all from host, round 1 all from device, then at random
      const bool from_device = round == 1 || (round > 1 && rng() % 2 == 0);
      how += from_device ? 'd' : 'h';
      if (from_device) {
        REQUIRE(cudaMemcpy(device[i], t.bytes.data(), t.bytes.size(), cudaMemcpyHostToDevice) == cudaSuccess);
        GDL_REQUIRE_OK(s->bind(name, device[i], t.bytes.size(), t.dtype, t.shape, MemoryKind::kDevice));
      } else {
        GDL_REQUIRE_OK(s->bind(name, t.bytes.data(), t.bytes.size(), t.dtype, t.shape));
      }
    }
    INFO("round " << round << ", binds " << how);
    CHECK(expect_match(run_and_read(*s, false), reference(program, tensors), "graph run, binds " + how));
  }
  for (void* d : device) cudaFree(d);
}

TEST_CASE("semantics: sessions run concurrently without interfering; params are shared") {
  const Program& program = semantics_program();
  std::mt19937_64 rng(seed_for("concurrent"));
  auto tensors = random_bindings(program, {20}, rng);
  std::unique_ptr<Session> a = make_session(program);
  bind_all(*a, tensors);
  std::unique_ptr<Session> b = make_session(program);  // shares a's params: no set_param
  TensorData xb = random_tensor(*program.find_input("x"), {3}, rng, {});
  GDL_REQUIRE_OK(b->bind("x", xb.bytes.data(), xb.bytes.size(), xb.dtype, xb.shape));
  GDL_REQUIRE_OK(b->set_scalar("alpha", 0.5));
  auto tensors_b = tensors;
  tensors_b["x"] = xb;

  std::map<std::string, TensorData> out_a, out_b;
  Status status_a, status_b;
  auto loop = [](Session& s, std::map<std::string, TensorData>& out, Status& status) {
    for (int i = 0; i < 500 && status.ok(); ++i) status = i % 2 ? s.run() : s.run_eager();
    std::map<std::string, TensorData> o;
    for (const TensorInfo& info : s.program().outputs()) {
      Expected<std::vector<int64_t>> shape = s.shape_of(info.name);
      size_t count = 1;
      for (int64_t e : *shape) count *= static_cast<size_t>(e);
      TensorData t{info.dtype, *shape, std::vector<uint8_t>(count * element_size(info.dtype))};
      if (status.ok()) status = s.read(info.name, t.bytes.data(), t.bytes.size());
      o[info.name] = std::move(t);
    }
    out = std::move(o);
  };
  std::thread ta(loop, std::ref(*a), std::ref(out_a), std::ref(status_a));
  std::thread tb(loop, std::ref(*b), std::ref(out_b), std::ref(status_b));
  ta.join();
  tb.join();
  INFO("a: " << status_a.message() << " b: " << status_b.message());
  REQUIRE(status_a.ok());
  REQUIRE(status_b.ok());
  CHECK(expect_match(out_a, reference(program, tensors), "session a"));
  CHECK(expect_match(out_b, reference(program, tensors_b, {{"alpha", 0.5}}), "session b"));

  // The params outlive a session while another one uses them.
  a.reset();
  CHECK(expect_match(run_and_read(*b, false), reference(program, tensors_b, {{"alpha", 0.5}}), "b after a is gone"));
}

TEST_CASE("semantics: a saved artifact loads and runs like the compiled program") {
  const Program& program = semantics_program();
  std::string path = std::filesystem::temp_directory_path() / ("gdl_gpu_semantics_" + std::to_string(getpid()) + ".gdlx");
  GDL_REQUIRE_OK(program.save(path));
  Expected<Program> loaded = Program::load(path);
  std::filesystem::remove(path);
  INFO(loaded.status().message());
  REQUIRE(loaded.ok());
  CHECK(loaded->node_count() == program.node_count());
  CHECK(check_program(*loaded, seed_for("loaded artifact"), {11}));
}

TEST_CASE("semantics: stats account for input copies and device time") {
  Fixture f("stats", 8, SessionOptions{.device = 0, .record_device_time = true});
  SessionStats st = f.session->stats();
  CHECK(st.input_copies == 1);  // params go through set_param, not bind
  CHECK(st.input_copy_bytes == f.tensors.at("x").bytes.size());
  CHECK(st.arena_bytes == f.program.arena_bytes());
  GDL_REQUIRE_OK(f.session->run());
  GDL_REQUIRE_OK(f.session->run_eager());
  st = f.session->stats();
  CHECK(st.runs == 1);
  CHECK(st.eager_runs == 1);
  CHECK(st.last_device_us > 0);
  CHECK(st.last_eager_submit_us > 0);
  // The artifact was compiled for this device's arch, so its CUBIN is used (no PTX JIT).
  CHECK(st.module_image.rfind("cubin", 0) == 0);
  MESSAGE("module: " << st.module_image << ", load " << st.library_load_us << " us");
}

TEST_CASE("semantics: a program compiled for another arch runs through its PTX") {
  std::string path = std::filesystem::temp_directory_path() / ("gdl_gpu_ptx_" + std::to_string(getpid()) + ".gdl");
  {
    std::ofstream out(path);
    out << kSemantics;
  }
  Expected<Program> program = jit::compile(path, {.arch = "sm_80", .cache_dir = ""});
  std::filesystem::remove(path);
  INFO(program.status().message());
  REQUIRE(program.ok());
  CHECK(program->kernel_arch() == "sm_80");
  std::unique_ptr<Session> s = make_session(*program);
  CHECK(s->stats().module_image.rfind("ptx", 0) == 0);
  MESSAGE("module: " << s->stats().module_image << ", load " << s->stats().library_load_us << " us");
  s.reset();
  CHECK(check_program(*program, seed_for("ptx"), {13}));
}

// Launch overlap (SessionOptions::overlap_launches, gdl_abi.cuh): kernels
// start before the ones they depend on finish and prefetch their weights.
// A chain of layernorm + matmul layers whose arena buffers are reused, with
// a branch beside it, must give the same bits with programmatic edges as
// with ordinary ones, run after run with fresh inputs.
TEST_CASE("semantics: launch overlap gives the same bits as ordinary edges, run after run") {
  const Program program = compile_text(R"(program overlap;
dim B in [1, 16];
param W : f16[4, 256, 512];
param V : f16[4, 512, 256];
param bias : f16[4, 512];
input x : f16[B, 256];
output y : f16[B, 256];
output z : f16[B, 256];
let h = x;
for l in 0..4 {
  let u = gelu(layernorm(h, eps = 1e-5) @ W[l] + bias[l]);
  h = h + u @ V[l];
}
y = h;
z = x * 2.0 - 1.0;
)");
  for (int64_t batch : {1, 7, 16}) {
    INFO("B = " << batch);
    std::mt19937_64 rng(seed_for("overlap/" + std::to_string(batch)));
    std::map<std::string, TensorData> tensors = random_bindings(program, {batch}, rng);
    std::unique_ptr<Session> overlapped = make_session(program, {});
    std::unique_ptr<Session> ordered = make_session(program, SessionOptions{.overlap_launches = false});
    bind_all(*overlapped, tensors);
    bind_all(*ordered, tensors);
    int differing = 0;
    for (int i = 0; i < 20; ++i) {
      if (i > 0) {
        tensors["x"] = random_tensor(*program.find_input("x"), {batch}, rng, {});
        bind_inputs(*overlapped, tensors);
        bind_inputs(*ordered, tensors);
      }
      std::map<std::string, TensorData> got = run_and_read(*overlapped, false);
      if (!same_bytes(got, run_and_read(*ordered, false))) ++differing;
      if (i == 0 || i == 19) CHECK(expect_match(got, reference(program, tensors), "overlapped run " + std::to_string(i)));
    }
    CHECK(differing == 0);
  }
}
