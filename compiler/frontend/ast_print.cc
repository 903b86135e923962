// Prints the AST as indented S-expressions.
//
// 1. Each node opens "(head detail line:col"; children follow on their own
//    lines, two spaces deeper; the node closes with ")" after its last child.
// 2. Leaves (literals, names) print on one line. Omitted optional parts print
//    as `_` so that positions in a slice or if/else stay unambiguous.
// 3. The module prints the program name, then each declaration list in source
//    order, then the top-level body.
#include "frontend/ast_print.h"

#include <charconv>

namespace gdl {

const char* ast::binary_op_spelling(BinaryOp op) {
  switch (op) {
    case ast::BinaryOp::kAdd: return "+";
    case ast::BinaryOp::kSub: return "-";
    case ast::BinaryOp::kMul: return "*";
    case ast::BinaryOp::kDiv: return "/";
    case ast::BinaryOp::kFloorDiv: return "//";
    case ast::BinaryOp::kMod: return "%";
    case ast::BinaryOp::kMatMul: return "@";
    case ast::BinaryOp::kBitAnd: return "&";
    case ast::BinaryOp::kBitOr: return "|";
    case ast::BinaryOp::kBitXor: return "^";
    case ast::BinaryOp::kShl: return "<<";
    case ast::BinaryOp::kShr: return ">>";
    case ast::BinaryOp::kLt: return "<";
    case ast::BinaryOp::kLe: return "<=";
    case ast::BinaryOp::kGt: return ">";
    case ast::BinaryOp::kGe: return ">=";
    case ast::BinaryOp::kEq: return "==";
    case ast::BinaryOp::kNe: return "!=";
    case ast::BinaryOp::kAnd: return "&&";
    case ast::BinaryOp::kOr: return "||";
  }
  return "?";
}

namespace {

std::string float_text(double v) {
  char buffer[64];
  auto result = std::to_chars(buffer, buffer + sizeof buffer, v);
  std::string text(buffer, result.ptr);
  // Keep 1.0 distinguishable from the integer 1.
  if (text.find_first_of(".eni") == std::string::npos) text += ".0";
  return text;
}

// Binding strength of a binary operator, loosest 1 (docs/language.md).
int precedence(ast::BinaryOp op) {
  switch (op) {
    case ast::BinaryOp::kOr: return 1;
    case ast::BinaryOp::kAnd: return 2;
    case ast::BinaryOp::kLt: case ast::BinaryOp::kLe: case ast::BinaryOp::kGt:
    case ast::BinaryOp::kGe: case ast::BinaryOp::kEq: case ast::BinaryOp::kNe: return 3;
    case ast::BinaryOp::kBitOr: return 4;
    case ast::BinaryOp::kBitXor: return 5;
    case ast::BinaryOp::kBitAnd: return 6;
    case ast::BinaryOp::kShl: case ast::BinaryOp::kShr: return 7;
    case ast::BinaryOp::kAdd: case ast::BinaryOp::kSub: return 8;
    default: return 9;  // * / // % @
  }
}

// Parenthesized when it binds looser than `context` (an operand's position).
std::string operand_text(const ast::Expr& e, int context) {
  const bool loose = e.kind == ast::ExprKind::kBinary && precedence(e.as<ast::BinaryExpr>().op) < context;
  return loose ? "(" + expr_text(e) + ")" : expr_text(e);
}

class Printer {
 public:
  std::string take() { return std::move(out_); }

  void module(const ast::Module& m) {
    line("(program " + m.program_name + " " + at(m.program_loc) + ")");
    for (const ast::DimDecl& d : m.dims) dim(d);
    for (const ast::GroupDecl& d : m.groups) {
      open("group " + d.name + " " + at(d.loc));
      expr(*d.ranks);
      close();
    }
    for (const ast::ConstDecl& d : m.consts) {
      open("const " + d.name + " " + at(d.loc));
      expr(*d.value);
      close();
    }
    for (const ast::TensorDecl& d : m.tensors) tensor(d);
    for (const ast::FnDecl& d : m.fns) fn(d);
    open("body");
    block(m.body);
    close();
  }

 private:
  static std::string at(SourceLoc loc) { return std::to_string(loc.line) + ":" + std::to_string(loc.col); }

