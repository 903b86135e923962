// The runtime without a GPU: loading artifacts (good, missing, corrupt,
// truncated, inconsistent), introspection, the CPU reference path, element
// conversions, and Session::create saying clearly that there is no GPU.
#include <cuda_runtime_api.h>
#include <doctest/doctest.h>
#include <unistd.h>

#include <cmath>
#include <filesystem>
#include <fstream>

#include "artifact.h"
#include "gdl/gdl.h"
#include "gdl/jit.h"
#include "gdl/profile.h"
#include "gdl/testing.h"
#include "passes/ir_verify.h"
#include "pipeline.h"
#include "plan/check.h"
#include "stand_in_module.h"

using namespace gdl;

namespace {

// program t; dim B in [1, 8]; input x : f32[B, 4]; input len : i32;
// param w : f32[4]; scalar alpha : f32 = 2.0; output y : f32[B, 4];
// y = x * w * alpha;
// Built directly as IR + plan, with a made-up kernel table: loading and
// introspection never look inside the kernels.
Artifact tiny_artifact(int extra_dims = 0) {
  ir::Graph g;
  g.program_name = "t";
  g.dims.push_back({"B", 1, 8, {1, 2, 4, 8}, DimPolicy::kBuckets});
  for (int i = 0; i < extra_dims; ++i) g.dims.push_back({"E" + std::to_string(i), 1, 2, {1, 2}, DimPolicy::kBuckets});
  Shape bx = {Dim::runtime(0), Dim::constant(4)};
  auto leaf = [&](ir::Op op, const char* name, DType t, Shape s, double value = 0) {
    ir::Node n;
    n.op = op;
    n.name = name;
    n.type = {t, std::move(s)};
    n.attrs.value = value;
    return g.add(std::move(n));
  };
  ir::ValueId x = leaf(ir::Op::kInput, "x", DType::kF32, bx);
  leaf(ir::Op::kInput, "len", DType::kI32, {});
  ir::ValueId w = leaf(ir::Op::kParam, "w", DType::kF32, {Dim::constant(4)});
  ir::ValueId alpha = leaf(ir::Op::kScalar, "alpha", DType::kF32, {}, 2.0);
  ir::Node m;
  m.op = ir::Op::kMul;
  m.args = {x, w};
  m.type = {DType::kF32, bx};
  ir::ValueId xw = g.add(m);
  m.args = {xw, alpha};
  ir::ValueId y = g.add(m);
  g.outputs.push_back({"y", y, {}});
  REQUIRE(ir::verify(g) == "");

  Artifact a;
  a.plan = plan_program(std::move(g));
  REQUIRE(plan::check_plan(a.plan) == "");
  for (size_t i = 0; i < a.plan.steps.size(); ++i) {
    Kernel k;
    k.symbol = "gdl_step_" + std::to_string(i);
    k.first_step = k.last_step = static_cast<int>(i);
    k.launch.work = bx;
    k.depends_on_dims = true;
    if (i + 1 == a.plan.steps.size()) k.scalars_used = {0};
    a.kernels.step_choices.push_back({static_cast<int>(a.kernels.kernels.size())});
    a.kernels.kernels.push_back(k);
  }
  a.module = stand_in_module(a.kernels);
  a.cuda_source = "// tiny\n";
  return a;
}

std::string temp_path(const std::string& stem) {
  return (std::filesystem::temp_directory_path() /
          ("gdl_runtime_cpu_" + stem + "_" + std::to_string(getpid()) + ".gdlx"))
      .string();
}

std::string write_tiny(const std::string& stem, const Artifact& a) {
  std::string path = temp_path(stem);
  REQUIRE(write_artifact(path, a).ok());
  return path;
}

std::vector<uint8_t> file_bytes(const std::string& path) {
  std::ifstream in(path, std::ios::binary);
  return {std::istreambuf_iterator<char>(in), std::istreambuf_iterator<char>()};
}

void put_bytes(const std::string& path, const std::vector<uint8_t>& bytes) {
  std::ofstream out(path, std::ios::binary | std::ios::trunc);
  out.write(reinterpret_cast<const char*>(bytes.data()), static_cast<std::streamsize>(bytes.size()));
}

bool gpu_usable() {
  int count = 0;
  bool usable = cudaGetDeviceCount(&count) == cudaSuccess && count > 0;
  (void)cudaGetLastError();
  return usable;
}

}  // namespace

