// Every standard op in every dtype the checker accepts, compiled from .gdl
// text, run by graph and by eager launch on a poisoned arena, and compared
// with the CPU reference on random non-zero inputs.
#include <algorithm>
#include <functional>
#include <iterator>
#include <string>
#include <vector>

#include "gpu_test_util.h"

using namespace gdl;
using namespace gdl::gpu_test;

namespace {

const std::vector<std::string> kFloats = {"f32", "f16", "bf16"};
const std::vector<std::string> kNumbers = {"f32", "f16", "bf16", "i32"};
const std::vector<std::string> kAll = {"f32", "f16", "bf16", "i32", "bool"};

struct OpCase {
  std::string name;
  std::string text;  // a whole program; {T} is the dtype under test
  std::vector<std::string> dtypes;
  RangeFor range = {};
  Adjust adjust = {};
  std::vector<int64_t> dims = {};  // empty: every run-time dim at its upper bound
};

void run_cases(const std::vector<OpCase>& cases) {
  for (const OpCase& c : cases)
    for (const std::string& t : c.dtypes) {
      std::string text = substitute(c.text, "{T}", t);
      INFO("op case '" << c.name << "' in " << t << ":\n" << text);
      Program program = compile_text(text);
      std::vector<int64_t> dims = c.dims.empty() ? upper_dims(program) : c.dims;
      CHECK(check_program(program, seed_for(c.name + "/" + t), dims, c.range, {}, c.adjust));
    }
}

ValueRange positive() {
  ValueRange r;
  r.positive = true;
  r.lo = 0.1;
  r.hi = 4;
  return r;
}

// Makes every other element of `b` equal to the same element of `a`, so
// that ==, <= and friends see equal pairs too.
void equal_halves(std::map<std::string, TensorData>& t) {
  TensorData& a = t.at("a");
  TensorData& b = t.at("b");
  size_t size = element_size(a.dtype);
  for (size_t i = 0; i * size < a.bytes.size(); i += 2)
    std::copy(a.bytes.begin() + static_cast<long>(i * size), a.bytes.begin() + static_cast<long>((i + 1) * size),
              b.bytes.begin() + static_cast<long>(i * size));
}

// Rewrites the elements of tensor `name` (decoded to doubles, encoded back
// in its dtype).
void edit_elements(std::map<std::string, TensorData>& t, const std::string& name,
                   const std::function<void(std::vector<double>&)>& edit) {
  TensorData& d = t.at(name);
  std::vector<double> v = decode_elements(d.dtype, d.bytes.data(), d.bytes.size() / element_size(d.dtype));
  edit(v);
  d.bytes = encode_elements(d.dtype, v);
}

// Every 4th element of `a` an exact half (-3.5 ... 4.5), where floor, ceil
// and round differ and round goes to even.
void halves(std::map<std::string, TensorData>& t) {
  edit_elements(t, "a", [](std::vector<double>& v) {
    for (size_t i = 0; i < v.size(); i += 4) v[i] = static_cast<double>(static_cast<int>(i / 4 % 9) - 4) + 0.5;
  });
}

// The integer operators' edge cases at the front of a and b (b's zeros and
// shift counts outside [0, 31]), and every 7th divisor zero.
void integer_edges(std::map<std::string, TensorData>& t) {
  const double int_min = -2147483648.0, int_max = 2147483647.0;
  edit_elements(t, "a", [&](std::vector<double>& v) {
    const double front[] = {int_min, int_min, int_max, -7, 7, -1, 1, int_min, int_max, -5};
    std::copy(std::begin(front), std::end(front), v.begin());
  });
  edit_elements(t, "b", [&](std::vector<double>& v) {
    for (size_t i = 10; i < v.size(); i += 7) v[i] = 0;
    const double front[] = {-1, 0, int_min, 2, -2, 31, 32, -1, 33, int_max};
    std::copy(std::begin(front), std::end(front), v.begin());
  });
}

std::string unary_program(const std::string& expr) {
  return "program op;\ninput a : {T}[8, 133];\noutput y : {T}[8, 133];\ny = " + expr + ";\n";
}

std::string binary_program(const std::string& expr, const std::string& out_type = "{T}") {
  return "program op;\ninput a : {T}[8, 133];\ninput b : {T}[8, 133];\noutput y : " + out_type + "[8, 133];\ny = " +
         expr + ";\n";
}

}  // namespace

