// lower_module: the elaborator that turns a checked AST into the IR graph.
//
// 1. Dims: evaluate bounds and buckets (compile-time integers), check
//    1 <= lo <= hi, buckets ascending inside [lo, hi] and ending at hi
//    (default: powers of two from the first one >= lo, then hi), the policy;
//    at most kMaxRuntimeDims dims (and kMaxScalars run-time scalars, step 3),
//    which is what the kernels' gdl_args holds.
// 2. Consts: evaluated on first use (declarations come in any order), and
//    once each in declaration order so that unused ones are checked too.
// 3. Leaves: one input/param/scalar node per declaration, in declaration
//    order, even when unused; declared types are resolved here (dtype, shape
//    of compile-time extents and run-time dims, rank <= 4, element count
//    within 2^31-1 with every run-time dim at its upper bound).
// 4. Fn signatures: parameter and result types, resolved once.
// 5. The program body runs statement by statement over a stack of frames
//    (one per inlined fn call) of block scopes. Values are either compile-time
//    (int, float, bool: computed here), run-time dims (shape names only),
//    lists (shapes, permutations) or tensors (IR nodes). `for` is unrolled,
//    `if` is folded, a fn call is inlined in a fresh frame with its arguments
//    checked against the parameter types. Every op checks dtypes and shapes
//    and emits its node(s), located at the source expression.
// 6. Outputs, in declaration order, checked against their declared types.
//
// An error yields an error value that every later check passes on silently,
// so one mistake gives one diagnostic; the walk goes on to find the others.
// Hostile input is bounded: loop iterations, IR nodes, statements run, and
// inlining depth all have limits (lower.h).
#include "lower/lower.h"

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <limits>
#include <map>

#include "passes/padding.h"
#include "frontend/check.h"
#include "codegen/codegen.h"  // kMaxRuntimeDims, kMaxScalars: what the kernel ABI's gdl_args holds

namespace gdl {

namespace {

// ----------------------------------------------------------- the standard ops

enum class StdKind {
  kUnary,
  kBinary,
  kMax,
  kWhere,
  kCast,
  kMatMul,
  kReduce,
  kSoftmax,
  kLayerNorm,
  kRmsNorm,
  kTranspose,
  kReshape,
  kConcat,
  kGather,
  kAttention,
};

struct StdOp {
  const char* name;
  StdKind kind;
  ir::Op op;
  std::vector<std::string> params;
  size_t required;
};

const std::vector<StdOp>& std_ops() {
  using ir::Op;
  static const std::vector<StdOp> kOps = {
      {"exp", StdKind::kUnary, Op::kExp, {"x"}, 1},
      {"log", StdKind::kUnary, Op::kLog, {"x"}, 1},
      {"sqrt", StdKind::kUnary, Op::kSqrt, {"x"}, 1},
      {"rsqrt", StdKind::kUnary, Op::kRsqrt, {"x"}, 1},
      {"tanh", StdKind::kUnary, Op::kTanh, {"x"}, 1},
      {"sigmoid", StdKind::kUnary, Op::kSigmoid, {"x"}, 1},
      {"relu", StdKind::kUnary, Op::kRelu, {"x"}, 1},
      {"gelu", StdKind::kUnary, Op::kGelu, {"x"}, 1},
      {"silu", StdKind::kUnary, Op::kSilu, {"x"}, 1},
      {"abs", StdKind::kUnary, Op::kAbs, {"x"}, 1},
      {"min", StdKind::kBinary, Op::kMin, {"a", "b"}, 2},
      {"pow", StdKind::kBinary, Op::kPow, {"a", "b"}, 2},
      {"max", StdKind::kMax, Op::kMax, {"x", "b", "axis", "keepdims"}, 1},
      {"where", StdKind::kWhere, Op::kWhere, {"cond", "a", "b"}, 3},
      {"cast", StdKind::kCast, Op::kCast, {"x", "dtype"}, 2},
      {"matmul", StdKind::kMatMul, Op::kMatMul, {"a", "b"}, 2},
      {"sum", StdKind::kReduce, Op::kSum, {"x", "axis", "keepdims"}, 1},
      {"mean", StdKind::kReduce, Op::kMean, {"x", "axis", "keepdims"}, 1},
      {"softmax", StdKind::kSoftmax, Op::kSoftmax, {"x", "axis"}, 1},
      {"layernorm", StdKind::kLayerNorm, Op::kLayerNorm, {"x", "weight", "bias", "eps"}, 1},
      {"rmsnorm", StdKind::kRmsNorm, Op::kRmsNorm, {"x", "weight", "eps"}, 1},
      {"transpose", StdKind::kTranspose, Op::kTranspose, {"x", "perm"}, 1},
      {"reshape", StdKind::kReshape, Op::kReshape, {"x", "shape"}, 2},
      {"concat", StdKind::kConcat, Op::kConcat, {"axis"}, 0},
      {"gather", StdKind::kGather, Op::kGather, {"table", "ids"}, 2},
      {"attention", StdKind::kAttention, Op::kAttention, {"q", "k", "v", "len", "scale"}, 4},
  };
  return kOps;
}

const StdOp* find_std_op(std::string_view name) {
  for (const StdOp& op : std_ops())
    if (name == op.name) return &op;
  return nullptr;
}

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

std::string number_text(double v) {
  char buf[64];
  std::snprintf(buf, sizeof buf, "%g", v);
  std::string s = buf;
  if (s.find_first_of(".eEn") == std::string::npos) s += ".0";
  return s;
}

// Where an expression starts (a binary node is located at its operator).
SourceLoc start_of(const ast::Expr& e) {
  switch (e.kind) {
    case ast::ExprKind::kBinary: return start_of(*e.as<ast::BinaryExpr>().lhs);
    case ast::ExprKind::kIndex: return start_of(*e.as<ast::IndexExpr>().base);
    default: return e.loc;
  }
}

std::string signature_text(const std::string& name, const std::vector<std::string>& params) {
  std::string s = name + "(";
  for (size_t i = 0; i < params.size(); ++i) s += (i ? ", " : "") + params[i];
  return s + ")";
}

ir::Op binary_ir_op(ast::BinaryOp op) {
  switch (op) {
    case ast::BinaryOp::kAdd: return ir::Op::kAdd;
    case ast::BinaryOp::kSub: return ir::Op::kSub;
    case ast::BinaryOp::kMul: return ir::Op::kMul;
    case ast::BinaryOp::kDiv: return ir::Op::kDiv;
    case ast::BinaryOp::kLt: return ir::Op::kLt;
    case ast::BinaryOp::kLe: return ir::Op::kLe;
    case ast::BinaryOp::kGt: return ir::Op::kGt;
    case ast::BinaryOp::kGe: return ir::Op::kGe;
    case ast::BinaryOp::kEq: return ir::Op::kEq;
    case ast::BinaryOp::kNe: return ir::Op::kNe;
    case ast::BinaryOp::kAnd: return ir::Op::kAnd;
    case ast::BinaryOp::kOr: return ir::Op::kOr;
    default: return ir::Op::kAdd;  // kMod and kMatMul are handled before
  }
}

bool is_comparison(ir::Op op) { return op >= ir::Op::kLt && op <= ir::Op::kNe; }
bool is_logical(ir::Op op) { return op == ir::Op::kAnd || op == ir::Op::kOr; }

// ------------------------------------------------------------------ lowerer

struct Frame {
  const ast::FnDecl* fn = nullptr;  // null: the program body
  std::vector<std::map<std::string, Value>> scopes;
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
  // outputs
  bool assigned = false;
  ir::ValueId value = ir::kNoValue;
};

struct FnInfo {
  const ast::FnDecl* decl = nullptr;
  std::vector<std::optional<TensorType>> params;
  std::optional<TensorType> result;
  bool signature_ok = true;
};

class Lowerer {
 public:
  Lowerer(const ast::Module& m, DiagnosticSink& d) : m_(m), diags_(d) {}

  std::optional<ir::Graph> run() {
    int errors_before = diags_.error_count();
    graph_.program_name = m_.program_name;
    lower_dims();
    for (const ast::ConstDecl& c : m_.consts)
      if (!consts_.count(c.name)) consts_[c.name].decl = &c;  // a duplicate: check_module reports it
    for (const ast::ConstDecl& c : m_.consts) const_value(c.name);
    lower_leaves();
    for (const ast::FnDecl& f : m_.fns) resolve_signature(f);
    frames_.push_back(Frame{});
    frames_.back().scopes.emplace_back();
    exec_block(m_.body);
    frames_.pop_back();
    collect_outputs();
    if (diags_.error_count() > errors_before) return std::nullopt;
    return std::move(graph_);
  }

 private:
  // ------------------------------------------------------------- diagnostics

  Value fail(SourceLoc loc, std::string message, std::string hint = {}, uint32_t length = 1) {
    diags_.error(loc, std::move(message), std::move(hint), length);
    return Value::error();
  }

  std::string text(const TensorType& t) const { return type_to_string(t, graph_.dims); }
  std::string text(const Shape& s) const { return shape_to_string(s, graph_.dims); }
  TensorType type_of(const Value& v) const { return graph_.node(v.id).type; }

  std::string describe(const Value& v) const {
    switch (v.kind) {
      case Value::Kind::kInt: return "the compile-time integer " + std::to_string(v.i);
      case Value::Kind::kFloat: return "the compile-time float " + number_text(v.f);
      case Value::Kind::kBool: return std::string("the compile-time bool ") + (v.b ? "true" : "false");
      case Value::Kind::kTensor: return text(type_of(v));
      case Value::Kind::kDim: return "the run-time dim '" + graph_.dims[v.dim].name + "'";
      case Value::Kind::kList: return "a list";
      case Value::Kind::kError: return "an invalid value";
    }
    return "?";
  }

  // Stops the whole elaboration once a limit is hit; reported once, at the
  // statement of the program body that was running (the outermost loop or call).
  void abort(SourceLoc loc, const std::string& message, const std::string& hint) {
    if (aborted_) return;
    aborted_ = true;
    diags_.error(top_statement_.valid() ? top_statement_ : loc, message, hint, 3);
  }

  bool step(SourceLoc loc) {
    if (aborted_) return false;
    if (++steps_ > kMaxElaborationSteps) {
      abort(loc, "the program takes more than " + std::to_string(kMaxElaborationSteps) + " steps to unroll",
            "unroll fewer loop steps and inline fewer fn calls; let tensor ops over larger shapes do the work");
      return false;
    }
    return true;
  }

