// grad(loss, wrt): every derivative rule checked against central
// differences of the loss on fresh random inputs, through the CPU
// interpreter and the planned-offset interpreter (which must agree bit for
// bit), plus the language's errors and a few training steps.
#include <doctest/doctest.h>

#include <algorithm>
#include <cmath>
#include <random>
#include <string>
#include <vector>

#include "cpu_program.h"
#include "frontend/source_loader.h"
#include "pipeline.h"

using namespace gdl;
using namespace gdl::test_programs;

namespace {

// A program declaring `output loss : f32;` and, for each name in `wrt`, an
// input of that name and `output d_<name>` = grad(loss, <name>). Each
// gradient element must match the central difference of the loss within
// `tolerance` relative to max(|difference|, 0.1); f32 rounding of a loss of
// order 1 over a step of 1e-3 leaves about 1e-4.
void check_gradients(const std::string& program, const std::vector<std::string>& wrt, uint32_t seed,
                     double tolerance = 5e-3, const std::vector<int64_t>& dims = {}) {
  INFO(program);
  const ir::Graph g = compile_text(program);
  std::mt19937 rng(seed);
  const Bindings base = random_bindings(g, dims, rng, 0, 2);  // i32 inputs are class labels below 3
  std::string values;
  for (const auto& [name, t] : base.tensors) {
    values += name + " =";
    for (double v : t.data) values += " " + std::to_string(v);
    values += "\n";
  }
  INFO(values);
  const std::map<std::string, HostTensor> outputs = run_both(g, base);
  const auto loss_at = [&](const Bindings& b) {
    Expected<std::map<std::string, HostTensor>> r = interpret(g, b);
    REQUIRE_MESSAGE(r.ok(), r.status().message());
    return r->at("loss").data.at(0);
  };
  constexpr double kStep = 1e-3;
  for (const std::string& name : wrt) {
    INFO("d_" << name);
    const HostTensor& gradient = outputs.at("d_" + name);
    const HostTensor& x = base.tensors.at(name);
    REQUIRE(gradient.shape == x.shape);
    bool any_nonzero = false;
    for (size_t i = 0; i < x.data.size(); ++i) {
      Bindings up = base, down = base;
      up.tensors[name].data[i] += kStep;
      down.tensors[name].data[i] -= kStep;
      const double difference = (loss_at(up) - loss_at(down)) / (2 * kStep);
      INFO("element " << i << ": grad " << gradient.data[i] << ", central difference " << difference);
      CHECK(std::fabs(gradient.data[i] - difference) <= tolerance * std::max(0.1, std::fabs(difference)));
      any_nonzero = any_nonzero || gradient.data[i] != 0;
    }
    CHECK_MESSAGE(any_nonzero, "the gradient is all zero: the check would pass for a rule that gives nothing");
  }
}

// loss = sum(EXPR * w) over a [3, 4] x, so that dy differs per element.
std::string weighted_loss(const std::string& declarations, const std::string& expr, const std::vector<std::string>& wrt) {
  std::string text = "program t;\n" + declarations + "input w : f32[3, 4];\noutput loss : f32;\n";
  for (const std::string& name : wrt) text += "output d_" + name + " : f32[" + "3, 4" + "];\n";
  text += "let y = " + expr + ";\nloss = sum(y * w, axis = [0, 1]);\n";
  for (const std::string& name : wrt) text += "d_" + name + " = grad(loss, " + name + ");\n";
  return text;
}

// Each expression of an input x : f32[3, 4] through weighted_loss, with
// seeds from `seed` on.
void check_each(const std::vector<std::string>& exprs, uint32_t seed) {
  for (const std::string& e : exprs) {
    INFO(e);
    check_gradients(weighted_loss("input x : f32[3, 4];\n", e, {"x"}), {"x"}, seed++);
  }
}

std::string compile_errors(const std::string& text) {
  DiagnosticSink diags;
  SourceFile file = source_from_string("test.gdl", text);
  CHECK_FALSE(compile_to_ir(file, diags).has_value());
  return diags.render(file);
}

}  // namespace

TEST_CASE("grad: unary ops against central differences") {
  const std::vector<std::string> exprs = {
      "exp(x)",     "log(abs(x) + 0.5)", "sqrt(abs(x) + 0.5)", "rsqrt(abs(x) + 0.5)", "tanh(x)", "sigmoid(x)",
      "relu(x)",    "gelu(x)",           "silu(x)",            "abs(x)",              "cos(x)",  "sin(x)",
      "erf(x)",     "-x",                "x * floor(x * 3.0)", "clamp(x, -0.5, 0.5)", "pow(abs(x) + 0.5, 1.5)",
      "sign(x) * x * x"};
  check_each(exprs, 1);
}

