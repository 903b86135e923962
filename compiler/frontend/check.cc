// check_module: the static checks that need no types.
//
// 1. Collect the global declarations (dims, consts, params, inputs, outputs,
//    scalars, fns) into one namespace, in any order; a second declaration of
//    a name is an error at the second one.
// 2. Check the names inside declarations (dim bounds, const values, types,
//    scalar defaults); report const cycles at the reference that closes them.
// 3. Walk every fn body in its own scope (globals, its type parameters, its
//    parameters, its lets): names, assignments, `return` as the last
//    statement only, calls (each call of a fn is an edge of the call graph,
//    kept with its call site). Its signature first: a shape parameter is
//    bound where it first stands alone as a dim, left to right, and a dim
//    expression may use only those bound before it.
// 4. Walk the program body the same way, also tracking which outputs are
//    assigned along the current path (`if` branches separately, merged after):
//    a second assignment, an assignment inside a `for`, or a read before the
//    assignment is an error.
// 5. Recursion: a depth-first walk of the call graph; every back edge is a
//    cycle, reported at its call site with the cycle named.
// 6. Outputs that no path assigns.
// 7. Only when there is no error: warnings for unused lets, inputs, params,
//    scalars, fn parameters and fns (a rejected program shows errors alone).
#include "frontend/check.h"

#include <algorithm>
#include <functional>
#include <map>
#include <set>
#include <string_view>

#include "lower/lower.h"
#include "ops/op_def.h"
#include "types.h"

namespace gdl {

namespace {

// Optimal string alignment distance (insertions, deletions, substitutions
// and swaps of two neighbours each cost 1), computed only as far as `limit`:
// limit + 1 when it is larger. Only the diagonal band |i - j| <= limit can
// hold a distance within the limit, so a row costs O(limit) and three rows
// (the swap looks two back) are kept: linear time and memory in the length.
size_t bounded_distance(std::string_view a, std::string_view b, size_t limit) {
  const size_t over = limit + 1;
  if ((a.size() > b.size() ? a.size() - b.size() : b.size() - a.size()) > limit) return over;
  std::vector<size_t> before(b.size() + 1, over), previous(b.size() + 1, over), row(b.size() + 1, over);
  for (size_t j = 0; j <= std::min(b.size(), limit); ++j) previous[j] = j;
  for (size_t i = 1; i <= a.size(); ++i) {
    const size_t lo = i > limit ? i - limit : 0, hi = std::min(b.size(), i + limit);
    if (lo > 0) row[lo - 1] = over;  // left of the band
    size_t best = over;
    for (size_t j = lo; j <= hi; ++j) {
      size_t d = j == 0 ? i : over;
      if (j > 0) {
        d = std::min({previous[j] + 1, row[j - 1] + 1, previous[j - 1] + (a[i - 1] == b[j - 1] ? 0 : 1)});
        if (i > 1 && j > 1 && a[i - 1] == b[j - 2] && a[i - 2] == b[j - 1]) d = std::min(d, before[j - 2] + 1);
      }
      row[j] = std::min(d, over);
      best = std::min(best, row[j]);
    }
    if (hi < b.size()) row[hi + 1] = over;  // right of the band
    if (best > limit) return over;  // every path from here costs more
    std::swap(before, previous);
    std::swap(previous, row);
  }
  return previous[b.size()];
}

}  // namespace

std::optional<std::string> closest_spelling(std::string_view name, const std::vector<std::string>& candidates) {
  const size_t limit = name.size() <= 3 ? 1 : 2;
  std::optional<std::string> best;
  size_t best_distance = limit + 1;
  for (const std::string& c : candidates) {
    if (c == name) continue;
    const size_t dist = bounded_distance(name, c, best_distance - 1);
    if (dist < best_distance && dist < name.size()) {
      best_distance = dist;
      best = c;
      if (dist == 1) break;  // nothing but an exact match is closer
    }
  }
  return best;
}

void collect_names(const ast::Expr& e, std::vector<const ast::NameExpr*>& out) {
  switch (e.kind) {
    case ast::ExprKind::kName: out.push_back(&e.as<ast::NameExpr>()); break;
    case ast::ExprKind::kUnary: collect_names(*e.as<ast::UnaryExpr>().operand, out); break;
    case ast::ExprKind::kBinary:
      collect_names(*e.as<ast::BinaryExpr>().lhs, out);
      collect_names(*e.as<ast::BinaryExpr>().rhs, out);
      break;
    case ast::ExprKind::kCall:
      for (const ast::Arg& a : e.as<ast::CallExpr>().args) collect_names(*a.value, out);
      break;
    case ast::ExprKind::kIndex: {
      const auto& ix = e.as<ast::IndexExpr>();
      collect_names(*ix.base, out);
      for (const ast::Subscript& s : ix.subscripts)
        for (const ast::ExprPtr* p : {&s.index, &s.start, &s.stop})
          if (*p) collect_names(**p, out);
      break;
    }
    case ast::ExprKind::kList:
      for (const ast::ExprPtr& el : e.as<ast::ListExpr>().elements) collect_names(*el, out);
      break;
    default: break;
  }
}

bool near_dtype_name(const std::string& name) {
  return !parse_dtype(name) && closest_spelling(name, {"f32", "f16", "bf16", "i32", "bool"}).has_value();
}

bool FnTypeParams::is_dim(const std::string& name) const {
  return std::find(dims.begin(), dims.end(), name) != dims.end();
}

bool FnTypeParams::is_dtype(const std::string& name) const {
  return std::find(dtypes.begin(), dtypes.end(), name) != dtypes.end();
}

bool FnTypeParams::mentioned_in(const ast::TypeExpr& t) const {
  if (is_dtype(t.dtype)) return true;
  std::vector<const ast::NameExpr*> names;
  for (const ast::ExprPtr& d : t.dims) collect_names(*d, names);
  return std::any_of(names.begin(), names.end(), [&](const ast::NameExpr* n) { return is_dim(n->name); });
}

std::set<std::string> global_names(const ast::Module& module) {
  std::set<std::string> globals;
  for (const ast::DimDecl& d : module.dims) globals.insert(d.name);
  for (const ast::ConstDecl& c : module.consts) globals.insert(c.name);
  for (const ast::TensorDecl& t : module.tensors) globals.insert(t.name);
  for (const ast::FnDecl& f : module.fns) globals.insert(f.name);
  return globals;
}

FnTypeParams fn_type_params(const ast::Module& module, const ast::FnDecl& fn) {
  return fn_type_params(global_names(module), fn);
}

FnTypeParams fn_type_params(const std::set<std::string>& globals, const ast::FnDecl& fn) {
  FnTypeParams out;
  for (const ast::FnParam& p : fn.params) {
    const std::string& name = p.type.dtype;
    if (!parse_dtype(name) && !near_dtype_name(name) && !globals.count(name) && !out.is_dtype(name))
      out.dtypes.push_back(name);
  }
  for (const ast::FnParam& p : fn.params)
    for (const ast::ExprPtr& d : p.type.dims) {
      if (d->kind != ast::ExprKind::kName) continue;
      const std::string& name = d->as<ast::NameExpr>().name;
      if (!globals.count(name) && !parse_dtype(name) && !out.is_dtype(name) && !out.is_dim(name))
        out.dims.push_back(name);
    }
  return out;
}

namespace {

std::string loc_text(SourceLoc loc) { return std::to_string(loc.line) + ":" + std::to_string(loc.col); }

bool before(SourceLoc a, SourceLoc b) { return a.line != b.line ? a.line < b.line : a.col < b.col; }

// Names that look like host I/O: a graph replay runs device work only.
bool is_host_effect(std::string_view name) {
  static const std::set<std::string_view> kNames = {"print",  "println", "printf", "puts",  "write",
                                                    "assert", "debug",   "dump",   "trace", "eprint"};
  return kNames.count(name) > 0;
}

enum class GlobalKind { kDim, kConst, kParam, kInput, kOutput, kScalar, kState, kFn, kGroup };

// "an input", "a param", ...
const char* kind_name(GlobalKind k) {
  switch (k) {
    case GlobalKind::kDim: return "a dim";
    case GlobalKind::kConst: return "a const";
    case GlobalKind::kParam: return "a param";
    case GlobalKind::kInput: return "an input";
    case GlobalKind::kOutput: return "an output";
    case GlobalKind::kScalar: return "a scalar";
    case GlobalKind::kState: return "a state";
    case GlobalKind::kFn: return "a fn";
    case GlobalKind::kGroup: return "a process group";
  }
  return "a name";
}

struct Global {
  GlobalKind kind;
  SourceLoc loc;
  bool used = false;
};

// kShapeParam, kDtypeParam: a generic fn's type parameters (fn_type_params).
enum class LocalKind { kLet, kFnParam, kLoopVar, kShapeParam, kDtypeParam };

struct Local {
  LocalKind kind;
  SourceLoc loc;
  bool used = false;
};

// One body being walked: a fn's, or the program's (fn == nullptr).
struct Body {
  const ast::FnDecl* fn = nullptr;
  std::vector<std::map<std::string, Local>> scopes;
  std::multimap<std::string, SourceLoc> all_lets;  // every let/loop variable of this body, any block
  int loop_depth = 0;
  int if_depth = 0;  // inside an `if` or `else` block
};

struct CallEdge {
  std::string callee;
  SourceLoc loc;
};

class Checker {
 public:
  Checker(const ast::Module& m, DiagnosticSink& d) : m_(m), diags_(d) {}

