// Steps 2 and 3 of parse.cc: the bracket pre-scan and the syntax errors
// the parser reports through SyntaxErrors.
#include <algorithm>
#include <string_view>

#include "frontend/parse_support.h"
#include "frontend/source_loader.h"

namespace gdl::parsing {
namespace {

// ------------------------------------------------------------ step 2: brackets

char closer_for(char open) { return open == '(' ? ')' : open == '[' ? ']' : '}'; }

std::string quoted(char c) { return std::string("'") + c + "'"; }

std::string position_text(SourceLoc loc) { return std::to_string(loc.line) + ":" + std::to_string(loc.col); }

}  // namespace

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
    if (c == '#') {
      while (i + 1 < text.size() && text[i + 1] != '\n') ++i;
      continue;
    }
    if (c == '(' || c == '[' || c == '{') {
      if (open.size() >= static_cast<size_t>(kMaxNestingDepth)) {
        diags.error(at(i), nesting_message(), "name intermediate results with `let`, or move inner parts into a fn");
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

namespace {

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
                   type == GdlLexer::SLASHSLASH ? hint_for(type) : "", length);
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
      case GdlLexer::SLASHSLASH: return "comments start with '#'; '//' is floor division";
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

}  // namespace

std::shared_ptr<antlr4::ANTLRErrorStrategy> syntax_error_strategy(const SourceFile& file, DiagnosticSink& diags) {
  return std::make_shared<SyntaxErrors>(file, diags);
}

}  // namespace gdl::parsing
