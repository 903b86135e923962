// Run-time dims as values and as slice bounds: tab[0:T] takes the first T
// rows of a static axis, and a dim's value takes part in arithmetic, each
// through the interpreter and the planned execution, checked by hand.
#include <doctest/doctest.h>

#include "cpu_program.h"

namespace gdl {
namespace {

using namespace test_programs;

TEST_CASE("tab[a:T] takes T rows of a static axis from row a") {
  ir::Graph g = compile_text(R"(program rows;
dim T in [1, 12];
param tab : f32[16, 3];
input x : f32[T, 3];
output y : f32[T, 3];
output z : f32[T, 3];
y = x + tab[0:T];
z = tab[4:T, :] * 2.0;
)");
  std::mt19937 rng(3);
  for (int64_t t : {1, 5, 12}) {
    INFO("T = " << t);
    Bindings b;
    b.tensors["tab"] = random_tensor(rng, DType::kF32, {16, 3});
    b.tensors["x"] = random_tensor(rng, DType::kF32, {t, 3});
    const std::map<std::string, HostTensor> out = run_both(g, b);
    const std::vector<double>& tab = b.tensors["tab"].data;
    const std::vector<double>& x = b.tensors["x"].data;
    REQUIRE(out.at("y").shape == std::vector<int64_t>{t, 3});
    for (int64_t i = 0; i < t * 3; ++i) {
      CHECK(out.at("y").data[static_cast<size_t>(i)] ==
            doctest::Approx(round_to_dtype(x[static_cast<size_t>(i)] + tab[static_cast<size_t>(i)], DType::kF32)));
      CHECK(out.at("z").data[static_cast<size_t>(i)] == doctest::Approx(2 * tab[static_cast<size_t>(12 + i)]));
    }
  }
}

}  // namespace
}  // namespace gdl