  void line(const std::string& text) {
    out_.append(static_cast<size_t>(indent_) * 2, ' ');
    out_ += text;
    out_ += '\n';
  }
  void open(const std::string& head) {
    line("(" + head);
    ++indent_;
  }
  // Moves the closing paren onto the last printed line.
  void close() {
    --indent_;
    out_.insert(out_.size() - 1, ")");
  }

  void optional_expr(const ast::ExprPtr& e) {
    if (e) expr(*e);
    else line("_");
  }

  void dim(const ast::DimDecl& d) {
    open("dim " + d.name + " " + at(d.loc));
    expr(*d.lo);
    expr(*d.hi);
    if (!d.buckets.empty()) {
      open("buckets " + at(d.buckets_loc));
      for (const auto& b : d.buckets) expr(*b);
      close();
    }
    if (!d.policy.empty()) line("(policy " + d.policy + " " + at(d.policy_loc) + ")");
    close();
  }

  void tensor(const ast::TensorDecl& d) {
    static const char* const kRoles[] = {"param", "input", "output", "scalar", "state"};
    open(std::string(kRoles[static_cast<int>(d.role)]) + " " + d.name + " " + at(d.loc));
    type(d.type);
    if (d.init) expr(*d.init);
    close();
  }

  void fn(const ast::FnDecl& d) {
    open("fn " + d.name + " " + at(d.loc));
    for (const ast::FnParam& p : d.params) {
      open("param " + p.name + " " + at(p.loc));
      type(p.type);
      close();
    }
    if (d.result) {
      open("result");
      type(*d.result);
      close();
    }
    open("body");
    block(d.body);
    close();
    close();
  }

  void type(const ast::TypeExpr& t) {
    if (t.dims.empty()) return line("(type " + t.dtype + " " + at(t.loc) + ")");
    open("type " + t.dtype + " " + at(t.loc));
    for (const auto& d : t.dims) expr(*d);
    close();
  }

  void block(const ast::Block& b) {
    for (const auto& s : b) stmt(*s);
  }

  void stmt(const ast::Stmt& s) {
    switch (s.kind) {
      case ast::StmtKind::kLet: {
        const auto& let = s.as<ast::LetStmt>();
        open("let " + let.name + " " + at(s.loc));
        if (let.type) type(*let.type);
        expr(*let.value);
        return close();
      }
      case ast::StmtKind::kAssign: {
        const auto& assign = s.as<ast::AssignStmt>();
        open("assign " + assign.name + " " + at(s.loc));
        if (assign.target) expr(*assign.target);
        expr(*assign.value);
        return close();
      }
      case ast::StmtKind::kFor: {
        const auto& loop = s.as<ast::ForStmt>();
        open("for " + loop.var + " " + at(s.loc));
        expr(*loop.start);
        expr(*loop.stop);
        open("body");
        block(loop.body);
        close();
        return close();
      }
      case ast::StmtKind::kIf: {
        const auto& branch = s.as<ast::IfStmt>();
        open("if " + at(s.loc));
        expr(*branch.cond);
        open("then");
        block(branch.then_body);
        close();
        if (branch.has_else) {
          open("else");
          block(branch.else_body);
          close();
        }
        return close();
      }
      case ast::StmtKind::kWhile: {
        const auto& loop = s.as<ast::WhileStmt>();
        open("while " + at(s.loc));
        expr(*loop.cond);
        open("body");
        block(loop.body);
        close();
        return close();
      }
      case ast::StmtKind::kReturn: {
        open("return " + at(s.loc));
        optional_expr(s.as<ast::ReturnStmt>().value);
        return close();
      }
      case ast::StmtKind::kExpr: {
        open("expr " + at(s.loc));
        expr(*s.as<ast::ExprStmt>().expr);
        return close();
      }
    }
  }

