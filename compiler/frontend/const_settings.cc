#include "frontend/const_settings.h"

#include <charconv>
#include <cmath>
#include <functional>
#include <set>

#include "types.h"

namespace gdl {
namespace {

bool is_dtype_name(const std::string& s) { return parse_dtype(s).has_value(); }

// The setting's text as a literal at `loc`; null when it is none of the forms.
ast::ExprPtr literal_of(const std::string& text, SourceLoc loc) {
  if (text == "true" || text == "false") return std::make_unique<ast::BoolLit>(loc, text == "true");
  if (is_dtype_name(text)) return std::make_unique<ast::NameExpr>(loc, text);
  const char* first = text.data();
  const char* last = text.data() + text.size();
  int64_t i = 0;
  if (auto [end, ec] = std::from_chars(first, last, i); end == last && ec == std::errc())
    return std::make_unique<ast::IntLit>(loc, i);
  else if (end == last && ec == std::errc::result_out_of_range)
    return nullptr;  // an integer past 64 bits, not a float
  double d = 0;
  if (auto [end, ec] = std::from_chars(first, last, d); ec == std::errc() && end == last && std::isfinite(d))
    return std::make_unique<ast::FloatLit>(loc, d);
  return nullptr;
}

// Renames dtype aliases wherever a name may stand for a type.
class AliasSubstitution {
 public:
  explicit AliasSubstitution(const std::map<std::string, std::string>& aliases) : aliases_(aliases) {}

  void type(ast::TypeExpr& t) {
    if (auto it = aliases_.find(t.dtype); it != aliases_.end()) t.dtype = it->second;
    for (ast::ExprPtr& d : t.dims) expr(*d);
  }

  void expr(ast::Expr& e) {
    switch (e.kind) {
      case ast::ExprKind::kName: {
        auto& n = e.as<ast::NameExpr>();
        if (auto it = aliases_.find(n.name); it != aliases_.end()) n.name = it->second;
        break;
      }
      case ast::ExprKind::kUnary: expr(*e.as<ast::UnaryExpr>().operand); break;
      case ast::ExprKind::kBinary:
        expr(*e.as<ast::BinaryExpr>().lhs);
        expr(*e.as<ast::BinaryExpr>().rhs);
        break;
      case ast::ExprKind::kCall:
        for (ast::Arg& a : e.as<ast::CallExpr>().args) expr(*a.value);
        break;
      case ast::ExprKind::kIndex: {
        auto& ix = e.as<ast::IndexExpr>();
        expr(*ix.base);
        for (ast::Subscript& s : ix.subscripts)
          for (ast::ExprPtr* p : {&s.index, &s.start, &s.stop})
            if (*p) expr(**p);
        break;
      }
      case ast::ExprKind::kList:
        for (ast::ExprPtr& el : e.as<ast::ListExpr>().elements) expr(*el);
        break;
      default: break;
    }
  }

  void block(ast::Block& b) {
    for (ast::StmtPtr& s : b) stmt(*s);
  }

  void stmt(ast::Stmt& s) {
    switch (s.kind) {
      case ast::StmtKind::kLet: {
        auto& let = s.as<ast::LetStmt>();
        if (let.type) type(*let.type);
        expr(*let.value);
        break;
      }
      case ast::StmtKind::kAssign: {
        auto& a = s.as<ast::AssignStmt>();
        if (a.target) expr(*a.target);
        expr(*a.value);
        break;
      }
      case ast::StmtKind::kFor: {
        auto& f = s.as<ast::ForStmt>();
        expr(*f.start);
        expr(*f.stop);
        block(f.body);
        break;
      }
      case ast::StmtKind::kIf: {
        auto& i = s.as<ast::IfStmt>();
        expr(*i.cond);
        block(i.then_body);
        block(i.else_body);
        break;
      }
      case ast::StmtKind::kWhile: {
        auto& w = s.as<ast::WhileStmt>();
        expr(*w.cond);
        block(w.body);
        break;
      }
      case ast::StmtKind::kReturn:
        if (s.as<ast::ReturnStmt>().value) expr(*s.as<ast::ReturnStmt>().value);
        break;
      case ast::StmtKind::kExpr: expr(*s.as<ast::ExprStmt>().expr); break;
    }
  }