TEST_CASE("grad: binary ops broadcast, and the broadcast operand's part is summed back to its shape") {
  struct Case {
    std::string b_type, expr;
  };
  const std::vector<Case> cases = {
      {"f32[4]", "x + b"},       {"f32[3, 1]", "x - b"},          {"f32[4]", "x * b"},
      {"f32[3, 1]", "x / (abs(b) + 0.5)"}, {"f32[4]", "min(x, b)"}, {"f32[3, 4]", "max(x, b)"},
      {"f32[1, 4]", "pow(abs(x) + 0.5, b)"}, {"f32", "x * b + b"}, {"f32[4]", "where(x > 0.0, x * b, b)"},
      {"f32[3, 1]", "clamp(x, b, b + 1.0)"}};
  uint32_t seed = 150;  // (seed 109 put an x within 2e-4 of clamp's bound: a kink inside the difference's step)
  for (const Case& c : cases) {
    INFO(c.expr);
    std::string text = "program t;\ninput x : f32[3, 4];\ninput b : " + c.b_type +
                       ";\ninput w : f32[3, 4];\noutput loss : f32;\noutput d_x : f32[3, 4];\noutput d_b : " + c.b_type +
                       ";\nlet y = " + c.expr + ";\nloss = sum(y * w, axis = [0, 1]);\nd_x = grad(loss, x);\nd_b = grad(loss, b);\n";
    check_gradients(text, {"x", "b"}, seed++);
  }
}

TEST_CASE("grad: reductions, softmax and cumsum") {
  const std::vector<std::string> exprs = {
      "broadcast_to(sum(x, axis = 1, keepdims = true), [3, 4])",
      "broadcast_to(mean(x, axis = 0), [3, 4])",
      "broadcast_to(reshape(mean(x, axis = [0, 1]), [1, 1]), [3, 4])",
      "broadcast_to(max(x, axis = 1, keepdims = true), [3, 4])",
      "broadcast_to(min(x, axis = 0), [3, 4])",
      "softmax(x, axis = 1)",
      "softmax(x, axis = 0)",
      "cumsum(x, axis = 1)",
      "cumsum(x * x, axis = 0)",
      "x - log(sum(exp(x), axis = 1, keepdims = true))"};
  check_each(exprs, 200);
}

TEST_CASE("grad: matmul, batched and broadcast over the batch") {
  struct Case {
    std::string a, b, out;
  };
  const std::vector<Case> cases = {{"f32[3, 5]", "f32[5, 4]", "f32[3, 4]"},
                                   {"f32[2, 3, 5]", "f32[5, 4]", "f32[2, 3, 4]"},
                                   {"f32[2, 3, 5]", "f32[2, 5, 4]", "f32[2, 3, 4]"},
                                   {"f32[3, 5]", "f32[2, 5, 4]", "f32[2, 3, 4]"},
                                   {"f32[2, 1, 3, 5]", "f32[3, 5, 4]", "f32[2, 3, 3, 4]"}};
  uint32_t seed = 300;
  for (const Case& c : cases) {
    INFO(c.a << " @ " << c.b);
    const std::string text = "program t;\ninput a : " + c.a + ";\ninput b : " + c.b + ";\ninput w : " + c.out +
                             ";\noutput loss : f32;\noutput d_a : " + c.a + ";\noutput d_b : " + c.b +
                             ";\nlet y = a @ b;\nloss = sum(reshape(y * w, [-1]));\nd_a = grad(loss, a);\nd_b = grad(loss, b);\n";
    check_gradients(text, {"a", "b"}, seed++);
  }
}

TEST_CASE("grad: layernorm and rmsnorm with their weight and bias") {
  const std::string text = R"(program t;
input x : f32[3, 8];
input g : f32[8];
input b : f32[8];
input w : f32[3, 8];
output loss : f32;
output d_x : f32[3, 8];
output d_g : f32[8];
output d_b : f32[8];
let y = layernorm(x, weight = g, bias = b, eps = 1e-5) + rmsnorm(x * 2.0, weight = g, eps = 1e-6) * 0.5;
loss = sum(reshape(y * w, [-1]));
d_x = grad(loss, x);
d_g = grad(loss, g);
d_b = grad(loss, b);
)";
  check_gradients(text, {"x", "g", "b"}, 400);
}

TEST_CASE("grad: data movement (reshape, transpose, slices, concat, broadcast_to, rope, region writes)") {
  const std::vector<std::string> exprs = {
      "reshape(transpose(reshape(x, [2, 6])), [3, 4])",
      "reshape(transpose(reshape(x, [3, 2, 2]), perm = [0, 2, 1]), [3, 4])",
      "concat(x[:, 2:4], x[:, 0:2] * x[:, 1:3], axis = 1)",
      "concat(x[1:3], x[0:1], axis = 0)",
      "broadcast_to(x[1], [3, 4]) * x",
      "x[:, 1:2] * x",
      "reshape(rope(reshape(x, [3, 1, 4]), reshape(x[:, 0:2], [3, 1, 2]), reshape(x[:, 2:4], [3, 1, 2])), [3, 4])"};
  check_each(exprs, 500);
  // A region replaced: the replaced elements pass their adjoint to the value written, not to x.
  check_gradients(R"(program t;
input x : f32[3, 4];
input v : f32[2, 2];
input w : f32[3, 4];
output loss : f32;
output d_x : f32[3, 4];
output d_v : f32[2, 2];
let h = x * x;
h[1:3, 0:2] = v * 3.0;
loss = sum(reshape(h * w, [-1]));
d_x = grad(loss, x);
d_v = grad(loss, v);
)",
                  {"x", "v"}, 510);
}

