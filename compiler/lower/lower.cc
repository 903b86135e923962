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
//    of compile-time extents and run-time dims, rank <= 6, element count
//    within 2^48 with every run-time dim at its upper bound).
// 4. Fn signatures: parameter and result types, resolved once; a type that
//    names a shape or dtype parameter (a generic fn) is resolved at each
//    call, from the arguments bound left to right (calls.cc, bind_generic).
// 5. The program body runs statement by statement over a stack of frames
//    (one per inlined fn call) of block scopes. Values are either compile-time
//    (int, float, bool: computed here), run-time dims (shape names only),
//    lists (shapes, permutations) or tensors (IR nodes). `for` is unrolled,
//    `if` is folded, a fn call is inlined in a fresh frame with its arguments
//    checked against the parameter types. Every op's call goes through its
//    entry in the op table (calls.cc): its type rule checks dtypes and
//    shapes, and its node is located at the source expression.
// 6. Outputs, in declaration order, checked against their declared types.
//
// An error yields an error value that every later check passes on silently,
// so one mistake gives one diagnostic; the walk goes on to find the others.
// Hostile input is bounded: loop iterations, IR nodes, statements run, and
// inlining depth all have limits (lower.h).
#include <algorithm>
#include <cmath>
#include <limits>

#include "frontend/check.h"
#include "lower/lowerer.h"

