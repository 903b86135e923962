// Sessions inside the caller's GPU work: a session on the caller's stream,
// two sessions of different programs chained on one stream through an
// output view (no host sync between them), the view's shape and strides
// under padded buckets, and a session's exported graph run as a child node
// between the caller's own nodes, launch after launch, with its state
// carried. Every result is checked against the CPU reference.
#include <cuda_runtime_api.h>

#include <cstring>

#include "gdl/dlpack.h"
#include "gpu_test_util.h"
#include "program_impl.h"

using namespace gdl;
using namespace gdl::gpu_test;

namespace {

const char* kScale = R"(program scale;
dim B in [1, 16] buckets(8, 16);
input x : f32[B, 64];
output h : f32[B, 64];
h = x * 2.0 + 1.0;
)";

const char* kProject = R"(program project;
dim B in [1, 16] buckets(8, 16);
input h : f32[B, 64];
param w : f32[64, 32];
output y : f32[B, 32];
y = gelu(h @ w);
)";

// The run-time dim on the inner axis: under buckets the rows are strided.
const char* kInner = R"(program inner;
dim B in [1, 16] buckets(8, 16);
input x : f32[4, B];
output z : f32[4, B];
z = x * 3.0;
)";

const char* kMoment = R"(program moment;
state m : f32[1000];
input g : f32[1000];
scalar decay : f32 = 0.9;
output y : f32[1000];
m = m * decay + g * (1.0 - decay);
y = m * 2.0;
)";

struct DeviceBuffer {
  void* data = nullptr;
  explicit DeviceBuffer(size_t bytes) { REQUIRE(cudaMalloc(&data, bytes) == cudaSuccess); }
  ~DeviceBuffer() { (void)cudaFree(data); }
  DeviceBuffer(const DeviceBuffer&) = delete;
  DeviceBuffer& operator=(const DeviceBuffer&) = delete;
};

TensorData device_tensor(const void* data, ElementType dtype, const std::vector<int64_t>& shape) {
  TensorData t;
  t.dtype = dtype;
  t.shape = shape;
  size_t count = 1;
  for (int64_t e : shape) count *= static_cast<size_t>(e);
  t.bytes.resize(count * element_size(dtype));
  REQUIRE(cudaMemcpy(t.bytes.data(), data, t.bytes.size(), cudaMemcpyDeviceToHost) == cudaSuccess);
  return t;
}

}  // namespace

TEST_CASE("embedding: two sessions on the caller's stream, the second reading the first's output view") {
  if (cpu_only) return;
  Program scale = compile_text(kScale), project = compile_text(kProject);
  cudaStream_t caller = nullptr;
  REQUIRE(cudaStreamCreateWithFlags(&caller, cudaStreamNonBlocking) == cudaSuccess);
  {
    SessionOptions options;
    options.stream = caller;
    std::unique_ptr<Session> first = make_session(scale, options), second = make_session(project, options);
    CHECK(first->stream() == caller);
    CHECK(second->stream() == caller);
    std::mt19937_64 rng(seed_for("chained sessions"));
    for (int64_t rows : {5, 16, 1}) {  // padded bucket, full bucket, one row
      std::map<std::string, TensorData> a = random_bindings(scale, {rows}, rng);
      std::map<std::string, TensorData> b = random_bindings(project, {rows}, rng);
      bind_all(*first, a);
      GDL_REQUIRE_OK(second->set_param("w", b.at("w").bytes.data(), b.at("w").bytes.size()));
      GDL_REQUIRE_OK(first->run());
      Expected<Session::TensorView> h = first->output_view("h");
      GDL_REQUIRE_OK(h.status());
      CHECK(h->shape == std::vector<int64_t>{rows, 64});
      CHECK(h->strides == std::vector<int64_t>{64, 1});
      CHECK(h->dtype == ElementType::kF32);
      // No host sync: the copy runs on the shared stream after the first run (the graph's copy node at 16
      // rows; at 5 and 1 rows, padded to the bucket, the bind enqueues it on the stream itself).
      GDL_REQUIRE_OK(second->bind("h", h->data, static_cast<size_t>(rows) * 64 * 4, ElementType::kF32, {rows, 64},
                                  MemoryKind::kDevice));
      GDL_REQUIRE_OK(second->run());
      std::map<std::string, TensorData> got = read_outputs(*second);
      std::map<std::string, TensorData> hidden = reference(scale, a);
      b["h"] = hidden.at("h");
      CHECK(expect_match(got, reference(project, b), "rows " + std::to_string(rows)));
      // The view holds what read() returns.
      GDL_REQUIRE_OK(first->synchronize());
      CHECK(device_tensor(h->data, ElementType::kF32, h->shape).bytes == read_outputs(*first).at("h").bytes);
    }
  }
  REQUIRE(cudaStreamDestroy(caller) == cudaSuccess);
}

