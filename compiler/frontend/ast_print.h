// A stable, indented S-expression dump of the AST, for `gdlc --emit=ast` and
// for tests. Every node shows its line:col.
#pragma once

#include <string>

#include "frontend/ast.h"

namespace gdl {

// For example
//   (program mlp 2:9)
//   (const H 5:1
//     (int 1024 5:11))
// Declarations print by kind (dims, consts, tensors, fns), then the body.
std::string print_ast(const ast::Module& module);

// Source-like text of an expression or a type, for diagnostics: `D / 2`,
// `(A + B) * 2`, `T[N, 1, D / 2]` (parentheses only where precedence needs them).
std::string expr_text(const ast::Expr& e);
std::string type_text(const ast::TypeExpr& t);

}  // namespace gdl
