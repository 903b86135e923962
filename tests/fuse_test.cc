// Fusion (fuse.cc) and views (plan.cc): which values share a kernel, which
// stay apart, what the fused plans cost in nodes and arena bytes, and that
// they stay sound (check_plan) and exact (run_planned == interpret).
#include <doctest/doctest.h>

#include <algorithm>
#include <bit>
#include <cmath>
#include <filesystem>
#include <random>

#include "codegen/codegen.h"
#include "plan/kernel_choice.h"
#include "ir_builder.h"
#include "pipeline.h"
#include "plan.h"
#include "frontend/source_loader.h"
#include "passes/ir_verify.h"
#include "plan/check.h"
#include "plan/print.h"
#include "plan/run_planned.h"
#include "kernel_text.h"

namespace gdl {
namespace {

namespace fs = std::filesystem;
using ir::Op;
using ir::ValueId;
using plan::Plan;
using plan::PlanOptions;
using plan::Region;
using testing::GraphBuilder;
using testing::type;

constexpr PlanOptions kNoFusion{false, false, false};
constexpr uint64_t kKiB = 1024, kMiB = 1024 * 1024;

ir::Graph compile_file(const fs::path& path) {
  DiagnosticSink diags;
  std::string fatal;
  auto file = load_source(path.string(), diags, &fatal);
  REQUIRE_MESSAGE(file.has_value(), fatal);
  auto graph = compile_to_ir(*file, diags);
  INFO(diags.render(*file));
  REQUIRE(graph.has_value());
  return std::move(*graph);
}

ir::Graph example(const std::string& name) { return compile_file(fs::path(GDL_SOURCE_DIR) / "examples" / name); }
ir::Graph workload(const std::string& name) {
  return compile_file(fs::path(GDL_SOURCE_DIR) / "bench" / "workloads" / name);
}

// Non-zero values of both signs, rounded to the dtype; weights small enough
// that a deep MLP stays finite; i32 rank-0 inputs (lengths) in [1, 64].
Bindings random_bindings(const ir::Graph& g, std::vector<int64_t> dims, uint32_t seed) {
  std::mt19937 rng(seed);
  std::uniform_real_distribution<double> magnitude(0.1, 1.0);
  Bindings b;
  b.dims = std::move(dims);
  for (const ir::Node& n : g.nodes) {
    if (n.op != Op::kInput && n.op != Op::kParam) continue;
    HostTensor t;
    t.dtype = n.type.dtype;
    t.shape = concrete_shape(n.type.shape, b.dims);
    int64_t count = 1;
    for (int64_t e : t.shape) count *= e;
    double scale = n.op == Op::kParam ? 0.05 : 1.0;
    for (int64_t i = 0; i < count; ++i) {
      double v = t.dtype == DType::kI32 ? static_cast<double>(1 + rng() % 64)
                                        : magnitude(rng) * scale * ((rng() & 1) ? 1.0 : -1.0);
      t.data.push_back(round_to_dtype(v, t.dtype));
    }
    b.tensors[n.name] = std::move(t);
  }
  return b;
}

bool same_bits(double a, double b) {
  if (std::isnan(a) && std::isnan(b)) return true;
  return std::bit_cast<uint64_t>(a) == std::bit_cast<uint64_t>(b);
}

// The plan is sound and runs bit for bit like the interpreter.
void expect_exact(const Plan& p, const Bindings& b) {
  REQUIRE(plan::check_plan(p) == "");
  auto want = interpret(p.graph, b);
  REQUIRE_MESSAGE(want.ok(), want.status().message());
  auto got = plan::run_planned(p, b);
  REQUIRE_MESSAGE(got.ok(), got.status().message());
  REQUIRE(got->size() == want->size());
  for (const auto& output : *want) {
    const std::string& name = output.first;
    const HostTensor& expected = output.second;
    INFO("output " << name);
    const HostTensor& have = got->at(name);
    REQUIRE(have.data.size() == expected.data.size());
    size_t mismatches = 0, nonzero = 0;
    for (size_t i = 0; i < expected.data.size(); ++i) {
      mismatches += !same_bits(have.data[i], expected.data[i]);
      nonzero += expected.data[i] != 0;
    }
    CHECK(mismatches == 0);
    CHECK(nonzero > 0);
  }
}

std::vector<Op> ops_of(const Plan& p, const plan::Step& s) {
  std::vector<Op> ops;
  for (ValueId v : s.values) ops.push_back(p.graph.node(v).op);
  return ops;
}

// The step that writes v, or -1.
int writer_of(const Plan& p, ValueId v) {
  for (size_t s = 0; s < p.steps.size(); ++s)
    if (p.steps[s].result == v) return static_cast<int>(s);
  return -1;
}

// How many steps compute v (write it or recompute it in registers).
int computed_in(const Plan& p, ValueId v) {
  int n = 0;
  for (const plan::Step& s : p.steps) n += std::count(s.values.begin(), s.values.end(), v) > 0;
  return n;
}

bool computes_op(const Plan& p, Op op) {
  for (const plan::Step& s : p.steps)
    for (ValueId v : s.values)
      if (p.graph.node(v).op == op) return true;
  return false;
}

// ------------------------------------------------------------ the examples

TEST_CASE("fuse: chain.gdl and w1_chain.gdl (100 times h = h times a plus b) are one step each") {
  for (std::string name : {"chain.gdl", "w1_chain.gdl"}) {
    INFO(name);
    ir::Graph g = name == "chain.gdl" ? example(name) : workload(name);
    Plan unfused = plan_program(g, kNoFusion);
    Plan p = plan_program(g);
    CHECK(unfused.steps.size() == 200);
    REQUIRE(p.steps.size() == 1);
    const plan::Step& s = p.steps[0];
    CHECK(s.values.size() == 200);
    CHECK(s.deps.empty());
    // Reads only x and the params; every intermediate lives in registers.
    for (ValueId r : s.reads) CHECK((p.graph.node(r).op == Op::kInput || p.graph.node(r).op == Op::kParam));
    size_t stored = 0;
    for (ValueId v : s.values) stored += p.buffers[v].region != Region::kNone;
    CHECK(stored == 1);
    // The arena holds x and y, 16 KiB each, and nothing else.
    CHECK(p.arena_bytes - p.buffers[s.reads.front()].offset == 32 * kKiB);
    CHECK(p.naive_bytes == 32 * kKiB);
    CHECK(unfused.arena_bytes > p.arena_bytes);
    expect_exact(p, random_bindings(p.graph, {}, 5));
  }
}

// Placing the cheap values of a group (rank 0, made from scalars) walks
// their arguments with a stack of its own: such a chain can be as long as
// the program, too deep to recurse through.
TEST_CASE("fuse: a chain of 40000 cheap values is recomputed in order inside its consumer's step") {
  DiagnosticSink diags;
  const SourceFile file = source_from_string("cheap_chain.gdl", R"(program cheap_chain;
input x : f32[64];
scalar a : f32 = 1.0;
output y : f32[64];
let s = a;
for i in 0..20000 {
  s = s * 0.99995 + 0.5;
}
y = x * s;
)");
  std::optional<ir::Graph> g = compile_to_ir(file, diags);
  REQUIRE_MESSAGE(g, diags.render(file));
  Plan p = plan_program(*g);
  REQUIRE(p.steps.size() == 1);
  const plan::Step& s = p.steps[0];
  CHECK(s.values.size() > 40000);
  CHECK(std::is_sorted(s.values.begin(), s.values.end()));  // every argument before its user
  CHECK(s.values.back() == p.graph.outputs.at(0).value);
  expect_exact(p, random_bindings(p.graph, {}, 9));
}

TEST_CASE("fuse: mlp.gdl is one step per layer: layernorm, matmul and epilogue, with no slice copies") {
  ir::Graph g = example("mlp.gdl");
  Plan p = plan_program(g);
  INFO(plan::print_plan(p));
  REQUIRE(p.steps.size() == 8);
  // Every block lists the same ops: the layernorm (the matmul's prologue)
  // first; cast(alpha), defined once in the IR, right before the mul that
  // uses it.
  const std::vector<Op> ops = {Op::kLayerNorm, Op::kMatMul, Op::kAdd, Op::kGelu, Op::kCast, Op::kMul, Op::kAdd};
  ValueId alpha_cast = ir::kNoValue;
  for (size_t l = 0; l < 8; ++l) {
    INFO("layer " << l);
    const plan::Step& block = p.steps[l];
    REQUIRE(ops_of(p, block) == ops);
    CHECK(matmul_prologue(p.graph, block.values) == block.values[0]);
    alpha_cast = block.values[4];
    CHECK(block.deps == (l == 0 ? std::vector<int>{} : std::vector<int>{static_cast<int>(l - 1)}));
    // The step reads the residual (the layernorm's input, added again at
    // the end) and the slice views W[l] and bias[l] in the params region.
    REQUIRE(block.reads.size() == 3);
    const plan::Buffer& w = p.buffers[block.reads[1]];
    const plan::Buffer& bias = p.buffers[block.reads[2]];
    CHECK(w.region == Region::kParams);
    CHECK(w.offset == l * 2 * kMiB);
    CHECK(w.bytes == 2 * kMiB);
    CHECK(bias.region == Region::kParams);
    CHECK(bias.offset == 16 * kMiB + l * 2 * kKiB);
    CHECK(bias.bytes == 2 * kKiB);
    // Only the result of the block has a buffer.
    for (size_t i = 0; i + 1 < block.values.size(); ++i) CHECK(p.buffers[block.values[i]].region == Region::kNone);
  }
  // cast(alpha) is recomputed by every block, never stored.
  CHECK(computed_in(p, alpha_cast) == 8);
  CHECK(writer_of(p, alpha_cast) == -1);
  CHECK_FALSE(computes_op(p, Op::kSlice));
  CHECK_FALSE(computes_op(p, Op::kReshape));
  // Arena: x, y and two residual slots, 128 KiB each (after the reserved
  // blocks before x, if any); nothing is copied, no layernorm is stored.
  uint64_t x_offset = p.buffers[p.graph.leaves(Op::kInput).front()].offset;
  CHECK(p.arena_bytes - x_offset == 4 * 128 * kKiB);
  CHECK(p.live_lower_bound - x_offset == 4 * 128 * kKiB);
  std::string text = plan::print_plan(p);
  CHECK(text.find("step 0: layernorm+matmul+add+gelu+cast+mul+add [%8 %9 %10 %11 %12 %13 %14] reads %2 %5 %7 -> %14 "
                  "f16[B, 1024] in arena @") != std::string::npos);
  CHECK(text.find("%4 slice view of %0 : f16[1, 1024, 1024] -> params @0 (2.0 MiB)") != std::string::npos);

  // Without fusion the slices are still views: 49 steps (6 per layer and
  // the cast of alpha) instead of 65, and no 2 MiB copy in the arena.
  Plan unfused = plan_program(g, kNoFusion);
  CHECK(unfused.steps.size() == 49);
  CHECK(unfused.arena_bytes < 2 * kMiB);
  CHECK(plan::check_plan(unfused) == "");

  for (int64_t batch : {1, 3}) expect_exact(p, random_bindings(p.graph, {batch}, static_cast<uint32_t>(batch)));
}

TEST_CASE("fuse: the W2 workloads are 8 or 16 steps, W3 one") {
  for (std::string dtype : {"f32", "f16", "bf16"})
    for (std::string h : {"1024", "4096"}) {
      std::string name = "w2_mlp_h" + h + "_" + dtype + ".gdl";
      INFO(name);
      Plan p = plan_program(workload(name));
      REQUIRE(plan::check_plan(p) == "");
      // The layernorm joins its matmul in f16 and bf16, where the re-read of
      // x for the row statistics stays within 32 MiB at B = 64 (the rows
      // kernel at 16 rows: 8 MiB at H = 1024, 32 MiB at H = 4096); not in
      // f32, whose rows kernel holds 16 rows in registers.
      const bool fused = dtype != "f32";
      const std::vector<Op> block = {Op::kMatMul, Op::kAdd, Op::kGelu, Op::kAdd};
      std::vector<Op> with_norm = block;
      with_norm.insert(with_norm.begin(), Op::kLayerNorm);
      REQUIRE(p.steps.size() == (fused ? 8u : 16u));
      for (size_t s = fused ? 0 : 1; s < p.steps.size(); s += fused ? 1 : 2)
        CHECK(ops_of(p, p.steps[s]) == (fused ? with_norm : block));
      const ir::Node& matmul = p.graph.node(fused ? p.steps[0].values[1] : p.steps[1].values[0]);
      CHECK((prologue_reread_bytes(p.graph, matmul) <= (uint64_t{32} << 20)) == (dtype != "f32" || h == "1024"));
      CHECK((choose_matmul(p.graph, matmul).row_tile <= 8) == fused);
      uint64_t row = std::stoull(h) * dtype_size(p.graph.nodes.back().type.dtype) * 64;
      uint64_t x_offset = p.buffers[p.graph.leaves(Op::kInput).front()].offset;
      CHECK(p.arena_bytes - x_offset == (fused ? 4 : 5) * row);
      if (h == "1024") expect_exact(p, random_bindings(p.graph, {2}, 17));
    }
  Plan w3 = plan_program(workload("w3_attention.gdl"));
  CHECK(w3.steps.size() == 1);
}

// ---------------------------------------------------- decisions on graphs

TEST_CASE("fuse: an elementwise diamond is one step and structured branches stay parallel") {
  {
    GraphBuilder b;
    ValueId x = b.input("x", type(DType::kF32, {256}));
    ValueId left = b.unary(Op::kExp, x);
    ValueId right = b.unary(Op::kTanh, x);
    ValueId y = b.binary(Op::kAdd, left, right);
    b.output("y", y);
    Plan p = plan_program(b.g);
    REQUIRE(p.steps.size() == 1);
    CHECK(p.steps[0].values == std::vector<ValueId>{left, right, y});
    CHECK(p.steps[0].reads == std::vector<ValueId>{x});
    expect_exact(p, random_bindings(p.graph, {}, 1));
  }
  {
    // x -> gelu(x @ w1 + b1) and tanh(x @ w2) -> concat: each matmul takes
    // its own epilogue, the two run side by side, the concat waits for both.
    GraphBuilder b;
    Dim batch = b.dim("B", 1, 4);
    const Dim c8 = Dim::constant(8), c16 = Dim::constant(16);
    ValueId x = b.input("x", {DType::kF16, {batch, c8}});
    ValueId w1 = b.param("w1", {DType::kF16, {c8, c16}});
    ValueId b1 = b.param("b1", {DType::kF16, {c16}});
    ValueId w2 = b.param("w2", {DType::kF16, {c8, c16}});
    ValueId m1 = b.op(Op::kMatMul, {x, w1}, {DType::kF16, {batch, c16}});
    ValueId left = b.unary(Op::kGelu, b.binary(Op::kAdd, m1, b1));
    ValueId m2 = b.op(Op::kMatMul, {x, w2}, {DType::kF16, {batch, c16}});
    ValueId right = b.unary(Op::kTanh, m2);
    ValueId y = b.op(Op::kConcat, {left, right}, {DType::kF16, {batch, Dim::constant(32)}}, testing::axis_attrs(1));
    b.output("y", y);
    REQUIRE(ir::verify(b.g) == "");
    Plan p = plan_program(b.g);
    INFO(plan::print_plan(p));
    REQUIRE(p.steps.size() == 3);
    CHECK(p.steps[0].values == std::vector<ValueId>{m1, m1 + 1, left});
    CHECK(p.steps[1].values == std::vector<ValueId>{m2, right});
    CHECK(p.steps[0].deps.empty());
    CHECK(p.steps[1].deps.empty());
    CHECK(p.steps[2].deps == std::vector<int>{0, 1});
    for (int64_t bv : {1, 4}) expect_exact(p, random_bindings(p.graph, {bv}, 2));
  }
}

TEST_CASE("fuse: the rounding, trigonometric, integer and clamp ops chain into one step, and into an epilogue") {
  {
    GraphBuilder b;
    ValueId x = b.input("x", type(DType::kF32, {256}));
    ValueId lo = b.input("lo", type(DType::kF32, {256}));
    ValueId c = b.unary(Op::kCos, x);
    ValueId e = b.unary(Op::kErf, b.unary(Op::kSin, c));
    ValueId sum = b.binary(Op::kAdd, b.binary(Op::kAdd, b.unary(Op::kFloor, e), b.unary(Op::kCeil, x)),
                           b.unary(Op::kRound, c));
    ValueId signed_sum = b.binary(Op::kMul, sum, b.unary(Op::kSign, x));
    ValueId y = b.op(Op::kClamp, {signed_sum, lo, b.constant(0.75)}, type(DType::kF32, {256}));
    b.output("y", y);
    REQUIRE(ir::verify(b.g) == "");
    Plan p = plan_program(b.g);
    INFO(plan::print_plan(p));
    REQUIRE(p.steps.size() == 1);
    CHECK(p.steps[0].result == y);
    CHECK(p.steps[0].values.size() == 11);
    CHECK(p.steps[0].reads == std::vector<ValueId>{x, lo});
    expect_exact(p, random_bindings(p.graph, {}, 3));
  }
  {
    GraphBuilder b;
    ValueId n = b.input("n", type(DType::kI32, {256}));
    ValueId k = b.input("k", type(DType::kI32, {256}));
    ValueId q = b.binary(Op::kFloorDiv, n, k);
    ValueId r = b.binary(Op::kMod, n, k);
    ValueId mixed = b.binary(Op::kBitXor, b.binary(Op::kBitOr, r, b.binary(Op::kBitAnd, q, k)), n);
    ValueId shifted = b.binary(Op::kShr, b.binary(Op::kShl, mixed, k), r);  // counts up to 64: shifted out
    ValueId total = b.binary(Op::kAdd, shifted, b.unary(Op::kSign, mixed));
    ValueId y = b.op(Op::kClamp, {total, b.constant(-100, DType::kI32), b.constant(1000, DType::kI32)},
                     type(DType::kI32, {256}));
    b.output("y", y);
    REQUIRE(ir::verify(b.g) == "");
    Plan p = plan_program(b.g);
    INFO(plan::print_plan(p));
    REQUIRE(p.steps.size() == 1);
    CHECK(ops_of(p, p.steps[0]) == std::vector<Op>{Op::kFloorDiv, Op::kMod, Op::kBitAnd, Op::kBitOr, Op::kBitXor,
                                                   Op::kShl, Op::kShr, Op::kSign, Op::kAdd, Op::kClamp});
    expect_exact(p, random_bindings(p.graph, {}, 4));
  }
  {
    // relu6 as clamp: the matmul's epilogue.
    GraphBuilder b;
    ValueId x = b.input("x", type(DType::kF16, {4, 64}));
    ValueId w = b.param("w", type(DType::kF16, {64, 32}));
    ValueId m = b.op(Op::kMatMul, {x, w}, type(DType::kF16, {4, 32}));
    ValueId y = b.op(Op::kClamp, {m, b.constant(0.0, DType::kF16), b.constant(6.0, DType::kF16)},
                     type(DType::kF16, {4, 32}));
    b.output("y", y);
    Plan p = plan_program(b.g);
    INFO(plan::print_plan(p));
    REQUIRE(p.steps.size() == 1);
    CHECK(ops_of(p, p.steps[0]) == std::vector<Op>{Op::kMatMul, Op::kClamp});
  }
}

TEST_CASE("fuse: an expensive intermediate with two consumers is stored once and a cheap one recomputed") {
  GraphBuilder b;
  ValueId x = b.input("x", type(DType::kF16, {64}));
  ValueId alpha = b.scalar("alpha", DType::kF32, 0.5);
  ValueId k = b.cast(b.binary(Op::kMul, alpha, b.constant(3.0)), DType::kF16);  // cheap: no buffer read
  ValueId shared = b.unary(Op::kExp, b.unary(Op::kTanh, x));
  ValueId left = b.binary(Op::kMul, b.unary(Op::kGelu, shared), k);
  ValueId right = b.binary(Op::kAdd, b.unary(Op::kNeg, shared), k);
  b.output("left", left);
  b.output("right", right);
  REQUIRE(ir::verify(b.g) == "");
  Plan p = plan_program(b.g);
  INFO(plan::print_plan(p));
  REQUIRE(p.steps.size() == 3);
  // tanh and exp once, in the step that writes `shared`.
  CHECK(ops_of(p, p.steps[0]) == std::vector<Op>{Op::kTanh, Op::kExp});
  CHECK(p.steps[0].result == shared);
  CHECK(computed_in(p, shared) == 1);
  CHECK(computed_in(p, shared - 1) == 1);
  // The two consumers run in parallel, each recomputing alpha * 3 in f16
  // right before its first use.
  CHECK(ops_of(p, p.steps[1]) == std::vector<Op>{Op::kGelu, Op::kMul, Op::kCast, Op::kMul});
  CHECK(ops_of(p, p.steps[2]) == std::vector<Op>{Op::kNeg, Op::kMul, Op::kCast, Op::kAdd});
  CHECK(p.steps[1].deps == std::vector<int>{0});
  CHECK(p.steps[2].deps == std::vector<int>{0});
  CHECK(p.steps[1].reads == std::vector<ValueId>{shared});
  CHECK(writer_of(p, k) == -1);
  CHECK(p.buffers[k].region == Region::kNone);
  Bindings bind = random_bindings(p.graph, {}, 3);
  bind.scalars["alpha"] = -0.75;
  expect_exact(p, bind);

  // A cheap value that is an output, or that a structured op reads, is
  // written by a step of its own and still recomputed where it is fused.
  // Here attention reads a length computed from a scalar.
  GraphBuilder c;
  ValueId qh = c.input("q", type(DType::kF32, {2, 8}));
  ValueId kv = c.input("kv", type(DType::kF32, {2, 6, 8}));
  ValueId len = c.binary(Op::kAdd, c.scalar("n", DType::kI32, 3), c.constant(1, DType::kI32));
  ValueId attended = c.op(Op::kAttention, {qh, kv, kv, len}, type(DType::kF32, {2, 8}), testing::value_attrs(0.125));
  ValueId scaled = c.binary(Op::kMul, qh, c.cast(len, DType::kF32));
  c.output("attended", attended);
  c.output("scaled", scaled);
  REQUIRE(ir::verify(c.g) == "");
  Plan q = plan_program(c.g);
  INFO(plan::print_plan(q));
  CHECK(q.steps.size() == 3);
  CHECK(writer_of(q, len) >= 0);
  CHECK(computed_in(q, len) == 2);
  expect_exact(q, random_bindings(q.graph, {}, 4));
}

TEST_CASE("fuse: what stays out of a matmul epilogue") {
  const Dim c4 = Dim::constant(4), c8 = Dim::constant(8), c16 = Dim::constant(16);
  auto matmul_then = [&](DType dt, auto&& consumers) {
    GraphBuilder b;
    ValueId x = b.input("x", {dt, {c4, c8}});
    ValueId w = b.param("w", {dt, {c8, c16}});
    ValueId m = b.op(Op::kMatMul, {x, w}, {dt, {c4, c16}});
    consumers(b, m);
    REQUIRE(ir::verify(b.g) == "");
    return plan_program(b.g);
  };
  SUBCASE("an output matmul is written, its consumer separate") {
    Plan p = matmul_then(DType::kF32, [](GraphBuilder& b, ValueId m) {
      b.output("m", m);
      b.output("y", b.unary(Op::kRelu, m));
    });
    CHECK(p.steps.size() == 2);
    expect_exact(p, random_bindings(p.graph, {}, 6));
  }
  SUBCASE("a matmul with consumers in two steps is stored once") {
    Plan p = matmul_then(DType::kF16, [](GraphBuilder& b, ValueId m) {
      b.output("a", b.unary(Op::kRelu, m));
      b.output("b", b.unary(Op::kTanh, m));
    });
    REQUIRE(p.steps.size() == 3);
    CHECK(ops_of(p, p.steps[0]) == std::vector<Op>{Op::kMatMul});
    CHECK(p.steps[1].deps == std::vector<int>{0});
    CHECK(p.steps[2].deps == std::vector<int>{0});
    expect_exact(p, random_bindings(p.graph, {}, 7));
  }
  SUBCASE("a consumer of another shape (broadcast to a larger result) is not an epilogue") {
    Plan p = matmul_then(DType::kF32, [&](GraphBuilder& b, ValueId m) {
      ValueId big = b.input("big", {DType::kF32, {Dim::constant(2), c4, c16}});
      b.output("y", b.binary(Op::kAdd, m, big));
    });
    CHECK(p.steps.size() == 2);
    expect_exact(p, random_bindings(p.graph, {}, 8));
  }
  SUBCASE("an epilogue may end in another dtype, and a second matmul stays apart") {
    Plan p = matmul_then(DType::kBF16, [&](GraphBuilder& b, ValueId m) {
      ValueId w2 = b.param("w2", {DType::kBF16, {c8, c16}});
      ValueId x2 = b.input("x2", {DType::kBF16, {c4, c8}});
      ValueId m2 = b.op(Op::kMatMul, {x2, w2}, {DType::kBF16, {c4, c16}});
      b.output("y", b.cast(b.binary(Op::kAdd, m, m2), DType::kF32));
    });
    INFO(plan::print_plan(p));
    REQUIRE(p.steps.size() == 2);
    CHECK(ops_of(p, p.steps[0]) == std::vector<Op>{Op::kMatMul});
    CHECK(ops_of(p, p.steps[1]) == std::vector<Op>{Op::kMatMul, Op::kAdd, Op::kCast});
    expect_exact(p, random_bindings(p.graph, {}, 9));
  }
  SUBCASE("with epilogues off, elementwise chains still fuse") {
    GraphBuilder b;
    ValueId x = b.input("x", {DType::kF32, {c4, c8}});
    ValueId w = b.param("w", {DType::kF32, {c8, c16}});
    ValueId m = b.op(Op::kMatMul, {x, w}, {DType::kF32, {c4, c16}});
    b.output("y", b.unary(Op::kRelu, b.unary(Op::kExp, m)));
    Plan p = plan_program(b.g, PlanOptions{true, false});
    REQUIRE(p.steps.size() == 2);
    CHECK(ops_of(p, p.steps[1]) == std::vector<Op>{Op::kExp, Op::kRelu});
  }
}

TEST_CASE("fuse: a norm joins the matmul that takes it as a, as its prologue, and only that way") {
  const Dim c4 = Dim::constant(4), c48 = Dim::constant(48), c40 = Dim::constant(40);
  ir::Attrs eps;
  eps.value = 1e-5;
  // x [B, 48] -> norm -> @ w [48, 40] (+ consumers chosen by the subcase).
  struct Built {
    GraphBuilder b;
    ValueId x = ir::kNoValue, norm = ir::kNoValue, w = ir::kNoValue, mm = ir::kNoValue;
  };
  auto build = [&](DType dt, Op norm_op, bool weighted) {
    Built r;
    Dim batch = r.b.dim("B", 1, 64);
    r.b.g.program_name = "prologue";
    r.x = r.b.input("x", {dt, {batch, c48}});
    std::vector<ValueId> args = {r.x};
    if (weighted) {
      args.push_back(r.b.param("gamma", {dt, {c48}}));
      if (norm_op == Op::kLayerNorm) args.push_back(r.b.param("beta", {dt, {c48}}));
    }
    r.norm = r.b.op(norm_op, args, {dt, {batch, c48}}, eps);
    r.w = r.b.param("w", {dt, {c48, c40}});
    r.mm = r.b.op(Op::kMatMul, {r.norm, r.w}, {dt, {batch, c40}});
    return r;
  };
  SUBCASE("layernorm with weight and bias, then an epilogue: one step that NVRTC compiles") {
    Built r = build(DType::kBF16, Op::kLayerNorm, true);
    ValueId y = r.b.unary(Op::kRelu, r.mm);
    r.b.output("y", y);
    REQUIRE(ir::verify(r.b.g) == "");
    Plan p = plan_program(r.b.g);
    INFO(plan::print_plan(p));
    REQUIRE(p.steps.size() == 1);
    CHECK(p.steps[0].values == std::vector<ValueId>{r.norm, r.mm, y});
    CHECK(p.steps[0].reads.front() == r.x);  // the norm's input, read as the matmul's a
    CHECK(p.buffers[r.norm].region == Region::kNone);
    CHECK(matmul_prologue(p.graph, p.steps[0].values) == r.norm);
    expect_exact(p, random_bindings(p.graph, {5}, 11));
    GeneratedCode code = generate_cuda(p);
    INFO(code.source);
    CHECK(code.source.find("const auto pro = gdl::layernorm_prologue<__nv_bfloat16>(gdl::Column<__nv_bfloat16>{") !=
          std::string::npos);
    CHECK(code.source.find("1e-05f);") != std::string::npos);
    CHECK(code.source.find(", epi, pro, smem);") != std::string::npos);
    CompileOptions options;
    options.cache_dir = "-";
    auto module = compile_cuda(code.source, options);
    INFO(module.status().message());
    CHECK(module.ok());
  }
  SUBCASE("rmsnorm without a weight, in f16, with no epilogue") {
    Built r = build(DType::kF16, Op::kRmsNorm, false);
    r.b.output("y", r.mm);
    Plan p = plan_program(r.b.g);
    REQUIRE(p.steps.size() == 1);
    CHECK(ops_of(p, p.steps[0]) == std::vector<Op>{Op::kRmsNorm, Op::kMatMul});
    expect_exact(p, random_bindings(p.graph, {3}, 12));
    GeneratedCode code = generate_cuda(p);
    CHECK(code.source.find("const auto pro = gdl::rmsnorm_prologue<__half>(gdl::One{}, 1e-05f);") != std::string::npos);
  }
  SUBCASE("a norm that is also an output, or used twice, or the matmul's b, is its own step") {
    {
      Built r = build(DType::kF32, Op::kLayerNorm, false);
      r.b.output("n", r.norm);
      r.b.output("y", r.mm);
      Plan p = plan_program(r.b.g);
      CHECK(p.steps.size() == 2);
    }
    {
      Built r = build(DType::kF32, Op::kLayerNorm, false);
      r.b.output("y", r.b.binary(Op::kAdd, r.mm, r.b.op(Op::kMatMul, {r.norm, r.w}, r.b.g.node(r.mm).type)));
      Plan p = plan_program(r.b.g);
      INFO(plan::print_plan(p));
      CHECK(ops_of(p, p.steps[0]) == std::vector<Op>{Op::kLayerNorm});
    }
    {
      GraphBuilder b;
      ValueId x = b.input("x", {DType::kF32, {c48, c48}});
      ValueId n = b.op(Op::kLayerNorm, {x}, {DType::kF32, {c48, c48}}, eps);
      ValueId a = b.input("a", {DType::kF32, {c4, c48}});
      b.output("y", b.op(Op::kMatMul, {a, n}, {DType::kF32, {c4, c48}}));
      Plan p = plan_program(b.g);
      CHECK(p.steps.size() == 2);
      expect_exact(p, random_bindings(p.graph, {}, 13));
    }
  }
  SUBCASE("f32 with the rows kernel's 16-row register tile: the norm stays a step") {
    Built r = build(DType::kF32, Op::kLayerNorm, true);
    r.b.output("y", r.mm);
    Plan p = plan_program(r.b.g);
    CHECK(choose_matmul(p.graph, p.graph.node(r.mm)).row_tile == 16);
    CHECK(p.steps.size() == 2);
  }
  SUBCASE("too large a re-read, or prologues off: the norm stays a step") {
    {
      // [64, 8192] f32: every block of the tiled kernel would re-read 2 MiB of x.
      GraphBuilder b;
      const Dim rows = Dim::constant(64), k = Dim::constant(8192), n = Dim::constant(8192);
      ValueId x = b.input("x", {DType::kF32, {rows, k}});
      ValueId norm = b.op(Op::kLayerNorm, {x}, {DType::kF32, {rows, k}}, eps);
      ValueId mm = b.op(Op::kMatMul, {norm, b.param("w", {DType::kF32, {k, n}})}, {DType::kF32, {rows, n}});
      b.output("y", mm);
      CHECK(prologue_reread_bytes(b.g, b.g.node(mm)) > (uint64_t{16} << 20));
      CHECK(plan_program(b.g).steps.size() == 2);
    }
    {
      Built r = build(DType::kF32, Op::kLayerNorm, true);
      r.b.output("y", r.mm);
      PlanOptions options;
      options.fuse_prologues = false;
      Plan p = plan_program(r.b.g, options);
      REQUIRE(p.steps.size() == 2);
      CHECK(ops_of(p, p.steps[1]) == std::vector<Op>{Op::kMatMul});
    }
  }
}

TEST_CASE("fuse: a value broadcast into a much larger result is computed once, in its own step") {
  GraphBuilder b;
  ValueId v = b.input("v", type(DType::kF32, {16}));
  ValueId small = b.unary(Op::kExp, v);                      // 16 elements
  ValueId m = b.input("m", type(DType::kF32, {4, 16}));      // 64: 4 per element of `small`
  ValueId big = b.input("big", type(DType::kF32, {128, 16}));  // 2048: 128 per element
  b.output("near", b.binary(Op::kAdd, m, b.unary(Op::kTanh, v)));
  b.output("far", b.binary(Op::kAdd, big, small));
  Plan p = plan_program(b.g);
  INFO(plan::print_plan(p));
  REQUIRE(p.steps.size() == 3);
  CHECK(ops_of(p, p.steps[0]) == std::vector<Op>{Op::kExp});
  CHECK(ops_of(p, p.steps[1]) == std::vector<Op>{Op::kTanh, Op::kAdd});
  CHECK(ops_of(p, p.steps[2]) == std::vector<Op>{Op::kAdd});
  expect_exact(p, random_bindings(p.graph, {}, 10));
}

// ------------------------------------------------------------------ views

TEST_CASE("views: a contiguous slice is a view at its offset, others are copies") {
  GraphBuilder b;
  Dim batch = b.dim("B", 2, 6);
  const Dim c1 = Dim::constant(1), c2 = Dim::constant(2), c4 = Dim::constant(4), c5 = Dim::constant(5);
  ValueId w = b.param("w", type(DType::kF16, {3, 5, 4}));
  ValueId x = b.input("x", {DType::kF32, {batch, c4}});
  ValueId t = b.input("t", {DType::kF32, {c4, batch}});
  ValueId h = b.unary(Op::kExp, x);  // an intermediate
  auto slice = [&](ValueId a, std::vector<int64_t> bounds, Shape s, DType dt) {
    return b.op(Op::kSlice, {a}, {dt, std::move(s)}, testing::ints_attrs(std::move(bounds)));
  };
  ValueId row = slice(w, {1, 2, 0, -1, 0, 4}, {c1, c5, c4}, DType::kF16);                  // w[1]: +40 bytes
  ValueId part = slice(w, {2, 3, 1, 3, 0, 4}, {c1, c2, c4}, DType::kF16);                  // w[2, 1:3]: +88
  ValueId odd = slice(w, {0, 1, 2, 3, 1, 3}, {c1, c1, c2}, DType::kF16);                   // w[0, 2, 1:3]: +18
  ValueId strided = slice(w, {0, 3, 1, 2, 0, 4}, {Dim::constant(3), c1, c4}, DType::kF16);  // w[:, 1]: not contiguous
  ValueId first = slice(h, {0, 1, 0, 4}, {c1, c4}, DType::kF32);                           // h[0:1]: +0
  ValueId later = slice(h, {1, 2, 0, 4}, {c1, c4}, DType::kF32);                           // h[1:2]: +16
  ValueId column = slice(t, {1, 2, 0, -1}, {c1, batch}, DType::kF32);                      // t[1]: +B * 4
  ValueId middle = slice(x, {0, -1, 1, 3}, {batch, c2}, DType::kF32);                      // x[:, 1:3]: a copy
  ValueId w_out = slice(w, {1, 2, 0, -1, 0, 4}, {c1, c5, c4}, DType::kF16);                // an output: a copy
  b.output("row", b.unary(Op::kNeg, row));
  b.output("part", b.unary(Op::kNeg, part));
  b.output("odd", b.unary(Op::kAbs, odd));
  b.output("strided", b.unary(Op::kNeg, strided));
  b.output("first", b.unary(Op::kNeg, first));
  b.output("later", later);  // an output over an intermediate: a view that pins its storage
  b.output("column", b.unary(Op::kNeg, column));
  b.output("middle", b.unary(Op::kNeg, middle));
  b.output("w_out", w_out);
  REQUIRE(ir::verify(b.g) == "");
  Plan p = plan_program(b.g);
  INFO(plan::print_plan(p));
  REQUIRE(plan::check_plan(p) == "");

  auto is_view = [&](ValueId v) { return writer_of(p, v) < 0 && computed_in(p, v) == 0; };
  CHECK(is_view(row));
  CHECK(p.buffers[row].region == Region::kParams);
  CHECK(p.buffers[row].offset == p.buffers[w].offset + 40);
  CHECK(p.buffers[row].bytes == 40);
  CHECK(is_view(part));
  CHECK(p.buffers[part].offset == p.buffers[w].offset + 88);
  CHECK(p.buffers[part].bytes == 16);
  CHECK(is_view(odd));
  CHECK(p.buffers[odd].offset == p.buffers[w].offset + 18);
  CHECK(plan::buffer_alignment(p.buffers[odd]) == 2);
  CHECK(plan::buffer_alignment(p.buffers[part]) == 8);
  CHECK(plan::buffer_alignment(p.buffers[w]) == plan::kAlignment);
  CHECK_FALSE(is_view(strided));
  CHECK(is_view(first));
  CHECK(p.buffers[first].offset == p.buffers[h].offset);
  CHECK(is_view(later));
  CHECK(p.buffers[later].region == Region::kArena);
  CHECK(p.buffers[later].offset == p.buffers[h].offset + 16);
  CHECK(p.graph.outputs[5].value == later);
  CHECK(is_view(column));  // behind the run-time axis: at t's offset plus 4 bytes per row of the layout
  CHECK(p.buffers[column].offset == p.buffers[t].offset);
  CHECK(p.buffers[column].terms == std::vector<plan::OffsetTerm>{{4, {0}}});
  CHECK_FALSE(is_view(middle));
  CHECK(writer_of(p, w_out) >= 0);  // an output owns its buffer: never a param's
  CHECK(p.buffers[w_out].region == Region::kArena);
  CHECK(plan::print_plan(p).find("slice view of %") != std::string::npos);
  for (int64_t bv : {2, 5, 6}) expect_exact(p, random_bindings(p.graph, {bv}, static_cast<uint32_t>(20 + bv)));

  // check_plan proves where a view lies and that it is aligned to its element size.
  {
    Plan broken = p;
    broken.buffers[part].offset += 8;
    CHECK(plan::check_plan(broken).find("does not lie where its elements are") != std::string::npos);
  }
  {
    Plan broken = p;
    broken.buffers[odd].offset += 1;
    CHECK(plan::check_plan(broken).find("is not aligned to 2") != std::string::npos);
  }
}

TEST_CASE("views: the viewed storage stays live while a view of it is read") {
  GraphBuilder b;
  ValueId x = b.input("x", type(DType::kF32, {4, 64}));
  ValueId h = b.unary(Op::kExp, x);  // step 0, read only through its view
  ValueId v = b.op(Op::kSlice, {h}, type(DType::kF32, {1, 64}), testing::ints_attrs({2, 3, 0, -1}));
  ValueId u = b.unary(Op::kTanh, x);     // step 1: h is still live through v
  ValueId n = b.unary(Op::kNeg, v);      // step 2
  b.output("y", b.binary(Op::kAdd, n, u));
  Plan p = plan_program(b.g, kNoFusion);
  INFO(plan::print_plan(p));
  REQUIRE(plan::check_plan(p) == "");
  REQUIRE(writer_of(p, v) < 0);
  CHECK(p.buffers[v].offset == p.buffers[h].offset + 2 * 64 * 4);
  bool apart = p.buffers[u].offset + p.buffers[u].bytes <= p.buffers[h].offset ||
               p.buffers[h].offset + p.buffers[h].bytes <= p.buffers[u].offset;
  CHECK(apart);
  expect_exact(p, random_bindings(p.graph, {}, 30));
  Plan broken = p;
  broken.buffers[u].offset = broken.buffers[h].offset;
  CHECK(plan::check_plan(broken).find("live at the same time") != std::string::npos);

  Plan fused = plan_program(b.g);
  CHECK(fused.steps.size() == 2);  // exp stored for its view; tanh, neg and add in one step
  expect_exact(fused, random_bindings(fused.graph, {}, 31));
}

// ------------------------------------------------------- broken fused plans

TEST_CASE("check_plan: fused values that are stored, read or written twice are found") {
  GraphBuilder b;
  ValueId x = b.input("x", type(DType::kF32, {256}));
  ValueId a = b.unary(Op::kExp, x);
  ValueId c = b.unary(Op::kTanh, a);
  ValueId y = b.unary(Op::kNeg, c);
  b.output("y", y);
  Plan p = plan_program(b.g);
  REQUIRE(p.steps.size() == 1);
  REQUIRE(plan::check_plan(p) == "");
  {
    Plan broken = p;
    broken.buffers[a] = broken.buffers[x];
    CHECK(plan::check_plan(broken).find("has a buffer, but no step writes it") != std::string::npos);
  }
  {
    Plan broken = p;
    broken.steps[0].reads.push_back(a);  // a fused value has no buffer to read
    CHECK(plan::check_plan(broken).find("step 0 reads %1 (exp), which has no buffer") != std::string::npos);
  }
  {
    Plan broken = p;
    broken.steps.push_back(broken.steps[0]);
    CHECK(plan::check_plan(broken).find("is written by step 0 and step 1") != std::string::npos);
  }
  {
    Plan broken = p;
    broken.steps[0].values = {a, c, c, y};
    CHECK(plan::check_plan(broken).find("computes %2 (tanh) twice") != std::string::npos);
  }
  {
    Plan broken = p;
    broken.steps[0].values = {c, y};  // exp computed nowhere
    CHECK(plan::check_plan(broken).find("%1 (exp) is computed by no step") != std::string::npos);
  }
}

// ----------------------------------------------------------------- codegen

TEST_CASE("fuse: codegen passes a fused matmul its epilogue, and NVRTC compiles it") {
  GraphBuilder b;
  b.g.program_name = "epilogue";
  Dim batch = b.dim("B", 1, 64);
  const Dim c32 = Dim::constant(32), c48 = Dim::constant(48);
  ValueId x = b.input("x", {DType::kF16, {batch, c48}});
  ValueId w = b.param("w", {DType::kF16, {Dim::constant(2), c48, c48}});
  ValueId bias = b.param("bias", {DType::kF16, {c48}});
  ValueId alpha = b.scalar("alpha", DType::kF32, 0.5);
  ValueId w1 = b.op(Op::kReshape, {b.op(Op::kSlice, {w}, {DType::kF16, {Dim::constant(1), c48, c48}},
                                         testing::ints_attrs({1, 2, 0, -1, 0, -1}))},
                    {DType::kF16, {c48, c48}});
  ValueId h = b.op(Op::kMatMul, {x, w1}, {DType::kF16, {batch, c48}});
  ValueId act = b.unary(Op::kGelu, b.binary(Op::kAdd, h, bias));
  ValueId y = b.binary(Op::kAdd, x, b.binary(Op::kMul, b.cast(alpha, DType::kF16), act));
  b.output("y", y);
  ValueId t = b.input("t", {DType::kF32, {c32, c48}});
  ValueId wt = b.param("wt", {DType::kF32, {c48, c32}});
  b.output("z", b.unary(Op::kRelu, b.op(Op::kMatMul, {t, wt}, {DType::kF32, {c32, c32}})));
  REQUIRE(ir::verify(b.g) == "");
  Plan p = plan_program(b.g);
  INFO(plan::print_plan(p));
  REQUIRE(p.steps.size() == 2);
  GeneratedCode code = generate_cuda(p);
  const std::string& src = code.source;
  INFO(src);
  const Kernel& own = code.kernels.kernels[static_cast<size_t>(code.kernels.step_choices[0].back())];
  CHECK(own.symbol.rfind("gdl_s0_matmul__", 0) == 0);  // then its epilogue's ops
  CHECK(own.scalars_used == std::vector<int>{0});
  CHECK(src.find("const auto epi = [&](const float acc, const int i) -> float {") != std::string::npos);
  CHECK(src.find("const float r" + std::to_string(h) + " = gdl::fit<__half>(acc);") != std::string::npos);
  CHECK(src.find("return r" + std::to_string(y) + ";") != std::string::npos);
  CHECK(src.find(", epi, gdl::NoPrologue{}, smem);") != std::string::npos);  // the matmul kernel gets the epilogue
  // W[1] is read through its view, 48 * 48 * 2 bytes into the params.
  CHECK(testing::addresses(src, own, "reinterpret_cast<const __half*>(params + ", p.buffers[w].offset + 4608));
  CompileOptions options;
  options.cache_dir = "-";
  auto module = compile_cuda(src, options);
  INFO(module.status().message());
  CHECK(module.ok());
}

}  // namespace
}  // namespace gdl
