// The CPU reference interpreter: every op against values computed by hand or
// by a simple independent formula, dtype rounding, run-time dims, and the
// binding checks.
#include <doctest/doctest.h>

#include <cmath>
#include <limits>

#include "interp/interp.h"
#include "ir_builder.h"

using namespace gdl;
using namespace gdl::testing;
using ir::Op;

namespace {

// Deterministic, non-zero, varied values in about [-2.3, 2.5].
std::vector<double> wavy(size_t n, double seed = 0.0) {
  std::vector<double> v(n);
  for (size_t i = 0; i < n; ++i) v[i] = 2.2 * std::sin(1.37 * static_cast<double>(i) + seed) + 0.15;
  return v;
}

double f32(double v) { return round_to_dtype(v, DType::kF32); }

const double kNaN = std::numeric_limits<double>::quiet_NaN();

}  // namespace

TEST_CASE("unary float ops match their formulas") {
  std::vector<double> xs = {-2.5, -0.75, 0.3, 1.2, 3.1};
  std::vector<double> positive = {0.25, 0.8, 1.5, 2.0, 9.0};
  struct Case {
    Op op;
    bool needs_positive;
    double (*formula)(double);
  };
  const Case cases[] = {
      {Op::kNeg, false, [](double x) { return -x; }},
      {Op::kExp, false, [](double x) { return std::exp(x); }},
      {Op::kLog, true, [](double x) { return std::log(x); }},
      {Op::kSqrt, true, [](double x) { return std::sqrt(x); }},
      {Op::kRsqrt, true, [](double x) { return 1 / std::sqrt(x); }},
      {Op::kTanh, false, [](double x) { return std::tanh(x); }},
      {Op::kSigmoid, false, [](double x) { return 1 / (1 + std::exp(-x)); }},
      {Op::kRelu, false, [](double x) { return x > 0 ? x : 0.0; }},
      {Op::kGelu, false, [](double x) { return 0.5 * x * (1 + std::erf(x / std::sqrt(2.0))); }},
      {Op::kSilu, false, [](double x) { return x * (1 / (1 + std::exp(-x))); }},
      {Op::kAbs, false, [](double x) { return std::fabs(x); }},
      {Op::kCos, false, [](double x) { return std::cos(x); }},
      {Op::kSin, false, [](double x) { return std::sin(x); }},
      {Op::kErf, false, [](double x) { return std::erf(x); }},
  };
  for (const Case& c : cases) {
    CAPTURE(ir::op_name(c.op));
    GraphBuilder b;
    auto x = b.input("x", type(DType::kF32, {5}));
    b.output("y", b.unary(c.op, x));
    const auto& in = c.needs_positive ? positive : xs;
    auto out = run(b.g, {{}, {{"x", tensor(DType::kF32, {5}, in)}}, {}});
    const HostTensor& y = out.at("y");
    REQUIRE(y.shape == std::vector<int64_t>{5});
    for (size_t i = 0; i < in.size(); ++i)
      CHECK(y.data[i] == doctest::Approx(c.formula(f32(in[i]))).epsilon(1e-6));
  }
}

TEST_CASE("gelu is the exact erf form, not the tanh approximation") {
  GraphBuilder b;
  auto x = b.input("x", type(DType::kF32, {1}));
  b.output("y", b.unary(Op::kGelu, x));
  auto out = run(b.g, {{}, {{"x", tensor(DType::kF32, {1}, {1.0})}}, {}});
  CHECK(out.at("y").data[0] == f32(0.8413447460685429));  // 0.5 * (1 + erf(1 / sqrt 2))
}

TEST_CASE("not, relu of NaN, and casts") {
  GraphBuilder b;
  auto m = b.input("m", type(DType::kBool, {3}));
  auto x = b.input("x", type(DType::kF32, {4}));
  b.output("not", b.unary(Op::kNot, m));
  b.output("relu", b.unary(Op::kRelu, x));
  b.output("to_i32", b.cast(x, DType::kI32));
  b.output("to_bool", b.cast(x, DType::kBool));
  auto out = run(b.g, {{},
                       {{"m", tensor(DType::kBool, {3}, {1, 0, 1})},
                        {"x", tensor(DType::kF32, {4}, {-2.7, 2.7, kNaN, 0.0})}},
                       {}});
  CHECK(out.at("not").data == std::vector<double>{0, 1, 0});
  CHECK(out.at("not").dtype == DType::kBool);
  const auto& relu = out.at("relu").data;
  CHECK(relu[0] == 0.0);
  CHECK(std::isnan(relu[2]));  // relu propagates NaN
  CHECK(out.at("to_i32").data == std::vector<double>{-2, 2, 0, 0});  // toward zero; NaN -> 0
  CHECK(out.at("to_bool").data == std::vector<double>{1, 1, 1, 0});
}

TEST_CASE("f16 and bf16 results are rounded to their dtype") {
  GraphBuilder b;
  auto one = b.input("one", type(DType::kF16, {1}));
  auto three = b.input("three", type(DType::kF16, {1}));
  auto x = b.input("x", type(DType::kF32, {2}));
  b.output("third", b.binary(Op::kDiv, one, three));
  b.output("bf", b.cast(x, DType::kBF16));
  b.output("half", b.cast(x, DType::kF16));
  auto out = run(b.g, {{},
                       {{"one", tensor(DType::kF16, {1}, {1})},
                        {"three", tensor(DType::kF16, {1}, {3})},
                        {"x", tensor(DType::kF32, {2}, {1.0 / 3.0, 70000.0})}},
                       {}});
  float third = 1.0f / 3.0f;
  CHECK(out.at("third").data[0] == half_bits_to_float(float_to_half_bits(third)));
  CHECK(out.at("third").data[0] != doctest::Approx(1.0 / 3.0).epsilon(1e-6));  // f16 is coarse
  CHECK(out.at("bf").data[0] == bf16_bits_to_float(float_to_bf16_bits(third)));
  CHECK(out.at("bf").data[1] == bf16_bits_to_float(float_to_bf16_bits(70000.0f)));
  CHECK(std::isinf(out.at("half").data[1]));  // beyond the f16 range
}

TEST_CASE("binary ops broadcast like numpy: (3,1) + (4)") {
  GraphBuilder b;
  auto a = b.input("a", type(DType::kF32, {3, 1}));
  auto c = b.input("c", type(DType::kF32, {4}));
  for (Op op : {Op::kAdd, Op::kSub, Op::kMul, Op::kDiv, Op::kPow, Op::kMin, Op::kMax})
    b.output(ir::op_name(op), b.binary(op, a, c));
  std::vector<double> av = {0.5, 1.25, 2.0}, cv = {-1.5, 0.75, 2.0, 3.25};
  auto out = run(b.g, {{}, {{"a", tensor(DType::kF32, {3, 1}, av)}, {"c", tensor(DType::kF32, {4}, cv)}}, {}});
  for (size_t i = 0; i < 3; ++i) {
    for (size_t j = 0; j < 4; ++j) {
      size_t k = i * 4 + j;
      double x = av[i], y = cv[j];
      CHECK(out.at("add").data[k] == f32(x + y));
      CHECK(out.at("sub").data[k] == f32(x - y));
      CHECK(out.at("mul").data[k] == f32(x * y));
      CHECK(out.at("div").data[k] == f32(x / y));
      CHECK(out.at("pow").data[k] == f32(std::pow(x, y)));
      CHECK(out.at("min").data[k] == std::min(x, y));
      CHECK(out.at("max").data[k] == std::max(x, y));
    }
  }
  CHECK(out.at("add").shape == std::vector<int64_t>{3, 4});
}

