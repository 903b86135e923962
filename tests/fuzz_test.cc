// Random programs (tests/fuzz/program_gen.h) checked on the CPU: each
// compiles; the interpreter and the plan's execution in one host arena
// (run_planned) agree bit for bit; and the optimizing passes change no
// value (the program compiled without them gives the same bits). A failure
// is shrunk to a small program, printed for a regression test.
// GDL_FUZZ_FIRST_SEED and GDL_FUZZ_COUNT choose the programs (a longer run:
// GDL_FUZZ_COUNT=5000 build/tests/gdl_tests -tc='fuzz:*').
#include <doctest/doctest.h>

#include <bit>
#include <cmath>

#include "cpu_program.h"
#include "fuzz/corpus.h"
#include "fuzz/program_gen.h"
#include "fuzz/shrink.h"

namespace gdl {
namespace {

using namespace test_programs;

bool same_bits(const HostTensor& a, const HostTensor& b) {
  if (a.shape != b.shape || a.data.size() != b.data.size()) return false;
  for (size_t i = 0; i < a.data.size(); ++i) {
    const double x = a.data[i], y = b.data[i];
    if (std::isnan(x) && std::isnan(y)) continue;
    if (std::bit_cast<uint64_t>(x) != std::bit_cast<uint64_t>(y)) return false;
  }
  return true;
}

std::optional<ir::Graph> compile(const std::string& text, bool optimize, std::string& error) {
  DiagnosticSink diags;
  SourceFile file = source_from_string("fuzz.gdl", text);
  PipelineOptions options;
  options.optimize = optimize;
  std::optional<ir::Graph> g = compile_to_ir(file, diags, options);
  if (!g) error = diags.render(file);
  return g;
}

// "" when the program passes every CPU check, else "kind: details".
std::string check_text(const std::string& text, uint64_t seed) {
  std::string error;
  std::optional<ir::Graph> g = compile(text, true, error);
  if (!g) return "compile: " + error;
  std::optional<ir::Graph> plain = compile(text, false, error);
  if (!plain) return "compile without optimization: " + error;
  const plan::Plan plan = plan_program(*g);
  std::mt19937 rng(static_cast<uint32_t>(seed));
  for (int sample = 0; sample < 2; ++sample) {
    std::vector<int64_t> dims;
    for (const DimInfo& d : g->dims) dims.push_back(std::uniform_int_distribution<int64_t>(d.lo, d.hi)(rng));
    const Bindings b = random_bindings(*g, dims, rng);
    Expected<std::map<std::string, HostTensor>> want = interpret(*g, b);
    if (!want.ok()) return "interpret: " + want.status().message();
    Expected<std::map<std::string, HostTensor>> planned = plan::run_planned(plan, b);
    if (!planned.ok()) return "run_planned: " + planned.status().message();
    Expected<std::map<std::string, HostTensor>> unoptimized = interpret(*plain, b);
    if (!unoptimized.ok()) return "interpret without optimization: " + unoptimized.status().message();
    for (const auto& [name, value] : *want) {
      if (!planned->count(name) || !same_bits(planned->at(name), value)) return "planned differs: " + name;
      if (!unoptimized->count(name) || !same_bits(unoptimized->at(name), value))
        return "optimization changes a value: " + name;
    }
  }
  return "";
}

std::string check_cpu(const fuzz::GenProgram& p) { return check_text(p.text(), p.seed); }

}  // namespace

TEST_CASE("fuzz: saved regressions compile and run the same through their plan") {
  const auto saved = fuzz::saved_regressions(GDL_SOURCE_DIR);
  CHECK_FALSE(saved.empty());
  uint64_t seed = 0;
  for (const auto& regression : saved) {
    const std::string& name = regression.first;
    const std::string& text = regression.second;
    INFO(name);
    CHECK(check_text(text, ++seed) == "");
  }
}

TEST_CASE("fuzz: random programs compile, run the same through their plan, and keep their values when optimized") {
  const uint64_t first = fuzz::env_count("GDL_FUZZ_FIRST_SEED", 1), count = fuzz::env_count("GDL_FUZZ_COUNT", 2000);
  int failures = 0, passed = 0;
  size_t statements = 0;
  // Every kind of statement the generator makes shows up across the run.
  std::map<std::string, int> seen;
  const std::vector<std::string> kinds = {"@", "transpose(", "scatter(", "rand", "softmax(", "gather(", "argmax(",
                                          "concat(", "reshape(", "cast(", "where(", "norm("};
  for (uint64_t seed = first; seed < first + count && failures < 3; ++seed) {
    const fuzz::GenProgram p = fuzz::generate_program(seed);
    const std::string text = p.text();
    for (const std::string& k : kinds) seen[k] += text.find(k) != std::string::npos;
    statements += p.statements.size();
    const std::string failure = check_cpu(p);
    if (failure.empty()) {
      ++passed;
      continue;
    }
    ++failures;
    const fuzz::Shrunk small = fuzz::shrink(p, failure, check_cpu);
    INFO("seed " << seed << ": " << small.failure << "\nshrunk in " << small.checks << " checks from "
                 << p.statements.size() << " to " << small.program.statements.size() << " statements:\n"
                 << small.program.text());
    CHECK(failure.empty());
  }
  CHECK(passed == static_cast<int>(count));
  MESSAGE(passed << " programs, " << statements << " statements");
  if (count >= 100)
    for (const std::string& k : kinds) {
      INFO(k);
      CHECK(seen[k] > 0);
    }
}

}  // namespace gdl