  // ------------------------------------------------------------------ emission

  // Checks the result type (rank, element bound, graph size) and adds the node.
  Value emit(ir::Op op, std::vector<ir::ValueId> args, TensorType type, SourceLoc loc, uint32_t length,
             ir::Attrs attrs = {}) {
    if (aborted_) return Value::error();
    if (type.rank() > kMaxRank)
      return fail(loc,
                  "the result " + text(type) + " has rank " + std::to_string(type.rank()) + "; tensors have at most " +
                      std::to_string(kMaxRank) + " dims",
                  "reshape to fewer dims first", length);
    if (!within_element_bound(type, loc, length)) return Value::error();
    if (graph_.nodes.size() >= kMaxIrNodes) {
      abort(loc, "unrolling produces more than " + std::to_string(kMaxIrNodes) + " IR nodes",
            "a graph that large cannot be replayed efficiently; loop over fewer steps, or use larger tensor ops");
      return Value::error();
    }
    ir::Node n;
    n.op = op;
    n.args = std::move(args);
    n.type = std::move(type);
    n.attrs = std::move(attrs);
    n.loc = loc;
    Value v = Value::tensor(graph_.add(std::move(n)));
    v.loc = loc;
    v.length = length;
    return v;
  }

  bool within_element_bound(const TensorType& t, SourceLoc loc, uint32_t length) {
    constexpr int64_t kLimit = std::numeric_limits<int32_t>::max();
    int64_t count = 1;
    bool overflow = false;
    const DimInfo* runtime = nullptr;
    for (const Dim& d : t.shape) {
      int64_t e = d.is_runtime() ? graph_.dims[d.symbol].hi : d.extent;
      if (d.is_runtime() && !runtime) runtime = &graph_.dims[d.symbol];
      if (__builtin_mul_overflow(count, e, &count)) overflow = true;
    }
    if (!overflow && count <= kLimit) return true;
    std::string holds = overflow ? "more than 2^63 elements" : std::to_string(count) + " elements";
    if (runtime)
      diags_.error(loc,
                   "shape " + text(t) + " exceeds the bound of dim " + runtime->name + ": at " + runtime->name + " = " +
                       std::to_string(runtime->hi) + " it holds " + holds + ", more than 2^31-1",
                   "lower the upper bound of " + runtime->name + ", or split the tensor", length);
    else
      diags_.error(loc, "shape " + text(t) + " holds " + holds + ", more than 2^31-1",
                   "split the tensor into smaller ones", length);
    return false;
  }

  // A compile-time value as a rank-0 constant of dtype (the weak side of a
  // binary op takes the other side's dtype).
  Value constant(const Value& v, DType dtype) {
    std::string what = describe(v);
    if (v.kind == Value::Kind::kBool) {
      if (dtype != DType::kBool)
        return fail(v.loc, what + " cannot combine with a " + dtype_name(dtype) + " tensor",
                    "a bool mixes only with bool tensors", v.length);
    } else if (dtype == DType::kBool) {
      return fail(v.loc, what + " cannot combine with a bool tensor", "compare first to get a bool, or use true/false",
                  v.length);
    } else if (dtype == DType::kI32) {
      if (v.kind == Value::Kind::kFloat)
        return fail(v.loc, what + " would silently become i32",
                    "write an integer, or cast the tensor to a float type: cast(x, f32)", v.length);
      if (v.i < std::numeric_limits<int32_t>::min() || v.i > std::numeric_limits<int32_t>::max())
        return fail(v.loc, what + " does not fit in i32", "i32 holds -2147483648..2147483647", v.length);
    }
    ir::Attrs attrs;
    attrs.value = round_to_dtype(v.kind == Value::Kind::kBool ? (v.b ? 1.0 : 0.0) : v.number(), dtype);
    return emit(ir::Op::kConstant, {}, TensorType{dtype, {}}, v.loc, v.length, attrs);
  }

  Value cast_to(const Value& v, DType dtype, SourceLoc loc, uint32_t length) {
    TensorType t = type_of(v);
    if (t.dtype == dtype) return v;
    t.dtype = dtype;
    return emit(ir::Op::kCast, {v.id}, t, loc, length);
  }

  // Makes a and b tensors of one dtype for an elementwise op: a compile-time
  // value becomes a constant of the tensor's dtype, a weak scalar follows the
  // other side's float dtype. Reports at loc (the operator).
  bool unify(Value& a, Value& b, const std::string& what, SourceLoc loc, uint32_t length) {
    if (a.is_static() && b.is_static()) {
      // Both compile-time (where(c, 1.0, 0.0)): their natural dtype.
      DType t = a.kind == Value::Kind::kBool                                       ? DType::kBool
                : (a.kind == Value::Kind::kFloat || b.kind == Value::Kind::kFloat) ? DType::kF32
                                                                                   : DType::kI32;
      a = constant(a, t);
      b = constant(b, t);
      return a.ok() && b.ok();
    }
    if (a.is_static()) {
      a = constant(a, type_of(b).dtype);
      return a.ok();
    }
    if (b.is_static()) {
      b = constant(b, type_of(a).dtype);
      return b.ok();
    }
    DType da = type_of(a).dtype, db = type_of(b).dtype;
    if (da == db) return true;
    if (is_float(da) && is_float(db) && (a.weak != b.weak)) {
      if (a.weak)
        a = cast_to(a, db, a.loc, a.length);
      else
        b = cast_to(b, da, b.loc, b.length);
      return a.ok() && b.ok();
    }
    fail(loc, "dtype mismatch in " + what + ": " + text(type_of(a)) + " and " + text(type_of(b)),
         a.weak || b.weak ? "a run-time scalar adapts only to other float types; convert with cast(x, " +
                                std::string(dtype_name(a.weak ? db : da)) + ")"
                          : "both sides need one dtype; convert one with cast(x, " + std::string(dtype_name(da)) + ")",
         length);
    return false;
  }

  // A value that an op needs as a tensor (or a compile-time value it will
  // turn into a constant). Lists and dims are reported here.
  bool operand_ok(const Value& v, const std::string& what) {
    if (!v.ok()) return false;
    if (v.kind == Value::Kind::kDim) {
      fail(v.loc, "the run-time dim '" + graph_.dims[v.dim].name + "' has no compile-time value and is not a tensor",
           "a dim only sizes shapes; use a const for a number known at compile time", v.length);
      return false;
    }
    if (v.kind == Value::Kind::kList) {
      fail(v.loc, "a list cannot be an operand of " + what, "lists are for shapes and permutations", v.length);
      return false;
    }
    return true;
  }

  bool need_tensor(const Value& v, const std::string& what) {
    if (!operand_ok(v, what)) return false;
    if (!v.is_tensor()) {
      fail(v.loc, what + " needs a tensor, got " + describe(v), "pass an input, a param or a value computed from them",
           v.length);
      return false;
    }
    return true;
  }

  std::optional<int64_t> static_int(const Value& v, const std::string& what) {
    if (!v.ok()) return std::nullopt;
    if (v.kind == Value::Kind::kInt) return v.i;
    fail(v.loc, what + " must be a compile-time integer, got " + describe(v),
         v.is_tensor() || v.kind == Value::Kind::kDim ? "run-time values cannot decide it; use a const"
                                                      : "write an integer literal or const",
         v.length);
    return std::nullopt;
  }

  std::optional<double> static_number(const Value& v, const std::string& what) {
    if (!v.ok()) return std::nullopt;
    if (v.is_number()) return v.number();
    fail(v.loc, what + " must be a compile-time number, got " + describe(v), "write a literal or a const, such as 1e-5",
         v.length);
    return std::nullopt;
  }

  std::optional<bool> static_bool(const Value& v, const std::string& what) {
    if (!v.ok()) return std::nullopt;
    if (v.kind == Value::Kind::kBool) return v.b;
    fail(v.loc, what + " must be a compile-time bool (true or false), got " + describe(v), "write true or false",
         v.length);
    return std::nullopt;
  }

  std::optional<int> normalize_axis(const Value& v, int rank, const std::string& what) {
    std::optional<int64_t> axis = static_int(v, what);
    if (!axis) return std::nullopt;
    if (*axis < -rank || *axis >= rank) {
      fail(v.loc, what + " " + std::to_string(*axis) + " is out of range for a rank-" + std::to_string(rank) + " value",
           rank > 0 ? "use an axis in " + std::to_string(-rank) + ".." + std::to_string(rank - 1)
                    : "a rank-0 value has no axis",
           v.length);
      return std::nullopt;
    }
    return static_cast<int>(*axis < 0 ? *axis + rank : *axis);
  }

  // --------------------------------------------------------------------- dims