TEST_CASE("comparisons and logic produce bool 0/1; min and max propagate NaN") {
  GraphBuilder b;
  auto x = b.input("x", type(DType::kF32, {4}));
  auto y = b.input("y", type(DType::kF32, {4}));
  auto p = b.input("p", type(DType::kBool, {4}));
  auto q = b.input("q", type(DType::kBool, {4}));
  for (Op op : {Op::kLt, Op::kLe, Op::kGt, Op::kGe, Op::kEq, Op::kNe}) b.output(ir::op_name(op), b.binary(op, x, y));
  b.output("and", b.binary(Op::kAnd, p, q));
  b.output("or", b.binary(Op::kOr, p, q));
  b.output("min", b.binary(Op::kMin, x, y));
  b.output("max", b.binary(Op::kMax, x, y));
  auto out = run(b.g, {{},
                       {{"x", tensor(DType::kF32, {4}, {1.5, 2.0, -3.0, kNaN})},
                        {"y", tensor(DType::kF32, {4}, {2.5, 2.0, -4.0, 1.0})},
                        {"p", tensor(DType::kBool, {4}, {1, 1, 0, 0})},
                        {"q", tensor(DType::kBool, {4}, {1, 0, 1, 0})}},
                       {}});
  CHECK(out.at("lt").dtype == DType::kBool);
  CHECK(out.at("lt").data == std::vector<double>{1, 0, 0, 0});
  CHECK(out.at("le").data == std::vector<double>{1, 1, 0, 0});
  CHECK(out.at("gt").data == std::vector<double>{0, 0, 1, 0});
  CHECK(out.at("ge").data == std::vector<double>{0, 1, 1, 0});
  CHECK(out.at("eq").data == std::vector<double>{0, 1, 0, 0});
  CHECK(out.at("ne").data == std::vector<double>{1, 0, 1, 1});  // NaN != anything
  CHECK(out.at("and").data == std::vector<double>{1, 0, 0, 0});
  CHECK(out.at("or").data == std::vector<double>{1, 1, 1, 0});
  CHECK(out.at("min").data[2] == -4.0);
  CHECK(out.at("max").data[0] == 2.5);
  CHECK(std::isnan(out.at("min").data[3]));
  CHECK(std::isnan(out.at("max").data[3]));
}

TEST_CASE("i32 arithmetic: C division, division by zero gives 0, wrap-around") {
  GraphBuilder b;
  auto x = b.input("x", type(DType::kI32, {5}));
  auto y = b.input("y", type(DType::kI32, {5}));
  b.output("div", b.binary(Op::kDiv, x, y));
  b.output("add", b.binary(Op::kAdd, x, y));
  b.output("neg", b.unary(Op::kNeg, x));
  const double big = 2147483647, small = -2147483648.0;
  auto out = run(b.g, {{},
                       {{"x", tensor(DType::kI32, {5}, {7, -7, 5, big, small})},
                        {"y", tensor(DType::kI32, {5}, {-2, 2, 0, 1, -1})}},
                       {}});
  CHECK(out.at("div").data == std::vector<double>{-3, -3, 0, big, small});  // INT_MIN / -1 wraps
  CHECK(out.at("add").data == std::vector<double>{5, -5, 5, small, big});   // wraps both ways
  CHECK(out.at("neg").data == std::vector<double>{-7, 7, -5, -big, small});
}

TEST_CASE("cos, sin, erf, floor, ceil, round and sign by hand, with NaN, zeros and halves") {
  GraphBuilder b;
  auto x = b.input("x", type(DType::kF32, {11}));
  for (Op op : {Op::kFloor, Op::kCeil, Op::kRound, Op::kSign, Op::kCos, Op::kSin, Op::kErf})
    b.output(ir::op_name(op), b.unary(op, x));
  const double pi = f32(3.14159265358979);
  auto out = run(b.g, {{}, {{"x", tensor(DType::kF32, {11}, {-2.5, -1.5, -0.5, 0.5, 1.5, 2.5, -0.0, 0.0, kNaN, 3e9, pi})}}, {}});
  auto same = [](const std::vector<double>& got, const std::vector<double>& want) {
    REQUIRE(got.size() == want.size());
    for (size_t i = 0; i < want.size(); ++i) {
      CAPTURE(i);
      if (std::isnan(want[i])) CHECK(std::isnan(got[i]));
      else CHECK(got[i] == want[i]);
    }
  };
  same(out.at("floor").data, {-3, -2, -1, 0, 1, 2, 0, 0, kNaN, 3e9, 3});
  same(out.at("ceil").data, {-2, -1, 0, 1, 2, 3, 0, 0, kNaN, 3e9, 4});
  same(out.at("round").data, {-2, -2, 0, 0, 2, 2, 0, 0, kNaN, 3e9, 3});  // half to even
  same(out.at("sign").data, {-1, -1, -1, 1, 1, 1, 0, 0, kNaN, 1, 1});
  CHECK(std::signbit(out.at("round").data[2]));  // round(-0.5) is -0, as rint gives
  const auto& cos = out.at("cos").data;
  const auto& sin = out.at("sin").data;
  const auto& erf = out.at("erf").data;
  CHECK(cos[7] == 1.0);
  CHECK(sin[6] == 0.0);
  CHECK(cos[10] == doctest::Approx(-1.0).epsilon(1e-7));
  CHECK(sin[10] == doctest::Approx(0.0).epsilon(1e-6));
  CHECK(cos[3] == f32(0.8775825618903728));  // cos(0.5)
  CHECK(sin[0] == f32(-0.5984721441039564));  // sin(-2.5)
  CHECK(erf[3] == f32(0.5204998778130465));  // erf(0.5)
  CHECK(erf[2] == -erf[3]);
  CHECK(erf[9] == 1.0);
  CHECK(std::isnan(cos[8]));
  CHECK(std::isnan(erf[8]));
}

TEST_CASE("sign of i32 and f16") {
  GraphBuilder b;
  auto n = b.input("n", type(DType::kI32, {5}));
  auto h = b.input("h", type(DType::kF16, {3}));
  b.output("n", b.unary(Op::kSign, n));
  b.output("h", b.unary(Op::kSign, h));
  auto out = run(b.g, {{},
                       {{"n", tensor(DType::kI32, {5}, {-5, 0, 7, -2147483648.0, 2147483647})},
                        {"h", tensor(DType::kF16, {3}, {-0.001, 60000, 0})}},
                       {}});
  CHECK(out.at("n").data == std::vector<double>{-1, 0, 1, -1, 1});
  CHECK(out.at("h").data == std::vector<double>{-1, 1, 0});
}

