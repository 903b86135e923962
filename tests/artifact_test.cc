// The .gdlx artifact: exact round trips, and refusal (never a crash) of
// corrupt, truncated, foreign, outdated or hostile files.
#include <doctest/doctest.h>

#include <cstdio>
#include <filesystem>
#include <fstream>
#include <random>

#include <unistd.h>

#include "artifact.h"
#include "ir_builder.h"

namespace gdl {
namespace {

using ir::Op;
using ir::ValueId;
using testing::GraphBuilder;

constexpr size_t kHeaderBytes = 28;  // magic 8, version 4, payload size 8, checksum 8

// A graph that uses every field the format stores: a run-time dim with
// buckets and a policy, every leaf role, attrs of every kind, names and
// source positions.
ir::Graph sample_graph() {
  GraphBuilder b;
  b.g.program_name = "sample";
  Dim batch = b.dim("B", 1, 16);
  b.g.dims[0].buckets = {1, 4, 16};
  b.g.dims[0].policy = DimPolicy::kUpdate;
  const Dim c4 = Dim::constant(4), c8 = Dim::constant(8);
  ValueId x = b.input("x", {DType::kF16, {batch, c8}});
  ValueId w = b.param("w", {DType::kF16, {c8, c4}});
  ValueId alpha = b.scalar("alpha", DType::kF32, 0.75);
  ValueId h = b.op(Op::kMatMul, {x, w}, {DType::kF16, {batch, c4}});
  ValueId hf = b.cast(h, DType::kF32);
  ValueId scaled = b.binary(Op::kMul, hf, alpha);
  ValueId norm = b.op(Op::kLayerNorm, {scaled}, {DType::kF32, {batch, c4}}, testing::value_attrs(1e-5));
  ValueId t = b.op(Op::kTranspose, {norm}, {DType::kF32, {c4, batch}}, testing::ints_attrs({1, 0}));
  ValueId s = b.op(Op::kSum, {t}, {DType::kF32, {c4, Dim::constant(1)}}, testing::axis_attrs(1, true));
  ValueId r = b.op(Op::kReshape, {s}, {DType::kF32, {c4}});
  ValueId y = b.binary(Op::kAdd, r, b.constant(-2.5));
  uint32_t line = 3;
  for (ir::Node& n : b.g.nodes) n.loc = SourceLoc{line++, 7};
  b.g.node(norm).name = "normed";
  b.output("y", y);
  b.output("t", t);
  b.g.outputs[0].loc = SourceLoc{40, 1};
  REQUIRE(ir::verify(b.g) == "");
  return b.g;
}

Artifact sample_artifact() {
  Artifact a;
  a.plan = plan::make_plan(sample_graph());
  REQUIRE(plan::check_plan(a.plan) == "");
  for (size_t i = 0; i < a.plan.steps.size(); ++i) {
    KernelInfo k;
    k.symbol = "gdl_step" + std::to_string(i);
    k.launch.work = a.plan.graph.node(a.plan.steps[i].result).type.shape;
    k.launch.items_per_block = 64 + static_cast<int64_t>(i);
    k.launch.grid_y = 1 + static_cast<uint32_t>(i % 3);
    k.launch.block = 128;
    k.launch.shared_bytes = static_cast<uint32_t>(i * 512);
    if (i % 2) k.scalars_used = {0};
    k.depends_on_dims = i % 2 == 0;
    k.early_start = i % 3 == 0;
    if (i == 1) {  // a step with a large kernel (codegen.h LargeKernel)
      k.large.symbol = k.symbol + "_tiled";
      k.large.launch.work = k.launch.work;
      k.large.launch.items_per_block = 64;
      k.large.launch.grid_y = 40;
      k.large.launch.block = 256;
      k.large.rows = k.launch.work;
      if (!k.large.rows.empty()) k.large.rows.pop_back();
      k.large.rows_limit = 16;
    }
    a.kernels.push_back(k);
  }
  a.module.arch = "sm_90";
  std::mt19937 rng(42);
  a.module.cubin = {0x7f, 'E', 'L', 'F'};
  for (int i = 0; i < 300; ++i) a.module.cubin.push_back(static_cast<uint8_t>(rng()));
  a.module.ptx = ".version 9.0\n.target sm_90\n.address_size 64\n";
  a.module.nvrtc_major = 13;
  a.module.nvrtc_minor = 0;
  a.module.from_cache = true;
  a.module.compile_ms = 72.25;
  a.cuda_source = "extern \"C\" __global__ void gdl_step0(unsigned char* arena) {}\n";
  return a;
}

void check_same_graph(const ir::Graph& x, const ir::Graph& y) {
  CHECK(x.program_name == y.program_name);
  REQUIRE(x.dims.size() == y.dims.size());
  for (size_t i = 0; i < x.dims.size(); ++i) {
    CHECK(x.dims[i].name == y.dims[i].name);
    CHECK(x.dims[i].lo == y.dims[i].lo);
    CHECK(x.dims[i].hi == y.dims[i].hi);
    CHECK(x.dims[i].buckets == y.dims[i].buckets);
    CHECK(x.dims[i].policy == y.dims[i].policy);
  }
  REQUIRE(x.nodes.size() == y.nodes.size());
  for (size_t i = 0; i < x.nodes.size(); ++i) {
    INFO("node %" << i);
    const ir::Node &a = x.nodes[i], &b = y.nodes[i];
    CHECK(a.op == b.op);
    CHECK(a.args == b.args);
    CHECK(a.type == b.type);
    CHECK(a.attrs == b.attrs);
    CHECK(a.name == b.name);
    CHECK(a.loc == b.loc);
  }
  REQUIRE(x.outputs.size() == y.outputs.size());
  for (size_t i = 0; i < x.outputs.size(); ++i) {
    CHECK(x.outputs[i].name == y.outputs[i].name);
    CHECK(x.outputs[i].value == y.outputs[i].value);
    CHECK(x.outputs[i].loc == y.outputs[i].loc);
  }
  CHECK(ir::print_ir(x) == ir::print_ir(y));
}

void check_same_artifact(const Artifact& x, const Artifact& y) {
  check_same_graph(x.plan.graph, y.plan.graph);
  REQUIRE(x.plan.buffers.size() == y.plan.buffers.size());
  for (size_t i = 0; i < x.plan.buffers.size(); ++i) {
    CHECK(x.plan.buffers[i].region == y.plan.buffers[i].region);
    CHECK(x.plan.buffers[i].offset == y.plan.buffers[i].offset);
    CHECK(x.plan.buffers[i].bytes == y.plan.buffers[i].bytes);
  }
  REQUIRE(x.plan.steps.size() == y.plan.steps.size());
  for (size_t i = 0; i < x.plan.steps.size(); ++i) {
    CHECK(x.plan.steps[i].values == y.plan.steps[i].values);
    CHECK(x.plan.steps[i].result == y.plan.steps[i].result);
    CHECK(x.plan.steps[i].reads == y.plan.steps[i].reads);
    CHECK(x.plan.steps[i].deps == y.plan.steps[i].deps);
  }
  CHECK(x.plan.arena_bytes == y.plan.arena_bytes);
  CHECK(x.plan.params_bytes == y.plan.params_bytes);
  CHECK(x.plan.naive_bytes == y.plan.naive_bytes);
  CHECK(x.plan.live_lower_bound == y.plan.live_lower_bound);
  REQUIRE(x.kernels.size() == y.kernels.size());
  for (size_t i = 0; i < x.kernels.size(); ++i) {
    const KernelInfo &a = x.kernels[i], &b = y.kernels[i];
    CHECK(a.symbol == b.symbol);
    CHECK(a.launch.work == b.launch.work);
    CHECK(a.launch.items_per_block == b.launch.items_per_block);
    CHECK(a.launch.grid_y == b.launch.grid_y);
    CHECK(a.launch.block == b.launch.block);
    CHECK(a.launch.shared_bytes == b.launch.shared_bytes);
    CHECK(a.scalars_used == b.scalars_used);
    CHECK(a.depends_on_dims == b.depends_on_dims);
    CHECK(a.early_start == b.early_start);
    CHECK(a.large.symbol == b.large.symbol);
    CHECK(a.large.launch.work == b.large.launch.work);
    CHECK(a.large.launch.items_per_block == b.large.launch.items_per_block);
    CHECK(a.large.launch.grid_y == b.large.launch.grid_y);
    CHECK(a.large.launch.block == b.large.launch.block);
    CHECK(a.large.rows == b.large.rows);
    CHECK(a.large.rows_limit == b.large.rows_limit);
  }
  CHECK_FALSE(x.kernels.at(1).large.symbol.empty());
  CHECK(x.module.arch == y.module.arch);
  CHECK(x.module.cubin == y.module.cubin);
  CHECK(x.module.ptx == y.module.ptx);
  CHECK(x.module.nvrtc_major == y.module.nvrtc_major);
  CHECK(x.module.nvrtc_minor == y.module.nvrtc_minor);
  CHECK(x.module.from_cache == y.module.from_cache);
  CHECK(x.module.compile_ms == y.module.compile_ms);
  CHECK(x.cuda_source == y.cuda_source);
}

uint64_t read_u64(const std::vector<uint8_t>& b, size_t at) {
  uint64_t v = 0;
  for (int i = 0; i < 8; ++i) v |= static_cast<uint64_t>(b[at + i]) << (8 * i);
  return v;
}
void write_u64(std::vector<uint8_t>& b, size_t at, uint64_t v) {
  for (int i = 0; i < 8; ++i) b[at + i] = static_cast<uint8_t>(v >> (8 * i));
}

// Recomputes the payload size and checksum after a deliberate edit, so the
// edit reaches the payload decoder instead of the checksum test.
void reseal(std::vector<uint8_t>& file) {
  uint64_t h = 0xcbf29ce484222325ull;
  for (size_t i = kHeaderBytes; i < file.size(); ++i) h = (h ^ file[i]) * 0x100000001b3ull;
  write_u64(file, 12, file.size() - kHeaderBytes);
  write_u64(file, 20, h);
}

std::string refusal(const std::vector<uint8_t>& file) {
  Expected<Artifact> a = deserialize_artifact(file);
  if (a.ok()) return "";
  CHECK(a.status().code() == StatusCode::kDataLoss);
  return a.status().message();
}

TEST_CASE("artifact: serialize then deserialize gives back everything") {
  Artifact a = sample_artifact();
  std::vector<uint8_t> file = serialize_artifact(a);
  REQUIRE(file.size() > kHeaderBytes);
  CHECK(std::string(file.begin(), file.begin() + 8) == std::string("GDLX\r\n\x1a\n", 8));
  CHECK(file[8] == kArtifactVersion);
  CHECK(read_u64(file, 12) == file.size() - kHeaderBytes);
  CHECK(serialize_artifact(a) == file);  // deterministic

  Expected<Artifact> back = deserialize_artifact(file);
  REQUIRE_MESSAGE(back.ok(), back.status().message());
  check_same_artifact(a, *back);
  CHECK(serialize_artifact(*back) == file);
}

TEST_CASE("artifact: write_artifact and read_artifact round trip through a file") {
  auto path = std::filesystem::temp_directory_path() / ("gdl_artifact_test_" + std::to_string(::getpid()) + ".gdlx");
  Artifact a = sample_artifact();
  Status written = write_artifact(path.string(), a);
  REQUIRE_MESSAGE(written.ok(), written.message());
  Expected<Artifact> back = read_artifact(path.string());
  REQUIRE_MESSAGE(back.ok(), back.status().message());
  check_same_artifact(a, *back);
  CHECK_FALSE(std::filesystem::exists(path.string() + ".tmp"));

  // The same file, cut short on disk.
  std::vector<uint8_t> bytes = serialize_artifact(a);
  {
    std::ofstream out(path, std::ios::binary | std::ios::trunc);
    out.write(reinterpret_cast<const char*>(bytes.data()), static_cast<std::streamsize>(bytes.size() / 2));
  }
  Expected<Artifact> cut = read_artifact(path.string());
  CHECK(cut.status().code() == StatusCode::kDataLoss);
  CHECK(cut.status().message().find("artifact is truncated") != std::string::npos);
  CHECK(cut.status().message().find(path.string()) != std::string::npos);
  std::filesystem::remove(path);
}

TEST_CASE("artifact: a file that does not exist is refused") {
  Expected<Artifact> a = read_artifact("/nonexistent/dir/model.gdlx");
  CHECK_FALSE(a.ok());
  CHECK(a.status().code() == StatusCode::kNotFound);
  CHECK(a.status().message().find("/nonexistent/dir/model.gdlx") != std::string::npos);
  CHECK(write_artifact("/nonexistent/dir/model.gdlx", sample_artifact()).code() == StatusCode::kInvalidArgument);
}

TEST_CASE("artifact: a corrupt byte anywhere in the payload fails the checksum") {
  const std::vector<uint8_t> file = serialize_artifact(sample_artifact());
  size_t refused = 0;
  for (size_t i = kHeaderBytes; i < file.size(); ++i) {
    for (uint8_t flip : {uint8_t{0x01}, uint8_t{0x80}, uint8_t{0xff}}) {
      std::vector<uint8_t> bad = file;
      bad[i] ^= flip;
      std::string why = refusal(bad);
      refused += why == "artifact checksum mismatch: the file is corrupt";
    }
  }
  CHECK(refused == 3 * (file.size() - kHeaderBytes));
}

TEST_CASE("artifact: a corrupt header is refused with what is wrong") {
  const std::vector<uint8_t> file = serialize_artifact(sample_artifact());
  for (size_t i = 0; i < 8; ++i) {
    std::vector<uint8_t> bad = file;
    bad[i] ^= 0x20;
    CHECK(refusal(bad) == "not a gdl artifact (bad magic)");
  }
  std::vector<uint8_t> older = file;
  older[8] = static_cast<uint8_t>(kArtifactVersion - 1);
  CHECK(refusal(older) == "artifact format version " + std::to_string(kArtifactVersion - 1) + ", this gdl reads version " +
                              std::to_string(kArtifactVersion) + ": recompile the program with this gdlc");
  std::vector<uint8_t> high = file;
  high[11] = 1;
  CHECK(refusal(high).find("artifact format version " + std::to_string((1u << 24) + kArtifactVersion)) == 0);

  std::vector<uint8_t> longer = file;
  write_u64(longer, 12, file.size());  // claims more payload than there is
  CHECK(refusal(longer).find("artifact is truncated") == 0);
  std::vector<uint8_t> shorter = file;
  write_u64(shorter, 12, file.size() - kHeaderBytes - 1);
  CHECK(refusal(shorter).find("bytes after its payload") != std::string::npos);
  std::vector<uint8_t> sum = file;
  sum[20] ^= 1;
  CHECK(refusal(sum) == "artifact checksum mismatch: the file is corrupt");
  std::vector<uint8_t> trailing = file;
  trailing.push_back(0);
  CHECK(refusal(trailing).find("bytes after its payload") != std::string::npos);

  std::vector<uint8_t> foreign = {'\x7f', 'E', 'L', 'F', 2, 1, 1, 0, 0, 0, 0, 0, 0, 0, 0, 0,
                                  0,      0,   0,   0,   0, 0, 0, 0, 0, 0, 0, 0, 0, 0};
  CHECK(refusal(foreign) == "not a gdl artifact (bad magic)");
  CHECK(refusal({'G', 'D'}).find("artifact is truncated") == 0);  // a prefix of the magic
  CHECK(refusal({}).find("artifact is truncated") == 0);
}

TEST_CASE("artifact: truncation at every cut point is refused without a crash") {
  const std::vector<uint8_t> file = serialize_artifact(sample_artifact());
  size_t refused = 0;
  for (size_t cut = 0; cut < file.size(); ++cut) {
    std::vector<uint8_t> part(file.begin(), file.begin() + static_cast<std::ptrdiff_t>(cut));
    std::string why = refusal(part);
    refused += why.find("artifact is truncated") == 0;
  }
  CHECK(refused == file.size());
}

TEST_CASE("artifact: hostile payloads with a valid checksum are refused, never crash") {
  const std::vector<uint8_t> file = serialize_artifact(sample_artifact());

  // Huge counts are capped by the bytes left, before anything is allocated.
  std::vector<uint8_t> huge = file;
  for (size_t i = 0; i < 4; ++i) huge[kHeaderBytes + i] = 0xff;
  reseal(huge);
  CHECK(refusal(huge) == "artifact payload is malformed: program name count 4294967295 exceeds the bytes left");

  // Every byte of the payload replaced by a few values, then resealed: the
  // decoder, ir::verify and check_plan must turn each into a value or a
  // DataLoss status. Many such edits are harmless (a name, a CUBIN byte).
  size_t refused = 0, edits = 0;
  for (size_t i = kHeaderBytes; i < file.size(); ++i) {
    for (uint8_t value : {uint8_t{0x00}, uint8_t{0xff}, static_cast<uint8_t>(file[i] + 1)}) {
      if (value == file[i]) continue;
      std::vector<uint8_t> bad = file;
      bad[i] = value;
      reseal(bad);
      ++edits;
      refused += !refusal(bad).empty();
    }
  }
  MESSAGE("resealed single-byte edits: " << edits << ", refused: " << refused);
  CHECK(refused > edits / 4);

  // Cutting the payload and resealing: the decoder itself finds the end.
  for (size_t cut = kHeaderBytes; cut < file.size(); ++cut) {
    std::vector<uint8_t> part(file.begin(), file.begin() + static_cast<std::ptrdiff_t>(cut));
    reseal(part);
    std::string why = refusal(part);
    CHECK(!why.empty());
  }
}

TEST_CASE("artifact: an invalid graph, an unsound plan or a missing kernel is refused") {
  {
    Artifact a = sample_artifact();
    a.plan.graph.nodes[3].type.shape.pop_back();  // the matmul's type no longer follows from its arguments
    CHECK(refusal(serialize_artifact(a)).find("artifact holds an invalid graph: %3 matmul") == 0);
  }
  {
    Artifact a = sample_artifact();
    const plan::Step& first = a.plan.steps[0];
    const plan::Step& second = a.plan.steps[1];
    a.plan.buffers[static_cast<size_t>(second.result)] = a.plan.buffers[static_cast<size_t>(first.result)];
    CHECK(refusal(serialize_artifact(a)).find("artifact holds an unsound plan: ") == 0);
  }
  {
    Artifact a = sample_artifact();
    a.kernels.pop_back();
    CHECK(refusal(serialize_artifact(a)).find("kernels for") != std::string::npos);
  }
  {
    Artifact a = sample_artifact();
    a.kernels[1].scalars_used = {3};
    CHECK(refusal(serialize_artifact(a)) ==
          "artifact payload is malformed: kernel 1 uses scalar #3, which does not exist");
  }
  {
    Artifact a = sample_artifact();
    a.kernels[1].large.rows_limit = 0;  // every run would take the large kernel: not what codegen writes
    CHECK(refusal(serialize_artifact(a)) == "artifact payload is malformed: kernel 1 has an impossible large kernel");
  }
  {
    Artifact a = sample_artifact();
    a.plan.graph.nodes[1].type.shape[0].extent = int64_t{1} << 40;
    CHECK(refusal(serialize_artifact(a)).find("extent 1099511627776 is out of range") != std::string::npos);
  }
}

}  // namespace
}  // namespace gdl
