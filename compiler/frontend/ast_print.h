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

}  // namespace gdl