  void lower_dims() {
    for (const ast::DimDecl& d : m_.dims) {
      DimInfo info;
      info.name = d.name;
      int symbol = static_cast<int>(graph_.dims.size());
      dims_.emplace(d.name, symbol);
      bool ok = true;
      auto bound = [&](const ast::Expr& e, const char* what) -> int64_t {
        Value v = eval(e);
        std::optional<int64_t> n = static_int(v, std::string("the ") + what + " bound of dim '" + d.name + "'");
        if (!n) ok = false;
        return n.value_or(1);
      };
      info.lo = bound(*d.lo, "lower");
      info.hi = bound(*d.hi, "upper");
      if (ok && info.lo < 1) {
        diags_.error(start_of(*d.lo),
                     "dim '" + d.name + "' has lower bound " + std::to_string(info.lo) + "; it must be at least 1",
                     "write dim " + d.name + " in [1, HI]", d.lo->length);
        ok = false;
      } else if (ok && info.hi < info.lo) {
        diags_.error(start_of(*d.hi),
                     "dim '" + d.name + "' has upper bound " + std::to_string(info.hi) + " below its lower bound " +
                         std::to_string(info.lo),
                     "bounds are [LO, HI] with 1 <= LO <= HI", d.hi->length);
        ok = false;
      } else if (ok && info.hi > std::numeric_limits<int32_t>::max()) {
        diags_.error(start_of(*d.hi),
                     "dim '" + d.name + "' has upper bound " + std::to_string(info.hi) + ", more than 2^31-1",
                     "run-time dims are 32-bit; lower the bound", d.hi->length);
        ok = false;
      }
      if (!ok) info.lo = info.hi = 1;
      if (ok && !d.buckets.empty()) {
        for (size_t k = 0; k < d.buckets.size() && ok; ++k) {
          const ast::Expr& e = *d.buckets[k];
          Value v = eval(e);
          std::optional<int64_t> b = static_int(v, "a bucket of dim '" + d.name + "'");
          if (!b) {
            ok = false;
          } else if (*b < info.lo || *b > info.hi) {
            diags_.error(start_of(e),
                         "bucket " + std::to_string(*b) + " is outside the range [" + std::to_string(info.lo) + ", " +
                             std::to_string(info.hi) + "] of dim '" + d.name + "'",
                         "buckets are capacities between the dim's bounds", e.length);
            ok = false;
          } else if (!info.buckets.empty() && *b <= info.buckets.back()) {
            diags_.error(start_of(e),
                         "buckets of dim '" + d.name + "' must be ascending: " + std::to_string(*b) + " follows " +
                             std::to_string(info.buckets.back()),
                         "list them from smallest to largest", e.length);
            ok = false;
          } else {
            info.buckets.push_back(*b);
          }
        }
        if (ok && info.buckets.back() != info.hi) {
          const ast::Expr& last = *d.buckets.back();
          diags_.error(start_of(last),
                       "the last bucket of dim '" + d.name + "' is " + std::to_string(info.buckets.back()) +
                           ", not its upper bound " + std::to_string(info.hi),
                       "end the list with " + std::to_string(info.hi) + " so that every allowed value has a bucket",
                       last.length);
          ok = false;
        }
      }
      if (info.buckets.empty() || !ok) info.buckets = default_buckets(info.lo, info.hi);
      if (d.policy == "update") {
        info.policy = DimPolicy::kUpdate;
      } else if (!d.policy.empty() && d.policy != "buckets") {
        std::string message = "unknown dim policy '" + d.policy + "'";
        if (auto near = closest_spelling(d.policy, {"buckets", "update"})) message += "; did you mean '" + *near + "'?";
        diags_.error(d.policy_loc, message, "write policy(buckets) or policy(update)",
                     static_cast<uint32_t>(d.policy.size()));
      }
      if (graph_.dims.size() == static_cast<size_t>(kMaxRuntimeDims))
        diags_.error(d.name_loc,
                     "dim '" + d.name + "' is run-time dim number " + std::to_string(kMaxRuntimeDims + 1) +
                         "; a program has at most " + std::to_string(kMaxRuntimeDims) +
                         " (the kernels receive them in a fixed block)",
                     "make some of them compile-time consts, or reuse one dim for tensors that always agree",
                     static_cast<uint32_t>(d.name.size()));
      graph_.dims.push_back(std::move(info));
    }
  }

  // ------------------------------------------------------------------- consts

  Value const_value(const std::string& name) {
    ConstInfo& c = consts_.at(name);
    if (c.state == 2) return c.value;
    if (c.state == 1) return Value::error();  // a cycle: check_module reports it
    c.state = 1;
    // A const sees globals only, whoever asks for it.
    std::vector<Frame> saved = std::move(frames_);
    frames_.clear();
    Value v = eval(*c.decl->value);
    frames_ = std::move(saved);
    if (v.ok() && !v.is_static()) {
      fail(start_of(*c.decl->value),
           "const '" + name + "' must be a compile-time integer, float or bool, got " + describe(v),
           "consts are fixed at compile time; use let for run-time values", c.decl->value->length);
      v = Value::error();
    }
    c.value = v;
    c.state = 2;
    return v;
  }

  // -------------------------------------------------------------------- types

  std::optional<TensorType> resolve_type(const ast::TypeExpr& t) {
    std::optional<DType> dtype = parse_dtype(t.dtype);
    bool ok = true;
    if (!dtype) {
      std::string message = "unknown type '" + t.dtype + "'";
      if (auto near = closest_spelling(t.dtype, {"f32", "f16", "bf16", "i32", "bool"}))
        message += "; did you mean '" + *near + "'?";
      diags_.error(t.dtype_loc, message, "the types are f32, f16, bf16, i32 and bool",
                   static_cast<uint32_t>(t.dtype.size()));
      ok = false;
    }
    if (t.dims.size() > static_cast<size_t>(kMaxRank)) {
      const ast::Expr& extra = *t.dims[kMaxRank];
      diags_.error(
          start_of(extra),
          "a type has at most " + std::to_string(kMaxRank) + " dims, this one has " + std::to_string(t.dims.size()),
          "reshape to fewer dims", extra.length);
      return std::nullopt;
    }
    TensorType type;
    for (const ast::ExprPtr& e : t.dims) {
      Value v = eval(*e);
      if (!v.ok()) {
        ok = false;
      } else if (v.kind == Value::Kind::kDim) {
        type.shape.push_back(Dim::runtime(v.dim));
      } else if (v.kind == Value::Kind::kInt && v.i >= 1) {
        type.shape.push_back(Dim::constant(v.i));
      } else if (v.kind == Value::Kind::kInt) {
        fail(start_of(*e), "a dim extent must be at least 1, got " + std::to_string(v.i),
             "empty tensors are not supported; use an extent >= 1", e->length);
        ok = false;
      } else {
        fail(start_of(*e), "a shape dim must be a compile-time integer or a declared dim, got " + describe(v),
             "use a const, a literal, or the name of a dim declared with `dim`", e->length);
        ok = false;
      }
    }
    if (!ok) return std::nullopt;
    type.dtype = *dtype;
    if (!within_element_bound(type, t.loc, 1)) return std::nullopt;
    return type;
  }

  // ------------------------------------------------------------------- leaves

  void lower_leaves() {
    for (const ast::TensorDecl& t : m_.tensors) {
      if (tensors_.count(t.name)) continue;  // a duplicate: check_module reports it
      TensorInfo& info = tensors_[t.name];
      info.decl = &t;
      info.type = resolve_type(t.type);
      auto len = static_cast<uint32_t>(t.name.size());
      ir::Node leaf;
      leaf.name = t.name;
      leaf.loc = t.name_loc;
      switch (t.role) {
        case ast::TensorRole::kOutput:
          if (t.init) fail(start_of(*t.init), "only a scalar takes a default value", "remove '= ...'", t.init->length);
          continue;
        case ast::TensorRole::kInput: leaf.op = ir::Op::kInput; break;
        case ast::TensorRole::kParam: leaf.op = ir::Op::kParam; break;
        case ast::TensorRole::kScalar: leaf.op = ir::Op::kScalar; break;
      }
      if (t.role != ast::TensorRole::kScalar && t.init) {
        fail(start_of(*t.init), "only a scalar takes a default value", "remove '= ...'", t.init->length);
        continue;
      }
      if (!info.type) continue;
      if (t.role == ast::TensorRole::kScalar) {
        if (info.type->rank() != 0 || (info.type->dtype != DType::kF32 && info.type->dtype != DType::kI32)) {
          fail(t.type.loc, "scalar '" + t.name + "' has type " + text(*info.type) + "; a run-time scalar is f32 or i32",
               "declare tensors with input or param; a scalar is written scalar " + t.name + " : f32 = 1.0;", len);
          info.type.reset();
          continue;
        }
        if (!t.init) {
          fail(t.name_loc, "scalar '" + t.name + "' needs a default value",
               "write scalar " + t.name + " : " + dtype_name(info.type->dtype) + " = VALUE;", len);
          info.type.reset();
          continue;
        }
        Value init = eval(*t.init);
        if (!init.ok()) {
          info.type.reset();
          continue;
        }
        bool fits = info.type->dtype == DType::kI32 ? init.kind == Value::Kind::kInt : init.is_number();
        if (!fits) {
          fail(start_of(*t.init),
               "the default of scalar '" + t.name + "' must be a compile-time " +
                   (info.type->dtype == DType::kI32 ? "integer" : "number") + ", got " + describe(init),
               "write a literal or a const, such as 1.0", t.init->length);
          info.type.reset();
          continue;
        }
        leaf.attrs.value = round_to_dtype(init.number(), info.type->dtype);
      }
      if (leaf.op == ir::Op::kScalar && ++scalar_count_ == kMaxScalars + 1)
        fail(t.name_loc,
             "scalar '" + t.name + "' is run-time scalar number " + std::to_string(kMaxScalars + 1) +
                 "; a program has at most " + std::to_string(kMaxScalars) + " (the kernels receive them in a fixed block)",
             "make some of them compile-time consts, or pass several values as one input tensor", len);
      leaf.type = *info.type;
      info.leaf = graph_.add(std::move(leaf));
    }
  }

  void resolve_signature(const ast::FnDecl& f) {
    if (fns_.count(f.name)) return;
    FnInfo info;
    info.decl = &f;
    for (const ast::FnParam& p : f.params) {
      info.params.push_back(resolve_type(p.type));
      if (!info.params.back()) info.signature_ok = false;
    }
    if (f.result) {
      info.result = resolve_type(*f.result);
      if (!info.result) info.signature_ok = false;
    }
    fns_.emplace(f.name, std::move(info));
  }

  // -------------------------------------------------------------- statements

  Frame& frame() { return frames_.back(); }

  Value* find_local(const std::string& name) {
    if (frames_.empty()) return nullptr;
    for (auto scope = frame().scopes.rbegin(); scope != frame().scopes.rend(); ++scope)
      if (auto it = scope->find(name); it != scope->end()) return &it->second;
    return nullptr;
  }

  void name_value(const Value& v, const std::string& name) {
    if (!v.is_tensor()) return;
    ir::Node& n = graph_.node(v.id);
    if (ir::op_info(n.op).cls != ir::OpClass::kLeaf && n.name.empty()) n.name = name;
  }

  void exec_block(const ast::Block& block) {
    for (const ast::StmtPtr& s : block) {
      if (!step(s->loc)) return;
      if (frames_.size() == 1 && frame().scopes.size() == 1) top_statement_ = s->loc;
      exec(*s);
    }
  }

  void exec_scoped(const ast::Block& block) {
    frame().scopes.emplace_back();
    exec_block(block);
    frame().scopes.pop_back();
  }

