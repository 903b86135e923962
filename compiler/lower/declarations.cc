// The declarations the program body refers to: run-time dims (bounds,
// buckets, policy), consts (evaluated on first use), the leaves (inputs,
// params, scalars) with their declared types, and fn signatures.
#include <algorithm>
#include <cmath>
#include <limits>

#include "frontend/check.h"
#include "passes/padding.h"  // default_buckets
#include "kernel_table.h"  // kMaxRuntimeDims, kMaxScalars: what the kernel ABI's gdl_args holds
#include "lower/lowerer.h"

namespace gdl::lowering {

// The process group: its size, a compile-time integer in [1, kMaxGroupRanks]
// (every rank's shapes follow from it); the checker allows one.
void Lowerer::lower_group() {
  if (m_.groups.empty()) return;
  const ast::GroupDecl& d = m_.groups.front();
  graph_.group = ir::ProcessGroup{d.name, 1, d.loc};  // stands while the size is wrong: the collectives are still checked
  std::optional<int64_t> ranks = static_int(eval(*d.ranks), "the ranks of group '" + d.name + "'");
  if (!ranks) return;
  if (*ranks < 1 || *ranks > ir::kMaxGroupRanks) {
    diags_.error(start_of(*d.ranks),
                 "group '" + d.name + "' has " + std::to_string(*ranks) + " ranks; a group has 1 to " +
                     std::to_string(ir::kMaxGroupRanks),
                 "write group " + d.name + " ranks(N) with the number of GPUs that run the program together",
                 d.ranks->length);
    return;
  }
  graph_.group = ir::ProcessGroup{d.name, *ranks, d.loc};
}

void Lowerer::lower_dims() {
  for (const ast::DimDecl& d : m_.dims) {
    DimInfo info;
    info.name = d.name;
    int symbol = static_cast<int>(graph_.dims.size());
    dims_.emplace(d.name, symbol);
    // Named before its bounds are read, so a bound or bucket that names the
    // dim itself is reported as a run-time dim like any other.
    graph_.dims.emplace_back().name = d.name;
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
    if (symbol == kMaxRuntimeDims)
      diags_.error(d.name_loc,
                   "dim '" + d.name + "' is run-time dim number " + std::to_string(kMaxRuntimeDims + 1) +
                       "; a program has at most " + std::to_string(kMaxRuntimeDims) +
                       " (the kernels receive them in a fixed block)",
                   "make some of them compile-time consts, or reuse one dim for tensors that always agree",
                   static_cast<uint32_t>(d.name.size()));
    graph_.dims[static_cast<size_t>(symbol)] = std::move(info);
  }
}

Value Lowerer::const_value(const std::string& name) {
  ConstInfo& c = consts_.at(name);
  if (c.state == 2) return c.value;
  if (c.state == 1) return Value::error();  // a cycle: check_module reports it
  // A chain of consts recurses here once per link; the outermost reports it.
  if (const_chain_.size() >= static_cast<size_t>(kMaxConstDepth)) {
    const_chain_too_deep_ = true;
    return Value::error();
  }
  c.state = 1;
  const_chain_.push_back(name);
  // A const sees globals only, whoever asks for it.
  std::vector<Frame> saved = std::move(frames_);
  frames_.clear();
  Value v = eval(*c.decl->value);
  frames_ = std::move(saved);
  const_chain_.pop_back();
  if (const_chain_.empty() && const_chain_too_deep_) {
    // Once per program: the consts past the limit head chains of their own.
    const_chain_too_deep_ = false;
    if (!const_chain_reported_)
      fail(c.decl->name_loc,
           "const '" + name + "' is defined through a chain of more than " + std::to_string(kMaxConstDepth) +
               " consts, each using the next",
           "compute it from fewer consts, or write the value", static_cast<uint32_t>(name.size()));
    const_chain_reported_ = true;
    v = Value::error();
  }
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

std::optional<DType> Lowerer::dtype_named(const std::string& name) const {
  if (std::optional<DType> d = parse_dtype(name)) return d;
  if (frames_.empty()) return std::nullopt;
  auto it = frames_.back().dtypes.find(name);
  if (it == frames_.back().dtypes.end()) return std::nullopt;
  return it->second;
}

std::optional<DType> Lowerer::resolve_dtype(const ast::TypeExpr& t) {
  std::optional<DType> dtype = dtype_named(t.dtype);
  if (dtype) return dtype;
  std::string message = "unknown type '" + t.dtype + "'";
  if (auto near = closest_spelling(t.dtype, {"f32", "f16", "bf16", "i32", "bool"}))
    message += "; did you mean '" + *near + "'?";
  diags_.error(t.dtype_loc, message, "the types are f32, f16, bf16, i32 and bool",
               static_cast<uint32_t>(t.dtype.size()));
  return std::nullopt;
}

std::optional<Dim> Lowerer::shape_dim(const Value& v, const ast::Expr& e) {
  if (!v.ok()) return std::nullopt;
  if (v.kind == Value::Kind::kDim) return Dim::runtime(v.dim);
  if (v.kind == Value::Kind::kInt && v.i >= 1) return Dim::constant(v.i);
  if (v.kind == Value::Kind::kInt)
    fail(start_of(e), "a dim extent must be at least 1, got " + std::to_string(v.i),
         "empty tensors are not supported; use an extent >= 1", e.length);
  else
    fail(start_of(e), "a shape dim must be a compile-time integer or a declared dim, got " + describe(v),
         "use a const, a literal, or the name of a dim declared with `dim`", e.length);
  return std::nullopt;
}

std::optional<TensorType> Lowerer::resolve_type(const ast::TypeExpr& t) {
  std::optional<DType> dtype = resolve_dtype(t);
  bool ok = dtype.has_value();
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
    std::optional<Dim> d = shape_dim(eval(*e), *e);
    if (d)
      type.shape.push_back(*d);
    else
      ok = false;
  }
  if (!ok) return std::nullopt;
  type.dtype = *dtype;
  if (!within_element_bound(type, t.loc, 1)) return std::nullopt;
  return type;
}

void Lowerer::lower_leaves() {
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
      case ast::TensorRole::kState: leaf.op = ir::Op::kState; break;
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
      // A default outside the dtype's range would be saturated or become inf.
      const bool i32 = info.type->dtype == DType::kI32;
      if (i32 ? init.i < std::numeric_limits<int32_t>::min() || init.i > std::numeric_limits<int32_t>::max()
              : !std::isfinite(leaf.attrs.value)) {
        fail(start_of(*t.init),
             "the default of scalar '" + t.name + "', " + (i32 ? std::to_string(init.i) : number_text(init.number())) +
                 ", does not fit in " + dtype_name(info.type->dtype),
             i32 ? "i32 holds -2147483648..2147483647" : "f32 holds magnitudes up to about 3.4e38", t.init->length);
        info.type.reset();
        continue;
      }
    }
    if (leaf.op == ir::Op::kScalar && ++scalar_count_ == kMaxScalars + 1)
      fail(t.name_loc,
           "scalar '" + t.name + "' is run-time scalar number " + std::to_string(kMaxScalars + 1) +
               "; a program has at most " + std::to_string(kMaxScalars) + " (the kernels receive them in a fixed block)",
           "make some of them compile-time consts, or pass several values as one input tensor", len);
    if (t.role == ast::TensorRole::kState)
      for (const Dim& d : info.type->shape)
        if (d.is_runtime()) {
          fail(t.type.loc,
               "state '" + t.name + "' has the run-time dim " + "'" + graph_.dims[static_cast<size_t>(d.symbol)].name + "'" + "; a state's shape is fixed",
               "size it for the largest value (a KV cache holds max_batch x max_len) and pass the run's extent as an input",
               len);
          info.type.reset();
          break;
        }
    if (t.role == ast::TensorRole::kParam)
      for (const Dim& d : info.type->shape)
        if (d.is_runtime()) {
          fail(t.type.loc,
               "param '" + t.name + "' has the run-time dim '" + graph_.dims[static_cast<size_t>(d.symbol)].name +
                   "'; a param is bound once, before any run's dims are known",
               "declare it at its largest size and take the run's part with a slice, such as w[0:" +
                   graph_.dims[static_cast<size_t>(d.symbol)].name + "]",
               len);
          info.type.reset();
          break;
        }
    if (!info.type) continue;
    leaf.type = *info.type;
    info.leaf = graph_.add(std::move(leaf));
    if (t.role == ast::TensorRole::kState) info.value = info.leaf;
  }
}

void Lowerer::resolve_signature(const ast::FnDecl& f) {
  if (fns_.count(f.name)) return;
  FnInfo info;
  info.decl = &f;
  if (global_names_.empty()) global_names_ = global_names(m_);  // once, not per fn
  info.generics = fn_type_params(global_names_, f);
  // A type that names a type parameter is resolved at each call; here only
  // its dtype (unless a parameter) is checked, once.
  auto resolve = [&](const ast::TypeExpr& t, std::optional<TensorType>& out) {
    if (!info.generics.mentioned_in(t)) {
      out = resolve_type(t);
      if (!out) info.signature_ok = false;
      return false;
    }
    if (!info.generics.is_dtype(t.dtype) && !resolve_dtype(t)) info.signature_ok = false;
    return true;
  };
  for (const ast::FnParam& p : f.params) {
    info.params.emplace_back();
    info.generic.push_back(resolve(p.type, info.params.back()));
  }
  if (f.result) info.generic_result = resolve(*f.result, info.result);
  fns_.emplace(f.name, std::move(info));
}

}  // namespace gdl::lowering