TEST_CASE("embedding: an output view under a padded inner axis has the bucket's stride") {
  if (cpu_only) return;
  Program inner = compile_text(kInner);
  std::unique_ptr<Session> s = make_session(inner);
  std::mt19937_64 rng(seed_for("inner view"));
  std::map<std::string, TensorData> t = random_bindings(inner, {5}, rng);
  bind_all(*s, t);
  CHECK(s->output_view("z").status().code() == StatusCode::kFailedPrecondition);  // before any run
  GDL_REQUIRE_OK(s->run());
  Expected<Session::TensorView> z = s->output_view("z");
  GDL_REQUIRE_OK(z.status());
  CHECK(z->shape == std::vector<int64_t>{4, 5});
  CHECK(z->strides == std::vector<int64_t>{8, 1});  // B=5 runs in the bucket of 8
  GDL_REQUIRE_OK(s->synchronize());
  TensorData got;
  got.dtype = ElementType::kF32;
  got.shape = {4, 5};
  got.bytes.resize(4 * 5 * 4);
  REQUIRE(cudaMemcpy2D(got.bytes.data(), 5 * 4, z->data, static_cast<size_t>(z->strides[0]) * 4, 5 * 4, 4,
                       cudaMemcpyDeviceToHost) == cudaSuccess);
  CHECK(expect_match({{"z", got}}, reference(inner, t), "strided view"));
  CHECK(s->output_view("x").status().code() == StatusCode::kInvalidArgument);  // an input, not an output
  CHECK(s->output_view("nothing").status().code() == StatusCode::kNotFound);
}

TEST_CASE("embedding: an exported graph runs as a child node between the caller's nodes, launch after launch") {
  if (cpu_only) return;
  Program moment = compile_text(kMoment);
  std::unique_ptr<Session> s = make_session(moment);
  CHECK(s->export_graph().status().code() == StatusCode::kFailedPrecondition);  // g not bound yet
  const size_t bytes = 1000 * 4;
  DeviceBuffer source(bytes), g(bytes), out(bytes);
  REQUIRE(cudaMemset(g.data, 0, bytes) == cudaSuccess);
  GDL_REQUIRE_OK(s->set_scalar("decay", 0.75));
  // One run gives y's place (fixed for the session's life: no run-time dim); the state goes back to zero.
  GDL_REQUIRE_OK(s->bind("g", g.data, bytes, ElementType::kF32, {1000}, MemoryKind::kDevice));
  GDL_REQUIRE_OK(s->run());
  Expected<Session::TensorView> y = s->output_view("y");
  GDL_REQUIRE_OK(y.status());
  GDL_REQUIRE_OK(s->reset_state("m"));
  GDL_REQUIRE_OK(s->bind("g", g.data, bytes, ElementType::kF32, {1000}, MemoryKind::kDevice));
  Expected<CUgraph_st*> exported = s->export_graph();
  GDL_REQUIRE_OK(exported.status());
  GDL_REQUIRE_OK(s->set_scalar("decay", 0.5));  // after the export: not in the exported graph

  // The caller's graph: their copy into g, the session's graph, their copy of y out.
  cudaGraph_t graph = nullptr;
  REQUIRE(cudaGraphCreate(&graph, 0) == cudaSuccess);
  cudaGraphNode_t fill = nullptr, child = nullptr, drain = nullptr;
  REQUIRE(cudaGraphAddMemcpyNode1D(&fill, graph, nullptr, 0, g.data, source.data, bytes, cudaMemcpyDeviceToDevice) ==
          cudaSuccess);
  REQUIRE(cudaGraphAddChildGraphNode(&child, graph, &fill, 1, *exported) == cudaSuccess);
  REQUIRE(cudaGraphDestroy(*exported) == cudaSuccess);  // the child node holds its own clone
  REQUIRE(cudaGraphAddMemcpyNode1D(&drain, graph, &child, 1, out.data, y->data, bytes, cudaMemcpyDeviceToDevice) ==
          cudaSuccess);
  cudaGraphExec_t exec = nullptr;
  REQUIRE(cudaGraphInstantiate(&exec, graph, 0) == cudaSuccess);

  std::mt19937_64 rng(seed_for("exported graph"));
  const TensorInfo& g_info = *moment.find_input("g");
  std::map<std::string, TensorData> tensors;
  tensors["m"] = random_tensor(*moment.find_state("m"), {}, rng, {});
  std::memset(tensors["m"].bytes.data(), 0, tensors["m"].bytes.size());  // reset_state: zero
  for (int launch = 0; launch < 3; ++launch) {
    tensors["g"] = random_tensor(g_info, {}, rng, {});
    REQUIRE(cudaMemcpy(source.data, tensors["g"].bytes.data(), bytes, cudaMemcpyHostToDevice) == cudaSuccess);
    REQUIRE(cudaGraphLaunch(exec, s->stream()) == cudaSuccess);
    REQUIRE(cudaStreamSynchronize(s->stream()) == cudaSuccess);
    std::map<std::string, TensorData> want = reference(moment, tensors, {{"decay", 0.75}});
    const std::string what = "launch " + std::to_string(launch);
    CHECK(expect_match({{"y", device_tensor(out.data, ElementType::kF32, {1000})}}, {{"y", want.at("y")}}, what));
    Expected<Session::DeviceView> m = s->state_view("m");
    GDL_REQUIRE_OK(m.status());
    CHECK(expect_match({{"m", device_tensor(m->data, ElementType::kF32, {1000})}}, {{"m", want.at("m")}}, what));
    tensors["m"] = want.at("m");
  }
  REQUIRE(cudaGraphExecDestroy(exec) == cudaSuccess);
  REQUIRE(cudaGraphDestroy(graph) == cudaSuccess);

  // The session's own runs go on from the state the launches left, with its own (changed) scalar.
  tensors["g"] = random_tensor(g_info, {}, rng, {});
  GDL_REQUIRE_OK(s->bind("g", tensors["g"].bytes.data(), bytes, ElementType::kF32, {1000}));
  GDL_REQUIRE_OK(s->run());
  std::map<std::string, TensorData> want = reference(moment, tensors, {{"decay", 0.5}});
  CHECK(expect_match(read_outputs(*s), {{"y", want.at("y")}}, "the session's own run after the launches"));
}

