// The elaborator's state and steps (lower.h has the entry point). Its member
// functions are defined in lower.cc (the walk over statements and
// expressions, values, coercions), declarations.cc (dims, consts, declared
// types, leaves, fn signatures) and calls.cc (calls of fns and standard
// ops, operators and subscripts through the op table).
#pragma once

#include <cstdint>
#include <cstdio>
#include <map>
#include <optional>
#include <set>
#include <string>
#include <vector>

#include "autodiff/gradient.h"
#include "frontend/ast.h"
#include "frontend/check.h"
#include "frontend/diagnostics.h"
#include "ir.h"
#include "lower/lower.h"
#include "ops/op_def.h"

namespace gdl::lowering {

// ------------------------------------------------------------------- values

struct Value {
  enum class Kind { kError, kInt, kFloat, kBool, kTensor, kDim, kList };
  Kind kind = Kind::kError;
  int64_t i = 0;
  double f = 0;
  bool b = false;
  ir::ValueId id = ir::kNoValue;
  int dim = -1;       // kDim: index into Graph::dims
  bool weak = false;  // kTensor from a run-time scalar: adapts to the other side's float dtype
  std::vector<Value> list;
  SourceLoc loc;
  uint32_t length = 1;

  bool ok() const { return kind != Kind::kError; }
  bool is_static() const { return kind == Kind::kInt || kind == Kind::kFloat || kind == Kind::kBool; }
  bool is_number() const { return kind == Kind::kInt || kind == Kind::kFloat; }
  bool is_tensor() const { return kind == Kind::kTensor; }
  double number() const { return kind == Kind::kInt ? static_cast<double>(i) : f; }