TEST_CASE("i32 // and % floor like Python; x // 0 is 0 and x % 0 is x") {
  GraphBuilder b;
  auto x = b.input("x", type(DType::kI32, {11}));
  auto y = b.input("y", type(DType::kI32, {11}));
  b.output("floordiv", b.binary(Op::kFloorDiv, x, y));
  b.output("mod", b.binary(Op::kMod, x, y));
  const double big = 2147483647, small = -2147483648.0;
  const std::vector<double> xs = {7, -7, 7, -7, 5, -5, 0, small, small, big, -1};
  const std::vector<double> ys = {2, 2, -2, -2, 0, 0, 3, -1, 2, small, 3};
  auto out = run(b.g, {{}, {{"x", tensor(DType::kI32, {11}, xs)}, {"y", tensor(DType::kI32, {11}, ys)}}, {}});
  const auto& q = out.at("floordiv").data;
  const auto& r = out.at("mod").data;
  CHECK(q == std::vector<double>{3, -4, -4, 3, 0, 0, 0, small, -1073741824, -1, -1});  // INT_MIN // -1 wraps
  CHECK(r == std::vector<double>{1, 1, -1, -1, 5, -5, 0, 0, 0, -1, 2});
  // a == b * (a // b) + a % b for every pair, in 32-bit arithmetic.
  for (size_t i = 0; i < xs.size(); ++i) {
    CAPTURE(i);
    auto wrapped = static_cast<int32_t>(static_cast<uint32_t>(
        static_cast<int64_t>(ys[i]) * static_cast<int64_t>(q[i]) + static_cast<int64_t>(r[i])));
    CHECK(wrapped == static_cast<int32_t>(xs[i]));
  }
}

TEST_CASE("i32 bitwise operators and shifts by any count") {
  GraphBuilder b;
  auto x = b.input("x", type(DType::kI32, {16}));
  auto n = b.input("n", type(DType::kI32, {16}));
  for (Op op : {Op::kBitAnd, Op::kBitOr, Op::kBitXor, Op::kShl, Op::kShr}) b.output(ir::op_name(op), b.binary(op, x, n));
  const double small = -2147483648.0, big = 2147483647;
  const std::vector<double> xs = {1, 1, 1, 1, -1, -8, -8, -8, 5, 3, small, 1073741824, -7, 7, -7, 123};
  const std::vector<double> ns = {0, 31, 32, -1, 31, 1, 40, -2, 33, 2, 1, 1, 1, small, big, -32};
  auto out = run(b.g, {{}, {{"x", tensor(DType::kI32, {16}, xs)}, {"n", tensor(DType::kI32, {16}, ns)}}, {}});
  CHECK(out.at("shl").data ==
        std::vector<double>{1, small, 0, 0, small, -16, 0, -2, 0, 12, 0, small, -14, 0, 0, 0});
  CHECK(out.at("shr").data == std::vector<double>{1, 0, 0, 2, -1, -4, -1, -32, 0, 0, -1073741824, 536870912,
                                                  -4, 0, -1, 0});  // -7 >> 1 is floor(-3.5)

  GraphBuilder c;
  auto p = c.input("p", type(DType::kI32, {4}));
  auto q = c.input("q", type(DType::kI32, {4}));
  for (Op op : {Op::kBitAnd, Op::kBitOr, Op::kBitXor}) c.output(ir::op_name(op), c.binary(op, p, q));
  auto bits = run(c.g, {{},
                        {{"p", tensor(DType::kI32, {4}, {12, -12, small, 5})},
                         {"q", tensor(DType::kI32, {4}, {10, 10, -1, 3})}},
                        {}});
  CHECK(bits.at("bitand").data == std::vector<double>{8, 0, small, 1});
  CHECK(bits.at("bitor").data == std::vector<double>{14, -2, -1, 7});
  CHECK(bits.at("bitxor").data == std::vector<double>{6, -2, big, 6});
}

TEST_CASE("clamp is min(max(x, lo), hi): broadcast bounds, NaN propagates, lo > hi gives hi") {
  GraphBuilder b;
  auto x = b.input("x", type(DType::kF32, {6}));
  auto hi = b.input("hi", type(DType::kF32, {6}));
  auto xi = b.input("xi", type(DType::kI32, {2, 3}));
  auto lo_i = b.input("lo_i", type(DType::kI32, {2, 1}));
  b.output("f", b.op(Op::kClamp, {x, b.constant(-1.0), hi}, type(DType::kF32, {6})));
  b.output("i", b.op(Op::kClamp, {xi, lo_i, b.constant(100, DType::kI32)}, type(DType::kI32, {2, 3})));
  auto out = run(b.g, {{},
                       {{"x", tensor(DType::kF32, {6}, {-2, 0.5, 3, kNaN, 1, 0.25})},
                        {"hi", tensor(DType::kF32, {6}, {1, 1, 1, 1, -5, kNaN})},
                        {"xi", tensor(DType::kI32, {2, 3}, {-7, 50, 300, -2147483648.0, 0, 2147483647})},
                        {"lo_i", tensor(DType::kI32, {2, 1}, {-5, 10})}},
                       {}});
  const auto& f = out.at("f").data;
  CHECK(f[0] == -1.0);
  CHECK(f[1] == 0.5);
  CHECK(f[2] == 1.0);
  CHECK(std::isnan(f[3]));  // NaN in x
  CHECK(f[4] == -5.0);      // lo > hi
  CHECK(std::isnan(f[5]));  // NaN in a bound
  CHECK(out.at("i").data == std::vector<double>{-5, 50, 100, 10, 10, 100});
}

TEST_CASE("where broadcasts condition and branches") {
  GraphBuilder b;
  auto c = b.input("c", type(DType::kBool, {2, 1}));
  auto x = b.input("x", type(DType::kF32, {3}));
  auto zero = b.constant(-1.5);
  b.output("y", b.op(Op::kWhere, {c, x, zero}, type(DType::kF32, {2, 3})));
  auto out = run(b.g, {{},
                       {{"c", tensor(DType::kBool, {2, 1}, {0, 1})}, {"x", tensor(DType::kF32, {3}, {0.5, 1.5, 2.5})}},
                       {}});
  CHECK(out.at("y").data == std::vector<double>{-1.5, -1.5, -1.5, 0.5, 1.5, 2.5});
}

TEST_CASE("matmul against a triple loop, with broadcast batch dims") {
  GraphBuilder b;
  auto a = b.input("a", type(DType::kF32, {2, 3, 4}));
  auto w = b.param("w", type(DType::kF32, {4, 5}));
  auto c = b.input("c", type(DType::kF32, {1, 2, 3}));
  auto d = b.input("d", type(DType::kF32, {2, 3, 2}));
  b.output("aw", b.op(Op::kMatMul, {a, w}, type(DType::kF32, {2, 3, 5})));
  b.output("cd", b.op(Op::kMatMul, {c, d}, type(DType::kF32, {2, 2, 2})));
  auto av = tensor(DType::kF32, {2, 3, 4}, wavy(24, 0.3)), wv = tensor(DType::kF32, {4, 5}, wavy(20, 1.1));
  auto cv = tensor(DType::kF32, {1, 2, 3}, wavy(6, 2.0)), dv = tensor(DType::kF32, {2, 3, 2}, wavy(12, 0.7));
  auto out = run(b.g, {{}, {{"a", av}, {"w", wv}, {"c", cv}, {"d", dv}}, {}});
  for (int bt = 0; bt < 2; ++bt)
    for (int i = 0; i < 3; ++i)
      for (int j = 0; j < 5; ++j) {
        double want = 0;
        for (int k = 0; k < 4; ++k) want += av.data[bt * 12 + i * 4 + k] * wv.data[k * 5 + j];
        CHECK(out.at("aw").data[bt * 15 + i * 5 + j] == doctest::Approx(f32(want)).epsilon(1e-6));
      }
  for (int bt = 0; bt < 2; ++bt)  // c's single batch is reused for both of d's
    for (int i = 0; i < 2; ++i)
      for (int j = 0; j < 2; ++j) {
        double want = 0;
        for (int k = 0; k < 3; ++k) want += cv.data[i * 3 + k] * dv.data[bt * 6 + k * 2 + j];
        CHECK(out.at("cd").data[bt * 4 + i * 2 + j] == doctest::Approx(f32(want)).epsilon(1e-6));
      }
}