TEST_CASE("embedding: DLPack tensors in (device and host) and outputs and states out, against the reference") {
  if (cpu_only) return;
  Program moment = compile_text(kMoment);
  std::unique_ptr<Session> s = make_session(moment);
  std::mt19937_64 rng(seed_for("dlpack"));
  std::map<std::string, TensorData> tensors;
  tensors["g"] = random_tensor(*moment.find_input("g"), {}, rng, {});
  tensors["m"] = random_tensor(*moment.find_state("m"), {}, rng, {});
  const size_t bytes = 1000 * 4;
  DeviceBuffer g(bytes);
  REQUIRE(cudaMemcpy(g.data, tensors["g"].bytes.data(), bytes, cudaMemcpyHostToDevice) == cudaSuccess);
  std::vector<int64_t> shape{1000};
  DLTensor g_tensor{};
  g_tensor.data = g.data;
  g_tensor.device = {kDLCUDA, s->device()};
  g_tensor.ndim = 1;
  g_tensor.dtype = {kDLFloat, 32, 1};
  g_tensor.shape = shape.data();
  DLTensor m_tensor = g_tensor;
  m_tensor.data = tensors["m"].bytes.data();
  m_tensor.device = {kDLCPU, 0};
  GDL_REQUIRE_OK(set_state_dlpack(*s, "m", m_tensor));
  GDL_REQUIRE_OK(bind_dlpack(*s, "g", g_tensor));
  DLTensor elsewhere = g_tensor;
  elsewhere.device.device_id = s->device() + 5;
  CHECK(bind_dlpack(*s, "g", elsewhere).code() == StatusCode::kInvalidArgument);  // refused, the bind above kept
  DLTensor wrong_type = g_tensor;
  wrong_type.dtype = {kDLFloat, 16, 1};
  CHECK(bind_dlpack(*s, "g", wrong_type).code() == StatusCode::kInvalidArgument);
  GDL_REQUIRE_OK(s->run());
  GDL_REQUIRE_OK(s->synchronize());
  std::map<std::string, TensorData> want = reference(moment, tensors);
  Expected<DLManagedTensor*> y = output_dlpack(*s, "y");
  GDL_REQUIRE_OK(y.status());
  CHECK((*y)->dl_tensor.device.device_type == kDLCUDA);
  CHECK((*y)->dl_tensor.shape[0] == 1000);
  CHECK(expect_match({{"y", device_tensor((*y)->dl_tensor.data, ElementType::kF32, {1000})}}, {{"y", want.at("y")}},
                     "output through DLPack"));
  (*y)->deleter(*y);
  Expected<DLManagedTensor*> m = state_dlpack(*s, "m");
  GDL_REQUIRE_OK(m.status());
  CHECK(expect_match({{"m", device_tensor((*m)->dl_tensor.data, ElementType::kF32, {1000})}}, {{"m", want.at("m")}},
                     "state through DLPack"));
  (*m)->deleter(*m);
}

