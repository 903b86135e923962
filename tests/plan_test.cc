// The planner: offsets, liveness, deps, the independent checker, and the
// CPU execution of a plan in a host arena laid out exactly as planned.
#include <doctest/doctest.h>

#include <algorithm>
#include <bit>
#include <cmath>
#include <cstring>
#include <random>

#include "ir_builder.h"
#include "plan/kernel_choice.h"
#include "plan.h"
#include "passes/ir_print.h"
#include "passes/ir_verify.h"
#include "pipeline.h"
#include "frontend/source_loader.h"
#include "plan/check.h"
#include "plan/fuse.h"
#include "plan/memory.h"
#include "plan/schedule.h"
#include "plan/print.h"
#include "plan/run_planned.h"

namespace gdl {
namespace {

using ir::Op;
using ir::ValueId;
using plan::Plan;
using plan::Region;
using testing::GraphBuilder;
using testing::type;

// Most tests here study the planner on one step per IR value; fusion has its
// own tests (fuse_test.cc) and the random graphs below run both ways.
constexpr plan::PlanOptions kNoFusion{false, false};

// Non-zero values of both signs, rounded to the dtype.
HostTensor random_tensor(std::mt19937& rng, DType dtype, std::vector<int64_t> shape, int64_t id_limit = 8) {
  HostTensor t;
  t.dtype = dtype;
  t.shape = std::move(shape);
  int64_t n = 1;
  for (int64_t e : t.shape) n *= e;
  std::uniform_real_distribution<double> magnitude(0.1, 2.0);
  std::uniform_int_distribution<int64_t> ids(-1, id_limit);  // -1 and id_limit are out of range on purpose
  for (int64_t i = 0; i < n; ++i) {
    double v = dtype == DType::kI32 ? static_cast<double>(ids(rng))
               : dtype == DType::kBool ? static_cast<double>(rng() & 1)
                                       : magnitude(rng) * ((rng() & 1) ? 1.0 : -1.0);
    t.data.push_back(round_to_dtype(v, dtype));
  }
  return t;
}

// Random data for every input and param of g at the given dims.
Bindings random_bindings(const ir::Graph& g, std::vector<int64_t> dims, uint32_t seed) {
  std::mt19937 rng(seed);
  Bindings b;
  b.dims = std::move(dims);
  for (const ir::Node& n : g.nodes)
    if (n.op == Op::kInput || n.op == Op::kParam)
      b.tensors[n.name] = random_tensor(rng, n.type.dtype, concrete_shape(n.type.shape, b.dims));
  return b;
}

// Bit-for-bit equality of doubles, except that any NaN equals any NaN.
bool same_bits(double a, double b) {
  if (std::isnan(a) && std::isnan(b)) return true;
  return std::bit_cast<uint64_t>(a) == std::bit_cast<uint64_t>(b);
}

// run_planned and interpret agree exactly on every output.
void expect_planned_equals_interpreted(const Plan& p, const Bindings& b) {
  auto expected = interpret(p.graph, b);
  REQUIRE_MESSAGE(expected.ok(), expected.status().message());
  auto got = plan::run_planned(p, b);
  REQUIRE_MESSAGE(got.ok(), got.status().message());
  REQUIRE(got->size() == expected->size());
  for (const auto& output : *expected) {
    const std::string& name = output.first;
    const HostTensor& want = output.second;
    INFO("output " << name);
    REQUIRE(got->count(name) == 1);
    const HostTensor& have = got->at(name);
    CHECK(have.dtype == want.dtype);
    CHECK(have.shape == want.shape);
    REQUIRE(have.data.size() == want.data.size());
    size_t mismatches = 0;
    for (size_t i = 0; i < want.data.size(); ++i) mismatches += !same_bits(have.data[i], want.data[i]);
    CHECK(mismatches == 0);
  }
}

bool buffers_overlap(const plan::Buffer& a, const plan::Buffer& b) {
  return a.region == b.region && a.offset < b.offset + b.bytes && b.offset < a.offset + a.bytes;
}

// x : f32[1024] -> ten elementwise ops -> y. Returns the plan; ids 1..10 are the ops.
Plan chain_plan() {
  GraphBuilder b;
  b.g.program_name = "chain";
  ValueId v = b.input("x", type(DType::kF32, {1024}));
  const Op ops[] = {Op::kTanh, Op::kNeg, Op::kSigmoid, Op::kAbs, Op::kSilu,
                    Op::kExp, Op::kNeg, Op::kTanh, Op::kRelu, Op::kGelu};
  for (Op op : ops) v = b.unary(op, v);
  b.output("y", v);
  REQUIRE(ir::verify(b.g) == "");
  return plan_program(b.g, kNoFusion);
}

// x -> a = exp(x), b = tanh(x) -> c = a + b -> y.
Plan diamond_plan() {
  GraphBuilder b;
  ValueId x = b.input("x", type(DType::kF32, {256}));
  ValueId left = b.unary(Op::kExp, x);
  ValueId right = b.unary(Op::kTanh, x);
  b.output("y", b.binary(Op::kAdd, left, right));
  REQUIRE(ir::verify(b.g) == "");
  return plan_program(b.g, kNoFusion);
}

TEST_CASE("plan: a chain of 10 elementwise ops ping-pongs between two reused slots") {
  Plan p = chain_plan();
  CHECK(plan::check_plan(p) == "");
  REQUIRE(p.steps.size() == 10);
  // Fixed slots: x at 0, y (value 10) at 4096; the nine intermediates
  // alternate between 8192 and 12288.
  CHECK(p.buffers[0].region == Region::kArena);
  CHECK(p.buffers[0].offset == 0);
  CHECK(p.buffers[10].offset == 4096);
  for (ValueId v = 1; v <= 9; ++v) {
    INFO("value %" << v);
    CHECK(p.buffers[v].region == Region::kArena);
    CHECK(p.buffers[v].bytes == 4096);
    CHECK(p.buffers[v].offset == (v % 2 == 1 ? 8192u : 12288u));
  }
  CHECK(p.arena_bytes == 16384);
  CHECK(p.naive_bytes == 11 * 4096);
  CHECK(p.live_lower_bound == 16384);
  CHECK(p.arena_bytes < p.naive_bytes);
  CHECK(p.params_bytes == 0);
  // A chain stays a chain: each step waits for exactly its predecessor (the
  // WAR/WAW edges of the reused slots are implied and dropped).
  CHECK(p.steps[0].deps.empty());
  for (size_t s = 1; s < 10; ++s) CHECK(p.steps[s].deps == std::vector<int>{static_cast<int>(s - 1)});
  CHECK(plan::print_plan(p).find("arena 16.0 KiB (naive 44.0 KiB, live lower bound 16.0 KiB), params 0 B") !=
        std::string::npos);

  Bindings b = random_bindings(p.graph, {}, 7);
  expect_planned_equals_interpreted(p, b);
}

TEST_CASE("plan: a diamond keeps both branches parallel") {
  Plan p = diamond_plan();
  CHECK(plan::check_plan(p) == "");
  REQUIRE(p.steps.size() == 3);
  CHECK(p.steps[0].deps.empty());
  CHECK(p.steps[1].deps.empty());  // the two branches do not wait for each other
  CHECK(p.steps[2].deps == std::vector<int>{0, 1});
  std::string dot = plan::plan_to_dot(p);
  CHECK(dot.find("s0 -> s2;") != std::string::npos);
  CHECK(dot.find("s1 -> s2;") != std::string::npos);
  CHECK(dot.find("s0 -> s1") == std::string::npos);
  CHECK(dot.find("v0 [shape=box") != std::string::npos);  // the input as a box
  CHECK(dot.find("o0 [shape=box") != std::string::npos);  // the output as a box
  CHECK(dot.find("exp\\nf32[256]") != std::string::npos);
  expect_planned_equals_interpreted(p, random_bindings(p.graph, {}, 11));
}

TEST_CASE("plan: the memory picture draws each arena value once, where and while it lives") {
  // mlp.gdl: 8 layers; buffers are reused, so bars share offsets at other steps.
  Plan p = plan_program(testing::graph_of(R"(program pic;
dim B in [1, 8];
input x : f32[B, 64];
param w : f32[64, 64];
output y : f32[B, 64];
let h = x;
for l in 0..4 {
  h = h + exp(h @ w);
}
y = h;
)"));
  const std::string svg = plan::plan_memory_svg(p);
  CHECK(svg.rfind("<svg xmlns=\"http://www.w3.org/2000/svg\"", 0) == 0);
  CHECK(svg.size() > 6);
  CHECK(svg.substr(svg.size() - 7) == "</svg>\n");
  // One bar (a rect with a tooltip) per value with arena storage of its own, and the frame.
  size_t owned = 0;
  for (size_t v = 0; v < p.graph.nodes.size(); ++v)
    owned += p.buffers[v].region == plan::Region::kArena && p.buffers[v].bytes > 0 &&
             !plan::is_view_node(p.graph, p.graph.nodes[v]);
  size_t bars = 0;
  for (size_t at = svg.find("<rect"); at != std::string::npos; at = svg.find("<rect", at + 1))
    bars += svg.compare(svg.find('>', at) + 1, 7, "<title>") == 0;
  CHECK(owned >= 5);  // x, the steps' results
  CHECK(bars == owned);
  // The input lives from before the first step; the output to past the last.
  CHECK(svg.find("input &quot;x&quot; f32[B, 64]: @") != std::string::npos);  // XML-escaped
  CHECK(svg.find("steps start to ") != std::string::npos);
  CHECK(svg.find(" to end</title>") != std::string::npos);
  // Every coordinate inside the picture.
  for (const char* attr : {" x=\"", " y=\"", " width=\"", " height=\""})
    for (size_t at = svg.find(attr); at != std::string::npos; at = svg.find(attr, at + 1)) {
      const double v = std::stod(svg.substr(at + std::strlen(attr)));
      CHECK(v >= 0);
      CHECK(v <= 960);
    }
}

TEST_CASE("plan: longer branches do not reuse each other's space, so they stay parallel") {
  GraphBuilder b;
  ValueId x = b.input("x", type(DType::kF32, {256}));
  ValueId a = b.unary(Op::kExp, x);      // step 0
  ValueId c = b.unary(Op::kTanh, x);     // step 1
  ValueId a2 = b.unary(Op::kNeg, a);     // step 2
  ValueId c2 = b.unary(Op::kAbs, c);     // step 3: in the schedule, a is dead here
  ValueId y = b.binary(Op::kAdd, a2, c2);
  b.output("y", y);
  Plan p = plan_program(b.g, kNoFusion);
  CHECK(plan::check_plan(p) == "");
  REQUIRE(p.steps.size() == 5);
  CHECK(p.steps[1].deps.empty());
  CHECK(p.steps[2].deps == std::vector<int>{0});
  CHECK(p.steps[3].deps == std::vector<int>{1});  // taking a's slot would have added a wait on step 2
  CHECK(p.steps[4].deps == std::vector<int>{2, 3});
  for (ValueId u : {a, c, a2, c2})
    for (ValueId v : {a, c, a2, c2})
      if (u != v) CHECK_FALSE(buffers_overlap(p.buffers[u], p.buffers[v]));
  CHECK(p.arena_bytes == 6 * 1024);
  CHECK(p.live_lower_bound == 5 * 1024);
  expect_planned_equals_interpreted(p, random_bindings(p.graph, {}, 12));
}

TEST_CASE("plan: a chain of 20000 steps still ping-pongs between two slots") {
  GraphBuilder b;
  ValueId v = b.input("x", type(DType::kF32, {64}));
  const Op ops[] = {Op::kTanh, Op::kNeg, Op::kAbs, Op::kRelu};
  for (int i = 0; i < 20000; ++i) v = b.unary(ops[i % 4], v);
  b.output("y", v);
  Plan p = plan_program(b.g, kNoFusion);
  REQUIRE(p.steps.size() == 20000);
  // x and y, then the intermediates in two slots of 256 bytes.
  CHECK(p.arena_bytes == 4 * 256);
  CHECK(p.live_lower_bound == 4 * 256);
  for (ValueId u = 1; u < 20000; ++u) CHECK(p.buffers[u].offset == (u % 2 == 1 ? 512u : 768u));
}

// 10,000 parallel branches joined by one fused step: every branch's buffers
// block every other's, so nothing is shared, and placing each costs log n
// (the holes of the placed buffers), not a test against every placed one.
// No time bound here (a loaded machine makes one flaky): a quadratic
// planner took 1.4 s for this pass, a linear one about 0.05 s.
TEST_CASE("plan: 10000 parallel branches share nothing and plan without overlap") {
  const std::string text =
      "program big;\ninput x : f32[64];\noutput y : f32[64];\nlet h = x;\n"
      "for i in 0..10000 {\n  h = h + softmax(x * i);\n}\ny = h;\n";
  SourceFile file = source_from_string("big.gdl", text);
  DiagnosticSink diags;
  std::optional<ir::Graph> g = compile_to_ir(file, diags);
  REQUIRE(g.has_value());
  Plan p = plan::schedule_steps(std::move(*g));
  plan::fuse_steps(p, {});
  REQUIRE(p.steps.size() == 20001);
  plan::plan_memory(p);
  CHECK(p.arena_bytes == p.naive_bytes);
  CHECK(p.arena_bytes == (2 * 10000 + 2) * 256);  // x, y and each branch's two buffers
  std::vector<std::pair<uint64_t, uint64_t>> ranges;  // [offset, end) of every arena owner
  for (size_t v = 0; v < p.buffers.size(); ++v)
    if (p.buffers[v].region == Region::kArena && p.buffers[v].bytes > 0)
      ranges.push_back({p.buffers[v].offset, p.buffers[v].offset + p.buffers[v].bytes});
  std::sort(ranges.begin(), ranges.end());
  ranges.erase(std::unique(ranges.begin(), ranges.end()), ranges.end());  // views share their owner's
  for (size_t i = 1; i < ranges.size(); ++i) CHECK(ranges[i - 1].second <= ranges[i].first);
}

TEST_CASE("plan: leaves get the storage their role needs") {
  GraphBuilder b;
  ValueId x = b.input("x", type(DType::kF16, {3, 5}));
  ValueId unused = b.input("unused", type(DType::kF32, {7}));
  ValueId w1 = b.param("w1", type(DType::kF16, {5, 4}));
  ValueId w2 = b.param("w2", type(DType::kF16, {4}));
  ValueId alpha = b.scalar("alpha", DType::kF32, 0.5);
  ValueId two = b.constant(2.0, DType::kF16);
  ValueId h = b.op(Op::kMatMul, {x, w1}, type(DType::kF16, {3, 4}));
  ValueId y = b.binary(Op::kMul, b.binary(Op::kAdd, h, w2), two);
  b.output("y", y);
  (void)alpha;
  Plan p = plan_program(b.g, kNoFusion);
  CHECK(plan::check_plan(p) == "");
  CHECK(p.buffers[unused].region == Region::kArena);  // binding it must still work
  CHECK(p.buffers[unused].bytes == 28);
  CHECK(p.buffers[w1].region == Region::kParams);
  CHECK(p.buffers[w1].offset == 0);
  CHECK(p.buffers[w2].region == Region::kParams);
  CHECK(p.buffers[w2].offset == 256);
  CHECK(p.params_bytes == 512);
  CHECK(p.buffers[alpha].region == Region::kNone);
  CHECK(p.buffers[two].region == Region::kNone);
  // Constants are taken by value: the multiply reads only the sum's buffer.
  CHECK(p.steps.back().reads == std::vector<ValueId>{y - 1});
  for (ValueId v : {x, unused, y})
    for (ValueId u = 0; u < static_cast<ValueId>(p.buffers.size()); ++u)
      if (u != v && p.buffers[u].region == Region::kArena) CHECK_FALSE(buffers_overlap(p.buffers[u], p.buffers[v]));
  Bindings bind = random_bindings(p.graph, {}, 3);
  bind.scalars["alpha"] = 1.5;
  expect_planned_equals_interpreted(p, bind);
}

TEST_CASE("plan: a reshape is a view of its argument's storage") {
  GraphBuilder b;
  Dim batch = b.dim("B", 1, 3);
  ValueId x = b.input("x", {DType::kF32, {batch, Dim::constant(4), Dim::constant(6)}});
  ValueId a = b.unary(Op::kExp, x);                                                        // step 0
  ValueId r = b.op(Op::kReshape, {a}, {DType::kF32, {batch, Dim::constant(24)}});          // view of a
  ValueId n = b.unary(Op::kNeg, x);                                                        // step 1: a still live via r
  ValueId s = b.op(Op::kSum, {r}, {DType::kF32, {batch}}, testing::axis_attrs(1));         // step 2
  ValueId t = b.op(Op::kSum, {n}, {DType::kF32, {batch, Dim::constant(6)}}, testing::axis_attrs(1));
  ValueId z = b.op(Op::kReshape, {x}, {DType::kF32, {Dim::constant(24), batch}});          // output over an input
  ValueId w = b.op(Op::kReshape, {t}, {DType::kF32, {Dim::constant(6), batch}});           // output over an intermediate
  b.output("s", s);
  b.output("z", z);
  b.output("w", w);
  REQUIRE(ir::verify(b.g) == "");
  Plan p = plan_program(b.g);
  CHECK(plan::check_plan(p) == "");

  CHECK(p.buffers[r].region == p.buffers[a].region);
  CHECK(p.buffers[r].offset == p.buffers[a].offset);
  CHECK(p.buffers[r].bytes == p.buffers[a].bytes);
  auto computes = [&](ValueId v) {
    return std::any_of(p.steps.begin(), p.steps.end(), [&](const plan::Step& st) { return st.result == v; });
  };
  CHECK_FALSE(computes(r));
  CHECK(computes(z));  // an output never aliases an input: it gets a copy step
  CHECK_FALSE(buffers_overlap(p.buffers[z], p.buffers[x]));
  CHECK_FALSE(computes(w));  // a view of an intermediate, which then owns an output slot
  CHECK(p.buffers[w].offset == p.buffers[t].offset);
  // a's storage lives until the sum reads it through r.
  CHECK_FALSE(buffers_overlap(p.buffers[n], p.buffers[a]));
  CHECK(p.steps.size() == 5);  // exp, neg, sum, sum, reshape-copy
  // The valid-dims block 256 @0 (a program with run-time dims); x 512 @256;
  // outputs s 256 @768, z 512 @1024, t (w's storage) 256 @1536; a and n
  // (each 288 bytes at B = 3, aligned to 512) are live together.
  CHECK(p.buffers[x].offset == 256);
  CHECK(p.buffers[s].offset == 768);
  CHECK(p.buffers[z].offset == 1024);
  CHECK(p.buffers[t].offset == 1536);
  CHECK(p.buffers[a].offset == 1792);
  CHECK(p.buffers[n].offset == 2304);
  CHECK(p.buffers[a].bytes == 288);
  CHECK(p.arena_bytes == 2816);
  CHECK(p.naive_bytes == 2816);
  CHECK(p.live_lower_bound == 2816);
  // Every run-time dim binding is planned for the largest one and runs exact.
  for (int64_t batch_value : {1, 2, 3}) {
    INFO("B = " << batch_value);
    expect_planned_equals_interpreted(p, random_bindings(p.graph, {batch_value}, 100 + batch_value));
  }
}

TEST_CASE("plan: an output that is a leaf gets a copy step of its own") {
  GraphBuilder b;
  ValueId x = b.input("x", type(DType::kF32, {3}));
  ValueId w = b.param("w", type(DType::kF32, {3}));
  ValueId alpha = b.scalar("alpha", DType::kF32, 0.5);
  ValueId k = b.constant(-3.25);
  b.output("sum", b.binary(Op::kAdd, x, w));
  b.output("x_again", x);
  b.output("w_again", w);
  b.output("alpha", alpha);
  b.output("k", k);
  REQUIRE(ir::verify(b.g) == "");
  Plan p = plan_program(b.g);
  CHECK(ir::verify(p.graph) == "");
  CHECK(plan::check_plan(p) == "");
  REQUIRE(p.graph.nodes.size() == b.g.nodes.size() + 4);
  REQUIRE(p.steps.size() == 5);  // the add and four copies
  for (size_t i = 1; i < 5; ++i) {
    const ir::Output& o = p.graph.outputs[i];
    INFO("output " << o.name);
    CHECK(o.value == static_cast<ValueId>(b.g.nodes.size() + i - 1));
    CHECK(p.graph.node(o.value).op == Op::kReshape);
    CHECK(p.steps[i].result == o.value);
    CHECK(p.buffers[o.value].region == Region::kArena);
    CHECK_FALSE(buffers_overlap(p.buffers[o.value], p.buffers[x]));
  }
  Bindings bind = random_bindings(p.graph, {}, 9);
  bind.scalars["alpha"] = 4.0;
  expect_planned_equals_interpreted(p, bind);
  auto out = plan::run_planned(p, bind);
  REQUIRE(out.ok());
  CHECK(out->at("k").data == std::vector<double>{-3.25});
  CHECK(out->at("alpha").data == std::vector<double>{4.0});
  CHECK(out->at("x_again").data == bind.tensors.at("x").data);
}

// ----------------------------------------------------------- broken plans

TEST_CASE("check_plan: two values live at the same time may not overlap") {
  Plan p = chain_plan();
  p.buffers[2] = p.buffers[1];  // v1 is still read while v2 is written
  std::string problem = plan::check_plan(p);
  CHECK(problem.find("live at the same time") != std::string::npos);
  CHECK(problem.find("%1") != std::string::npos);
  CHECK(problem.find("%2") != std::string::npos);
  auto run = plan::run_planned(p, random_bindings(p.graph, {}, 1));
  CHECK(run.status().code() == StatusCode::kInternal);
}

TEST_CASE("check_plan: an input's space is never reused, even after its last read") {
  Plan p = chain_plan();
  p.buffers[9].offset = p.buffers[0].offset;  // x is dead after step 0 in the schedule
  CHECK(plan::check_plan(p).find("live at the same time") != std::string::npos);
}

TEST_CASE("check_plan: an output's space is never used before it is written") {
  Plan p = chain_plan();
  p.buffers[1].offset = p.buffers[10].offset;  // y is written only by the last step
  CHECK(plan::check_plan(p).find("live at the same time") != std::string::npos);
}

TEST_CASE("check_plan: a missing dep is found") {
  Plan p = diamond_plan();
  p.steps[2].deps = {1};  // the add no longer waits for exp
  std::string problem = plan::check_plan(p);
  CHECK(problem.find("step 2 (add) does not wait for step 0 (exp)") != std::string::npos);
  CHECK(problem.find("read-after-write") != std::string::npos);
}

TEST_CASE("check_plan: missing write-after-read and write-after-write deps on a reused slot are found") {
  GraphBuilder b;
  ValueId x = b.input("x", type(DType::kF32, {256}));
  ValueId a = b.unary(Op::kExp, x);   // step 0
  ValueId c = b.unary(Op::kTanh, x);  // step 1
  ValueId a2 = b.unary(Op::kNeg, a);  // step 2: a's last read
  ValueId c2 = b.unary(Op::kAbs, c);  // step 3
  b.output("y", b.binary(Op::kAdd, a2, c2));
  Plan p = plan_program(b.g, kNoFusion);
  REQUIRE(plan::check_plan(p) == "");
  REQUIRE(p.steps[3].deps == std::vector<int>{1});
  // Put c2 into a's slot: sound in the schedule order, but step 3 must now
  // also wait for step 0 (which wrote there) and step 2 (which read there).
  p.buffers[c2].offset = p.buffers[a].offset;
  std::string problem = plan::check_plan(p);
  CHECK(problem.find("step 3 (abs) does not wait for step 0 (exp) despite a write-after-write conflict") !=
        std::string::npos);
  p.steps[3].deps = {0, 1};
  problem = plan::check_plan(p);
  CHECK(problem.find("step 3 (abs) does not wait for step 2 (neg) despite a write-after-read conflict") !=
        std::string::npos);
  p.steps[3].deps = {1, 2};  // step 2 waits for step 0, so this covers both
  CHECK(plan::check_plan(p) == "");
  expect_planned_equals_interpreted(p, random_bindings(p.graph, {}, 5));
}

TEST_CASE("check_plan: a misaligned offset is found") {
  Plan p = chain_plan();
  p.buffers[3].offset += 16;
  p.arena_bytes += plan::kAlignment;
  CHECK(plan::check_plan(p).find("is not aligned to 256") != std::string::npos);
}

TEST_CASE("check_plan: a buffer outside its region, a too small buffer, an unwritten read") {
  {
    Plan p = chain_plan();
    p.arena_bytes = 12288;
    CHECK(plan::check_plan(p).find("outside its region") != std::string::npos);
  }
  {
    Plan p = chain_plan();
    p.buffers[4].bytes = 100;
    CHECK(plan::check_plan(p).find("needs 4096 bytes") != std::string::npos);
  }
  {
    Plan p = chain_plan();
    std::swap(p.steps[3], p.steps[4]);  // step 3 now reads a value step 4 writes
    p.steps[3].deps = {2};
    p.steps[4].deps = {3};
    CHECK(plan::check_plan(p).find("before any earlier step writes it") != std::string::npos);
  }
  {
    Plan p = diamond_plan();
    p.steps.pop_back();
    CHECK(plan::check_plan(p).find("computed by no step") != std::string::npos);
  }
}

TEST_CASE("run_planned: bindings are validated first") {
  Plan p = diamond_plan();
  Bindings b;
  auto r = plan::run_planned(p, b);
  CHECK(r.status().code() == StatusCode::kNotFound);
}

// --------------------------------------------------- run_planned == interpret

TEST_CASE("run_planned: an MLP block with a run-time batch, params, a scalar and a constant") {
  const Dim c8 = Dim::constant(8), c16 = Dim::constant(16);
  for (DType dt : {DType::kF32, DType::kF16, DType::kBF16}) {
    GraphBuilder g;
    Dim batch = g.dim("B", 1, 8);
    ValueId x = g.input("x", {dt, {batch, c8}});
    ValueId w1 = g.param("w1", {dt, {c8, c16}});
    ValueId bias = g.param("bias", {dt, {c16}});
    ValueId w2 = g.param("w2", {dt, {c16, c8}});
    ValueId gamma = g.param("gamma", {dt, {c8}});
    ValueId h = g.op(Op::kMatMul, {x, w1}, {dt, {batch, c16}});
    h = g.unary(Op::kGelu, g.binary(Op::kAdd, h, bias));
    h = g.op(Op::kMatMul, {h, w2}, {dt, {batch, c8}});
    if (dt == DType::kF32) h = g.binary(Op::kMul, h, g.scalar("alpha", DType::kF32, 0.25));
    h = g.binary(Op::kAdd, x, g.binary(Op::kMul, h, g.constant(0.5, dt)));
    ValueId n = g.op(Op::kLayerNorm, {h, gamma}, {dt, {batch, c8}}, testing::value_attrs(1e-5));
    ValueId y = g.op(Op::kSoftmax, {n}, {dt, {batch, c8}}, testing::axis_attrs(1));
    g.output("y", y);
    g.output("h", h);
    REQUIRE(ir::verify(g.g) == "");
    Plan p = plan_program(g.g);
    REQUIRE(plan::check_plan(p) == "");
    // f32: w1 512 + bias 64->256 + w2 512 + gamma 32->256; f16/bf16: four 256-byte slots.
    CHECK(p.params_bytes == (dt == DType::kF32 ? 1536u : 1024u));
    for (int64_t bv : {1, 5, 8}) {
      INFO(dtype_name(dt) << " B = " << bv);
      Bindings bind = random_bindings(p.graph, {bv}, static_cast<uint32_t>(bv));
      if (dt == DType::kF32) bind.scalars["alpha"] = -1.25;
      expect_planned_equals_interpreted(p, bind);
    }
  }
}

TEST_CASE("run_planned: gather and attention with a device scalar length") {
  GraphBuilder b;
  Dim batch = b.dim("B", 1, 4);
  const Dim nh = Dim::constant(2), d = Dim::constant(4), t = Dim::constant(6);
  ValueId table = b.param("table", {DType::kF32, {Dim::constant(10), Dim::constant(8)}});
  ValueId ids = b.input("ids", {DType::kI32, {batch}});
  ValueId len = b.input("len", {DType::kI32, {}});
  ValueId k = b.input("k", {DType::kF32, {batch, nh, t, d}});
  ValueId v = b.input("v", {DType::kF32, {batch, nh, t, d}});
  ValueId e = b.op(Op::kGather, {table, ids}, {DType::kF32, {batch, Dim::constant(8)}});
  ValueId q = b.op(Op::kReshape, {e}, {DType::kF32, {batch, nh, d}});
  ValueId att = b.op(Op::kAttention, {q, k, v, len}, {DType::kF32, {batch, nh, d}}, testing::value_attrs(0.5));
  ValueId flat = b.op(Op::kReshape, {att}, {DType::kF32, {batch, Dim::constant(8)}});
  b.output("out", b.binary(Op::kAdd, flat, e));
  REQUIRE(ir::verify(b.g) == "");
  Plan p = plan_program(b.g);
  REQUIRE(plan::check_plan(p) == "");
  CHECK(p.buffers[len].bytes == 4);
  CHECK(p.buffers[q].offset == p.buffers[e].offset);
  for (int64_t bv : {1, 4})
    for (int len_value : {0, 3, 6, 9}) {
      INFO("B = " << bv << ", len = " << len_value);
      Bindings bind = random_bindings(p.graph, {bv}, static_cast<uint32_t>(bv * 10 + len_value));
      bind.tensors["len"].data = {static_cast<double>(len_value)};
      expect_planned_equals_interpreted(p, bind);
    }
}

// ------------------------------------------------------ random graphs

// Builds random well-typed compositions of elementwise ops, matmul,
// reductions, reshape, softmax, transpose and concat.
class RandomGraph {
 public:
  explicit RandomGraph(uint32_t seed) : rng_(seed) {}

  ir::Graph build() {
    dtype_ = std::array{DType::kF32, DType::kF16, DType::kBF16}[pick(3)];
    if (pick(2)) batch_ = b_.dim("B", 1, 1 + static_cast<int64_t>(pick(5)));
    int inputs = 1 + static_cast<int>(pick(3));
    for (int i = 0; i < inputs; ++i) pool_.push_back(b_.input("x" + std::to_string(i), {dtype_, random_shape()}));
    int ops = 4 + static_cast<int>(pick(14));
    for (int i = 0; i < ops; ++i) add_random_op();
    // Outputs: the last value and up to two others (any value, leaves included).
    b_.output("out0", pool_.back());
    int extra = static_cast<int>(pick(3));
    std::vector<ValueId> used = {pool_.back()};
    for (int i = 0; i < extra; ++i) {
      ValueId v = pool_[pick(pool_.size())];
      if (std::find(used.begin(), used.end(), v) != used.end()) continue;
      used.push_back(v);
      b_.output("out" + std::to_string(used.size() - 1), v);
    }
    return b_.g;
  }

  bool has_batch() const { return batch_.has_value(); }

 private:
  size_t pick(size_t n) { return std::uniform_int_distribution<size_t>(0, n - 1)(rng_); }
  Dim extent() { return Dim::constant(1 + static_cast<int64_t>(pick(5))); }

  Shape random_shape() {
    Shape s;
    size_t rank = 1 + pick(3);
    for (size_t i = 0; i < rank; ++i) s.push_back(extent());
    if (batch_ && pick(3)) s[0] = *batch_;
    return s;
  }

  const TensorType& type_of(ValueId v) const { return b_.type_of(v); }
  ValueId any() { return pool_[pick(pool_.size())]; }
  ValueId any_with_rank(int min_rank) {
    std::vector<ValueId> ok;
    for (ValueId v : pool_)
      if (type_of(v).rank() >= min_rank) ok.push_back(v);
    return ok.empty() ? ir::kNoValue : ok[pick(ok.size())];
  }

  void add_random_op() {
    switch (pick(9)) {
      case 0: case 1: return add_unary();
      case 2: case 3: return add_binary();
      case 4: return add_matmul();
      case 5: return add_reduce();
      case 6: return pick(3) ? add_reshape() : add_slice();
      case 7: return add_softmax_or_transpose();
      default: return add_concat();
    }
  }

  void add_unary() {
    const Op ops[] = {Op::kTanh, Op::kSigmoid, Op::kNeg, Op::kAbs, Op::kRelu, Op::kSilu, Op::kGelu, Op::kExp};
    pool_.push_back(b_.unary(ops[pick(8)], any()));
  }

  void add_binary() {
    const Op ops[] = {Op::kAdd, Op::kSub, Op::kMul, Op::kMax, Op::kMin};
    ValueId a = any();
    std::vector<ValueId> partners;
    for (ValueId v : pool_)
      if (broadcast_shapes(type_of(a).shape, type_of(v).shape)) partners.push_back(v);
    ValueId other;
    switch (pick(4)) {
      case 0: other = b_.constant(0.5 + static_cast<double>(pick(4)), dtype_); break;
      case 1: {
        // A run-time scalar, or a rank-0 value computed from one (cheap to
        // recompute: fusion duplicates it instead of storing it).
        ValueId scalar = b_.scalar("s" + std::to_string(scalars_++), DType::kF32, 1.5);
        if (dtype_ == DType::kF32 && pick(2)) other = scalar;
        else if (dtype_ == DType::kF32) other = b_.binary(Op::kMul, scalar, b_.constant(-0.75));
        else other = b_.cast(scalar, dtype_);
        break;
      }
      default: other = partners[pick(partners.size())]; break;
    }
    if (pick(2)) std::swap(a, other);
    pool_.push_back(b_.binary(ops[pick(5)], a, other));
  }

  void add_matmul() {
    ValueId a = any_with_rank(2);
    if (a == ir::kNoValue) return add_unary();
    const Shape s = type_of(a).shape;  // a copy: adding the param below moves the nodes
    Dim k = s[s.size() - 1];
    Dim n = extent();
    Shape ws = {k, n};
    if (pick(2) && s.size() == 3) ws.insert(ws.begin(), s[0]);  // batched weights
    if (pick(2))  // normalized first: a candidate for a norm prologue (fuse.cc)
      a = b_.op(pick(2) ? Op::kLayerNorm : Op::kRmsNorm, {a}, {dtype_, s}, testing::value_attrs(1e-5));
    ValueId w = b_.param("w" + std::to_string(params_++), {dtype_, ws});
    Shape out(s.begin(), s.end() - 1);
    out.push_back(n);
    pool_.push_back(b_.op(Op::kMatMul, {a, w}, {dtype_, out}));
  }

  void add_reduce() {
    ValueId a = any_with_rank(1);
    if (a == ir::kNoValue) return add_unary();
    const Shape s = type_of(a).shape;
    int axis = static_cast<int>(pick(s.size()));
    bool keep = pick(2);
    Shape out = s;
    if (keep) out[static_cast<size_t>(axis)] = Dim::constant(1);
    else out.erase(out.begin() + axis);
    const Op ops[] = {Op::kSum, Op::kMean, Op::kReduceMax};
    pool_.push_back(b_.op(ops[pick(3)], {a}, {dtype_, out}, testing::axis_attrs(axis, keep)));
  }

  // Same constant product and the same run-time dims, rearranged.
  void add_reshape() {
    ValueId a = any();
    int64_t product = 1;
    std::vector<Dim> runtime;
    for (const Dim& d : type_of(a).shape) {
      if (d.is_runtime()) runtime.push_back(d);
      else product *= d.extent;
    }
    Shape out;
    int64_t rest = product;
    while (rest > 1 && out.size() + runtime.size() < 3) {
      std::vector<int64_t> divisors;
      for (int64_t f = 2; f <= rest; ++f)
        if (rest % f == 0) divisors.push_back(f);
      int64_t f = divisors[pick(divisors.size())];
      out.push_back(Dim::constant(f));
      rest /= f;
    }
    if (rest > 1 || out.empty()) out.push_back(Dim::constant(rest));
    for (const Dim& d : runtime) out.insert(out.begin() + static_cast<std::ptrdiff_t>(pick(out.size() + 1)), d);
    if (out.size() < 4 && pick(3) == 0) out.insert(out.begin() + static_cast<std::ptrdiff_t>(pick(out.size() + 1)), Dim::constant(1));
    pool_.push_back(b_.op(Op::kReshape, {a}, {dtype_, out}));
  }

  // A static slice: half the time contiguous in row-major order (ranges of
  // one element, then one axis with any range, then whole axes), which the
  // planner turns into a view; a run-time axis is kept whole or sliced to
  // [0, 1) (its lower bound is at least 1).
  void add_slice() {
    ValueId a = any_with_rank(1);
    if (a == ir::kNoValue) return add_unary();
    const Shape s = type_of(a).shape;
    bool contiguous = pick(2);
    size_t partial = pick(s.size());
    std::vector<int64_t> bounds;
    Shape out;
    for (size_t axis = 0; axis < s.size(); ++axis) {
      const Dim& d = s[axis];
      int64_t start = 0, stop = -1;
      if (d.is_runtime()) {
        if ((contiguous && axis < partial) || (!contiguous && pick(2))) stop = 1;
      } else if (contiguous && axis > partial) {
        stop = pick(2) ? -1 : d.extent;
      } else {
        start = static_cast<int64_t>(pick(static_cast<size_t>(d.extent)));
        int64_t length = contiguous && axis < partial ? 1 : 1 + static_cast<int64_t>(pick(static_cast<size_t>(d.extent - start)));
        stop = start + length;
      }
      bounds.push_back(start);
      bounds.push_back(stop);
      out.push_back(stop == -1 ? (d.is_runtime() ? d : Dim::constant(d.extent - start)) : Dim::constant(stop - start));
    }
    pool_.push_back(b_.op(Op::kSlice, {a}, {dtype_, out}, testing::ints_attrs(bounds)));
  }

  void add_softmax_or_transpose() {
    ValueId a = any_with_rank(1);
    if (a == ir::kNoValue) return add_unary();
    const Shape s = type_of(a).shape;
    if (pick(2) || s.size() < 2) {
      int axis = static_cast<int>(pick(s.size()));
      pool_.push_back(b_.op(Op::kSoftmax, {a}, type_of(a), testing::axis_attrs(axis)));
      return;
    }
    std::vector<int64_t> perm(s.size());
    for (size_t i = 0; i < perm.size(); ++i) perm[i] = static_cast<int64_t>(i);
    std::shuffle(perm.begin(), perm.end(), rng_);
    Shape out;
    for (int64_t p : perm) out.push_back(s[static_cast<size_t>(p)]);
    pool_.push_back(b_.op(Op::kTranspose, {a}, {dtype_, out}, testing::ints_attrs(perm)));
  }

  // Concatenates values that agree off a constant axis.
  void add_concat() {
    ValueId a = any_with_rank(1);
    if (a == ir::kNoValue) return add_unary();
    const Shape s = type_of(a).shape;
    std::vector<size_t> axes;
    for (size_t i = 0; i < s.size(); ++i)
      if (!s[i].is_runtime()) axes.push_back(i);
    if (axes.empty()) return add_unary();
    size_t axis = axes[pick(axes.size())];
    std::vector<ValueId> args = {a};
    int64_t total = s[axis].extent;
    for (ValueId v : pool_) {
      const Shape& t = type_of(v).shape;
      if (t.size() != s.size() || t[axis].is_runtime() || args.size() >= 3 || pick(2)) continue;
      bool agree = true;
      for (size_t i = 0; i < s.size(); ++i) agree = agree && (i == axis || t[i] == s[i]);
      if (agree) args.push_back(v), total += t[axis].extent;
    }
    if (args.size() == 1) args.push_back(a), total *= 2;
    Shape out = s;
    out[axis] = Dim::constant(total);
    pool_.push_back(b_.op(Op::kConcat, args, {dtype_, out}, testing::axis_attrs(static_cast<int>(axis))));
  }

  std::mt19937 rng_;
  GraphBuilder b_;
  DType dtype_ = DType::kF32;
  std::optional<Dim> batch_;
  std::vector<ValueId> pool_;
  int params_ = 0, scalars_ = 0;
};

TEST_CASE("plan property: 200 random graphs plan soundly and run bit-exact, with and without fusion") {
  size_t total_steps = 0, fused_steps = 0, multi_value_steps = 0, reused = 0, views = 0, copies = 0, slice_views = 0,
         epilogues = 0, prologues = 0;
  for (uint32_t seed = 1; seed <= 200; ++seed) {
    RandomGraph gen(seed);
    ir::Graph g = gen.build();
    INFO("seed " << seed << "\n" << ir::print_ir(g));
    REQUIRE(ir::verify(g) == "");
    for (bool fuse : {false, true}) {
      INFO((fuse ? "fused" : "one step per value"));
      Plan p = plan_program(g, fuse ? plan::PlanOptions{} : kNoFusion);
      INFO(plan::print_plan(p));
      REQUIRE(plan::check_plan(p) == "");
      CHECK(p.live_lower_bound <= p.arena_bytes);
      CHECK(p.arena_bytes <= p.naive_bytes);
      (fuse ? fused_steps : total_steps) += p.steps.size();
      std::vector<bool> written(p.graph.nodes.size(), false);
      for (const plan::Step& st : p.steps) {
        const ir::Node& n = p.graph.node(st.result);
        written[static_cast<size_t>(st.result)] = true;
        if (!fuse) copies += n.op == Op::kReshape;
        const size_t anchor = matmul_prologue(p.graph, st.values) == ir::kNoValue ? 0 : 1;
        if (fuse) epilogues += st.values.size() > anchor + 1 && p.graph.node(st.values[anchor]).op == Op::kMatMul;
        if (fuse) prologues += anchor;
        if (fuse) multi_value_steps += st.values.size() > 1;
      }
      for (size_t v = 0; v < p.graph.nodes.size(); ++v) {
        Op op = p.graph.nodes[v].op;
        if (!fuse) views += op == Op::kReshape;  // views + copies
        if (!fuse) slice_views += op == Op::kSlice && !written[v];
      }
      if (!fuse) reused += p.arena_bytes < p.naive_bytes;
      // Every dep is needed: dropping any one of them breaks the plan.
      for (size_t s = 0; s < p.steps.size(); ++s)
        for (size_t d = 0; d < p.steps[s].deps.size(); ++d) {
          Plan weaker = p;
          weaker.steps[s].deps.erase(weaker.steps[s].deps.begin() + static_cast<std::ptrdiff_t>(d));
          CHECK(plan::check_plan(weaker) != "");
        }
      std::vector<std::vector<int64_t>> dim_values = {{}};
      if (!g.dims.empty()) dim_values = {{g.dims[0].lo}, {g.dims[0].hi}, {(g.dims[0].lo + g.dims[0].hi) / 2}};
      for (const auto& dims : dim_values) expect_planned_equals_interpreted(p, random_bindings(g, dims, seed));
    }
  }
  MESSAGE("random graphs: " << total_steps << " steps (" << fused_steps << " fused, " << multi_value_steps
                             << " of several values, " << epilogues << " matmul epilogues, " << prologues
                             << " norm prologues), " << views - copies
                             << " reshape views, " << slice_views << " slice views, " << copies
                             << " copy steps (outputs over leaves), " << reused << " graphs reuse arena space");
  CHECK(total_steps > 1000);
  CHECK(fused_steps + 150 < total_steps);
  CHECK(multi_value_steps > 100);
  CHECK(epilogues >= 10);
  CHECK(slice_views > 20);
  CHECK(reused > 50);  // most random graphs reuse some space
}

}  // namespace
}  // namespace gdl