TEST_CASE("sum, mean and max over an axis, with and without keepdims") {
  GraphBuilder b;
  auto x = b.input("x", type(DType::kF32, {2, 3}));
  b.output("sum0", b.op(Op::kSum, {x}, type(DType::kF32, {3}), axis_attrs(0)));
  b.output("sum1k", b.op(Op::kSum, {x}, type(DType::kF32, {2, 1}), axis_attrs(1, true)));
  b.output("mean1", b.op(Op::kMean, {x}, type(DType::kF32, {2}), axis_attrs(1)));
  b.output("max0k", b.op(Op::kReduceMax, {x}, type(DType::kF32, {1, 3}), axis_attrs(0, true)));
  b.output("max1", b.op(Op::kReduceMax, {x}, type(DType::kF32, {2}), axis_attrs(1)));
  // [[1.5, -2, 4], [0.25, 3, NaN]]
  auto out = run(b.g, {{}, {{"x", tensor(DType::kF32, {2, 3}, {1.5, -2, 4, 0.25, 3, kNaN})}}, {}});
  CHECK(out.at("sum0").data[0] == 1.75);
  CHECK(out.at("sum0").data[1] == 1.0);
  CHECK(std::isnan(out.at("sum0").data[2]));
  CHECK(out.at("sum1k").shape == std::vector<int64_t>{2, 1});
  CHECK(out.at("sum1k").data[0] == 3.5);
  CHECK(out.at("mean1").data[0] == f32(3.5 / 3));
  CHECK(out.at("max0k").shape == std::vector<int64_t>{1, 3});
  CHECK(out.at("max0k").data[0] == 1.5);
  CHECK(out.at("max0k").data[1] == 3.0);
  CHECK(std::isnan(out.at("max0k").data[2]));  // NaN propagates
  CHECK(out.at("max1").data[0] == 4.0);
}

TEST_CASE("min over an axis propagates NaN, like max") {
  GraphBuilder b;
  auto x = b.input("x", type(DType::kF32, {2, 3}));
  b.output("min0", b.op(Op::kReduceMin, {x}, type(DType::kF32, {3}), axis_attrs(0)));
  b.output("min1k", b.op(Op::kReduceMin, {x}, type(DType::kF32, {2, 1}), axis_attrs(1, true)));
  // [[1.5, -2, 4], [0.25, 3, NaN]]
  auto out = run(b.g, {{}, {{"x", tensor(DType::kF32, {2, 3}, {1.5, -2, 4, 0.25, 3, kNaN})}}, {}});
  CHECK(out.at("min0").data[0] == 0.25);
  CHECK(out.at("min0").data[1] == -2.0);
  CHECK(std::isnan(out.at("min0").data[2]));
  CHECK(out.at("min1k").shape == std::vector<int64_t>{2, 1});
  CHECK(out.at("min1k").data[0] == -2.0);
  CHECK(std::isnan(out.at("min1k").data[1]));
}

TEST_CASE("reductions over several axes of a rank-4 value, with and without keepdims") {
  GraphBuilder b;
  auto x = b.input("x", type(DType::kF32, {2, 3, 2, 2}));
  b.output("sum02", b.op(Op::kSum, {x}, type(DType::kF32, {3, 2}), axes_attrs({0, 2})));
  b.output("mean13k", b.op(Op::kMean, {x}, type(DType::kF32, {2, 1, 2, 1}), axes_attrs({1, 3}, true)));
  b.output("max_all", b.op(Op::kReduceMax, {x}, {DType::kF32, {}}, axes_attrs({0, 1, 2, 3})));
  b.output("min03", b.op(Op::kReduceMin, {x}, type(DType::kF32, {3, 2}), axes_attrs({0, 3})));
  // x[i][j][k][l] = flat index - 10.5: negative and positive values.
  std::vector<double> xs(24);
  for (size_t f = 0; f < xs.size(); ++f) xs[f] = static_cast<double>(f) - 10.5;
  auto at = [&](int i, int j, int k, int l) { return xs[static_cast<size_t>(((i * 3 + j) * 2 + k) * 2 + l)]; };
  auto out = run(b.g, {{}, {{"x", tensor(DType::kF32, {2, 3, 2, 2}, xs)}}, {}});
  for (int j = 0; j < 3; ++j)
    for (int l = 0; l < 2; ++l) {
      CHECK(out.at("sum02").data[static_cast<size_t>(j * 2 + l)] ==
            at(0, j, 0, l) + at(0, j, 1, l) + at(1, j, 0, l) + at(1, j, 1, l));
      CHECK(out.at("min03").data[static_cast<size_t>(j * 2 + l)] ==
            std::min({at(0, j, l, 0), at(0, j, l, 1), at(1, j, l, 0), at(1, j, l, 1)}));
    }
  CHECK(out.at("sum02").data[0] == -14.0);  // -10.5 - 8.5 + 1.5 + 3.5 (flat 0, 2, 12, 14)
  CHECK(out.at("mean13k").shape == std::vector<int64_t>{2, 1, 2, 1});
  for (int i = 0; i < 2; ++i)
    for (int k = 0; k < 2; ++k) {
      double total = 0;
      for (int j = 0; j < 3; ++j) total += at(i, j, k, 0) + at(i, j, k, 1);
      CHECK(out.at("mean13k").data[static_cast<size_t>(i * 2 + k)] == f32(total / 6));
    }
  CHECK(out.at("mean13k").data[0] == -6.0);  // flats 0, 1, 4, 5, 8, 9
  CHECK(out.at("max_all").shape.empty());
  CHECK(out.at("max_all").data[0] == 12.5);
  CHECK(out.at("min03").data[0] == -10.5);
}

TEST_CASE("i32 reductions over several axes: the sum wraps") {
  GraphBuilder b;
  auto x = b.input("x", type(DType::kI32, {2, 2}));
  b.output("sum", b.op(Op::kSum, {x}, {DType::kI32, {}}, axes_attrs({0, 1})));
  b.output("max", b.op(Op::kReduceMax, {x}, type(DType::kI32, {1, 1}), axes_attrs({0, 1}, true)));
  b.output("min", b.op(Op::kReduceMin, {x}, {DType::kI32, {}}, axes_attrs({0, 1})));
  auto out = run(b.g, {{}, {{"x", tensor(DType::kI32, {2, 2}, {2147483647, 1, -3, 3})}}, {}});
  CHECK(out.at("sum").data[0] == -2147483648.0);  // 2^31 wrapped
  CHECK(out.at("max").data[0] == 2147483647.0);
  CHECK(out.at("min").data[0] == -3.0);
}