  void exec(const ast::Stmt& s) {
    switch (s.kind) {
      case ast::StmtKind::kLet: {
        const auto& let = s.as<ast::LetStmt>();
        Value v = eval(*let.value);
        if (let.type) {
          std::optional<TensorType> t = resolve_type(*let.type);
          v = t ? conform(v, *t, "'" + let.name + "'", *let.value) : Value::error();
        }
        name_value(v, let.name);
        frame().scopes.back()[let.name] = v;
        break;
      }
      case ast::StmtKind::kAssign: {
        const auto& a = s.as<ast::AssignStmt>();
        Value v = eval(*a.value);
        if (Value* local = find_local(a.name)) {
          name_value(v, a.name);
          *local = v;
        } else if (auto t = tensors_.find(a.name);
                   t != tensors_.end() && t->second.decl->role == ast::TensorRole::kOutput && frames_.size() == 1) {
          assign_output(t->second, v, a);
        } else {
          fail(a.name_loc, "cannot assign to '" + a.name + "'", "bind a value with let", 1);
        }
        break;
      }
      case ast::StmtKind::kFor: exec_for(s.as<ast::ForStmt>()); break;
      case ast::StmtKind::kIf: {
        const auto& i = s.as<ast::IfStmt>();
        Value c = eval(*i.cond);
        if (c.kind == Value::Kind::kBool) {
          exec_scoped(c.b ? i.then_body : i.else_body);
          break;
        }
        unassigned_unreliable_ = true;  // the skipped branches may have assigned outputs
        if (!c.ok()) break;
        if (c.is_tensor() || c.kind == Value::Kind::kDim)
          fail(start_of(*i.cond), "condition depends on run-time data: a CUDA graph replays a fixed set of tasks",
               "use where(cond, a, b) to choose between values", i.cond->length);
        else
          fail(start_of(*i.cond), "condition must be a bool, got " + describe(c), "compare it, for example n > 0",
               i.cond->length);
        break;
      }
      case ast::StmtKind::kWhile:
        fail(s.loc, "while loops are not allowed: a CUDA graph replays a fixed set of tasks",
             "loops must run over a compile-time range: for i in 0..N { ... }", 5);
        break;
      case ast::StmtKind::kReturn:
        if (frame().fn)
          frame().result = eval(*s.as<ast::ReturnStmt>().value);
        else
          fail(s.loc, "return outside a fn", "assign the value to an output", 6);
        break;
      case ast::StmtKind::kExpr:
        fail(s.loc, "this statement has no effect", "bind the value with let or assign it to an output");
        break;
    }
  }

  std::optional<int64_t> loop_bound(const ast::Expr& e) {
    Value v = eval(e);
    if (!v.ok()) return std::nullopt;
    if (v.kind == Value::Kind::kInt) return v.i;
    if (v.is_tensor() || v.kind == Value::Kind::kDim) {
      fail(start_of(e),
           "loop bound is not a compile-time constant: it is " +
               (v.is_tensor() ? "run-time data of type " + describe(v) : describe(v)),
           "a CUDA graph replays a fixed set of tasks; loop over a const range (for i in 0..N) and let a bounded "
           "dim carry run-time sizes in shapes",
           e.length);
      return std::nullopt;
    }
    fail(start_of(e), "loop bound must be a compile-time integer, got " + describe(v),
         "loops run over integer ranges: for i in 0..N", e.length);
    return std::nullopt;
  }

  void exec_for(const ast::ForStmt& f) {
    std::optional<int64_t> first = loop_bound(*f.start);
    std::optional<int64_t> last = loop_bound(*f.stop);
    if (!first || !last) return;
    int64_t count = 0;
    if (*last > *first && __builtin_sub_overflow(*last, *first, &count)) count = std::numeric_limits<int64_t>::max();
    if (count > kMaxLoopIterations) {
      fail(f.loc, "loop runs " + std::to_string(count) + " iterations, more than " + std::to_string(kMaxLoopIterations),
           "every iteration is unrolled into the graph; loop over fewer steps, or let one tensor op over a larger "
           "shape do the work",
           3);
      return;
    }
    for (int64_t i = *first; i < *last && step(f.loc); ++i) {
      Value index = Value::integer(i);
      index.loc = f.var_loc;
      index.length = static_cast<uint32_t>(f.var.size());
      frame().scopes.push_back({{f.var, index}});
      exec_block(f.body);
      frame().scopes.pop_back();
    }
  }

  // A value checked against a declared type. A compile-time value stays
  // compile-time when the type is rank 0 and can hold it; a weak scalar
  // follows a rank-0 float type.
  Value conform(Value v, const TensorType& t, const std::string& what, const ast::Expr& source) {
    if (!v.ok()) return v;
    SourceLoc loc = start_of(source);
    std::string want = text(t);
    if (v.is_static()) {
      bool fits = t.rank() == 0 && (v.kind == Value::Kind::kBool  ? t.dtype == DType::kBool
                                    : v.kind == Value::Kind::kInt ? t.dtype != DType::kBool
                                                                  : is_float(t.dtype));
      if (!fits)
        return fail(loc, what + " must be " + want + ", got " + describe(v), "pass a tensor of that type",
                    source.length);
      if (t.dtype == DType::kI32 &&
          (v.i < std::numeric_limits<int32_t>::min() || v.i > std::numeric_limits<int32_t>::max()))
        return fail(loc, describe(v) + " does not fit in i32", "i32 holds -2147483648..2147483647", source.length);
      return v;
    }
    if (!v.is_tensor())
      return fail(loc, what + " must be " + want + ", got " + describe(v), "pass a tensor of that type", source.length);
    TensorType have = type_of(v);
    if (have == t) return v;
    if (v.weak && t.rank() == 0 && is_float(have.dtype) && is_float(t.dtype)) {
      Value c = cast_to(v, t.dtype, loc, source.length);
      c.weak = true;
      return c;
    }
    std::string hint = have.shape == t.shape && have.dtype != t.dtype
                           ? "convert it with cast(x, " + std::string(dtype_name(t.dtype)) + ")"
                           : "the shapes must match exactly";
    return fail(loc, what + " must be " + want + ", got " + text(have), hint, source.length);
  }

  void assign_output(TensorInfo& out, const Value& value, const ast::AssignStmt& a) {
    if (out.assigned) {
      fail(a.name_loc, "output '" + a.name + "' is assigned twice", "an output is assigned exactly once",
           static_cast<uint32_t>(a.name.size()));
      return;
    }
    out.assigned = true;
    if (!out.type || !value.ok()) return;
    Value v = conform(value, *out.type, "output '" + a.name + "'", *a.value);
    if (v.is_static()) v = constant(v, out.type->dtype);
    if (v.ok()) out.value = v.id;
  }

  void collect_outputs() {
    for (const ast::TensorDecl& t : m_.tensors) {
      if (t.role != ast::TensorRole::kOutput) continue;
      auto it = tensors_.find(t.name);
      if (it == tensors_.end() || it->second.decl != &t) continue;
      TensorInfo& out = it->second;
      if (out.value != ir::kNoValue) {
        graph_.outputs.push_back({t.name, out.value, t.name_loc});
      } else if (!out.assigned && out.type && !unassigned_unreliable_ && !aborted_) {
        fail(t.name_loc, "output '" + t.name + "' is never assigned",
             "assign it once on the path the compile-time conditions take: " + t.name + " = ...;",
             static_cast<uint32_t>(t.name.size()));
      }
    }
  }

  // ------------------------------------------------------------- expressions

  Value eval(const ast::Expr& e) {
    if (aborted_) return Value::error();
    Value v = eval_inner(e);
    if (v.ok() && !v.loc.valid()) {
      v.loc = start_of(e);
      v.length = e.length;
    }
    return v;
  }

  Value eval_inner(const ast::Expr& e) {
    switch (e.kind) {
      case ast::ExprKind::kInt: return located(Value::integer(e.as<ast::IntLit>().value), e);
      case ast::ExprKind::kFloat: return located(Value::real(e.as<ast::FloatLit>().value), e);
      case ast::ExprKind::kBool: return located(Value::boolean(e.as<ast::BoolLit>().value), e);
      case ast::ExprKind::kName: return located(lookup(e.as<ast::NameExpr>()), e);
      case ast::ExprKind::kUnary: return located(unary(e.as<ast::UnaryExpr>()), e);
      case ast::ExprKind::kBinary: {
        const auto& b = e.as<ast::BinaryExpr>();
        Value lhs = eval(*b.lhs);
        Value rhs = eval(*b.rhs);
        return located(binary(b.op, lhs, rhs, b.loc), e);
      }
      case ast::ExprKind::kCall: return located(call(e.as<ast::CallExpr>()), e);
      case ast::ExprKind::kIndex: return located(index(e.as<ast::IndexExpr>()), e);
      case ast::ExprKind::kList: {
        Value list;
        list.kind = Value::Kind::kList;
        for (const ast::ExprPtr& el : e.as<ast::ListExpr>().elements) {
          Value v = eval(*el);
          if (!v.ok()) return Value::error();
          list.list.push_back(std::move(v));
        }
        return located(std::move(list), e);
      }
    }
    return Value::error();
  }

  // The value's position for later diagnostics is the whole expression.
  static Value located(Value v, const ast::Expr& e) {
    if (v.ok()) {
      v.loc = start_of(e);
      v.length = e.length;
    }
    return v;
  }

  Value lookup(const ast::NameExpr& n) {
    if (Value* local = find_local(n.name)) return *local;
    if (auto d = dims_.find(n.name); d != dims_.end()) {
      Value v;
      v.kind = Value::Kind::kDim;
      v.dim = d->second;
      return v;
    }
    if (consts_.count(n.name)) return const_value(n.name);
    if (auto t = tensors_.find(n.name); t != tensors_.end()) {
      TensorInfo& info = t->second;
      if (info.decl->role == ast::TensorRole::kOutput) {
        if (info.value != ir::kNoValue) return Value::tensor(info.value);
        if (info.assigned || !info.type) return Value::error();
        return fail(n.loc, "output '" + n.name + "' is read before it is assigned", "",
                    static_cast<uint32_t>(n.name.size()));
      }
      if (info.leaf == ir::kNoValue) return Value::error();  // its declaration was rejected
      Value v = Value::tensor(info.leaf);
      v.weak = info.decl->role == ast::TensorRole::kScalar;
      return v;
    }
    return fail(n.loc, "unknown name '" + n.name + "'", "declare it before using it",
                static_cast<uint32_t>(n.name.size()));
  }