TEST_CASE("grad: gather and take_along_axis add the rows they read back, repeated ids adding up") {
  // Ids are drawn in [0, 2]: five of them repeat rows of a 3-row table.
  check_gradients(R"(program t;
input table : f32[3, 4];
input ids : i32[5];
input w : f32[5, 4];
output loss : f32;
output d_table : f32[3, 4];
loss = sum(reshape(gather(table, ids) * w, [-1]));
d_table = grad(loss, table);
)",
                  {"table"}, 520);
  check_gradients(R"(program t;
input table : f32[2, 3, 4];
input ids : i32[2, 2];
input w : f32[2, 2, 2, 4];
output loss : f32;
output d_table : f32[2, 3, 4];
loss = sum(reshape(gather(table, ids, axis = 1) * w, [-1]));
d_table = grad(loss, table);
)",
                  {"table"}, 521);
  check_gradients(R"(program t;
input x : f32[3, 4];
input index : i32[3, 5];
input w : f32[3, 5];
output loss : f32;
output d_x : f32[3, 4];
loss = sum(reshape(take_along_axis(x, index) * w, [-1]));
d_x = grad(loss, x);
)",
                  {"x"}, 522);
  check_gradients(R"(program t;
input x : f32[3, 4, 2];
input index : i32[1, 6, 2];
input w : f32[3, 6, 2];
output loss : f32;
output d_x : f32[3, 4, 2];
loss = sum(reshape(take_along_axis(x, index, axis = 1) * w, [-1]));
d_x = grad(loss, x);
)",
                  {"x"}, 524);
  // A cross-entropy's pick over a run-time batch.
  check_gradients(R"(program t;
dim B in [1, 8];
input logits : f32[B, 5];
input labels : i32[B];
output loss : f32;
output d_logits : f32[B, 5];
let logp = logits - log(sum(exp(logits), axis = 1, keepdims = true));
loss = -mean(take_along_axis(logp, reshape(labels, [B, 1])), axis = [0, 1]);
d_logits = grad(loss, logits);
)",
                  {"logits"}, 525, 5e-3, {6});
  // A run-time index (x[i]) is a gather too.
  check_gradients(R"(program t;
input x : f32[3, 4];
input i : i32;
input w : f32[4];
output loss : f32;
output d_x : f32[3, 4];
loss = sum(x[i] * w) + sum(reshape(x * x, [-1]));
d_x = grad(loss, x);
)",
                  {"x"}, 523);
}

TEST_CASE("grad: topk_values gives each selected element its part, along any axis") {
  check_gradients(R"(program t;
input x : f32[3, 6];
input w : f32[3, 2];
output loss : f32;
output d_x : f32[3, 6];
loss = sum(topk_values(x, 2) * w, axis = [0, 1]);
d_x = grad(loss, x);
)",
                  {"x"}, 535);
  check_gradients(R"(program t;
input x : f32[5, 3];
input w : f32[3, 3];
output loss : f32;
output d_x : f32[5, 3];
loss = sum(topk_values(x, 3, axis = 0) * w, axis = [0, 1]);
d_x = grad(loss, x);
)",
                  {"x"}, 536);
  // A tie: of two equal bests the lower index is selected and gets it all.
  const ir::Graph g = compile_text(R"(program t;
input x : f32[2, 3];
output d_x : f32[2, 3];
d_x = grad(sum(topk_values(x, 1) * 2.0, axis = [0, 1]), x);
)");
  Bindings b;
  b.tensors["x"] = tensor(DType::kF32, {2, 3}, {1, 1, 0, -1, 0.5, 0.5});
  CHECK(run_both(g, b).at("d_x").data == std::vector<double>{2, 0, 0, 0, 2, 0});
}