TEST_CASE("ops: elementwise unary") {
  RangeFor wide = [](const TensorInfo&) { ValueRange r; r.lo = 0.1; r.hi = 3; return r; };
  RangeFor pos = [](const TensorInfo&) { return positive(); };
  run_cases({
      {"exp", unary_program("exp(a)"), kFloats, wide},
      {"log", unary_program("log(a)"), kFloats, pos},
      {"sqrt", unary_program("sqrt(a)"), kFloats, pos},
      {"rsqrt", unary_program("rsqrt(a)"), kFloats, pos},
      {"tanh", unary_program("tanh(a)"), kFloats, wide},
      {"sigmoid", unary_program("sigmoid(a)"), kFloats, wide},
      {"relu", unary_program("relu(a)"), kNumbers, wide},
      {"gelu", unary_program("gelu(a)"), kFloats, wide},
      {"silu", unary_program("silu(a)"), kFloats, wide},
      {"abs", unary_program("abs(a)"), kNumbers, wide},
      {"neg", unary_program("-a"), kNumbers, wide},
      {"not", unary_program("!a"), {"bool"}},
  });
}

TEST_CASE("ops: elementwise binary, same shapes") {
  RangeFor divisor = [](const TensorInfo& t) {
    ValueRange r;
    if (t.name == "b") r.lo = 0.5, r.hi = 2, r.int_lo = -9, r.int_hi = 9;
    return r;
  };
  RangeFor power = [](const TensorInfo& t) {
    ValueRange r;
    if (t.name == "a") r.positive = true, r.lo = 0.2, r.hi = 3, r.int_lo = -5, r.int_hi = 5;
    if (t.name == "b") r.lo = 0.1, r.hi = 2, r.int_lo = 1, r.int_hi = 4;
    return r;
  };
  run_cases({
      {"add", binary_program("a + b"), kNumbers},
      {"sub", binary_program("a - b"), kNumbers},
      {"mul", binary_program("a * b"), kNumbers},
      {"div", binary_program("a / b"), kNumbers, divisor},
      {"min", binary_program("min(a, b)"), kNumbers, {}, equal_halves},
      {"max", binary_program("max(a, b)"), kNumbers, {}, equal_halves},
      {"pow", binary_program("pow(a, b)"), kNumbers, power},
  });
}

TEST_CASE("ops: trigonometric, erf, rounding and sign") {
  RangeFor wide = [](const TensorInfo&) { ValueRange r; r.lo = 0.1; r.hi = 6; return r; };
  RangeFor fractions = [](const TensorInfo&) { ValueRange r; r.lo = 0.1; r.hi = 40; return r; };
  run_cases({
      {"cos", unary_program("cos(a)"), kFloats, wide},
      {"sin", unary_program("sin(a)"), kFloats, wide},
      {"erf", unary_program("erf(a)"), kFloats, wide},
      {"floor", unary_program("floor(a)"), kFloats, fractions, halves},
      {"ceil", unary_program("ceil(a)"), kFloats, fractions, halves},
      {"round", unary_program("round(a)"), kFloats, fractions, halves},
      {"sign", unary_program("sign(a)"), kNumbers, wide},
      {"fused", unary_program("round(a * 3.0) - floor(cos(a) * 4.0) + ceil(erf(a)) * sign(sin(a))"), kFloats, wide},
  });
}

TEST_CASE("ops: clamp") {
  run_cases({
      {"clamp tensors", "program op;\ninput a : {T}[8, 133];\ninput lo : {T}[8, 133];\ninput hi : {T}[8, 133];\n"
                        "output y : {T}[8, 133];\ny = clamp(a, lo, hi);\n",  // lo > hi in about half: hi
       kNumbers},
      {"clamp broadcast", "program op;\ninput a : {T}[8, 133];\ninput lo : {T}[133];\ninput hi : {T}[8, 1];\n"
                          "output y : {T}[8, 133];\ny = clamp(a, lo, hi);\n",
       kNumbers},
      {"clamp literals", unary_program("clamp(a, -0.5, 0.5)"), kFloats},
      {"clamp int literals", unary_program("clamp(a, -20, 20)"), {"i32"}},
  });
}

