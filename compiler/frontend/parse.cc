// Parses a .gdl source into the AST of ast.h. The only file that includes ANTLR.
//
// 1. Check the bytes (validate_source_text): empty, too large, NUL, UTF-8.
// 2. Pre-scan the brackets, skipping comments. ANTLR's recursive descent
//    recurses once per bracket level, so the first bracket nested deeper than
//    kMaxNestingDepth is reported here and such text never reaches ANTLR. An
//    unmatched closer or an unclosed opener is reported here too, at the
//    bracket itself, which says more than the parser could later.
// 3. Lex and parse with the generated GdlParser. Every byte >= 0x80 becomes
//    0x01 first (outside comments it is a STRAY token either way), so ANTLR's
//    char positions are byte offsets and its columns are byte columns. Syntax
//    errors go through SyntaxErrors: short messages, at most one per
//    top-level declaration or statement (no cascades).
// 4. Without syntax errors, build the AST from the parse tree (AstBuilder).
//    The grammar writes operator chains, unary prefixes, subscripts and
//    else-if chains as loops; the builder nests them, and stops with a
//    diagnostic when an expression tree gets deeper than kMaxExpressionDepth
//    or blocks deeper than kMaxNestingDepth, so later recursive passes are
//    safe. Integer literals beyond int64 and bad dim clauses are reported here.
// 5. Return the module, or null if this parse reported any error.
#include "frontend/parse.h"

#include <algorithm>
#include <charconv>
#include <cstdio>
#include <string_view>
#include <system_error>

#include "GdlLexer.h"
#include "GdlParser.h"
#include "antlr4-runtime.h"
#include "frontend/source_loader.h"
#include "internal_error.h"

namespace gdl {
namespace {

using antlr4::Token;
using gdl_antlr::GdlLexer;
using gdl_antlr::GdlParser;

// `a + b + c + ...` nests one level per operator without any bracket; later
// passes recurse over expression trees, so their depth is bounded too, more
// generously than brackets.
constexpr int kMaxExpressionDepth = 4 * kMaxNestingDepth;

const std::string kNestingMessage = "nesting deeper than " + std::to_string(kMaxNestingDepth) + " levels";

SourceLoc loc_of(const Token* t) {
  return {static_cast<uint32_t>(t->getLine()), static_cast<uint32_t>(t->getCharPositionInLine() + 1)};
}

SourceLoc loc_of(antlr4::tree::TerminalNode* node) { return loc_of(node->getSymbol()); }

// Bytes from the start of first to the end of last (one byte at least).
uint32_t span(const Token* first, const Token* last) {
  if (!first || !last || last->getStopIndex() < first->getStartIndex() ||
      last->getStopIndex() == static_cast<size_t>(-1))
    return 1;
  return static_cast<uint32_t>(last->getStopIndex() - first->getStartIndex() + 1);
}

uint32_t span(antlr4::ParserRuleContext* ctx) { return span(ctx->getStart(), ctx->getStop()); }

// Just past the end of t: where a missing ';' belongs.
SourceLoc loc_after(const Token* t) {
  SourceLoc loc = loc_of(t);
  loc.col += span(t, t);
  return loc;
}

// ------------------------------------------------------------ step 2: brackets

char closer_for(char open) { return open == '(' ? ')' : open == '[' ? ']' : '}'; }

std::string quoted(char c) { return std::string("'") + c + "'"; }

std::string position_text(SourceLoc loc) { return std::to_string(loc.line) + ":" + std::to_string(loc.col); }

bool check_brackets(const SourceFile& file, DiagnosticSink& diags) {
  struct Open {
    char bracket;
    size_t offset;
  };
  const std::string& text = file.text();
  auto at = [&](size_t offset) { return location_of_offset(text, offset); };
  std::vector<Open> open;
  for (size_t i = 0; i < text.size(); ++i) {
    char c = text[i];
    if (c == '#' || (c == '/' && i + 1 < text.size() && text[i + 1] == '/')) {
      while (i + 1 < text.size() && text[i + 1] != '\n') ++i;
      continue;
    }
    if (c == '(' || c == '[' || c == '{') {
      if (open.size() >= static_cast<size_t>(kMaxNestingDepth)) {
        diags.error(at(i), kNestingMessage, "name intermediate results with `let`, or move inner parts into a fn");
        return false;
      }
      open.push_back({c, i});
      continue;
    }
    if (c != ')' && c != ']' && c != '}') continue;
    if (!open.empty() && closer_for(open.back().bracket) == c) {
      open.pop_back();
      continue;
    }
    bool closes_outer = std::any_of(open.begin(), open.end(), [&](const Open& o) { return closer_for(o.bracket) == c; });
    if (closes_outer) {
      // The innermost open bracket was never closed; c closes an outer one.
      const Open& inner = open.back();
      diags.error(at(inner.offset), "unclosed " + quoted(inner.bracket),
                  "add " + quoted(closer_for(inner.bracket)) + " before the " + quoted(c) + " at " + position_text(at(i)));
    } else {
      diags.error(at(i), "unmatched " + quoted(c), "remove it, or add the bracket it should close");
    }
    return false;
  }
  if (!open.empty()) {
    const Open& inner = open.back();
    diags.error(at(inner.offset), "unclosed " + quoted(inner.bracket), "add the matching " + quoted(closer_for(inner.bracket)));
    return false;
  }
  return true;
}

// -------------------------------------------------------- step 3: syntax errors

bool expects(const antlr4::misc::IntervalSet& expected, size_t type) { return expected.contains(type); }

bool is_keyword(size_t type) { return type >= GdlLexer::PROGRAM && type <= GdlLexer::FALSE; }

bool starts_expression(ssize_t type) {
  switch (type) {
    case GdlLexer::NAME: case GdlLexer::INT: case GdlLexer::FLOAT: case GdlLexer::TRUE: case GdlLexer::FALSE:
    case GdlLexer::LPAREN: case GdlLexer::LBRACK: case GdlLexer::MINUS: case GdlLexer::BANG:
      return true;
    default:
      return false;
  }
}

// Reports syntax errors as short diagnostics instead of ANTLR's
// "mismatched input ... expecting {...}", and keeps quiet about the errors
// that recovery causes: after one, nothing more until the end of the
// top-level declaration or statement that holds it.
class SyntaxErrors : public antlr4::DefaultErrorStrategy {
 public:
  SyntaxErrors(const SourceFile& file, DiagnosticSink& diags) : file_(file), diags_(diags) {}

