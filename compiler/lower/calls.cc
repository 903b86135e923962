// Calls, operators and subscripts: everything that makes an op node.
//
// A fn call is inlined, its arguments checked against the parameter types
// (a generic fn's bound first, left to right: bind_generic).
// A standard op's call, an operator (a + b, -x, a @ b) and a subscript
// (x[1:3]) go through the op's entry in the op table (ops/op_def.h): its
// parameters bind the call's arguments, and its type rule checks them
// through a CallQuery, which holds the evaluated operands, evaluates the
// attributes as the rule asks for them, converts each as asked and reports
// a mistake at that argument. What stays here
// is what only the source form has: compile-time folding (exp(2.0), 1 + 2),
// weak run-time scalars, cast's type name and the subscript syntax.
#include <algorithm>
#include <limits>
#include <utility>

#include "frontend/ast_print.h"
#include "frontend/check.h"
#include "internal_error.h"
#include "lower/lowerer.h"
#include "ops/collective.h"

namespace gdl::lowering {

// A type rule's questions answered from a call's arguments. Slot k holds
// parameter k's argument (evaluated when first asked for) or a value
// evaluated already (an operator's operands, a subscript's bounds).
class CallQuery final : public ops::TypeQuery {
 public:
  CallQuery(Lowerer& l, const ops::OpDef& def, std::string what, SourceLoc loc, uint32_t length, size_t operands)
      : TypeQuery(l.graph_.dims, l.graph_.group.ranks, std::move(what), {}),
        l_(l),
        def_(def),
        loc_(loc),
        length_(length),
        operands_(operands),
        slots_(operands + def.params.size() - def.operands) {}

  const ops::OpDef& def() const { return def_; }
  SourceLoc loc() const { return loc_; }
  uint32_t length() const { return length_; }

  void bind(size_t slot, const ast::Arg* a) {
    slots_[slot].arg = a;
    slots_[slot].given = a != nullptr;
  }
  void bind(size_t slot, Value v) {
    slots_[slot].value = std::move(v);
    slots_[slot].given = true;
  }
  void set_subscript_forms(std::vector<ops::SubscriptForm> forms) { forms_ = std::move(forms); }

  // The value in a given slot, evaluated on first use.
  Value& operand(size_t slot) {
    Slot& s = slots_[slot];
    if (!s.value) s.value = s.arg ? l_.eval(*s.arg->value) : Value::error();
    return *s.value;
  }
  // The node's arguments: the given operands in slot order.
  std::vector<ir::ValueId> operand_ids() {
    std::vector<ir::ValueId> ids;
    for (size_t k = 0; k < operands_; ++k)
      if (given(k)) ids.push_back(operand(k).id);
    return ids;
  }
  // Whether an accessor turned an argument down (and reported why, or it
  // was an error value already): the rule's own error would repeat it.
  bool turned_down() const { return turned_down_; }

  // Where a rule's error points: the argument's value, its keyword, or the
  // op as written.
  std::pair<SourceLoc, uint32_t> location(const ops::TypeError& e) {
    if (e.slot == ops::kAtOp || !given(static_cast<size_t>(e.slot))) return {loc_, length_};
    const Slot& s = slots_[static_cast<size_t>(e.slot)];
    if (e.at_keyword && s.arg && !s.arg->keyword.empty())
      return {s.arg->loc, static_cast<uint32_t>(s.arg->keyword.size())};
    if (s.value && s.value->ok()) return {s.value->loc, s.value->length};
    if (s.arg) return {start_of(*s.arg->value), s.arg->value->length};
    return {loc_, length_};
  }

  size_t operand_count() const override { return operands_; }
  bool given(size_t slot) const override { return slot < slots_.size() && slots_[slot].given; }

  const TensorType* tensor(size_t slot, const std::string& what) override {
    if (!given(slot)) return nullptr;
    if (!l_.need_tensor(operand(slot), what)) return turn_down();
    return type(slot);
  }

  const TensorType* value(size_t slot, const std::string& what, DType dtype, std::string* described) override {
    if (!given(slot)) return nullptr;
    Value& v = operand(slot);
    if (!l_.operand_ok(v, what)) return turn_down();
    if (v.is_static()) {
      const bool fits = dtype == DType::kBool  ? v.kind == Value::Kind::kBool
                        : dtype == DType::kI32 ? v.kind == Value::Kind::kInt
                                               : v.is_number();
      if (!fits) {
        *described = l_.describe(v);
        return nullptr;
      }
      v = l_.constant(v, dtype);
      if (!v.ok()) return turn_down();
    }
    return type(slot);
  }

  bool unify(size_t slot_a, size_t slot_b) override {
    Value& a = operand(slot_a);
    Value& b = operand(slot_b);
    if (!l_.operand_ok(a, what()) || !l_.operand_ok(b, what()) || !l_.unify(a, b, what(), loc_, length_))
      return turn_down(), false;
    return true;
  }

  std::optional<int64_t> static_integer(size_t slot) override {
    if (!given(slot)) return std::nullopt;
    const Value& v = operand(slot);
    if (v.kind == Value::Kind::kInt) return v.i;
    if (!v.is_tensor()) return std::nullopt;
    const ir::Node& n = l_.graph_.node(v.id);
    if (n.op != ir::Op::kConstant || n.type.dtype != DType::kI32) return std::nullopt;
    return static_cast<int64_t>(n.attrs.value);
  }

