// Buckets without a GPU: which bucket serves a value, what padding costs,
// strided copies between packed and padded layouts, the masking rules of
// the interpreter's capacity mode (padding filled with NaN never reaches a
// valid result, and the valid rows equal the plain run exactly), which
// programs padding cannot serve, the policy each dim gets, and the errors
// for a dim out of range or a scalar that does not exist.
#include <doctest/doctest.h>
#include <unistd.h>

#include <cmath>
#include <filesystem>
#include <random>

#include "artifact.h"
#include "passes/padding.h"
#include "codegen/codegen.h"
#include "dynamic_program.h"
#include "gdl/gdl.h"
#include "gdl/jit.h"
#include "gdl/profile.h"
#include "gdl/testing.h"
#include "interp/interp.h"
#include "ir_builder.h"
#include "pipeline.h"
#include "plan.h"
#include "plan/check.h"
#include "strided_copy.h"
#include "stand_in_module.h"

namespace gdl {
namespace {

using testing::graph_of;

// Random non-zero values of both signs for every input and param, at `dims`.
Bindings random_bindings(const ir::Graph& g, const std::vector<int64_t>& dims, uint64_t seed) {
  std::mt19937_64 rng(seed);
  std::uniform_real_distribution<double> magnitude(0.1, 1.0);
  std::bernoulli_distribution sign(0.5);
  Bindings b;
  b.dims = dims;
  for (const ir::Node& n : g.nodes) {
    if (n.op != ir::Op::kInput && n.op != ir::Op::kParam) continue;
    HostTensor t;
    t.dtype = n.type.dtype;
    t.shape = concrete_shape(n.type.shape, dims);
    int64_t count = element_count(n.type.shape, dims);
    for (int64_t i = 0; i < count; ++i) {
      double v = n.type.dtype == DType::kI32 ? static_cast<double>(1 + (rng() % 9)) : magnitude(rng) * (sign(rng) ? 1 : -1);
      t.data.push_back(round_to_dtype(v, t.dtype));
    }
    b.tensors[n.name] = std::move(t);
  }
  return b;
}

bool has_nan(const HostTensor& t) {
  for (double v : t.data)
    if (std::isnan(v)) return true;
  return false;
}

// Runs `g` plainly at `valid` and in capacity mode at `capacity` with every
// padded input position NaN; the valid part of each capacity-mode output
// must equal the plain output exactly and hold no NaN.
void expect_capacity_mode_matches(const ir::Graph& g, const std::vector<int64_t>& valid,
                                  const std::vector<int64_t>& capacity, uint64_t seed) {
  INFO("valid " << valid[0] << ", capacity " << capacity[0]);
  Bindings plain = random_bindings(g, valid, seed);
  Expected<std::map<std::string, HostTensor>> want = interpret(g, plain);
  INFO(want.status().message());
  REQUIRE(want.ok());

  Bindings padded;
  padded.dims = capacity;
  padded.valid_dims = valid;
  padded.scalars = plain.scalars;
  for (const ir::Node& n : g.nodes)
    if (n.op == ir::Op::kInput || n.op == ir::Op::kParam)
      padded.tensors[n.name] = pad_to_capacity(plain.tensors.at(n.name), n.type.shape, capacity, std::nan(""));
  Expected<std::map<std::string, HostTensor>> got = interpret(g, padded);
  INFO(got.status().message());
  REQUIRE(got.ok());
  for (const ir::Output& o : g.outputs) {
    INFO("output " << o.name);
    const HostTensor& full = got->at(o.name);
    CHECK(full.shape == concrete_shape(g.node(o.value).type.shape, capacity));
    HostTensor part = valid_part(full, g.node(o.value).type.shape, valid);
    CHECK_FALSE(has_nan(part));
    CHECK(part.shape == want->at(o.name).shape);
    CHECK(part.data == want->at(o.name).data);
  }
}

// A Program over `text` without NVRTC: its real plan and kernel table, and
// a stand-in module image (introspection never loads it).
Program program_of(const std::string& text) {
  Artifact a;
  a.plan = plan_program(graph_of(text));
  a.kernels = generate_cuda(a.plan).kernels;
  a.module = stand_in_module(a.kernels);
  std::string path = (std::filesystem::temp_directory_path() / ("gdl_buckets_test_" + std::to_string(getpid()) + ".gdlx")).string();
  REQUIRE(write_artifact(path, a).ok());
  Expected<Program> p = Program::load(path);
  std::filesystem::remove(path);
  INFO(p.status().message());
  REQUIRE(p.ok());
  return std::move(p).value();
}

}  // namespace

TEST_CASE("buckets: the smallest bucket that holds a value, -1 outside the bounds") {
  DimInfo d{"B", 3, 64, {4, 8, 64}, DimPolicy::kBuckets};
  CHECK(bucket_for(d, 3) == 4);
  CHECK(bucket_for(d, 4) == 4);
  CHECK(bucket_for(d, 5) == 8);
  CHECK(bucket_for(d, 9) == 64);
  CHECK(bucket_for(d, 64) == 64);
  CHECK(bucket_for(d, 2) == -1);
  CHECK(bucket_for(d, 65) == -1);
  RuntimeDimInfo r{"B", 3, 64, {4, 8, 64}, false, ""};
  for (int64_t v = 0; v <= 70; ++v) CHECK(r.bucket_for(v) == bucket_for(d, v));

  // Default buckets: powers of two from the first one >= lo, then hi.
  ir::Graph g = graph_of("program p;\ndim B in [3, 50];\ninput x : f32[B];\noutput y : f32[B];\ny = x * 2.0;\n");
  CHECK(g.dims[0].buckets == std::vector<int64_t>{4, 8, 16, 32, 50});
  CHECK(bucket_for(g.dims[0], 33) == 50);
}

TEST_CASE("buckets: padding waste on a uniform distribution is plain arithmetic") {
  DimInfo d{"B", 1, 64, {1, 8, 64}, DimPolicy::kBuckets};
  PaddingWaste w = uniform_padding_waste(d);
  CHECK(w.rows_computed == 1 + 7 * 8 + 56 * 64);
  CHECK(w.rows_valid == 64 * 65 / 2);
  CHECK(w.waste() == doctest::Approx(1.0 - 2080.0 / 3641.0));
  DimInfo every{"B", 1, 8, {1, 2, 3, 4, 5, 6, 7, 8}, DimPolicy::kBuckets};
  CHECK(uniform_padding_waste(every).waste() == 0);
  DimInfo one{"B", 1, 64, {64}, DimPolicy::kBuckets};
  CHECK(uniform_padding_waste(one).waste() == doctest::Approx(1.0 - 2080.0 / 4096.0));
  // Powers of two waste less than one bucket, more than every value its own.
  DimInfo powers{"B", 1, 64, {1, 2, 4, 8, 16, 32, 64}, DimPolicy::kBuckets};
  CHECK(uniform_padding_waste(powers).waste() < uniform_padding_waste(d).waste());
  CHECK(uniform_padding_waste(powers).waste() > 0);
}

TEST_CASE("buckets: strided copy pieces between packed and padded layouts") {
  // A padded leading dim: one contiguous piece.
  std::vector<rt::CopyPiece> lead = rt::strided_copy_pieces({3, 5}, {3, 5}, {8, 5}, 2);
  REQUIRE(lead.size() == 1);
  CHECK(lead[0].width == 30);
  CHECK(lead[0].height == 1);
  // A padded inner dim: one 2D piece of 4 rows of 3 elements, pitches 3 and 8.
  std::vector<rt::CopyPiece> inner = rt::strided_copy_pieces({4, 3}, {4, 3}, {4, 8}, 4);
  REQUIRE(inner.size() == 1);
  CHECK(inner[0].width == 12);
  CHECK(inner[0].height == 4);
  CHECK(inner[0].src_pitch == 12);
  CHECK(inner[0].dst_pitch == 32);
  // Two padded dims [B, NH, T, D]: one 2D piece per valid b.
  std::vector<rt::CopyPiece> two = rt::strided_copy_pieces({2, 3, 5, 4}, {2, 3, 5, 4}, {4, 3, 8, 4}, 1);
  REQUIRE(two.size() == 2);
  CHECK(two[1].dst == 3 * 8 * 4);
  CHECK(two[1].src == 3 * 5 * 4);
  CHECK(two[0].height == 3);
  CHECK(two[0].width == 20);
  // Nothing padded: one piece of everything; reversed (padded -> packed) too.
  CHECK(rt::strided_copy_pieces({2, 3}, {2, 3}, {2, 3}, 4).size() == 1);
  std::vector<rt::CopyPiece> back = rt::strided_copy_pieces({4, 3}, {4, 8}, {4, 3}, 4);
  REQUIRE(back.size() == 1);
  CHECK(back[0].src_pitch == 32);
  CHECK(back[0].dst_pitch == 12);

  // pad_to_capacity and valid_part are inverses on the valid block.
  Shape s{Dim::constant(2), Dim::runtime(0), Dim::constant(3), Dim::runtime(1)};
  HostTensor t{DType::kF32, {2, 3, 3, 2}, {}};
  for (int i = 0; i < 36; ++i) t.data.push_back(i + 1);
  HostTensor padded = pad_to_capacity(t, s, {5, 4}, -7.0);
  CHECK(padded.shape == std::vector<int64_t>{2, 5, 3, 4});
  CHECK(padded.data[1] == 2);   // (0, 0, 0, 1)
  CHECK(padded.data[2] == -7);  // (0, 0, 0, 2): padding
  CHECK(padded.data[4] == 3);   // (0, 0, 1, 0)
  HostTensor back_t = valid_part(padded, s, {3, 2});
  CHECK(back_t.shape == t.shape);
  CHECK(back_t.data == t.data);
}

TEST_CASE("buckets: capacity mode masks reductions over a padded dim") {
  ir::Graph g = graph_of(R"(program r;
dim B in [1, 16];
input x : f32[B, 6];
input xt : f32[5, B];
output s0 : f32[6];
output m0 : f32[6];
output x0 : f32[6];
output s1 : f32[5];
output m1 : f32[5];
output x1 : f32[5];
output rows : f32[B];
s0 = sum(x, axis = 0);
m0 = mean(x, axis = 0);
x0 = max(x, axis = 0);
s1 = sum(xt, axis = 1);
m1 = mean(xt, axis = -1);
x1 = max(xt, axis = 1);
rows = sum(x, axis = 1);
)");
  for (auto [valid, capacity] : {std::pair<int64_t, int64_t>{3, 4}, {5, 16}, {1, 8}, {16, 16}, {9, 16}})
    expect_capacity_mode_matches(g, {valid}, {capacity}, 10 + valid);
}

TEST_CASE("buckets: capacity mode masks reductions over several axes, argmax, topk; cumsum, arange, one_hot need no mask") {
  ir::Graph g = graph_of(R"(program n;
dim B in [1, 16];
dim T in [3, 16];
input x : f32[B, 6];
input xt : f32[5, B];
input x3 : f32[3, B, 4];
input y : f32[4, T];
input ids : i32[B];
output s12 : f32[3];
output m01 : f32[4];
output all : f32;
output n01 : f32[1, 1];
output a0 : i32[6];
output a1 : i32[5];
output am : i32[3, 4];
output tv : f32[4, 3];
output ti : i32[2, 4];
output c0 : f32[B, 6];
output c1 : f32[5, B];
output r : i32[B];
output h : f32[B, 7];
s12 = sum(x3, axis = [1, 2]);
m01 = max(x3, axis = [0, 1]);
all = mean(x3, axis = [0, 1, 2]);
n01 = min(xt, axis = [0, 1], keepdims = true);
a0 = argmax(x, axis = 0);
a1 = argmin(xt);
am = argmax(x3, axis = 1);
tv = topk_values(y, 3);
ti = topk_indices(transpose(y), 2, axis = 0);
c0 = cumsum(x, axis = 0);
c1 = cumsum(xt);
r = arange(B);
h = one_hot(ids, 7);
)");
  for (auto [b, t] : {std::pair<int64_t, int64_t>{1, 3}, {3, 5}, {5, 16}, {16, 9}, {9, 4}})
    expect_capacity_mode_matches(g, {b, t}, {bucket_for(g.dims[0], b), bucket_for(g.dims[1], t)}, 40 + b);

  // The kernels that combine along B or T read its valid count; NVRTC compiles them all.
  plan::Plan p = plan_program(g);
  REQUIRE(plan::check_plan(p) == "");
  GeneratedCode code = generate_cuda(p);
  auto reads_valid = [&](const std::string& output, int dim) {
    for (const ir::Output& o : p.graph.outputs)
      if (o.name == output)
        for (size_t s = 0; s < p.steps.size(); ++s)
          if (p.steps[s].result == o.value) {
            const Kernel& own = code.kernels.kernels[static_cast<size_t>(code.kernels.step_choices[s].back())];
            const size_t at = code.source.find(" " + own.symbol + "(unsigned char* arena");
            REQUIRE(at != std::string::npos);
            const std::string text = code.source.substr(at, code.source.find("\n}\n", at) - at);
            return text.find("gdl::valid_dim(arena, " + std::to_string(plan::kValidDimsOffset) + "ull, " +
                             std::to_string(dim) + ")") != std::string::npos;
          }
    FAIL("no step computes " << output);
    return false;
  };
  for (const char* o : {"s12", "m01", "all", "n01", "a0", "a1", "am"}) CHECK_MESSAGE(reads_valid(o, 0), o);
  for (const char* o : {"tv", "ti"}) CHECK_MESSAGE(reads_valid(o, 1), o);
  for (const char* o : {"c0", "c1", "r", "h"}) CHECK_MESSAGE(!reads_valid(o, 0), o);
  CompileOptions options;
  options.arch = "sm_90";
  options.cache_dir = "-";
  Expected<CompiledModule> module = compile_cuda(code.source, options);
  INFO(code.source);
  INFO(module.status().message());
  REQUIRE(module.ok());
}

TEST_CASE("buckets: capacity mode masks softmax and norms over a padded dim") {
  ir::Graph g = graph_of(R"(program s;
dim B in [1, 32];
input x : f32[B, 7];
input w : f32[B];
output p0 : f32[B, 7];
output p1 : f32[7, B];
output n0 : f32[7, B];
output n1 : f32[7, B];
let t = transpose(x);
p0 = softmax(x, axis = 0);
p1 = softmax(t, axis = -1);
n0 = layernorm(t, weight = w, bias = w);
n1 = rmsnorm(t);
)");
  for (auto [valid, capacity] : {std::pair<int64_t, int64_t>{3, 4}, {7, 32}, {1, 2}, {32, 32}})
    expect_capacity_mode_matches(g, {valid}, {capacity}, 20 + valid);
}

TEST_CASE("buckets: capacity mode masks a matmul contracting over a padded dim") {
  ir::Graph g = graph_of(R"(program m;
dim B in [1, 24];
input x : f32[B, 9];
input y : f32[B, 5];
param w : f32[9, 5];
output g : f32[9, 5];
output h : f32[B, 5];
output c : f32[B, B];
g = transpose(x) @ y;
h = x @ w;
c = x @ transpose(x);
)");
  for (auto [valid, capacity] : {std::pair<int64_t, int64_t>{3, 4}, {10, 24}, {1, 16}, {24, 24}})
    expect_capacity_mode_matches(g, {valid}, {capacity}, 30 + valid);
}

// A ragged batch over padded tokens and sequences: a token whose sequence
// id points into the table's padding rows gets a zero row, as it does past
// the table's end in a plain run; padded tokens read nothing.
TEST_CASE("buckets: capacity mode keeps a ragged batch's tokens to the valid rows of a padded block table") {
  ir::Graph g = graph_of(R"(program r;
dim T in [1, 16];
dim S in [1, 4];
input q : f32[T, 4, 8];
input k_pool : f32[6, 2, 4, 8];
input v_pool : f32[6, 2, 4, 8];
input tables : i32[S, 3];
input seq : i32[T];
input len : i32[T];
output o : f32[T, 4, 8];
o = paged_attention(q, k_pool, v_pool, len, tables, sequence = seq);
)");
  const std::vector<int64_t> valid = {5, 2}, capacity = {8, 4};
  Bindings plain = random_bindings(g, valid, 77);
  plain.tensors["tables"].data = {3, 0, 5, 1, 4, 2};
  plain.tensors["seq"].data = {0, 1, 2, 3, 1};  // 2 and 3: rows of the padded table, none of the plain one
  plain.tensors["len"].data = {12, 5, 9, 3, 7};
  Expected<std::map<std::string, HostTensor>> want = interpret(g, plain);
  REQUIRE(want.ok());
  Bindings padded;
  padded.dims = capacity;
  padded.valid_dims = valid;
  for (const ir::Node& n : g.nodes)
    if (n.op == ir::Op::kInput)
      padded.tensors[n.name] = pad_to_capacity(plain.tensors.at(n.name), n.type.shape, capacity, 1.0);  // id 1 in padding
  Expected<std::map<std::string, HostTensor>> got = interpret(g, padded);
  REQUIRE(got.ok());
  HostTensor part = valid_part(got->at("o"), g.node(g.outputs[0].value).type.shape, valid);
  CHECK(part.data == want->at("o").data);
  for (int64_t token : {2, 3})
    for (int64_t i = 0; i < 32; ++i) CHECK(part.data[static_cast<size_t>(token * 32 + i)] == 0.0);
}

TEST_CASE("buckets: capacity mode clamps attention to the valid positions of a padded T") {
  ir::Graph g = graph_of(R"(program a;
dim T in [1, 40];
input q : f32[2, 8];
input k : f32[2, T, 8];
input v : f32[2, T, 4];
input len : i32;
output o : f32[2, 4];
o = attention(q, k, v, len);
)");
  for (auto [valid, capacity] : {std::pair<int64_t, int64_t>{3, 4}, {9, 16}, {40, 40}}) {
    // len below, at and above the valid T (above: clamped to it).
    for (int64_t len : {int64_t{1}, valid, valid + 5}) {
      INFO("len " << len);
      Bindings plain = random_bindings(g, {valid}, 40 + valid);
      plain.tensors["len"].data = {static_cast<double>(len)};
      Expected<std::map<std::string, HostTensor>> want = interpret(g, plain);
      REQUIRE(want.ok());
      Bindings padded;
      padded.dims = {capacity};
      padded.valid_dims = {valid};
      for (const ir::Node& n : g.nodes)
        if (n.op == ir::Op::kInput)
          padded.tensors[n.name] = pad_to_capacity(plain.tensors.at(n.name), n.type.shape, {capacity}, std::nan(""));
      Expected<std::map<std::string, HostTensor>> got = interpret(g, padded);
      REQUIRE(got.ok());
      CHECK_FALSE(has_nan(got->at("o")));
      CHECK(got->at("o").data == want->at("o").data);
    }
  }
}

TEST_CASE("buckets: capacity mode on the dynamic test's program (layernorm, matmul, gelu, reductions, softmax)") {
  ir::Graph g = graph_of(testing::kDynamicProgram);
  for (int64_t valid : {1, 3, 4, 5, 16, 17, 33, 48}) expect_capacity_mode_matches(g, {valid}, {bucket_for(g.dims[0], valid)}, valid);
}

TEST_CASE("buckets: padding cannot serve a dim that a reshape moves, and serves one that a gather indexes") {
  ir::Graph moved = graph_of(R"(program p;
dim B in [1, 8];
input x : f32[2, B];
output y : f32[B, 2];
y = reshape(x, [B, 2]);
)");
  std::vector<std::string> why = padding_blockers(moved);
  REQUIRE(why.size() == 1);
  CHECK(why[0].find("reshape") != std::string::npos);
  CHECK(why[0].find("moves dim B") != std::string::npos);
  // Padding it would be wrong: capacity mode refuses; unpadded it runs.
  Bindings b = random_bindings(moved, {4}, 1);
  b.valid_dims = {3};
  CHECK(interpret(moved, b).status().code() == StatusCode::kFailedPrecondition);
  b.valid_dims = {4};
  CHECK(interpret(moved, b).ok());

  ir::Graph kept = graph_of(R"(program p;
dim B in [1, 8];
input x : f32[B, 4, 6];
output y : f32[B, 24];
output z : f32[B, 6];
y = reshape(x, [B, 24]);
z = sum(reshape(y, [B, 4, 6]), axis = 1);
)");
  CHECK(padding_blockers(kept) == std::vector<std::string>{""});
  expect_capacity_mode_matches(kept, {5}, {8}, 3);

  // Along an axis that is the dim, ids are bounded by its valid count: an id
  // into the padded rows (ids 1 to 9 here, 5 rows valid of 8) reads zero, as
  // past the end of the unpadded run.
  for (std::string body : {"input t : f32[V, 4];\ninput ids : i32[3];\noutput y : f32[3, 4];\ny = gather(t, ids);\n",
                           "input t : f32[3, V];\ninput ids : i32[3, 2];\noutput y : f32[3, 2];\n"
                           "y = take_along_axis(t, ids);\n"}) {
    ir::Graph indexed = graph_of("program p;\ndim V in [1, 16];\n" + body);
    CHECK(padding_blockers(indexed) == std::vector<std::string>{""});
    int into_padding = 0;
    for (uint64_t seed = 5; seed < 9; ++seed) {
      expect_capacity_mode_matches(indexed, {5}, {8}, seed);
      const Bindings drawn = random_bindings(indexed, {5}, seed);
      for (double id : drawn.tensors.at("ids").data) into_padding += id >= 5 && id < 8;
    }
    CHECK(into_padding > 0);  // the case the bound is for was drawn
  }

  // Off the indexed axis, padding serves: capacity mode equals the plain run.
  ir::Graph rows = graph_of(R"(program p;
dim B in [1, 16];
input x : f32[B, 7];
input index : i32[B, 3];
input table : f32[4, 6];
input ids : i32[B];
output y : f32[B, 3];
output z : f32[4, B];
y = take_along_axis(x, index);
z = gather(table, ids, axis = 1);
)");
  CHECK(padding_blockers(rows) == std::vector<std::string>{""});
  expect_capacity_mode_matches(rows, {5}, {8}, 4);
}

TEST_CASE("buckets: the policy of each dim: the program's, the session's, and updates where padding cannot serve") {
  Program p = program_of(R"(program pol;
dim B in [1, 16] buckets(4, 16);
dim T in [1, 32] policy(update);
dim M in [1, 8];
input x : f32[B, T];
input r : f32[2, M];
output y : f32[B, T];
output z : f32[M, 2];
y = x * 2.0;
z = reshape(r, [M, 2]);
)");
  REQUIRE(p.dims().size() == 3);
  CHECK(p.dims()[2].padding_blocker.find("reshape") != std::string::npos);
  CHECK(p.dims()[0].padding_blocker.empty());

  Expected<std::vector<DimServing>> declared = p.dim_serving();
  REQUIRE(declared.ok());
  CHECK_FALSE((*declared)[0].update);
  CHECK((*declared)[1].update);
  CHECK((*declared)[2].update);  // asked for buckets, but the reshape forbids padding
  CHECK((*declared)[2].why_update == p.dims()[2].padding_blocker);
  CHECK((*declared)[0].buckets == std::vector<int64_t>{4, 16});

  Expected<std::vector<DimServing>> all_update = p.dim_serving({.dim_policy = DimPolicyChoice::kUpdate});
  REQUIRE(all_update.ok());
  for (const DimServing& d : *all_update) CHECK(d.update);
  CHECK((*all_update)[2].why_update.empty());  // updates were asked for

  SessionOptions mixed;
  mixed.dim_policy = DimPolicyChoice::kBuckets;
  mixed.dim_policies["B"] = DimPolicyChoice::kUpdate;
  Expected<std::vector<DimServing>> per_dim = p.dim_serving(mixed);
  REQUIRE(per_dim.ok());
  CHECK((*per_dim)[0].update);
  CHECK_FALSE((*per_dim)[1].update);  // the session overrides policy(update)
  CHECK((*per_dim)[2].update);

  SessionOptions unknown;
  unknown.dim_policies["Q"] = DimPolicyChoice::kUpdate;
  Expected<std::vector<DimServing>> bad = p.dim_serving(unknown);
  CHECK(bad.status().code() == StatusCode::kNotFound);
  CHECK(bad.status().message().find("'Q'") != std::string::npos);

  // The plan reserves the valid-dims block for a program with run-time dims.
  CHECK(p.arena_bytes() >= plan::kValidDimsOffset + plan::kValidDimsBytes);
}

TEST_CASE("buckets: a dim out of range or a scalar that does not exist is an error before anything runs") {
  Program p = program_of(R"(program e;
dim B in [2, 16];
input x : f32[B, 3];
scalar alpha : f32 = 2.0;
output y : f32[B, 3];
y = x * alpha;
)");
  auto x_of = [](int64_t rows) {
    std::vector<double> v(static_cast<size_t>(rows * 3), 0.5);
    return TensorData{ElementType::kF32, {rows, 3}, encode_elements(ElementType::kF32, v)};
  };
  Expected<std::map<std::string, TensorData>> ok = jit::run_reference(p, {{"x", x_of(4)}}, {{"alpha", 3.0}});
  REQUIRE(ok.ok());
  CHECK(decode_elements(ElementType::kF32, ok->at("y").bytes.data(), 1)[0] == 1.5);
  CHECK(jit::run_reference(p, {{"x", x_of(17)}}).status().code() == StatusCode::kOutOfRange);
  CHECK(jit::run_reference(p, {{"x", x_of(1)}}).status().code() == StatusCode::kOutOfRange);
  Expected<std::map<std::string, TensorData>> no_scalar = jit::run_reference(p, {{"x", x_of(4)}}, {{"beta", 1.0}});
  CHECK(no_scalar.status().code() == StatusCode::kNotFound);
  CHECK(no_scalar.status().message().find("'beta'") != std::string::npos);
  CHECK(p.dims()[0].bucket_for(17) == -1);
  CHECK(p.dims()[0].bucket_for(1) == -1);

  // Capacity mode checks the valid dims too.
  ir::Graph g = graph_of("program c;\ndim B in [2, 16];\ninput x : f32[B];\noutput y : f32[B];\ny = x * 2.0;\n");
  Bindings b = random_bindings(g, {8}, 5);
  b.valid_dims = {9};
  CHECK(interpret(g, b).status().code() == StatusCode::kOutOfRange);
  b.valid_dims = {1};
  CHECK(interpret(g, b).status().code() == StatusCode::kOutOfRange);
  b.valid_dims = {8, 8};
  CHECK(interpret(g, b).status().code() == StatusCode::kInvalidArgument);
}

TEST_CASE("buckets: kernels that combine along a run-time axis read its valid count, and NVRTC compiles them") {
  ir::Graph g = graph_of(R"(program k;
dim B in [1, 32];
dim T in [1, 64];
input x : f16[B, 24];
input xt : f32[24, B];
input q : f16[4, 32];
input kc : f16[4, T, 32];
input vc : f16[4, T, 32];
input len : i32;
param w : f16[24, 8];
output a : f16[24];
output b : f32[24];
output c : f16[B, 24];
output d : f32[24, B];
output e : f32[24, B];
output f : f16[24, 8];
output h : f16[B, 8];
output o : f16[4, 32];
a = sum(x, axis = 0);
b = mean(xt, axis = 1);
c = softmax(x, axis = 0);
d = softmax(xt, axis = -1);
e = layernorm(xt);
f = transpose(x) @ x[:, 0:8];
h = x @ w;
o = attention(q, kc, vc, len);
)");
  plan::Plan p = plan_program(g);
  REQUIRE(plan::check_plan(p) == "");
  GeneratedCode code = generate_cuda(p);
  auto kernel_text = [&](ir::Op op) {
    for (size_t s = 0; s < p.steps.size(); ++s)
      if (p.graph.node(p.steps[s].values.front()).op == op) {
        const Kernel& own = code.kernels.kernels[static_cast<size_t>(code.kernels.step_choices[s].back())];
        std::string header = " " + own.symbol + "(unsigned char* arena";
        size_t at = code.source.find(header);
        REQUIRE(at != std::string::npos);
        return code.source.substr(at, code.source.find("\n}\n", at) - at);
      }
    FAIL("no step for " << ir::op_name(op));
    return std::string();
  };
  const std::string block = "gdl::valid_dim(arena, " + std::to_string(plan::kValidDimsOffset) + "ull, ";
  CHECK(kernel_text(ir::Op::kSum).find(block + "0)") != std::string::npos);
  CHECK(kernel_text(ir::Op::kMean).find(block + "0)") != std::string::npos);
  CHECK(kernel_text(ir::Op::kSoftmax).find(block + "0)") != std::string::npos);
  CHECK(kernel_text(ir::Op::kLayerNorm).find(block + "0)") != std::string::npos);
  CHECK(kernel_text(ir::Op::kMatMul).find(block + "0)") != std::string::npos);  // f: K is B
  CHECK(kernel_text(ir::Op::kAttention).find("gdl::ClampedLen<gdl::IntAt>{gdl::IntAt{") != std::string::npos);
  CHECK(kernel_text(ir::Op::kAttention).find(block + "1)") != std::string::npos);
  CHECK(kernel_text(ir::Op::kAttention).find("ValidRowsLen") == std::string::npos);  // its rows are not padded
  // Queries of a padded leading axis past its valid count get no positions,
  // whatever their (stale) lengths say: they read no k or v.
  ir::Graph rows = graph_of(R"(program r;
dim B in [1, 32];
input q : f16[B, 4, 32];
input kc : f16[B, 4, 40, 32];
input len : i32[B];
output o : f16[B, 4, 32];
o = attention(q, kc, kc, len);
)");
  CHECK(generate_cuda(plan_program(rows)).source.find("gdl::ValidRowsLen<gdl::IntPerRow>{gdl::IntPerRow{") !=
        std::string::npos);
  // A norm over a constant axis needs no valid count.
  ir::Graph plain = graph_of("program n;\ndim B in [1, 8];\ninput x : f32[B, 16];\noutput y : f32[B, 16];\ny = layernorm(x);\n");
  CHECK(generate_cuda(plan_program(plain)).source.find("gdl::valid_dim") == std::string::npos);

  CompileOptions options;
  options.arch = "sm_90";
  options.cache_dir = "-";
  Expected<CompiledModule> module = compile_cuda(code.source, options);
  INFO(code.source);
  INFO(module.status().message());
  REQUIRE(module.ok());
  REQUIRE(module->units.size() == 1);
  CHECK(module->units[0].cubin.size() > 4);
}

TEST_CASE("buckets: format_stats reports policies, padding, buckets, updates and fallbacks") {
  SessionStats s;
  s.arena_bytes = 3 << 20;
  s.node_count = 12;
  s.graphs_built = 2;
  s.runs = 10;
  s.node_updates = 4;
  s.node_update_us = 6.0;
  s.fallback_runs = 1;
  s.fallback_us = 2500;
  s.dims.push_back({"B", false, "", 80, 60});
  s.dims.push_back({"M", true, "reshape at 3:5 moves dim M across other axes", 20, 20});
  s.buckets.push_back({"B=8", {8, -1}, 6, true, 10, 20, 5});
  s.buckets.push_back({"B=64", {64, -1}, 4, false, 0, 0, 0});
  std::string text = format_stats(s);
  INFO(text);
  CHECK(text.find("arena 3.00 MiB") != std::string::npos);
  CHECK(text.find("dim B: buckets") != std::string::npos);
  CHECK(text.find("padding waste 25.0%") != std::string::npos);
  CHECK(text.find("dim M: node updates (buckets cannot serve it: reshape") != std::string::npos);
  CHECK(text.find("bucket B=8: 6 hits") != std::string::npos);
  CHECK(text.find("bucket B=64: 4 hits; no graph") != std::string::npos);
  CHECK(text.find("node updates: 4 (6.0 us in all, 1.50 us each)") != std::string::npos);
  CHECK(text.find("re-instantiations 0") != std::string::npos);
  CHECK(text.find("eager fallbacks: 1 (2.5 ms in all)") != std::string::npos);
}

}  // namespace gdl