 protected:
  void reportNoViableAlternative(antlr4::Parser* p, const antlr4::NoViableAltException& e) override {
    report(p, e.getOffendingToken(), e.getExpectedTokens(), Kind::kMismatch);
  }
  void reportInputMismatch(antlr4::Parser* p, const antlr4::InputMismatchException& e) override {
    report(p, e.getOffendingToken(), e.getExpectedTokens(), Kind::kMismatch);
  }
  void reportFailedPredicate(antlr4::Parser* p, const antlr4::FailedPredicateException& e) override {
    report(p, e.getOffendingToken(), e.getExpectedTokens(), Kind::kMismatch);
  }
  void reportUnwantedToken(antlr4::Parser* p) override {
    if (inErrorRecoveryMode(p)) return;
    beginErrorCondition(p);
    report(p, p->getCurrentToken(), p->getExpectedTokens(), Kind::kUnwanted);
  }
  void reportMissingToken(antlr4::Parser* p) override {
    if (inErrorRecoveryMode(p)) return;
    beginErrorCondition(p);
    report(p, p->getCurrentToken(), p->getExpectedTokens(), Kind::kMissing);
  }

 private:
  // kUnwanted: one extra token; kMissing: one token left out; kMismatch: neither.
  enum class Kind { kUnwanted, kMissing, kMismatch };