  Value unary(const ast::UnaryExpr& u) {
    Value x = eval(*u.operand);
    if (!operand_ok(x, u.op == ast::UnaryOp::kNeg ? "unary -" : "!")) return Value::error();
    if (u.op == ast::UnaryOp::kNot) {
      if (x.kind == Value::Kind::kBool) return Value::boolean(!x.b);
      if (x.is_tensor() && type_of(x).dtype == DType::kBool)
        return emit(ir::Op::kNot, {x.id}, type_of(x), u.loc, u.length);
      return fail(u.loc, "! needs a bool, got " + describe(x), "compare first, for example !(x > 0.0)", u.length);
    }
    if (x.kind == Value::Kind::kInt) {
      if (x.i == std::numeric_limits<int64_t>::min())
        return fail(u.loc, "integer overflow in compile-time arithmetic", "compile-time integers are 64-bit", u.length);
      return Value::integer(-x.i);
    }
    if (x.kind == Value::Kind::kFloat) return Value::real(-x.f);
    if (x.is_tensor() && type_of(x).dtype != DType::kBool) {
      Value r = emit(ir::Op::kNeg, {x.id}, type_of(x), u.loc, u.length);
      r.weak = x.weak;
      return r;
    }
    return fail(u.loc, "unary - needs a number, got " + describe(x), "use ! to negate a bool", u.length);
  }

  Value binary(ast::BinaryOp op, Value a, Value b, SourceLoc loc) {
    std::string what = std::string("'") + ast::binary_op_spelling(op) + "'";
    if (!a.ok() || !b.ok()) return Value::error();
    if (!operand_ok(a, what) || !operand_ok(b, what)) return Value::error();
    if (op == ast::BinaryOp::kMatMul) return matmul(a, b, loc, 1);
    if (op == ast::BinaryOp::kMod && !(a.is_static() && b.is_static()))
      return fail(loc, "% is for compile-time integers only", "run-time tensors have no remainder op", 1);
    if (a.is_static() && b.is_static()) return fold(op, a, b, loc);
    return elementwise(binary_ir_op(op), what, a, b, loc, 1);
  }

  // An elementwise binary op on tensors (one side may be compile-time).
  Value elementwise(ir::Op op, const std::string& what, Value a, Value b, SourceLoc loc, uint32_t length) {
    bool weak = (a.weak || a.is_static()) && (b.weak || b.is_static());
    if (!unify(a, b, what, loc, length)) return Value::error();
    TensorType ta = type_of(a), tb = type_of(b);
    if (is_logical(op) && ta.dtype != DType::kBool)
      return fail(loc, what + " needs bools, got " + text(ta) + " and " + text(tb), "compare first to get bools",
                  length);
    if (!is_logical(op) && !is_comparison(op) && ta.dtype == DType::kBool)
      return fail(loc, what + " does arithmetic, which bools do not have: " + text(ta) + " and " + text(tb),
                  "use && and || on bools, or cast(x, f32) first", length);
    std::optional<Shape> shape = broadcast_shapes(ta.shape, tb.shape);
    if (!shape)
      return fail(loc, "cannot broadcast " + text(ta) + " with " + text(tb) + " in " + what,
                  "shapes broadcast like numpy: aligned from the right, each pair of dims equal or one of them 1 "
                  "(a run-time dim matches only itself or 1)",
                  length);
    DType result = is_logical(op) || is_comparison(op) ? DType::kBool : ta.dtype;
    Value r = emit(op, {a.id, b.id}, TensorType{result, *shape}, loc, length);
    r.weak = weak && result != DType::kBool;
    return r;
  }

  // Arithmetic on two compile-time values.
  Value fold(ast::BinaryOp op, const Value& a, const Value& b, SourceLoc loc) {
    using K = Value::Kind;
    std::string sp = ast::binary_op_spelling(op);
    switch (op) {
      case ast::BinaryOp::kAnd:
      case ast::BinaryOp::kOr:
        if (a.kind != K::kBool || b.kind != K::kBool)
          return fail(loc, sp + " needs bools, got " + describe(a) + " and " + describe(b),
                      "compare numbers first, for example n > 0", 1);
        return Value::boolean(op == ast::BinaryOp::kAnd ? a.b && b.b : a.b || b.b);
      case ast::BinaryOp::kEq:
      case ast::BinaryOp::kNe:
        if ((a.kind == K::kBool) != (b.kind == K::kBool))
          return fail(loc, "cannot compare " + describe(a) + " with " + describe(b),
                      "compare bools with bools and numbers with numbers", 1);
        if (a.kind == K::kBool) return Value::boolean((a.b == b.b) == (op == ast::BinaryOp::kEq));
        return Value::boolean((a.number() == b.number()) == (op == ast::BinaryOp::kEq));
      case ast::BinaryOp::kLt:
      case ast::BinaryOp::kLe:
      case ast::BinaryOp::kGt:
      case ast::BinaryOp::kGe: {
        if (!a.is_number() || !b.is_number())
          return fail(loc, sp + " needs numbers, got " + describe(a) + " and " + describe(b),
                      "bools compare only with == and !=", 1);
        bool ints = a.kind == K::kInt && b.kind == K::kInt;
        auto less = [&](const Value& x, const Value& y) { return ints ? x.i < y.i : x.number() < y.number(); };
        bool r = op == ast::BinaryOp::kLt   ? less(a, b)
                 : op == ast::BinaryOp::kGt ? less(b, a)
                 : op == ast::BinaryOp::kLe ? !less(b, a)
                                            : !less(a, b);
        return Value::boolean(r);
      }
      default: break;
    }
    if (!a.is_number() || !b.is_number())
      return fail(loc, sp + " needs numbers, got " + describe(a) + " and " + describe(b), "use && and || on bools", 1);
    if (a.kind == K::kInt && b.kind == K::kInt) {
      int64_t r = 0;
      bool overflow = false;
      switch (op) {
        case ast::BinaryOp::kAdd: overflow = __builtin_add_overflow(a.i, b.i, &r); break;
        case ast::BinaryOp::kSub: overflow = __builtin_sub_overflow(a.i, b.i, &r); break;
        case ast::BinaryOp::kMul: overflow = __builtin_mul_overflow(a.i, b.i, &r); break;
        case ast::BinaryOp::kDiv:
        case ast::BinaryOp::kMod:
          if (b.i == 0)
            return fail(loc, "division by zero in compile-time arithmetic", "check the consts this expression uses", 1);
          if (a.i == std::numeric_limits<int64_t>::min() && b.i == -1)
            overflow = true;
          else
            r = op == ast::BinaryOp::kDiv ? a.i / b.i : a.i % b.i;  // truncates toward zero, as i32 tensors do
          break;
        default: break;
      }
      if (overflow)
        return fail(loc, "integer overflow in compile-time arithmetic", "compile-time integers are 64-bit", 1);
      return Value::integer(r);
    }
    if (op == ast::BinaryOp::kMod)
      return fail(loc, "% is for compile-time integers only, got " + describe(a) + " and " + describe(b),
                  "use integers on both sides", 1);
    double x = a.number(), y = b.number();
    switch (op) {
      case ast::BinaryOp::kAdd: return Value::real(x + y);
      case ast::BinaryOp::kSub: return Value::real(x - y);
      case ast::BinaryOp::kMul: return Value::real(x * y);
      case ast::BinaryOp::kDiv: return Value::real(x / y);
      default: return Value::error();
    }
  }

  // -------------------------------------------------------------- subscripts

  Value index(const ast::IndexExpr& ix) {
    Value base = eval(*ix.base);
    if (!base.ok()) return base;
    if (!base.is_tensor())
      return fail(ix.loc, "only tensors can be subscripted, not " + describe(base),
                  "subscript an input, a param or a computed tensor", 1);
    TensorType t = type_of(base);
    if (ix.subscripts.size() > t.shape.size())
      return fail(ix.loc,
                  std::to_string(ix.subscripts.size()) + " subscripts for " + text(t) + ", which has " +
                      std::to_string(t.rank()) + " dims",
                  "give at most one subscript per dim", 1);
    std::vector<int64_t> bounds;
    Shape sliced, kept;
    bool changed = false;
    for (size_t axis = 0; axis < t.shape.size(); ++axis) {
      const Dim& d = t.shape[axis];
      bool runtime = d.is_runtime();
      int64_t limit = runtime ? graph_.dims[d.symbol].lo : d.extent;  // what every binding allows
      std::string dim_name = runtime ? "dim " + graph_.dims[d.symbol].name : "extent " + std::to_string(d.extent);
      if (axis >= ix.subscripts.size()) {
        bounds.insert(bounds.end(), {0, runtime ? -1 : d.extent});
        sliced.push_back(d);
        kept.push_back(d);
        continue;
      }
      const ast::Subscript& s = ix.subscripts[axis];
      std::string where = "axis " + std::to_string(axis) + " of " + text(t);
      if (!s.is_slice) {
        Value iv = eval(*s.index);
        if (!iv.ok()) return Value::error();
        if (iv.kind != Value::Kind::kInt)
          return fail(start_of(*s.index), "an index must be a compile-time integer, got " + describe(iv),
                      "subscripts are static; use gather(table, ids) to pick rows by run-time ids", s.index->length);
        if (iv.i < 0 || iv.i >= limit) {
          std::string hint = runtime ? "a run-time dim is only known to be at least its lower bound " +
                                           std::to_string(limit) + "; index below it"
                                     : "indices run from 0 to " + std::to_string(d.extent - 1);
          return fail(start_of(*s.index),
                      runtime ? "index " + std::to_string(iv.i) + " may be outside " + where + ": " +
                                    graph_.dims[d.symbol].name + " can be as small as " + std::to_string(limit)
                              : "index " + std::to_string(iv.i) + " is outside " + where,
                      hint, s.index->length);
        }
        bounds.insert(bounds.end(), {iv.i, iv.i + 1});
        sliced.push_back(Dim::constant(1));
        changed = true;
        continue;
      }
      int64_t start = 0;
      if (s.start) {
        Value sv = eval(*s.start);
        std::optional<int64_t> n = static_int(sv, "a slice start");
        if (!n) return Value::error();
        start = *n;
      }
      if (!s.stop && start == 0) {  // the whole dim
        bounds.insert(bounds.end(), {0, runtime ? -1 : d.extent});
        sliced.push_back(d);
        kept.push_back(d);
        continue;
      }
      SourceLoc at = s.start ? start_of(*s.start) : s.loc;
      if (!s.stop && runtime)
        return fail(at,
                    "slice " + std::to_string(start) + ": of run-time " + dim_name + " would have a run-time length",
                    "slice a run-time dim whole with ':', or with a constant range below its lower bound " +
                        std::to_string(limit),
                    1);
      int64_t stop = d.extent;
      if (s.stop) {
        Value ev = eval(*s.stop);
        std::optional<int64_t> n = static_int(ev, "a slice stop");
        if (!n) return Value::error();
        stop = *n;
        at = start_of(*s.stop);
      }
      if (start < 0 || start >= stop || stop > limit) {
        std::string range = std::to_string(start) + ":" + std::to_string(stop);
        std::string hint = runtime ? "a run-time dim is only known to be at least its lower bound " +
                                         std::to_string(limit) +
                                         "; keep the slice below it, or use ':' for the "
                                         "whole dim"
                                   : "a slice a:b needs 0 <= a < b <= " + std::to_string(d.extent);
        bool past_bound = runtime && start >= 0 && start < stop;
        return fail(s.loc,
                    past_bound ? "slice " + range + " may run past " + where + ": " + graph_.dims[d.symbol].name +
                                     " can be as small as " + std::to_string(limit)
                               : "slice " + range + " is outside " + where,
                    hint, 1);
      }
      bounds.insert(bounds.end(), {start, stop});
      sliced.push_back(Dim::constant(stop - start));
      kept.push_back(Dim::constant(stop - start));
      changed = true;
    }
    if (!changed) return base;
    ir::Attrs attrs;
    attrs.ints = bounds;
    Value v = emit(ir::Op::kSlice, {base.id}, TensorType{t.dtype, sliced}, ix.loc, 1, attrs);
    if (!v.ok() || kept.size() == sliced.size()) return v;
    // A static index drops its axis.
    return emit(ir::Op::kReshape, {v.id}, TensorType{t.dtype, kept}, ix.loc, 1);
  }

