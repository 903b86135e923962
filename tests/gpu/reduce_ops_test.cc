// min and reductions over several axes, argmax/argmin, topk, cumsum,
// arange and one_hot: compiled from .gdl text, run by graph and by eager
// launch on a poisoned arena, and compared with the CPU reference on
// random non-zero inputs (with ties and NaNs where the order matters),
// then over run-time dims with the padding poisoned.
#include <cmath>
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
  Adjust adjust = {};
  RangeFor range = {};
};

void run_cases(const std::vector<OpCase>& cases) {
  for (const OpCase& c : cases)
    for (const std::string& t : c.dtypes) {
      std::string text = substitute(c.text, "{T}", t);
      INFO("op case '" << c.name << "' in " << t << ":\n" << text);
      Program program = compile_text(text);
      CHECK(check_program(program, seed_for(c.name + "/" + t), upper_dims(program), c.range, {}, c.adjust));
    }
}

// Rewrites input `a` element by element: f(index, value) -> value.
void edit(std::map<std::string, TensorData>& t, const std::function<double(size_t, double)>& f) {
  TensorData& a = t.at("a");
  const size_t count = a.bytes.size() / element_size(a.dtype);
  std::vector<double> v = decode_elements(a.dtype, a.bytes.data(), count);
  for (size_t i = 0; i < count; ++i) v[i] = f(i, v[i]);
  a.bytes = encode_elements(a.dtype, v);
}

// Ties: every third element repeats the one before it.
void ties(std::map<std::string, TensorData>& t) {
  double previous = 0;
  edit(t, [&](size_t i, double v) { return i % 3 == 2 ? previous : (previous = v); });
}

// Ties, and in float tensors a NaN every 41 elements (most rows get one or none).
void ties_and_nans(std::map<std::string, TensorData>& t) {
  ties(t);
  if (t.at("a").dtype == ElementType::kI32) return;
  edit(t, [](size_t i, double v) { return i % 41 == 7 ? std::nan("") : v; });
}

std::string program(const std::string& in, const std::string& out, const std::string& expr) {
  return "program op;\ninput a : " + in + ";\noutput y : " + out + ";\ny = " + expr + ";\n";
}

bool any_nan(const std::map<std::string, TensorData>& outputs) {
  for (const auto& [name, t] : outputs) {
    const size_t count = t.bytes.size() / element_size(t.dtype);
    for (double v : decode_elements(t.dtype, t.bytes.data(), count))
      if (std::isnan(v)) return true;
  }
  return false;
}

// Program p over one run-time dim at each of `extents`, under buckets and
// under updates, the padding poisoned: graph and eager runs against the
// CPU reference (only the reference without a GPU).
void check_padded(const Program& p, const std::string& seed, const std::vector<int64_t>& extents,
                  const Adjust& adjust = {}) {
  if (cpu_only) {
    std::mt19937_64 rng(seed_for(seed + " cpu"));
    for (int64_t n : extents) CHECK_FALSE(reference(p, random_bindings(p, {n}, rng)).empty());
    return;
  }
  for (DimPolicyChoice policy : {DimPolicyChoice::kAsDeclared, DimPolicyChoice::kUpdate}) {
    INFO("policy " << (policy == DimPolicyChoice::kUpdate ? "update" : "buckets"));
    SessionOptions options;
    options.dim_policy = policy;
    std::unique_ptr<Session> s = make_session(p, options, /*poison_padding=*/true);
    std::mt19937_64 rng(seed_for(seed));
    for (int64_t n : extents) {
      INFO("run-time dim = " << n);
      std::map<std::string, TensorData> tensors = random_bindings(p, {n}, rng);
      if (adjust) adjust(tensors);
      bind_inputs(*s, tensors);
      const std::map<std::string, TensorData> want = reference(p, tensors);
      std::map<std::string, TensorData> got = run_and_read(*s, false);
      CHECK_FALSE(any_nan(got));
      CHECK(expect_match(got, want, "graph"));
      CHECK(expect_match(run_and_read(*s, true), want, "eager"));
    }
  }
}

}  // namespace

