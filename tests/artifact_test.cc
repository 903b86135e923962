// The .gdlx artifact: exact round trips, and refusal (never a crash) of
// corrupt, truncated, foreign, outdated or hostile files.
#include <doctest/doctest.h>

#include <cstdio>
#include <filesystem>
#include <fstream>
#include <functional>
#include <random>

#include <unistd.h>

#include "artifact.h"
#include "codegen/codegen.h"
#include "cpu_program.h"
#include "ir_builder.h"
#include "passes/ir_print.h"
#include "passes/ir_verify.h"
#include "pipeline.h"
#include "plan/check.h"
#include "stand_in_module.h"

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
  b.g.target = {114, 200 * 1024};  // not the default: the round trip keeps it
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

// A kernel table that uses every field: a kernel per step, a large kernel
// for step 1 (rows above 16), and a cooperative kernel of steps 0-1 with a
// tensor map over w, chosen first by both steps.
Artifact sample_artifact() {
  Artifact a;
  a.plan = plan_program(sample_graph());
  REQUIRE(plan::check_plan(a.plan) == "");
  KernelTable& t = a.kernels;
  t.step_choices.resize(a.plan.steps.size());
  for (size_t i = 0; i < a.plan.steps.size(); ++i) {
    Kernel k;
    k.symbol = "gdl_step" + std::to_string(i);
    k.first_step = k.last_step = static_cast<int>(i);
    k.launch.work = a.plan.graph.node(a.plan.steps[i].result).type.shape;
    k.launch.items_per_block = 64 + static_cast<int64_t>(i);
    k.launch.grid_y = 1 + static_cast<uint32_t>(i % 3);
    k.launch.block = 128;
    k.launch.shared_bytes = static_cast<uint32_t>(i * 512);
    if (i % 2) k.scalars_used = {0};
    k.offsets = {a.plan.buffers[static_cast<size_t>(a.plan.steps[i].result)].offset, 8 * i};
    k.depends_on_dims = i % 2 == 0;
    k.early_start = i % 3 == 0;
    if (i == 1) {  // rows above 16 take a large kernel
      Kernel large = k;
      large.symbol = k.symbol + "_tiled";
      large.launch.items_per_block = 64;
      large.launch.grid_y = 40;
      large.launch.block = 256;
      large.rows = k.launch.work;
      if (!large.rows.empty()) large.rows.pop_back();
      large.min_rows = 17;
      t.step_choices[i].push_back(static_cast<int>(t.kernels.size()));
      t.kernels.push_back(large);
    }
    t.step_choices[i].push_back(static_cast<int>(t.kernels.size()));
    t.kernels.push_back(k);
  }
  Kernel both;
  both.symbol = "gdl_steps01";
  both.first_step = 0;
  both.last_step = 1;
  both.launch.work = {Dim::constant(4)};
  both.launch.items_per_block = 1;
  both.launch.grid_y = 2;
  both.launch.block = 288;
  both.launch.shared_bytes = 4096;
  both.rows = a.plan.graph.node(a.plan.steps[1].result).type.shape;
  both.rows.pop_back();
  both.max_rows = 8;
  both.scalars_used = {0};
  both.depends_on_dims = true;
  both.cooperative = true;
  TensorMap m;  // over w: f16[8, 4], in 128 bytes of scratch added for it
  m.scratch_offset = a.plan.arena_bytes + a.plan.scratch_bytes;
  a.plan.scratch_bytes += 256;
  m.params_offset = a.plan.buffers[1].offset;
  m.element_bytes = 2;
  m.columns = 4;
  m.rows = 8;
  m.row_stride_bytes = 16;
  m.box_columns = 4;
  m.box_rows = 8;
  m.swizzle_bytes = 0;
  both.tensor_maps = {m};
  for (int s : {0, 1}) t.step_choices[static_cast<size_t>(s)].insert(t.step_choices[static_cast<size_t>(s)].begin(),
                                                                      static_cast<int>(t.kernels.size()));
  t.kernels.push_back(both);
  a.module = stand_in_module(t, ".version 9.0\n.target sm_90\n.address_size 64\n");
  std::mt19937 rng(42);
  a.module.units[0].cubin = {0x7f, 'E', 'L', 'F'};
  for (int i = 0; i < 300; ++i) a.module.units[0].cubin.push_back(static_cast<uint8_t>(rng()));
  a.module.units.push_back(ModuleUnit{{"gdl_other_unit"}, {}, "// a second unit, PTX only\n"});
  a.module.nvrtc_major = 13;
  a.module.nvrtc_minor = 0;
  a.module.from_cache = true;
  a.module.compile_ms = 72.25;
  a.cuda_source = "extern \"C\" __global__ void gdl_step0(unsigned char* arena) {}\n";
  return a;
}