  bool integer(size_t slot, const std::string& what, int64_t* out) override {
    return accept(l_.static_int(operand(slot), what), out);
  }
  bool flag(size_t slot, const std::string& what, bool* out) override {
    return accept(l_.static_bool(operand(slot), what), out);
  }
  bool number(size_t slot, const std::string& what, double* out) override {
    return accept(l_.static_number(operand(slot), what), out);
  }

  bool integers(size_t slot, const std::string& what, std::vector<int64_t>* out) override {
    const Value& v = operand(slot);
    if (!v.ok()) return turn_down(), false;
    if (v.kind != Value::Kind::kList) {
      l_.fail(v.loc, what + " must be a list of compile-time integers such as [1, 0], got " + l_.describe(v), "",
              v.length);
      return turn_down(), false;
    }
    for (const Value& e : v.list) {
      std::optional<int64_t> k = l_.static_int(e, "a " + what + " entry");
      if (!k) return turn_down(), false;
      out->push_back(*k);
    }
    return true;
  }

  bool axes(size_t slot, const std::string& what, std::vector<int64_t>* out) override {
    const Value& v = operand(slot);
    if (v.kind != Value::Kind::kList) {
      std::optional<int64_t> k = l_.static_int(v, what);
      if (!k) return turn_down(), false;
      out->push_back(*k);
      return true;
    }
    if (v.list.empty()) {
      l_.fail(v.loc, what + " = [] names no axis", "give one axis, or a list such as [0, 2]", v.length);
      return turn_down(), false;
    }
    return integers(slot, what, out);
  }

  bool extent(size_t slot, const std::string& what, size_t, Dim* out) override {
    const Value& v = operand(slot);
    if (!v.ok()) return turn_down(), false;
    if (v.kind == Value::Kind::kDim) return *out = Dim::runtime(v.dim), true;
    if (v.kind == Value::Kind::kInt) return *out = Dim::constant(v.i), true;
    l_.fail(v.loc, what + " must be a compile-time integer or a dim name, got " + l_.describe(v),
            "write an integer literal, a const or a declared dim", v.length);
    return turn_down(), false;
  }

  bool shape(size_t slot, Shape* out) override {
    const Value& v = operand(slot);
    if (!v.ok()) return turn_down(), false;
    if (v.kind != Value::Kind::kList) {
      l_.fail(v.loc, "the shape of " + what() + " must be a list such as [B, 32, 128], got " + l_.describe(v), "",
              v.length);
      return turn_down(), false;
    }
    bool inferred = false;
    for (const Value& e : v.list) {
      if (e.kind == Value::Kind::kDim) {
        out->push_back(Dim::runtime(e.dim));
      } else if (e.kind == Value::Kind::kInt && e.i >= 1) {
        out->push_back(Dim::constant(e.i));
      } else if (e.kind == Value::Kind::kInt && e.i == -1 && !inferred) {
        out->push_back(Dim::constant(-1));  // the op's rule works it out (reshape) or refuses it
        inferred = true;
      } else {
        l_.fail(e.loc,
                "a " + what() + " dim must be a compile-time integer >= 1, a declared dim or one -1, got " +
                    l_.describe(e),
                "write consts, literals or dim names: " + what() + "(x, [B, 32, 128])", e.length);
        return turn_down(), false;
      }
    }
    return true;
  }

  // A type name, read from the source: cast(x, f16).
  bool dtype(size_t slot, DType* out) override {
    const ast::Arg* a = slots_[slot].arg;
    GDL_INTERNAL_ASSERT(a != nullptr, "a type parameter bound to an evaluated value");
    const ast::Expr& target = *a->value;
    if (target.kind != ast::ExprKind::kName) {
      l_.fail(start_of(target), "the target of " + what() + " must be a type name such as f16",
              "write " + what() + "(x, f16)", target.length);
      return turn_down(), false;
    }
    const std::string& name = target.as<ast::NameExpr>().name;
    std::optional<DType> dtype = l_.dtype_named(name);
    if (!dtype) {
      std::string message = "unknown type '" + name + "' in " + what();
      if (auto near = closest_spelling(name, {"f32", "f16", "bf16", "i32", "bool"}))
        message += "; did you mean '" + *near + "'?";
      l_.fail(target.loc, message, "the types are f32, f16, bf16, i32 and bool", target.length);
      return turn_down(), false;
    }
    *out = *dtype;
    return true;
  }

  // A reduction's name, read from the source: all_reduce(x, op = max).
  bool reduction(size_t slot, int64_t* out) override {
    const ast::Arg* a = slots_[slot].arg;
    GDL_INTERNAL_ASSERT(a != nullptr, "a reduction parameter bound to an evaluated value");
    const ast::Expr& e = *a->value;
    const std::string name = e.kind == ast::ExprKind::kName ? e.as<ast::NameExpr>().name : std::string();
    if (std::optional<ir::CollectiveReduce> r = ops::collective_reduce_named(name)) {
      *out = static_cast<int64_t>(*r);
      return true;
    }
    std::string message =
        name.empty() ? "the reduction of " + what() + " must be a name" : "unknown reduction '" + name + "' in " + what();
    if (name == "mean" || name == "average") message += "; did you mean 'avg'?";
    else if (!name.empty())
      if (auto near = closest_spelling(name, {"sum", "prod", "max", "min", "avg"})) message += "; did you mean '" + *near + "'?";
    l_.fail(start_of(e), message, "the reductions are sum, prod, max, min and avg (floats only)", e.length);
    return turn_down(), false;
  }