  void run() {
    collect_globals();
    check_declarations();
    for (const ast::FnDecl& fn : m_.fns) check_fn(fn);
    check_program_body();
    check_recursion();
    check_collectives_in_branches();
    for (const ast::TensorDecl& t : m_.tensors)
      if (t.role == ast::TensorRole::kOutput && !assigned_.count(t.name) && !globals_duplicate_.count(&t))
        diags_.error(t.name_loc, "output '" + t.name + "' is never assigned",
                     "assign it exactly once in the program body: " + t.name + " = ...;",
                     static_cast<uint32_t>(t.name.size()));
    if (!diags_.has_errors()) report_unused();
  }

 private:
  // ------------------------------------------------------------ declarations

  void declare(const std::string& name, SourceLoc loc, GlobalKind kind, const void* decl) {
    if (parse_dtype(name))  // still declared below, so that its uses raise nothing more
      diags_.error(loc, "'" + name + "' is a type name and cannot be declared", "pick another name",
                   static_cast<uint32_t>(name.size()));
    auto [it, inserted] = globals_.emplace(name, Global{kind, loc});
    if (!inserted) {
      diags_.error(loc,
                   "'" + name + "' is already declared (as " + kind_name(it->second.kind) + " at " +
                       loc_text(it->second.loc) + ")",
                   "every top-level name is declared once; rename one of them", static_cast<uint32_t>(name.size()));
      globals_duplicate_.insert(decl);
      return;
    }
    if (kind == GlobalKind::kFn && ops::find_callable(name))
      diags_.error(loc, "fn '" + name + "' has the name of a standard op", "pick another name",
                   static_cast<uint32_t>(name.size()));
  }