TEST_CASE("grad: attention's q, k and v, grouped heads, per-sequence lengths and causal queries") {
  // Lengths 2 * (0..2) - 1: -1 (no position: zero rows), 1 and 3 of 5
  // (positions past them must get no gradient).
  const std::string grouped = R"(program t;
input q : f32[2, 4, 3];
input k : f32[2, 2, 5, 3];
input v : f32[2, 2, 5, 2];
input lens : i32[2];
input w : f32[2, 4, 2];
output loss : f32;
output d_q : f32[2, 4, 3];
output d_k : f32[2, 2, 5, 3];
output d_v : f32[2, 2, 5, 2];
let o = attention(q, k, v, lens * 2 - 1);
loss = sum(reshape(o * w, [-1]));
d_q = grad(loss, q);
d_k = grad(loss, k);
d_v = grad(loss, v);
)";
  check_gradients(grouped, {"q", "k", "v"}, 530);
  // Causal queries from a per-sequence start, with a scale, one k/v head for
  // three query heads; the length cuts the later queries' positions short
  // (t < start + 1 for queries 1 and 2, which see t <= start + i).
  check_gradients(R"(program t;
input q : f32[2, 3, 3, 4];
input k : f32[2, 1, 6, 4];
input v : f32[2, 1, 6, 4];
input starts : i32[2];
input w : f32[2, 3, 3, 4];
output loss : f32;
output d_q : f32[2, 3, 3, 4];
output d_k : f32[2, 1, 6, 4];
output d_v : f32[2, 1, 6, 4];
let o = attention(q, k, v, starts + 1, start = starts, scale = 0.7);
loss = sum(reshape(o * w, [-1]));
d_q = grad(loss, q);
d_k = grad(loss, k);
d_v = grad(loss, v);
)",
                  {"q", "k", "v"}, 531);
  // No sequence dims, one length and one start for all, and a length of 0.
  check_gradients(R"(program t;
input q : f32[2, 2, 3];
input k : f32[2, 4, 3];
input v : f32[2, 4, 3];
input n : i32;
input w : f32[2, 2, 3];
output loss : f32;
output d_q : f32[2, 2, 3];
output d_k : f32[2, 4, 3];
output d_v : f32[2, 4, 3];
let o = attention(q, k, v, 4, start = n);
loss = sum(reshape(o * w, [-1])) + sum(reshape(attention(q[0], k, v, n), [-1])) +
       sum(reshape(attention(q[1], k, v, 0), [-1]));
d_q = grad(loss, q);
d_k = grad(loss, k);
d_v = grad(loss, v);
)",
                  {"q", "k", "v"}, 532);
  // Two sequence dims: q [2, 2, NH, D] splits to rank 6, the most there is.
  check_gradients(R"(program t;
input q : f32[2, 2, 2, 3];
input k : f32[2, 2, 1, 3, 3];
input v : f32[2, 2, 1, 3, 3];
input w : f32[2, 2, 2, 3];
output loss : f32;
output d_q : f32[2, 2, 2, 3];
output d_k : f32[2, 2, 1, 3, 3];
loss = sum(attention(q, k, v, 3) * w, axis = [0, 1, 2, 3]);
d_q = grad(loss, q);
d_k = grad(loss, k);
)",
                  {"q", "k"}, 534);
}

TEST_CASE("grad: attention over a run-time batch equals its rows computed one at a time") {
  // The rule reshapes around run-time sequence dims: a batch of 3 must give
  // each sequence the gradient it gets alone.
  const std::string text = R"(program t;
dim B in [1, 4];
input q : f32[B, 2, 2, 4];
input k : f32[B, 1, 5, 4];
input v : f32[B, 1, 5, 4];
input starts : i32[B];
input w : f32[B, 2, 2, 4];
output loss : f32;
output d_q : f32[B, 2, 2, 4];
output d_k : f32[B, 1, 5, 4];
output d_v : f32[B, 1, 5, 4];
let o = attention(q, k, v, starts + 1, start = starts);
loss = sum(o * w, axis = [0, 1, 2, 3]);
d_q = grad(loss, q);
d_k = grad(loss, k);
d_v = grad(loss, v);
)";
  check_gradients(text, {"q", "k", "v"}, 533, 5e-3, {3});
}

// f16 and bf16 heads of 64 or 128 take the derivative's kernels
// (attention_stats, attention_grad_q, attention_grad_kv); their CPU rules
// must give what the matmul rule gives in f32 on the same values (checked
// against central differences above), within f16's rounding of the
// forward's result and of the gradients: grouped heads (4 query heads a
// k/v head), causal queries from a start, a length that cuts them short,
// DV != D; and one query per sequence (no start), with a length of 0.
TEST_CASE("grad: attention's derivative kernels give what its matmul rule gives") {
  const std::string causal = R"(program t;
input q : {T}[2, 20, 8, 64];
input k : {T}[2, 2, 40, 64];
input v : {T}[2, 2, 40, 128];
input lens : i32[2];
input starts : i32[2];
input w : {T}[2, 20, 8, 128];
output loss : f32;
output d_q : {T}[2, 20, 8, 64];
output d_k : {T}[2, 2, 40, 64];
output d_v : {T}[2, 2, 40, 128];
let o = attention(q, k, v, lens, start = starts);
let l = cast(sum(reshape(o * w, [-1])), f32);
loss = l;
d_q = grad(l, q);
d_k = grad(l, k);
d_v = grad(l, v);
)";
  const std::string decode = R"(program t;
