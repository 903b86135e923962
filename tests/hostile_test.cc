// Hostile input: programs and command lines that once crashed gdl, took
// exponential or quadratic time and memory, or were reported as internal
// errors. Each must end in a clear user error, in bounded time and memory.
// The programs whose errors fit the error corpus are in tests/errors/; these
// are the cases too large for it, the suggestion search, the planner's
// dependencies, and the tools' command lines.
#include <doctest/doctest.h>

#include <sys/stat.h>
#include <sys/wait.h>
#include <unistd.h>

#include <algorithm>
#include <chrono>
#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <random>
#include <sstream>
#include <string>

#include "cpu_program.h"
#include "frontend/check.h"
#include "frontend/source_loader.h"
#include "interp/interp.h"
#include "lower/lower.h"
#include "pipeline.h"
#include "plan.h"

namespace gdl {
namespace {

namespace fs = std::filesystem;

// The diagnostics of a program, rendered.
std::string diagnostics_of(const std::string& text) {
  DiagnosticSink diags;
  SourceFile file = source_from_string("hostile.gdl", text);
  std::optional<ir::Graph> g = compile_to_ir(file, diags);
  CHECK_FALSE(g.has_value());
  return diags.render(file);
}

double seconds_since(std::chrono::steady_clock::time_point start) {
  return std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
}

// ------------------------------------------------------------- recursion depth

TEST_CASE("hostile: a chain of 10000 consts, each from the next, is an error, not a stack overflow") {
  std::string text = "program p;\n";
  const int n = 10000;
  for (int i = 0; i + 1 < n; ++i) text += "const c" + std::to_string(i) + " = c" + std::to_string(i + 1) + " + 1;\n";
  text += "const c" + std::to_string(n - 1) + " = 0;\ninput x : f32[4];\noutput y : f32[4];\ny = x * c0;\n";
  const std::string rendered = diagnostics_of(text);
  CHECK(rendered.find("hostile.gdl:2:7: error: const 'c0' is defined through a chain of more than " +
                      std::to_string(kMaxConstDepth) + " consts") != std::string::npos);
}

TEST_CASE("hostile: expressions nested through fns multiply the parser's depth limits, and are bounded") {
  // 250 fns, each calling the next at the bottom of a chain of 250 additions.
  std::string text = "program p;\ninput x : f32[4];\noutput y : f32[4];\n";
  for (int i = 0; i < 250; ++i) {
    text += "fn g" + std::to_string(i) + "(v: f32[4]) -> f32[4] { return " +
            (i == 249 ? std::string("v") : "g" + std::to_string(i + 1) + "(v)");
    for (int k = 0; k < 250; ++k) text += " + 1.0";
    text += "; }\n";
  }
  text += "y = g0(x);\n";
  const std::string rendered = diagnostics_of(text);
  CHECK(rendered.find("error: expressions nest more than " + std::to_string(kMaxEvalDepth) +
                      " deep through fn calls and consts") != std::string::npos);
}

TEST_CASE("hostile: a fn that calls itself twice is reported, not inlined exponentially") {
  const auto start = std::chrono::steady_clock::now();
  const std::string rendered = diagnostics_of(R"(program p;
input x : f32[4];
output y : f32[4];
fn f(v: f32[4]) -> f32[4] {
  return f(v) + f(v) * f(v);
}
y = f(x);
)");
  CHECK(rendered.find("recursive call: f -> f") != std::string::npos);
  CHECK(rendered.find("steps to unroll") == std::string::npos);
  CHECK(seconds_since(start) < 10);  // it took minutes when each call was inlined to the depth limit
}


}  // namespace
}  // namespace gdl