TEST_CASE("reduce ops: min, and sum, mean, max, min over several axes") {
  const std::string in = "{T}[6, 37, 5]";
  run_cases({
      {"min axis 1", program(in, "{T}[6, 5]", "min(a, axis = 1)"), kNumbers},
      {"min last", program(in, "{T}[6, 37]", "min(a)"), kNumbers},
      {"min long row", program("{T}[4, 3000]", "{T}[4]", "min(a, axis = 1)"), kNumbers},
      {"sum axes 0 2", program(in, "{T}[37]", "sum(a, axis = [0, 2])"), kNumbers},
      {"sum axes 1 2", program(in, "{T}[6]", "sum(a, axis = [2, 1])"), kNumbers},
      {"mean axes keepdims", program(in, "{T}[1, 37, 1]", "mean(a, axis = [0, -1], keepdims = true)"), kFloats},
      {"max all axes", program(in, "{T}", "max(a, axis = [0, 1, 2])"), kNumbers},
      {"min axes rank 4", program("{T}[3, 4, 5, 6]", "{T}[4, 5]", "min(a, axis = [0, 3])"), kNumbers},
      {"mean axes long", program("{T}[2, 60, 80]", "{T}[2]", "mean(a, axis = [1, 2])"), kFloats},
  });
}

TEST_CASE("reduce ops: argmax and argmin with ties and NaNs, either axis, rank 1 to 4") {
  run_cases({
      {"argmax last", program("{T}[6, 37]", "i32[6]", "argmax(a)"), kNumbers, ties_and_nans},
      {"argmin last", program("{T}[6, 37]", "i32[6]", "argmin(a, axis = -1)"), kNumbers, ties_and_nans},
      {"argmax axis 0", program("{T}[37, 6]", "i32[6]", "argmax(a, axis = 0)"), kNumbers, ties_and_nans},
      {"argmin axis 1 keepdims", program("{T}[4, 37, 6]", "i32[4, 1, 6]", "argmin(a, axis = 1, keepdims = true)"),
       kNumbers, ties_and_nans},
      {"argmax long row", program("{T}[4, 3000]", "i32[4]", "argmax(a)"), kNumbers, ties},
      {"argmin rank 1", program("{T}[133]", "i32", "argmin(a)"), kNumbers, ties},
      {"argmax rank 4", program("{T}[2, 3, 4, 50]", "i32[2, 3, 4]", "argmax(a)"), kNumbers, ties_and_nans},
      // Rows read in parts: too few rows for the GPU.
      {"argmax vocabulary row in parts", program("{T}[1, 128256]", "i32[1]", "argmax(a)"), kNumbers, ties_and_nans},
      {"argmin rows in parts", program("{T}[3, 20000]", "i32[3]", "argmin(a)"), kNumbers, ties_and_nans},
  });
}

TEST_CASE("reduce ops: topk values and indices, best first, with ties and NaNs") {
  run_cases({
      {"topk values k 5", program("{T}[6, 300]", "{T}[6, 5]", "topk_values(a, 5)"), kNumbers, ties_and_nans},
      {"topk indices k 5", program("{T}[6, 300]", "i32[6, 5]", "topk_indices(a, 5)"), kNumbers, ties_and_nans},
      {"topk indices k 1", program("{T}[6, 37]", "i32[6, 1]", "topk_indices(a, 1)"), kNumbers, ties},
      {"topk values k 64", program("{T}[3, 500]", "{T}[3, 64]", "topk_values(a, 64)"), kNumbers, ties},
      {"topk indices whole row", program("{T}[4, 40]", "i32[4, 40]", "topk_indices(a, 40)"), kNumbers, ties},
      {"topk indices axis 0", program("{T}[37, 6]", "i32[4, 6]", "topk_indices(a, 4, axis = 0)"), kNumbers,
       ties_and_nans},
      {"topk values axis 1", program("{T}[3, 37, 5]", "{T}[3, 7, 5]", "topk_values(a, 7, axis = 1)"), kNumbers,
       ties_and_nans},
      {"topk indices k 256", program("{T}[2, 3000]", "i32[2, 256]", "topk_indices(a, 256)"), kNumbers, ties},
      {"topk vocabulary rows", program("{T}[3, 40000]", "i32[3, 64]", "topk_indices(a, 64)"), kNumbers, ties_and_nans},
      {"topk vocabulary values", program("{T}[2, 40000]", "{T}[2, 50]", "topk_values(a, 50)"), kNumbers, ties},
  });
}

// Few distinct values: far more than 256 elements hold the k-th, in every
// part of a row read in parts and among the parts' candidates.
void few_values(std::map<std::string, TensorData>& t) {
  edit(t, [](size_t, double v) { return std::floor(v / 4); });
}