  // -------------------------------------------------------------------- calls

  // Matches call arguments to parameter slots; nullopt after reporting.
  std::optional<std::vector<const ast::Arg*>> bind_args(const ast::CallExpr& c, const std::vector<std::string>& params,
                                                        size_t required, const std::string& kind) {
    std::vector<const ast::Arg*> slots(params.size(), nullptr);
    std::string sig = signature_text(c.callee, params);
    size_t position = 0;
    for (const ast::Arg& a : c.args) {
      if (a.keyword.empty()) {
        if (position >= params.size()) {
          fail(a.loc, "too many arguments to " + kind + c.callee + ": it takes " + std::to_string(params.size()),
               "call it as " + sig, a.value->length);
          return std::nullopt;
        }
        slots[position++] = &a;
        continue;
      }
      auto it = std::find(params.begin(), params.end(), a.keyword);
      if (it == params.end()) {
        std::string message = "unknown keyword argument '" + a.keyword + "' for " + c.callee;
        if (auto near = closest_spelling(a.keyword, params)) message += "; did you mean '" + *near + "'?";
        fail(a.loc, message, "call it as " + sig, static_cast<uint32_t>(a.keyword.size()));
        return std::nullopt;
      }
      size_t k = static_cast<size_t>(it - params.begin());
      if (slots[k]) {
        fail(a.loc, "argument '" + a.keyword + "' of " + c.callee + " is given twice", "give each argument once",
             static_cast<uint32_t>(a.keyword.size()));
        return std::nullopt;
      }
      slots[k] = &a;
    }
    for (size_t k = 0; k < required; ++k)
      if (!slots[k]) {
        fail(c.loc, "missing argument '" + params[k] + "' in call to " + c.callee, "call it as " + sig,
             static_cast<uint32_t>(c.callee.size()));
        return std::nullopt;
      }
    return slots;
  }

  Value arg_value(const ast::Arg* a) { return a ? eval(*a->value) : Value::error(); }

  Value call(const ast::CallExpr& c) {
    if (auto f = fns_.find(c.callee); f != fns_.end()) return inline_fn(f->second, c);
    if (const StdOp* op = find_std_op(c.callee)) return call_std(*op, c);
    return fail(c.loc, "unknown function '" + c.callee + "'", "declare it with fn, or use a standard op",
                static_cast<uint32_t>(c.callee.size()));
  }

  Value inline_fn(const FnInfo& fn, const ast::CallExpr& c) {
    const ast::FnDecl& decl = *fn.decl;
    std::vector<std::string> names;
    for (const ast::FnParam& p : decl.params) names.push_back(p.name);
    auto slots = bind_args(c, names, names.size(), "fn ");
    if (!slots) return Value::error();
    std::map<std::string, Value> bound;
    bool ok = fn.signature_ok;
    for (size_t k = 0; k < names.size(); ++k) {
      Value v = eval(*(*slots)[k]->value);
      if (ok && v.ok())
        v = conform(v, *fn.params[k], "argument '" + names[k] + "' of " + decl.name, *(*slots)[k]->value);
      ok = ok && v.ok();
      bound[names[k]] = v;
    }
    if (!ok) return Value::error();
    if (frames_.size() > static_cast<size_t>(kMaxInlineDepth))
      return fail(c.loc, "fn calls nest more than " + std::to_string(kMaxInlineDepth) + " deep", "",
                  static_cast<uint32_t>(c.callee.size()));
    if (!step(c.loc)) return Value::error();
    frames_.emplace_back();
    frame().fn = &decl;
    frame().scopes.push_back(std::move(bound));
    exec_block(decl.body);
    std::optional<Value> result = std::move(frame().result);
    frames_.pop_back();
    if (!result || !result->ok()) return Value::error();
    if (fn.result && decl.body.back()->kind == ast::StmtKind::kReturn) {
      const ast::Expr& returned = *decl.body.back()->as<ast::ReturnStmt>().value;
      return conform(*result, *fn.result, "the result of fn " + decl.name, returned);
    }
    return *result;
  }

  Value call_std(const StdOp& op, const ast::CallExpr& c) {
    auto len = static_cast<uint32_t>(c.callee.size());
    if (op.kind == StdKind::kConcat) return concat(c);
    auto slots = bind_args(c, op.params, op.required, "");
    if (!slots) return Value::error();
    auto& s = *slots;
    switch (op.kind) {
      case StdKind::kUnary: return unary_op(op, arg_value(s[0]), c.loc, len);
      case StdKind::kBinary: return binary_op(op.op, c.callee, arg_value(s[0]), arg_value(s[1]), c.loc, len);
      case StdKind::kMax:
        if (s[1]) {
          if (s[2] || s[3])
            return fail((s[2] ? s[2] : s[3])->loc, "max(a, b) is elementwise and takes no axis or keepdims",
                        "write max(x, axis = k) to reduce one tensor", len);
          return binary_op(ir::Op::kMax, c.callee, arg_value(s[0]), arg_value(s[1]), c.loc, len);
        }
        return reduce(ir::Op::kReduceMax, c.callee, s[0], s[2], s[3], c.loc, len);
      case StdKind::kWhere: return where(arg_value(s[0]), arg_value(s[1]), arg_value(s[2]), c.loc, len);
      case StdKind::kCast: return cast(*s[0], *s[1], c.loc, len);
      case StdKind::kMatMul: return matmul(arg_value(s[0]), arg_value(s[1]), c.loc, len);
      case StdKind::kReduce: return reduce(op.op, c.callee, s[0], s[1], s[2], c.loc, len);
      case StdKind::kSoftmax: return softmax(arg_value(s[0]), s[1], c.loc, len);
      case StdKind::kLayerNorm: return norm(op, s[0], s[1], s[2], s[3], 1e-5, c.loc, len);
      case StdKind::kRmsNorm: return norm(op, s[0], s[1], nullptr, s[2], 1e-6, c.loc, len);
      case StdKind::kTranspose: return transpose(arg_value(s[0]), s[1], c.loc, len);
      case StdKind::kReshape: return reshape(arg_value(s[0]), arg_value(s[1]), c.loc, len);
      case StdKind::kGather: return gather(arg_value(s[0]), arg_value(s[1]), c.loc, len);
      case StdKind::kAttention: return attention(s, c.loc, len);
      case StdKind::kConcat: break;
    }
    return Value::error();
  }

  Value unary_op(const StdOp& op, Value x, SourceLoc loc, uint32_t len) {
    if (!operand_ok(x, op.name)) return Value::error();
    bool integer_ok = op.op == ir::Op::kAbs || op.op == ir::Op::kRelu;
    if (x.is_static()) {
      if (!x.is_number())
        return fail(x.loc, std::string(op.name) + " needs a number, got " + describe(x), "pass a float value",
                    x.length);
      if (x.kind == Value::Kind::kInt && integer_ok) {
        if (x.i == std::numeric_limits<int64_t>::min())
          return fail(loc, "integer overflow in compile-time arithmetic", "compile-time integers are 64-bit", len);
        return Value::integer(op.op == ir::Op::kAbs ? std::llabs(x.i) : std::max<int64_t>(x.i, 0));
      }
      double v = x.number();
      switch (op.op) {
        case ir::Op::kExp: return Value::real(std::exp(v));
        case ir::Op::kLog: return Value::real(std::log(v));
        case ir::Op::kSqrt: return Value::real(std::sqrt(v));
        case ir::Op::kRsqrt: return Value::real(1.0 / std::sqrt(v));
        case ir::Op::kTanh: return Value::real(std::tanh(v));
        case ir::Op::kSigmoid: return Value::real(1.0 / (1.0 + std::exp(-v)));
        case ir::Op::kRelu: return Value::real(v < 0 ? 0.0 : v);
        case ir::Op::kGelu: return Value::real(0.5 * v * (1.0 + std::erf(v / std::sqrt(2.0))));
        case ir::Op::kSilu: return Value::real(v / (1.0 + std::exp(-v)));
        case ir::Op::kAbs: return Value::real(std::fabs(v));
        default: return Value::error();
      }
    }
    TensorType t = type_of(x);
    if (!is_float(t.dtype) && !(integer_ok && t.dtype == DType::kI32))
      return fail(x.loc, std::string(op.name) + " needs a float tensor, got " + text(t), "convert it with cast(x, f32)",
                  x.length);
    Value r = emit(op.op, {x.id}, t, loc, len);
    r.weak = x.weak;
    return r;
  }

  Value binary_op(ir::Op op, const std::string& name, Value a, Value b, SourceLoc loc, uint32_t len) {
    if (!operand_ok(a, name) || !operand_ok(b, name)) return Value::error();
    if (a.is_static() && b.is_static()) {
      if (!a.is_number() || !b.is_number())
        return fail(loc, name + " needs numbers, got " + describe(a) + " and " + describe(b),
                    "pass numbers or numeric tensors", len);
      if (op == ir::Op::kPow) return Value::real(std::pow(a.number(), b.number()));
      bool ints = a.kind == Value::Kind::kInt && b.kind == Value::Kind::kInt;
      bool take_a = op == ir::Op::kMin ? a.number() <= b.number() : a.number() >= b.number();
      if (ints) return Value::integer(take_a ? a.i : b.i);
      return Value::real(take_a ? a.number() : b.number());
    }
    return elementwise(op, name, a, b, loc, len);
  }