TEST_CASE("ops: integer operators") {
  RangeFor wide = [](const TensorInfo& t) {
    ValueRange r;
    r.int_lo = -2147483648LL, r.int_hi = 2147483647LL;
    if (t.name == "b") r.int_lo = -40, r.int_hi = 40;  // divisors and shift counts, some outside [0, 31]
    return r;
  };
  const std::vector<std::string> i32 = {"i32"};
  run_cases({
      {"floordiv", binary_program("a // b"), i32, wide, integer_edges},
      {"mod", binary_program("a % b"), i32, wide, integer_edges},
      {"bitand", binary_program("a & b"), i32, wide, integer_edges},
      {"bitor", binary_program("a | b"), i32, wide, integer_edges},
      {"bitxor", binary_program("a ^ b"), i32, wide, integer_edges},
      {"shl", binary_program("a << b"), i32, wide, integer_edges},
      {"shr", binary_program("a >> b"), i32, wide, integer_edges},
      {"small operands", binary_program("a // b + a % b * 100"), i32},
      {"literals", unary_program("(a // -3) ^ (a % 7) << 4 | a >> 2 & 255"), i32, wide},
      {"broadcast", "program op;\ninput a : i32[8, 133];\ninput b : i32[8, 1];\noutput y : i32[8, 133];\n"
                    "y = (a % b) ^ (a >> b);\n", i32, wide},
  });
}

TEST_CASE("ops: comparisons and logic") {
  run_cases({
      {"lt", binary_program("a < b", "bool"), kAll, {}, equal_halves},
      {"le", binary_program("a <= b", "bool"), kAll, {}, equal_halves},
      {"gt", binary_program("a > b", "bool"), kAll, {}, equal_halves},
      {"ge", binary_program("a >= b", "bool"), kAll, {}, equal_halves},
      {"eq", binary_program("a == b", "bool"), kAll, {}, equal_halves},
      {"ne", binary_program("a != b", "bool"), kAll, {}, equal_halves},
      {"and", binary_program("a && b", "bool"), {"bool"}},
      {"or", binary_program("a || b", "bool"), {"bool"}},
  });
}

TEST_CASE("ops: broadcasting, literals and a run-time dim") {
  run_cases({
      {"add row", "program op;\ninput a : {T}[8, 133];\ninput b : {T}[133];\noutput y : {T}[8, 133];\ny = a + b;\n",
       kNumbers},
      {"mul outer", "program op;\ninput a : {T}[8, 1];\ninput b : {T}[1, 133];\noutput y : {T}[8, 133];\ny = a * b;\n",
       kNumbers},
      {"rank 4", "program op;\ninput a : {T}[2, 3, 1, 5];\ninput b : {T}[3, 4, 1];\noutput y : {T}[2, 3, 4, 5];\ny = a - b;\n",
       kNumbers},
      {"literals", "program op;\ninput a : {T}[8, 133];\noutput y : {T}[8, 133];\ny = a * 2.5 + 1.0;\n", kFloats},
      {"int literals", "program op;\ninput a : {T}[8, 133];\noutput y : {T}[8, 133];\ny = a * 3 - 7;\n", {"i32"}},
      {"fused chain", "program op;\ninput a : {T}[8, 133];\ninput b : {T}[133];\noutput y : {T}[8, 133];\n"
                      "y = tanh(a * b + 0.5) * sigmoid(a) - relu(b);\n", kFloats},
      {"run-time dim", "program op;\ndim B in [1, 16];\ninput a : {T}[B, 133];\ninput b : {T}[B, 1];\n"
                       "output y : {T}[B, 133];\ny = a * b + a;\n", kNumbers, {}, {}, {5}},
      // B = 5 in its bucket of 8 (buckets policy): the value is 5, not the capacity.
      {"run-time dim as a value", "program op;\ndim B in [1, 16] buckets(8, 16);\ninput a : {T}[B, 133];\n"
                                  "output y : {T}[B, 133];\noutput n : i32;\n"
                                  "y = a / cast(B, {T}) + cast(B * 2 - 1, {T});\nn = B;\n", kFloats, {}, {}, {5}},
  });
}

