// Golden IR: `gdlc --emit=ir` of every example, and of the programs kept in
// tests/golden/ beside their IR, must match tests/golden/NAME.ir.
// After an intended change, regenerate with:
//   GDL_UPDATE_GOLDEN=1 build/tests/gdl_tests -tc="golden*"
// and review the diff.
#include <doctest/doctest.h>

#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <sstream>
#include <vector>

#include "pipeline.h"
#include "frontend/source_loader.h"
#include "passes/ir_print.h"

namespace fs = std::filesystem;

static std::string read_text(const fs::path& p) {
  std::ifstream in(p, std::ios::binary);
  std::stringstream ss;
  ss << in.rdbuf();
  return ss.str();
}

TEST_CASE("golden IR of every example") {
  fs::path examples = fs::path(GDL_SOURCE_DIR) / "examples";
  fs::path golden = fs::path(GDL_SOURCE_DIR) / "tests" / "golden";
  bool update = std::getenv("GDL_UPDATE_GOLDEN") != nullptr;
  int checked = 0;
  std::vector<fs::path> programs;
  for (const fs::path& dir : {examples, golden})
    for (const auto& entry : fs::directory_iterator(dir))
      if (entry.path().extension() == ".gdl") programs.push_back(entry.path());
  for (const fs::path& path : programs) {
    const auto entry = fs::directory_entry(path);
    std::string name = entry.path().stem().string();
    CAPTURE(name);
    gdl::DiagnosticSink diags;
    std::string fatal;
    auto file = gdl::load_source(entry.path().string(), diags, &fatal);
    REQUIRE(file.has_value());
    auto graph = gdl::compile_to_ir(*file, diags);
    INFO(diags.render(*file));
    REQUIRE(graph.has_value());
    CHECK(diags.all().empty());  // they compile without warnings
    std::string ir = gdl::ir::print_ir(*graph);
    fs::path expected_path = golden / (name + ".ir");
    if (update) {
      std::ofstream(expected_path, std::ios::binary) << ir;
    } else {
      REQUIRE_MESSAGE(fs::exists(expected_path), "missing golden file " << expected_path.string());
      CHECK(ir == read_text(expected_path));
    }
    ++checked;
  }
  CHECK(checked >= 4);
}