  void collect_globals() {
    for (const ast::DimDecl& d : m_.dims) declare(d.name, d.name_loc, GlobalKind::kDim, &d);
    for (const ast::ConstDecl& c : m_.consts) declare(c.name, c.name_loc, GlobalKind::kConst, &c);
    for (const ast::TensorDecl& t : m_.tensors) {
      GlobalKind kind = t.role == ast::TensorRole::kParam    ? GlobalKind::kParam
                        : t.role == ast::TensorRole::kInput  ? GlobalKind::kInput
                        : t.role == ast::TensorRole::kOutput ? GlobalKind::kOutput
                        : t.role == ast::TensorRole::kState  ? GlobalKind::kState
                                                             : GlobalKind::kScalar;
      declare(t.name, t.name_loc, kind, &t);
    }
    for (const ast::FnDecl& f : m_.fns) declare(f.name, f.name_loc, GlobalKind::kFn, &f);
    for (size_t i = 0; i < m_.groups.size(); ++i) {
      const ast::GroupDecl& g = m_.groups[i];
      declare(g.name, g.name_loc, GlobalKind::kGroup, &g);
      if (i > 0)
        diags_.error(g.loc, "a program runs over one process group; '" + m_.groups[0].name + "' is declared at " +
                                loc_text(m_.groups[0].loc),
                     "its collectives all run over that group", 5);
    }
  }

  void check_declarations() {
    Body decl_body;  // declarations see globals only
    body_ = &decl_body;
    for (const ast::DimDecl& d : m_.dims) {
      expr(*d.lo);
      expr(*d.hi);
      for (const ast::ExprPtr& b : d.buckets) expr(*b);
    }
    for (const ast::ConstDecl& c : m_.consts) expr(*c.value);
    for (const ast::GroupDecl& g : m_.groups) expr(*g.ranks);
    for (const ast::TensorDecl& t : m_.tensors) {
      type(t.type);
      if (t.init) expr(*t.init);
    }
    check_const_cycles();
    body_ = nullptr;
  }

  // A const may use consts declared anywhere, but not itself through a chain.
  void check_const_cycles() {
    std::map<std::string, const ast::ConstDecl*> consts;
    for (const ast::ConstDecl& c : m_.consts) consts.emplace(c.name, &c);
    std::map<std::string, int> state;  // 1 = on the path, 2 = done
    std::vector<std::string> path;
    std::function<void(const ast::ConstDecl&)> visit = [&](const ast::ConstDecl& c) {
      state[c.name] = 1;
      path.push_back(c.name);
      std::vector<const ast::NameExpr*> refs;
      collect_names(*c.value, refs);
      for (const ast::NameExpr* ref : refs) {
        auto it = consts.find(ref->name);
        if (it == consts.end()) continue;
        if (state[ref->name] == 1) {
          std::string cycle;
          auto start = std::find(path.begin(), path.end(), ref->name);
          for (auto p = start; p != path.end(); ++p) cycle += *p + " -> ";
          diags_.error(ref->loc, "const '" + ref->name + "' depends on itself: " + cycle + ref->name,
                       "give the const a value that does not use itself", static_cast<uint32_t>(ref->name.size()));
        } else if (state[ref->name] == 0 && path.size() < static_cast<size_t>(kMaxConstDepth)) {
          // Deeper chains are lowering's error (kMaxConstDepth); stopping here keeps the stack bounded.
          visit(*it->second);
        }
      }
      path.pop_back();
      state[c.name] = 2;
    };
    for (const ast::ConstDecl& c : m_.consts)
      if (state[c.name] == 0) visit(c);
  }

  void type(const ast::TypeExpr& t) {
    for (const ast::ExprPtr& d : t.dims) expr(*d);
  }

  // -------------------------------------------------------------- fn bodies

  void check_fn(const ast::FnDecl& fn) {
    Body body;
    body.fn = &fn;
    body_ = &body;
    collect_lets(fn.body, body.all_lets);
    // One scope: the type parameters, the parameters, the body's top-level lets.
    body.scopes.emplace_back();
    signature(fn);
    for (const ast::FnParam& p : fn.params) {
      if (parse_dtype(p.name)) {
        diags_.error(p.loc, "'" + p.name + "' is a type name and cannot name a parameter", "pick another name",
                     static_cast<uint32_t>(p.name.size()));
        continue;
      }
      auto [it, inserted] = body.scopes.back().emplace(p.name, Local{LocalKind::kFnParam, p.loc});
      if (inserted) continue;
      if (it->second.kind == LocalKind::kFnParam)
        diags_.error(p.loc, "parameter '" + p.name + "' appears twice in fn '" + fn.name + "'",
                     "give each parameter its own name", static_cast<uint32_t>(p.name.size()));
      else
        diags_.error(p.loc,
                     "parameter '" + p.name + "' of fn '" + fn.name + "' has the name of its " +
                         (it->second.kind == LocalKind::kShapeParam ? "shape" : "dtype") + " parameter at " +
                         loc_text(it->second.loc),
                     "rename one of them: a type parameter stands for a dim or a dtype, not a value",
                     static_cast<uint32_t>(p.name.size()));
    }
    misplaced_return_ = false;
    block(fn.body, /*fn_top=*/true);
    bool ends_with_return = !fn.body.empty() && fn.body.back()->kind == ast::StmtKind::kReturn;
    if (!ends_with_return && !misplaced_return_)
      diags_.error(fn.name_loc, "fn '" + fn.name + "' does not return a value",
                   "end its body with 'return EXPR;': a fn is inlined where it is called and must give a value",
                   static_cast<uint32_t>(fn.name.size()));
    pop_scope();
    body_ = nullptr;
  }