namespace gdl {
namespace lowering {

std::optional<ir::Graph> Lowerer::run() {
  int errors_before = diags_.error_count();
  graph_.program_name = m_.program_name;
  // Consts first: a dim's bounds may name them (they are evaluated on first use).
  for (const ast::ConstDecl& c : m_.consts)
    if (!consts_.count(c.name)) consts_[c.name].decl = &c;  // a duplicate: check_module reports it
  lower_dims();
  lower_group();
  for (const ast::ConstDecl& c : m_.consts) const_value(c.name);
  lower_leaves();
  for (const ast::FnDecl& f : m_.fns) resolve_signature(f);
  frames_.push_back(Frame{});
  frames_.back().scopes.emplace_back();
  exec_block(m_.body);
  frames_.pop_back();
  collect_outputs();
  collect_state_updates();
  if (diags_.error_count() > errors_before) return std::nullopt;
  return std::move(graph_);
}

Value Lowerer::fail(SourceLoc loc, std::string message, std::string hint, uint32_t length) {
  diags_.error(loc, std::move(message), std::move(hint), length);
  return Value::error();
}

std::string Lowerer::describe(const Value& v) const {
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

void Lowerer::abort(SourceLoc loc, const std::string& message, const std::string& hint) {
  if (aborted_) return;
  aborted_ = true;
  diags_.error(top_statement_.valid() ? top_statement_ : loc, message, hint, 3);
}

bool Lowerer::step(SourceLoc loc) {
  if (aborted_) return false;
  if (++steps_ > kMaxElaborationSteps) {
    abort(loc, "the program takes more than " + std::to_string(kMaxElaborationSteps) + " steps to unroll",
          "unroll fewer loop steps and inline fewer fn calls; let tensor ops over larger shapes do the work");
    return false;
  }
  return true;
}

Value Lowerer::emit(ir::Op op, std::vector<ir::ValueId> args, TensorType type, SourceLoc loc, uint32_t length,
           ir::Attrs attrs) {
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

bool Lowerer::within_element_bound(const TensorType& t, SourceLoc loc, uint32_t length) {
  constexpr int64_t kLimit = int64_t{1} << 48;  // the artifact's bound; kernels index in 64 bits past 2^30
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
                     std::to_string(runtime->hi) + " it holds " + holds + ", more than 2^48",
                 "lower the upper bound of " + runtime->name + ", or split the tensor", length);
  else
    diags_.error(loc, "shape " + text(t) + " holds " + holds + ", more than 2^48",
                 "split the tensor into smaller ones", length);
  return false;
}

Value Lowerer::constant(const Value& v, DType dtype) {
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

Value Lowerer::cast_to(const Value& v, DType dtype, SourceLoc loc, uint32_t length) {
  TensorType t = type_of(v);
  if (t.dtype == dtype) return v;
  t.dtype = dtype;
  return emit(ir::Op::kCast, {v.id}, t, loc, length);
}

bool Lowerer::unify(Value& a, Value& b, const std::string& what, SourceLoc loc, uint32_t length) {
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

bool Lowerer::operand_ok(Value& v, const std::string& what) {
  if (!v.ok()) return false;
  if (v.kind == Value::Kind::kDim) {  // its value this run, as an i32
    ir::Node leaf;
    leaf.op = ir::Op::kDimValue;
    leaf.type = TensorType{DType::kI32, {}};
    leaf.attrs.axis = static_cast<int>(v.dim);
    leaf.name = graph_.dims[v.dim].name;
    leaf.loc = v.loc;
    Value value = Value::tensor(graph_.add(std::move(leaf)));
    value.loc = v.loc;
    value.length = v.length;
    v = value;
  }
  if (v.kind == Value::Kind::kList) {
    fail(v.loc, "a list cannot be an operand of " + what, "lists are for shapes and permutations", v.length);
    return false;
  }
  return true;
}

bool Lowerer::need_tensor(Value& v, const std::string& what) {
  if (!operand_ok(v, what)) return false;
  if (!v.is_tensor()) {
    fail(v.loc, what + " needs a tensor, got " + describe(v), "pass an input, a param or a value computed from them",
         v.length);
    return false;
  }
  return true;
}

std::optional<int64_t> Lowerer::static_int(const Value& v, const std::string& what) {
  if (!v.ok()) return std::nullopt;
  if (v.kind == Value::Kind::kInt) return v.i;
  fail(v.loc, what + " must be a compile-time integer, got " + describe(v),
       v.is_tensor() || v.kind == Value::Kind::kDim ? "run-time values cannot decide it; use a const"
                                                    : "write an integer literal or const",
       v.length);
  return std::nullopt;
}

std::optional<double> Lowerer::static_number(const Value& v, const std::string& what) {
  if (!v.ok()) return std::nullopt;
  if (v.is_number()) return v.number();
  fail(v.loc, what + " must be a compile-time number, got " + describe(v), "write a literal or a const, such as 1e-5",
       v.length);
  return std::nullopt;
}

std::optional<bool> Lowerer::static_bool(const Value& v, const std::string& what) {
  if (!v.ok()) return std::nullopt;
  if (v.kind == Value::Kind::kBool) return v.b;
  fail(v.loc, what + " must be a compile-time bool (true or false), got " + describe(v), "write true or false",
       v.length);
  return std::nullopt;
}

Value* Lowerer::find_local(const std::string& name) {
  if (frames_.empty()) return nullptr;
  for (auto scope = frame().scopes.rbegin(); scope != frame().scopes.rend(); ++scope)
    if (auto it = scope->find(name); it != scope->end()) return &it->second;
  return nullptr;
}

void Lowerer::name_value(const Value& v, const std::string& name) {
  if (!v.is_tensor()) return;
  ir::Node& n = graph_.node(v.id);
  if (!ir::is_leaf(n.op) && n.name.empty()) n.name = name;
}

void Lowerer::exec_block(const ast::Block& block) {
  for (const ast::StmtPtr& s : block) {
    if (!step(s->loc)) return;
    if (frames_.size() == 1 && frame().scopes.size() == 1) top_statement_ = s->loc;
    exec(*s);
  }
}

void Lowerer::exec_scoped(const ast::Block& block) {
  frame().scopes.emplace_back();
  exec_block(block);
  frame().scopes.pop_back();
}

void Lowerer::exec(const ast::Stmt& s) {
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
      auto t = tensors_.find(a.name);
      const bool state = !find_local(a.name) && t != tensors_.end() &&
                         t->second.decl->role == ast::TensorRole::kState && frames_.size() == 1;
      if (a.target && (find_local(a.name) || state)) {
        Value base = state ? Value::tensor(t->second.value) : *find_local(a.name);
        v = (state && t->second.value == ir::kNoValue) ? Value::error() : assign_region(base, v, a);
      }
      if (Value* local = find_local(a.name)) {
        name_value(v, a.name);
        *local = v;
      } else if (state) {
        TensorInfo& info = t->second;
        if (!info.type || info.value == ir::kNoValue || !v.ok()) break;
        Value conformed = conform(v, *info.type, "state '" + a.name + "'", *a.value);
        if (conformed.is_static()) conformed = constant(conformed, info.type->dtype);
        if (conformed.ok()) info.value = conformed.id;
        info.assigned = true;
        state_loc_[a.name] = a.name_loc;
      } else if (t != tensors_.end() && t->second.decl->role == ast::TensorRole::kOutput && frames_.size() == 1) {
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

std::optional<int64_t> Lowerer::loop_bound(const ast::Expr& e) {
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

void Lowerer::exec_for(const ast::ForStmt& f) {
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

Value Lowerer::conform(Value v, const TensorType& t, const std::string& what, const ast::Expr& source) {
  if (!v.ok()) return v;
  if (v.kind == Value::Kind::kDim && !operand_ok(v, what)) return Value::error();  // a dim given as a value
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

void Lowerer::assign_output(TensorInfo& out, const Value& value, const ast::AssignStmt& a) {
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

void Lowerer::collect_outputs() {
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

void Lowerer::collect_state_updates() {
  if (rng_leaf_ != ir::kNoValue) {  // after every random op: the next run draws the counters after this run's
    ir::Attrs attrs;
    attrs.ints = {rng_counters_};
    Value advanced = emit(ir::Op::kRngAdvance, {rng_leaf_}, graph_.node(rng_leaf_).type, SourceLoc{}, 1, attrs);
    if (advanced.ok()) graph_.state_updates.push_back({rng_leaf_, advanced.id, SourceLoc{}});
  }
  for (const ast::TensorDecl& t : m_.tensors) {
    if (t.role != ast::TensorRole::kState) continue;
    auto it = tensors_.find(t.name);
    if (it == tensors_.end() || it->second.decl != &t) continue;
    const TensorInfo& info = it->second;
    if (info.value != ir::kNoValue && info.value != info.leaf)
      graph_.state_updates.push_back({info.leaf, info.value, state_loc_[t.name]});
  }
}

Value Lowerer::assign_region(const Value& base, const Value& value, const ast::AssignStmt& a) {
  const auto& target = a.target->as<ast::IndexExpr>();
  if (!base.ok() || !value.ok()) return Value::error();
  Value region = index(target);
  if (!region.ok()) return Value::error();
  const TensorType whole = type_of(base);
  if (region.id == base.id) return conform(value, whole, "'" + a.name + "'", *a.value);  // every subscript is ':'
  Value v = conform(value, type_of(region), "the region " + text(type_of(region)) + " of '" + a.name + "'", *a.value);
  if (v.is_static()) v = constant(v, whole.dtype);
  if (!v.ok()) return Value::error();
  // The region as a slice (the reshape after it drops the indexed axes).
  const ir::Node* slice = &graph_.node(region.id);
  if (slice->op == ir::Op::kReshape) slice = &graph_.node(slice->args[0]);
  if (slice->op != ir::Op::kSlice)
    return fail(target.loc, "an element at a run-time index cannot be assigned",
                "write it with scatter(base, index, values, axis = ...)", 1);
  const TensorType slice_type = slice->type;
  for (size_t k = 1; k < slice->attrs.ints.size(); k += 2)
    if (ops::runtime_length_symbol(slice->attrs.ints[k]) >= 0)
      return fail(target.loc, "a region of run-time length cannot be assigned",
                  "write its rows with scatter(base, arange(T), values, axis = ...)", 1);
  // A run-time axis has no fixed position to write at (update_slice keeps it whole).
  for (size_t axis = 0; axis < whole.shape.size() && 2 * axis + 1 < slice->attrs.ints.size(); ++axis)
    if (whole.shape[axis].is_runtime() && (slice->attrs.ints[2 * axis] != 0 || slice->attrs.ints[2 * axis + 1] != -1))
      return fail(target.loc, "an assigned region takes a run-time axis whole",
                  "write rows at positions along it with scatter(base, index, values, axis = " + std::to_string(axis) +
                      ")",
                  1);
  ir::Attrs attrs;
  attrs.ints = slice->attrs.ints;
  if (type_of(v) != slice_type) v = emit(ir::Op::kReshape, {v.id}, slice_type, target.loc, 1);
  if (!v.ok()) return Value::error();
  return emit(ir::Op::kUpdateSlice, {base.id, v.id}, whole, a.name_loc, static_cast<uint32_t>(a.name.size()), attrs);
}

Value Lowerer::eval(const ast::Expr& e) {
  if (aborted_) return Value::error();
  if (eval_depth_ >= kMaxEvalDepth) {
    abort(start_of(e),
          "expressions nest more than " + std::to_string(kMaxEvalDepth) + " deep through fn calls and consts",
          "name intermediate results with let, and inline fewer fns inside one another");
    return Value::error();
  }
  ++eval_depth_;
  Value v = eval_inner(e);
  --eval_depth_;
  if (v.ok() && !v.loc.valid()) {
    v.loc = start_of(e);
    v.length = e.length;
  }
  return v;
}

Value Lowerer::eval_inner(const ast::Expr& e) {
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

Value Lowerer::located(Value v, const ast::Expr& e) {
  if (v.ok()) {
    v.loc = start_of(e);
    v.length = e.length;
  }
  return v;
}

Value Lowerer::lookup(const ast::NameExpr& n) {
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
    if (info.decl->role == ast::TensorRole::kState) {
      if (info.value == ir::kNoValue) return Value::error();  // its declaration was rejected
      return Value::tensor(info.value);
    }
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

Value Lowerer::fold(ast::BinaryOp op, const Value& a, const Value& b, SourceLoc loc) {
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
  if (is_integer_operator(op)) {
    if (a.kind != K::kInt || b.kind != K::kInt)
      return fail(loc, sp + " needs integers, got " + describe(a) + " and " + describe(b),
                  op == ast::BinaryOp::kFloorDiv ? "for floats write floor(a / b)"
                  : op == ast::BinaryOp::kMod    ? "for floats write a - floor(a / b) * b"
                                                 : "use integers on both sides",
                  1);
    if ((op == ast::BinaryOp::kFloorDiv || op == ast::BinaryOp::kMod) && b.i == 0)
      return fail(loc, "division by zero in compile-time arithmetic", "check the consts this expression uses", 1);
    std::optional<int64_t> r = ops::op_def(binary_ir_op(op)).fold_binary_int(a.i, b.i);
    if (!r) return fail(loc, "integer overflow in compile-time arithmetic", "compile-time integers are 64-bit", 1);
    return Value::integer(*r);
  }
  if (a.kind == K::kInt && b.kind == K::kInt) {
    int64_t r = 0;
    bool overflow = false;
    switch (op) {
      case ast::BinaryOp::kAdd: overflow = __builtin_add_overflow(a.i, b.i, &r); break;
      case ast::BinaryOp::kSub: overflow = __builtin_sub_overflow(a.i, b.i, &r); break;
      case ast::BinaryOp::kMul: overflow = __builtin_mul_overflow(a.i, b.i, &r); break;
      case ast::BinaryOp::kDiv:
        if (b.i == 0)
          return fail(loc, "division by zero in compile-time arithmetic", "check the consts this expression uses", 1);
        if (a.i == std::numeric_limits<int64_t>::min() && b.i == -1)
          overflow = true;
        else
          r = a.i / b.i;  // truncates toward zero, as i32 tensors do
        break;
      default: break;
    }
    if (overflow)
      return fail(loc, "integer overflow in compile-time arithmetic", "compile-time integers are 64-bit", 1);
    return Value::integer(r);
  }
  double x = a.number(), y = b.number();
  switch (op) {
    case ast::BinaryOp::kAdd: return finite(x + y, loc, 1);
    case ast::BinaryOp::kSub: return finite(x - y, loc, 1);
    case ast::BinaryOp::kMul: return finite(x * y, loc, 1);
    case ast::BinaryOp::kDiv: return finite(x / y, loc, 1);
    default: return Value::error();
  }
}

Value Lowerer::finite(double v, SourceLoc loc, uint32_t length) {
  // A literal cannot be inf or NaN either: a const holds what a literal can.
  if (!std::isfinite(v))
    return fail(loc, std::string("compile-time float arithmetic gives ") + (std::isnan(v) ? "NaN" : number_text(v)),
                "keep compile-time floats finite: check the consts this expression uses", length);
  return Value::real(v);
}

}  // namespace lowering

std::optional<ir::Graph> lower_module(const ast::Module& module, DiagnosticSink& diags) {
  return lowering::Lowerer(module, diags).run();
}

}  // namespace gdl