input q : {T}[3, 4, 128];
input k : {T}[3, 1, 30, 128];
input v : {T}[3, 1, 30, 64];
input lens : i32[3];
input w : {T}[3, 4, 64];
output loss : f32;
output d_q : {T}[3, 4, 128];
output d_k : {T}[3, 1, 30, 128];
output d_v : {T}[3, 1, 30, 64];
let l = cast(sum(reshape(attention(q, k, v, lens) * w, [-1])), f32);
loss = l;
d_q = grad(l, q);
d_k = grad(l, k);
d_v = grad(l, v);
)";
  // Causal: sequence 0's queries at 20..39 of 40 positions, each up to its
  // own; sequence 1's from 0, cut at 13 positions. Decode: 30, 0 and 7 positions.
  using Lengths = std::map<std::string, std::vector<double>>;
  for (const auto& program : {std::pair{causal, Lengths{{"lens", {40, 13}}, {"starts", {20, 0}}}},
                               std::pair{decode, Lengths{{"lens", {30, 0, 7}}}}}) {
    const std::string& text = program.first;
    const Lengths& lengths = program.second;
    INFO(text);
    auto with = [&](const std::string& t) {
      std::string s = text;
      for (size_t at = s.find("{T}"); at != std::string::npos; at = s.find("{T}", at)) s.replace(at, 3, t);
      return compile_text(s);
    };
    const ir::Graph kernels = with("f16"), matmuls = with("f32");
    auto count = [](const ir::Graph& g, ir::Op op) {
      return std::count_if(g.nodes.begin(), g.nodes.end(), [&](const ir::Node& n) { return n.op == op; });
    };
    CHECK(count(kernels, ir::Op::kAttentionStats) == 1);
    CHECK(count(kernels, ir::Op::kAttentionGradQ) == 1);
    CHECK(count(kernels, ir::Op::kAttentionGradKV) == 1);
    CHECK(count(matmuls, ir::Op::kAttentionGradKV) == 0);
    std::mt19937 rng(540);
    Bindings f16 = random_bindings(kernels, {}, rng);
    for (const auto& [name, values] : lengths) f16.tensors[name].data = values;
    Bindings f32 = f16;
    for (auto& [name, t] : f32.tensors)
      if (t.dtype == DType::kF16) t.dtype = DType::kF32;
    const std::map<std::string, HostTensor> got = run_both(kernels, f16), want = run_both(matmuls, f32);
    for (const char* name : {"d_q", "d_k", "d_v"}) {
      INFO(name);
      const std::vector<double>&a = got.at(name).data, &b = want.at(name).data;
      REQUIRE(a.size() == b.size());
      double most = 0, error = 0;
      for (size_t i = 0; i < a.size(); ++i) {
        most = std::max(most, std::fabs(b[i]));
        error = std::max(error, std::fabs(a[i] - b[i]));
      }
      CHECK(most > 0.1);
      CHECK(error <= 1e-2 * most);
    }
  }
}

TEST_CASE("grad: a classifier's cross-entropy through two layers, every weight at once") {
  const std::string text = R"(program t;
input x : f32[4, 6];
input labels : i32[4];
input w1 : f32[6, 5];
input b1 : f32[5];
input w2 : f32[5, 3];
output loss : f32;
output d_w1 : f32[6, 5];
output d_b1 : f32[5];
output d_w2 : f32[5, 3];
output d_x : f32[4, 6];
let h = tanh(layernorm(x @ w1 + b1));
let logits = h @ w2;
let logp = logits - log(sum(exp(logits - max(logits, axis = 1, keepdims = true)), axis = 1, keepdims = true))
           - max(logits, axis = 1, keepdims = true);
loss = -mean(sum(one_hot(labels, 3) * logp, axis = 1));
d_w1 = grad(loss, w1);
d_b1 = grad(loss, b1);
d_w2 = grad(loss, w2);
d_x = grad(loss, x);
)";
  check_gradients(text, {"w1", "b1", "w2", "x"}, 600);
}

TEST_CASE("grad: a mean over a run-time dim divides by its value this run") {
  const std::string text = R"(program t;
dim B in [1, 8];
input x : f32[B, 4];
input w : f32[4, 2];
output loss : f32;
output d_w : f32[4, 2];
output d_x : f32[B, 4];
loss = mean(tanh(x @ w), axis = [0, 1]);
d_w = grad(loss, w);
d_x = grad(loss, x);
)";
  check_gradients(text, {"w", "x"}, 700, 5e-3, {3});
  check_gradients(text, {"w", "x"}, 701, 5e-3, {8});
}

TEST_CASE("grad: the backward has one matmul per weight and per activation it passes through; unread parts go") {
  const std::string one = R"(program t;
input x : f32[4, 8];
input w1 : f32[8, 8];
input w2 : f32[8, 8];
output loss : f32;
output d_w1 : f32[8, 8];
output d_w2 : f32[8, 8];
loss = sum(reshape(tanh(tanh(x @ w1) @ w2), [-1]));
d_w1 = grad(loss, w1);
d_w2 = grad(loss, w2);
)";
  const ir::Graph g = compile_text(one);
  int matmuls = 0;
  for (const ir::Node& n : g.nodes) matmuls += n.op == ir::Op::kMatMul;
  // Two forward; d_w2 one; d_w1 two (back through w2 to h, then to w1); the
  // part for x, which nothing reads, is removed.
  CHECK(matmuls == 5);
}