  // The parameter types, left to right: a shape parameter is bound where it
  // first stands alone as a dim and may be used in dim expressions after
  // that; the result type sees every one. Dtype parameters are known from
  // the start (no dim may use one).
  void signature(const ast::FnDecl& fn) {
    const FnTypeParams generics = fn_type_params(global_names_, fn);
    for (const ast::FnParam& p : fn.params)
      if (generics.is_dtype(p.type.dtype) && !find_local(p.type.dtype))
        body_->scopes.back().emplace(p.type.dtype, Local{LocalKind::kDtypeParam, p.type.dtype_loc});
    signature_ = {&fn, &generics, nullptr};
    for (const ast::FnParam& p : fn.params) {
      const std::string& dtype = p.type.dtype;
      if (auto g = globals_.find(dtype); g != globals_.end() && !parse_dtype(dtype) && !near_dtype_name(dtype))
        diags_.error(p.type.dtype_loc,
                     "'" + dtype + "' is declared as " + kind_name(g->second.kind) + " at " + loc_text(g->second.loc) +
                         " and cannot be the dtype parameter of '" + p.name + "'",
                     "a dtype parameter needs a name that is not declared at top level, such as E",
                     static_cast<uint32_t>(dtype.size()));
      signature_.param = &p;
      for (const ast::ExprPtr& d : p.type.dims) {
        if (d->kind == ast::ExprKind::kName) {
          const auto& n = d->as<ast::NameExpr>();
          if (generics.is_dim(n.name) && !find_local(n.name)) {
            body_->scopes.back().emplace(n.name, Local{LocalKind::kShapeParam, n.loc});
            continue;
          }
        }
        expr(*d);
      }
    }
    signature_.param = nullptr;
    if (fn.result) type(*fn.result);
    signature_ = {};
  }

  // Which parameter binds shape parameter `name` (its first bare dim), or null.
  const ast::FnParam* binder(const std::string& name) const {
    for (const ast::FnParam& p : signature_.fn->params)
      for (const ast::ExprPtr& d : p.type.dims)
        if (d->kind == ast::ExprKind::kName && d->as<ast::NameExpr>().name == name) return &p;
    return nullptr;
  }

  void check_program_body() {
    Body body;
    body_ = &body;
    collect_lets(m_.body, body.all_lets);
    for (const auto& [name, loc] : body.all_lets) program_lets_.insert(name);
    body.scopes.emplace_back();
    block(m_.body, /*fn_top=*/false);
    pop_scope();
    body_ = nullptr;
  }

  static void collect_lets(const ast::Block& b, std::multimap<std::string, SourceLoc>& out) {
    for (const ast::StmtPtr& s : b) {
      switch (s->kind) {
        case ast::StmtKind::kLet: {
          const auto& let = s->as<ast::LetStmt>();
          out.emplace(let.name, let.name_loc);
          break;
        }
        case ast::StmtKind::kFor: {
          const auto& f = s->as<ast::ForStmt>();
          out.emplace(f.var, f.var_loc);
          collect_lets(f.body, out);
          break;
        }
        case ast::StmtKind::kIf: {
          const auto& i = s->as<ast::IfStmt>();
          collect_lets(i.then_body, out);
          collect_lets(i.else_body, out);
          break;
        }
        default: break;
      }
    }
  }

  void pop_scope() {
    for (const auto& [name, local] : body_->scopes.back()) {
      if (local.used || name.starts_with("_")) continue;
      if (local.kind == LocalKind::kLet)
        unused_.push_back({local.loc, "'" + name + "' is never used",
                           "remove the let, or start its name with _ to keep it", name.size()});
      else if (local.kind == LocalKind::kFnParam)
        unused_.push_back({local.loc, "parameter '" + name + "' of fn '" + body_->fn->name + "' is never used",
                           "remove the parameter, or start its name with _", name.size()});
    }
    body_->scopes.pop_back();
  }

  // --------------------------------------------------------------- statements

  void block(const ast::Block& b, bool fn_top) {
    for (size_t i = 0; i < b.size(); ++i) statement(*b[i], fn_top && i + 1 == b.size());
  }

  void scoped_block(const ast::Block& b) {
    body_->scopes.emplace_back();
    block(b, false);
    pop_scope();
  }