namespace {

const char* kResidual = R"(program residual;
dim B in [1, 64] buckets(1, 64);
input x : f16[B, 256];
input r : f16[B, 256];
param w : f16[256, 256];
output y : f16[B, 256];
y = (x @ w) + r;
)";

}  // namespace

TEST_CASE("embedding: bind_reference reads the caller's memory at every run, in place or copied by the run") {
  if (cpu_only) return;
  Program program = compile_text(kResidual);
  std::unique_ptr<Session> s = make_session(program);
  std::mt19937_64 rng(seed_for("bind by reference"));
  const size_t row_bytes = 256 * 2;
  DeviceBuffer dx(64 * row_bytes + 256), dr(64 * row_bytes);
  for (int64_t rows : {1, 64}) {  // 1: the rows kernel reads x in place; 64: cuBLASLt's call, which copies it
    INFO("rows " << rows);
    std::map<std::string, TensorData> t = random_bindings(program, {rows}, rng);
    GDL_REQUIRE_OK(s->set_param("w", t.at("w").bytes.data(), t.at("w").bytes.size()));
    REQUIRE(cudaMemcpy(dx.data, t.at("x").bytes.data(), t.at("x").bytes.size(), cudaMemcpyHostToDevice) == cudaSuccess);
    REQUIRE(cudaMemcpy(dr.data, t.at("r").bytes.data(), t.at("r").bytes.size(), cudaMemcpyHostToDevice) == cudaSuccess);
    const size_t bytes = static_cast<size_t>(rows) * row_bytes;
    const uint64_t copies_before = s->stats().reference_copies;
    GDL_REQUIRE_OK(s->bind_reference("x", dx.data, bytes, ElementType::kF16, {rows, 256}));
    GDL_REQUIRE_OK(s->bind_reference("r", dr.data, bytes, ElementType::kF16, {rows, 256}));
    CHECK(s->stats().input_copies == 0);  // nothing copied at bind
    GDL_REQUIRE_OK(s->run());
    GDL_REQUIRE_OK(s->synchronize());
    const std::map<std::string, TensorData> first_want = reference(program, t);
    // The run is done: changing the caller's memory now does not change its result.
    TensorData x2 = random_tensor(*program.find_input("x"), {rows}, rng, {});
    REQUIRE(cudaMemcpy(dx.data, x2.bytes.data(), bytes, cudaMemcpyHostToDevice) == cudaSuccess);
    CHECK(expect_match(read_outputs(*s), first_want, "the run before the change"));
    // The next run, with no bind, reads the changed memory.
    GDL_REQUIRE_OK(s->run());
    t["x"] = x2;
    CHECK(expect_match(read_outputs(*s), reference(program, t), "the next run, after the change"));
    const uint64_t copied = s->stats().reference_copies - copies_before;
    MESSAGE("rows " << rows << ": inputs copied by the runs " << copied);
    if (rows == 1) CHECK(copied == 0);  // the rows kernel and its epilogue read both in place
    // The eager path reads it the same way.
    GDL_REQUIRE_OK(s->run_eager());
    CHECK(expect_match(read_outputs(*s), reference(program, t), "eager"));
  }
  // 16-byte but not 256-byte aligned: each run copies it from there.
  std::map<std::string, TensorData> t = random_bindings(program, {1}, rng);
  GDL_REQUIRE_OK(s->set_param("w", t.at("w").bytes.data(), t.at("w").bytes.size()));
  unsigned char* shifted = static_cast<unsigned char*>(dx.data) + 16;
  REQUIRE(cudaMemcpy(shifted, t.at("x").bytes.data(), t.at("x").bytes.size(), cudaMemcpyHostToDevice) == cudaSuccess);
  REQUIRE(cudaMemcpy(dr.data, t.at("r").bytes.data(), t.at("r").bytes.size(), cudaMemcpyHostToDevice) == cudaSuccess);
  const uint64_t copies_before = s->stats().reference_copies;
  GDL_REQUIRE_OK(s->bind_reference("x", shifted, row_bytes, ElementType::kF16, {1, 256}));
  GDL_REQUIRE_OK(s->bind_reference("r", dr.data, row_bytes, ElementType::kF16, {1, 256}));
  GDL_REQUIRE_OK(s->run());
  CHECK(expect_match(read_outputs(*s), reference(program, t), "an unaligned reference, copied"));
  CHECK(s->stats().reference_copies == copies_before + 1);
  // Refused, changing nothing: padded rows, host memory, a misaligned address.
  CHECK(s->bind_reference("x", dx.data, 5 * row_bytes, ElementType::kF16, {5, 256}).code() ==
        StatusCode::kFailedPrecondition);
  CHECK(s->bind_reference("x", t.at("x").bytes.data(), row_bytes, ElementType::kF16, {1, 256}).code() ==
        StatusCode::kInvalidArgument);  // host memory
  CHECK(s->bind_reference("x", static_cast<unsigned char*>(dx.data) + 2, row_bytes, ElementType::kF16, {1, 256})
            .code() == StatusCode::kFailedPrecondition);
  GDL_REQUIRE_OK(s->run());
  CHECK(expect_match(read_outputs(*s), reference(program, t), "after the refusals"));
}

