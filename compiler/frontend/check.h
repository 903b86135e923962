// Static checks on the AST that need no types: names, declarations, control
// flow the graph cannot express, recursion, return placement, output
// assignment, unused values. Types and shapes are the lowering's (lower/),
// through each op's type rule (ops/).
#pragma once

#include <optional>
#include <string>
#include <string_view>
#include <vector>

#include "frontend/ast.h"
#include "frontend/diagnostics.h"

namespace gdl {

// Reports every problem found to diags (errors, and warnings for unused
// values). Unused-value warnings are given only when there is no error, so a
// rejected program shows its errors alone. lower_module expects a module that
// passed this check.
void check_module(const ast::Module& module, DiagnosticSink& diags);

// The candidate closest in spelling to `name` (for "did you mean X?" hints),
// or nullopt when none is close enough to be a likely typo.
std::optional<std::string> closest_spelling(std::string_view name, const std::vector<std::string>& candidates);

}  // namespace gdl