  void statement(const ast::Stmt& s, bool fn_tail) {
    switch (s.kind) {
      case ast::StmtKind::kLet: {
        const auto& let = s.as<ast::LetStmt>();
        if (let.type) type(*let.type);
        expr(*let.value);
        define_local(let.name, let.name_loc, LocalKind::kLet);
        break;
      }
      case ast::StmtKind::kAssign: assign(s.as<ast::AssignStmt>()); break;
      case ast::StmtKind::kFor: {
        const auto& f = s.as<ast::ForStmt>();
        expr(*f.start);
        expr(*f.stop);
        body_->scopes.emplace_back();
        define_local(f.var, f.var_loc, LocalKind::kLoopVar);
        ++body_->loop_depth;
        block(f.body, false);
        --body_->loop_depth;
        pop_scope();
        break;
      }
      case ast::StmtKind::kIf: {
        const auto& i = s.as<ast::IfStmt>();
        expr(*i.cond);
        // Each branch starts from the same assignment state; after the if an
        // output counts as assigned when either branch may assign it.
        auto entry = assigned_;
        ++body_->if_depth;
        scoped_block(i.then_body);
        auto after_then = std::move(assigned_);
        assigned_ = entry;
        scoped_block(i.else_body);
        --body_->if_depth;
        for (auto& kv : after_then) assigned_.insert(kv);
        break;
      }
      case ast::StmtKind::kWhile:
        diags_.error(s.loc, "while loops are not allowed: a CUDA graph replays a fixed set of tasks",
                     "loops must run over a compile-time range: for i in 0..N { ... }", 5);
        break;
      case ast::StmtKind::kReturn: {
        const auto& r = s.as<ast::ReturnStmt>();
        if (!body_->fn) {
          diags_.error(s.loc, "return outside a fn", "the program body gives its results by assigning outputs", 6);
        } else if (!fn_tail) {
          misplaced_return_ = true;
          diags_.error(s.loc, "return must be the last statement of fn '" + body_->fn->name + "'",
                       "compute the value into a let (use where(cond, a, b) to choose) and return it at the end", 6);
        }
        expr(*r.value);
        break;
      }
      case ast::StmtKind::kExpr: expression_statement(s.as<ast::ExprStmt>()); break;
    }
  }

  void expression_statement(const ast::ExprStmt& s) {
    const ast::Expr& e = *s.expr;
    if (e.kind == ast::ExprKind::kCall && is_host_effect(e.as<ast::CallExpr>().callee)) {
      const auto& call = e.as<ast::CallExpr>();
      diags_.error(s.loc, call.callee + "(...) is a host side effect that a CUDA graph replay cannot perform",
                   "a graph replays a fixed set of device tasks; make the value an output and read it after the run",
                   static_cast<uint32_t>(call.callee.size()));
      for (const ast::Arg& a : call.args) expr(*a.value);
      return;
    }
    if (e.kind == ast::ExprKind::kCall) {
      const auto& call = e.as<ast::CallExpr>();
      diags_.error(s.loc, "the value of " + call.callee + "(...) is not used: a call for effect does nothing here",
                   "calls have no side effects in a graph; bind the value with let or assign it to an output",
                   static_cast<uint32_t>(call.callee.size()));
    } else {
      diags_.error(s.loc, "this expression statement has no effect",
                   "bind the value with let or assign it to an output");
    }
    expr(e);
  }

  void define_local(const std::string& name, SourceLoc loc, LocalKind kind) {
    auto len = static_cast<uint32_t>(name.size());
    if (parse_dtype(name)) {
      diags_.error(loc, "'" + name + "' is a type name and cannot name a value", "pick another name", len);
      return;
    }
    for (const auto& scope : body_->scopes) {
      auto it = scope.find(name);
      if (it == scope.end()) continue;
      diags_.error(loc, "'" + name + "' is already defined at " + loc_text(it->second.loc),
                   kind == LocalKind::kLet ? "re-bind it with '" + name + " = ...;' (no let), or pick another name"
                                           : "pick another name for the loop variable",
                   len);
      return;
    }
    if (auto g = globals_.find(name); g != globals_.end()) {
      diags_.error(
          loc, "'" + name + "' is already declared as " + kind_name(g->second.kind) + " at " + loc_text(g->second.loc),
          "pick another name", len);
      return;
    }
    body_->scopes.back().emplace(name, Local{kind, loc});
  }

  Local* find_local(const std::string& name) {
    for (auto scope = body_->scopes.rbegin(); scope != body_->scopes.rend(); ++scope)
      if (auto it = scope->find(name); it != scope->end()) return &it->second;
    return nullptr;
  }

  void assign(const ast::AssignStmt& a) {
    if (a.target) expr(*a.target);  // a region assignment reads the rest of the value
    expr(*a.value);
    auto len = static_cast<uint32_t>(a.name.size());
    if (a.target) {
      Local* local = find_local(a.name);
      auto g = globals_.find(a.name);
      const bool state = !local && g != globals_.end() && g->second.kind == GlobalKind::kState;
      if (local && local->kind == LocalKind::kLoopVar)
        diags_.error(a.name_loc, "cannot assign to loop variable '" + a.name + "'",
                     "it holds the iteration's index; bind a new value with let", len);
      else if (!local && !state && g != globals_.end())
        diags_.error(a.name_loc, "cannot assign a region of " + std::string(kind_name(g->second.kind)) + " '" + a.name + "'",
                     "only a state or a let can have a region replaced: let y = " + a.name + "; y[...] = v;", len);
      if (!state) return;
    }
    if (Local* local = find_local(a.name)) {
      if (local->kind == LocalKind::kLoopVar)
        diags_.error(a.name_loc, "cannot assign to loop variable '" + a.name + "'",
                     "it holds the iteration's index; bind a new value with let", len);
      else if (local->kind == LocalKind::kShapeParam || local->kind == LocalKind::kDtypeParam)
        diags_.error(a.name_loc, "cannot assign to type parameter '" + a.name + "' of fn '" + body_->fn->name + "'",
                     "each call binds it from the arguments; bind a new value with let", len);
      return;
    }
    auto g = globals_.find(a.name);
    if (g == globals_.end()) {
      unknown_name(a.name, a.name_loc, /*assigning=*/true);
      return;
    }
    switch (g->second.kind) {
      case GlobalKind::kOutput: assign_output(a); return;
      case GlobalKind::kState:
        if (body_->fn)
          diags_.error(a.name_loc, "fn '" + body_->fn->name + "' cannot assign state '" + a.name + "'",
                       "return the new value and assign the state in the program body", len);
        return;
      case GlobalKind::kInput:
        diags_.error(a.name_loc, "cannot assign to input '" + a.name + "': inputs are bound by copy before each run",
                     "bind the new value to a name of its own: let " + a.name + "2 = ...;", len);
        return;
      case GlobalKind::kParam:
        diags_.error(a.name_loc, "cannot assign to param '" + a.name + "': params are bound once by the host",
                     "bind the new value to a name of its own: let " + a.name + "2 = ...;", len);
        return;
      case GlobalKind::kScalar:
        diags_.error(a.name_loc,
                     "cannot assign to scalar '" + a.name + "': run-time scalars are set by the host between runs",
                     "bind the new value to a name of its own: let " + a.name + "2 = ...;", len);
        return;
      case GlobalKind::kConst:
        diags_.error(a.name_loc, "cannot assign to const '" + a.name + "'",
                     "consts are fixed at compile time; use let for a value that changes", len);
        return;
      case GlobalKind::kDim:
        diags_.error(a.name_loc, "cannot assign to dim '" + a.name + "'",
                     "a dim's value comes from the shapes bound at run time", len);
        return;
      case GlobalKind::kFn:
        diags_.error(a.name_loc, "cannot assign to fn '" + a.name + "'", "bind the value with let", len);
        return;
      case GlobalKind::kGroup:
        diags_.error(a.name_loc, "cannot assign to process group '" + a.name + "'", "bind the value with let", len);
        return;
    }
  }