  void report(antlr4::Parser* p, Token* offending, const antlr4::misc::IntervalSet& expected, Kind kind) {
    antlr4::TokenStream* tokens = p->getTokenStream();
    size_t index = offending->getTokenIndex();
    if (reported_ && index <= quiet_until_) return;
    reported_ = true;
    quiet_until_ = item_end(tokens, index);

    size_t type = offending->getType();
    Token* previous = index > 0 ? tokens->get(index - 1) : nullptr;
    bool at_end = type == Token::EOF;
    SourceLoc where = at_end && previous ? loc_after(previous) : loc_of(offending);
    uint32_t length = at_end ? 1 : span(offending, offending);
    std::string found = describe(offending);
    std::string wanted = describe_expected(p, expected);
    if (wanted == "a name" && p->getContext()->getRuleIndex() == GdlParser::RuleTypeExpr)
      wanted = "a type such as f16[B, H]";

    if (type == GdlLexer::STRAY) return stray_character(offending);
    if (previous && previous->getType() == GdlLexer::ELSE && type != GdlLexer::IF && type != GdlLexer::LBRACE)
      return error(where, "expected '{' or 'if' after 'else', found " + found, "write `else { ... }`", length);
    if (type == GdlLexer::ASSIGN && inside(p, GdlParser::RuleExprStmt))
      return error(where, "only a name can be assigned to", "values are immutable; build a new one with `let`",
                   length);
    if (expects(expected, GdlLexer::PROGRAM)) {
      return error(where, at_end ? "empty program: a program starts with `program NAME;`"
                                 : "a program starts with `program NAME;`, found " + found,
                   "", length);
    }
    if (expects(expected, GdlLexer::SEMI) && previous &&
        (kind == Kind::kMissing || at_end || previous->getLine() < offending->getLine())) {
      return error(loc_after(previous), "expected ';' " + after_what(p), "");
    }
    if (is_keyword(type) && expects(expected, GdlLexer::NAME) && kind != Kind::kUnwanted)
      return error(where, "expected a name, found keyword " + found,
                   found + " is a reserved word; choose another name", length);
    std::string hint = hint_for(type);
    if (kind == Kind::kUnwanted && wanted.rfind("an expression", 0) != 0) {
      if (hint.empty() && wanted == "';'") hint = "expected ';' " + after_what(p);
      else if (hint.empty() && !wanted.empty()) hint = "expected " + wanted + " here";
      return error(where, "unexpected " + found, hint, length);
    }
    if (wanted.empty()) return error(where, "unexpected " + found, hint, length);
    error(where, "expected " + wanted + ", found " + found, hint, length);
  }

  void error(SourceLoc loc, std::string message, std::string hint, uint32_t length = 1) {
    diags_.error(loc, std::move(message), std::move(hint), length);
  }

  void stray_character(Token* t) {
    const std::string& text = file_.text();
    size_t offset = t->getStartIndex();
    unsigned char lead = static_cast<unsigned char>(text[offset]);
    size_t length = lead < 0x80 ? 1 : lead < 0xE0 ? 2 : lead < 0xF0 ? 3 : 4;
    length = std::min(length, text.size() - offset);
    std::string shown;
    if (lead < 0x20 || lead == 0x7F) {
      char buffer[8];
      std::snprintf(buffer, sizeof buffer, "\\x%02X", lead);
      shown = buffer;
    } else {
      shown = text.substr(offset, length);
    }
    std::string hint;
    if (lead >= 0x80) hint = "names and operators are ASCII; other characters may appear only in comments";
    else if (lead == '"' || lead == '\'') hint = "gdl has no strings";
    error(loc_of(t), "unexpected character '" + shown + "'", hint, static_cast<uint32_t>(length));
  }

  // Index of the ';' or '}' that ends the top-level item holding token
  // index. When the error is at such a token itself, recovery may swallow it
  // and merge the next item, so that one stays quiet too.
  size_t item_end(antlr4::TokenStream* tokens, size_t index) {
    if (depth_before_.empty()) {
      int depth = 0;
      for (size_t i = 0; i < tokens->size(); ++i) {
        depth_before_.push_back(depth);
        size_t type = tokens->get(i)->getType();
        if (type == GdlLexer::LBRACE) ++depth;
        if (type == GdlLexer::RBRACE) --depth;
      }
    }
    auto ends_item = [&](size_t i) {
      size_t type = tokens->get(i)->getType();
      return (type == GdlLexer::SEMI && depth_before_[i] == 0) || (type == GdlLexer::RBRACE && depth_before_[i] == 1);
    };
    size_t i = ends_item(index) ? index + 1 : index;
    for (; i < tokens->size(); ++i) {
      if (ends_item(i) || tokens->get(i)->getType() == Token::EOF) return i;
    }
    return tokens->size();
  }

  static std::string describe(Token* t) {
    if (t->getType() == Token::EOF) return "end of file";
    std::string text = t->getText();
    if (text.size() > 32) text = text.substr(0, 29) + "...";
    return "'" + text + "'";
  }

  // "';'", "an expression or ')'", ...; empty when the set is too broad to help.
  static std::string describe_expected(antlr4::Parser* p, const antlr4::misc::IntervalSet& expected) {
    std::vector<std::string> parts;
    bool expression = expects(expected, GdlLexer::NAME) && expects(expected, GdlLexer::INT) &&
                      expects(expected, GdlLexer::LPAREN);
    if (expression) parts.push_back("an expression");
    for (ssize_t type : expected.toList()) {
      if (expression && starts_expression(type)) continue;
      if (type == -1) parts.push_back("end of file");
      else if (type == GdlLexer::NAME) parts.push_back("a name");
      else if (type == GdlLexer::INT) parts.push_back("an integer");
      else if (type == GdlLexer::FLOAT) parts.push_back("a number");
      else if (type > 0) parts.push_back(p->getVocabulary().getLiteralName(type));
    }
    if (parts.empty() || parts.size() > 4) return "";
    std::string out = parts[0];
    for (size_t i = 1; i < parts.size(); ++i) out += (i + 1 == parts.size() ? " or " : ", ") + parts[i];
    return out;
  }