TEST_CASE("grad: a stacked weight read a layer at a time gets its layers' parts written into one buffer") {
  // Layers 0 and 1 are read twice (their own slices, and row 1 of both),
  // so the overlapping parts go into a second buffer, added to the first.
  const std::string text = R"(program t;
input w : f32[3, 4, 4];
input x : f32[2, 4];
output loss : f32;
output d_w : f32[3, 4, 4];
let h = x;
for l in 0..3 {
  h = tanh(h @ w[l]);
}
let l = sum(h * h, axis = [0, 1]) + sum(w[0:2, 1, :], axis = [0, 1]);
loss = l;
d_w = grad(l, w);
)";
  check_gradients(text, {"w"}, 540);
  const ir::Graph g = compile_text(text);
  int full_zeros = 0, full_adds = 0, full_updates = 0;
  for (const ir::Node& n : g.nodes) {
    if (n.type.shape != Shape{Dim::constant(3), Dim::constant(4), Dim::constant(4)}) continue;
    full_zeros += n.op == ir::Op::kBroadcastTo;
    full_adds += n.op == ir::Op::kAdd;
    full_updates += n.op == ir::Op::kUpdateSlice;
  }
  // Two buffers (their zeros one value after CSE), four regions written, one add.
  CHECK(full_zeros == 1);
  CHECK(full_updates == 4);
  CHECK(full_adds == 1);
}

TEST_CASE("grad: a loss that does not depend on the value gives zeros; integer paths pass no gradient") {
  const std::string text = R"(program t;
input x : f32[3];
input y : f32[3];
output loss : f32;
output d_y : f32[3];
output d_x : f32[3];
loss = sum(x * cast(argmax(y, axis = 0), f32));
d_y = grad(loss, y);
d_x = grad(loss, x);
)";
  const ir::Graph g = compile_text(text);
  std::mt19937 rng(800);
  const Bindings b = random_bindings(g, {}, rng);
  const std::map<std::string, HostTensor> out = run_both(g, b);
  CHECK(out.at("d_y").data == std::vector<double>{0, 0, 0});
  // d_x is y's argmax in every element.
  const std::vector<double>& ys = b.tensors.at("y").data;
  const double argmax = static_cast<double>(std::max_element(ys.begin(), ys.end()) - ys.begin());
  CHECK(out.at("d_x").data == std::vector<double>{argmax, argmax, argmax});
}

TEST_CASE("grad: stop_gradient passes its value and no gradient, and constant folding removes it") {
  const std::string text = R"(program t;
input x : f32[3, 4];
output loss : f32;
output d_x : f32[3, 4];
output d_shifted : f32[3, 4];
loss = sum(reshape(x * stop_gradient(x), [-1]));
d_x = grad(loss, x);
let m = stop_gradient(max(x, axis = 1, keepdims = true));
let shifted = x - m - log(sum(exp(x - m), axis = 1, keepdims = true));
d_shifted = grad(sum(reshape(shifted * x, [-1])), x);
)";
  const ir::Graph g = compile_text(text);
  for (const ir::Node& n : g.nodes) CHECK(n.op != ir::Op::kStopGradient);
  std::mt19937 rng(810);
  const Bindings b = random_bindings(g, {}, rng);
  const std::map<std::string, HostTensor> out = run_both(g, b);
  CHECK(out.at("d_x").data == b.tensors.at("x").data);  // d(x * c)/dx = c, with c = x held fixed
  // The log-softmax's gradient does not depend on the shift: the same as
  // without stop_gradient, within rounding.
  const std::string plain = R"(program t;
input x : f32[3, 4];
output d_shifted : f32[3, 4];
let m = max(x, axis = 1, keepdims = true);
let shifted = x - m - log(sum(exp(x - m), axis = 1, keepdims = true));
d_shifted = grad(sum(reshape(shifted * x, [-1])), x);
)";
  const std::map<std::string, HostTensor> want = run_both(compile_text(plain), b);
  const std::vector<double>& got = out.at("d_shifted").data;
  for (size_t i = 0; i < got.size(); ++i) CHECK(got[i] == doctest::Approx(want.at("d_shifted").data[i]).epsilon(1e-5));
}

TEST_CASE("grad: ties split evenly, and pow at 0 ^ 0 gives 0") {
  const std::string text = R"(program t;
input x : f32[4];
input p : f32[2];
input q : f32[2];
output d_max : f32[4];
output d_pair : f32[4];
output d_p : f32[2];
output d_q : f32[2];
d_max = grad(max(x, axis = 0), x);
d_pair = grad(sum(max(x, x * 1.0)), x);
d_p = grad(sum(pow(p, q)), p);
d_q = grad(sum(pow(p, q)), q);
)";
  const ir::Graph g = compile_text(text);
  Bindings b;
  b.tensors["x"] = tensor(DType::kF32, {4}, {1, 3, 3, 2});
  b.tensors["p"] = tensor(DType::kF32, {2}, {0, 2});
  b.tensors["q"] = tensor(DType::kF32, {2}, {0, 3});
  const std::map<std::string, HostTensor> out = run_both(g, b);
  CHECK(out.at("d_max").data == std::vector<double>{0, 0.5, 0.5, 0});  // two maxima share the gradient
  CHECK(out.at("d_pair").data == std::vector<double>{1, 1, 1, 1});     // max(x, x): half through each side
  CHECK(out.at("d_p").data == std::vector<double>{0, 12});             // 0^0 is constant in p; 3 * 2^2
  CHECK(out.at("d_q").data[0] == 0);                                   // p <= 0: no log
  CHECK(out.at("d_q").data[1] == doctest::Approx(8 * std::log(2.0)));
}

