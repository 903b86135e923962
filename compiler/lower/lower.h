// The elaborator: AST -> IR. Evaluates compile-time values, inlines fns,
// unrolls `for`, folds `if`, and checks every op's dtypes and shapes.
#pragma once

#include <optional>
#include <string>
#include <vector>

#include "frontend/ast.h"
#include "frontend/diagnostics.h"
#include "ir.h"

namespace gdl {

// Lowers a module that check_module accepted. Every problem goes to diags;
// nullopt when this call reported an error. The graph has one leaf per input,
// param and scalar declaration (declaration order, even when unused) and its
// outputs in declaration order.
std::optional<ir::Graph> lower_module(const ast::Module& module, DiagnosticSink& diags);

// Limits that keep elaboration finite on hostile input.
inline constexpr int64_t kMaxLoopIterations = 65536;         // one `for`
inline constexpr size_t kMaxIrNodes = 1'000'000;             // the whole graph
inline constexpr int64_t kMaxElaborationSteps = 20'000'000;  // statements run + fns inlined
inline constexpr int kMaxInlineDepth = 256;                  // nested fn calls
inline constexpr int kMaxConstDepth = 256;                   // consts defined through other consts
// Expressions evaluated inside one another, through fn bodies and consts:
// each of those may nest up to the parser's limit, so their product is
// bounded here, where it turns into stack.
inline constexpr int kMaxEvalDepth = 1024;

}  // namespace gdl