  void assign_output(const ast::AssignStmt& a) {
    auto len = static_cast<uint32_t>(a.name.size());
    if (body_->fn) {
      diags_.error(a.name_loc, "fn '" + body_->fn->name + "' cannot assign output '" + a.name + "'",
                   "return the value and assign the output in the program body", len);
      return;
    }
    if (body_->loop_depth > 0) {
      diags_.error(a.name_loc,
                   "output '" + a.name + "' is assigned inside a for loop: it would be assigned once per iteration",
                   "accumulate the value in a let inside the loop and assign the output once after it", len);
      assigned_.emplace(a.name, a.name_loc);
      return;
    }
    auto [it, inserted] = assigned_.emplace(a.name, a.name_loc);
    if (!inserted)
      diags_.error(a.name_loc, "output '" + a.name + "' is assigned twice (first at " + loc_text(it->second) + ")",
                   "an output is assigned exactly once; build its value with let and assign it once", len);
  }

  // -------------------------------------------------------------- expressions

  void expr(const ast::Expr& e) {
    switch (e.kind) {
      case ast::ExprKind::kName: use_name(e.as<ast::NameExpr>()); break;
      case ast::ExprKind::kUnary: expr(*e.as<ast::UnaryExpr>().operand); break;
      case ast::ExprKind::kBinary:
        expr(*e.as<ast::BinaryExpr>().lhs);
        expr(*e.as<ast::BinaryExpr>().rhs);
        break;
      case ast::ExprKind::kCall: call(e.as<ast::CallExpr>()); break;
      case ast::ExprKind::kIndex: {
        const auto& ix = e.as<ast::IndexExpr>();
        expr(*ix.base);
        for (const ast::Subscript& s : ix.subscripts)
          for (const ast::ExprPtr* p : {&s.index, &s.start, &s.stop})
            if (*p) expr(**p);
        break;
      }
      case ast::ExprKind::kList:
        for (const ast::ExprPtr& el : e.as<ast::ListExpr>().elements) expr(*el);
        break;
      default: break;
    }
  }

  void use_name(const ast::NameExpr& n) {
    auto len = static_cast<uint32_t>(n.name.size());
    if (Local* local = find_local(n.name)) {
      local->used = true;
      if (local->kind == LocalKind::kDtypeParam)
        diags_.error(n.loc, "'" + n.name + "' is a dtype parameter of fn '" + body_->fn->name + "', not a value",
                     "write it where a type goes: cast(x, " + n.name + "), or a type such as " + n.name + "[N]", len);
      return;
    }
    auto g = globals_.find(n.name);
    if (g == globals_.end()) {
      if (parse_dtype(n.name))
        diags_.error(n.loc, "'" + n.name + "' is a type, not a value",
                     "types are written in declarations and in cast(x, " + n.name + ")", len);
      else
        unknown_name(n.name, n.loc, /*assigning=*/false);
      return;
    }
    g->second.used = true;
    if (g->second.kind == GlobalKind::kFn) {
      diags_.error(n.loc, "fn '" + n.name + "' is used as a value", "call it: " + n.name + "(...)", len);
    } else if (g->second.kind == GlobalKind::kGroup) {
      diags_.error(n.loc, "process group '" + n.name + "' is used as a value",
                   "its collectives name it implicitly: all_reduce(x), all_gather(x, axis = 0)", len);
    } else if (g->second.kind == GlobalKind::kState && body_->fn) {
      diags_.error(n.loc, "state '" + n.name + "' cannot be read inside fn '" + body_->fn->name + "'",
                   "pass its value as an argument: a fn computes from its arguments and params", len);
    } else if (g->second.kind == GlobalKind::kState && body_->scopes.empty()) {
      diags_.error(n.loc, "state '" + n.name + "' cannot be used in a declaration",
                   "declarations use consts and dims only", len);
    } else if (g->second.kind == GlobalKind::kOutput) {
      if (body_->fn)
        diags_.error(n.loc, "output '" + n.name + "' cannot be read inside fn '" + body_->fn->name + "'",
                     "pass the value as an argument", len);
      else if (body_->scopes.empty())
        diags_.error(n.loc, "output '" + n.name + "' cannot be used in a declaration",
                     "declarations use consts and dims only", len);
      else if (!assigned_.count(n.name))
        diags_.error(n.loc, "output '" + n.name + "' is read before it is assigned",
                     "assign the output first, or use the value it will be assigned from", len);
    }
  }