TEST_CASE("reduce ops: topk over rows read in parts (too few rows for the GPU), ties, NaNs, few values; argmax beside") {
  run_cases({
      {"topk vocabulary row in parts", program("{T}[1, 128256]", "i32[1, 64]", "topk_indices(a, 64)"), kNumbers,
       ties_and_nans},
      {"topk values in parts k 256", program("{T}[2, 20000]", "{T}[2, 256]", "topk_values(a, 256)"), kNumbers, ties},
      {"topk in parts k 1", program("{T}[5, 9000]", "i32[5, 1]", "topk_indices(a, 1)"), kNumbers, ties_and_nans},
      {"topk in parts few values", program("{T}[3, 40000]", "i32[3, 100]", "topk_indices(a, 100)"), kNumbers,
       few_values},
  });
  // A run-time row length: parts of fewer elements than k at the shortest
  // rows, the padding poisoned; an argmax beside them.
  Program p = compile_text(R"(program topk_parts_padded;
dim V in [300, 40000] buckets(5000, 40000);
input a : f16[2, V];
output ti : i32[2, 64];
output tv : f16[2, 64];
output am : i32[2];
ti = topk_indices(a, 64);
tv = topk_values(a, 64);
am = argmax(a);
)");
  check_padded(p, "topk parts padded", {300, 4096, 4097, 12345, 40000, 301}, ties);
  // Run-time rows: in parts below 132 rows (the scratch reserved for 131,
  // a run using fewer), one block a row from 132 (the second kernel).
  Program rows = compile_text(R"(program select_rows_bands;
dim N in [1, 300] buckets(16, 140, 300);
input a : bf16[N, 9000];
output ti : i32[N, 8];
output am : i32[N];
ti = topk_indices(a, 8);
am = argmax(a);
)");
  check_padded(rows, "select rows bands", {1, 5, 131, 132, 300, 2, 140}, ties);
}

TEST_CASE("reduce ops: cumsum along either axis") {
  run_cases({
      {"cumsum last", program("{T}[6, 37]", "{T}[6, 37]", "cumsum(a)"), kNumbers},
      {"cumsum long row", program("{T}[3, 3000]", "{T}[3, 3000]", "cumsum(a, axis = 1)"), kNumbers},
      {"cumsum axis 0", program("{T}[37, 6]", "{T}[37, 6]", "cumsum(a, axis = 0)"), kNumbers},
      {"cumsum rank 4", program("{T}[2, 3, 4, 5]", "{T}[2, 3, 4, 5]", "cumsum(a, axis = 2)"), kNumbers},
      {"cumsum rank 1", program("{T}[133]", "{T}[133]", "cumsum(a)"), kNumbers},
  });
  // i32 sums that wrap.
  RangeFor large = [](const TensorInfo&) {
    ValueRange r;
    r.int_lo = 1000000000, r.int_hi = 2000000000;
    return r;
  };
  run_cases({{"cumsum wraps", program("{T}[4, 50]", "{T}[4, 50]", "cumsum(a)"), {"i32"}, {}, large}});
}

TEST_CASE("reduce ops: arange and one_hot") {
  RangeFor ids = [](const TensorInfo& t) {
    ValueRange r;
    if (t.name == "a") r.int_lo = -3, r.int_hi = 12;  // some outside [0, 10): zero rows
    return r;
  };
  run_cases({
      {"arange", program("i32[7]", "i32[7]", "a + arange(7)"), {"i32"}},
      {"arange range", program("i32[4]", "i32[4]", "a * arange(10, -2, -3)"), {"i32"}},
      {"one_hot", program("i32[5, 3]", "{T}[5, 3, 10]", "one_hot(a, 10, dtype = {T})"), kAll, {}, ids},
      {"one_hot f32", program("i32[37]", "f32[37, 10]", "one_hot(a, 10)"), {"i32"}, {}, ids},
  });
}

TEST_CASE("reduce ops: run-time dims, padding poisoned, under buckets and updates") {
  // Every op here combines along T, or is sized by it.
  Program p = compile_text(R"(program padded;
dim T in [4, 96] buckets(8, 32, 96);
input x : f16[3, T, 5];
input xi : i32[T, 6];
input ids : i32[T];
output s : f32[3];
output m : f16[5];
output a : i32[3, 5];
output b : i32[3, T];
output tv : f16[3, 4, 5];
output ti : i32[T, 2];
output c : f16[3, T, 5];
output ci : i32[T, 6];
output r : i32[T];
output h : f16[T, 9];
s = sum(cast(x, f32), axis = [1, 2]);
m = max(x, axis = [0, 1]);
a = argmax(x, axis = 1);
b = argmin(x);
tv = topk_values(x, 4, axis = 1);
ti = topk_indices(xi, 2);
c = cumsum(x, axis = 1);
ci = cumsum(xi, axis = 0);
r = arange(T) + ids;
h = one_hot(ids, 9, dtype = f16);
)");
  check_padded(p, "padded ops", {4, 7, 8, 9, 31, 32, 33, 95, 96, 5});
}