TEST_CASE("scatter_add: rows aimed at one position all add, in the CPU reference and the planned interpreter") {
  const ir::Graph g = compile_text(R"(program t;
input base : f32[3, 2];
input ids : i32[4];
input rows : f32[4, 2];
output y : f32[3, 2];
y = scatter_add(base, ids, rows, axis = 0);
)");
  Bindings b;
  b.tensors["base"] = tensor(DType::kF32, {3, 2}, {1, 2, 3, 4, 5, 6});
  b.tensors["ids"] = tensor(DType::kI32, {4}, {2, 0, 2, 7});  // 7: outside, adds nothing
  b.tensors["rows"] = tensor(DType::kF32, {4, 2}, {10, 20, 30, 40, 50, 60, 70, 80});
  const std::map<std::string, HostTensor> out = run_both(g, b);
  CHECK(out.at("y").data == std::vector<double>{31, 42, 3, 4, 65, 86});
}

TEST_CASE("grad: slices of a run-time axis, and of a fixed axis to a run-time length, widen back with zeros") {
  const std::string text = R"(program t;
dim B in [2, 8];
input x : f32[B, 4];
input t : f32[8, 3];
input w : f32[2, 4];
input v : f32[B, 3];
output loss : f32;
output d_x : f32[B, 4];
output d_t : f32[8, 3];
loss = sum(reshape(x[0:2] * w, [-1])) + sum(x[1] * w[0]) + mean(t[0:B] * v, axis = [0, 1]);
d_x = grad(loss, x);
d_t = grad(loss, t);
)";
  check_gradients(text, {"x", "t"}, 730, 5e-3, {3});
  check_gradients(text, {"x", "t"}, 731, 5e-3, {6});
}

TEST_CASE("grad: mistakes are reported at the call") {
  const std::string head = "program t;\ninput x : f32[3, 4];\ninput ids : i32[3];\noutput d : f32[3, 4];\n";
  std::string e = compile_errors(head + "d = grad(x * 2.0, x);\n");
  CHECK(e.find("grad needs the loss as a float scalar (rank 0), got f32[3, 4]") != std::string::npos);
  e = compile_errors("program t;\ninput x : f32[3, 4];\ninput ids : i32[3];\noutput d : i32[3];\n"
                     "d = grad(sum(x, axis = [0, 1]), ids);\n");
  CHECK(e.find("grad differentiates with respect to a float value, got i32[3]") != std::string::npos);
  e = compile_errors(head + "d = grad(sum(x, axis = [0, 1]), 2.0);\n");
  CHECK(e.find("test.gdl:5:33: error: grad needs a tensor, got the compile-time float 2.0") != std::string::npos);
  // A state named after its assignment means its new value, which the loss never read.
  e = compile_errors(R"(program t;
state w : f32[4];
input x : f32[4];
output loss : f32;
loss = sum(x * w);
w = w * 0.5;
w = w - grad(loss, w);
)");
  CHECK(e.find("test.gdl:7:20: error: grad: this value is computed after the loss, so the loss cannot depend on it") !=
        std::string::npos);
  // An op without a derivative rule on the way from x to the loss.
  e = compile_errors(R"(program t;
input q : f32[1, 2, 4];
input k : f32[3, 2, 4, 4];
input len : i32[1];
input blocks : i32[1, 2];
output d : f32[1, 2, 4];
let o = paged_attention(q, k, k, len, blocks);
d = grad(sum(reshape(o, [-1])), q);
)");
  CHECK(e.find("test.gdl:8:5: error: grad: the loss depends on the value differentiated through paged_attention at 7:9, "
               "which has no derivative rule") != std::string::npos);
  // A rule that covers only some of its op's cases says which.
  e = compile_errors(R"(program t;
dim B in [1, 4];
input table : f32[B, 4];
input ids : i32[3];
output d : f32[B, 4];
d = grad(sum(reshape(gather(table, ids), [-1])), table);
)");
  CHECK(e.find("through gather at 6:22, whose table has a run-time dim") != std::string::npos);
  e = compile_errors(R"(program t;
dim T in [1, 4];
input table : f32[5, 4];
input ids : i32[2, T];
output d : f32[5, 4];
d = grad(sum(gather(table, ids), axis = [0, 1, 2]), table);
)");
  CHECK(e.find("through gather at 6:14, whose ids have a run-time dim after their first") != std::string::npos);
}