  std::vector<ops::SubscriptForm> subscript_forms() const override { return forms_; }

 private:
  struct Slot {
    const ast::Arg* arg = nullptr;
    std::optional<Value> value;
    bool given = false;
    TensorType type;  // the value's type, for the pointer a rule holds
  };

  const TensorType* type(size_t slot) {
    Slot& s = slots_[slot];
    s.type = l_.type_of(*s.value);
    return &s.type;
  }
  const TensorType* turn_down() {
    turned_down_ = true;
    return nullptr;
  }
  template <typename T>
  bool accept(const std::optional<T>& v, T* out) {
    if (!v) return turn_down(), false;
    *out = *v;
    return true;
  }

  Lowerer& l_;
  const ops::OpDef& def_;
  SourceLoc loc_;
  uint32_t length_;
  size_t operands_;
  std::vector<Slot> slots_;
  std::vector<ops::SubscriptForm> forms_;
  bool turned_down_ = false;
};

// ----------------------------------------------------------------- op nodes

std::optional<TensorType> Lowerer::infer(CallQuery& q) {
  const ops::TypeResult r = q.def().infer(q);
  if (!r.ok() && r.error && !q.turned_down()) {
    const auto [at, length] = q.location(*r.error);
    fail(at, r.error->message, r.error->hint, length);
  }
  return r.type;
}

Value Lowerer::apply(CallQuery& q) {
  const std::optional<TensorType> type = infer(q);
  if (!type) return Value::error();
  return emit(q.def().op, q.operand_ids(), *type, q.loc(), q.length(), q.attrs());
}

Value Lowerer::elementwise(CallQuery& q) {
  const ops::OpDef& def = q.def();
  std::vector<Value> operands;
  bool all_static = true, weak = true;
  for (size_t k = 0; k < q.operand_count(); ++k) {
    if (!q.given(k)) continue;
    Value& v = q.operand(k);
    if (!operand_ok(v, q.what())) return Value::error();
    all_static = all_static && v.is_static();
    weak = weak && (v.weak || v.is_static());
    operands.push_back(v);
  }
  const bool arithmetic = def.unary || def.binary;  // computes from its operands' elements alone
  if (all_static && arithmetic) return fold_call(def, q.what(), operands, q.loc(), q.length());
  Value r = apply(q);
  if (r.ok()) r.weak = arithmetic && weak && type_of(r).dtype != DType::kBool;
  return r;
}

Value Lowerer::fold_call(const ops::OpDef& def, const std::string& name, const std::vector<Value>& operands,
                         SourceLoc loc, uint32_t length) {
  bool ints = true;
  for (const Value& v : operands) {
    if (!v.is_number()) {
      if (operands.size() == 1)
        return fail(v.loc, name + " needs a number, got " + describe(v), "pass a float value", v.length);
      return fail(loc, name + " needs numbers, got " + describe(operands[0]) + " and " + describe(operands[1]),
                  "pass numbers or numeric tensors", length);
    }
    ints = ints && v.kind == Value::Kind::kInt;
  }
  const bool exact = operands.size() == 1 ? def.fold_unary_int != nullptr : def.fold_binary_int != nullptr;
  if (ints && exact) {
    const std::optional<int64_t> r = operands.size() == 1 ? def.fold_unary_int(operands[0].i)
                                                           : def.fold_binary_int(operands[0].i, operands[1].i);
    if (!r) return fail(loc, "integer overflow in compile-time arithmetic", "compile-time integers are 64-bit", length);
    return Value::integer(*r);
  }
  return finite(operands.size() == 1 ? def.unary(operands[0].number(), DType::kF32)
                                     : def.binary(operands[0].number(), operands[1].number(), DType::kF32),
                loc, length);
}

// ---------------------------------------------------------------- operators

Value Lowerer::unary(const ast::UnaryExpr& u) {
  Value x = eval(*u.operand);
  const bool negate = u.op == ast::UnaryOp::kNeg;
  const std::string what = negate ? "unary -" : "!";
  if (!operand_ok(x, what)) return Value::error();
  if (x.is_static()) {
    if (!negate) {
      if (x.kind == Value::Kind::kBool) return Value::boolean(!x.b);
      return fail(u.loc, "! needs a bool, got " + describe(x), "compare first, for example !(x > 0.0)", u.length);
    }
    if (x.kind == Value::Kind::kInt) {
      if (x.i == std::numeric_limits<int64_t>::min())
        return fail(u.loc, "integer overflow in compile-time arithmetic", "compile-time integers are 64-bit", u.length);
      return Value::integer(-x.i);
    }
    if (x.kind == Value::Kind::kFloat) return Value::real(-x.f);
    return fail(u.loc, "unary - needs a number, got " + describe(x), "use ! to negate a bool", u.length);
  }
  CallQuery q(*this, ops::op_def(negate ? ir::Op::kNeg : ir::Op::kNot), what, u.loc, u.length, 1);
  q.bind(0, x);
  return elementwise(q);
}

Value Lowerer::binary(ast::BinaryOp op, Value a, Value b, SourceLoc loc) {
  const std::string what = std::string("'") + ast::binary_op_spelling(op) + "'";
  if (!a.ok() || !b.ok()) return Value::error();
  if (!operand_ok(a, what) || !operand_ok(b, what)) return Value::error();
  if (a.is_static() && b.is_static() && op != ast::BinaryOp::kMatMul) return fold(op, a, b, loc);
  const bool matmul = op == ast::BinaryOp::kMatMul;
  CallQuery q(*this, ops::op_def(matmul ? ir::Op::kMatMul : binary_ir_op(op)), matmul ? "matmul" : what, loc, 1, 2);
  q.bind(0, a);
  q.bind(1, b);
  return matmul ? apply(q) : elementwise(q);
}

// ------------------------------------------------------------------- calls

bool Lowerer::bind_keyword(const ast::Arg& a, const std::string& callee, const std::vector<std::string>& params,
                           const std::string& usage, std::vector<const ast::Arg*>& slots) {
  const auto it = std::find(params.begin(), params.end(), a.keyword);
  const auto length = static_cast<uint32_t>(a.keyword.size());
  if (it == params.end()) {
    std::string message = "unknown keyword argument '" + a.keyword + "' for " + callee;
    if (auto near = closest_spelling(a.keyword, params)) message += "; did you mean '" + *near + "'?";
    fail(a.loc, message, usage, length);
    return false;
  }
  const ast::Arg*& slot = slots[static_cast<size_t>(it - params.begin())];
  if (slot) {
    fail(a.loc, "argument '" + a.keyword + "' of " + callee + " is given twice", "give each argument once", length);
    return false;
  }
  slot = &a;
  return true;
}

std::optional<std::vector<const ast::Arg*>> Lowerer::bind_args(const ast::CallExpr& c, const std::vector<std::string>& params,
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
    if (!bind_keyword(a, c.callee, params, "call it as " + sig, slots)) return std::nullopt;
  }
  for (size_t k = 0; k < required; ++k)
    if (!slots[k]) {
      fail(c.loc, "missing argument '" + params[k] + "' in call to " + c.callee, "call it as " + sig,
           static_cast<uint32_t>(c.callee.size()));
      return std::nullopt;
    }
  return slots;
}

