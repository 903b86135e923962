// Successful lowering of small programs: unrolling, folding, inlining, shapes
// and dtypes of the IR that lower_module builds.
#include "lower/lower.h"

#include <doctest/doctest.h>

#include <cmath>
#include <fstream>
#include <sstream>

#include "frontend/check.h"
#include "interp/interp.h"
#include "frontend/parse.h"
#include "frontend/source_loader.h"
#include "passes/ir_print.h"
#include "passes/ir_verify.h"

namespace gdl {
namespace {

struct Lowered {
  std::optional<ir::Graph> graph;
  DiagnosticSink diags;
  std::string rendered;
};

// parse -> check -> lower, as the pipeline does.
Lowered lower_text(const std::string& text) {
  Lowered out;
  SourceFile file = source_from_string("test.gdl", text);
  std::unique_ptr<ast::Module> module = parse_module(file, out.diags);
  if (module) {
    check_module(*module, out.diags);
    if (!out.diags.has_errors()) out.graph = lower_module(*module, out.diags);
  }
  out.rendered = out.diags.render(file);
  return out;
}

// Lowers text that must give a valid graph with no diagnostic at all.
ir::Graph lower_clean(const std::string& text) {
  Lowered l = lower_text(text);
  INFO(l.rendered);
  REQUIRE(l.graph.has_value());
  CHECK(l.diags.all().empty());
  CHECK(ir::verify(*l.graph) == "");
  return std::move(*l.graph);
}

int count(const ir::Graph& g, ir::Op op) {
  int n = 0;
  for (const ir::Node& node : g.nodes) n += node.op == op;
  return n;
}

const ir::Node& only(const ir::Graph& g, ir::Op op) {
  REQUIRE(count(g, op) == 1);
  for (const ir::Node& node : g.nodes)
    if (node.op == op) return node;
  return g.nodes.front();
}

const ir::Node& output_node(const ir::Graph& g, const std::string& name) {
  for (const ir::Output& o : g.outputs)
    if (o.name == name) return g.node(o.value);
  FAIL("no output " << name);
  return g.nodes.front();
}

std::string read_file(const std::string& path) {
  std::ifstream in(path);
  std::stringstream s;
  s << in.rdbuf();
  return s.str();
}

TEST_CASE("lower: a for loop of 3 iterations gives 3 copies of its body") {
  ir::Graph g = lower_clean(R"(program p;
input x : f32[8];
output y : f32[8];
let h = x;
for i in 0..3 {
  h = exp(h) * 2.0;
}
y = h;
)");
  CHECK(count(g, ir::Op::kExp) == 3);
  CHECK(count(g, ir::Op::kMul) == 3);
  CHECK(count(g, ir::Op::kConstant) == 3);
  // The copies chain: each exp reads the previous iteration's product.
  std::vector<ir::ValueId> exps;
  for (size_t i = 0; i < g.nodes.size(); ++i)
    if (g.nodes[i].op == ir::Op::kExp) exps.push_back(static_cast<ir::ValueId>(i));
  CHECK(g.node(exps[1]).args[0] == exps[0] + 2);
  CHECK(g.nodes[exps[0]].loc.line == 6);
  CHECK(g.outputs.size() == 1);
  CHECK(output_node(g, "y").op == ir::Op::kMul);
}

TEST_CASE("lower: the loop variable is a compile-time integer") {
  ir::Graph g = lower_clean(R"(program p;
param W : f32[4, 16];
output y : f32[16];
let acc = W[0];
for l in 1..4 {
  acc = acc + W[l] * (l * 2);
}
y = acc;
)");
  // W[0..3] are four slices, each followed by the reshape that drops axis 0.
  CHECK(count(g, ir::Op::kSlice) == 4);
  CHECK(count(g, ir::Op::kReshape) == 4);
  std::vector<double> factors;
  for (const ir::Node& n : g.nodes)
    if (n.op == ir::Op::kConstant) factors.push_back(n.attrs.value);
  CHECK(factors == std::vector<double>{2, 4, 6});
}

TEST_CASE("lower: an if on a const takes one branch") {
  const char* text = R"(program p;
const USE_EXP = %s;
const N = 2;
input x : f32[8];
output y : f32[8];
if USE_EXP && N < 3 {
  y = exp(x);
} else {
  y = tanh(x);
}
)";
  char buf[512];
  std::snprintf(buf, sizeof buf, text, "true");
  ir::Graph taken = lower_clean(buf);
  CHECK(count(taken, ir::Op::kExp) == 1);
  CHECK(count(taken, ir::Op::kTanh) == 0);
  std::snprintf(buf, sizeof buf, text, "false");
  ir::Graph other = lower_clean(buf);
  CHECK(count(other, ir::Op::kExp) == 0);
  CHECK(count(other, ir::Op::kTanh) == 1);
}

TEST_CASE("lower: a fn called twice is inlined twice") {
  ir::Graph g = lower_clean(R"(program p;
input x : f32[4, 8];
output y : f32[4, 8];
fn f(v: f32[4, 8]) -> f32[4, 8] {
  let r = relu(v);
  return r + 1.0;
}
y = f(f(x));
)");
  CHECK(count(g, ir::Op::kRelu) == 2);
  CHECK(count(g, ir::Op::kAdd) == 2);
  // Both copies point at the fn body, and carry the let name.
  for (const ir::Node& n : g.nodes)
    if (n.op == ir::Op::kRelu) {
      CHECK(n.loc.line == 5);
      CHECK(n.loc.col == 11);
      CHECK(n.name == "r");
    }
  const ir::Node& y = output_node(g, "y");
  CHECK(y.op == ir::Op::kAdd);
  CHECK(g.node(y.args[0]).op == ir::Op::kRelu);
}

TEST_CASE("lower: compile-time arguments stay compile-time inside a fn") {
  ir::Graph g = lower_clean(R"(program p;
input x : f32[8];
output y : f32[8];
fn repeat(v: f32[8], n: i32) -> f32[8] {
  let h = v;
  for i in 0..n {
    h = sigmoid(h);
  }
  return h;
}
y = repeat(x, 5);
)");
  CHECK(count(g, ir::Op::kSigmoid) == 5);
}

TEST_CASE("lower: broadcasting gives numpy result shapes with run-time dims") {
  ir::Graph g = lower_clean(R"(program p;
dim B in [1, 16];
input a : f32[B, 1, 8];
input b : f32[4, 1];
input c : f32[8];
output y : f32[B, 4, 8];
output z : f32[B, 1, 8];
y = a + b;
z = a * c;
)");
  REQUIRE(g.dims.size() == 1);
  const ir::Node& y = output_node(g, "y");
  REQUIRE(y.type.shape.size() == 3);
  CHECK(y.type.shape[0] == Dim::runtime(0));
  CHECK(y.type.shape[1] == Dim::constant(4));
  CHECK(y.type.shape[2] == Dim::constant(8));
  CHECK(output_node(g, "z").type.shape == Shape{Dim::runtime(0), Dim::constant(1), Dim::constant(8)});
}

TEST_CASE("lower: reshape with a run-time dim keeps the dim and checks the count") {
  ir::Graph g = lower_clean(R"(program p;
dim B in [1, 64];
input x : f16[B, 4096];
output y : f16[B, 32, 128];
y = reshape(x, [B, 32, 128]);
)");
  const ir::Node& r = only(g, ir::Op::kReshape);
  CHECK(r.type.shape == Shape{Dim::runtime(0), Dim::constant(32), Dim::constant(128)});

  Lowered bad = lower_text(R"(program p;
dim B in [1, 64];
input x : f16[B, 4096];
output y : f16[B, 64];
y = reshape(x, [B, 64]);
)");
  CHECK_FALSE(bad.graph.has_value());
  CHECK(bad.rendered.find("test.gdl:5:5: error: reshape changes the element count: f16[B, 4096] holds B*4096") !=
        std::string::npos);
}

TEST_CASE("lower: a weak literal or scalar takes the other side's dtype") {
  ir::Graph g = lower_clean(R"(program p;
input x : f16[8];
input n : i32[8];
scalar alpha : f32 = 0.5;
output y : f16[8];
output m : i32[8];
y = x * 2 + alpha * x;
m = n + 3;
)");
  std::vector<DType> constants;
  for (const ir::Node& node : g.nodes)
    if (node.op == ir::Op::kConstant) constants.push_back(node.type.dtype);
  CHECK(constants == std::vector<DType>{DType::kF16, DType::kI32});
  // alpha is cast to f16 before it meets x.
  const ir::Node& cast = only(g, ir::Op::kCast);
  CHECK(cast.type.dtype == DType::kF16);
  CHECK(g.node(cast.args[0]).op == ir::Op::kScalar);
  CHECK(output_node(g, "y").type.dtype == DType::kF16);
  CHECK(output_node(g, "m").type.dtype == DType::kI32);

  Lowered bad = lower_text(R"(program p;
input n : i32[8];
output m : i32[8];
m = n * 0.5;
)");
  CHECK_FALSE(bad.graph.has_value());
  CHECK(bad.rendered.find("4:9: error: the compile-time float 0.5 would silently become i32") != std::string::npos);
}

TEST_CASE("lower: compile-time arithmetic folds into shapes and attrs") {
  ir::Graph g = lower_clean(R"(program p;
const H = 64;
const HALF = H / 2;
const K = (H % 5) * 2 + 1;   # 9
input x : f32[HALF, K];
output y : f32[K, HALF];
output s : f32[HALF];
y = transpose(x);
s = sum(x, axis = -1) * sqrt(4.0);
)");
  const ir::Node& x = g.node(g.leaves(ir::Op::kInput)[0]);
  CHECK(x.type.shape == Shape{Dim::constant(32), Dim::constant(9)});
  CHECK(only(g, ir::Op::kTranspose).attrs.ints == std::vector<int64_t>{1, 0});
  CHECK(only(g, ir::Op::kSum).attrs.axis == 1);
  CHECK(only(g, ir::Op::kConstant).attrs.value == 2.0);
}

TEST_CASE("lower: abs, relu, min and max fold compile-time integers exactly") {
  // 2^62 + 1 has no double; folded through one, N would be 1.
  ir::Graph g = lower_clean(R"(program p;
const A = 4611686018427387905;
const N = min(A, A + 1) - A + max(A, 0) - A + abs(0 - A) - A + relu(A) - A + 2;
input x : f32[N];
output y : f32[N];
y = x;
)");
  CHECK(g.node(g.leaves(ir::Op::kInput)[0]).type.shape == Shape{Dim::constant(2)});
}

TEST_CASE("lower: // % & | ^ << >> fold compile-time integers exactly, as Python does") {
  ir::Graph g = lower_clean(R"(program p;
const BIG = 4611686018427387905;       # 2^62 + 1: no double holds it
const P = -(-7 // 2);                  # 4
const Q = -7 % 3 + 7 % -2 + 2;         # 2 - 1 + 2 = 3
const R = 1 << 40 >> 38;               # 4, left to right
const S = 6 & 3 | 8 ^ 1;               # (6 & 3) | (8 ^ 1) = 11
const T = 1 << 2 + 1;                  # 1 << 3 = 8
const U = (BIG % 4) + (BIG // 2 - 2305843009213693950) + (-1 >> 100) + (1 << -1);  # 1 + 2 - 1 + 0 = 2
input x : f32[P, Q, R];
input z : f32[S, T, U];
output y : f32[P, Q, R];
output w : f32[S, T, U];
if 5 & 1 == 1 { y = x; } else { y = x + 1.0; }   # (5 & 1) == 1
w = z;
)");
  CHECK(g.node(g.leaves(ir::Op::kInput)[0]).type.shape == Shape{Dim::constant(4), Dim::constant(3), Dim::constant(4)});
  CHECK(g.node(g.leaves(ir::Op::kInput)[1]).type.shape == Shape{Dim::constant(11), Dim::constant(8), Dim::constant(2)});
  CHECK(count(g, ir::Op::kAdd) == 0);

  for (const char* overflow : {"1 << 63", "1 << 64", "(-9223372036854775807 - 1) // -1"}) {
    Lowered bad = lower_text(std::string("program p;\nconst K = ") + overflow + ";\ninput x : f32[K];\n");
    CAPTURE(overflow);
    CHECK(bad.rendered.find("error: integer overflow in compile-time arithmetic") != std::string::npos);
  }
  ir::Graph edge = lower_clean("program p;\nconst K = -1 << 63 >> 62;\ninput x : f32[-K];\noutput y : f32[-K];\ny = x;\n");
  CHECK(edge.node(edge.leaves(ir::Op::kInput)[0]).type.shape == Shape{Dim::constant(2)});
}

TEST_CASE("lower: integer operators on i32 tensors make their nodes, and run") {
  ir::Graph g = lower_clean(R"(program p;
input n : i32[4];
input k : i32[4];
output m : i32[4];
m = n // 3 % 5 & k | 1 ^ n << 2 >> 1;   # ((((n // 3) % 5) & k) | (1 ^ ((n << 2) >> 1)))
)");
  for (ir::Op op : {ir::Op::kFloorDiv, ir::Op::kMod, ir::Op::kBitAnd, ir::Op::kBitOr, ir::Op::kBitXor, ir::Op::kShl,
                    ir::Op::kShr})
    CHECK(count(g, op) == 1);
  const ir::Node& m = output_node(g, "m");
  CHECK(m.op == ir::Op::kBitOr);
  CHECK(m.type == TensorType{DType::kI32, Shape{Dim::constant(4)}});
  CHECK(g.node(m.args[0]).op == ir::Op::kBitAnd);
  CHECK(g.node(m.args[1]).op == ir::Op::kBitXor);

  Bindings in;
  in.tensors["n"] = HostTensor{DType::kI32, {4}, {-7, 20, 0, 2147483647}};
  in.tensors["k"] = HostTensor{DType::kI32, {4}, {-1, 6, 3, -1}};
  auto out = interpret(g, in);
  REQUIRE(out.ok());
  // n // 3: -3, 6, 0, 715827882; % 5: 2, 1, 0, 2; & k: 2, 0, 0, 2.
  // n << 2 >> 1: -14, 40, 0, -2 (the << wraps); 1 ^ that: -13, 41, 1, -1.
  CHECK(out.value().at("m").data == std::vector<double>{-13, 41, 1, -1});
}

TEST_CASE("lower: clamp, sign and the new unary ops type-check and fold") {
  ir::Graph g = lower_clean(R"(program p;
const S = sign(-9) + 2;                # 1, exactly
input x : f16[S, 4];
input lo : f16[4];
input n : i32[S, 4];
output y : f16[S, 4];
output c : i32[S, 4];
y = clamp(round(cos(x) + sin(x)) * erf(x), lo, 2.0) + floor(x) - ceil(x) + sign(x);
c = clamp(n, -3, 3) + sign(n);
)");
  CHECK(g.node(g.leaves(ir::Op::kInput)[0]).type.shape == Shape{Dim::constant(1), Dim::constant(4)});
  CHECK(count(g, ir::Op::kClamp) == 2);
  for (ir::Op op : {ir::Op::kCos, ir::Op::kSin, ir::Op::kErf, ir::Op::kRound, ir::Op::kFloor, ir::Op::kCeil})
    CHECK(count(g, op) == 1);
  CHECK(count(g, ir::Op::kSign) == 2);
  for (const ir::Node& node : g.nodes)
    if (node.op == ir::Op::kClamp) {
      for (ir::ValueId a : node.args) CHECK(g.node(a).type.dtype == node.type.dtype);  // 2.0 became f16, -3 i32
    }
}

TEST_CASE("lower: subscripts lower to slice, and static indices drop their axis") {
  ir::Graph g = lower_clean(R"(program p;
dim B in [2, 8];
input x : f32[B, 128];
param W : f32[4, 16, 16];
output a : f32[B, 64];
output b : f32[1, 128];
output w : f32[16, 16];
a = x[:, 0:64];
b = x[1:2];
w = W[3];
)");
  const ir::Node& a = output_node(g, "a");
  CHECK(a.op == ir::Op::kSlice);
  CHECK(a.attrs.ints == std::vector<int64_t>{0, -1, 0, 64});
  CHECK(output_node(g, "b").attrs.ints == std::vector<int64_t>{1, 2, 0, 128});
  const ir::Node& w = output_node(g, "w");
  CHECK(w.op == ir::Op::kReshape);
  CHECK(g.node(w.args[0]).attrs.ints == std::vector<int64_t>{3, 4, 0, 16, 0, 16});
}

TEST_CASE("lower: dims get their bounds, default buckets and policy") {
  ir::Graph g = lower_clean(R"(program p;
dim A in [1, 64];
dim B in [3, 100] policy(update);
dim C in [1, 64] buckets(1, 8, 64);
input x : f32[A, B, C];
output y : f32[A, B, C];
y = x;
)");
  REQUIRE(g.dims.size() == 3);
  CHECK(g.dims[0].buckets == std::vector<int64_t>{1, 2, 4, 8, 16, 32, 64});
  CHECK(g.dims[1].buckets == std::vector<int64_t>{4, 8, 16, 32, 64, 100});
  CHECK(g.dims[1].policy == DimPolicy::kUpdate);
  CHECK(g.dims[2].buckets == std::vector<int64_t>{1, 8, 64});
  CHECK(g.dims[2].policy == DimPolicy::kBuckets);
  CHECK(output_node(g, "y").op == ir::Op::kInput);
}

TEST_CASE("lower: leaves come in declaration order, even when unused") {
  Lowered l = lower_text(R"(program p;
param w : f32[4];
input x : f32[4];
scalar s : i32 = 3;
input unused : f32[2];
output y : f32[4];
y = x * w;
)");
  REQUIRE(l.graph.has_value());
  const ir::Graph& g = *l.graph;
  REQUIRE(g.nodes.size() >= 4);
  CHECK(g.nodes[0].op == ir::Op::kParam);
  CHECK(g.nodes[0].name == "w");
  CHECK(g.nodes[1].name == "x");
  CHECK(g.nodes[2].op == ir::Op::kScalar);
  CHECK(g.nodes[2].attrs.value == 3.0);
  CHECK(g.nodes[3].name == "unused");
  // The unused input and scalar are warnings, not errors.
  REQUIRE(l.diags.all().size() == 2);
  CHECK_FALSE(l.diags.has_errors());
  CHECK(l.rendered.find("test.gdl:4:8: warning: scalar 's' is never used") != std::string::npos);
  CHECK(l.rendered.find("test.gdl:5:7: warning: input 'unused' is never used") != std::string::npos);
}

TEST_CASE("lower: attention gets the default scale 1/sqrt(D)") {
  ir::Graph g = lower_clean(R"(program p;
input q : f16[2, 4, 64];
input k : f16[2, 4, 32, 64];
input v : f16[2, 4, 32, 64];
input n : i32;
output o : f16[2, 4, 64];
o = attention(q, k, v, n);
)");
  const ir::Node& a = only(g, ir::Op::kAttention);
  CHECK(a.attrs.value == doctest::Approx(0.125));
}

TEST_CASE("lower: min(x, axis) reduces, a list of axes is one node, one listed axis is the one-axis form") {
  ir::Graph g = lower_clean(R"(program p;
dim T in [2, 32];
input x : f32[4, T, 6];
output a : f32[4, 6];
output b : f32[6];
output c : f32[4, 1, 1];
output d : f32[4, 6];
output e : f32[4, T, 6];
a = min(x, axis = 1);
b = sum(x, axis = [1, 0]);
c = mean(x, axis = [-1, 1], keepdims = true);
d = max(x, axis = [1]);
e = min(x, 2.0);
)");
  const ir::Node& a = output_node(g, "a");
  CHECK(a.op == ir::Op::kReduceMin);
  CHECK(a.attrs.axis == 1);
  CHECK(a.attrs.ints.empty());
  const ir::Node& b = output_node(g, "b");
  CHECK(b.op == ir::Op::kSum);
  CHECK(b.attrs.ints == std::vector<int64_t>{0, 1});  // normalized: ascending
  const ir::Node& c = output_node(g, "c");
  CHECK(c.attrs.ints == std::vector<int64_t>{1, 2});
  CHECK(c.attrs.keepdims);
  CHECK(c.type.shape == Shape{Dim::constant(4), Dim::constant(1), Dim::constant(1)});
  const ir::Node& d = output_node(g, "d");
  CHECK(d.op == ir::Op::kReduceMax);
  CHECK(d.attrs.axis == 1);
  CHECK(d.attrs.ints.empty());
  CHECK(output_node(g, "e").op == ir::Op::kMin);  // two operands: elementwise
  CHECK(ir::print_ir(g).find("sum %0 {axes=[0, 1]} : f32[6]") != std::string::npos);
}

TEST_CASE("lower: argmax, topk, cumsum, arange and one_hot take their attributes from the call") {
  ir::Graph g = lower_clean(R"(program p;
dim T in [3, 32];
input x : f16[4, T, 6];
input ids : i32[T];
output a : i32[4, T];
output b : i32[4, 1, 6];
output c : f16[4, 2, 6];
output d : i32[4, T, 3];
output e : f16[4, T, 6];
output f : i32[T];
output g : i32[4];
output h : i32[T];
output k : f16[T, 5];
output m : f32[5];
a = argmax(x);
b = argmin(x, axis = 1, keepdims = true);
c = topk_values(x, 2, axis = -2);
d = topk_indices(x, k = 3);
e = cumsum(x, axis = -2);
f = arange(T);
g = arange(10, 0, step = -3);
h = arange(0, T);
k = one_hot(ids, 5, dtype = f16);
m = one_hot(2, 5);
)");
  CHECK(output_node(g, "a").attrs.axis == 2);
  CHECK(output_node(g, "b").attrs.keepdims);
  const ir::Node& c = output_node(g, "c");
  CHECK(c.op == ir::Op::kTopKValues);
  CHECK(c.attrs.axis == 1);
  CHECK(c.attrs.ints == std::vector<int64_t>{2});
  CHECK(output_node(g, "d").attrs.ints == std::vector<int64_t>{3});
  CHECK(output_node(g, "e").attrs.axis == 1);
  const ir::Node& f = output_node(g, "f");
  CHECK(f.type.shape == Shape{Dim::runtime(0)});
  CHECK(f.attrs.ints == std::vector<int64_t>{0, 0, 1});
  const ir::Node& arange = output_node(g, "g");  // 10, 7, 4, 1
  CHECK(arange.type.shape == Shape{Dim::constant(4)});
  CHECK(arange.attrs.ints == std::vector<int64_t>{10, 0, -3});
  CHECK(output_node(g, "h").attrs == f.attrs);
  const ir::Node& k = output_node(g, "k");
  CHECK(k.op == ir::Op::kOneHot);
  CHECK(k.type.dtype == DType::kF16);
  CHECK(k.attrs.ints == std::vector<int64_t>{5});
  CHECK(output_node(g, "m").type == TensorType{DType::kF32, {Dim::constant(5)}});
  CHECK(ir::print_ir(g).find("arange {start=10, step=-3} : i32[4]") != std::string::npos);
}

TEST_CASE("lower: gather takes an axis (default 0) and take_along_axis one (default -1), normalized") {
  ir::Graph g = lower_clean(R"(program p;
dim B in [1, 8];
input table : f32[4, 5, 6];
input ids : i32[B, 2];
input x : f16[B, 7];
input index : i32[B, 3];
input first : i32[1, 3];
output a : f32[B, 2, 5, 6];
output b : f32[4, B, 2, 6];
output c : f32[4, 5, B, 2];
output d : f16[B, 3];
output e : f16[B, 3];
a = gather(table, ids);
b = gather(table, ids, axis = 1);
c = gather(table, ids, axis = -1);
d = take_along_axis(x, index);
e = take_along_axis(x, first, axis = -1);
)");
  CHECK(output_node(g, "a").attrs.axis == 0);
  CHECK(output_node(g, "b").attrs.axis == 1);
  CHECK(output_node(g, "c").attrs.axis == 2);
  const ir::Node& d = output_node(g, "d");
  CHECK(d.op == ir::Op::kTakeAlongAxis);
  CHECK(d.attrs.axis == 1);
  CHECK(output_node(g, "e").type == TensorType{DType::kF16, {Dim::runtime(0), Dim::constant(3)}});
  const std::string text = ir::print_ir(g);
  CHECK(text.find("gather %0, %1 : f32[B, 2, 5, 6]") != std::string::npos);  // axis 0 prints nothing, as before
  CHECK(text.find("gather %0, %1 {axis=1} : f32[4, B, 2, 6]") != std::string::npos);
  CHECK(text.find("take_along_axis %2, %3 {axis=1} : f16[B, 3]") != std::string::npos);
}

TEST_CASE("lower: bernoulli and dropout are a uniform draw, a comparison and a where; dropout with p = 0 is x") {
  ir::Graph g = lower_clean(R"(program p;
dim B in [1, 8];
input x : f16[B, 6];
output m : bool[3, 5];
output y : f16[B, 6];
output z : f16[B, 6];
m = bernoulli(0.25, [3, 5]);
y = dropout(x, 0.5);
z = dropout(x, 0);
)");
  CHECK(count(g, ir::Op::kRandUniform) == 2);
  const ir::Node& m = output_node(g, "m");
  CHECK(m.op == ir::Op::kLt);
  CHECK(g.node(m.args[0]).op == ir::Op::kRandUniform);
  CHECK(g.node(m.args[0]).type == TensorType{DType::kF32, {Dim::constant(3), Dim::constant(5)}});
  CHECK(g.node(m.args[1]).attrs.value == 0.25);
  const ir::Node& y = output_node(g, "y");
  CHECK(y.op == ir::Op::kWhere);
  CHECK(y.type == output_node(g, "z").type);
  const ir::Node& keep = g.node(y.args[0]);
  CHECK(keep.op == ir::Op::kLt);
  CHECK(g.node(keep.args[1]).attrs.value == 0.5);  // kept with probability 1 - p
  const ir::Node& scaled = g.node(y.args[1]);
  CHECK(scaled.op == ir::Op::kDiv);
  CHECK(g.node(scaled.args[1]).attrs.value == 0.5);
  CHECK(g.node(y.args[2]).attrs.value == 0);
  // The draws take consecutive counters: 15 uniforms take 4, then B * 6 <= 48 take 12.
  CHECK(g.node(m.args[0]).attrs.ints == std::vector<int64_t>{0});
  CHECK(g.node(keep.args[0]).attrs.ints == std::vector<int64_t>{4});
  CHECK(output_node(g, "z").op == ir::Op::kInput);  // nothing dropped: x itself
}

TEST_CASE("lower: the examples lower without diagnostics") {
  for (const char* name : {"mlp", "chain", "attention"}) {
    INFO(name);
    ir::Graph g = lower_clean(read_file(std::string(GDL_SOURCE_DIR) + "/examples/" + name + ".gdl"));
    CHECK(g.program_name == name);
    CHECK(g.outputs.size() == 1);
  }
  ir::Graph mlp = lower_clean(read_file(GDL_SOURCE_DIR "/examples/mlp.gdl"));
  CHECK(count(mlp, ir::Op::kLayerNorm) == 8);
  CHECK(count(mlp, ir::Op::kMatMul) == 8);
  CHECK(count(mlp, ir::Op::kGelu) == 8);
  CHECK(mlp.leaves(ir::Op::kScalar).size() == 1);
  CHECK(output_node(mlp, "y").type == TensorType{DType::kF16, {Dim::runtime(0), Dim::constant(1024)}});
  ir::Graph chain = lower_clean(read_file(GDL_SOURCE_DIR "/examples/chain.gdl"));
  CHECK(count(chain, ir::Op::kMul) == 100);
  CHECK(count(chain, ir::Op::kAdd) == 100);
}

TEST_CASE("lower: the interpreter runs a lowered program to the expected values") {
  ir::Graph g = lower_clean(R"(program p;
input x : f32[3];
param a : f32[3];
scalar b : f32 = 0.5;
output y : f32[3];
let h = x;
for i in 0..3 {
  h = h * a + b;
}
y = max(h, 0.0);
)");
  Bindings in;
  in.tensors["x"] = HostTensor{DType::kF32, {3}, {1.0, -2.0, 3.0}};
  in.tensors["a"] = HostTensor{DType::kF32, {3}, {2.0, 0.5, -1.0}};
  auto out = interpret(g, in);
  REQUIRE(out.ok());
  std::vector<double> want;
  for (int e = 0; e < 3; ++e) {
    double h = in.tensors["x"].data[e];
    for (int i = 0; i < 3; ++i) h = h * in.tensors["a"].data[e] + 0.5;
    want.push_back(std::max(h, 0.0));
  }
  const HostTensor& y = out.value().at("y");
  REQUIRE(y.data.size() == 3);
  for (int e = 0; e < 3; ++e) CHECK(y.data[e] == doctest::Approx(want[e]));
}

TEST_CASE("lower: a run-time dim used as a number is its value this run, the valid one under padding") {
  ir::Graph g = lower_clean(R"(program d;
dim B in [1, 8];
input x : f32[B, 2];
output y : f32[B, 2];
output n : i32;
y = x / cast(B, f32) + cast(B * 2 - 1, f32);
n = B;
)");
  CHECK(count(g, ir::Op::kDimValue) >= 1);
  Bindings b;
  b.dims = {3};
  b.tensors["x"] = HostTensor{DType::kF32, {3, 2}, {3, 6, -3, 9, 1.5, 0}};
  Expected<std::map<std::string, HostTensor>> out = interpret(g, b);
  REQUIRE(out.ok());
  CHECK(out->at("y").data == std::vector<double>{6, 7, 4, 8, 5.5, 5});
  CHECK(out->at("n").data == std::vector<double>{3});
  // Laid out at capacity 4 with 3 valid rows, the value is still 3.
  Bindings padded;
  padded.dims = {4};
  padded.valid_dims = {3};
  padded.tensors["x"] = HostTensor{DType::kF32, {4, 2}, {3, 6, -3, 9, 1.5, 0, 7, 7}};
  Expected<std::map<std::string, HostTensor>> at_capacity = interpret(g, padded);
  REQUIRE(at_capacity.ok());
  CHECK(at_capacity->at("n").data == std::vector<double>{3});
  CHECK(std::vector<double>(at_capacity->at("y").data.begin(), at_capacity->at("y").data.begin() + 6) == out->at("y").data);
}

TEST_CASE("lower: reshape works out one -1 from the element count, with a run-time dim kept in place") {
  ir::Graph g = lower_clean(R"(program r;
dim B in [1, 8];
input x : f32[B, 6, 4];
input w : f32[2, 3, 4];
output y : f32[B, 3, 8];
output z : f32[24];
y = reshape(x, [B, -1, 8]);
z = reshape(w, [-1]);
)");
  CHECK(count(g, ir::Op::kReshape) == 2);
  for (const ir::Node& n : g.nodes)
    for (const Dim& d : n.type.shape) CHECK((d.is_runtime() || d.extent > 0));
  Lowered twice = lower_text("program r;\ninput x : f32[4, 6];\noutput y : f32[24];\ny = reshape(x, [-1, -1]);\n");
  CHECK(twice.rendered.find("one -1") != std::string::npos);
}

// RoPE by hand: pairs (i, i + D/2) of each row rotate by row n's c and s.
std::vector<double> rope_by_hand(const std::vector<double>& x, const std::vector<double>& c,
                                 const std::vector<double>& s, int n, int h, int d) {
  std::vector<double> out(x.size());
  for (int r = 0; r < n; ++r)
    for (int j = 0; j < h; ++j)
      for (int i = 0; i < d / 2; ++i) {
        const double x1 = x[(r * h + j) * d + i], x2 = x[(r * h + j) * d + d / 2 + i];
        const double cc = c[r * d / 2 + i], ss = s[r * d / 2 + i];
        out[(r * h + j) * d + i] = x1 * cc - x2 * ss;
        out[(r * h + j) * d + d / 2 + i] = x2 * cc + x1 * ss;
      }
  return out;
}

std::vector<double> counting(size_t n, double scale) {
  std::vector<double> v(n);
  for (size_t i = 0; i < n; ++i) v[i] = scale * static_cast<double>(i + 1);
  return v;
}

constexpr const char* kGenericRope = R"(
fn rotate(x: T[N, H, D], c: T[N, 1, D / 2], s: T[N, 1, D / 2]) -> T[N, H, D] {
  let x1 = x[:, :, 0:D / 2];
  let x2 = x[:, :, D / 2:D];
  return concat(x1 * c - x2 * s, x2 * c + x1 * s, axis = 2);
}
)";

TEST_CASE("lower: a generic fn serves several shapes and dtypes in one program, one instance per call") {
  ir::Graph g = lower_clean(std::string(R"(program r;
const B = 2;
const NH = 3;
const KVH = 1;
const HD = 4;
input q : f32[B, NH, HD];
input k : f32[B, KVH, HD];
input cs : f32[B, 1, HD / 2];
input sn : f32[B, 1, HD / 2];
input kh : f16[B, KVH, 8];
input csh : f16[B, 1, 4];
input snh : f16[B, 1, 4];
output qr : f32[B, NH, HD];
output kr : f32[B, KVH, HD];
output khr : f16[B, KVH, 8];
)") + kGenericRope + R"(
qr = rotate(q, cs, sn);
kr = rotate(k, cs, sn);
khr = rotate(kh, csh, snh);
)");
  CHECK(count(g, ir::Op::kConcat) == 3);
  CHECK(output_node(g, "khr").type == TensorType{DType::kF16, {Dim::constant(2), Dim::constant(1), Dim::constant(8)}});
  Bindings in;
  in.tensors["q"] = HostTensor{DType::kF32, {2, 3, 4}, counting(24, 1.0)};
  in.tensors["k"] = HostTensor{DType::kF32, {2, 1, 4}, counting(8, -0.5)};
  in.tensors["cs"] = HostTensor{DType::kF32, {2, 1, 2}, {0.5, 2, -1, 0.25}};
  in.tensors["sn"] = HostTensor{DType::kF32, {2, 1, 2}, {1, -1, 0.5, 3}};
  in.tensors["kh"] = HostTensor{DType::kF16, {2, 1, 8}, counting(16, 0.25)};
  in.tensors["csh"] = HostTensor{DType::kF16, {2, 1, 4}, {1, 0, -1, 0.5, 0.5, 2, 0, 1}};
  in.tensors["snh"] = HostTensor{DType::kF16, {2, 1, 4}, {0, 1, 0.5, -1, 2, 0, 1, 0.25}};
  auto out = interpret(g, in);
  REQUIRE(out.ok());
  // The first head of q: x1 = (1, 2), x2 = (3, 4), c = (0.5, 2), s = (1, -1).
  CHECK(std::vector<double>(out->at("qr").data.begin(), out->at("qr").data.begin() + 4) ==
        std::vector<double>{1 * 0.5 - 3 * 1, 2 * 2 - 4 * -1, 3 * 0.5 + 1 * 1, 4 * 2 + 2 * -1});
  CHECK(out->at("qr").data == rope_by_hand(in.tensors["q"].data, in.tensors["cs"].data, in.tensors["sn"].data, 2, 3, 4));
  CHECK(out->at("kr").data == rope_by_hand(in.tensors["k"].data, in.tensors["cs"].data, in.tensors["sn"].data, 2, 1, 4));
  // Quarters and small integers: exact in f16.
  CHECK(out->at("khr").data == rope_by_hand(in.tensors["kh"].data, in.tensors["csh"].data, in.tensors["snh"].data, 2, 1, 8));
}

TEST_CASE("lower: a shape parameter bound to a run-time dim is that dim in types and its value in expressions") {
  ir::Graph g = lower_clean(std::string(R"(program r;
dim S in [1, 8];
input x : f32[S, 2, 4];
input cs : f32[S, 1, 2];
input sn : f32[S, 1, 2];
input w : f32[3, 2];
output y : f32[S, 2, 4];
output a : f32[S, 2];
output b : f32[3, 2];
)") + kGenericRope + R"(
# N is a compile-time integer or the run-time dim S; M * N its value this run.
fn scaled(x: E[N, M]) -> E[N, M] {
  let n : E[N, M] = x * cast(M * N, E);
  return n;
}
y = rotate(x, cs, sn);
a = scaled(x[:, :, 0]);
b = scaled(w);
)");
  CHECK(output_node(g, "y").type == TensorType{DType::kF32, {Dim::runtime(0), Dim::constant(2), Dim::constant(4)}});
  CHECK(count(g, ir::Op::kDimValue) >= 1);
  Bindings in;
  in.dims = {3};
  in.tensors["x"] = HostTensor{DType::kF32, {3, 2, 4}, counting(24, 1.0)};
  in.tensors["cs"] = HostTensor{DType::kF32, {3, 1, 2}, {1, 0, 0.5, 2, -1, 1}};
  in.tensors["sn"] = HostTensor{DType::kF32, {3, 1, 2}, {0, 1, 1, -1, 2, 0.5}};
  in.tensors["w"] = HostTensor{DType::kF32, {3, 2}, {1, 2, 3, 4, 5, 6}};
  auto out = interpret(g, in);
  REQUIRE(out.ok());
  CHECK(out->at("y").data == rope_by_hand(in.tensors["x"].data, in.tensors["cs"].data, in.tensors["sn"].data, 3, 2, 4));
  // x[:, :, 0] is (1, 5), (9, 13), (17, 21); M * N = 2 * 3 this run.
  CHECK(out->at("a").data == std::vector<double>{6, 30, 54, 78, 102, 126});
  CHECK(out->at("b").data == std::vector<double>{6, 12, 18, 24, 30, 36});
}

TEST_CASE("lower: one generic Adam update for parameters of several shapes and dtypes") {
  ir::Graph g = lower_clean(R"(program adam;
input p1 : f32[2, 3];
input g1 : f32[2, 3];
input p2 : f16[1, 4];
input g2 : f16[1, 4];
scalar rate : f32 = 0.5;
output q1 : f32[2, 3];
output q2 : f16[1, 4];
# One step from zero moments: m = (1 - b1) g, v = (1 - b2) g^2, bias-corrected.
fn adam(p: T[R, C], g: T[R, C], lr: T, b1: T, b2: T) -> T[R, C] {
  let m = (1.0 - b1) * g;
  let v = (1.0 - b2) * g * g;
  let mhat = m / (1.0 - b1);
  let vhat = v / (1.0 - b2);
  return p - lr * mhat / (sqrt(vhat) + 1e-8);
}
q1 = adam(p1, g1, rate, 0.9, 0.999);
q2 = adam(p2, g2, rate, 0.5, 0.75);
)");
  CHECK(count(g, ir::Op::kSqrt) == 2);
  Bindings in;
  in.tensors["p1"] = HostTensor{DType::kF32, {2, 3}, {1, 2, 3, 4, 5, 6}};
  in.tensors["g1"] = HostTensor{DType::kF32, {2, 3}, {0.5, -2, 4, -1, 0.25, 3}};
  in.tensors["p2"] = HostTensor{DType::kF16, {1, 4}, {1, -1, 0.5, 2}};
  in.tensors["g2"] = HostTensor{DType::kF16, {1, 4}, {2, -4, 1, -0.5}};
  auto out = interpret(g, in);
  REQUIRE(out.ok());
  // The first step moves each element by lr against the sign of its gradient.
  const std::vector<double> want1{0.5, 2.5, 2.5, 4.5, 4.5, 5.5}, want2{0.5, -0.5, 0, 2.5};
  for (size_t i = 0; i < want1.size(); ++i) CHECK(out->at("q1").data[i] == doctest::Approx(want1[i]).epsilon(1e-6));
  for (size_t i = 0; i < want2.size(); ++i) CHECK(out->at("q2").data[i] == doctest::Approx(want2[i]).epsilon(2e-3));
}

TEST_CASE("lower: generic fns report bindings that disagree at the argument, naming both values") {
  auto error_of = [](const std::string& text) {
    Lowered l = lower_text(text);
    CHECK_FALSE(l.graph.has_value());
    return l.rendered;
  };
  const std::string decls = std::string("program r;\ndim B in [1, 8];\ninput x : f32[4, 8, 64];\n") +
                            "input c : f32[4, 1, 32];\ninput h : f16[4, 1, 32];\ninput bad : f32[4, 1, 16];\n"
                            "input v : f32[B, 2, 64];\ninput cv : f32[B, 1, 32];\noutput y : f32[4, 8, 64];\n"
                            "output z : f32[B, 2, 64];\n" + kGenericRope;
  CHECK(error_of(decls + "y = rotate(x, c, bad);\nz = rotate(v, cv, cv);\n")
            .find("argument 's' of rotate: dim D / 2 is 16 here, but D = 64 from argument 'x'") != std::string::npos);
  CHECK(error_of(decls + "y = rotate(x, c, h);\nz = rotate(v, cv, cv);\n")
            .find("argument 's' of rotate: dtype T is f16 here, but T = f32 from argument 'x'") != std::string::npos);
  CHECK(error_of(decls + "y = rotate(x, cv, c);\nz = rotate(v, cv, cv);\n")
            .find("argument 'c' of rotate: dim N is B here, but N = 4 from argument 'x'") != std::string::npos);
  // D / 2 of a run-time D is no shape.
  const std::string runtime_d = "program r;\ndim B in [2, 8];\ninput x : f32[1, 1, B];\ninput c : f32[1, 1, 1];\n"
                                "output y : f32[1, 1, B];\n" + std::string(kGenericRope) + "y = rotate(x, c, c);\n";
  CHECK(error_of(runtime_d).find("dim D / 2 needs D to be a compile-time extent, but D = B, a run-time dim") !=
        std::string::npos);
}

}  // namespace
}  // namespace gdl