TEST_CASE("ops: where") {
  run_cases({
      {"where", "program op;\ninput c : bool[8, 133];\ninput a : {T}[8, 133];\ninput b : {T}[8, 133];\n"
                "output y : {T}[8, 133];\ny = where(c, a, b);\n", kAll},
      {"where broadcast", "program op;\ninput c : bool[8, 1];\ninput a : {T}[133];\ninput b : {T}[8, 133];\n"
                          "output y : {T}[8, 133];\ny = where(c, a, b);\n", kAll},
      {"where compare", "program op;\ninput a : {T}[8, 133];\ninput b : {T}[8, 133];\noutput y : {T}[8, 133];\n"
                        "y = where(a > b, a, b);\n", kNumbers},
  });
}

TEST_CASE("ops: cast between every pair of dtypes") {
  RangeFor wide = [](const TensorInfo&) { ValueRange r; r.lo = 0.5; r.hi = 20; return r; };
  for (const std::string& from : kAll)
    for (const std::string& to : kAll) {
      if (from == to) continue;
      std::string text = "program op;\ninput a : " + from + "[8, 133];\noutput y : " + to + "[8, 133];\ny = cast(a, " +
                         to + ");\n";
      INFO("cast " << from << " -> " << to);
      Program program = compile_text(text);
      CHECK(check_program(program, seed_for("cast/" + from + "/" + to), {}, wide));
    }
}

TEST_CASE("ops: matmul") {
  run_cases({
      {"matmul 2d", "program op;\ninput a : {T}[17, 33];\ninput b : {T}[33, 9];\noutput y : {T}[17, 9];\ny = a @ b;\n",
       kFloats},
      {"matmul batched lhs", "program op;\ninput a : {T}[3, 17, 33];\ninput b : {T}[33, 9];\noutput y : {T}[3, 17, 9];\n"
                             "y = matmul(a, b);\n", kFloats},
      {"matmul batched", "program op;\ninput a : {T}[2, 5, 64];\ninput b : {T}[2, 64, 40];\noutput y : {T}[2, 5, 40];\n"
                         "y = a @ b;\n", kFloats},
      {"matmul large", "program op;\ninput a : {T}[64, 256];\ninput b : {T}[256, 128];\noutput y : {T}[64, 128];\n"
                       "y = a @ b;\n", kFloats},
      {"matmul epilogue", "program op;\ninput a : {T}[16, 64];\nparam w : {T}[64, 48];\nparam bias : {T}[48];\n"
                          "output y : {T}[16, 48];\ny = gelu(a @ w + bias);\n", kFloats},
      {"matmul run-time rows", "program op;\ndim B in [1, 32];\ninput a : {T}[B, 64];\nparam w : {T}[64, 48];\n"
                               "output y : {T}[B, 48];\ny = a @ w;\n", kFloats, {}, {}, {7}},
  });
}

TEST_CASE("ops: reductions") {
  const std::string in = "program op;\ninput a : {T}[6, 37, 5];\n";
  run_cases({
      {"sum axis 1", in + "output y : {T}[6, 5];\ny = sum(a, axis = 1);\n", kNumbers},
      {"sum keepdims", in + "output y : {T}[6, 1, 5];\ny = sum(a, axis = 1, keepdims = true);\n", kNumbers},
      {"sum last", in + "output y : {T}[6, 37];\ny = sum(a);\n", kNumbers},
      {"mean axis 0", in + "output y : {T}[37, 5];\ny = mean(a, axis = 0);\n", kFloats},
      {"mean last", in + "output y : {T}[6, 37];\ny = mean(a, axis = -1);\n", kFloats},
      {"max axis 1", in + "output y : {T}[6, 5];\ny = max(a, axis = 1);\n", kNumbers},
      {"max last", in + "output y : {T}[6, 37];\ny = max(a, axis = 2);\n", kNumbers},
      {"sum long row", "program op;\ninput a : {T}[4, 3000];\noutput y : {T}[4];\ny = sum(a, axis = 1);\n", kNumbers},
      {"max long row", "program op;\ninput a : {T}[4, 3000];\noutput y : {T}[4];\ny = max(a, axis = 1);\n", kNumbers},
  });
}