TEST_CASE("argmax and argmin: ties to the lowest index, the first NaN wins, either axis") {
  GraphBuilder b;
  auto x = b.input("x", type(DType::kF32, {3, 4}));
  b.output("max1", b.op(Op::kArgMax, {x}, type(DType::kI32, {3}), axis_attrs(1)));
  b.output("min1", b.op(Op::kArgMin, {x}, type(DType::kI32, {3}), axis_attrs(1)));
  b.output("max0", b.op(Op::kArgMax, {x}, type(DType::kI32, {4}), axis_attrs(0)));
  b.output("min0k", b.op(Op::kArgMin, {x}, type(DType::kI32, {1, 4}), axis_attrs(0, true)));
  auto out = run(b.g, {{},
                       {{"x", tensor(DType::kF32, {3, 4},
                                     {1, 5, 5, -2,         // ties at 1 and 2
                                      -3, -1, -3, -1,      // ties for both
                                      2, kNaN, 7, kNaN})}},  // NaN beats everything, for argmin too
                       {}});
  CHECK(out.at("max1").data == std::vector<double>{1, 1, 1});
  CHECK(out.at("min1").data == std::vector<double>{3, 0, 1});
  CHECK(out.at("max1").dtype == DType::kI32);
  // Columns: [1, -3, 2], [5, -1, NaN], [5, -3, 7], [-2, -1, NaN].
  CHECK(out.at("max0").data == std::vector<double>{2, 2, 2, 2});
  CHECK(out.at("min0k").shape == std::vector<int64_t>{1, 4});
  CHECK(out.at("min0k").data == std::vector<double>{1, 2, 1, 2});
}

TEST_CASE("argmax and argmin of rank 1 and rank 4, i32 and f16 values that tie once rounded") {
  GraphBuilder b;
  auto v = b.input("v", type(DType::kI32, {5}));
  auto w = b.input("w", type(DType::kI32, {2, 1, 2, 3}));
  auto h = b.input("h", type(DType::kF16, {3}));
  b.output("vmax", b.op(Op::kArgMax, {v}, {DType::kI32, {}}, axis_attrs(0)));
  b.output("vmin", b.op(Op::kArgMin, {v}, {DType::kI32, {}}, axis_attrs(0)));
  b.output("wmax", b.op(Op::kArgMax, {w}, type(DType::kI32, {2, 1, 2}), axis_attrs(3)));
  b.output("wmin0", b.op(Op::kArgMin, {w}, type(DType::kI32, {1, 2, 3}), axis_attrs(0)));
  b.output("hmax", b.op(Op::kArgMax, {h}, {DType::kI32, {}}, axis_attrs(0)));
  auto out = run(b.g, {{},
                       {{"v", tensor(DType::kI32, {5}, {-7, 3, 3, -9, 1})},
                        {"w", tensor(DType::kI32, {2, 1, 2, 3}, {4, 9, 9, 0, -1, -5, 2, 2, 2, 8, 1, 8})},
                        {"h", tensor(DType::kF16, {3}, {1.0001, 1.0002, 0.5})}},  // both 1.0 in f16
                       {}});
  CHECK(out.at("vmax").data[0] == 1);
  CHECK(out.at("vmin").data[0] == 3);
  CHECK(out.at("wmax").data == std::vector<double>{1, 0, 0, 0});  // [4 9 9] [0 -1 -5] [2 2 2] [8 1 8]
  CHECK(out.at("wmin0").data == std::vector<double>{1, 1, 1, 0, 0, 0});
  CHECK(out.at("hmax").data[0] == 0);
}

TEST_CASE("topk: values and indices best first, ties by the lower index, NaN first, either axis") {
  GraphBuilder b;
  auto x = b.input("x", type(DType::kF32, {2, 5}));
  auto c = b.input("c", type(DType::kF32, {3, 2}));
  auto v = b.input("v", type(DType::kI32, {4}));
  ir::Attrs k3 = ints_attrs({3}), k2 = ints_attrs({2}), k4 = ints_attrs({4});
  k3.axis = 1, k2.axis = 0, k4.axis = 0;
  b.output("xv", b.op(Op::kTopKValues, {x}, type(DType::kF32, {2, 3}), k3));
  b.output("xi", b.op(Op::kTopKIndices, {x}, type(DType::kI32, {2, 3}), k3));
  b.output("cv", b.op(Op::kTopKValues, {c}, type(DType::kF32, {2, 2}), k2));
  b.output("ci", b.op(Op::kTopKIndices, {c}, type(DType::kI32, {2, 2}), k2));
  b.output("vv", b.op(Op::kTopKValues, {v}, type(DType::kI32, {4}), k4));
  b.output("vi", b.op(Op::kTopKIndices, {v}, type(DType::kI32, {4}), k4));
  auto out = run(b.g, {{},
                       {{"x", tensor(DType::kF32, {2, 5}, {3, -1, 3, 7, kNaN, -2, -2, -5, -1, -2})},
                        {"c", tensor(DType::kF32, {3, 2}, {1, 4, 6, 4, 6, -3})},
                        {"v", tensor(DType::kI32, {4}, {5, -3, 5, 9})}},
                       {}});
  const std::vector<double>& xv = out.at("xv").data;
  CHECK(std::isnan(xv[0]));
  CHECK(std::vector<double>(xv.begin() + 1, xv.end()) == std::vector<double>{7, 3, -1, -2, -2});
  CHECK(out.at("xi").data == std::vector<double>{4, 3, 0, 3, 0, 1});
  // Columns [1, 6, 6] and [4, 4, -3], k = 2 along axis 0: result [k, column].
  CHECK(out.at("cv").data == std::vector<double>{6, 4, 6, 4});
  CHECK(out.at("ci").data == std::vector<double>{1, 0, 2, 1});
  // k equal to the extent: a full sort.
  CHECK(out.at("vv").data == std::vector<double>{9, 5, 5, -3});
  CHECK(out.at("vi").data == std::vector<double>{3, 0, 2, 1});
}

TEST_CASE("cumsum: running sums on either axis; f16 accumulates wider, i32 wraps") {
  GraphBuilder b;
  auto x = b.input("x", type(DType::kF32, {2, 3}));
  auto h = b.input("h", type(DType::kF16, {3}));
  auto i = b.input("i", type(DType::kI32, {3}));
  b.output("last", b.op(Op::kCumSum, {x}, type(DType::kF32, {2, 3}), axis_attrs(1)));
  b.output("first", b.op(Op::kCumSum, {x}, type(DType::kF32, {2, 3}), axis_attrs(0)));
  b.output("h", b.op(Op::kCumSum, {h}, type(DType::kF16, {3}), axis_attrs(0)));
  b.output("i", b.op(Op::kCumSum, {i}, type(DType::kI32, {3}), axis_attrs(0)));
  auto out = run(b.g, {{},
                       {{"x", tensor(DType::kF32, {2, 3}, {1.5, -2, 4, 0.25, 3, -1})},
                        {"h", tensor(DType::kF16, {3}, {2048, 1, 1})},
                        {"i", tensor(DType::kI32, {3}, {2147483647, 1, -5})}},
                       {}});
  CHECK(out.at("last").data == std::vector<double>{1.5, -0.5, 3.5, 0.25, 3.25, 2.25});
  CHECK(out.at("first").data == std::vector<double>{1.5, -2, 4, 1.75, 1, 3});
  // 2049 rounds to 2048 in f16, but the running sum goes on from 2049: an
  // f16 accumulator would stay at 2048.
  CHECK(out.at("h").data == std::vector<double>{2048, 2048, 2050});
  CHECK(out.at("i").data == std::vector<double>{2147483647, -2147483648.0, 2147483643});
}