  void unknown_name(const std::string& name, SourceLoc loc, bool assigning) {
    auto len = static_cast<uint32_t>(name.size());
    // A let of this body that is not visible here: later, or in a block that ended.
    auto [first, last] = body_->all_lets.equal_range(name);
    for (auto it = first; it != last; ++it) {
      if (before(loc, it->second)) {
        diags_.error(loc, "'" + name + "' is used before its definition",
                     "it is defined at " + loc_text(it->second) + "; move that let above this use", len);
        return;
      }
    }
    if (first != last) {
      diags_.error(loc,
                   "'" + name + "' is not visible here: its definition at " + loc_text(first->second) +
                       " is inside a block that has ended",
                   "declare it with let before the block and re-bind it inside", len);
      return;
    }
    if (signature_.param && signature_.generics->is_dim(name)) {
      const ast::FnParam& here = *signature_.param;
      const ast::FnParam& later = *binder(name);
      diags_.error(loc,
                   "shape parameter '" + name + "' is used in the type of parameter '" + here.name + "' of fn '" +
                       signature_.fn->name + "' before a parameter binds it",
                   &later == &here ? "shape parameters bind left to right, where they first stand alone as a dim: "
                                     "write the dim " + name + " before the expressions that use it"
                                   : "shape parameters bind left to right, where they first stand alone as a dim: " +
                                         name + " is bound later, by parameter '" + later.name + "'; move '" +
                                         later.name + "' before '" + here.name + "'",
                   len);
      return;
    }
    if (body_->fn && program_lets_.count(name)) {
      diags_.error(loc, "fn '" + body_->fn->name + "' cannot see '" + name + "', a let of the program body",
                   "pass it to the fn as an argument", len);
      return;
    }
    std::string message = (assigning ? "assignment to undeclared name '" : "unknown name '") + name + "'";
    if (suggestions_left_ > 0) {
      --suggestions_left_;
      std::vector<std::string> candidates;
      for (const auto& scope : body_->scopes)
        for (const auto& [local_name, local] : scope) candidates.push_back(local_name);
      for (const auto& [global_name, global] : globals_)
        if (global.kind != GlobalKind::kFn) candidates.push_back(global_name);
      if (auto near = closest_spelling(name, candidates)) message += "; did you mean '" + *near + "'?";
    }
    std::string hint = assigning ? "declare it first: let " + name + " = ...;"
                                 : "declare it with let, const, input, param or scalar before using it";
    if (signature_.param)
      hint = "declare it with const or dim, or make it a shape parameter: write it alone as a dim of a parameter "
             "before this use (a: f32[" + name + "])";
    else if (signature_.fn)
      hint = "a fn's result type uses consts, dims and the shape parameters its parameter types bind";
    diags_.error(loc, message, hint, len);
  }

  void call(const ast::CallExpr& c) {
    auto len = static_cast<uint32_t>(c.callee.size());
    const ops::OpDef* op = nullptr;
    if (auto g = globals_.find(c.callee); g != globals_.end()) {
      if (g->second.kind == GlobalKind::kFn) {
        g->second.used = true;
        if (body_->fn) calls_[body_->fn->name].push_back({c.callee, c.loc});
        if (body_->if_depth > 0) branch_calls_.push_back({c.callee, c.loc});
      } else {
        diags_.error(c.loc, "'" + c.callee + "' is " + kind_name(g->second.kind) + ", not a fn",
                     "only fns and standard ops can be called", len);
      }
    } else if ((op = ops::find_callable(c.callee))) {
      // a standard op: the lowering checks its arguments
      if (ops::fusion_class(op->op) == ops::FusionClass::kCollective) {
        if (body_->fn) collective_fns_.insert(body_->fn->name);
        if (body_->if_depth > 0)
          diags_.error(c.loc, c.callee + " inside an if: every rank must run the same collectives in the same order",
                       "compute it before the if (a group of one rank makes it a copy) and choose between values "
                       "with where(cond, a, b)",
                       len);
      }
    } else if (is_host_effect(c.callee)) {
      diags_.error(c.loc, c.callee + "(...) is a host side effect that a CUDA graph replay cannot perform",
                   "make the value an output and read it after the run", len);
    } else {
      std::string message = "unknown function '" + c.callee + "'";
      if (suggestions_left_ > 0) {
        --suggestions_left_;
        std::vector<std::string> candidates = ops::callable_names();
        for (const auto& [name, global] : globals_)
          if (global.kind == GlobalKind::kFn) candidates.push_back(name);
        if (auto near = closest_spelling(c.callee, candidates)) message += "; did you mean '" + *near + "'?";
      }
      diags_.error(c.loc, message, "declare it with fn, or use a standard op from docs/language.md", len);
    }
    for (size_t i = 0; i < c.args.size(); ++i) {
      const ast::Arg& a = c.args[i];
      // cast(x, f16), one_hot(ids, n, dtype = f16): a `dtype` parameter's
      // argument is a type name, checked by the lowering.
      const bool dtype_parameter =
          op && (a.keyword == "dtype" ||
                 (a.keyword.empty() && i < op->params.size() && std::string_view(op->params[i]) == "dtype"));
      // all_reduce(x, op = max): a collective's `op` is a reduction's name, checked by the lowering.
      const bool op_parameter =
          op && ops::fusion_class(op->op) == ops::FusionClass::kCollective &&
          (a.keyword == "op" || (a.keyword.empty() && i < op->params.size() && std::string_view(op->params[i]) == "op"));
      const bool name_argument = (dtype_parameter || op_parameter) && a.value->kind == ast::ExprKind::kName;
      if (!name_argument) expr(*a.value);
    }
  }

