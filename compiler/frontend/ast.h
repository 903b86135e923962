// The gdl abstract syntax tree. Produced by parse.cc (the only file that sees
// ANTLR), consumed by check.cc and lower.cc. Every node carries its SourceLoc;
// children are owned by unique_ptr. The AST is syntax only: no names are
// resolved and no types are known here.
#pragma once

#include <cstdint>
#include <memory>
#include <string>
#include <vector>

#include "frontend/source.h"

namespace gdl::ast {

// ---------------------------------------------------------------- expressions

enum class ExprKind { kInt, kFloat, kBool, kName, kUnary, kBinary, kCall, kIndex, kList };

struct Expr {
  explicit Expr(ExprKind k, SourceLoc l) : kind(k), loc(l) {}
  virtual ~Expr() = default;
  ExprKind kind;
  SourceLoc loc;
  uint32_t length = 1;  // source bytes covered, for the caret span

  template <typename T> const T& as() const { return static_cast<const T&>(*this); }
  template <typename T> T& as() { return static_cast<T&>(*this); }
};
using ExprPtr = std::unique_ptr<Expr>;

struct IntLit : Expr {
  IntLit(SourceLoc l, int64_t v) : Expr(ExprKind::kInt, l), value(v) {}
  int64_t value;
};

struct FloatLit : Expr {
  FloatLit(SourceLoc l, double v) : Expr(ExprKind::kFloat, l), value(v) {}
  double value;
};

struct BoolLit : Expr {
  BoolLit(SourceLoc l, bool v) : Expr(ExprKind::kBool, l), value(v) {}
  bool value;
};

struct NameExpr : Expr {
  NameExpr(SourceLoc l, std::string n) : Expr(ExprKind::kName, l), name(std::move(n)) {}
  std::string name;
};

enum class UnaryOp { kNeg, kNot };

struct UnaryExpr : Expr {
  UnaryExpr(SourceLoc l, UnaryOp o, ExprPtr e) : Expr(ExprKind::kUnary, l), op(o), operand(std::move(e)) {}
  UnaryOp op;
  ExprPtr operand;
};

// kFloorDiv (//), kMod (%) and the bitwise operators are for integers:
// compile-time ones and i32 tensors.
enum class BinaryOp {
  kAdd, kSub, kMul, kDiv, kFloorDiv, kMod, kMatMul,
  kBitAnd, kBitOr, kBitXor, kShl, kShr,
  kLt, kLe, kGt, kGe, kEq, kNe, kAnd, kOr,
};
const char* binary_op_spelling(BinaryOp op);  // "+", "@", "&&", ...

struct BinaryExpr : Expr {
  BinaryExpr(SourceLoc l, BinaryOp o, ExprPtr a, ExprPtr b)
      : Expr(ExprKind::kBinary, l), op(o), lhs(std::move(a)), rhs(std::move(b)) {}
  BinaryOp op;  // loc is the operator token's position
  ExprPtr lhs, rhs;
};

// One call argument: positional when keyword is empty.
struct Arg {
  std::string keyword;
  SourceLoc loc;  // the keyword's position, or the value's for a positional one
  ExprPtr value;
};

struct CallExpr : Expr {
  CallExpr(SourceLoc l, std::string c) : Expr(ExprKind::kCall, l), callee(std::move(c)) {}
  std::string callee;  // loc is the callee name's position
  std::vector<Arg> args;
};

// One subscript: `i` (is_slice = false, index set) or `a:b`, `:`, `a:`, `:b`
// (is_slice = true, start/stop null when omitted).
struct Subscript {
  SourceLoc loc;
  bool is_slice = false;
  ExprPtr index;
  ExprPtr start, stop;
};

struct IndexExpr : Expr {
  IndexExpr(SourceLoc l, ExprPtr b) : Expr(ExprKind::kIndex, l), base(std::move(b)) {}
  ExprPtr base;  // loc is the '[' position
  std::vector<Subscript> subscripts;
};

// `[a, b, c]`: shapes and permutations given to reshape/transpose.
struct ListExpr : Expr {
  explicit ListExpr(SourceLoc l) : Expr(ExprKind::kList, l) {}
  std::vector<ExprPtr> elements;
};

// ---------------------------------------------------------------------- types

// `f16[B, H]`, or `f32` alone for a rank-0 value. dims are expressions that
// must evaluate at compile time to an integer or name a declared `dim`.
struct TypeExpr {
  SourceLoc loc;
  std::string dtype;  // spelled as in the source; the checker validates it
  SourceLoc dtype_loc;
  std::vector<ExprPtr> dims;
};

// ----------------------------------------------------------------- statements

enum class StmtKind { kLet, kAssign, kFor, kIf, kWhile, kReturn, kExpr };

struct Stmt {
  Stmt(StmtKind k, SourceLoc l) : kind(k), loc(l) {}
  virtual ~Stmt() = default;
  StmtKind kind;
  SourceLoc loc;  // the statement's first token