void check_same_graph(const ir::Graph& x, const ir::Graph& y) {
  CHECK(x.program_name == y.program_name);
  CHECK(x.target == y.target);
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
    CHECK(x.plan.buffers[i].terms == y.plan.buffers[i].terms);
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
  REQUIRE(x.kernels.kernels.size() == y.kernels.kernels.size());
  for (size_t i = 0; i < x.kernels.kernels.size(); ++i) {
    const Kernel &a = x.kernels.kernels[i], &b = y.kernels.kernels[i];
    CHECK(a.symbol == b.symbol);
    CHECK(a.offsets == b.offsets);
    CHECK(a.launch.work == b.launch.work);
    CHECK(a.launch.items_per_block == b.launch.items_per_block);
    CHECK(a.launch.grid_y == b.launch.grid_y);
    CHECK(a.launch.block == b.launch.block);
    CHECK(a.launch.shared_bytes == b.launch.shared_bytes);
    CHECK(a.first_step == b.first_step);
    CHECK(a.last_step == b.last_step);
    CHECK(a.rows == b.rows);
    CHECK(a.min_rows == b.min_rows);
    CHECK(a.max_rows == b.max_rows);
    CHECK(a.scalars_used == b.scalars_used);
    CHECK(a.depends_on_dims == b.depends_on_dims);
    CHECK(a.early_start == b.early_start);
    CHECK(a.cooperative == b.cooperative);
    REQUIRE(a.tensor_maps.size() == b.tensor_maps.size());
    for (size_t j = 0; j < a.tensor_maps.size(); ++j) {
      const TensorMap &p = a.tensor_maps[j], &q = b.tensor_maps[j];
      CHECK(p.scratch_offset == q.scratch_offset);
      CHECK(p.params_offset == q.params_offset);
      CHECK(p.element_bytes == q.element_bytes);
      CHECK(p.columns == q.columns);
      CHECK(p.rows == q.rows);
      CHECK(p.row_stride_bytes == q.row_stride_bytes);
      CHECK(p.box_columns == q.box_columns);
      CHECK(p.box_rows == q.box_rows);
      CHECK(p.swizzle_bytes == q.swizzle_bytes);
    }
  }
  CHECK(x.kernels.step_choices == y.kernels.step_choices);
  CHECK(x.kernels.step_choices.at(1).size() == 3);  // the kernel of steps 0-1, the large kernel, its own
  for (size_t i = 0; i < x.plan.graph.dims.size(); ++i) CHECK(x.plan.graph.dims[i].padding_blocker == y.plan.graph.dims[i].padding_blocker);
  REQUIRE(x.plan.chains.size() == y.plan.chains.size());
  CHECK(x.module.arch == y.module.arch);
  CHECK(x.module.units == y.module.units);
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

// The plan of a program whose slices are views behind a run-time axis
// (x[1] at 32 * T bytes into x, x[2] at 64 * T), its real kernel table and
// a stand-in module image (never loaded).
Artifact dynamic_view_artifact() {
  Artifact a;
  a.plan = plan_program(test_programs::compile_text(
      "program dv;\ndim T in [1, 64];\ninput x : f32[3, T, 8];\ninput w : f32[8, 8];\noutput y : f32[T, 8];\n"
      "y = x[1] @ w + x[2];\n"));
  REQUIRE(plan::check_plan(a.plan) == "");
  a.kernels = generate_cuda(a.plan).kernels;
  a.module = stand_in_module(a.kernels);
  return a;
}

// The value whose buffer has offset terms, first in value order.
size_t first_moving_view(const Artifact& a) {
  for (size_t v = 0; v < a.plan.buffers.size(); ++v)
    if (!a.plan.buffers[v].terms.empty()) return v;
  FAIL("the plan has no view with offset terms");
  return 0;
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

// The process group travels with the graph, and a collective step's NCCL
// call with the kernel table; a call that does not fit its step, its
// program or its values is refused.
TEST_CASE("artifact: the process group and the collectives' calls round trip; malformed calls are refused") {
  Artifact a;
  a.plan = plan_program(test_programs::compile_text(
      "program tp;\ngroup world ranks(4);\ninput x : f32[2, 8];\noutput s : f32[2, 8];\noutput g : f32[8, 8];\n"
      "s = all_reduce(x * 2.0);\ng = all_gather(x);\n"));
  GeneratedCode code = generate_cuda(a.plan, "sm_90");
  a.kernels = code.kernels;
  a.cuda_source = code.source;
  a.module = stand_in_module(a.kernels);
  Expected<Artifact> back = deserialize_artifact(serialize_artifact(a));
  REQUIRE_MESSAGE(back.ok(), back.status().message());
  CHECK(back->plan.graph.group == a.plan.graph.group);
  CHECK(back->plan.graph.group.ranks == 4);
  size_t call = a.kernels.kernels.size();
  for (size_t k = 0; k < a.kernels.kernels.size(); ++k) {
    CHECK(back->kernels.kernels[k].collective == a.kernels.kernels[k].collective);
    if (a.kernels.kernels[k].is_collective() && call == a.kernels.kernels.size()) call = k;
  }
  REQUIRE(call < a.kernels.kernels.size());
  const auto refused = [&](const std::function<void(Artifact&)>& spoil, const std::string& why) {
    Artifact bad = a;
    spoil(bad);
    Expected<Artifact> read = deserialize_artifact(serialize_artifact(bad));
    REQUIRE_FALSE(read.ok());
    CHECK(read.status().code() == StatusCode::kDataLoss);
    CHECK_MESSAGE(read.status().message().find(why) != std::string::npos, read.status().message());
  };
  refused([&](Artifact& b) { b.kernels.kernels[call].collective = 0; }, "names a value that is no collective");
  refused([&](Artifact& b) { b.kernels.kernels[call].collective = 1 << 20; }, "names a value that does not exist");
  refused([&](Artifact& b) { b.kernels.kernels[call].symbol = "gdl_fake"; }, "has the fields of a kernel");
  refused([&](Artifact& b) { b.kernels.kernels[call].cooperative = true; }, "has the fields of a kernel");
  refused([&](Artifact& b) { b.kernels.kernels[call].launch.grid_y = 7; }, "has the fields of a kernel");
  refused([&](Artifact& b) { b.kernels.kernels[call].first_step = b.kernels.kernels[call].last_step = 1 << 20; },
          "is not the whole of its step");
  refused([&](Artifact& b) { b.plan.graph.group.ranks = 0; }, "runs in a program without a process group");
  refused([&](Artifact& b) { b.plan.graph.group.ranks = 3; }, "moves parts that do not fit");  // the gather's 8 rows
  refused([&](Artifact& b) { b.kernels.kernels[call].collective = -1; }, "has no symbol");
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

TEST_CASE("artifact: a path that is not a regular file is refused, never replaced or read whole") {
  namespace fs = std::filesystem;
  const fs::path dir = fs::temp_directory_path() / ("gdl_artifact_paths_" + std::to_string(::getpid()));
  fs::create_directories(dir);
  const Artifact a = sample_artifact();

  // Writing: the rename would replace a device or a link with a regular file.
  Status to_null = write_artifact("/dev/null", a);
  CHECK(to_null.code() == StatusCode::kInvalidArgument);
  CHECK(to_null.message().find("not a regular file") != std::string::npos);
  CHECK(fs::is_character_file("/dev/null"));
  const fs::path target = dir / "target.gdlx", link = dir / "link.gdlx";
  { std::ofstream(target) << "keep"; }
  fs::create_symlink(target, link);
  CHECK(write_artifact(link.string(), a).code() == StatusCode::kInvalidArgument);
  CHECK(fs::is_symlink(link));
  fs::create_symlink(target, dir / "out.gdlx.tmp");  // a link in the temporary file's place
  CHECK(write_artifact((dir / "out.gdlx").string(), a).code() == StatusCode::kInvalidArgument);
  std::ifstream kept(target);
  std::string text;
  kept >> text;
  CHECK(text == "keep");
  CHECK(write_artifact(dir.string(), a).code() == StatusCode::kInvalidArgument);  // a directory

  // Reading: checked by its kind, size and magic before the payload is read.
  for (const char* device : {"/dev/zero", "/dev/null"}) {
    Expected<Artifact> r = read_artifact(device);
    CHECK(r.status().code() == StatusCode::kInvalidArgument);
    CHECK(r.status().message().find("not a regular file") != std::string::npos);
  }
  CHECK(read_artifact(dir.string()).status().code() != StatusCode::kOk);
  const fs::path big = dir / "big.gdlx";  // 1 GiB of zeros, sparse: only its first bytes are read
  { std::ofstream(big) << "not an artifact"; }
  fs::resize_file(big, uint64_t{1} << 30);
  Expected<Artifact> r = read_artifact(big.string());
  CHECK(r.status().code() == StatusCode::kDataLoss);
  CHECK(r.status().message().find("bad magic") != std::string::npos);
  fs::remove_all(dir);
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
  // decoder and verify_artifact must turn each into a value or a DataLoss
  // status. Many such edits are harmless (a name, a CUBIN byte).
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

TEST_CASE("artifact: a view's offset terms round trip; a corrupt term is refused") {
  const Artifact a = dynamic_view_artifact();
  const size_t view = first_moving_view(a);
  CHECK(a.plan.buffers[view].terms == std::vector<plan::OffsetTerm>{{32, {0}}});
  Expected<Artifact> back = deserialize_artifact(serialize_artifact(a));
  REQUIRE_MESSAGE(back.ok(), back.status().message());
  for (size_t v = 0; v < a.plan.buffers.size(); ++v) CHECK(back->plan.buffers[v] == a.plan.buffers[v]);

  auto refused_because = [&](const std::function<void(Artifact&)>& edit) {
    Artifact bad = a;
    edit(bad);
    return refusal(serialize_artifact(bad));
  };
  auto term = [&](Artifact& b) -> plan::OffsetTerm& { return b.plan.buffers[view].terms[0]; };
  CHECK(refused_because([&](Artifact& b) { term(b).dims = {1}; }) ==
        "artifact payload is malformed: an offset term names run-time dim 1, which does not exist");
  CHECK(refused_because([&](Artifact& b) { term(b).dims = {-1}; }).find("names run-time dim -1") != std::string::npos);
  CHECK(refused_because([&](Artifact& b) { term(b).coef = 64; })
            .find("does not lie where its elements are in the buffer of") != std::string::npos);
  CHECK(refused_because([&](Artifact& b) { term(b).coef = 34; }).find("is not aligned to 4") != std::string::npos);
  CHECK(refused_because([&](Artifact& b) { term(b).coef = uint64_t{1} << 62; })
            .find("too large at the dims' upper bounds") != std::string::npos);
  CHECK(refused_because([&](Artifact& b) { term(b).coef = ~uint64_t{0}; })
            .find("too large at the dims' upper bounds") != std::string::npos);
  CHECK(refused_because([&](Artifact& b) { term(b).dims = {0, 0}; })  // 32 * T * T: past the arena at T = 64
            .find("(its highest offset) lies outside its region") != std::string::npos);
  CHECK(refused_because([&](Artifact& b) { b.plan.buffers[view].terms.clear(); })
            .find("does not lie where its elements are") != std::string::npos);
  CHECK(refused_because([&](Artifact& b) {
          const ir::ValueId x = b.plan.graph.leaves(Op::kInput).at(0);
          b.plan.buffers[static_cast<size_t>(x)].terms = {{256, {0}}};
        }).find("owns its buffer, but its offset has run-time terms") != std::string::npos);
}

TEST_CASE("artifact: an invalid graph, an unsound plan or a kernel table that does not fit is refused") {
  {
    Artifact a = sample_artifact();
    a.plan.graph.nodes[2].name = "x";  // two leaves named x
    CHECK(refusal(serialize_artifact(a)).find("artifact holds an invalid graph: %2 scalar: leaf name \"x\" is declared twice") == 0);
  }
  {
    Artifact a = sample_artifact();
    const plan::Step& first = a.plan.steps[0];
    const plan::Step& second = a.plan.steps[1];
    a.plan.buffers[static_cast<size_t>(second.result)] = a.plan.buffers[static_cast<size_t>(first.result)];
    CHECK(refusal(serialize_artifact(a)).find("artifact holds an unsound plan: ") == 0);
  }
  auto refused_because = [](const Artifact& a) { return refusal(serialize_artifact(a)); };
  {
    Artifact a = sample_artifact();
    a.kernels.step_choices.pop_back();
    CHECK(refused_because(a).find("kernel choices for") != std::string::npos);
  }
  {
    Artifact a = sample_artifact();
    a.kernels.kernels[2].scalars_used = {3};
    CHECK(refused_because(a) == "artifact kernel 2 ('gdl_step1') uses a scalar that does not exist");
  }
  {
    Artifact a = sample_artifact();
    a.kernels.step_choices[1].pop_back();  // step 1's last choice is its large kernel, which applies only above 16 rows
    CHECK(refused_because(a).find("step 1's last kernel choice ('gdl_step1_tiled') does not run it at every binding") !=
          std::string::npos);
  }
  {
    Artifact a = sample_artifact();
    std::swap(a.kernels.step_choices[1][1], a.kernels.step_choices[1][0]);  // step 1 reaches the kernel of 0-1 later than step 0
    CHECK(refused_because(a).find("reaches kernel 'gdl_steps01' through other choices") != std::string::npos);
  }
  {
    Artifact a = sample_artifact();
    a.kernels.step_choices[1].erase(a.kernels.step_choices[1].begin());  // the kernel of steps 0-1 computes step 1
    CHECK(refused_because(a).find("computes step 1, which never chooses it") != std::string::npos);
  }
  {
    Artifact a = sample_artifact();
    a.kernels.kernels.back().tensor_maps[0].scratch_offset = 0;  // over the arena's values
    CHECK(refused_because(a).find("puts a tensor map outside the scratch area") != std::string::npos);
  }
  {
    Artifact a = sample_artifact();
    a.kernels.kernels.back().tensor_maps[0].params_offset = a.plan.params_bytes;
    CHECK(refused_because(a).find("maps a tensor outside the params region") != std::string::npos);
  }
  {
    Artifact a = sample_artifact();
    a.kernels.kernels[0].min_rows = 9;
    a.kernels.kernels[0].max_rows = 8;
    CHECK(refused_because(a).find("has an empty rows range") != std::string::npos);
  }
  {
    Artifact a = sample_artifact();
    a.kernels.kernels[0].offsets.assign(kMaxKernelOffsets + 1, 0);
    CHECK(refused_because(a).find("has too many buffer offsets") != std::string::npos);
  }
  {
    Artifact a = sample_artifact();
    a.kernels.kernels[0].offsets[1] = std::max(a.plan.arena_bytes + a.plan.scratch_bytes, a.plan.params_bytes) + 1;
    CHECK(refused_because(a).find("has a buffer offset past the arena and the params") != std::string::npos);
  }
  {
    // Table entries may run one kernel of the module on their own offsets
    // (kernel_sharing.h), only with the launch shape its code was made for.
    Artifact a = sample_artifact();
    Kernel& first = a.kernels.kernels[0];
    Kernel& other = a.kernels.kernels.at(static_cast<size_t>(a.kernels.step_choices.at(2).back()));
    other.symbol = first.symbol;
    other.launch.grid_y = first.launch.grid_y;
    other.launch.shared_bytes = first.launch.shared_bytes;
    CHECK(refused_because(a) == "");
    Expected<Artifact> back = deserialize_artifact(serialize_artifact(a));
    REQUIRE(back.ok());
    CHECK(back->kernels.kernels[0].offsets != other.offsets);
    other.launch.shared_bytes += 16;
    CHECK(refused_because(a).find("shares its kernel with kernel 0 but not its launch") != std::string::npos);
  }
  {
    Artifact a = sample_artifact();
    a.plan.graph.nodes[1].type.shape[0].extent = int64_t{1} << 40;
    CHECK(refusal(serialize_artifact(a)).find("extent 1099511627776 is out of range") != std::string::npos);
  }
}

}  // namespace
}  // namespace gdl