  static bool inside(antlr4::Parser* p, size_t rule) {
    for (antlr4::RuleContext* ctx = p->getContext(); ctx; ctx = dynamic_cast<antlr4::RuleContext*>(ctx->parent))
      if (ctx->getRuleIndex() == rule) return true;
    return false;
  }

  static std::string after_what(antlr4::Parser* p) {
    for (antlr4::RuleContext* ctx = p->getContext(); ctx; ctx = dynamic_cast<antlr4::RuleContext*>(ctx->parent)) {
      switch (ctx->getRuleIndex()) {
        case GdlParser::RuleHeader: return "after the program name";
        case GdlParser::RuleDimDecl: case GdlParser::RuleConstDecl: case GdlParser::RuleTensorDecl:
          return "after declaration";
        case GdlParser::RuleLetStmt: case GdlParser::RuleAssignStmt: case GdlParser::RuleReturnStmt:
        case GdlParser::RuleExprStmt:
          return "after statement";
        default: break;
      }
    }
    return "here";
  }

  static std::string hint_for(size_t type) {
    switch (type) {
      case GdlLexer::ELSE: return "'else' must follow the closing '}' of an if";
      case GdlLexer::FN: return "functions are declared at top level";
      case GdlLexer::PROGRAM: return "`program NAME;` comes once, first in the file";
      case GdlLexer::DIM: case GdlLexer::CONST: case GdlLexer::PARAM: case GdlLexer::INPUT:
      case GdlLexer::OUTPUT: case GdlLexer::SCALAR:
        return "declarations belong at top level";
      default: return "";
    }
  }

  const SourceFile& file_;
  DiagnosticSink& diags_;
  bool reported_ = false;
  size_t quiet_until_ = 0;
  std::vector<int> depth_before_;  // brace depth before each token
};

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

// ------------------------------------------------------------- step 4: the AST

ast::BinaryOp binary_op(size_t type) {
  switch (type) {
    case GdlLexer::PLUS: return ast::BinaryOp::kAdd;
    case GdlLexer::MINUS: return ast::BinaryOp::kSub;
    case GdlLexer::STAR: return ast::BinaryOp::kMul;
    case GdlLexer::SLASH: return ast::BinaryOp::kDiv;
    case GdlLexer::PERCENT: return ast::BinaryOp::kMod;
    case GdlLexer::AT: return ast::BinaryOp::kMatMul;
    case GdlLexer::LT: return ast::BinaryOp::kLt;
    case GdlLexer::LE: return ast::BinaryOp::kLe;
    case GdlLexer::GT: return ast::BinaryOp::kGt;
    case GdlLexer::GE: return ast::BinaryOp::kGe;
    case GdlLexer::EQ: return ast::BinaryOp::kEq;
    case GdlLexer::NE: return ast::BinaryOp::kNe;
    case GdlLexer::ANDAND: return ast::BinaryOp::kAnd;
    case GdlLexer::OROR: return ast::BinaryOp::kOr;
  }
  GDL_INTERNAL_ASSERT(false, "token is not a binary operator");
}

class AstBuilder {
 public:
  explicit AstBuilder(DiagnosticSink& diags) : diags_(diags) {}

  std::unique_ptr<ast::Module> build(GdlParser::ProgramContext* program) {
    auto module = std::make_unique<ast::Module>();
    module->program_name = program->header()->NAME()->getText();
    module->program_loc = loc_of(program->header()->NAME());
    for (GdlParser::ItemContext* item : program->item()) {
      reported_in_item_ = false;
      if (auto* s = item->statement()) {
        module->body.push_back(statement(s));
        continue;
      }
      GdlParser::DeclarationContext* d = item->declaration();
      if (auto* c = d->dimDecl()) module->dims.push_back(dim_decl(c));
      else if (auto* c = d->constDecl()) module->consts.push_back(const_decl(c));
      else if (auto* c = d->tensorDecl()) module->tensors.push_back(tensor_decl(c));
      else if (auto* c = d->fnDecl()) module->fns.push_back(fn_decl(c));
    }
    return module;
  }

 private:
  struct Built {
    ast::ExprPtr expr;
    int depth = 1;
  };

