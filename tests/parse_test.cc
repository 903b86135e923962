// Parser tests: every construct of docs/language.md is accepted with the
// right AST shape and positions; malformed and hostile input is rejected with
// a diagnostic at the right line:col, and never crashes.
#include <doctest/doctest.h>

#include <cstdio>
#include <fstream>
#include <iostream>
#include <sstream>
#include <string>

#include "frontend/ast_print.h"
#include "frontend/parse.h"
#include "frontend/source_loader.h"

namespace gdl {
namespace {

struct Parsed {
  std::unique_ptr<ast::Module> module;
  DiagnosticSink diags;
};

Parsed parse(std::string text) {
  Parsed out;
  SourceFile file = source_from_string("test.gdl", std::move(text));
  out.module = parse_module(file, out.diags);
  return out;
}

// Asserts that text is rejected and that the first diagnostic is an error at
// line:col whose message contains `message`.
void expect_error(const std::string& text, uint32_t line, uint32_t col, const std::string& message) {
  Parsed p = parse(text);
  CHECK(p.module == nullptr);
  REQUIRE(!p.diags.all().empty());
  const Diagnostic& d = p.diags.all().front();
  CHECK(d.severity == Severity::kError);
  CHECK(d.loc.line == line);
  CHECK(d.loc.col == col);
  CHECK_MESSAGE(d.message.find(message) != std::string::npos, "message was: " << d.message);
}

const ast::Expr& let_value(const ast::Module& m, size_t i) { return *m.body.at(i)->as<ast::LetStmt>().value; }

const char* kLanguageExample = R"(# Residual MLP decode step.
program mlp;

dim B in [1, 64] buckets(1, 8, 64);   # run-time batch, bounded
const H = 1024;
const L = 8;

param W    : f16[L, H, H];            # bound once, persists
param bias : f16[L, H];
input  x   : f16[B, H];               # bound by copy before each run
scalar alpha : f32 = 1.0;             # changed between runs, no recompilation
output y   : f16[B, H];

fn block(x: f16[B, H], w: f16[H, H], b: f16[H]) -> f16[B, H] {
  let h = layernorm(x, eps = 1e-5);
  return x + alpha * gelu(h @ w + b);
}

let h = x;
for l in 0..L {                       # compile-time range: unrolled
  h = block(h, W[l], bias[l]);
}
y = h;
)";

// ------------------------------------------------------------------ accepted

TEST_CASE("parse: the language sketch of docs/language.md") {
  Parsed p = parse(kLanguageExample);
  REQUIRE(p.module != nullptr);
  CHECK(p.diags.all().empty());
  const ast::Module& m = *p.module;
  CHECK(m.program_name == "mlp");
  CHECK(m.program_loc == SourceLoc{2, 9});

  REQUIRE(m.dims.size() == 1);
  const ast::DimDecl& dim = m.dims[0];
  CHECK(dim.name == "B");
  CHECK(dim.loc == SourceLoc{4, 1});
  CHECK(dim.lo->as<ast::IntLit>().value == 1);
  CHECK(dim.hi->as<ast::IntLit>().value == 64);
  REQUIRE(dim.buckets.size() == 3);
  CHECK(dim.buckets[2]->as<ast::IntLit>().value == 64);
  CHECK(dim.buckets_loc == SourceLoc{4, 18});
  CHECK(dim.policy.empty());

  REQUIRE(m.consts.size() == 2);
  CHECK(m.consts[0].name == "H");
  CHECK(m.consts[0].value->as<ast::IntLit>().value == 1024);
  CHECK(m.consts[1].name == "L");

  REQUIRE(m.tensors.size() == 5);
  CHECK(m.tensors[0].role == ast::TensorRole::kParam);
  CHECK(m.tensors[0].name == "W");
  CHECK(m.tensors[0].type.dtype == "f16");
  REQUIRE(m.tensors[0].type.dims.size() == 3);
  CHECK(m.tensors[0].type.dims[0]->as<ast::NameExpr>().name == "L");
  CHECK(m.tensors[1].name == "bias");
  CHECK(m.tensors[2].role == ast::TensorRole::kInput);
  CHECK(m.tensors[3].role == ast::TensorRole::kScalar);
  CHECK(m.tensors[3].name == "alpha");
  CHECK(m.tensors[3].type.dims.empty());
  REQUIRE(m.tensors[3].init != nullptr);
  CHECK(m.tensors[3].init->as<ast::FloatLit>().value == 1.0);
  CHECK(m.tensors[4].role == ast::TensorRole::kOutput);
  CHECK(m.tensors[4].init == nullptr);

  REQUIRE(m.fns.size() == 1);
  const ast::FnDecl& fn = m.fns[0];
  CHECK(fn.name == "block");
  REQUIRE(fn.params.size() == 3);
  CHECK(fn.params[1].name == "w");
  CHECK(fn.params[1].loc == SourceLoc{14, 24});
  CHECK(fn.params[2].type.dims.size() == 1);
  REQUIRE(fn.result != nullptr);
  CHECK(fn.result->dims.size() == 2);
  REQUIRE(fn.body.size() == 2);

  // let h = layernorm(x, eps = 1e-5);
  const auto& layernorm = fn.body[0]->as<ast::LetStmt>().value->as<ast::CallExpr>();
  CHECK(layernorm.callee == "layernorm");
  CHECK(layernorm.loc == SourceLoc{15, 11});
  CHECK(layernorm.length == std::string("layernorm(x, eps = 1e-5)").size());
  REQUIRE(layernorm.args.size() == 2);
  CHECK(layernorm.args[0].keyword.empty());
  CHECK(layernorm.args[1].keyword == "eps");
  CHECK(layernorm.args[1].loc == SourceLoc{15, 24});
  CHECK(layernorm.args[1].value->as<ast::FloatLit>().value == doctest::Approx(1e-5));

  // return x + alpha * gelu(h @ w + b);
  REQUIRE(fn.body[1]->kind == ast::StmtKind::kReturn);
  const auto& sum = fn.body[1]->as<ast::ReturnStmt>().value->as<ast::BinaryExpr>();
  CHECK(sum.op == ast::BinaryOp::kAdd);
  CHECK(sum.loc == SourceLoc{16, 12});
  CHECK(sum.length == std::string("x + alpha * gelu(h @ w + b)").size());
  const auto& scaled = sum.rhs->as<ast::BinaryExpr>();
  CHECK(scaled.op == ast::BinaryOp::kMul);
  const auto& gelu = scaled.rhs->as<ast::CallExpr>();
  CHECK(gelu.callee == "gelu");
  const auto& inner = gelu.args.at(0).value->as<ast::BinaryExpr>();
  CHECK(inner.op == ast::BinaryOp::kAdd);
  CHECK(inner.lhs->as<ast::BinaryExpr>().op == ast::BinaryOp::kMatMul);

  // The top-level body: let h, for l { h = block(...) }, y = h.
  REQUIRE(m.body.size() == 3);
  CHECK(m.body[0]->kind == ast::StmtKind::kLet);
  const auto& loop = m.body[1]->as<ast::ForStmt>();
  CHECK(loop.loc == SourceLoc{20, 1});
  CHECK(loop.var == "l");
  CHECK(loop.start->as<ast::IntLit>().value == 0);
  CHECK(loop.stop->as<ast::NameExpr>().name == "L");
  REQUIRE(loop.body.size() == 1);
  const auto& assign = loop.body[0]->as<ast::AssignStmt>();
  CHECK(assign.name == "h");
  CHECK(assign.loc == SourceLoc{21, 3});
  const auto& call = assign.value->as<ast::CallExpr>();
  CHECK(call.callee == "block");
  REQUIRE(call.args.size() == 3);
  const auto& w_l = call.args[1].value->as<ast::IndexExpr>();
  CHECK(w_l.loc == SourceLoc{21, 17});
  CHECK(w_l.base->as<ast::NameExpr>().name == "W");
  REQUIRE(w_l.subscripts.size() == 1);
  CHECK_FALSE(w_l.subscripts[0].is_slice);
  CHECK(w_l.subscripts[0].index->as<ast::NameExpr>().name == "l");
  CHECK(m.body[2]->as<ast::AssignStmt>().name == "y");
}

TEST_CASE("parse: a process group and collectives") {
  Parsed p = parse(
      "program tp;\ngroup world ranks(2 * N);\nconst N = 1;\ninput x : f32[4];\noutput y : f32[4];\n"
      "y = all_reduce(x, op = max);\n");
  REQUIRE(p.module != nullptr);
  CHECK(p.diags.all().empty());
  REQUIRE(p.module->groups.size() == 1);
  const ast::GroupDecl& g = p.module->groups[0];
  CHECK(g.name == "world");
  CHECK(g.loc == SourceLoc{2, 1});
  CHECK(g.name_loc == SourceLoc{2, 7});
  CHECK(g.ranks->kind == ast::ExprKind::kBinary);
  CHECK(print_ast(*p.module).find("(group world 2:1") != std::string::npos);
}

TEST_CASE("parse: the example in docs/language.md itself still parses") {
  std::ifstream in(std::string(GDL_SOURCE_DIR) + "/docs/language.md");
  REQUIRE(in.good());
  std::stringstream text;
  text << in.rdbuf();
  std::string doc = text.str();
  size_t begin = doc.find("```\n");
  REQUIRE(begin != std::string::npos);
  begin += 4;
  size_t end = doc.find("```", begin);
  Parsed p = parse(doc.substr(begin, end - begin));
  CHECK(p.diags.render(source_from_string("language.md", "")) == "");
  REQUIRE(p.module != nullptr);
  CHECK(p.module->program_name == "mlp");
  CHECK(p.module->fns.size() == 1);
}

TEST_CASE("parse: operator precedence and associativity") {
  Parsed p = parse(
      "program p;\n"
      "let r = a + b * c @ d;\n"
      "let s = -x[0];\n"
      "let t = a || b && c < d + e;\n"
      "let u = a - b - c;\n"
      "let v = !a == b;\n"
      "let w = (a + b) * c % 4 / 2;\n"
      "let z = --a;\n");
  REQUIRE(p.module != nullptr);
  const ast::Module& m = *p.module;

  // a + ((b * c) @ d): * and @ bind tighter than +, and are left-associative.
  const auto& r = let_value(m, 0).as<ast::BinaryExpr>();
  CHECK(r.op == ast::BinaryOp::kAdd);
  CHECK(r.loc == SourceLoc{2, 11});
  const auto& matmul = r.rhs->as<ast::BinaryExpr>();
  CHECK(matmul.op == ast::BinaryOp::kMatMul);
  CHECK(matmul.loc == SourceLoc{2, 19});
  CHECK(matmul.lhs->as<ast::BinaryExpr>().op == ast::BinaryOp::kMul);
  CHECK(matmul.rhs->as<ast::NameExpr>().name == "d");

  // -(x[0]): the subscript binds tighter than unary minus.
  const auto& s = let_value(m, 1).as<ast::UnaryExpr>();
  CHECK(s.op == ast::UnaryOp::kNeg);
  CHECK(s.loc == SourceLoc{3, 9});
  CHECK(s.length == 5);
  CHECK(s.operand->kind == ast::ExprKind::kIndex);

  // a || (b && (c < (d + e)))
  const auto& t = let_value(m, 2).as<ast::BinaryExpr>();
  CHECK(t.op == ast::BinaryOp::kOr);
  const auto& t_and = t.rhs->as<ast::BinaryExpr>();
  CHECK(t_and.op == ast::BinaryOp::kAnd);
  const auto& t_lt = t_and.rhs->as<ast::BinaryExpr>();
  CHECK(t_lt.op == ast::BinaryOp::kLt);
  CHECK(t_lt.rhs->as<ast::BinaryExpr>().op == ast::BinaryOp::kAdd);

  // (a - b) - c
  const auto& u = let_value(m, 3).as<ast::BinaryExpr>();
  CHECK(u.op == ast::BinaryOp::kSub);
  CHECK(u.lhs->as<ast::BinaryExpr>().op == ast::BinaryOp::kSub);
  CHECK(u.rhs->as<ast::NameExpr>().name == "c");

  // (!a) == b
  const auto& v = let_value(m, 4).as<ast::BinaryExpr>();
  CHECK(v.op == ast::BinaryOp::kEq);
  CHECK(v.lhs->as<ast::UnaryExpr>().op == ast::UnaryOp::kNot);

  // (((a + b) * c) % 4) / 2: parentheses regroup, and leave no node behind.
  const auto& w = let_value(m, 5).as<ast::BinaryExpr>();
  CHECK(w.op == ast::BinaryOp::kDiv);
  const auto& mod = w.lhs->as<ast::BinaryExpr>();
  CHECK(mod.op == ast::BinaryOp::kMod);
  const auto& mul = mod.lhs->as<ast::BinaryExpr>();
  CHECK(mul.op == ast::BinaryOp::kMul);
  CHECK(mul.lhs->as<ast::BinaryExpr>().op == ast::BinaryOp::kAdd);
  CHECK(mul.lhs->loc == SourceLoc{7, 12});
  CHECK(mul.lhs->length == 5);

  // -(-a), the outer minus first.
  const auto& z = let_value(m, 6).as<ast::UnaryExpr>();
  CHECK(z.loc == SourceLoc{8, 9});
  CHECK(z.operand->as<ast::UnaryExpr>().loc == SourceLoc{8, 10});
}

// The expression with every binary operator's grouping made explicit:
// "(a + (b * c))".
std::string grouped(const ast::Expr& e) {
  switch (e.kind) {
    case ast::ExprKind::kName: return e.as<ast::NameExpr>().name;
    case ast::ExprKind::kInt: return std::to_string(e.as<ast::IntLit>().value);
    case ast::ExprKind::kUnary: {
      const auto& u = e.as<ast::UnaryExpr>();
      return (u.op == ast::UnaryOp::kNeg ? "-" : "!") + grouped(*u.operand);
    }
    case ast::ExprKind::kBinary: {
      const auto& b = e.as<ast::BinaryExpr>();
      return "(" + grouped(*b.lhs) + " " + ast::binary_op_spelling(b.op) + " " + grouped(*b.rhs) + ")";
    }
    default: return "?";
  }
}

TEST_CASE("parse: integer operators take Python's precedence") {
  Parsed p = parse(
      "program p;\n"
      "let a = a | b ^ c & d << e + f * g // h % i;\n"
      "let b = x & 1 == 0;\n"
      "let c = a < b | c;\n"
      "let d = a >> b >> c << d;\n"
      "let e = a&&b&c||d|e;\n"
      "let f = a//b%-c;\n"
      "let g = a << b < c;\n");
  REQUIRE(p.module != nullptr);
  const ast::Module& m = *p.module;
  CHECK(grouped(let_value(m, 0)) == "(a | (b ^ (c & (d << (e + (((f * g) // h) % i))))))");
  CHECK(grouped(let_value(m, 1)) == "((x & 1) == 0)");  // C would compare first
  CHECK(grouped(let_value(m, 2)) == "(a < (b | c))");
  CHECK(grouped(let_value(m, 3)) == "(((a >> b) >> c) << d)");
  CHECK(grouped(let_value(m, 4)) == "((a && (b & c)) || (d | e))");  // && and || lex before & and |
  CHECK(grouped(let_value(m, 5)) == "((a // b) % -c)");
  CHECK(grouped(let_value(m, 6)) == "((a << b) < c)");
  // The operator's position is its first character.
  CHECK(let_value(m, 5).as<ast::BinaryExpr>().lhs->loc == SourceLoc{7, 10});
}

TEST_CASE("parse: subscripts, slices and lists") {
  Parsed p = parse(
      "program p;\n"
      "let a = x[:, 0:64, 3, 1:, :n];\n"
      "let b = reshape(x, [B, 32, 128]);\n"
      "let c = transpose(x, perm = [1, 0])[0][1:2];\n");
  REQUIRE(p.module != nullptr);
  const auto& a = let_value(*p.module, 0).as<ast::IndexExpr>();
  CHECK(a.loc == SourceLoc{2, 10});
  REQUIRE(a.subscripts.size() == 5);
  CHECK(a.subscripts[0].is_slice);
  CHECK(a.subscripts[0].start == nullptr);
  CHECK(a.subscripts[0].stop == nullptr);
  CHECK(a.subscripts[1].is_slice);
  CHECK(a.subscripts[1].start->as<ast::IntLit>().value == 0);
  CHECK(a.subscripts[1].stop->as<ast::IntLit>().value == 64);
  CHECK(a.subscripts[1].loc == SourceLoc{2, 14});
  CHECK_FALSE(a.subscripts[2].is_slice);
  CHECK(a.subscripts[2].index->as<ast::IntLit>().value == 3);
  CHECK(a.subscripts[3].start->as<ast::IntLit>().value == 1);
  CHECK(a.subscripts[3].stop == nullptr);
  CHECK(a.subscripts[4].start == nullptr);
  CHECK(a.subscripts[4].stop->as<ast::NameExpr>().name == "n");

  const auto& b = let_value(*p.module, 1).as<ast::CallExpr>();
  const auto& shape = b.args.at(1).value->as<ast::ListExpr>();
  CHECK(shape.loc == SourceLoc{3, 20});
  REQUIRE(shape.elements.size() == 3);
  CHECK(shape.elements[2]->as<ast::IntLit>().value == 128);

  // transpose(...)[0][1:2] is index(index(call)).
  const auto& c = let_value(*p.module, 2).as<ast::IndexExpr>();
  CHECK(c.subscripts.at(0).is_slice);
  const auto& c_inner = c.base->as<ast::IndexExpr>();
  CHECK(c_inner.base->as<ast::CallExpr>().args.at(1).keyword == "perm");
}

TEST_CASE("parse: statements, declarations, literals and comments") {
  Parsed p = parse(
      "# header comment\n"
      "program p;  # trailing\n"
      "dim S in [1, 4096] policy(update);\n"
      "let a : f32 = .5;\n"
      "const K = 2.5e3;\n"
      "if true { a = 1; } else if false { a = 2; } else { a = 3; }\n"
      "while a < 3 { a = a + 1; }\n"
      "print(a);\n"
      "param g : f16[4 * K];\n"
      "for i in 0..4 { if i == 0 { a = 1e-5; } }\n"
      "output o : bool;\n");
  REQUIRE(p.module != nullptr);
  const ast::Module& m = *p.module;
  CHECK(m.dims.at(0).policy == "update");
  CHECK(m.dims.at(0).policy_loc == SourceLoc{3, 27});
  CHECK(m.dims.at(0).buckets.empty());
  CHECK(m.consts.at(0).value->as<ast::FloatLit>().value == 2500.0);
  CHECK(m.tensors.size() == 2);
  CHECK(m.tensors[0].type.dims.at(0)->as<ast::BinaryExpr>().op == ast::BinaryOp::kMul);
  CHECK(m.tensors[1].type.dtype == "bool");
  REQUIRE(m.body.size() == 5);

  const auto& let = m.body[0]->as<ast::LetStmt>();
  REQUIRE(let.type != nullptr);
  CHECK(let.type->dtype == "f32");
  CHECK(let.value->as<ast::FloatLit>().value == 0.5);

  // else if nests an IfStmt alone in the else body.
  const auto& branch = m.body[1]->as<ast::IfStmt>();
  CHECK(branch.cond->as<ast::BoolLit>().value);
  CHECK(branch.has_else);
  REQUIRE(branch.else_body.size() == 1);
  const auto& else_if = branch.else_body[0]->as<ast::IfStmt>();
  CHECK(else_if.loc == SourceLoc{6, 25});
  CHECK_FALSE(else_if.cond->as<ast::BoolLit>().value);
  CHECK(else_if.has_else);
  CHECK(else_if.else_body.at(0)->as<ast::AssignStmt>().value->as<ast::IntLit>().value == 3);

  CHECK(m.body[2]->kind == ast::StmtKind::kWhile);
  CHECK(m.body[2]->as<ast::WhileStmt>().body.size() == 1);
  const auto& effect = m.body[3]->as<ast::ExprStmt>();
  CHECK(effect.loc == SourceLoc{8, 1});
  CHECK(effect.expr->as<ast::CallExpr>().callee == "print");
  const auto& loop = m.body[4]->as<ast::ForStmt>();
  CHECK(loop.stop->as<ast::IntLit>().value == 4);
  CHECK(loop.body.at(0)->kind == ast::StmtKind::kIf);
}

TEST_CASE("parse: a bare return and a long-but-legal nesting are accepted") {
  std::string braces = "program p;\nfn f() -> f32 {\n";
  for (int i = 0; i < kMaxNestingDepth - 1; ++i) braces += "if true {";
  braces += "return 1.0;";
  for (int i = 0; i < kMaxNestingDepth - 1; ++i) braces += "}";
  braces += "}\n";
  Parsed p = parse(braces);
  CHECK(p.module != nullptr);

  std::string parens = "program p;\nlet a = " + std::string(kMaxNestingDepth, '(') + "1" +
                       std::string(kMaxNestingDepth, ')') + ";\n";
  CHECK(parse(parens).module != nullptr);
}

TEST_CASE("parse: print_ast is stable and shows positions") {
  Parsed p = parse("program p;\nconst N = 2;\nlet y = f(x[:, 1], k = -1.0) + N;\n");
  REQUIRE(p.module != nullptr);
  CHECK(print_ast(*p.module) ==
        "(program p 1:9)\n"
        "(const N 2:1\n"
        "  (int 2 2:11))\n"
        "(body\n"
        "  (let y 3:1\n"
        "    (+ 3:30\n"
        "      (call f 3:9\n"
        "        (index 3:12\n"
        "          (name x 3:11)\n"
        "          (slice 3:13\n"
        "            _\n"
        "            _)\n"
        "          (at 3:16\n"
        "            (int 1 3:16)))\n"
        "        (kw k 3:20\n"
        "          (neg 3:24\n"
        "            (float 1.0 3:25))))\n"
        "      (name N 3:32))))\n");
}

// ------------------------------------------------------------------ rejected

TEST_CASE("parse: missing semicolons point just past the previous token") {
  expect_error("program p;\nconst H = 1024\nconst L = 8;\n", 2, 15, "expected ';' after declaration");
  expect_error("program p;\nlet a = b\nlet c = d;\n", 2, 10, "expected ';' after statement");
  expect_error("program p\nconst a = 1;\n", 1, 10, "expected ';' after the program name");
  expect_error("program p;\nfor i in 0..4 { x = 1 }\n", 2, 22, "expected ';' after statement");
}

TEST_CASE("parse: unbalanced brackets") {
  expect_error("program p;\nlet a = f(x;\nlet b = 2;\n", 2, 10, "unclosed '('");
  expect_error("program p;\nlet a = 1;)\n", 2, 11, "unmatched ')'");
  expect_error("program p;\nlet a = f(x];\n", 2, 12, "unmatched ']'");
  expect_error("program p;\nfn f() {\n  let a = g(x;\n}\n", 3, 12, "unclosed '('");
  expect_error("program p;\nfn f() {\n  let a = 1;\n", 2, 8, "unclosed '{'");
  // Brackets inside comments do not count.
  CHECK(parse("program p; # (((\nlet a = 1; # ]]\n").module != nullptr);
}

TEST_CASE("parse: stray characters and bad keyword use") {
  expect_error("program p;\nlet a = 1 $ 2;\n", 2, 11, "unexpected character '$'");
  expect_error("program p;\nlet a = 1; // note\n", 2, 12, "unexpected '//'");
  for (const char* text : {"program p;\nlet a = 1; // note\n", "// header\nprogram p;\n"})
    CHECK(parse(text).diags.all().front().hint == "comments start with '#'; '//' is floor division");
  expect_error("program p;\nlet x = \"hi\";\n", 2, 9, "unexpected character '\"'");
  expect_error("program p;\nlet a = 1 \xC3\xA9 2;\n", 2, 11, "unexpected character '\xC3\xA9'");
  expect_error("program p;\nlet in = 3;\n", 2, 5, "expected a name, found keyword 'in'");
  expect_error("program p;\nlet a = 1;\nelse { }\n", 3, 1, "unexpected 'else'");
  expect_error("program p;\nfn f() { fn g() {} }\n", 2, 10, "unexpected 'fn'");
  expect_error("program p;\nconst H = 1024 foo;\n", 2, 16, "unexpected 'foo'");
  expect_error("program p;\nlet a = 3 + ;\n", 2, 13, "expected an expression, found ';'");
  expect_error("program p;\nlet a = 1 +\n", 2, 12, "expected an expression, found end of file");
  expect_error("program p;\nconst H 1024;\n", 2, 9, "expected '=', found '1024'");
  expect_error("program p;\nlet a : = 1;\n", 2, 9, "expected a type such as f16[B, H], found '='");
  expect_error("program p;\nif x > 0 { y = 1; } else y = 2;\n", 2, 26, "expected '{' or 'if' after 'else'");
  expect_error("program p;\nfn f() { f(x) = 1; }\n", 2, 15, "only a name can be assigned to");
  expect_error("let a = 3;\n", 1, 1, "a program starts with `program NAME;`");
  expect_error("# nothing but a comment\n", 2, 1, "a program starts with `program NAME;`");
  expect_error("program p;\nlet a = f(x, axis = 1, y);\n", 2, 24, "positional argument after keyword");
  expect_error("program p;\ndim B in [1, 64] policy(fast);\n", 2, 25, "unknown dim policy 'fast'");
  expect_error("program p;\nparam W : f16[4] = 1.0;\n", 2, 18, "only a `scalar` declaration");
}

TEST_CASE("parse: one error per statement, no cascades, nothing printed") {
  // ANTLR's console listener would write to std::cerr; it must be gone.
  std::stringstream captured;
  std::streambuf* saved = std::cerr.rdbuf(captured.rdbuf());
  Parsed p = parse("program p;\nlet a = ;\ny = 2;\nz = 3 3;\n");
  std::cerr.rdbuf(saved);
  CHECK(captured.str().empty());
  CHECK(p.module == nullptr);
  REQUIRE(p.diags.all().size() == 2);
  CHECK(p.diags.all()[0].loc == SourceLoc{2, 9});
  CHECK(p.diags.all()[1].loc == SourceLoc{4, 7});
  CHECK(p.diags.all()[1].message == "unexpected '3'");
}

TEST_CASE("parse: 1000 nested parentheses give a diagnostic, not a crash") {
  std::string text = "program p;\nlet a = " + std::string(1000, '(') + "1" + std::string(1000, ')') + ";\n";
  // The 65th '(' is the first one too deep: "let a = " is 8 bytes.
  expect_error(text, 2, 8 + kMaxNestingDepth + 1, "nesting deeper than 64 levels");

  std::string braces = "program p;\n";
  for (int i = 0; i < 1000; ++i) braces += "if a {";
  braces += std::string(1000, '}');
  // Each "if a {" is 6 bytes; the 65th '{' is the first too deep.
  expect_error(braces, 2, 6 * (kMaxNestingDepth + 1), "nesting deeper than 64 levels");
}

TEST_CASE("parse: chains without brackets are bounded too") {
  std::string sum = "program p;\nlet a = x";
  for (int i = 0; i < 200000; ++i) sum += " + x";
  sum += ";\n";
  // The 256th '+' makes the tree 257 deep; '+' number k sits at column 4k + 7.
  expect_error(sum, 2, 4 * 256 + 7, "expression nests deeper than");

  // Minus signs nest from the innermost (rightmost) one; the 256th from the
  // right is the first too deep.
  expect_error("program p;\nlet a = " + std::string(100000, '-') + "x;\n", 2, 9 + 100000 - 256,
               "expression nests deeper than");

  std::string chain = "program p;\nif a { }";
  for (int i = 0; i < 200; ++i) chain += " else if a { }";
  Parsed p = parse(chain + "\n");
  CHECK(p.module == nullptr);
  REQUIRE(p.diags.all().size() == 1);
  CHECK(p.diags.all()[0].message == "nesting deeper than 64 levels");
}

TEST_CASE("parse: rejected bytes") {
  expect_error("", 1, 1, "empty file: a program starts with `program NAME;`");

  // 5 MiB: reported at the first byte past the 4 MiB limit.
  std::string line = "let a = 1;                                                     # padding\n";
  std::string big = "program p;\n";
  while (big.size() < (5u << 20)) big += line;
  SourceLoc limit = location_of_offset(big, kMaxSourceBytes);
  expect_error(big, limit.line, limit.col, "larger than 4 MiB");

  expect_error("program p;\nlet a = 1; # caf\xC3(\n", 2, 17, "invalid UTF-8 byte 0xC3");
  expect_error("program p;\n\xC0\xAF", 2, 1, "invalid UTF-8");        // overlong '/'
  expect_error("program p;\n# \xED\xA0\x80\n", 2, 3, "invalid UTF-8");  // a surrogate
  expect_error(std::string("program p;\nlet a") + '\0' + " = 1;\n", 2, 6, "NUL byte");
  expect_error("program p;\nlet a = 99999999999999999999;\n", 2, 9, "does not fit in 64 bits");

  // UTF-8 in comments and a byte order mark are fine.
  CHECK(parse("\xEF\xBB\xBFprogram p; # caf\xC3\xA9 \xE2\x9C\x93\nlet a = 9223372036854775807;\n").module != nullptr);
}

TEST_CASE("load_source: reads files and reports what it cannot read") {
  DiagnosticSink diags;
  std::string fatal;
  CHECK_FALSE(load_source("/nonexistent/dir/x.gdl", diags, &fatal).has_value());
  CHECK(fatal.rfind("/nonexistent/dir/x.gdl: error: cannot read file: ", 0) == 0);
  CHECK(fatal.find("No such file") != std::string::npos);

  std::string path = std::string(GDL_BINARY_DIR) + "/parse_test_source.gdl";
  {
    std::ofstream out(path, std::ios::binary);
    out << "program ok;\nconst N = 3;\n";
  }
  fatal.clear();
  auto file = load_source(path, diags, &fatal);
  REQUIRE(file.has_value());
  CHECK(fatal.empty());
  CHECK(file->line(2) == "const N = 3;");
  auto module = parse_module(*file, diags);
  REQUIRE(module != nullptr);
  CHECK(module->program_name == "ok");

  {
    std::ofstream out(path, std::ios::binary);
    out << "program ok;\n\xFF\n";
  }
  CHECK_FALSE(load_source(path, diags, &fatal).has_value());
  REQUIRE(diags.all().size() == 1);
  CHECK(diags.all()[0].loc == SourceLoc{2, 1});
  std::remove(path.c_str());
}

}  // namespace
}  // namespace gdl