TEST_CASE("runtime: Program::load of a missing artifact is NotFound") {
  Expected<Program> p = Program::load(temp_path("does_not_exist"));
  CHECK(p.status().code() == StatusCode::kNotFound);
  CHECK(p.status().message().find("does_not_exist") != std::string::npos);
}

TEST_CASE("runtime: Program::load of a corrupt or truncated artifact is DataLoss") {
  std::string path = write_tiny("corrupt", tiny_artifact());
  const std::vector<uint8_t> good = file_bytes(path);
  REQUIRE(good.size() > 64);
  struct Damage {
    const char* what;
    std::vector<uint8_t> bytes;
  };
  std::vector<Damage> damages;
  damages.push_back({"empty", {}});
  damages.push_back({"header only", std::vector<uint8_t>(good.begin(), good.begin() + 20)});
  damages.push_back({"half", std::vector<uint8_t>(good.begin(), good.begin() + static_cast<long>(good.size() / 2))});
  damages.push_back({"one byte short", std::vector<uint8_t>(good.begin(), good.end() - 1)});
  std::vector<uint8_t> longer = good;
  longer.push_back(0);
  damages.push_back({"one byte long", longer});
  std::vector<uint8_t> flipped = good;
  flipped[good.size() / 2] ^= 0x10;
  damages.push_back({"a flipped payload bit", flipped});
  std::vector<uint8_t> magic = good;
  magic[0] = 'X';
  damages.push_back({"bad magic", magic});
  std::vector<uint8_t> version = good;
  version[8] += 1;
  damages.push_back({"another format version", version});
  damages.push_back({"text", std::vector<uint8_t>{'h', 'e', 'l', 'l', 'o', '\n'}});
  for (const Damage& d : damages) {
    INFO("damage: " << d.what);
    put_bytes(path, d.bytes);
    Expected<Program> p = Program::load(path);
    CHECK(p.status().code() == StatusCode::kDataLoss);
    CHECK(!p.status().message().empty());
    // The same bytes from memory (an artifact embedded in a binary).
    Expected<Program> m = Program::load_memory(d.bytes.data(), d.bytes.size());
    CHECK(m.status().code() == StatusCode::kDataLoss);
  }
  std::filesystem::remove(path);
}

TEST_CASE("runtime: Program::load_memory reads an artifact's bytes like the file, and keeps no pointer to them") {
  std::vector<uint8_t> bytes = serialize_artifact(tiny_artifact());
  Expected<Program> p = Program::load_memory(bytes.data(), bytes.size());
  REQUIRE(p.ok());
  std::fill(bytes.begin(), bytes.end(), uint8_t{0xAB});  // the caller's copy may go
  const std::string path = write_tiny("memory", tiny_artifact());
  Expected<Program> f = Program::load(path);
  REQUIRE(f.ok());
  CHECK(p->name() == f->name());
  CHECK(p->node_count() == f->node_count());
  CHECK(p->arena_bytes() == f->arena_bytes());
  CHECK(p->inputs().size() == f->inputs().size());
  std::filesystem::remove(path);
  CHECK(Program::load_memory(nullptr, 16).status().code() == StatusCode::kInvalidArgument);
  CHECK(Program::load_memory(nullptr, 0).status().code() == StatusCode::kDataLoss);
}

TEST_CASE("runtime: an artifact whose tables do not fit the kernel ABI is refused") {
  // Nine run-time dims: more than gdl_args holds. The file itself is intact.
  std::string path = write_tiny("nine_dims", tiny_artifact(8));
  Expected<Program> p = Program::load(path);
  CHECK(p.status().code() == StatusCode::kDataLoss);
  CHECK(p.status().message().find("dims") != std::string::npos);
  std::filesystem::remove(path);

  Artifact missing_kernel = tiny_artifact();
  missing_kernel.kernels.step_choices.pop_back();
  std::vector<uint8_t> bytes = serialize_artifact(missing_kernel);
  path = temp_path("missing_kernel");
  put_bytes(path, bytes);
  CHECK(Program::load(path).status().code() == StatusCode::kDataLoss);
  std::filesystem::remove(path);
}