Value Lowerer::inline_fn(const FnInfo& fn, const ast::CallExpr& c) {
  const ast::FnDecl& decl = *fn.decl;
  // A call of a fn that is being inlined would never end; with two such
  // calls in a body, inlining up to the depth limit takes exponential time.
  for (size_t k = 0; k < frames_.size(); ++k) {
    if (frames_[k].fn != &decl) continue;
    std::string cycle;
    for (size_t j = k; j < frames_.size(); ++j) cycle += frames_[j].fn->name + " -> ";
    return fail(c.loc, "recursive call: " + cycle + decl.name,
                "fns are inlined at every call, so recursion would never end; "
                "repeat work with a for loop over a compile-time range",
                static_cast<uint32_t>(c.callee.size()));
  }
  std::vector<std::string> names;
  for (const ast::FnParam& p : decl.params) names.push_back(p.name);
  auto slots = bind_args(c, names, names.size(), "fn ");
  if (!slots) return Value::error();
  TypeBindings types;
  std::map<std::string, Value> bound;
  bool ok = fn.signature_ok;
  for (size_t k = 0; k < names.size(); ++k) {
    const ast::Expr& arg = *(*slots)[k]->value;
    Value v = eval(arg);
    if (ok && v.ok())
      v = fn.generic[k] ? bind_generic(fn, k, v, arg, types)
                        : conform(v, *fn.params[k], "argument '" + names[k] + "' of " + decl.name, arg);
    ok = ok && v.ok();
    bound[names[k]] = v;
  }
  if (!ok) return Value::error();
  std::optional<TensorType> result = fn.result;
  if (fn.generic_result) {  // this call's result type, from its bindings
    const ast::TypeExpr& t = *decl.result;
    const std::string what = "the result type " + type_text(t) + " of " + decl.name;
    const auto length = static_cast<uint32_t>(c.callee.size());
    result = TensorType{};
    auto dtype = types.dtypes.find(t.dtype);  // a dtype parameter is bound by now: a parameter has it
    result->dtype = dtype != types.dtypes.end() ? dtype->second : parse_dtype(t.dtype).value_or(DType::kF32);
    for (const ast::ExprPtr& e : t.dims) {
      std::optional<Dim> d = bound_dim(fn, *e, types, what, c.loc, length);
      if (!d) return Value::error();
      result->shape.push_back(*d);
    }
    if (!within_element_bound(*result, c.loc, length)) return Value::error();
  }
  if (frames_.size() > static_cast<size_t>(kMaxInlineDepth))
    return fail(c.loc, "fn calls nest more than " + std::to_string(kMaxInlineDepth) + " deep", "",
                static_cast<uint32_t>(c.callee.size()));
  if (!step(c.loc)) return Value::error();
  frames_.emplace_back();
  frame().fn = &decl;
  bound.insert(types.dims.begin(), types.dims.end());  // the checker keeps the names apart
  frame().scopes.push_back(std::move(bound));
  frame().dtypes = std::move(types.dtypes);
  exec_block(decl.body);
  std::optional<Value> returned = std::move(frame().result);
  frames_.pop_back();
  if (!returned || !returned->ok()) return Value::error();
  if (result && decl.body.back()->kind == ast::StmtKind::kReturn) {
    const ast::Expr& source = *decl.body.back()->as<ast::ReturnStmt>().value;
    return conform(*returned, *result, "the result of fn " + decl.name, source);
  }
  return *returned;
}

