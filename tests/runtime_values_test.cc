// Run-time values in subscripts: tab[0:T] takes the first T rows of a
// static axis, and a rank-0 i32 (x[T - 1], tab[pos]) indexes an axis, each
// through the interpreter and the planned execution, checked by hand.
#include <doctest/doctest.h>

#include "cpu_program.h"

namespace gdl {
namespace {

using namespace test_programs;

TEST_CASE("tab[0:T] takes the first T rows of a static axis") {
  ir::Graph g = compile_text(R"(program rows;
dim T in [1, 12];
param tab : f32[16, 3];
input x : f32[T, 3];
output y : f32[T, 3];
output z : f32[T, 3];
y = x + tab[0:T];
z = tab[:T, :] * 2.0;
)");
  std::mt19937 rng(3);
  for (int64_t t : {1, 5, 12}) {
    INFO("T = " << t);
    Bindings b;
    b.dims = {t};
    b.tensors["tab"] = random_tensor(rng, DType::kF32, {16, 3});
    b.tensors["x"] = random_tensor(rng, DType::kF32, {t, 3});
    const std::map<std::string, HostTensor> out = run_both(g, b);
    const std::vector<double>& tab = b.tensors["tab"].data;
    const std::vector<double>& x = b.tensors["x"].data;
    REQUIRE(out.at("y").shape == std::vector<int64_t>{t, 3});
    for (int64_t i = 0; i < t * 3; ++i) {
      CHECK(out.at("y").data[static_cast<size_t>(i)] ==
            doctest::Approx(round_to_dtype(x[static_cast<size_t>(i)] + tab[static_cast<size_t>(i)], DType::kF32)));
      CHECK(out.at("z").data[static_cast<size_t>(i)] == doctest::Approx(2 * tab[static_cast<size_t>(i)]));
    }
  }
}

TEST_CASE("an index may be a run-time i32: x[T - 1], tab[pos], m[1, i, :]; outside the axis it gives zeros") {
  ir::Graph g = compile_text(R"(program pick;
dim T in [1, 12];
input x : f32[T, 3];
input tab : f32[10, 3];
input m : f32[2, 5, 4];
input pos : i32;
input i : i32[1];
output last : f32[3];
output row : f32[3];
output mid : f32[4];
output cell : f32;
last = x[T - 1];
row = tab[pos];
mid = m[1, i[0], :];
cell = m[0, i[0], pos - 5];
)");
  std::mt19937 rng(9);
  for (int64_t t : {1, 7, 12})
    for (int64_t pos : {0, 6, 9, 10, -1}) {
      INFO("T = " << t << ", pos = " << pos);
      Bindings b;
      b.dims = {t};
      b.tensors["x"] = random_tensor(rng, DType::kF32, {t, 3});
      b.tensors["tab"] = random_tensor(rng, DType::kF32, {10, 3});
      b.tensors["m"] = random_tensor(rng, DType::kF32, {2, 5, 4});
      b.tensors["pos"] = tensor(DType::kI32, {}, {static_cast<double>(pos)});
      b.tensors["i"] = tensor(DType::kI32, {1}, {static_cast<double>((t + pos + 5) % 6)});  // 5: outside m's axis
      const std::map<std::string, HostTensor> out = run_both(g, b);
      const int64_t i = (t + pos + 5) % 6;
      for (int64_t c = 0; c < 3; ++c) {
        CHECK(out.at("last").data[static_cast<size_t>(c)] == b.tensors["x"].data[static_cast<size_t>((t - 1) * 3 + c)]);
        const bool in_tab = pos >= 0 && pos < 10;
        CHECK(out.at("row").data[static_cast<size_t>(c)] == (in_tab ? b.tensors["tab"].data[static_cast<size_t>(pos * 3 + c)] : 0.0));
      }
      for (int64_t c = 0; c < 4; ++c)
        CHECK(out.at("mid").data[static_cast<size_t>(c)] ==
              (i < 5 ? b.tensors["m"].data[static_cast<size_t>(20 + i * 4 + c)] : 0.0));
      const bool in_cell = i < 5 && pos - 5 >= 0 && pos - 5 < 4;
      CHECK(out.at("cell").data[0] == (in_cell ? b.tensors["m"].data[static_cast<size_t>(i * 4 + pos - 5)] : 0.0));
    }
}

}  // namespace
}  // namespace gdl
