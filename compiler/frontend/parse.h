// Parsing: .gdl text -> AST (ast.h). parse.cc is the only file that sees ANTLR.
#pragma once

#include <memory>

#include "frontend/ast.h"
#include "frontend/diagnostics.h"
#include "frontend/source.h"

namespace gdl {

// Parses one source file. Returns null when the text is not a well-formed
// program; every problem is then reported to diags as an error at its
// line:col: rejected bytes (see validate_source_text), brackets nested
// deeper than kMaxNestingDepth or left unbalanced, syntax errors (at most one
// per top-level declaration or statement: no cascades), integer literals
// beyond int64. Never prints, and never recurses deeper than the nesting
// limit allows, whatever the input.
std::unique_ptr<ast::Module> parse_module(const SourceFile& file, DiagnosticSink& diags);

}  // namespace gdl