Value Lowerer::bind_generic(const FnInfo& fn, size_t k, Value v, const ast::Expr& arg, TypeBindings& b) {
  const ast::FnParam& p = fn.decl->params[k];
  const std::string what = "argument '" + p.name + "' of " + fn.decl->name;
  const SourceLoc at = start_of(arg);
  if (v.kind == Value::Kind::kDim && !operand_ok(v, what)) return Value::error();  // a dim given as a value
  if (!v.is_tensor() && !v.is_static())
    return fail(at, what + " must be " + type_text(p.type) + ", got " + describe(v), "pass a tensor of that type",
                arg.length);
  // A compile-time value stands for a rank-0 value of the dtype it takes.
  const TensorType have = v.is_tensor() ? type_of(v) : TensorType{};
  const size_t rank = p.type.dims.size();
  if (static_cast<size_t>(have.rank()) != rank)
    return fail(at,
                what + " has rank " + std::to_string(have.rank()) + " (" + describe(v) + "), but its type " +
                    type_text(p.type) + " has " + std::to_string(rank) + (rank == 1 ? " dim" : " dims"),
                "pass a tensor of rank " + std::to_string(rank), arg.length);

  TensorType want;
  const std::string& dtype = p.type.dtype;
  if (std::optional<DType> fixed = parse_dtype(dtype)) {
    want.dtype = *fixed;
  } else if (auto bound = b.dtypes.find(dtype); bound != b.dtypes.end()) {
    want.dtype = bound->second;
    // A run-time scalar still adapts to another float type (conform casts it).
    const bool adapts = v.weak && have.rank() == 0 && is_float(have.dtype) && is_float(want.dtype);
    if (v.is_tensor() && have.dtype != want.dtype && !adapts)
      return fail(at,
                  what + ": dtype " + dtype + " is " + dtype_name(have.dtype) + " here, but " + dtype + " = " +
                      dtype_name(want.dtype) + " from argument '" + b.by.at(dtype) + "'",
                  "convert it with cast(" + (arg.kind == ast::ExprKind::kName ? expr_text(arg) : "x") + ", " +
                      dtype_name(want.dtype) + "), or pass a tensor of dtype " + dtype_name(want.dtype),
                  arg.length);
  } else {
    if (!v.is_tensor())
      return fail(at, what + " is " + describe(v) + ", which cannot bind the dtype parameter " + dtype,
                  "pass a tensor, or bind " + dtype + " by an earlier parameter", arg.length);
    want.dtype = b.dtypes[dtype] = have.dtype;
    b.by[dtype] = p.name;
  }

  for (size_t i = 0; i < p.type.dims.size(); ++i) {
    const ast::Expr& e = *p.type.dims[i];
    const Dim got = have.shape[i];
    if (e.kind == ast::ExprKind::kName) {
      const std::string& name = e.as<ast::NameExpr>().name;
      if (fn.generics.is_dim(name) && !b.dims.count(name)) {  // the first bare occurrence binds
        Value d = Value::integer(got.extent);
        if (got.is_runtime()) {
          d.kind = Value::Kind::kDim;
          d.dim = got.symbol;
        }
        b.dims[name] = d;
        b.by[name] = p.name;
        want.shape.push_back(got);
        continue;
      }
    }
    std::optional<Dim> d = bound_dim(fn, e, b, what, at, arg.length);
    if (!d) return Value::error();
    const std::string uses = bindings_text(e, b);
    if (*d != got && !uses.empty())  // without type parameters, conform reports the whole type
      return fail(at, what + ": dim " + expr_text(e) + " is " + dim_text(got) + " here, but " + uses,
                  "a shape parameter takes its value from the first argument that has it as a whole dim; the "
                  "others must agree",
                  arg.length);
    want.shape.push_back(*d);
  }
  return conform(v, want, what, arg);
}

std::optional<Dim> Lowerer::bound_dim(const FnInfo& fn, const ast::Expr& e, const TypeBindings& b,
                                      const std::string& what, SourceLoc at, uint32_t length) {
  std::vector<const ast::NameExpr*> names;
  collect_names(e, names);
  if (e.kind != ast::ExprKind::kName)
    for (const ast::NameExpr* n : names) {
      auto it = b.dims.find(n->name);
      if (it == b.dims.end() || it->second.kind != Value::Kind::kDim) continue;
      fail(at,
           what + ": dim " + expr_text(e) + " needs " + n->name + " to be a compile-time extent, but " + n->name +
               " = " + graph_.dims[it->second.dim].name + ", a run-time dim, from argument '" + b.by.at(n->name) +
               "'",
           "a run-time dim is a shape only on its own; give the fn another shape parameter for this dim", length);
      return std::nullopt;
    }
  // Only the bindings and the globals are visible, as at the declaration.
  frames_.emplace_back();
  frame().fn = fn.decl;
  frame().scopes.push_back(b.dims);
  std::optional<Dim> d = shape_dim(eval(e), e);
  frames_.pop_back();
  return d;
}

std::string Lowerer::dim_text(const Dim& d) const {
  return d.is_runtime() ? graph_.dims[static_cast<size_t>(d.symbol)].name : std::to_string(d.extent);
}

std::string Lowerer::bindings_text(const ast::Expr& e, const TypeBindings& b) const {
  std::vector<const ast::NameExpr*> names;
  collect_names(e, names);
  std::vector<std::string> parts;
  for (const ast::NameExpr* n : names) {
    auto it = b.dims.find(n->name);
    if (it == b.dims.end()) continue;
    const Value& v = it->second;
    const Dim d = v.kind == Value::Kind::kDim ? Dim::runtime(v.dim) : Dim::constant(v.i);
    std::string part = n->name + " = " + dim_text(d) + " from argument '" + b.by.at(n->name) + "'";
    if (std::find(parts.begin(), parts.end(), part) == parts.end()) parts.push_back(part);
  }
  std::string text;
  for (size_t i = 0; i < parts.size(); ++i)
    text += (i == 0 ? "" : i + 1 == parts.size() ? " and " : ", ") + parts[i];
  return text;
}