TEST_CASE("grad: SGD steps in state lower a convex loss, step after step") {
  const std::string text = R"(program t;
state w : f32[4, 2];
input x : f32[8, 4];
input target : f32[8, 2];
output loss : f32;
let err = x @ w - target;
loss = mean(reshape(err * err, [-1]));
w = w - 0.05 * grad(loss, w);
)";
  const ir::Graph g = compile_text(text);
  std::mt19937 rng(900);
  Bindings b = random_bindings(g, {}, rng);
  double previous = INFINITY;
  for (int step = 0; step < 20; ++step) {
    const std::map<std::string, HostTensor> out = run_both(g, b);
    const double loss = out.at("loss").data.at(0);
    INFO("step " << step << ": loss " << loss << ", before " << previous);
    CHECK(loss < previous);
    previous = loss;
    b.tensors["w"] = out.at("w");
  }
}

TEST_CASE("examples/train_lm.gdl: AdamW steps on one batch drive its loss down (CPU reference and planned interpreter)") {
  // A small config of the example, compiled as gdlc -D would: it must learn
  // a batch of repeating token patterns, and every step's plan must agree
  // with the interpreter.
  DiagnosticSink diags;
  std::string fatal;
  std::optional<SourceFile> file = load_source(std::string(GDL_SOURCE_DIR) + "/examples/train_lm.gdl", diags, &fatal);
  REQUIRE_MESSAGE(file.has_value(), fatal);
  PipelineOptions options;
  constexpr int kHalf = 8, kVocab = 24, kPositions = 12, kSequences = 2;  // HD / 2, V, S, B
  options.const_settings = {{"L", "1"},
                            {"H", "32"},
                            {"NH", "2"},
                            {"KVH", "1"},
                            {"HD", std::to_string(2 * kHalf)},
                            {"F", "48"},
                            {"V", std::to_string(kVocab)},
                            {"S", std::to_string(kPositions)},
                            {"B", std::to_string(kSequences)}};
  std::optional<ir::Graph> compiled = compile_to_ir(*file, diags, options);
  INFO(diags.render(*file));
  REQUIRE(compiled.has_value());
  const ir::Graph& g = *compiled;
  std::mt19937 rng(950);
  Bindings b = random_bindings(g, {}, rng);
  std::normal_distribution<double> normal(0.0, 0.1);
  for (auto& [name, t] : b.tensors) {
    const bool moment = name.rfind("m_", 0) == 0 || name.rfind("v_", 0) == 0;
    for (double& v : t.data) {
      if (moment) v = 0;                                        // Adam starts from zero moments
      else if (name.find("norm") != std::string::npos) v = 1;  // norms start at 1
      else if (t.dtype == DType::kF32) v = normal(rng);
    }
  }
  // Rotary tables for positions 0..S-1 over HD / 2 frequencies.
  std::vector<double>&cos = b.tensors.at("rope_cos").data, &sin = b.tensors.at("rope_sin").data;
  REQUIRE(cos.size() == kPositions * kHalf);
  for (int p = 0; p < kPositions; ++p)
    for (int i = 0; i < kHalf; ++i) {
      const double angle = p / std::pow(10000.0, static_cast<double>(i) / kHalf);
      cos[static_cast<size_t>(p * kHalf + i)] = std::cos(angle);
      sin[static_cast<size_t>(p * kHalf + i)] = std::sin(angle);
    }
  // Two sequences the model can learn: each token the one before plus 3
  // (the first) or plus 2 (the second), modulo V.
  std::vector<double>& tokens = b.tensors.at("tokens").data;
  const size_t row = kPositions + 1;
  REQUIRE(tokens.size() == kSequences * row);
  for (size_t i = 0; i < tokens.size(); ++i)
    tokens[i] = static_cast<double>((i < row ? 3 * i : 5 + 2 * (i - row)) % kVocab);
  std::vector<double> losses;
  for (int step = 1; step <= 25; ++step) {
    b.scalars["lr"] = 0.01;
    b.scalars["c1"] = 1 / (1 - std::pow(0.9, step));
    b.scalars["c2"] = 1 / (1 - std::pow(0.95, step));
    const std::map<std::string, HostTensor> out = run_both(g, b);
    losses.push_back(out.at("loss").data.at(0));
    REQUIRE(std::isfinite(losses.back()));
    for (auto& [name, t] : b.tensors)
      if (out.count(name)) t = out.at(name);  // the states' new values carry over
  }
  INFO("losses: first " << losses.front() << ", last " << losses.back());
  // An untrained model: about ln V = 3.18 (weights of std 0.1 move it a little).
  CHECK(losses.front() > 2.9);
  CHECK(losses.front() < 3.8);
  CHECK(losses.back() < 0.1);
  for (size_t i = 5; i < losses.size(); ++i) CHECK(losses[i] < losses[i - 5]);  // falling, five steps apart
}