  // One diagnostic per statement or declaration is enough.
  void error(SourceLoc loc, std::string message, std::string hint = {}, uint32_t length = 1) {
    if (reported_in_item_) return;
    reported_in_item_ = true;
    diags_.error(loc, std::move(message), std::move(hint), length);
  }

  void too_deep(SourceLoc loc) {
    error(loc, "expression nests deeper than " + std::to_string(kMaxExpressionDepth) + " levels",
          "name intermediate results with `let`");
  }

  // ------------------------------------------------------------ declarations

  ast::DimDecl dim_decl(GdlParser::DimDeclContext* c) {
    ast::DimDecl d;
    d.loc = loc_of(c->DIM());
    d.name = c->NAME()->getText();
    d.name_loc = loc_of(c->NAME());
    d.lo = expr(c->lo).expr;
    d.hi = expr(c->hi).expr;
    bool has_buckets = false, has_policy = false;
    for (GdlParser::DimClauseContext* clause : c->dimClause()) {
      if (auto* b = dynamic_cast<GdlParser::BucketsClauseContext*>(clause)) {
        if (has_buckets) error(loc_of(b->BUCKETS()), "duplicate buckets(...) clause", "list every bucket in one clause");
        has_buckets = true;
        d.buckets_loc = loc_of(b->BUCKETS());
        d.buckets.clear();
        for (auto* e : b->expr()) d.buckets.push_back(expr(e).expr);
      } else if (auto* p = dynamic_cast<GdlParser::PolicyClauseContext*>(clause)) {
        if (has_policy) error(loc_of(p->POLICY()), "duplicate policy(...) clause");
        has_policy = true;
        d.policy = p->value->getText();
        d.policy_loc = loc_of(p->value);
        if (d.policy != "buckets" && d.policy != "update")
          error(d.policy_loc, "unknown dim policy '" + d.policy + "'", "use policy(buckets) or policy(update)",
                span(p->value, p->value));
      }
    }
    return d;
  }

  ast::ConstDecl const_decl(GdlParser::ConstDeclContext* c) {
    ast::ConstDecl d;
    d.loc = loc_of(c->CONST());
    d.name = c->NAME()->getText();
    d.name_loc = loc_of(c->NAME());
    d.value = expr(c->expr()).expr;
    return d;
  }

  ast::TensorDecl tensor_decl(GdlParser::TensorDeclContext* c) {
    ast::TensorDecl d;
    d.loc = loc_of(c->role);
    switch (c->role->getType()) {
      case GdlLexer::PARAM: d.role = ast::TensorRole::kParam; break;
      case GdlLexer::INPUT: d.role = ast::TensorRole::kInput; break;
      case GdlLexer::OUTPUT: d.role = ast::TensorRole::kOutput; break;
      default: d.role = ast::TensorRole::kScalar; break;
    }
    d.name = c->NAME()->getText();
    d.name_loc = loc_of(c->NAME());
    d.type = type(c->typeExpr());
    if (c->expr()) {
      if (d.role != ast::TensorRole::kScalar)
        error(loc_of(c->ASSIGN()), "only a `scalar` declaration takes a default value",
              "params and inputs are bound at run time; remove `= ...`");
      d.init = expr(c->expr()).expr;
    }
    return d;
  }

  ast::FnDecl fn_decl(GdlParser::FnDeclContext* c) {
    ast::FnDecl d;
    d.loc = loc_of(c->FN());
    d.name = c->NAME()->getText();
    d.name_loc = loc_of(c->NAME());
    for (GdlParser::FnParamContext* p : c->fnParam()) {
      ast::FnParam param;
      param.name = p->NAME()->getText();
      param.loc = loc_of(p->NAME());
      param.type = type(p->typeExpr());
      d.params.push_back(std::move(param));
    }
    if (c->typeExpr()) d.result = std::make_unique<ast::TypeExpr>(type(c->typeExpr()));
    d.body = block(c->block());
    return d;
  }

  ast::TypeExpr type(GdlParser::TypeExprContext* c) {
    ast::TypeExpr t;
    t.loc = loc_of(c->NAME());
    t.dtype = c->NAME()->getText();
    t.dtype_loc = t.loc;
    for (auto* e : c->expr()) t.dims.push_back(expr(e).expr);
    return t;
  }

  // -------------------------------------------------------------- statements