  static Value error() { return {}; }
  static Value integer(int64_t v) {
    Value r;
    r.kind = Kind::kInt;
    r.i = v;
    return r;
  }
  static Value real(double v) {
    Value r;
    r.kind = Kind::kFloat;
    r.f = v;
    return r;
  }
  static Value boolean(bool v) {
    Value r;
    r.kind = Kind::kBool;
    r.b = v;
    return r;
  }
  static Value tensor(ir::ValueId id) {
    Value r;
    r.kind = Kind::kTensor;
    r.id = id;
    return r;
  }
};

inline std::string number_text(double v) {
  char buf[64];
  std::snprintf(buf, sizeof buf, "%g", v);
  std::string s = buf;
  if (s.find_first_of(".eEn") == std::string::npos) s += ".0";
  return s;
}

// Where an expression starts (a binary node is located at its operator).
inline SourceLoc start_of(const ast::Expr& e) {
  switch (e.kind) {
    case ast::ExprKind::kBinary: return start_of(*e.as<ast::BinaryExpr>().lhs);
    case ast::ExprKind::kIndex: return start_of(*e.as<ast::IndexExpr>().base);
    default: return e.loc;
  }
}

inline std::string signature_text(const std::string& name, const std::vector<std::string>& params) {
  std::string s = name + "(";
  for (size_t i = 0; i < params.size(); ++i) s += (i ? ", " : "") + params[i];
  return s + ")";
}

inline ir::Op binary_ir_op(ast::BinaryOp op) {
  switch (op) {
    case ast::BinaryOp::kAdd: return ir::Op::kAdd;
    case ast::BinaryOp::kSub: return ir::Op::kSub;
    case ast::BinaryOp::kMul: return ir::Op::kMul;
    case ast::BinaryOp::kDiv: return ir::Op::kDiv;
    case ast::BinaryOp::kFloorDiv: return ir::Op::kFloorDiv;
    case ast::BinaryOp::kMod: return ir::Op::kMod;
    case ast::BinaryOp::kBitAnd: return ir::Op::kBitAnd;
    case ast::BinaryOp::kBitOr: return ir::Op::kBitOr;
    case ast::BinaryOp::kBitXor: return ir::Op::kBitXor;
    case ast::BinaryOp::kShl: return ir::Op::kShl;
    case ast::BinaryOp::kShr: return ir::Op::kShr;
    case ast::BinaryOp::kLt: return ir::Op::kLt;
    case ast::BinaryOp::kLe: return ir::Op::kLe;
    case ast::BinaryOp::kGt: return ir::Op::kGt;
    case ast::BinaryOp::kGe: return ir::Op::kGe;
    case ast::BinaryOp::kEq: return ir::Op::kEq;
    case ast::BinaryOp::kNe: return ir::Op::kNe;
    case ast::BinaryOp::kAnd: return ir::Op::kAnd;
    case ast::BinaryOp::kOr: return ir::Op::kOr;
    case ast::BinaryOp::kMatMul: return ir::Op::kMatMul;
  }
  return ir::Op::kMatMul;  // not reached: the cases cover every operator
}

// // % & | ^ << >>: integers only, folded at compile time through the op
// table's exact integer rule.
inline bool is_integer_operator(ast::BinaryOp op) {
  switch (op) {
    case ast::BinaryOp::kFloorDiv: case ast::BinaryOp::kMod: case ast::BinaryOp::kBitAnd:
    case ast::BinaryOp::kBitOr: case ast::BinaryOp::kBitXor: case ast::BinaryOp::kShl: case ast::BinaryOp::kShr:
      return true;
    default:
      return false;
  }
}

// ------------------------------------------------------------------ lowerer

struct Frame {
  const ast::FnDecl* fn = nullptr;  // null: the program body
  std::vector<std::map<std::string, Value>> scopes;
  std::map<std::string, DType> dtypes;  // a generic fn's dtype parameters, as this call bound them
  std::optional<Value> result;
};

struct ConstInfo {
  const ast::ConstDecl* decl = nullptr;
  int state = 0;  // 0 = not evaluated, 1 = being evaluated, 2 = done
  Value value;
};

struct TensorInfo {
  const ast::TensorDecl* decl = nullptr;
  std::optional<TensorType> type;
  ir::ValueId leaf = ir::kNoValue;
  // outputs: the value once assigned; states: the current value (the leaf until assigned)
  bool assigned = false;
  ir::ValueId value = ir::kNoValue;
};

struct FnInfo {
  const ast::FnDecl* decl = nullptr;
  FnTypeParams generics;  // empty: every type is fixed at the declaration
  // Resolved once; nullopt for a type that names a type parameter, which
  // each call resolves (`generic` says which).
  std::vector<std::optional<TensorType>> params;
  std::vector<bool> generic;
  std::optional<TensorType> result;
  bool generic_result = false;
  bool signature_ok = true;
};

// One call's bindings of a generic fn's type parameters, left to right.
struct TypeBindings {
  std::map<std::string, Value> dims;  // a compile-time integer or a run-time dim
  std::map<std::string, DType> dtypes;
  std::map<std::string, std::string> by;  // the parameter whose argument bound each name
};

class CallQuery;

class Lowerer {
 public:
  Lowerer(const ast::Module& m, DiagnosticSink& d) : m_(m), diags_(d) {}
  std::optional<ir::Graph> run();

 private:
  friend class CallQuery;

  // ------------------------------------------------------ lower.cc: values
  Value fail(SourceLoc loc, std::string message, std::string hint = {}, uint32_t length = 1);
  std::string text(const TensorType& t) const { return type_to_string(t, graph_.dims); }
  TensorType type_of(const Value& v) const { return graph_.node(v.id).type; }
  std::string describe(const Value& v) const;
  // Stops the whole elaboration once a limit is hit; reported once, at the
  // statement of the program body that was running (the outermost loop or call).
  void abort(SourceLoc loc, const std::string& message, const std::string& hint);
  bool step(SourceLoc loc);
  // Checks the result type (rank, element bound, graph size) and adds the node.
  Value emit(ir::Op op, std::vector<ir::ValueId> args, TensorType type, SourceLoc loc, uint32_t length,
             ir::Attrs attrs = {});
  bool within_element_bound(const TensorType& t, SourceLoc loc, uint32_t length);
  // A compile-time value as a rank-0 constant of dtype (the weak side of a
  // binary op takes the other side's dtype).
  Value constant(const Value& v, DType dtype);
  Value cast_to(const Value& v, DType dtype, SourceLoc loc, uint32_t length);
  // Makes a and b tensors of one dtype for an elementwise op: a compile-time
  // value becomes a constant of the tensor's dtype, a weak scalar follows the
  // other side's float dtype. Reports at loc (the operator).
  bool unify(Value& a, Value& b, const std::string& what, SourceLoc loc, uint32_t length);
  // A value that an op needs as a tensor (or a compile-time value it will
  // turn into a constant). Lists and dims are reported here.
  // An operand: a run-time dim becomes its value this run (a dim_value leaf).
  bool operand_ok(Value& v, const std::string& what);
  bool need_tensor(Value& v, const std::string& what);
  std::optional<int64_t> static_int(const Value& v, const std::string& what);
  std::optional<double> static_number(const Value& v, const std::string& what);
  std::optional<bool> static_bool(const Value& v, const std::string& what);