TEST_CASE("embedding: a graph built after a run that read its input in place reads the new bind") {
  // 1 row: the rows kernel normalizes x as it reads it, in place from
  // the caller's memory. 64 rows: a new graph whose norm kernel (before
  // cuBLASLt's call) takes the input's address when the graph is built and
  // is not updated afterwards: it must take the arena copy of this run's
  // bind, not the reference of the run before.
  Program program = compile_text(
      "program prologue;\ndim B in [1, 64] buckets(1, 64);\ninput x : f16[B, 512];\nparam w : f16[512, 256];\n"
      "output y : f16[B, 256];\ny = rmsnorm(x) @ w;\n");
  bool norm_kernel = false;
  for (const Kernel& k : program.internals().kernels().kernels) norm_kernel |= k.library.prologue_kernel >= 0;
  REQUIRE(norm_kernel);
  REQUIRE(library_steps_at(program, {1}) == 0);  // the rows kernel, which reads x where it is
  REQUIRE(library_steps_at(program, {64}) == 1);
  if (cpu_only) return;
  std::unique_ptr<Session> s = make_session(program);
  std::mt19937_64 rng(seed_for("graph after a reference"));
  std::map<std::string, TensorData> t1 = random_bindings(program, {1}, rng);
  GDL_REQUIRE_OK(s->set_param("w", t1.at("w").bytes.data(), t1.at("w").bytes.size()));
  DeviceBuffer dx(64 * 512 * 2);
  REQUIRE(cudaMemcpy(dx.data, t1.at("x").bytes.data(), t1.at("x").bytes.size(), cudaMemcpyHostToDevice) == cudaSuccess);
  GDL_REQUIRE_OK(s->bind_reference("x", dx.data, t1.at("x").bytes.size(), ElementType::kF16, {1, 512}));
  GDL_REQUIRE_OK(s->run());
  CHECK(s->stats().reference_copies == 0);  // read in place, not copied
  CHECK(expect_match(read_outputs(*s), reference(program, t1), "1 row read in place"));
  std::map<std::string, TensorData> t64 = random_bindings(program, {64}, rng);
  t64["w"] = t1.at("w");
  GDL_REQUIRE_OK(s->bind("x", t64.at("x").bytes.data(), t64.at("x").bytes.size(), ElementType::kF16, {64, 512}));
  GDL_REQUIRE_OK(s->run());
  CHECK(expect_match(read_outputs(*s), reference(program, t64), "64 rows bound by copy, a new graph"));
}