  ast::Block block(GdlParser::BlockContext* c) {
    ast::Block body;
    // Braces are limited by the pre-scan; else-if chains nest without braces.
    if (block_depth_ + 1 > kMaxNestingDepth) {
      error(loc_of(c->LBRACE()), kNestingMessage, "else-if chains nest too; split the chain or move parts into a fn");
      return body;
    }
    ++block_depth_;
    for (GdlParser::StatementContext* s : c->statement()) body.push_back(statement(s));
    --block_depth_;
    return body;
  }

  ast::StmtPtr statement(GdlParser::StatementContext* c) {
    reported_in_item_ = false;
    if (auto* s = c->letStmt()) {
      auto stmt = std::make_unique<ast::LetStmt>(loc_of(s->LET()));
      stmt->name = s->NAME()->getText();
      stmt->name_loc = loc_of(s->NAME());
      if (s->typeExpr()) stmt->type = std::make_unique<ast::TypeExpr>(type(s->typeExpr()));
      stmt->value = expr(s->expr()).expr;
      return stmt;
    }
    if (auto* s = c->assignStmt()) {
      auto stmt = std::make_unique<ast::AssignStmt>(loc_of(s->NAME()));
      stmt->name = s->NAME()->getText();
      stmt->name_loc = stmt->loc;
      stmt->value = expr(s->expr()).expr;
      return stmt;
    }
    if (auto* s = c->forStmt()) {
      auto stmt = std::make_unique<ast::ForStmt>(loc_of(s->FOR()));
      stmt->var = s->NAME()->getText();
      stmt->var_loc = loc_of(s->NAME());
      stmt->start = expr(s->first).expr;
      stmt->stop = expr(s->last).expr;
      stmt->body = block(s->block());
      return stmt;
    }
    if (auto* s = c->ifStmt()) return if_stmt(s);
    if (auto* s = c->whileStmt()) {
      auto stmt = std::make_unique<ast::WhileStmt>(loc_of(s->WHILE()));
      stmt->cond = expr(s->expr()).expr;
      stmt->body = block(s->block());
      return stmt;
    }
    if (auto* s = c->returnStmt()) {
      auto stmt = std::make_unique<ast::ReturnStmt>(loc_of(s->RETURN()));
      stmt->value = expr(s->expr()).expr;
      return stmt;
    }
    GdlParser::ExprStmtContext* s = c->exprStmt();
    auto stmt = std::make_unique<ast::ExprStmt>(loc_of(s->getStart()));
    stmt->expr = expr(s->expr()).expr;
    return stmt;
  }

  // if a {..} else if b {..} else {..}: each else-if becomes an IfStmt alone
  // in the else_body of the one before it.
  ast::StmtPtr if_stmt(GdlParser::IfStmtContext* c) {
    auto top = std::make_unique<ast::IfStmt>(loc_of(c->IF()));
    top->cond = expr(c->expr()).expr;
    top->then_body = block(c->block(0));
    ast::IfStmt* tail = top.get();
    int saved_depth = block_depth_;
    for (GdlParser::ElseIfContext* e : c->elseIf()) {
      if (block_depth_ + 2 > kMaxNestingDepth) {
        error(loc_of(e->IF()), kNestingMessage, "a long else-if chain nests one level per `else if`; split it");
        break;
      }
      ++block_depth_;  // this if sits inside the previous one's else block
      auto next = std::make_unique<ast::IfStmt>(loc_of(e->IF()));
      next->cond = expr(e->expr()).expr;
      next->then_body = block(e->block());
      ast::IfStmt* raw = next.get();
      tail->has_else = true;
      tail->else_body.push_back(std::move(next));
      tail = raw;
    }
    if (c->ELSE()) {
      tail->has_else = true;
      tail->else_body = block(c->block(1));
    }
    block_depth_ = saved_depth;
    return top;
  }

  // ------------------------------------------------------------- expressions

  Built expr(GdlParser::ExprContext* c) {
    return chain(c->andExpr(), c->ops, [&](GdlParser::AndExprContext* x) { return and_expr(x); });
  }
  Built and_expr(GdlParser::AndExprContext* c) {
    return chain(c->cmpExpr(), c->ops, [&](GdlParser::CmpExprContext* x) { return cmp_expr(x); });
  }
  Built cmp_expr(GdlParser::CmpExprContext* c) {
    return chain(c->addExpr(), c->ops, [&](GdlParser::AddExprContext* x) { return add_expr(x); });
  }
  Built add_expr(GdlParser::AddExprContext* c) {
    return chain(c->mulExpr(), c->ops, [&](GdlParser::MulExprContext* x) { return mul_expr(x); });
  }
  Built mul_expr(GdlParser::MulExprContext* c) {
    return chain(c->unaryExpr(), c->ops, [&](GdlParser::UnaryExprContext* x) { return unary_expr(x); });
  }