Value Lowerer::call(const ast::CallExpr& c) {
  if (auto f = fns_.find(c.callee); f != fns_.end()) return inline_fn(f->second, c);
  if (const ops::OpDef* def = ops::find_callable(c.callee)) return call_op(*def, c);
  return fail(c.loc, "unknown function '" + c.callee + "'", "declare it with fn, or use a standard op",
              static_cast<uint32_t>(c.callee.size()));
}

Value Lowerer::call_op(const ops::OpDef& def, const ast::CallExpr& c) {
  if (def.max_args == SIZE_MAX) return call_variadic(def, c);
  const auto length = static_cast<uint32_t>(c.callee.size());
  const std::vector<std::string> params(def.params.begin(), def.params.end());
  std::optional<std::vector<const ast::Arg*>> bound = bind_args(c, params, def.required, "");
  if (!bound) return Value::error();
  std::vector<const ast::Arg*> args = std::move(*bound);
  const ops::OpDef* op = &def;
  if (def.without_second_operand) {  // max(x, axis) against max(a, b)
    const ops::OpDef& other = ops::op_def(*def.without_second_operand);
    if (!args[1]) {
      op = &other;
      args.erase(args.begin() + 1);
    } else {
      const auto operands = static_cast<std::ptrdiff_t>(def.operands);
      std::string names;
      for (auto p = params.begin() + operands; p != params.end(); ++p) names += (names.empty() ? "" : " or ") + *p;
      for (size_t k = def.operands; k < args.size(); ++k)
        if (args[k])
          return fail(args[k]->loc,
                      signature_text(c.callee, {params.begin(), params.begin() + operands}) + " takes no " + names,
                      "leave out " + params[1] + " to call " +
                          signature_text(c.callee, {other.params.begin(), other.params.end()}),
                      args[k]->keyword.empty() ? args[k]->value->length
                                               : static_cast<uint32_t>(args[k]->keyword.size()));
    }
  }
  CallQuery q(*this, *op, c.callee, c.loc, length, op->operands);
  for (size_t k = 0; k < args.size(); ++k) q.bind(k, args[k]);
  if (op->op == ir::Op::kCast) return cast(q);
  if (op->expansion == ops::Expansion::kGrad) return gradient(q);
  if (op->op == ir::Op::kRandUniform || op->op == ir::Op::kRandNormal || op->expansion != ops::Expansion::kNone)
    return random(q);
  for (size_t k = 0; k < op->operands; ++k)  // operands are evaluated in order, before any check
    if (q.given(k)) q.operand(k);
  return op->fusion == ops::FusionClass::kElementwise ? elementwise(q) : apply(q);
}

// concat(a, b, ..., axis = 0): the positional arguments are the operands,
// the op's parameters are keyword-only.
Value Lowerer::call_variadic(const ops::OpDef& def, const ast::CallExpr& c) {
  const auto length = static_cast<uint32_t>(c.callee.size());
  const std::vector<std::string> params(def.params.begin(), def.params.end());
  std::vector<std::string> form{"a", "b", "..."};
  form.insert(form.end(), params.begin(), params.end());
  const std::string usage = "call it as " + signature_text(c.callee, form);
  std::vector<Value> parts;
  std::vector<const ast::Arg*> keywords(params.size(), nullptr);
  for (const ast::Arg& a : c.args) {
    if (a.keyword.empty()) {
      parts.push_back(eval(*a.value));
      continue;
    }
    if (!bind_keyword(a, c.callee, params, usage, keywords)) return Value::error();
  }
  if (parts.empty())
    return fail(c.loc, "missing argument: " + c.callee + " needs the tensors to join", usage, length);
  CallQuery q(*this, def, c.callee, c.loc, length, parts.size());
  for (size_t k = 0; k < parts.size(); ++k) q.bind(k, parts[k]);
  for (size_t k = 0; k < keywords.size(); ++k) q.bind(parts.size() + k, keywords[k]);
  return apply(q);
}

// cast(x, dtype): the target is a type name; a compile-time value converts
// at compile time, and a tensor of the target dtype is itself.
Value Lowerer::cast(CallQuery& q) {
  DType dtype;
  if (!q.dtype(1, &dtype)) return Value::error();
  Value& x = q.operand(0);
  if (!operand_ok(x, q.what())) return Value::error();
  if (x.is_static()) {
    const double v = x.kind == Value::Kind::kBool ? (x.b ? 1.0 : 0.0) : x.number();
    if (dtype == DType::kBool) return Value::boolean(v != 0);
    if (dtype == DType::kI32) return Value::integer(static_cast<int64_t>(round_to_dtype(v, DType::kI32)));
    return Value::real(round_to_dtype(v, dtype));
  }
  if (x.is_tensor() && type_of(x).dtype == dtype) return x;
  return apply(q);
}

