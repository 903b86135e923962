// Static checks on the AST that need no types: names, declarations, control
// flow the graph cannot express, recursion, return placement, output
// assignment, unused values. Types and shapes are the lowering's (lower/),
// through each op's type rule (ops/).
#pragma once

#include <optional>
#include <set>
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

// The names an expression reads, in source order (type names given to a
// `dtype` argument included).
void collect_names(const ast::Expr& e, std::vector<const ast::NameExpr*>& out);

// The type parameters of a fn, which make it generic (docs/language.md,
// "Generic fns"). In its parameter types, a dtype written as a name that is
// no type, no near-miss spelling of one (`f61` stays a typo) and not declared
// at top level is a dtype parameter; a dim written as a bare name that is
// not declared at top level, no type and no dtype parameter is a shape
// parameter. Each list is in order of first occurrence.
struct FnTypeParams {
  std::vector<std::string> dims;
  std::vector<std::string> dtypes;

  bool empty() const { return dims.empty() && dtypes.empty(); }
  bool is_dim(const std::string& name) const;
  bool is_dtype(const std::string& name) const;
  // Whether a type names any of them (its dtype, or a name in a dim).
  bool mentioned_in(const ast::TypeExpr& t) const;
};
FnTypeParams fn_type_params(const ast::Module& module, const ast::FnDecl& fn);
// The same with the module's global names (global_names) computed once, for
// a caller that asks for every fn of a large module.
FnTypeParams fn_type_params(const std::set<std::string>& globals, const ast::FnDecl& fn);
std::set<std::string> global_names(const ast::Module& module);
// A dtype position's name that is no type but close to one: reported as an
// unknown type, never taken as a dtype parameter.
bool near_dtype_name(const std::string& name);

}  // namespace gdl
