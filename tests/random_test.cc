// rand and randn: Philox-4x32-10 against the published known answer, the
// counters each op takes and the run's advance of the state, and the
// distribution of a fixed seed's numbers (mean, variance, chi-square).
#include <doctest/doctest.h>

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

std::map<std::string, HostTensor> run(const ir::Graph& g, const HostTensor& state) {
  Bindings b;
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

}  // namespace
}  // namespace gdl