  template <typename T> const T& as() const { return static_cast<const T&>(*this); }
  template <typename T> T& as() { return static_cast<T&>(*this); }
};
using StmtPtr = std::unique_ptr<Stmt>;
using Block = std::vector<StmtPtr>;

// let name = value;   or   let name : type = value;
struct LetStmt : Stmt {
  explicit LetStmt(SourceLoc l) : Stmt(StmtKind::kLet, l) {}
  std::string name;
  SourceLoc name_loc;
  std::unique_ptr<TypeExpr> type;  // optional annotation
  ExprPtr value;
};

// name = value;   (re-binds a let, assigns an output or a state)
// name[subscripts] = value;   (replaces a region of a let or a state)
struct AssignStmt : Stmt {
  explicit AssignStmt(SourceLoc l) : Stmt(StmtKind::kAssign, l) {}
  std::string name;
  SourceLoc name_loc;
  ExprPtr target;  // the subscripted form: an IndexExpr over `name`; null for `name = value`
  ExprPtr value;
};

// for var in start..stop { body }   (stop exclusive; both must be compile-time)
struct ForStmt : Stmt {
  explicit ForStmt(SourceLoc l) : Stmt(StmtKind::kFor, l) {}
  std::string var;
  SourceLoc var_loc;
  ExprPtr start, stop;
  Block body;
};

// if cond { then } else { otherwise }   (`else if` nests an IfStmt in otherwise)
struct IfStmt : Stmt {
  explicit IfStmt(SourceLoc l) : Stmt(StmtKind::kIf, l) {}
  ExprPtr cond;
  Block then_body;
  Block else_body;
  bool has_else = false;
};

// while cond { body }: parsed only so the checker can reject it with a reason.
struct WhileStmt : Stmt {
  explicit WhileStmt(SourceLoc l) : Stmt(StmtKind::kWhile, l) {}
  ExprPtr cond;
  Block body;
};

struct ReturnStmt : Stmt {
  explicit ReturnStmt(SourceLoc l) : Stmt(StmtKind::kReturn, l) {}
  ExprPtr value;
};

// A bare call such as `print(x);`: rejected by the checker (no effect, or a
// host side effect that a graph replay cannot perform).
struct ExprStmt : Stmt {
  explicit ExprStmt(SourceLoc l) : Stmt(StmtKind::kExpr, l) {}
  ExprPtr expr;
};

// --------------------------------------------------------------- declarations

// dim B in [lo, hi] buckets(b1, b2, ...) policy(update);
struct DimDecl {
  SourceLoc loc;
  std::string name;
  SourceLoc name_loc;
  ExprPtr lo, hi;
  std::vector<ExprPtr> buckets;  // empty: default buckets chosen by the compiler
  SourceLoc buckets_loc;
  std::string policy;            // "", "buckets" or "update"
  SourceLoc policy_loc;
};

// group NAME ranks(expr);
struct GroupDecl {
  SourceLoc loc;
  std::string name;
  SourceLoc name_loc;
  ExprPtr ranks;
};

// const NAME = expr;
struct ConstDecl {
  SourceLoc loc;
  std::string name;
  SourceLoc name_loc;
  ExprPtr value;
};

enum class TensorRole { kParam, kInput, kOutput, kScalar, kState };

// param W : f16[L, H, H];  input x : f16[B, H];  output y : f16[B, H];
// scalar alpha : f32 = 1.0;  state cache : f16[S, D];
struct TensorDecl {
  SourceLoc loc;
  TensorRole role;
  std::string name;
  SourceLoc name_loc;
  TypeExpr type;
  ExprPtr init;  // scalar default value; null otherwise
};

struct FnParam {
  std::string name;
  SourceLoc loc;
  TypeExpr type;
};

// fn name(a: T, b: T) -> T { body }
struct FnDecl {
  SourceLoc loc;
  std::string name;
  SourceLoc name_loc;
  std::vector<FnParam> params;
  std::unique_ptr<TypeExpr> result;  // optional
  Block body;
};

// The whole file. Declarations keep their source order inside each list; the
// top-level statements form the program's body, in order.
struct Module {
  std::string program_name;
  SourceLoc program_loc;
  std::vector<DimDecl> dims;
  std::vector<GroupDecl> groups;
  std::vector<ConstDecl> consts;
  std::vector<TensorDecl> tensors;
  std::vector<FnDecl> fns;
  Block body;
};

}  // namespace gdl::ast