TEST_CASE("ops: softmax, layernorm, rmsnorm") {
  run_cases({
      {"softmax last", "program op;\ninput a : {T}[6, 37];\noutput y : {T}[6, 37];\ny = softmax(a);\n", kFloats},
      {"softmax axis 0", "program op;\ninput a : {T}[6, 37];\noutput y : {T}[6, 37];\ny = softmax(a, axis = 0);\n",
       kFloats},
      {"softmax long", "program op;\ninput a : {T}[4, 3000];\noutput y : {T}[4, 3000];\ny = softmax(a, axis = -1);\n",
       kFloats},
      {"layernorm affine", "program op;\ninput a : {T}[6, 64];\nparam g : {T}[64];\nparam b : {T}[64];\n"
                           "output y : {T}[6, 64];\ny = layernorm(a, weight = g, bias = b, eps = 1e-5);\n", kFloats},
      {"layernorm plain", "program op;\ninput a : {T}[5, 1024];\noutput y : {T}[5, 1024];\ny = layernorm(a);\n",
       kFloats},
      {"rmsnorm weight", "program op;\ninput a : {T}[6, 64];\nparam g : {T}[64];\noutput y : {T}[6, 64];\n"
                         "y = rmsnorm(a, weight = g, eps = 1e-6);\n", kFloats},
      {"rmsnorm plain", "program op;\ninput a : {T}[3, 2, 1000];\noutput y : {T}[3, 2, 1000];\ny = rmsnorm(a);\n",
       kFloats},
  });
}

TEST_CASE("ops: data movement in every dtype") {
  RangeFor ids = [](const TensorInfo& t) {
    ValueRange r;
    if (t.name == "ids") r.int_lo = -3, r.int_hi = 53;  // a few outside [0, 50): zero rows
    return r;
  };
  run_cases({
      {"transpose 2d", "program op;\ninput a : {T}[17, 33];\noutput y : {T}[33, 17];\ny = transpose(a);\n", kAll},
      {"transpose 3d", "program op;\ninput a : {T}[3, 5, 7];\noutput y : {T}[7, 3, 5];\n"
                       "y = transpose(a, perm = [2, 0, 1]);\n", kAll},
      {"reshape", "program op;\ninput a : {T}[17, 33];\noutput y : {T}[33, 17];\ny = reshape(a, [33, 17]);\n", kAll},
      {"reshape then op", "program op;\ninput a : {T}[6, 10];\noutput y : {T}[3, 20];\n"
                          "y = reshape(a * a, [3, 20]) + 1.0;\n", kFloats},
      {"slice columns", "program op;\ninput a : {T}[17, 33];\noutput y : {T}[17, 17];\ny = a[:, 3:20];\n", kAll},
      {"slice rows", "program op;\ninput a : {T}[17, 33];\noutput y : {T}[7, 33];\ny = a[2:9, :];\n", kAll},
      {"index", "program op;\ninput a : {T}[4, 17, 33];\noutput y : {T}[17, 33];\ny = a[2];\n", kAll},
      {"concat axis 1", "program op;\ninput a : {T}[4, 5];\ninput b : {T}[4, 7];\noutput y : {T}[4, 12];\n"
                        "y = concat(a, b, axis = 1);\n", kAll},
      {"concat three", "program op;\ninput a : {T}[3, 5];\ninput b : {T}[4, 5];\ninput c : {T}[1, 5];\n"
                       "output y : {T}[8, 5];\ny = concat(a, b, c, axis = 0);\n", kAll},
      {"gather", "program op;\nparam table : {T}[50, 16];\ninput ids : i32[7];\noutput y : {T}[7, 16];\n"
                 "y = gather(table, ids);\n", kAll, ids},
      {"gather 2d ids", "program op;\nparam table : {T}[50, 16];\ninput ids : i32[3, 4];\noutput y : {T}[3, 4, 16];\n"
                        "y = gather(table, ids);\n", kAll, ids},
  });
}

