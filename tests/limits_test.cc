// The size limits: tensors of rank 6 through the interpreter, the plan and
// the kernels' text, and a tensor of more than 2^31 elements, whose kernels
// index in 64 bits.
#include <doctest/doctest.h>

#include <numeric>

#include "codegen/codegen.h"
#include "cpu_program.h"

namespace gdl {
namespace {

using namespace test_programs;

TEST_CASE("rank 6: elementwise with broadcast, concat, transpose, a reduction over several axes, reshape") {
  ir::Graph g = compile_text(R"(program six;
input x : f32[2, 3, 1, 2, 2, 3];
input b : f32[3, 1, 1, 1, 3];
output t : f32[3, 2, 3, 2, 2, 2];
output s : f32[2, 2, 3];
output r : f32[6, 24];
let y = x + b;                                   # b broadcasts over axes 0, 2, 3, 4
let z = concat(y, y, axis = 2);                  # [2, 3, 2, 2, 2, 3]
t = transpose(z, perm = [5, 0, 1, 3, 4, 2]);
s = sum(z, axis = [1, 2, 4]);
r = reshape(z, [6, -1]);
)");
  std::mt19937 rng(6);
  Bindings in;
  in.tensors["x"] = random_tensor(rng, DType::kF32, {2, 3, 1, 2, 2, 3});
  in.tensors["b"] = random_tensor(rng, DType::kF32, {3, 1, 1, 1, 3});
  const std::map<std::string, HostTensor> out = run_both(g, in);
  const std::vector<double>& x = in.tensors["x"].data;
  const std::vector<double>& b = in.tensors["b"].data;
  auto y = [&](int64_t i0, int64_t i1, int64_t i3, int64_t i4, int64_t i5) {
    return x[static_cast<size_t>(((i0 * 3 + i1) * 2 + i3) * 6 + i4 * 3 + i5)] + b[static_cast<size_t>(i1 * 3 + i5)];
  };
  const HostTensor& t = out.at("t");  // t[a, b, c, d, e, f] = z[b, c, f, d, e, a]
  const HostTensor& s = out.at("s");
  const HostTensor& r = out.at("r");
  size_t at = 0;
  for (int64_t a = 0; a < 3; ++a)
    for (int64_t i0 = 0; i0 < 2; ++i0)
      for (int64_t i1 = 0; i1 < 3; ++i1)
        for (int64_t i3 = 0; i3 < 2; ++i3)
          for (int64_t i4 = 0; i4 < 2; ++i4)
            for (int64_t copy = 0; copy < 2; ++copy) CHECK(t.data.at(at++) == doctest::Approx(y(i0, i1, i3, i4, a)));
  at = 0;
  for (int64_t i0 = 0; i0 < 2; ++i0)
    for (int64_t i3 = 0; i3 < 2; ++i3)
      for (int64_t i5 = 0; i5 < 3; ++i5) {
        double want = 0;
        for (int64_t i1 = 0; i1 < 3; ++i1)
          for (int64_t i4 = 0; i4 < 2; ++i4) want += 2 * y(i0, i1, i3, i4, i5);
        CHECK(s.data.at(at++) == doctest::Approx(want));
      }
  REQUIRE(r.shape == std::vector<int64_t>{6, 24});
  CHECK(r.data.at(24 * 5 + 23) == doctest::Approx(y(1, 2, 1, 1, 2)));  // the last element
}

TEST_CASE("more than 2^31 elements: kernels index in 64 bits") {
  // 17 * 8 * 4096 * 4096 = 2^31 + 2^27 elements: the same program runs on the GPU (tests/gpu/state_test.cc).
  ir::Graph g = compile_text(R"(program big;
state m : f16[17, 8, 4096, 4096];
input at : i32[1];
input row : f16[4096];
output last : f16[4096];
m = m * 0.5 + 1.0;
m[16, 7] = scatter(m[16, 7], at, reshape(row, [1, 4096]), axis = 0);
last = m[16, 7, 4095];
)");
  plan::Plan p = plan_program(g);
  const ir::ValueId m = p.graph.leaves(ir::Op::kState).at(0);
  CHECK(p.buffers.at(static_cast<size_t>(m)).bytes == (uint64_t{1} << 32) + (uint64_t{1} << 28));
  const std::string source = generate_cuda(p).source;
  CHECK(source.find("long long") != std::string::npos);
}

}  // namespace
}  // namespace gdl