  Value where(Value cond, Value a, Value b, SourceLoc loc, uint32_t len) {
    if (!operand_ok(cond, "where") || !operand_ok(a, "where") || !operand_ok(b, "where")) return Value::error();
    if (cond.kind == Value::Kind::kBool) {
      cond = constant(cond, DType::kBool);
      if (!cond.ok()) return cond;
    } else if (!cond.is_tensor() || type_of(cond).dtype != DType::kBool) {
      return fail(cond.loc, "the condition of where must be bool, got " + describe(cond),
                  "compare to get a bool: where(x > 0.0, a, b)", cond.length);
    }
    if (!unify(a, b, "where", loc, len)) return Value::error();
    TensorType tc = type_of(cond), ta = type_of(a), tb = type_of(b);
    std::optional<Shape> ab = broadcast_shapes(ta.shape, tb.shape);
    std::optional<Shape> all = ab ? broadcast_shapes(tc.shape, *ab) : std::nullopt;
    if (!all)
      return fail(loc, "cannot broadcast " + text(tc) + ", " + text(ta) + " and " + text(tb) + " in where",
                  "shapes broadcast like numpy: aligned from the right, each dim equal or 1", len);
    return emit(ir::Op::kWhere, {cond.id, a.id, b.id}, TensorType{ta.dtype, *all}, loc, len);
  }

  Value cast(const ast::Arg& x_arg, const ast::Arg& dtype_arg, SourceLoc loc, uint32_t len) {
    const ast::Expr& target = *dtype_arg.value;
    std::optional<DType> dtype;
    if (target.kind == ast::ExprKind::kName) {
      const std::string& name = target.as<ast::NameExpr>().name;
      dtype = parse_dtype(name);
      if (!dtype) {
        std::string message = "unknown type '" + name + "' in cast";
        if (auto near = closest_spelling(name, {"f32", "f16", "bf16", "i32", "bool"}))
          message += "; did you mean '" + *near + "'?";
        return fail(target.loc, message, "the types are f32, f16, bf16, i32 and bool", target.length);
      }
    } else {
      return fail(start_of(target), "the target of cast must be a type name such as f16", "write cast(x, f16)",
                  target.length);
    }
    Value x = eval(*x_arg.value);
    if (!operand_ok(x, "cast")) return Value::error();
    if (x.is_static()) {
      double v = x.kind == Value::Kind::kBool ? (x.b ? 1.0 : 0.0) : x.number();
      if (*dtype == DType::kBool) return Value::boolean(v != 0);
      if (*dtype == DType::kI32) return Value::integer(static_cast<int64_t>(round_to_dtype(v, DType::kI32)));
      return Value::real(round_to_dtype(v, *dtype));
    }
    TensorType t = type_of(x);
    if (t.dtype == *dtype) return x;
    t.dtype = *dtype;
    return emit(ir::Op::kCast, {x.id}, t, loc, len);
  }

  Value matmul(Value a, Value b, SourceLoc loc, uint32_t len) {
    if (!need_tensor(a, "matmul") || !need_tensor(b, "matmul")) return Value::error();
    TensorType ta = type_of(a), tb = type_of(b);
    std::string pair = text(ta) + " @ " + text(tb);
    if (ta.rank() < 2 || tb.rank() < 2)
      return fail(loc, "matmul needs rank >= 2 on both sides: " + pair, "reshape a vector to [1, K] or [K, 1] first",
                  len);
    if (ta.dtype != tb.dtype)
      return fail(loc, "dtype mismatch in matmul: " + pair,
                  "convert one side with cast(x, " + std::string(dtype_name(ta.dtype)) + ")", len);
    if (!is_float(ta.dtype)) return fail(loc, "matmul needs float tensors: " + pair, "cast(x, f32) first", len);
    const Dim& k = ta.shape.back();
    const Dim& kb = tb.shape[tb.shape.size() - 2];
    if (!(k == kb))
      return fail(loc, "matmul inner dims differ: " + pair,
                  "the last dim of the left side must equal the second-to-last of the right; transpose(b) may help",
                  len);
    std::optional<Shape> batch =
        broadcast_shapes(Shape(ta.shape.begin(), ta.shape.end() - 2), Shape(tb.shape.begin(), tb.shape.end() - 2));
    if (!batch)
      return fail(loc, "matmul batch dims do not broadcast: " + pair,
                  "the dims before the last two broadcast like numpy", len);
    batch->push_back(ta.shape[ta.shape.size() - 2]);
    batch->push_back(tb.shape.back());
    return emit(ir::Op::kMatMul, {a.id, b.id}, TensorType{ta.dtype, *batch}, loc, len);
  }

  Value reduce(ir::Op op, const std::string& name, const ast::Arg* x_arg, const ast::Arg* axis_arg,
               const ast::Arg* keep_arg, SourceLoc loc, uint32_t len) {
    Value x = arg_value(x_arg);
    if (!need_tensor(x, name)) return Value::error();
    TensorType t = type_of(x);
    if (t.rank() == 0)
      return fail(x.loc, name + " cannot reduce a rank-0 value", "it is already a single value", x.length);
    if (t.dtype == DType::kBool || (op == ir::Op::kMean && !is_float(t.dtype)))
      return fail(x.loc, name + " needs " + (op == ir::Op::kMean ? "a float" : "a numeric") + " tensor, got " + text(t),
                  "convert it with cast(x, f32)", x.length);
    int axis = t.rank() - 1;
    if (axis_arg) {
      std::optional<int> a = normalize_axis(arg_value(axis_arg), t.rank(), "axis");
      if (!a) return Value::error();
      axis = *a;
    }
    bool keepdims = false;
    if (keep_arg) {
      std::optional<bool> k = static_bool(arg_value(keep_arg), "keepdims");
      if (!k) return Value::error();
      keepdims = *k;
    }
    Shape s = t.shape;
    if (keepdims)
      s[axis] = Dim::constant(1);
    else
      s.erase(s.begin() + axis);
    ir::Attrs attrs;
    attrs.axis = axis;
    attrs.keepdims = keepdims;
    return emit(op, {x.id}, TensorType{t.dtype, s}, loc, len, attrs);
  }

  Value softmax(Value x, const ast::Arg* axis_arg, SourceLoc loc, uint32_t len) {
    if (!need_tensor(x, "softmax")) return Value::error();
    TensorType t = type_of(x);
    if (!is_float(t.dtype))
      return fail(x.loc, "softmax needs a float tensor, got " + text(t), "convert it with cast(x, f32)", x.length);
    if (t.rank() == 0)
      return fail(x.loc, "softmax needs a tensor of rank >= 1, got " + text(t), "reshape it to [1] first", x.length);
    int axis = t.rank() - 1;
    if (axis_arg) {
      std::optional<int> a = normalize_axis(arg_value(axis_arg), t.rank(), "axis");
      if (!a) return Value::error();
      axis = *a;
    }
    ir::Attrs attrs;
    attrs.axis = axis;
    return emit(ir::Op::kSoftmax, {x.id}, t, loc, len, attrs);
  }

  Value norm(const StdOp& op, const ast::Arg* x_arg, const ast::Arg* weight_arg, const ast::Arg* bias_arg,
             const ast::Arg* eps_arg, double default_eps, SourceLoc loc, uint32_t len) {
    std::string name = op.name;
    Value x = arg_value(x_arg);
    if (!need_tensor(x, name)) return Value::error();
    TensorType t = type_of(x);
    if (!is_float(t.dtype))
      return fail(x.loc, name + " needs a float tensor, got " + text(t), "convert it with cast(x, f32)", x.length);
    if (t.rank() == 0)
      return fail(x.loc, name + " needs a tensor of rank >= 1, got " + text(t), "reshape it to [1] first", x.length);
    TensorType per_column{t.dtype, {t.shape.back()}};
    std::vector<ir::ValueId> args{x.id};
    if (bias_arg && !weight_arg)
      return fail(bias_arg->loc, name + " with a bias needs a weight too",
                  "pass weight = ... as well (a weight of ones keeps the scale)", 4);
    for (const ast::Arg* a : {weight_arg, bias_arg}) {
      if (!a) continue;
      const char* role = a == weight_arg ? "weight" : "bias";
      Value w = eval(*a->value);
      if (!need_tensor(w, std::string(name) + " " + role)) return Value::error();
      TensorType tw = type_of(w);
      if (!(tw == per_column))
        return fail(w.loc,
                    "the " + std::string(role) + " of " + name + " must be " + text(per_column) +
                        " (the last dim of x), got " + text(tw),
                    "normalisation runs over the last axis; give one element per position of it", w.length);
      args.push_back(w.id);
    }
    ir::Attrs attrs;
    attrs.value = default_eps;
    if (eps_arg) {
      std::optional<double> eps = static_number(arg_value(eps_arg), "eps");
      if (!eps) return Value::error();
      if (*eps < 0)
        return fail(eps_arg->value->loc, "eps must not be negative", "use a small positive value such as 1e-5",
                    eps_arg->value->length);
      attrs.value = *eps;
    }
    return emit(op.op, args, t, loc, len, attrs);
  }

  Value transpose(Value x, const ast::Arg* perm_arg, SourceLoc loc, uint32_t len) {
    if (!need_tensor(x, "transpose")) return Value::error();
    TensorType t = type_of(x);
    int rank = t.rank();
    std::vector<int64_t> perm;
    if (!perm_arg) {
      if (rank < 2)
        return fail(x.loc, "transpose swaps the last two dims, but " + text(t) + " has fewer than two",
                    "give perm = [...] explicitly, or reshape first", x.length);
      for (int i = 0; i < rank; ++i) perm.push_back(i);
      std::swap(perm[rank - 1], perm[rank - 2]);
    } else {
      Value p = eval(*perm_arg->value);
      if (!p.ok()) return p;
      if (p.kind != Value::Kind::kList)
        return fail(p.loc, "perm must be a list of compile-time integers such as [1, 0], got " + describe(p), "",
                    p.length);
      if (static_cast<int>(p.list.size()) != rank)
        return fail(p.loc,
                    "perm has " + std::to_string(p.list.size()) + " entries for " + text(t) + " of rank " +
                        std::to_string(rank),
                    "give one entry per dim", p.length);
      std::vector<bool> seen(rank, false);
      for (const Value& e : p.list) {
        std::optional<int64_t> k = static_int(e, "a perm entry");
        if (!k) return Value::error();
        int64_t axis = *k < 0 ? *k + rank : *k;
        if (axis < 0 || axis >= rank || seen[axis])
          return fail(p.loc, "perm is not a permutation of the axes 0.." + std::to_string(rank - 1) + " of " + text(t),
                      "list every axis exactly once", p.length);
        seen[axis] = true;
        perm.push_back(axis);
      }
    }
    Shape s;
    for (int64_t a : perm) s.push_back(t.shape[a]);
    ir::Attrs attrs;
    attrs.ints = perm;
    return emit(ir::Op::kTranspose, {x.id}, TensorType{t.dtype, s}, loc, len, attrs);
  }