TEST_CASE("runtime: Program introspection") {
  Artifact a = tiny_artifact();
  size_t steps = a.plan.steps.size();
  uint64_t arena = a.plan.arena_bytes;
  std::string path = write_tiny("introspect", a);
  Expected<Program> loaded = Program::load(path);
  std::filesystem::remove(path);
  INFO(loaded.status().message());
  REQUIRE(loaded.ok());
  const Program& p = *loaded;
  CHECK(p.name() == "t");
  REQUIRE(p.dims().size() == 1);
  CHECK(p.dims()[0].name == "B");
  CHECK(p.dims()[0].lo == 1);
  CHECK(p.dims()[0].hi == 8);
  CHECK(p.dims()[0].buckets == std::vector<int64_t>{1, 2, 4, 8});
  CHECK_FALSE(p.dims()[0].update_policy);

  REQUIRE(p.inputs().size() == 2);
  const TensorInfo& x = p.inputs()[0];
  CHECK(x.name == "x");
  CHECK(x.dtype == ElementType::kF32);
  CHECK(x.type_text == "f32[B, 4]");
  REQUIRE(x.shape.size() == 2);
  CHECK(x.shape[0].is_runtime());
  CHECK(x.shape[0].dim == 0);
  CHECK(x.shape[0].extent == 8);
  CHECK_FALSE(x.shape[1].is_runtime());
  CHECK(x.shape[1].extent == 4);
  CHECK(x.max_bytes == 8 * 4 * 4);
  CHECK(p.inputs()[1].name == "len");
  CHECK(p.inputs()[1].dtype == ElementType::kI32);
  CHECK(p.inputs()[1].shape.empty());
  CHECK(p.inputs()[1].max_bytes == 4);

  REQUIRE(p.params().size() == 1);
  CHECK(p.params()[0].name == "w");
  CHECK(p.params()[0].max_bytes == 16);
  REQUIRE(p.outputs().size() == 1);
  CHECK(p.outputs()[0].name == "y");
  CHECK(p.outputs()[0].type_text == "f32[B, 4]");
  REQUIRE(p.scalars().size() == 1);
  CHECK(p.scalars()[0].name == "alpha");
  CHECK(p.scalars()[0].dtype == ElementType::kF32);
  CHECK(p.scalars()[0].default_value == 2.0);

  CHECK(p.find_input("x") == &p.inputs()[0]);
  CHECK(p.find_input("w") == nullptr);
  CHECK(p.find_param("w") == &p.params()[0]);
  CHECK(p.find_output("y") != nullptr);
  CHECK(p.find_scalar("alpha") != nullptr);
  CHECK(p.find_scalar("beta") == nullptr);
  CHECK(p.node_count() == steps);
  CHECK(p.arena_bytes() == arena);
  CHECK(p.arena_bytes() >= 8 * 4 * 4 * 2);  // x and y at least
  CHECK(p.params_bytes() >= 16);
  CHECK(p.naive_bytes() >= p.arena_bytes());
  CHECK(p.kernel_arch() == "sm_90");

  Program copy = p;  // copies share the contents
  CHECK(&copy.inputs() == &p.inputs());
}

