// What parse.cc and syntax_errors.cc share: token positions, the depth
// limits, and the syntax error handling of steps 2 and 3 (parse.cc). These
// two files and this header are the only ones that include ANTLR.
#pragma once

#include <cstdint>
#include <memory>
#include <string>

#include "GdlLexer.h"
#include "GdlParser.h"
#include "antlr4-runtime.h"
#include "frontend/diagnostics.h"
#include "frontend/source.h"

namespace gdl::parsing {

using antlr4::Token;
using gdl_antlr::GdlLexer;
using gdl_antlr::GdlParser;

// `a + b + c + ...` nests one level per operator without any bracket; later
// passes recurse over expression trees, so their depth is bounded too, more
// generously than brackets.
inline constexpr int kMaxExpressionDepth = 4 * kMaxNestingDepth;

inline std::string nesting_message() { return "nesting deeper than " + std::to_string(kMaxNestingDepth) + " levels"; }

inline SourceLoc loc_of(const Token* t) {
  return {static_cast<uint32_t>(t->getLine()), static_cast<uint32_t>(t->getCharPositionInLine() + 1)};
}

inline SourceLoc loc_of(antlr4::tree::TerminalNode* node) { return loc_of(node->getSymbol()); }

// Bytes from the start of first to the end of last (one byte at least).
inline uint32_t span(const Token* first, const Token* last) {
  if (!first || !last || last->getStopIndex() < first->getStartIndex() ||
      last->getStopIndex() == static_cast<size_t>(-1))
    return 1;
  return static_cast<uint32_t>(last->getStopIndex() - first->getStartIndex() + 1);
}

inline uint32_t span(antlr4::ParserRuleContext* ctx) { return span(ctx->getStart(), ctx->getStop()); }

// Just past the end of t: where a missing ';' belongs.
inline SourceLoc loc_after(const Token* t) {
  SourceLoc loc = loc_of(t);
  loc.col += span(t, t);
  return loc;
}

// Step 2: the bracket pre-scan. False after reporting the first problem.
bool check_brackets(const SourceFile& file, DiagnosticSink& diags);

// Step 3: the parser's error strategy (short messages, one per top-level
// declaration or statement).
std::shared_ptr<antlr4::ANTLRErrorStrategy> syntax_error_strategy(const SourceFile& file, DiagnosticSink& diags);

// ANTLR's own reports should all go through SyntaxErrors; this catches any
// that do not (nothing reaches the console either way).
class FallbackListener : public antlr4::BaseErrorListener {
 public:
  explicit FallbackListener(DiagnosticSink& diags) : diags_(diags) {}
  void syntaxError(antlr4::Recognizer*, Token*, size_t line, size_t col, const std::string&,
                   std::exception_ptr) override {
    if (!reported_) diags_.error({static_cast<uint32_t>(line), static_cast<uint32_t>(col + 1)}, "syntax error");
    reported_ = true;
  }

 private:
  DiagnosticSink& diags_;
  bool reported_ = false;
};

}  // namespace gdl::parsing