TEST_CASE("ops: gather along any axis and take_along_axis, ids out of range included") {
  RangeFor ids = [](const TensorInfo& t) {
    ValueRange r;
    if (t.name == "ids") r.int_lo = -3, r.int_hi = 53;  // a few outside [0, 50): zeros
    return r;
  };
  run_cases({
      {"gather axis 1", "program op;\nparam table : {T}[6, 50, 4];\ninput ids : i32[7];\noutput y : {T}[6, 7, 4];\n"
                        "y = gather(table, ids, axis = 1);\n", kAll, ids},
      {"gather last axis", "program op;\ninput table : {T}[5, 50];\ninput ids : i32[3, 4];\noutput y : {T}[5, 3, 4];\n"
                           "y = gather(table, ids, axis = -1);\n", kAll, ids},
      {"gather axis 1 of run-time rows", "program op;\ndim B in [1, 16] buckets(8, 16);\ninput table : {T}[B, 50];\n"
                                         "input ids : i32[B];\noutput y : {T}[B, B];\ny = gather(table, ids, axis = 1);\n",
       kAll, ids, {}, {5}},
      {"take_along_axis last", "program op;\ninput a : {T}[6, 50];\ninput ids : i32[6, 7];\noutput y : {T}[6, 7];\n"
                               "y = take_along_axis(a, ids);\n", kAll, ids},
      {"take_along_axis axis 0, broadcast index", "program op;\ninput a : {T}[50, 6];\ninput ids : i32[7, 1];\n"
                                                  "output y : {T}[7, 6];\ny = take_along_axis(a, ids, axis = 0);\n",
       kAll, ids},
      {"take_along_axis rank 3", "program op;\ninput a : {T}[3, 50, 5];\ninput ids : i32[1, 9, 5];\n"
                                 "output y : {T}[3, 9, 5];\ny = take_along_axis(a, ids, axis = 1);\n", kAll, ids},
      {"take_along_axis of run-time rows", "program op;\ndim B in [1, 16] buckets(8, 16);\ninput a : {T}[B, 50];\n"
                                           "input ids : i32[B, 3];\noutput y : {T}[B, 3];\ny = take_along_axis(a, ids);\n",
       kAll, ids, {}, {5}},
      {"topk logits read back", "program op;\ninput a : {T}[6, 50];\noutput y : {T}[6, 4];\n"
                                "y = take_along_axis(a, topk_indices(a, 4));\n", kNumbers},
  });
}

TEST_CASE("ops: attention over a KV cache with a run-time length") {
  const std::string text =
      "program op;\ninput q : {T}[2, 4, 32];\ninput k : {T}[2, 4, 40, 32];\ninput v : {T}[2, 4, 40, 32];\n"
      "input len : i32;\noutput y : {T}[2, 4, 32];\ny = attention(q, k, v, len);\n";
  for (const std::string& t : kFloats) {
    Program program = compile_text(substitute(text, "{T}", t));
    for (int64_t len : {1, 17, 40, 0, 100, -3}) {  // 0 and below: zeros; above T: clamped to T
      INFO("attention " << t << " len = " << len);
      const RangeFor range = int_tensor_is("len", len);
      CHECK(check_program(program, seed_for("attention/" + t + std::to_string(len)), {}, range));
    }
  }
  run_cases({
      {"attention scaled", "program op;\ninput q : {T}[1, 8, 64];\ninput k : {T}[1, 8, 100, 64];\n"
                           "input v : {T}[1, 8, 100, 64];\ninput len : i32;\noutput y : {T}[1, 8, 64];\n"
                           "y = attention(q, k, v, len, scale = 0.05);\n", kFloats},
  });
}

TEST_CASE("ops: rope, with angles broadcast over heads, over a transposed x and over a run-time dim") {
  run_cases({
      {"rope per token", "program op;\ninput x : {T}[7, 4, 64];\ninput c : {T}[7, 1, 32];\ninput s : {T}[7, 1, 32];\n"
                         "output y : {T}[7, 4, 64];\ny = rope(x, c, s);\n", kFloats},
      {"rope full angles", "program op;\ninput x : {T}[3, 5, 16];\ninput c : {T}[3, 5, 8];\ninput s : {T}[1, 5, 8];\n"
                           "output y : {T}[3, 5, 16];\ny = rope(x, c, s);\n", kFloats},
      {"rope transposed x", "program op;\ninput x : {T}[4, 6, 32];\ninput c : {T}[6, 1, 16];\ninput s : {T}[6, 1, 16];\n"
                            "output y : {T}[6, 4, 32];\ny = rope(transpose(x, perm = [1, 0, 2]), c, s) * 2.0;\n", kFloats},
      {"rope run-time rows", "program op;\ndim T in [1, 40];\ninput x : {T}[T, 3, 8];\ninput c : {T}[T, 1, 4];\n"
                             "input s : {T}[T, 1, 4];\noutput y : {T}[T, 3, 8];\ny = rope(x, c, s);\n", kFloats, {}, {}, {29}},
  });
}