  void expr(const ast::Expr& e) {
    switch (e.kind) {
      case ast::ExprKind::kInt:
        return line("(int " + std::to_string(e.as<ast::IntLit>().value) + " " + at(e.loc) + ")");
      case ast::ExprKind::kFloat:
        return line("(float " + float_text(e.as<ast::FloatLit>().value) + " " + at(e.loc) + ")");
      case ast::ExprKind::kBool:
        return line(std::string("(bool ") + (e.as<ast::BoolLit>().value ? "true " : "false ") + at(e.loc) + ")");
      case ast::ExprKind::kName:
        return line("(name " + e.as<ast::NameExpr>().name + " " + at(e.loc) + ")");
      case ast::ExprKind::kUnary: {
        const auto& u = e.as<ast::UnaryExpr>();
        open(std::string(u.op == ast::UnaryOp::kNeg ? "neg " : "not ") + at(e.loc));
        expr(*u.operand);
        return close();
      }
      case ast::ExprKind::kBinary: {
        const auto& b = e.as<ast::BinaryExpr>();
        open(std::string(binary_op_spelling(b.op)) + " " + at(e.loc));
        expr(*b.lhs);
        expr(*b.rhs);
        return close();
      }
      case ast::ExprKind::kCall: {
        const auto& c = e.as<ast::CallExpr>();
        open("call " + c.callee + " " + at(e.loc));
        for (const ast::Arg& a : c.args) {
          if (a.keyword.empty()) {
            expr(*a.value);
            continue;
          }
          open("kw " + a.keyword + " " + at(a.loc));
          expr(*a.value);
          close();
        }
        return close();
      }
      case ast::ExprKind::kIndex: {
        const auto& x = e.as<ast::IndexExpr>();
        open("index " + at(e.loc));
        expr(*x.base);
        for (const ast::Subscript& s : x.subscripts) {
          if (!s.is_slice) {
            open("at " + at(s.loc));
            expr(*s.index);
          } else {
            open("slice " + at(s.loc));
            optional_expr(s.start);
            optional_expr(s.stop);
          }
          close();
        }
        return close();
      }
      case ast::ExprKind::kList: {
        const auto& l = e.as<ast::ListExpr>();
        if (l.elements.empty()) return line("(list " + at(e.loc) + ")");
        open("list " + at(e.loc));
        for (const auto& element : l.elements) expr(*element);
        return close();
      }
    }
  }

  std::string out_;
  int indent_ = 0;
};

}  // namespace

std::string expr_text(const ast::Expr& e) {
  switch (e.kind) {
    case ast::ExprKind::kInt: return std::to_string(e.as<ast::IntLit>().value);
    case ast::ExprKind::kFloat: return float_text(e.as<ast::FloatLit>().value);
    case ast::ExprKind::kBool: return e.as<ast::BoolLit>().value ? "true" : "false";
    case ast::ExprKind::kName: return e.as<ast::NameExpr>().name;
    case ast::ExprKind::kUnary: {
      const auto& u = e.as<ast::UnaryExpr>();
      return (u.op == ast::UnaryOp::kNeg ? "-" : "!") + operand_text(*u.operand, 10);
    }
    case ast::ExprKind::kBinary: {
      const auto& b = e.as<ast::BinaryExpr>();
      const int p = precedence(b.op);  // left-associative: the right operand needs more
      return operand_text(*b.lhs, p) + " " + binary_op_spelling(b.op) + " " + operand_text(*b.rhs, p + 1);
    }
    case ast::ExprKind::kCall: {
      const auto& c = e.as<ast::CallExpr>();
      std::string text = c.callee + "(";
      for (size_t i = 0; i < c.args.size(); ++i)
        text += (i ? ", " : "") + (c.args[i].keyword.empty() ? "" : c.args[i].keyword + " = ") +
                expr_text(*c.args[i].value);
      return text + ")";
    }
    case ast::ExprKind::kIndex: {
      const auto& x = e.as<ast::IndexExpr>();
      std::string text = operand_text(*x.base, 10) + "[";
      for (size_t i = 0; i < x.subscripts.size(); ++i) {
        const ast::Subscript& s = x.subscripts[i];
        text += i ? ", " : "";
        text += s.is_slice ? (s.start ? expr_text(*s.start) : "") + ":" + (s.stop ? expr_text(*s.stop) : "")
                           : expr_text(*s.index);
      }
      return text + "]";
    }
    case ast::ExprKind::kList: {
      std::string text = "[";
      const auto& l = e.as<ast::ListExpr>();
      for (size_t i = 0; i < l.elements.size(); ++i) text += (i ? ", " : "") + expr_text(*l.elements[i]);
      return text + "]";
    }
  }
  return "?";
}

std::string type_text(const ast::TypeExpr& t) {
  if (t.dims.empty()) return t.dtype;
  std::string text = t.dtype + "[";
  for (size_t i = 0; i < t.dims.size(); ++i) text += (i ? ", " : "") + expr_text(*t.dims[i]);
  return text + "]";
}

std::string print_ast(const ast::Module& module) {
  Printer printer;
  printer.module(module);
  return printer.take();
}

}  // namespace gdl