  // "B*4096", the element count of a shape for messages.
  std::string count_text(const Shape& s) const {
    int64_t constant = 1;
    std::vector<std::string> names;
    for (const Dim& d : s) {
      if (d.is_runtime())
        names.push_back(graph_.dims[d.symbol].name);
      else
        constant *= d.extent;
    }
    std::sort(names.begin(), names.end());
    std::string out;
    for (const std::string& n : names) out += n + "*";
    return out + std::to_string(constant);
  }

  Value reshape(Value x, Value shape, SourceLoc loc, uint32_t len) {
    if (!need_tensor(x, "reshape") || !shape.ok()) return Value::error();
    TensorType t = type_of(x);
    if (shape.kind != Value::Kind::kList)
      return fail(shape.loc, "the shape of reshape must be a list such as [B, 32, 128], got " + describe(shape), "",
                  shape.length);
    Shape s;
    for (const Value& e : shape.list) {
      if (e.kind == Value::Kind::kDim) {
        s.push_back(Dim::runtime(e.dim));
      } else if (e.kind == Value::Kind::kInt && e.i >= 1) {
        s.push_back(Dim::constant(e.i));
      } else {
        return fail(e.loc, "a reshape dim must be a compile-time integer >= 1 or a declared dim, got " + describe(e),
                    "write consts, literals or dim names: reshape(x, [B, 32, 128])", e.length);
      }
    }
    // Same count for every binding: equal constant products and the same
    // run-time dims, each as often.
    auto split = [](const Shape& sh) {
      __int128 constant = 1;
      std::vector<int> symbols;
      for (const Dim& d : sh) {
        if (d.is_runtime())
          symbols.push_back(d.symbol);
        else
          constant *= d.extent;
      }
      std::sort(symbols.begin(), symbols.end());
      return std::make_pair(constant, symbols);
    };
    if (split(s) != split(t.shape))
      return fail(loc,
                  "reshape changes the element count: " + text(t) + " holds " + count_text(t.shape) + " elements, " +
                      text(s) + " holds " + count_text(s),
                  "the new shape must hold the same elements for every value of the run-time dims", len);
    return emit(ir::Op::kReshape, {x.id}, TensorType{t.dtype, s}, loc, len);
  }

  Value concat(const ast::CallExpr& c) {
    auto len = static_cast<uint32_t>(c.callee.size());
    std::vector<Value> parts;
    const ast::Arg* axis_arg = nullptr;
    for (const ast::Arg& a : c.args) {
      if (a.keyword.empty()) {
        parts.push_back(eval(*a.value));
        continue;
      }
      if (a.keyword != "axis") {
        std::string message = "unknown keyword argument '" + a.keyword + "' for concat";
        if (auto near = closest_spelling(a.keyword, {"axis"})) message += "; did you mean '" + *near + "'?";
        return fail(a.loc, message, "concat takes concat(a, b, ..., axis = 0)",
                    static_cast<uint32_t>(a.keyword.size()));
      }
      if (axis_arg) return fail(a.loc, "argument 'axis' of concat is given twice", "give each argument once", 4);
      axis_arg = &a;
    }
    if (parts.empty())
      return fail(c.loc, "missing argument: concat needs the tensors to join", "concat(a, b, ..., axis = 0)", len);
    for (const Value& p : parts)
      if (!need_tensor(p, "concat")) return Value::error();
    TensorType first = type_of(parts[0]);
    int axis = 0;
    if (axis_arg) {
      std::optional<int> a = normalize_axis(eval(*axis_arg->value), first.rank(), "axis");
      if (!a) return Value::error();
      axis = *a;
    } else if (first.rank() == 0) {
      return fail(parts[0].loc, "concat cannot join rank-0 values", "reshape them to [1] first", parts[0].length);
    }
    Shape s = first.shape;
    std::vector<ir::ValueId> ids;
    int64_t total = 0;
    for (const Value& p : parts) {
      TensorType t = type_of(p);
      if (t.dtype != first.dtype || t.rank() != first.rank())
        return fail(p.loc, "concat arguments differ in dtype or rank: " + text(first) + " and " + text(t),
                    "cast or reshape them to agree", p.length);
      for (int k = 0; k < t.rank(); ++k)
        if (k != axis && !(t.shape[k] == first.shape[k]))
          return fail(p.loc,
                      "concat arguments differ in dim " + std::to_string(k) + ": " + text(first) + " and " + text(t),
                      "every dim except the concat axis must agree", p.length);
      if (t.shape[axis].is_runtime() && parts.size() > 1)
        return fail(p.loc, "cannot concat along the run-time dim '" + graph_.dims[t.shape[axis].symbol].name + "'",
                    "concat along an axis of compile-time extent", p.length);
      total += t.shape[axis].extent;
      ids.push_back(p.id);
    }
    if (parts.size() > 1) s[axis] = Dim::constant(total);
    ir::Attrs attrs;
    attrs.axis = axis;
    return emit(ir::Op::kConcat, ids, TensorType{first.dtype, s}, c.loc, len, attrs);
  }

  Value gather(Value table, Value ids, SourceLoc loc, uint32_t len) {
    if (!need_tensor(table, "gather") || !operand_ok(ids, "gather")) return Value::error();
    TensorType tt = type_of(table);
    if (tt.rank() == 0)
      return fail(table.loc, "the table of gather must have rank >= 1, got " + text(tt),
                  "gather picks rows of a table [V, ...]", table.length);
    if (ids.kind == Value::Kind::kInt) ids = constant(ids, DType::kI32);
    if (!ids.ok()) return ids;
    if (!ids.is_tensor() || type_of(ids).dtype != DType::kI32)
      return fail(ids.loc, "gather ids must be i32, got " + describe(ids), "convert them with cast(ids, i32)",
                  ids.length);
    Shape s = type_of(ids).shape;
    s.insert(s.end(), tt.shape.begin() + 1, tt.shape.end());
    return emit(ir::Op::kGather, {table.id, ids.id}, TensorType{tt.dtype, s}, loc, len);
  }

  Value attention(const std::vector<const ast::Arg*>& s, SourceLoc loc, uint32_t len) {
    Value q = arg_value(s[0]), k = arg_value(s[1]), v = arg_value(s[2]), n = arg_value(s[3]);
    if (!need_tensor(q, "attention q") || !need_tensor(k, "attention k") || !need_tensor(v, "attention v") ||
        !operand_ok(n, "attention len"))
      return Value::error();
    TensorType tq = type_of(q), tk = type_of(k), tv = type_of(v);
    std::string all = "q " + text(tq) + ", k " + text(tk) + ", v " + text(tv);
    if (!is_float(tq.dtype) || tk.dtype != tq.dtype || tv.dtype != tq.dtype)
      return fail(loc, "attention q, k and v must share one float dtype: " + all, "convert them with cast", len);
    std::string layout = "q is [..., NH, D], k and v are [..., NH, T, D]";
    if (tq.rank() < 2 || tk.rank() != tq.rank() + 1 || tv.rank() != tk.rank())
      return fail(loc, "attention ranks do not fit: " + all, layout, len);
    Shape q_rows(tq.shape.begin(), tq.shape.end() - 1);
    Shape k_rows(tk.shape.begin(), tk.shape.end() - 2);
    Shape k_positions(tk.shape.begin(), tk.shape.end() - 1), v_positions(tv.shape.begin(), tv.shape.end() - 1);
    if (q_rows != k_rows || k_positions != v_positions || !(tq.shape.back() == tk.shape.back()))
      return fail(loc, "attention shapes do not fit: " + all, layout, len);
    if (n.kind == Value::Kind::kInt) n = constant(n, DType::kI32);
    if (!n.ok()) return n;
    if (!n.is_tensor() || type_of(n).dtype != DType::kI32 || type_of(n).rank() != 0)
      return fail(n.loc, "attention len must be a rank-0 i32 (a device scalar input), got " + describe(n),
                  "declare it as input len : i32;", n.length);
    ir::Attrs attrs;
    const Dim& head = tq.shape.back();
    if (s[4]) {
      std::optional<double> scale = static_number(arg_value(s[4]), "scale");
      if (!scale) return Value::error();
      attrs.value = *scale;
    } else if (head.is_runtime()) {
      return fail(loc,
                  "the head dim of q is the run-time dim '" + graph_.dims[head.symbol].name +
                      "', so the default scale 1/sqrt(D) is unknown",
                  "give scale = ... explicitly", len);
    } else {
      attrs.value = 1.0 / std::sqrt(static_cast<double>(head.extent));
    }
    Shape out = q_rows;
    out.push_back(tv.shape.back());
    return emit(ir::Op::kAttention, {q.id, k.id, v.id, n.id}, TensorType{tq.dtype, out}, loc, len, attrs);
  }

  const ast::Module& m_;
  DiagnosticSink& diags_;
  ir::Graph graph_;
  std::map<std::string, int> dims_;
  std::map<std::string, ConstInfo> consts_;
  std::map<std::string, TensorInfo> tensors_;
  std::map<std::string, FnInfo> fns_;
  std::vector<Frame> frames_;
  SourceLoc top_statement_;  // the statement of the program body being run
  int64_t steps_ = 0;
  int scalar_count_ = 0;
  bool aborted_ = false;
  bool unassigned_unreliable_ = false;  // an `if` was not folded: outputs may be missing for that reason
};

}  // namespace

const std::vector<std::string>& standard_op_names() {
  static const std::vector<std::string> kNames = [] {
    std::vector<std::string> names;
    for (const StdOp& op : std_ops()) names.push_back(op.name);
    return names;
  }();
  return kNames;
}

bool is_standard_op(std::string_view name) { return find_std_op(name) != nullptr; }

std::optional<ir::Graph> lower_module(const ast::Module& module, DiagnosticSink& diags) {
  return Lowerer(module, diags).run();
}

}  // namespace gdl
