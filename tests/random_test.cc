// rand and randn: Philox-4x32-10 against the published known answer, the
// counters each op takes and the run's advance of the state, and the
// distribution of a fixed seed's numbers (mean, variance, chi-square).
// bernoulli and dropout: the mask is rand's uniforms below the bound, new
// each run and the same from the same state, its kept fraction within a
// binomial bound, and the kept elements scaled by 1 / (1 - p).
#include <doctest/doctest.h>

#include <algorithm>
#include <cmath>

#include "cpu_program.h"

namespace gdl {
namespace {

using namespace test_programs;

HostTensor rng_state(int64_t seed_lo, int64_t seed_hi, int64_t offset_lo, int64_t offset_hi) {
  HostTensor t;
  t.dtype = DType::kI32;
  t.shape = {4};
  t.data = {static_cast<double>(seed_lo), static_cast<double>(seed_hi), static_cast<double>(offset_lo),
            static_cast<double>(offset_hi)};
  return t;
}

// Runs g from rng state `state` with the other bindings `more`.
std::map<std::string, HostTensor> run(const ir::Graph& g, const HostTensor& state,
                                      std::map<std::string, HostTensor> more = {}) {
  Bindings b;
  b.tensors = std::move(more);
  b.tensors["rng.state"] = state;
  Expected<std::map<std::string, HostTensor>> out = interpret(g, b);
  REQUIRE(out.ok());
  // The plan in a host arena gives the same numbers and leaves the same state.
  Expected<std::map<std::string, HostTensor>> planned = plan::run_planned(plan_program(g), b);
  REQUIRE_MESSAGE(planned.ok(), planned.status().message());
  for (const auto& [name, value] : *out) CHECK(planned->at(name).data == value.data);
  return *out;
}

TEST_CASE("rand: Philox-4x32-10 with counter 0 and key 0 gives the published words") {
  ir::Graph g = compile_text("program r;\noutput u : f32[4];\nu = rand([4]);\n");
  std::map<std::string, HostTensor> out = run(g, rng_state(0, 0, 0, 0));
  // Random123's known answer: 6627e8d5 e169c58d bc57ac4c 9b00dbd8; a uniform keeps the top 24 bits.
  const std::vector<double> want = {0x6627e8 * 0x1p-24, 0xe169c5 * 0x1p-24, 0xbc57ac * 0x1p-24, 0x9b00db * 0x1p-24};
  CHECK(out.at("u").data == want);
  CHECK(out.at("rng.state").data == std::vector<double>{0, 0, 1, 0});  // one counter drawn
}

TEST_CASE("rand: each op takes its own counters, and the run advances the offset past all of them") {
  ir::Graph g = compile_text(R"(program r;
output a : f32[5];
output b : f32[3, 2];
output n : f16[7];
a = rand([5]);
b = rand([3, 2]);
n = randn([7], dtype = f16);
)");
  std::map<std::string, HostTensor> out = run(g, rng_state(1234, -7, -1, 0));  // offset 2^32 - 1: the carry
  // a takes 2 counters, b 2, n 4 (two words per normal): 8 in all.
  CHECK(out.at("rng.state").data == std::vector<double>{1234, -7, 7, 1});
  for (double v : out.at("a").data) CHECK((v >= 0 && v < 1));
  CHECK(out.at("a").data != std::vector<double>(out.at("a").data.size(), out.at("a").data[0]));
  CHECK(std::vector<double>(out.at("a").data.begin(), out.at("a").data.begin() + 3) != out.at("b").data);
  // The next run, from the advanced state, draws other numbers.
  std::map<std::string, HostTensor> next = run(g, out.at("rng.state"));
  CHECK(next.at("a").data != out.at("a").data);
  // The same state draws the same numbers.
  CHECK(run(g, rng_state(1234, -7, -1, 0)).at("n").data == out.at("n").data);
}

TEST_CASE("rand and randn: a fixed seed's numbers pass mean, variance and chi-square checks") {
  ir::Graph g = compile_text(R"(program r;
output u : f32[20000];
output n : f32[20000];
u = rand([20000]);
n = randn([20000]);
)");
  std::map<std::string, HostTensor> out = run(g, rng_state(42, 0, 0, 0));
  const std::vector<double>& u = out.at("u").data;
  const std::vector<double>& n = out.at("n").data;
  std::vector<int> bins(20, 0);
  double mean = 0;
  for (double v : u) ++bins[static_cast<size_t>(v * 20)], mean += v;
  mean /= static_cast<double>(u.size());
  CHECK(mean == doctest::Approx(0.5).epsilon(0.01));
  double chi2 = 0, expected = static_cast<double>(u.size()) / 20;
  for (int b : bins) chi2 += (b - expected) * (b - expected) / expected;
  CHECK(chi2 < 43.8);  // chi-square with 19 degrees of freedom: p = 0.001
  double m = 0, sq = 0;
  for (double v : n) m += v, sq += v * v;
  m /= static_cast<double>(n.size());
  const double var = sq / static_cast<double>(n.size()) - m * m;
  CHECK(std::abs(m) < 0.03);  // 4 standard errors
  CHECK(var == doctest::Approx(1.0).epsilon(0.04));
}

HostTensor filled(DType dtype, std::vector<int64_t> shape, double value) {
  HostTensor t;
  t.dtype = dtype;
  t.shape = std::move(shape);
  int64_t n = 1;
  for (int64_t e : t.shape) n *= e;
  t.data.assign(static_cast<size_t>(n), value);
  return t;
}

size_t count_true(const HostTensor& t) { return static_cast<size_t>(std::count(t.data.begin(), t.data.end(), 1.0)); }

TEST_CASE("bernoulli and dropout: the mask is rand's uniforms below the bound, bit for bit") {
  // Each program's one draw takes counters from 0: the same uniforms.
  ir::Graph uniforms = compile_text("program u;\noutput u : f32[1000];\nu = rand([1000]);\n");
  ir::Graph mask = compile_text("program m;\noutput m : bool[1000];\nm = bernoulli(0.3, [1000]);\n");
  ir::Graph dropped = compile_text("program d;\ninput x : f32[1000];\noutput y : f32[1000];\ny = dropout(x, 0.3);\n");
  const HostTensor state = rng_state(99, 1, 5, 0);
  const std::vector<double> u = run(uniforms, state).at("u").data;
  const std::vector<double> m = run(mask, state).at("m").data;
  HostTensor x = filled(DType::kF32, {1000}, 0);
  for (size_t i = 0; i < 1000; ++i) x.data[i] = round_to_dtype(0.5 + 0.001 * static_cast<double>(i), DType::kF32);
  const std::vector<double> y = run(dropped, state, {{"x", x}}).at("y").data;
  const double p30 = round_to_dtype(0.3, DType::kF32), p70 = round_to_dtype(0.7, DType::kF32);
  for (size_t i = 0; i < 1000; ++i) {
    CAPTURE(i);
    CHECK(m[i] == (u[i] < p30 ? 1.0 : 0.0));
    // Kept where u < 1 - p, as x / (1 - p) rounded to f32; dropped: 0.
    CHECK(y[i] == (u[i] < p70 ? round_to_dtype(x.data[i] / p70, DType::kF32) : 0.0));
  }
}

TEST_CASE("bernoulli and dropout: a new mask each run, the same one from the same state") {
  ir::Graph g = compile_text(R"(program d;
input x : f16[64, 32];
output y : f16[64, 32];
output m : bool[64, 32];
y = dropout(x, 0.25);
m = bernoulli(0.5, [64, 32]);
)");
  const HostTensor x = filled(DType::kF16, {64, 32}, 1.5);
  std::map<std::string, HostTensor> first = run(g, rng_state(7, 0, 0, 0), {{"x", x}});
  std::map<std::string, HostTensor> second = run(g, first.at("rng.state"), {{"x", x}});
  CHECK(second.at("y").data != first.at("y").data);
  CHECK(second.at("m").data != first.at("m").data);
  std::map<std::string, HostTensor> again = run(g, rng_state(7, 0, 0, 0), {{"x", x}});
  CHECK(again.at("y").data == first.at("y").data);
  CHECK(again.at("m").data == first.at("m").data);
  // Kept elements are x / (1 - p) = 1.5 / 0.75 = 2 exactly; the others 0.
  for (double v : first.at("y").data) CHECK((v == 2.0 || v == 0.0));
  // The state advanced past both draws: 2048 / 4 counters each.
  CHECK(first.at("rng.state").data == std::vector<double>{7, 0, 1024, 0});
}

TEST_CASE("bernoulli and dropout: the kept fraction of a fixed seed is within 5 standard deviations") {
  ir::Graph g = compile_text(R"(program d;
input x : f32[100000];
output y : f32[100000];
output m : bool[100000];
y = dropout(x, 0.3);
m = bernoulli(0.25, [100000]);
)");
  std::map<std::string, HostTensor> out = run(g, rng_state(2024, 0, 0, 0), {{"x", filled(DType::kF32, {100000}, 1.0)}});
  // Binomial(n, q): standard deviation sqrt(n q (1 - q)); 5 of them hold with probability 1 - 6e-7.
  const double n = 100000;
  const auto within = [&](size_t count, double q) {
    return std::abs(static_cast<double>(count) - n * q) < 5 * std::sqrt(n * q * (1 - q));
  };
  size_t kept = 0;
  for (double v : out.at("y").data) kept += v != 0;
  CHECK(within(kept, 0.7));
  CHECK(within(count_true(out.at("m")), 0.25));
  // A kept element is 1 / 0.7 rounded to f32.
  for (double v : out.at("y").data) CHECK((v == 0 || v == round_to_dtype(1.0 / round_to_dtype(0.7, DType::kF32), DType::kF32)));
}

TEST_CASE("dropout fuses its draw, comparison and where into one kernel") {
  ir::Graph g = compile_text(R"(program d;
dim B in [1, 16];
input x : f32[B, 64];
output y : f32[B, 64];
y = dropout(x * 2.0, 0.1);
)");
  const plan::Plan p = plan_program(g);
  int steps_with_draw = 0;
  for (const plan::Step& s : p.steps) {
    bool draw = false;
    for (ir::ValueId v : s.values) draw = draw || p.graph.node(v).op == ir::Op::kRandUniform;
    if (!draw) continue;
    ++steps_with_draw;
    CHECK(p.graph.node(s.result).op == ir::Op::kWhere);
    CHECK(s.values.size() >= 5);  // mul, rand, lt, div, where (the constants inline)
  }
  CHECK(steps_with_draw == 1);
}

}  // namespace
}  // namespace gdl
