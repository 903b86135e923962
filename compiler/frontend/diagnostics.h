// User-facing diagnostics: file:line:col: error: message, the source line and
// a caret, then a hint that says what to do instead. Compiler bugs are not
// diagnostics; they are GDL_INTERNAL_ASSERT failures (internal_error.h).
#pragma once

#include <string>
#include <vector>

#include "frontend/source.h"

namespace gdl {

enum class Severity { kError, kWarning, kNote };

struct Diagnostic {
  Severity severity = Severity::kError;
  SourceLoc loc;
  std::string message;
  std::string hint;     // "what to do instead"; may be empty
  uint32_t length = 1;  // caret span in bytes (at least 1)
};

class DiagnosticSink {
 public:
  void error(SourceLoc loc, std::string message, std::string hint = {}, uint32_t length = 1);
  void warning(SourceLoc loc, std::string message, std::string hint = {}, uint32_t length = 1);
  void add(Diagnostic d);

  bool has_errors() const { return error_count_ > 0; }
  int error_count() const { return error_count_; }
  const std::vector<Diagnostic>& all() const { return diagnostics_; }

  // Renders every diagnostic in source order, e.g.
  //   prog.gdl:4:4: error: condition depends on run-time data
  //       4 | if sum(x) > 0.0 {
  //         |    ^~~~~~~~~~~~
  //   prog.gdl:4:4: hint: a graph replays a fixed set of tasks; use where(cond, a, b)
  std::string render(const SourceFile& file) const;

 private:
  std::vector<Diagnostic> diagnostics_;
  int error_count_ = 0;
};

std::string render_diagnostic(const Diagnostic& d, const SourceFile& file);

}  // namespace gdl