  void module(ast::Module& m) {
    for (ast::DimDecl& d : m.dims) {
      for (ast::ExprPtr* p : {&d.lo, &d.hi})
        if (*p) expr(**p);
      for (ast::ExprPtr& b : d.buckets) expr(*b);
    }
    for (ast::ConstDecl& c : m.consts) expr(*c.value);
    for (ast::TensorDecl& t : m.tensors) {
      type(t.type);
      if (t.init) expr(*t.init);
    }
    for (ast::FnDecl& f : m.fns) {
      for (ast::FnParam& p : f.params) type(p.type);
      if (f.result) type(*f.result);
      block(f.body);
    }
    block(m.body);
  }

 private:
  const std::map<std::string, std::string>& aliases_;
};

}  // namespace

void apply_const_settings(ast::Module& module, const std::map<std::string, std::string>& settings,
                          DiagnosticSink& diags) {
  for (const auto& [name, text] : settings) {
    ast::ConstDecl* target = nullptr;
    for (ast::ConstDecl& c : module.consts)
      if (c.name == name) target = &c;
    if (!target) {
      diags.error(module.program_loc, "-D " + name + "=" + text + ": the program declares no const named '" + name + "'",
                  "-D sets the value of a `const` the program declares");
      continue;
    }
    ast::ExprPtr value = literal_of(text, target->value->loc);
    if (!value) {
      diags.error(target->value->loc, "-D " + name + "=" + text + ": '" + text +
                                          "' is not an integer, a finite float, true or false, or a dtype",
                  "write e.g. -D " + name + "=2048, -D " + name + "=1e-5 or -D " + name + "=bf16");
      continue;
    }
    target->value = std::move(value);
  }

  // A const whose value names a dtype (directly or through another such
  // const) is an alias of that dtype.
  std::map<std::string, std::string> aliases;
  for (bool grew = true; grew;) {
    grew = false;
    for (const ast::ConstDecl& c : module.consts) {
      if (aliases.count(c.name) || c.value->kind != ast::ExprKind::kName) continue;
      const std::string& named = c.value->as<ast::NameExpr>().name;
      if (is_dtype_name(named)) aliases[c.name] = named, grew = true;
      else if (auto it = aliases.find(named); it != aliases.end()) aliases[c.name] = it->second, grew = true;
    }
  }
  if (aliases.empty()) return;
  // The alias replaces its name everywhere, so nothing may reuse the name.
  std::function<void(const ast::Block&)> refuse_reuse = [&](const ast::Block& block) {
    for (const ast::StmtPtr& st : block) {
      std::string name;
      SourceLoc at;
      if (st->kind == ast::StmtKind::kLet) name = st->as<ast::LetStmt>().name, at = st->as<ast::LetStmt>().name_loc;
      if (st->kind == ast::StmtKind::kFor) name = st->as<ast::ForStmt>().var, at = st->as<ast::ForStmt>().var_loc;
      if (aliases.count(name))
        diags.error(at, "'" + name + "' is a dtype const; it cannot also name a value", "give the value another name");
      if (st->kind == ast::StmtKind::kFor) refuse_reuse(st->as<ast::ForStmt>().body);
      if (st->kind == ast::StmtKind::kIf) {
        refuse_reuse(st->as<ast::IfStmt>().then_body);
        refuse_reuse(st->as<ast::IfStmt>().else_body);
      }
    }
  };
  refuse_reuse(module.body);
  for (const ast::FnDecl& f : module.fns) {
    for (const ast::FnParam& p : f.params)
      if (aliases.count(p.name))
        diags.error(p.loc, "'" + p.name + "' is a dtype const; it cannot also name a parameter", "give the parameter another name");
    refuse_reuse(f.body);
  }
  std::erase_if(module.consts, [&](const ast::ConstDecl& c) { return aliases.count(c.name) > 0; });
  AliasSubstitution(aliases).module(module);
}

}  // namespace gdl