Value Lowerer::gradient(CallQuery& q) {
  for (size_t k = 0; k < q.operand_count(); ++k) q.operand(k);  // both are evaluated before any check
  const std::optional<TensorType> type = infer(q);
  if (!type) return Value::error();
  const Value& wrt = q.operand(1);
  if (wrt.id > q.operand(0).id)  // most often a state named after its assignment: its new value
    return fail(wrt.loc, "grad: this value is computed after the loss, so the loss cannot depend on it",
                "take the gradient before assigning the value anew (a state's name means its latest value)",
                wrt.length);
  const autodiff::Gradient g = autodiff::gradient(graph_, q.operand(0).id, wrt.id, q.loc(), backwards_);
  if (g.value == ir::kNoValue) {
    const ir::Node& blocked = graph_.node(g.blocked_at);
    const std::string at = blocked.loc.valid()
                               ? " at " + std::to_string(blocked.loc.line) + ":" + std::to_string(blocked.loc.col)
                               : "";
    return fail(q.loc(),
                "grad: the loss depends on the value differentiated through " + std::string(ir::op_name(blocked.op)) +
                    at + ", " + g.why,
                "write that step with ops that have one (docs/language.md lists them), or differentiate with "
                "respect to a value after it",
                q.length());
  }
  if (graph_.nodes.size() > kMaxIrNodes) {
    abort(q.loc(), "the gradient makes more than " + std::to_string(kMaxIrNodes) + " IR nodes",
          "differentiate a smaller program, or loop over fewer steps");
    return Value::error();
  }
  Value v = Value::tensor(g.value);
  v.loc = q.loc();
  v.length = q.length();
  return v;
}

Value Lowerer::random(CallQuery& q) {
  const std::optional<TensorType> type = infer(q);
  if (!type) return Value::error();
  const double p = q.attrs().value;  // bernoulli's and dropout's p, which their rules checked
  switch (q.def().expansion) {
    case ops::Expansion::kNone:
      return draw(q.def().op, *type, q.loc(), q.length());
    case ops::Expansion::kGrad:
      GDL_INTERNAL_ASSERT(false, "grad reached random(); call_op lowers it through gradient()");
      return Value::error();
    case ops::Expansion::kBernoulli:
      return uniform_below(type->shape, p, q.loc(), q.length());
    case ops::Expansion::kDropout: {
      const Value x = q.operand(0);
      if (p == 0) return x;  // nothing dropped: no draw, no counters
      const Value keep = uniform_below(type->shape, 1 - p, q.loc(), q.length());
      const Value kept = constant(Value::real(1 - p), type->dtype), zero = constant(Value::real(0), type->dtype);
      if (!keep.ok() || !kept.ok() || !zero.ok()) return Value::error();
      const Value scaled = emit(ir::Op::kDiv, {x.id, kept.id}, *type, q.loc(), q.length());
      if (!scaled.ok()) return scaled;
      return emit(ir::Op::kWhere, {keep.id, scaled.id, zero.id}, *type, q.loc(), q.length());
    }
  }
  return Value::error();  // not reached: the cases cover every expansion
}

Value Lowerer::draw(ir::Op op, const TensorType& type, SourceLoc loc, uint32_t length) {
  const int64_t elements = std::max<int64_t>(1, max_element_count(type.shape, graph_.dims));
  const int64_t words = (op == ir::Op::kRandNormal ? 2 : 1) * elements;  // a normal takes two
  ir::Attrs attrs;
  attrs.ints = {rng_counters_};
  rng_counters_ += (words + 3) / 4;  // four words per counter
  return emit(op, {rng_state()}, type, loc, length, attrs);
}

// u < p for u uniform on the 2^24 multiples of 2^-24 in [0, 1): true with
// probability p, rounded to f32 and then to that grid.
Value Lowerer::uniform_below(const Shape& shape, double p, SourceLoc loc, uint32_t length) {
  const Value u = draw(ir::Op::kRandUniform, TensorType{DType::kF32, shape}, loc, length);
  const Value bound = constant(Value::real(p), DType::kF32);
  if (!u.ok() || !bound.ok()) return Value::error();
  return emit(ir::Op::kLt, {u.id, bound.id}, TensorType{DType::kBool, shape}, loc, length);
}

ir::ValueId Lowerer::rng_state() {
  if (rng_leaf_ != ir::kNoValue) return rng_leaf_;
  ir::Node leaf;
  leaf.op = ir::Op::kState;
  leaf.name = "rng.state";
  leaf.type = TensorType{DType::kI32, {Dim::constant(4)}};
  rng_leaf_ = graph_.add(std::move(leaf));
  return rng_leaf_;
}

// ---------------------------------------------------------------- subscripts