TEST_CASE("embedding: an exported graph keeps its dims when the session's runs move to another bucket") {
  if (cpu_only) return;
  Program scale = compile_text(kScale);
  std::unique_ptr<Session> s = make_session(scale);
  std::mt19937_64 rng(seed_for("exported dims"));
  std::map<std::string, TensorData> at16 = random_bindings(scale, {16}, rng);
  DeviceBuffer x(16 * 64 * 4), out(16 * 64 * 4);
  REQUIRE(cudaMemcpy(x.data, at16.at("x").bytes.data(), 16 * 64 * 4, cudaMemcpyHostToDevice) == cudaSuccess);
  GDL_REQUIRE_OK(s->bind("x", x.data, 16 * 64 * 4, ElementType::kF32, {16, 64}, MemoryKind::kDevice));
  Expected<CUgraph_st*> exported = s->export_graph();
  GDL_REQUIRE_OK(exported.status());
  Expected<Session::TensorView> h = s->output_view("h");
  GDL_REQUIRE_OK(h.status());
  CHECK(h->shape == std::vector<int64_t>{16, 64});
  cudaGraph_t graph = nullptr;
  REQUIRE(cudaGraphCreate(&graph, 0) == cudaSuccess);
  cudaGraphNode_t child = nullptr, drain = nullptr;
  REQUIRE(cudaGraphAddChildGraphNode(&child, graph, nullptr, 0, *exported) == cudaSuccess);
  REQUIRE(cudaGraphDestroy(*exported) == cudaSuccess);
  REQUIRE(cudaGraphAddMemcpyNode1D(&drain, graph, &child, 1, out.data, h->data, 16 * 64 * 4, cudaMemcpyDeviceToDevice) ==
          cudaSuccess);
  cudaGraphExec_t exec = nullptr;
  REQUIRE(cudaGraphInstantiate(&exec, graph, 0) == cudaSuccess);
  const std::map<std::string, TensorData> want = reference(scale, at16);
  // A run of 5 rows (bucket 8) by the session itself, then the exported graph's 16 rows, then 5 rows by
  // the session again: each writes its own valid counts.
  std::map<std::string, TensorData> at5 = random_bindings(scale, {5}, rng);
  bind_all(*s, at5);
  GDL_REQUIRE_OK(s->run());
  CHECK(expect_match(read_outputs(*s), reference(scale, at5), "the session's own run at 5 rows"));
  REQUIRE(cudaGraphLaunch(exec, s->stream()) == cudaSuccess);
  REQUIRE(cudaStreamSynchronize(s->stream()) == cudaSuccess);
  CHECK(expect_match({{"h", device_tensor(out.data, ElementType::kF32, {16, 64})}}, want, "the exported graph at 16 rows"));
  bind_all(*s, at5);  // x: the launch wrote the arena's copy of it
  GDL_REQUIRE_OK(s->run());
  CHECK(expect_match(read_outputs(*s), reference(scale, at5), "the session's run after the launch"));
  REQUIRE(cudaGraphExecDestroy(exec) == cudaSuccess);
  REQUIRE(cudaGraphDestroy(graph) == cudaSuccess);
}

TEST_CASE("embedding: a reference to an input the program writes into stays bound, copied by every run") {
  if (cpu_only) return;
  Program program = compile_text(R"(program into;
input base : f32[8, 64];
input at : i32[2];
input rows : f32[2, 64];
output y : f32[8, 64];
y = scatter(base, at, rows, axis = 0);
)");
  std::unique_ptr<Session> s = make_session(program);
  std::mt19937_64 rng(seed_for("reference written into"));
  std::map<std::string, TensorData> t = random_bindings(program, {}, rng);
  const int32_t at[2] = {1, 5};  // two distinct rows
  t["at"].bytes.assign(reinterpret_cast<const uint8_t*>(at), reinterpret_cast<const uint8_t*>(at) + sizeof at);
  DeviceBuffer base(8 * 64 * 4);
  REQUIRE(cudaMemcpy(base.data, t.at("base").bytes.data(), 8 * 64 * 4, cudaMemcpyHostToDevice) == cudaSuccess);
  GDL_REQUIRE_OK(s->bind_reference("base", base.data, 8 * 64 * 4, ElementType::kF32, {8, 64}));
  bind_inputs(*s, {{"at", t.at("at")}, {"rows", t.at("rows")}});
  const uint64_t copies_before = s->stats().reference_copies;
  for (int run = 0; run < 2; ++run) {
    GDL_REQUIRE_OK(s->run());
    CHECK(expect_match(read_outputs(*s), reference(program, t), "run " + std::to_string(run)));
    bind_inputs(*s, {{"rows", t.at("rows")}});  // rows is only read; base stays bound by reference
  }
  if (program.internals().input_clobbered_by_run.at(0)) CHECK(s->stats().reference_copies == copies_before + 2);
}