  // operands[0] ops[0] operands[1] ops[1] ... folded to the left.
  template <typename Operand, typename BuildOperand>
  Built chain(const std::vector<Operand*>& operands, const std::vector<Token*>& ops, BuildOperand build_operand) {
    Built lhs = build_operand(operands[0]);
    const Token* first = operands[0]->getStart();
    for (size_t i = 0; i < ops.size() && i + 1 < operands.size(); ++i) {
      Built rhs = build_operand(operands[i + 1]);
      int depth = std::max(lhs.depth, rhs.depth) + 1;
      if (depth > kMaxExpressionDepth) {
        too_deep(loc_of(ops[i]));
        break;  // stop growing the tree: deeper ones would only hurt later passes
      }
      auto node = std::make_unique<ast::BinaryExpr>(loc_of(ops[i]), binary_op(ops[i]->getType()),
                                                    std::move(lhs.expr), std::move(rhs.expr));
      node->length = span(first, operands[i + 1]->getStop());
      lhs = {std::move(node), depth};
    }
    return lhs;
  }

  Built unary_expr(GdlParser::UnaryExprContext* c) {
    Built operand = postfix_expr(c->postfixExpr());
    for (size_t i = c->ops.size(); i-- > 0;) {
      const Token* op = c->ops[i];
      if (operand.depth + 1 > kMaxExpressionDepth) {
        too_deep(loc_of(op));
        break;
      }
      auto op_kind = op->getType() == GdlLexer::MINUS ? ast::UnaryOp::kNeg : ast::UnaryOp::kNot;
      auto node = std::make_unique<ast::UnaryExpr>(loc_of(op), op_kind, std::move(operand.expr));
      node->length = span(op, c->getStop());
      operand = {std::move(node), operand.depth + 1};
    }
    return operand;
  }

  Built postfix_expr(GdlParser::PostfixExprContext* c) {
    Built base = primary(c->primary());
    for (GdlParser::SubscriptsContext* s : c->subscripts()) {
      int depth = base.depth + 1;
      std::vector<ast::Subscript> subscripts;
      for (GdlParser::SubscriptContext* sc : s->subscript()) subscripts.push_back(subscript(sc, depth));
      if (depth > kMaxExpressionDepth) {
        too_deep(loc_of(s->LBRACK()));
        break;
      }
      auto node = std::make_unique<ast::IndexExpr>(loc_of(s->LBRACK()), std::move(base.expr));
      node->subscripts = std::move(subscripts);
      node->length = span(c->getStart(), s->getStop());
      base = {std::move(node), depth};
    }
    return base;
  }

  // Raises depth to cover the subscript's expressions.
  ast::Subscript subscript(GdlParser::SubscriptContext* c, int& depth) {
    ast::Subscript sub;
    sub.loc = loc_of(c->getStart());
    auto take = [&](GdlParser::ExprContext* e) {
      Built b = expr(e);
      depth = std::max(depth, b.depth + 1);
      return std::move(b.expr);
    };
    if (c->COLON()) {
      sub.is_slice = true;
      if (c->lo) sub.start = take(c->lo);
      if (c->hi) sub.stop = take(c->hi);
    } else {
      sub.index = take(c->lo);
    }
    return sub;
  }

  Built primary(GdlParser::PrimaryContext* c) {
    if (auto* p = dynamic_cast<GdlParser::CallExprContext*>(c)) return call(p);
    if (auto* p = dynamic_cast<GdlParser::NameExprContext*>(c)) {
      auto node = std::make_unique<ast::NameExpr>(loc_of(p->NAME()), p->NAME()->getText());
      node->length = span(p);
      return {std::move(node), 1};
    }
    if (auto* p = dynamic_cast<GdlParser::IntLitContext*>(c)) return int_literal(p->INT()->getSymbol());
    if (auto* p = dynamic_cast<GdlParser::FloatLitContext*>(c)) return float_literal(p->FLOAT()->getSymbol());
    if (auto* p = dynamic_cast<GdlParser::BoolLitContext*>(c)) {
      auto node = std::make_unique<ast::BoolLit>(loc_of(p->getStart()), p->TRUE() != nullptr);
      node->length = span(p);
      return {std::move(node), 1};
    }
    if (auto* p = dynamic_cast<GdlParser::ParenExprContext*>(c)) return expr(p->expr());
    auto* p = dynamic_cast<GdlParser::ListExprContext*>(c);
    GDL_INTERNAL_ASSERT(p != nullptr, "unknown primary expression in the parse tree");
    auto node = std::make_unique<ast::ListExpr>(loc_of(p->LBRACK()));
    int depth = 1;
    for (auto* e : p->expr()) {
      Built element = expr(e);
      depth = std::max(depth, element.depth + 1);
      node->elements.push_back(std::move(element.expr));
    }
    node->length = span(p);
    if (depth > kMaxExpressionDepth) too_deep(node->loc);
    return {std::move(node), depth};
  }