// x[i, a:b, :]: a slice node with one [start, stop) pair per axis, then a
// reshape that drops the axes a single index picked.
Value Lowerer::index(const ast::IndexExpr& ix) {
  Value base = eval(*ix.base);
  if (!base.ok()) return base;
  if (!base.is_tensor())
    return fail(ix.loc, "only tensors can be subscripted, not " + describe(base),
                "subscript an input, a param or a computed tensor", 1);
  const TensorType t = type_of(base);
  if (ix.subscripts.size() > t.shape.size())
    return fail(ix.loc,
                std::to_string(ix.subscripts.size()) + " subscripts for " + text(t) + ", which has " +
                    std::to_string(t.rank()) + " dims",
                "give at most one subscript per dim", 1);
  Value bounds;
  bounds.kind = Value::Kind::kList;
  std::vector<ops::SubscriptForm> forms(t.shape.size(), ops::SubscriptForm::kToEnd);
  std::vector<std::pair<size_t, Value>> runtime_indices;  // (axis, its rank-0 i32 index), in axis order
  bool changed = false;
  auto add = [&](int64_t start, int64_t stop) {
    bounds.list.push_back(Value::integer(start));
    bounds.list.push_back(Value::integer(stop));
  };
  for (size_t axis = 0; axis < t.shape.size(); ++axis) {
    const Dim& d = t.shape[axis];
    const int64_t to_end = d.is_runtime() ? -1 : d.extent;  // a run-time dim's end is [0, -1)
    if (axis >= ix.subscripts.size()) {
      add(0, to_end);
      continue;
    }
    const ast::Subscript& s = ix.subscripts[axis];
    if (!s.is_slice) {
      Value i = eval(*s.index);
      if (!i.ok()) return Value::error();
      if (i.kind == Value::Kind::kDim || (i.is_tensor() && type_of(i).rank() == 0)) {  // x[T - 1], x[pos]
        if (!operand_ok(i, "an index")) return Value::error();
        if (type_of(i).dtype != DType::kI32)
          return fail(start_of(*s.index), "a run-time index must be an i32, got " + describe(i),
                      "index with an i32 value, or cast(i, i32)", s.index->length);
        runtime_indices.emplace_back(axis, i);
        add(0, to_end);  // the whole axis, then a gather picks the element
        continue;
      }
      if (i.kind != Value::Kind::kInt)
        return fail(start_of(*s.index), "an index must be a compile-time integer or a rank-0 i32, got " + describe(i),
                    "use gather(table, ids, axis) to pick several elements by run-time ids", s.index->length);
      add(i.i, i.i == std::numeric_limits<int64_t>::max() ? i.i : i.i + 1);  // the rule rejects it either way
      forms[axis] = ops::SubscriptForm::kIndex;
      changed = true;
      continue;
    }
    int64_t start = 0, stop = to_end;
    if (s.start) {
      std::optional<int64_t> n = static_int(eval(*s.start), "a slice start");
      if (!n) return Value::error();
      start = *n;
    }
    if (s.stop) {
      Value written = eval(*s.stop);
      if (written.kind == Value::Kind::kDim) {  // x[a:T]: T elements from a, T a run-time dim
        stop = ops::runtime_length_stop(written.dim);
      } else {
        std::optional<int64_t> n = static_int(written, "a slice stop");
        if (!n) return Value::error();
        // Stops below -1 stand for run-time lengths in the slice's bounds (ops::runtime_length_stop).
        if (*n < -1)
          return fail(start_of(*s.stop), "slice stop " + std::to_string(*n) + " is negative: a slice a:b counts from 0",
                      "write the stop as a position in 0..extent (no negative indices)", s.stop->length);
        stop = *n;
      }
      forms[axis] = ops::SubscriptForm::kRange;
    }
    add(start, stop);
    changed = changed || s.stop || start != 0;
  }
  Value v = base;
  if (changed) {
    v = static_slice(ix, base, bounds, forms);
    if (!v.ok()) return v;
  }
  // A run-time index picks its element with a gather along its axis (out of
  // range: zeros), from the last axis down so that the others keep their numbers.
  for (auto it = runtime_indices.rbegin(); it != runtime_indices.rend(); ++it) {
    CallQuery g(*this, ops::op_def(ir::Op::kGather), "an index", ix.loc, 1, 2);
    g.bind(0, v);
    g.bind(1, it->second);
    g.bind(2, Value::integer(static_cast<int64_t>(it->first)));
    v = apply(g);
    if (!v.ok()) return v;
  }
  if (std::find(forms.begin(), forms.end(), ops::SubscriptForm::kIndex) == forms.end()) return v;
  Shape kept;  // the static indices' axes go
  const Shape sliced = type_of(v).shape;  // every axis but the run-time indices
  size_t from = 0;
  for (size_t axis = 0; axis < t.shape.size(); ++axis) {
    const bool dropped = std::any_of(runtime_indices.begin(), runtime_indices.end(),
                                     [&](const auto& r) { return r.first == axis; });
    if (dropped) continue;
    if (forms[axis] != ops::SubscriptForm::kIndex) kept.push_back(sliced.at(from));
    ++from;
  }
  return emit(ir::Op::kReshape, {v.id}, TensorType{t.dtype, kept}, ix.loc, 1);
}

// The slice node of x[...] with static bounds (the indices' axes kept, of extent 1).
Value Lowerer::static_slice(const ast::IndexExpr& ix, const Value& base, const Value& bounds,
                            const std::vector<ops::SubscriptForm>& forms) {
  CallQuery q(*this, ops::op_def(ir::Op::kSlice), "slice", ix.loc, 1, 1);
  q.bind(0, base);
  q.bind(1, bounds);
  q.set_subscript_forms(forms);
  const ops::TypeResult r = q.def().infer(q);
  if (!r.ok()) {
    if (!r.error || q.turned_down()) return Value::error();
    const auto axis = static_cast<size_t>(r.error->slot);
    if (r.error->slot < 0 || axis >= ix.subscripts.size()) return fail(ix.loc, r.error->message, r.error->hint, 1);
    const ast::Subscript& s = ix.subscripts[axis];
    const SourceLoc at = !s.is_slice            ? start_of(*s.index)
                         : r.error->at_start && s.start ? start_of(*s.start)
                                                        : s.loc;
    return fail(at, r.error->message, r.error->hint, s.is_slice ? 1 : s.index->length);
  }
  return emit(ir::Op::kSlice, {base.id}, *r.type, ix.loc, 1, q.attrs());
}

}  // namespace gdl::lowering