TEST_CASE("runtime: the CPU reference path through the public API") {
  std::string path = write_tiny("reference", tiny_artifact());
  Expected<Program> p = Program::load(path);
  std::filesystem::remove(path);
  REQUIRE(p.ok());
  std::vector<double> xv = {0.5, -1.25, 3.0, 0.1, 2.0, -0.75, 1.5, 4.0, -2.5, 0.3, 0.7, -0.9};
  std::vector<double> wv = {1.5, -2.0, 0.25, 3.0};
  std::map<std::string, TensorData> t;
  t["x"] = {ElementType::kF32, {3, 4}, encode_elements(ElementType::kF32, xv)};
  t["w"] = {ElementType::kF32, {4}, encode_elements(ElementType::kF32, wv)};
  t["len"] = {ElementType::kI32, {}, encode_elements(ElementType::kI32, std::vector<double>{7})};
  for (double alpha : {2.0, -0.5}) {
    std::map<std::string, double> scalars;
    if (alpha != 2.0) scalars["alpha"] = alpha;  // 2.0 is the default
    auto out = jit::run_reference(*p, t, scalars);
    INFO(out.status().message());
    REQUIRE(out.ok());
    const TensorData& y = out->at("y");
    CHECK(y.shape == std::vector<int64_t>{3, 4});
    std::vector<double> yv = decode_elements(ElementType::kF32, y.bytes.data(), 12);
    for (size_t i = 0; i < 12; ++i) {
      float want = static_cast<float>(static_cast<float>(xv[i]) * static_cast<float>(wv[i % 4])) * static_cast<float>(alpha);
      CHECK(yv[i] == doctest::Approx(want).epsilon(1e-6));
    }
  }
  CHECK(jit::run_reference(*p, t, {{"beta", 1.0}}).status().code() == StatusCode::kNotFound);
  auto bad = t;
  bad["x"].bytes.pop_back();
  CHECK(jit::run_reference(*p, bad).status().code() == StatusCode::kInvalidArgument);
  bad = t;
  bad["nope"] = t["w"];
  CHECK(jit::run_reference(*p, bad).status().code() == StatusCode::kNotFound);
  bad = t;
  bad.erase("w");
  CHECK_FALSE(jit::run_reference(*p, bad).ok());
  bad = t;
  bad["x"].shape = {9, 4};  // B = 9 is outside [1, 8]
  bad["x"].bytes.resize(9 * 4 * 4);
  CHECK_FALSE(jit::run_reference(*p, bad).ok());
}

TEST_CASE("runtime: element conversions") {
  CHECK(std::string(element_type_name(ElementType::kBF16)) == "bf16");
  CHECK(element_size(ElementType::kF16) == 2);
  CHECK(element_size(ElementType::kBool) == 1);
  std::vector<double> v = {1.0 / 3.0, -2.5, 65504.0, 1e-3};
  std::vector<double> h = decode_elements(ElementType::kF16, encode_elements(ElementType::kF16, v).data(), v.size());
  CHECK(h[0] == doctest::Approx(1.0 / 3.0).epsilon(1e-3));
  CHECK(h[0] != 1.0 / 3.0);  // rounded to half precision
  CHECK(h[1] == -2.5);
  CHECK(h[2] == 65504.0);
  std::vector<double> b = decode_elements(ElementType::kBF16, encode_elements(ElementType::kBF16, v).data(), v.size());
  CHECK(b[0] == doctest::Approx(1.0 / 3.0).epsilon(1e-2));
  std::vector<double> i = decode_elements(ElementType::kI32, encode_elements(ElementType::kI32, std::vector<double>{-7.9, 3e10}).data(), 2);
  CHECK(i[0] == -7);
  CHECK(i[1] == 2147483647.0);
}

TEST_CASE("runtime: Session::create without a GPU is Unavailable and says why") {
  if (gpu_usable()) {
    MESSAGE("a GPU is usable here; the no-GPU path is not exercised");
    return;
  }
  std::string path = write_tiny("no_gpu", tiny_artifact());
  Expected<Program> p = Program::load(path);
  std::filesystem::remove(path);
  REQUIRE(p.ok());
  Expected<std::unique_ptr<Session>> s = Session::create(*p);
  CHECK(s.status().code() == StatusCode::kUnavailable);
  CHECK(s.status().message().find("no usable GPU") != std::string::npos);
  CHECK(s.status().message().find("cuda") != std::string::npos);  // the CUDA error's name
  MESSAGE("Session::create: " << s.status().message());
  // Asking again gives the same answer (no state left behind).
  CHECK(Session::create(*p, {.device = 3}).status().code() == StatusCode::kUnavailable);
}