TEST_CASE("arange counts by its step, up to a constant or a run-time dim; one_hot zeroes ids out of range") {
  GraphBuilder b;
  Dim t = b.dim("T", 1, 16);
  auto ids = b.input("ids", type(DType::kI32, {2, 3}));
  b.output("up", b.op(Op::kArange, {}, type(DType::kI32, {3}), ints_attrs({2, 11, 3})));
  b.output("down", b.op(Op::kArange, {}, type(DType::kI32, {3}), ints_attrs({5, -4, -3})));
  b.output("evens", b.op(Op::kArange, {}, type(DType::kI32, {4}), ints_attrs({0, 7, 2})));
  b.output("t", b.op(Op::kArange, {}, {DType::kI32, {t}}, ints_attrs({0, 0, 1})));
  b.output("f16", b.op(Op::kOneHot, {ids}, type(DType::kF16, {2, 3, 4}), ints_attrs({4})));
  b.output("bool", b.op(Op::kOneHot, {ids}, type(DType::kBool, {2, 3, 4}), ints_attrs({4})));
  auto out = run(b.g, {{5}, {{"ids", tensor(DType::kI32, {2, 3}, {0, 2, -1, 3, 4, 1})}}, {}});
  CHECK(out.at("up").data == std::vector<double>{2, 5, 8});
  CHECK(out.at("down").data == std::vector<double>{5, 2, -1});
  CHECK(out.at("evens").data == std::vector<double>{0, 2, 4, 6});
  CHECK(out.at("t").data == std::vector<double>{0, 1, 2, 3, 4});
  const std::vector<double> rows = {1, 0, 0, 0,  0, 0, 1, 0,  0, 0, 0, 0,   // 0, 2, -1
                                    0, 0, 0, 1,  0, 0, 0, 0,  0, 1, 0, 0};  // 3, 4, 1
  CHECK(out.at("f16").data == rows);
  CHECK(out.at("bool").data == rows);
  CHECK(out.at("bool").dtype == DType::kBool);
}

TEST_CASE("softmax rows sum to 1 and match exp / sum, on either axis") {
  GraphBuilder b;
  auto x = b.input("x", type(DType::kF32, {3, 4}));
  b.output("last", b.op(Op::kSoftmax, {x}, type(DType::kF32, {3, 4}), axis_attrs(1)));
  b.output("first", b.op(Op::kSoftmax, {x}, type(DType::kF32, {3, 4}), axis_attrs(0)));
  auto xv = tensor(DType::kF32, {3, 4}, wavy(12, 0.4));
  xv.data[5] = 80.0;  // large: a naive exp without the max shift would still be fine in double, check it anyway
  auto out = run(b.g, {{}, {{"x", xv}}, {}});
  for (int r = 0; r < 3; ++r) {
    double total = 0, row_sum = 0;
    for (int c = 0; c < 4; ++c) total += std::exp(xv.data[r * 4 + c]);
    for (int c = 0; c < 4; ++c) {
      double got = out.at("last").data[r * 4 + c];
      row_sum += got;
      CHECK(got == doctest::Approx(std::exp(xv.data[r * 4 + c]) / total).epsilon(1e-6));
    }
    CHECK(row_sum == doctest::Approx(1.0).epsilon(1e-6));
  }
  for (int c = 0; c < 4; ++c) {
    double total = 0;
    for (int r = 0; r < 3; ++r) total += std::exp(xv.data[r * 4 + c]);
    for (int r = 0; r < 3; ++r)
      CHECK(out.at("first").data[r * 4 + c] == doctest::Approx(std::exp(xv.data[r * 4 + c]) / total).epsilon(1e-6));
  }
}

TEST_CASE("layernorm: mean 0, variance 1, then weight and bias") {
  GraphBuilder b;
  auto x = b.input("x", type(DType::kF32, {2, 5}));
  auto w = b.param("w", type(DType::kF32, {5}));
  auto bias = b.param("bias", type(DType::kF32, {5}));
  b.output("plain", b.op(Op::kLayerNorm, {x}, type(DType::kF32, {2, 5}), value_attrs(1e-5)));
  b.output("affine", b.op(Op::kLayerNorm, {x, w, bias}, type(DType::kF32, {2, 5}), value_attrs(1e-5)));
  b.output("weighted", b.op(Op::kLayerNorm, {x, w}, type(DType::kF32, {2, 5}), value_attrs(1e-5)));
  auto xv = tensor(DType::kF32, {2, 5}, wavy(10, 0.9));
  auto wv = tensor(DType::kF32, {5}, {0.5, -1.5, 2.0, 1.25, 0.75});
  auto bv = tensor(DType::kF32, {5}, {0.1, 0.2, -0.3, 0.4, -0.5});
  auto out = run(b.g, {{}, {{"x", xv}, {"w", wv}, {"bias", bv}}, {}});
  for (int r = 0; r < 2; ++r) {
    double mean = 0, var = 0;
    for (int c = 0; c < 5; ++c) mean += out.at("plain").data[r * 5 + c] / 5;
    for (int c = 0; c < 5; ++c) var += std::pow(out.at("plain").data[r * 5 + c] - mean, 2) / 5;
    CHECK(mean == doctest::Approx(0.0).epsilon(1e-6));
    CHECK(var == doctest::Approx(1.0).epsilon(1e-4));  // eps shifts it slightly below 1
    for (int c = 0; c < 5; ++c) {
      double n = out.at("plain").data[r * 5 + c];
      CHECK(out.at("affine").data[r * 5 + c] == doctest::Approx(n * wv.data[c] + bv.data[c]).epsilon(1e-6));
      CHECK(out.at("weighted").data[r * 5 + c] == doctest::Approx(n * wv.data[c]).epsilon(1e-6));
    }
  }
}

TEST_CASE("rmsnorm: mean square 1, then weight") {
  GraphBuilder b;
  auto x = b.input("x", type(DType::kF32, {3, 4}));
  auto w = b.param("w", type(DType::kF32, {4}));
  b.output("plain", b.op(Op::kRmsNorm, {x}, type(DType::kF32, {3, 4}), value_attrs(1e-6)));
  b.output("weighted", b.op(Op::kRmsNorm, {x, w}, type(DType::kF32, {3, 4}), value_attrs(1e-6)));
  auto xv = tensor(DType::kF32, {3, 4}, wavy(12, 1.7));
  auto wv = tensor(DType::kF32, {4}, {2.0, -0.5, 1.5, 0.25});
  auto out = run(b.g, {{}, {{"x", xv}, {"w", wv}}, {}});
  for (int r = 0; r < 3; ++r) {
    double ms = 0, xs = 0;
    for (int c = 0; c < 4; ++c) ms += std::pow(out.at("plain").data[r * 4 + c], 2) / 4;
    for (int c = 0; c < 4; ++c) xs += xv.data[r * 4 + c] * xv.data[r * 4 + c] / 4;
    CHECK(ms == doctest::Approx(1.0).epsilon(1e-5));
    for (int c = 0; c < 4; ++c) {
      double want = xv.data[r * 4 + c] / std::sqrt(xs + 1e-6) * wv.data[c];
      CHECK(out.at("weighted").data[r * 4 + c] == doctest::Approx(want).epsilon(1e-6));
    }
  }
}