  // -------------------------------------------------- declarations.cc
  void lower_dims();
  void lower_group();
  Value const_value(const std::string& name);
  // A dtype name: a type, or a dtype parameter of the fn being inlined.
  std::optional<DType> dtype_named(const std::string& name) const;
  std::optional<DType> resolve_dtype(const ast::TypeExpr& t);
  // A shape dim's value as a Dim: a compile-time integer >= 1 or a run-time dim.
  std::optional<Dim> shape_dim(const Value& v, const ast::Expr& e);
  std::optional<TensorType> resolve_type(const ast::TypeExpr& t);
  void lower_leaves();
  void resolve_signature(const ast::FnDecl& f);

  // --------------------------------------------------- lower.cc: statements
  Frame& frame() { return frames_.back(); }
  Value* find_local(const std::string& name);
  void name_value(const Value& v, const std::string& name);
  void exec_block(const ast::Block& block);
  void exec_scoped(const ast::Block& block);
  void exec(const ast::Stmt& s);
  std::optional<int64_t> loop_bound(const ast::Expr& e);
  void exec_for(const ast::ForStmt& f);
  // A value checked against a declared type. A compile-time value stays
  // compile-time when the type is rank 0 and can hold it; a weak scalar
  // follows a rank-0 float type.
  Value conform(Value v, const TensorType& t, const std::string& what, const ast::Expr& source);
  void assign_output(TensorInfo& out, const Value& value, const ast::AssignStmt& a);
  void collect_outputs();
  // `name[subscripts] = value`: `base` with the region replaced (update_slice).
  Value assign_region(const Value& base, const Value& value, const ast::AssignStmt& a);
  // States whose value the program changed, into Graph::state_updates.
  void collect_state_updates();

  // -------------------------------------------------- lower.cc: expressions
  Value eval(const ast::Expr& e);
  Value eval_inner(const ast::Expr& e);
  // The value's position for later diagnostics is the whole expression.
  static Value located(Value v, const ast::Expr& e);
  Value lookup(const ast::NameExpr& n);
  // Arithmetic on two compile-time values.
  Value fold(ast::BinaryOp op, const Value& a, const Value& b, SourceLoc loc);
  // A compile-time float result; inf and NaN are reported.
  Value finite(double v, SourceLoc loc, uint32_t length);

