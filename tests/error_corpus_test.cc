// The error corpus: every tests/errors/*.gdl file states the diagnostics it
// must produce as comment lines
//   # expect error LINE:COL: message substring
//   # expect warning LINE:COL: message substring
// The file goes through parse -> check -> lower like the pipeline. Every
// expectation must match a diagnostic of that severity at exactly LINE:COL
// whose message contains the substring, and there must be no diagnostic
// that no expectation names. The rendered form must be
// `file:line:col: error: message`, then the source line and a caret line.
#include <doctest/doctest.h>

#include <algorithm>
#include <filesystem>
#include <fstream>
#include <regex>
#include <sstream>

#include "frontend/check.h"
#include "lower/lower.h"
#include "frontend/parse.h"
#include "pipeline.h"
#include "frontend/source_loader.h"

namespace gdl {
namespace {

struct Expectation {
  Severity severity;
  uint32_t line, col;
  std::string substring;
};

std::vector<Expectation> read_expectations(const std::string& text) {
  static const std::regex kPattern(R"(#\s*expect (error|warning) (\d+):(\d+): (.*\S)\s*$)");
  std::vector<Expectation> out;
  std::istringstream lines(text);
  std::string line;
  while (std::getline(lines, line)) {
    std::smatch m;
    if (!std::regex_search(line, m, kPattern)) continue;
    out.push_back({m[1] == "error" ? Severity::kError : Severity::kWarning, static_cast<uint32_t>(std::stoul(m[2])),
                   static_cast<uint32_t>(std::stoul(m[3])), m[4]});
  }
  return out;
}

// The front end exactly as gdlc runs it. Returns how many diagnostics came
// from the parser (those need no hint).
size_t compile(const SourceFile& file, DiagnosticSink& diags) {
  DiagnosticSink parse_only;
  std::unique_ptr<ast::Module> module = parse_module(file, parse_only);
  size_t from_parser = parse_only.all().size();
  std::optional<ir::Graph> graph = compile_to_ir(file, diags);
  if (!diags.has_errors())
    CHECK(graph.has_value());
  else
    CHECK_FALSE(graph.has_value());
  return from_parser;
}

std::string severity_word(Severity s) { return s == Severity::kError ? "error" : "warning"; }

std::string at(uint32_t line, uint32_t col) { return std::to_string(line) + ":" + std::to_string(col); }

// The header line `path:L:C: error: ...` is followed by ` L | source` and a caret line.
void check_rendered(const std::string& rendered, const std::string& path, const Diagnostic& d) {
  std::string header = path + ":" + at(d.loc.line, d.loc.col) + ": " + severity_word(d.severity) + ": " + d.message;
  size_t pos = rendered.find(header + "\n");
  REQUIRE_MESSAGE(pos != std::string::npos, "missing rendered header: " << header);
  std::istringstream rest(rendered.substr(pos + header.size() + 1));
  std::string source_line, caret_line;
  std::getline(rest, source_line);
  std::getline(rest, caret_line);
  CHECK(source_line.rfind(" " + std::to_string(d.loc.line) + " | ", 0) == 0);
  CHECK(caret_line.find(" | ") != std::string::npos);
  CHECK(caret_line.find('^') != std::string::npos);
}

TEST_CASE("error corpus: each file gives exactly the diagnostics it expects") {
  std::vector<std::filesystem::path> files;
  for (const auto& entry : std::filesystem::directory_iterator(GDL_SOURCE_DIR "/tests/errors"))
    if (entry.path().extension() == ".gdl") files.push_back(entry.path());
  std::sort(files.begin(), files.end());
  CHECK(files.size() >= 35);

  for (const std::filesystem::path& path : files) {
    std::string name = "tests/errors/" + path.filename().string();
    std::ifstream in(path, std::ios::binary);
    std::stringstream text;
    text << in.rdbuf();
    SourceFile file = source_from_string(name, text.str());
    std::vector<Expectation> expected = read_expectations(file.text());
    DiagnosticSink diags;
    size_t from_parser = diags.all().size();
    if (validate_source_text(file, diags)) from_parser = compile(file, diags);
    std::string rendered = diags.render(file);
    INFO(name << "\n" << rendered);
    REQUIRE_MESSAGE(!expected.empty(), name << " has no '# expect' line");

    std::vector<bool> matched(diags.all().size(), false);
    for (const Expectation& e : expected) {
      bool found = false;
      for (size_t i = 0; i < diags.all().size() && !found; ++i) {
        const Diagnostic& d = diags.all()[i];
        if (matched[i] || d.severity != e.severity || d.loc.line != e.line || d.loc.col != e.col ||
            d.message.find(e.substring) == std::string::npos)
          continue;
        matched[i] = found = true;
        check_rendered(rendered, name, d);
        // The checker's and the lowering's errors all say what to do instead.
        CHECK_MESSAGE((!d.hint.empty() || d.severity != Severity::kError || i < from_parser),
                      "no hint for: " << d.message);
      }
      CHECK_MESSAGE(found, "expected " << severity_word(e.severity) << " " << at(e.line, e.col) << ": " << e.substring);
    }
    for (size_t i = 0; i < diags.all().size(); ++i)
      CHECK_MESSAGE(matched[i], "unexpected diagnostic " << severity_word(diags.all()[i].severity) << " "
                                                         << at(diags.all()[i].loc.line, diags.all()[i].loc.col) << ": "
                                                         << diags.all()[i].message);
  }
}

TEST_CASE("error corpus: invalid UTF-8 is reported at its byte") {
  SourceFile file = source_from_string("bad.gdl", "program p;\ninput x : f32[4];  # caf\xC3\x28\n");
  DiagnosticSink diags;
  CHECK_FALSE(validate_source_text(file, diags));
  REQUIRE(diags.error_count() == 1);
  CHECK(diags.all()[0].loc.line == 2);
  CHECK(diags.render(file).rfind("bad.gdl:2:", 0) == 0);
}

TEST_CASE("error corpus: a cascade of uses of a bad value reports one error") {
  SourceFile file = source_from_string("cascade.gdl", R"(program p;
input x : f16[8];
input n : i32[8];
output y : f16[8];
let bad = x + n;
let worse = exp(bad) * bad;
y = worse + bad;
)");
  DiagnosticSink diags;
  compile(file, diags);
  INFO(diags.render(file));
  CHECK(diags.error_count() == 1);
  CHECK(diags.all()[0].message.find("dtype mismatch") != std::string::npos);
}

}  // namespace
}  // namespace gdl