  Built call(GdlParser::CallExprContext* c) {
    auto node = std::make_unique<ast::CallExpr>(loc_of(c->NAME()), c->NAME()->getText());
    node->length = span(c);
    int depth = 1;
    bool seen_keyword = false;
    for (GdlParser::ArgContext* a : c->arg()) {
      ast::Arg arg;
      if (a->keyword) {
        arg.keyword = a->keyword->getText();
        arg.loc = loc_of(a->keyword);
        seen_keyword = true;
      } else {
        arg.loc = loc_of(a->getStart());
        if (seen_keyword)
          error(arg.loc, "positional argument after keyword argument", "put positional arguments first",
                span(a));
      }
      Built value = expr(a->expr());
      depth = std::max(depth, value.depth + 1);
      arg.value = std::move(value.expr);
      node->args.push_back(std::move(arg));
    }
    if (depth > kMaxExpressionDepth) too_deep(node->loc);
    return {std::move(node), depth};
  }

  Built int_literal(Token* t) {
    std::string text = t->getText();
    int64_t value = 0;
    auto [end, ec] = std::from_chars(text.data(), text.data() + text.size(), value);
    if (ec != std::errc() || end != text.data() + text.size())
      error(loc_of(t), "integer literal " + text + " does not fit in 64 bits",
            "the largest integer is 9223372036854775807", span(t, t));
    auto node = std::make_unique<ast::IntLit>(loc_of(t), value);
    node->length = span(t, t);
    return {std::move(node), 1};
  }

  Built float_literal(Token* t) {
    std::string text = t->getText();
    double value = 0;
    auto [end, ec] = std::from_chars(text.data(), text.data() + text.size(), value);
    if (ec != std::errc() || end != text.data() + text.size())
      error(loc_of(t), "float literal " + text + " is out of range", "", span(t, t));
    auto node = std::make_unique<ast::FloatLit>(loc_of(t), value);
    node->length = span(t, t);
    return {std::move(node), 1};
  }

  DiagnosticSink& diags_;
  bool reported_in_item_ = false;
  int block_depth_ = 0;
};

}  // namespace

std::unique_ptr<ast::Module> parse_module(const SourceFile& file, DiagnosticSink& diags) {
  int errors_before = diags.error_count();
  if (!validate_source_text(file, diags)) return nullptr;
  if (!check_brackets(file, diags)) return nullptr;

  // One ASCII byte per source byte: positions stay byte offsets.
  std::string ascii = file.text();
  for (char& c : ascii)
    if (static_cast<unsigned char>(c) >= 0x80) c = '\x01';
  if (file.text().rfind("\xEF\xBB\xBF", 0) == 0) ascii.replace(0, 3, "   ");  // a UTF-8 byte order mark

  antlr4::ANTLRInputStream input(ascii);
  GdlLexer lexer(&input);
  FallbackListener fallback(diags);
  lexer.removeErrorListeners();
  lexer.addErrorListener(&fallback);
  antlr4::CommonTokenStream tokens(&lexer);
  tokens.fill();  // SyntaxErrors looks ahead for the end of a statement

  GdlParser parser(&tokens);
  parser.removeErrorListeners();
  parser.addErrorListener(&fallback);
  parser.setErrorHandler(std::make_shared<SyntaxErrors>(file, diags));
  // Every decision in this grammar needs at most two tokens of lookahead and
  // no context, so the cheaper SLL prediction decides the same as full LL.
  parser.getInterpreter<antlr4::atn::ParserATNSimulator>()->setPredictionMode(antlr4::atn::PredictionMode::SLL);
  GdlParser::ProgramContext* tree = nullptr;
  try {
    tree = parser.program();
  } catch (const std::exception& e) {
    internal_error(__FILE__, __LINE__, std::string("ANTLR threw: ") + e.what());
  }
  if (diags.error_count() > errors_before) return nullptr;

  auto module = AstBuilder(diags).build(tree);
  if (diags.error_count() > errors_before) return nullptr;
  return module;
}

}  // namespace gdl
