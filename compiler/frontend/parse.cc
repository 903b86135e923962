// Parses a .gdl source into the AST of ast.h. With syntax_errors.cc (steps
// 2 and 3's errors), the only file that includes ANTLR.
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

#include "frontend/parse_support.h"
#include "frontend/source_loader.h"
#include "internal_error.h"

namespace gdl {
namespace {

using namespace parsing;

// ------------------------------------------------------------- step 4: the AST

ast::BinaryOp binary_op(size_t type) {
  switch (type) {
    case GdlLexer::PLUS: return ast::BinaryOp::kAdd;
    case GdlLexer::MINUS: return ast::BinaryOp::kSub;
    case GdlLexer::STAR: return ast::BinaryOp::kMul;
    case GdlLexer::SLASH: return ast::BinaryOp::kDiv;
    case GdlLexer::SLASHSLASH: return ast::BinaryOp::kFloorDiv;
    case GdlLexer::PERCENT: return ast::BinaryOp::kMod;
    case GdlLexer::AT: return ast::BinaryOp::kMatMul;
    case GdlLexer::AMP: return ast::BinaryOp::kBitAnd;
    case GdlLexer::PIPE: return ast::BinaryOp::kBitOr;
    case GdlLexer::CARET: return ast::BinaryOp::kBitXor;
    case GdlLexer::SHL: return ast::BinaryOp::kShl;
    case GdlLexer::SHR: return ast::BinaryOp::kShr;
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
      else if (auto* c = d->groupDecl()) module->groups.push_back(group_decl(c));
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

  ast::GroupDecl group_decl(GdlParser::GroupDeclContext* c) {
    ast::GroupDecl g;
    g.loc = loc_of(c->GROUP());
    g.name = c->NAME(0)->getText();
    g.name_loc = loc_of(c->NAME(0));
    if (c->clause->getText() != "ranks")
      error(loc_of(c->clause), "a group declares its size as ranks(N), got '" + c->clause->getText() + "'",
            "write group " + g.name + " ranks(2);", span(c->clause, c->clause));
    g.ranks = expr(c->expr()).expr;
    return g;
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
      case GdlLexer::STATE: d.role = ast::TensorRole::kState; break;
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
      error(loc_of(c->LBRACE()), nesting_message(), "else-if chains nest too; split the chain or move parts into a fn");
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
      if (GdlParser::SubscriptsContext* subs = s->subscripts()) {
        int depth = 1;
        auto target = std::make_unique<ast::IndexExpr>(loc_of(subs->LBRACK()),
                                                       std::make_unique<ast::NameExpr>(stmt->loc, stmt->name));
        for (GdlParser::SubscriptContext* sc : subs->subscript()) target->subscripts.push_back(subscript(sc, depth));
        target->base->length = static_cast<uint32_t>(stmt->name.size());
        target->length = span(s->getStart(), subs->getStop());
        stmt->target = std::move(target);
      }
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
        error(loc_of(e->IF()), nesting_message(), "a long else-if chain nests one level per `else if`; split it");
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
    return chain(c->bitOrExpr(), c->ops, [&](GdlParser::BitOrExprContext* x) { return bit_or_expr(x); });
  }
  Built bit_or_expr(GdlParser::BitOrExprContext* c) {
    return chain(c->bitXorExpr(), c->ops, [&](GdlParser::BitXorExprContext* x) { return bit_xor_expr(x); });
  }
  Built bit_xor_expr(GdlParser::BitXorExprContext* c) {
    return chain(c->bitAndExpr(), c->ops, [&](GdlParser::BitAndExprContext* x) { return bit_and_expr(x); });
  }
  Built bit_and_expr(GdlParser::BitAndExprContext* c) {
    return chain(c->shiftExpr(), c->ops, [&](GdlParser::ShiftExprContext* x) { return shift_expr(x); });
  }
  Built shift_expr(GdlParser::ShiftExprContext* c) {
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
  parser.setErrorHandler(syntax_error_strategy(file, diags));
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