TEST_CASE("transpose, reshape, slice, concat move the right elements") {
  GraphBuilder b;
  auto x = b.input("x", type(DType::kF32, {2, 3, 4}));
  auto p = b.input("p", type(DType::kF32, {2, 1}));
  auto q = b.input("q", type(DType::kF32, {2, 3}));
  b.output("t", b.op(Op::kTranspose, {x}, type(DType::kF32, {4, 2, 3}), ints_attrs({2, 0, 1})));
  b.output("r", b.op(Op::kReshape, {x}, type(DType::kF32, {6, 4})));
  b.output("s", b.op(Op::kSlice, {x}, type(DType::kF32, {1, 3, 2}), ints_attrs({1, 2, 0, -1, 1, 3})));
  b.output("c", b.op(Op::kConcat, {p, q}, type(DType::kF32, {2, 4}), axis_attrs(1)));
  std::vector<double> xv(24);
  for (int i = 0; i < 24; ++i) xv[i] = 0.5 + i;  // x[i][j][k] = 0.5 + 12i + 4j + k
  auto out = run(b.g, {{},
                       {{"x", tensor(DType::kF32, {2, 3, 4}, xv)},
                        {"p", tensor(DType::kF32, {2, 1}, {-1, -2})},
                        {"q", tensor(DType::kF32, {2, 3}, {1, 2, 3, 4, 5, 6})}},
                       {}});
  for (int k = 0; k < 4; ++k)
    for (int i = 0; i < 2; ++i)
      for (int j = 0; j < 3; ++j) CHECK(out.at("t").data[k * 6 + i * 3 + j] == 0.5 + 12 * i + 4 * j + k);
  CHECK(out.at("r").shape == std::vector<int64_t>{6, 4});
  CHECK(out.at("r").data == xv);
  std::vector<double> want_slice;
  for (int j = 0; j < 3; ++j)
    for (int k = 1; k < 3; ++k) want_slice.push_back(0.5 + 12 + 4 * j + k);
  CHECK(out.at("s").data == want_slice);
  CHECK(out.at("c").data == std::vector<double>{-1, 1, 2, 3, -2, 4, 5, 6});
}

TEST_CASE("gather: ids outside 0..V-1 give zero rows") {
  GraphBuilder b;
  auto table = b.param("table", type(DType::kF32, {3, 2}));
  auto ids = b.input("ids", type(DType::kI32, {2, 2}));
  b.output("y", b.op(Op::kGather, {table, ids}, type(DType::kF32, {2, 2, 2})));
  auto out = run(b.g, {{},
                       {{"table", tensor(DType::kF32, {3, 2}, {1.5, 2.5, 3.5, 4.5, 5.5, 6.5})},
                        {"ids", tensor(DType::kI32, {2, 2}, {2, -1, 0, 3})}},
                       {}});
  CHECK(out.at("y").data == std::vector<double>{5.5, 6.5, 0, 0, 1.5, 2.5, 0, 0});
}

TEST_CASE("gather along an inner or the last axis: table[:axis] + ids.shape + table[axis + 1:], zeros out of range") {
  std::vector<double> t12;
  for (int i = 1; i <= 12; ++i) t12.push_back(i);
  GraphBuilder b;
  auto table = b.param("table", type(DType::kF32, {2, 3, 2}));  // table[o][v][r] = 6o + 2v + r + 1
  auto ids = b.input("ids", type(DType::kI32, {2}));
  b.output("y", b.op(Op::kGather, {table, ids}, type(DType::kF32, {2, 2, 2}), axis_attrs(1)));
  auto rows = b.param("rows", type(DType::kF32, {2, 3}));
  auto ids2 = b.input("ids2", type(DType::kI32, {2, 2}));
  b.output("z", b.op(Op::kGather, {rows, ids2}, type(DType::kF32, {2, 2, 2}), axis_attrs(1)));
  auto out = run(b.g, {{},
                       {{"table", tensor(DType::kF32, {2, 3, 2}, t12)},
                        {"ids", tensor(DType::kI32, {2}, {2, -1})},
                        {"rows", tensor(DType::kF32, {2, 3}, {1, 2, 3, 4, 5, 6})},
                        {"ids2", tensor(DType::kI32, {2, 2}, {2, 0, 3, 1})}},
                       {}});
  CHECK(out.at("y").data == std::vector<double>{5, 6, 0, 0, 11, 12, 0, 0});
  CHECK(out.at("z").data == std::vector<double>{3, 1, 0, 2, 6, 4, 0, 5});  // id 3 is past the 3 columns
}

TEST_CASE("take_along_axis: out[..., j, ...] = x[..., index[..., j, ...], ...], a broadcast index, zeros out of range") {
  GraphBuilder b;
  auto x = b.input("x", type(DType::kF32, {2, 4}));
  auto index = b.input("index", type(DType::kI32, {2, 3}));
  b.output("rows", b.op(Op::kTakeAlongAxis, {x, index}, type(DType::kF32, {2, 3}), axis_attrs(1)));
  auto x0 = b.input("x0", type(DType::kI32, {3, 2}));
  auto first = b.input("first", type(DType::kI32, {2, 1}));  // one row index per j, broadcast over the columns
  b.output("cols", b.op(Op::kTakeAlongAxis, {x0, first}, type(DType::kI32, {2, 2}), axis_attrs(0)));
  auto x3 = b.input("x3", type(DType::kF16, {2, 3, 2}));
  auto middle = b.input("middle", type(DType::kI32, {1, 2, 2}));  // broadcast over dim 0
  b.output("mid", b.op(Op::kTakeAlongAxis, {x3, middle}, type(DType::kF16, {2, 2, 2}), axis_attrs(1)));
  std::vector<double> t12;
  for (int i = 1; i <= 12; ++i) t12.push_back(i);
  auto out = run(b.g, {{},
                       {{"x", tensor(DType::kF32, {2, 4}, {10, 11, 12, 13, 20, 21, 22, 23})},
                        {"index", tensor(DType::kI32, {2, 3}, {3, 0, 4, -1, 2, 2})},
                        {"x0", tensor(DType::kI32, {3, 2}, {1, 2, 3, 4, 5, 6})},
                        {"first", tensor(DType::kI32, {2, 1}, {2, 0})},
                        {"x3", tensor(DType::kF16, {2, 3, 2}, t12)},
                        {"middle", tensor(DType::kI32, {1, 2, 2}, {1, 2, 0, 5})}},
                       {}});
  CHECK(out.at("rows").data == std::vector<double>{13, 10, 0, 0, 22, 22});
  CHECK(out.at("cols").data == std::vector<double>{5, 6, 1, 2});
  // mid[o][j][r] = x3[o][middle[0][j][r]][r]: index 5 is past the 3 rows.
  CHECK(out.at("mid").data == std::vector<double>{3, 6, 1, 0, 9, 12, 7, 0});
}

TEST_CASE("attention over a KV cache ignores positions at and past len") {
  // One head, D = 2, T = 3. Position 2 holds huge values: if it leaked in,
  // the result would be far off.
  GraphBuilder b;
  auto q = b.input("q", type(DType::kF32, {1, 2}));
  auto k = b.input("k", type(DType::kF32, {1, 3, 2}));
  auto v = b.input("v", type(DType::kF32, {1, 3, 2}));
  auto len = b.input("len", type(DType::kI32, {}));
  b.output("y", b.op(Op::kAttention, {q, k, v, len}, type(DType::kF32, {1, 2}), value_attrs(0.5)));
  auto bind = [&](double len_value) {
    return Bindings{{},
                    {{"q", tensor(DType::kF32, {1, 2}, {1.0, 2.0})},
                     {"k", tensor(DType::kF32, {1, 3, 2}, {0.5, -1.0, 1.5, 0.25, 100, 100})},
                     {"v", tensor(DType::kF32, {1, 3, 2}, {1.0, 3.0, -2.0, 0.5, 1000, 1000})},
                     {"len", tensor(DType::kI32, {}, {len_value})}},
                    {}};
  };
  // By hand: s0 = 0.5 * (0.5 - 2.0) = -0.75, s1 = 0.5 * (1.5 + 0.5) = 1.0.
  double p0 = std::exp(-0.75) / (std::exp(-0.75) + std::exp(1.0)), p1 = 1 - p0;
  auto two = run(b.g, bind(2)).at("y");
  CHECK(two.data[0] == doctest::Approx(p0 * 1.0 + p1 * -2.0).epsilon(1e-6));
  CHECK(two.data[1] == doctest::Approx(p0 * 3.0 + p1 * 0.5).epsilon(1e-6));
  auto one = run(b.g, bind(1)).at("y");  // a single position: its v exactly
  CHECK(one.data == std::vector<double>{1.0, 3.0});
  auto none = run(b.g, bind(0)).at("y");
  CHECK(none.data == std::vector<double>{0.0, 0.0});
  CHECK(run(b.g, bind(-4)).at("y").data == std::vector<double>{0.0, 0.0});
  auto all = run(b.g, bind(99)).at("y");  // clamped to T = 3: position 2 dominates
  CHECK(all.data[0] == doctest::Approx(1000.0).epsilon(1e-6));
}