  // ----------------------------------------------------------- calls.cc
  Value unary(const ast::UnaryExpr& u);
  Value binary(ast::BinaryOp op, Value a, Value b, SourceLoc loc);
  Value index(const ast::IndexExpr& ix);
  Value static_slice(const ast::IndexExpr& ix, const Value& base, const Value& bounds,
                     const std::vector<ops::SubscriptForm>& forms);
  // Puts keyword argument `a` into its parameter's slot; false after
  // reporting an unknown or repeated keyword (with `usage` as the hint).
  bool bind_keyword(const ast::Arg& a, const std::string& callee, const std::vector<std::string>& params,
                    const std::string& usage, std::vector<const ast::Arg*>& slots);
  // Matches call arguments to parameter slots; nullopt after reporting.
  std::optional<std::vector<const ast::Arg*>> bind_args(const ast::CallExpr& c, const std::vector<std::string>& params,
                                                        size_t required, const std::string& kind);
  Value call(const ast::CallExpr& c);
  Value inline_fn(const FnInfo& fn, const ast::CallExpr& c);
  // A generic parameter's argument: binds the type parameters it is the
  // first to give, checks the rest against the bindings so far, and conforms
  // the value to the type that results. Reports at the argument.
  Value bind_generic(const FnInfo& fn, size_t k, Value v, const ast::Expr& arg, TypeBindings& b);
  // A dim of a generic signature that binds nothing, evaluated with the
  // shape parameters bound so far (and the globals); `what` names the place.
  std::optional<Dim> bound_dim(const FnInfo& fn, const ast::Expr& e, const TypeBindings& b, const std::string& what,
                               SourceLoc at, uint32_t length);
  std::string dim_text(const Dim& d) const;
  // "D = 64 from argument 'x'" for each shape parameter that e uses.
  std::string bindings_text(const ast::Expr& e, const TypeBindings& b) const;
  // A standard op's call: its parameters bind the arguments, then its type
  // rule checks them (elementwise ops through `elementwise`).
  Value call_op(const ops::OpDef& def, const ast::CallExpr& c);
  Value call_variadic(const ops::OpDef& def, const ast::CallExpr& c);
  Value cast(CallQuery& q);
  // The call's type by its op's rule, or nullopt after reporting why not.
  std::optional<TensorType> infer(CallQuery& q);
  // rand / randn: the node reads the rng state and takes the next slice of
  // its counters. bernoulli and dropout (ops::Expansion) are written around
  // such a uniform draw, so every random op shares its definition.
  Value random(CallQuery& q);
  // grad(loss, wrt): the backward's nodes (autodiff/gradient.h), sharing
  // what earlier grad calls of the same loss built (backwards_).
  Value gradient(CallQuery& q);
  Value draw(ir::Op op, const TensorType& type, SourceLoc loc, uint32_t length);
  // A bool mask of `shape`, true with probability p: rand(shape) < p.
  Value uniform_below(const Shape& shape, double p, SourceLoc loc, uint32_t length);
  ir::ValueId rng_state();  // the `rng.state` leaf, declared at the first random op
  // The op's type rule on the arguments in `q`, then its node; a mistake is
  // reported where the rule points.
  Value apply(CallQuery& q);
  // An elementwise op on its operands in `q`: compile-time operands folded
  // (unary ops and binary calls), else `apply`; the result is weak when the
  // op computes from its operands' elements alone and every operand is
  // weak or compile-time.
  Value elementwise(CallQuery& q);
  // Compile-time folding of a standard call on numbers (exp(2.0), min(1, 2)).
  Value fold_call(const ops::OpDef& def, const std::string& name, const std::vector<Value>& operands, SourceLoc loc,
                  uint32_t length);

  const ast::Module& m_;
  DiagnosticSink& diags_;
  ir::Graph graph_;
  std::map<std::string, SourceLoc> state_loc_;  // each state's last assignment
  autodiff::Backwards backwards_;
  ir::ValueId rng_leaf_ = ir::kNoValue;
  int64_t rng_counters_ = 0;  // Philox counters the random ops so far take per run
  std::map<std::string, int> dims_;
  std::map<std::string, ConstInfo> consts_;
  std::map<std::string, TensorInfo> tensors_;
  std::map<std::string, FnInfo> fns_;
  std::set<std::string> global_names_;  // for the fns' type parameters
  std::vector<Frame> frames_;
  SourceLoc top_statement_;  // the statement of the program body being run
  int64_t steps_ = 0;
  int eval_depth_ = 0;
  std::vector<std::string> const_chain_;  // the consts being evaluated, outermost first
  bool const_chain_too_deep_ = false;
  bool const_chain_reported_ = false;
  int scalar_count_ = 0;
  bool aborted_ = false;
  bool unassigned_unreliable_ = false;  // an `if` was not folded: outputs may be missing for that reason
};

}  // namespace gdl::lowering