  // ---------------------------------------------------------------- recursion

  // A fn that runs a collective, itself or through the fns it calls, may
  // not be called inside an if either (a direct call was reported already).
  void check_collectives_in_branches() {
    std::set<std::string> runs = collective_fns_;
    for (bool grew = true; grew;) {
      grew = false;
      for (const auto& [fn, edges] : calls_)
        if (!runs.count(fn))
          for (const CallEdge& e : edges)
            if (runs.count(e.callee)) {
              runs.insert(fn);
              grew = true;
              break;
            }
    }
    for (const CallEdge& e : branch_calls_)
      if (runs.count(e.callee))
        diags_.error(e.loc, "fn '" + e.callee + "' runs a collective and is called inside an if: every rank must run the "
                                                  "same collectives in the same order",
                     "call it before the if and choose between values with where(cond, a, b)",
                     static_cast<uint32_t>(e.callee.size()));
  }

  void check_recursion() {
    std::map<std::string, int> state;  // 1 = on the path, 2 = done
    for (const ast::FnDecl& root : m_.fns) {
      if (state[root.name] != 0) continue;
      // Iterative depth-first walk: the path is the chain of active calls.
      struct Frame {
        std::string fn;
        size_t next_edge = 0;
      };
      std::vector<Frame> path{{root.name}};
      state[root.name] = 1;
      while (!path.empty()) {
        Frame& top = path.back();
        const std::vector<CallEdge>& edges = calls_[top.fn];
        if (top.next_edge == edges.size()) {
          state[top.fn] = 2;
          path.pop_back();
          continue;
        }
        const CallEdge& edge = edges[top.next_edge++];
        int& s = state[edge.callee];
        if (s == 1) {
          std::string cycle;
          auto start = std::find_if(path.begin(), path.end(), [&](const Frame& f) { return f.fn == edge.callee; });
          for (auto f = start; f != path.end(); ++f) cycle += f->fn + " -> ";
          cycle += edge.callee;
          diags_.error(edge.loc, "recursive call: " + cycle,
                       "fns are inlined at every call, so recursion would never end; "
                       "repeat work with a for loop over a compile-time range",
                       static_cast<uint32_t>(edge.callee.size()));
        } else if (s == 0) {
          s = 1;
          path.push_back({edge.callee});
        }
      }
    }
  }

  // ------------------------------------------------------------------ unused

  void report_unused() {
    for (const ast::TensorDecl& t : m_.tensors) {
      auto g = globals_.find(t.name);
      if (g == globals_.end() || g->second.used || t.name.starts_with("_")) continue;
      auto len = t.name.size();
      switch (t.role) {
        case ast::TensorRole::kInput:
          unused_.push_back({t.name_loc, "input '" + t.name + "' is never used",
                             "remove it: an unused input is still copied in before every run", len});
          break;
        case ast::TensorRole::kParam:
          unused_.push_back({t.name_loc, "param '" + t.name + "' is never used",
                             "remove it: an unused param still takes device memory", len});
          break;
        case ast::TensorRole::kScalar:
          unused_.push_back({t.name_loc, "scalar '" + t.name + "' is never used", "remove it", len});
          break;
        case ast::TensorRole::kState:
          unused_.push_back({t.name_loc, "state '" + t.name + "' is never used",
                             "remove it: an unused state still takes device memory in every session", len});
          break;
        case ast::TensorRole::kOutput: break;
      }
    }
    for (const ast::FnDecl& f : m_.fns) {
      auto g = globals_.find(f.name);
      if (g != globals_.end() && !g->second.used && !f.name.starts_with("_"))
        unused_.push_back({f.name_loc, "fn '" + f.name + "' is never called", "remove it, or call it", f.name.size()});
    }
    for (const Unused& u : unused_) diags_.warning(u.loc, u.message, u.hint, static_cast<uint32_t>(u.length));
  }

  struct Unused {
    SourceLoc loc;
    std::string message, hint;
    size_t length;
  };

  const ast::Module& m_;
  DiagnosticSink& diags_;
  std::map<std::string, Global> globals_;
  std::set<const void*> globals_duplicate_;  // declarations rejected as duplicates
  std::set<std::string> program_lets_;
  std::map<std::string, std::vector<CallEdge>> calls_;
  std::set<std::string> collective_fns_;  // fns that call a collective themselves
  std::vector<CallEdge> branch_calls_;    // fn calls inside an if or else block, any body
  std::map<std::string, SourceLoc> assigned_;  // outputs assigned on the current path
  std::vector<Unused> unused_;
  Body* body_ = nullptr;
  bool misplaced_return_ = false;
  // "Did you mean" searches left: each scans every declared name, so a file
  // of many unknown names among many declarations gets the first ones only.
  int suggestions_left_ = 100;
  const std::set<std::string> global_names_ = global_names(m_);  // computed once, not per fn
  // While a fn's signature is walked: the fn, its type parameters, and the
  // parameter whose type is being read (null for the result type).
  struct Signature {
    const ast::FnDecl* fn = nullptr;
    const FnTypeParams* generics = nullptr;
    const ast::FnParam* param = nullptr;
  } signature_;
};

}  // namespace

void check_module(const ast::Module& module, DiagnosticSink& diags) { Checker(module, diags).run(); }

}  // namespace gdl