TEST_CASE("one graph, run-time dim bound to 2 and to 5") {
  GraphBuilder b;
  Dim batch = b.dim("B", 1, 8);
  auto x = b.input("x", {DType::kF32, {batch, Dim::constant(3)}});
  auto w = b.param("w", type(DType::kF32, {3, 2}));
  auto alpha = b.scalar("alpha", DType::kF32, 2.0);
  auto h = b.op(Op::kMatMul, {x, w}, {DType::kF32, {batch, Dim::constant(2)}});
  auto scaled = b.binary(Op::kMul, h, alpha);
  b.output("y", b.op(Op::kSum, {scaled}, {DType::kF32, {batch}}, axis_attrs(1)));
  b.output("whole", b.op(Op::kSlice, {x}, {DType::kF32, {batch, Dim::constant(2)}}, ints_attrs({0, -1, 1, 3})));
  auto wv = tensor(DType::kF32, {3, 2}, {1, -1, 0.5, 2, -0.25, 1.5});
  for (int64_t rows : {2, 5}) {
    CAPTURE(rows);
    auto xv = tensor(DType::kF32, {rows, 3}, wavy(static_cast<size_t>(rows * 3), 0.2));
    for (double alpha_value : {2.0, -0.5}) {
      Bindings bind{{rows}, {{"x", xv}, {"w", wv}}, {}};
      if (alpha_value != 2.0) bind.scalars["alpha"] = alpha_value;  // otherwise the default
      auto out = run(b.g, bind);
      REQUIRE(out.at("y").shape == std::vector<int64_t>{rows});
      REQUIRE(out.at("whole").shape == std::vector<int64_t>{rows, 2});
      for (int64_t r = 0; r < rows; ++r) {
        double want = 0;
        for (int c = 0; c < 2; ++c) {
          double hc = 0;
          for (int k = 0; k < 3; ++k) hc += xv.data[r * 3 + k] * wv.data[k * 2 + c];
          want += f32(f32(hc) * alpha_value);
        }
        CHECK(out.at("y").data[r] == doctest::Approx(want).epsilon(1e-6));
        CHECK(out.at("whole").data[r * 2] == xv.data[r * 3 + 1]);
      }
    }
  }
}

TEST_CASE("validate_bindings names the first mismatch") {
  GraphBuilder b;
  Dim batch = b.dim("B", 1, 4);
  auto x = b.input("x", {DType::kF16, {batch, Dim::constant(2)}});
  auto w = b.param("w", type(DType::kF16, {2, 2}));
  b.scalar("alpha", DType::kF32, 1.0);
  b.output("y", b.op(Op::kMatMul, {x, w}, {DType::kF16, {batch, Dim::constant(2)}}));
  auto good_x = tensor(DType::kF16, {3, 2}, {1, 2, 3, 4, 5, 6});
  auto good_w = tensor(DType::kF16, {2, 2}, {1, 0.5, -1, 2});
  CHECK(validate_bindings(b.g, {{3}, {{"x", good_x}, {"w", good_w}}, {{"alpha", 3.0}}}).ok());

  auto expect_error = [&](Bindings bind, StatusCode code, std::vector<std::string> fragments) {
    Status s = validate_bindings(b.g, bind);
    CAPTURE(s.message());
    CHECK(s.code() == code);
    for (const auto& f : fragments) CHECK(s.message().find(f) != std::string::npos);
    CHECK_FALSE(interpret(b.g, bind).ok());
  };
  SUBCASE("wrong dtype") {
    expect_error({{3}, {{"x", tensor(DType::kF32, {3, 2}, {1, 2, 3, 4, 5, 6})}, {"w", good_w}}, {}},
                 StatusCode::kInvalidArgument, {"input 'x'", "f16", "f32"});
  }
  SUBCASE("wrong shape for the bound dim") {
    expect_error({{2}, {{"x", good_x}, {"w", good_w}}, {}}, StatusCode::kInvalidArgument,
                 {"input 'x'", "[2, 2]", "[3, 2]"});
  }
  SUBCASE("data size does not match the shape") {
    HostTensor short_w = good_w;
    short_w.data.pop_back();
    expect_error({{3}, {{"x", good_x}, {"w", short_w}}, {}}, StatusCode::kInvalidArgument, {"param 'w'", "3"});
  }
  SUBCASE("missing input") {
    expect_error({{3}, {{"w", good_w}}, {}}, StatusCode::kNotFound, {"missing input 'x'"});
  }
  SUBCASE("dim out of range") {
    expect_error({{5}, {{"x", good_x}, {"w", good_w}}, {}}, StatusCode::kOutOfRange, {"B = 5", "[1, 4]"});
    expect_error({{0}, {{"x", good_x}, {"w", good_w}}, {}}, StatusCode::kOutOfRange, {"B = 0"});
  }
  SUBCASE("no value for a run-time dim") {
    expect_error({{}, {{"x", good_x}, {"w", good_w}}, {}}, StatusCode::kInvalidArgument, {"run-time dim"});
  }
  SUBCASE("unknown names") {
    expect_error({{3}, {{"x", good_x}, {"w", good_w}, {"z", good_w}}, {}}, StatusCode::kNotFound, {"'z'"});
    expect_error({{3}, {{"x", good_x}, {"w", good_w}}, {{"beta", 1.0}}}, StatusCode::kNotFound, {"'beta'"});
    expect_error({{3}, {{"x", good_x}, {"w", good_w}}, {{"w", 1.0}}}, StatusCode::kInvalidArgument, {"'w'", "param"});
  }
}

TEST_CASE("inputs are rounded to their dtype; outputs may be leaves and constants") {
  GraphBuilder b;
  auto x = b.input("x", type(DType::kF16, {2}));
  auto c = b.constant(0.1, DType::kF16);
  b.output("x_again", x);
  b.output("c", c);
  b.output("y", b.binary(Op::kAdd, x, c));
  HostTensor raw{DType::kF16, {2}, {1.0 / 3.0, 2.0}};  // not yet rounded by the caller
  auto out = run(b.g, {{}, {{"x", raw}}, {}});
  double third = half_bits_to_float(float_to_half_bits(1.0f / 3.0f));
  double tenth = half_bits_to_float(float_to_half_bits(0.1f));
  CHECK(out.at("x_again").data[0] == third);
  CHECK(out.at("c").data == std::vector<double>{tenth});
  CHECK(out.at("y").data[0] == round_to_dtype(third + tenth, DType::kF16));
  CHECK(out.at("y").data[1] == round_to_dtype(2.0 + tenth, DType::kF16));
}
