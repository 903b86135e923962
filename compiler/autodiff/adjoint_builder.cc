#include "autodiff/adjoint_builder.h"

#include <algorithm>

#include "internal_error.h"
#include "passes/ir_verify.h"

namespace gdl::autodiff {

using ir::Op;

ValueId AdjointBuilder::emit(Op op, std::vector<ValueId> args, ir::Attrs attrs, std::optional<TensorType> result) {
  ir::Node n;
  n.op = op;
  n.args = std::move(args);
  n.attrs = std::move(attrs);
  n.loc = loc;
  if (result) n.type = *result;
  const std::string why = ir::infer(g, n);
  GDL_INTERNAL_ASSERT(why.empty(), std::string("a derivative rule built an ill-typed ") + ir::op_name(op) + ": " + why);
  return g.add(std::move(n));
}

ValueId AdjointBuilder::constant(double v, DType dtype) {
  ir::Node n;
  n.op = Op::kConstant;
  n.type = TensorType{dtype, {}};
  n.attrs.value = round_to_dtype(v, dtype);
  n.loc = loc;
  return g.add(std::move(n));
}

ValueId AdjointBuilder::where_else_zero(ValueId cond, ValueId x) {
  return where(cond, x, constant(0, type(x).dtype));
}

ValueId AdjointBuilder::cast(ValueId x, DType dtype) {
  if (type(x).dtype == dtype) return x;
  return emit(Op::kCast, {x}, {}, TensorType{dtype, shape(x)});
}

ValueId AdjointBuilder::zeros(TensorType t) { return broadcast_to(constant(0, t.dtype), t.shape); }

ValueId AdjointBuilder::broadcast_to(ValueId x, Shape s) {
  if (shape(x) == s) return x;
  return emit(Op::kBroadcastTo, {x}, {}, TensorType{type(x).dtype, std::move(s)});
}

ValueId AdjointBuilder::sum_to(ValueId x, Shape s) {
  const Shape from = shape(x);
  GDL_INTERNAL_ASSERT(from.size() >= s.size(), "sum_to a shape of higher rank");
  const size_t lead = from.size() - s.size();
  std::vector<int64_t> axes;
  for (size_t a = 0; a < from.size(); ++a)
    if (a < lead || (s[a - lead] == Dim::constant(1) && !(from[a] == Dim::constant(1)))) axes.push_back(static_cast<int64_t>(a));
  if (axes.empty()) return x;
  return reshape(reduce(Op::kSum, x, axes, true), s);
}

ValueId AdjointBuilder::reduce(Op op, ValueId x, const std::vector<int64_t>& axes, bool keepdims) {
  // Over axes of one element it is x itself (reshaped): no kernel that
  // reduces rows of length 1 (take_along_axis's part of a cross-entropy
  // sums its one pick over the vocabulary so).
  const Shape from = shape(x);
  if (std::all_of(axes.begin(), axes.end(), [&](int64_t a) { return from[static_cast<size_t>(a)] == Dim::constant(1); })) {
    if (keepdims) return x;
    Shape kept;
    for (size_t a = 0; a < from.size(); ++a)
      if (std::find(axes.begin(), axes.end(), static_cast<int64_t>(a)) == axes.end()) kept.push_back(from[a]);
    return reshape(x, kept);
  }
  ir::Attrs a;
  if (axes.size() == 1) a.axis = static_cast<int>(axes[0]);
  else a.ints = axes;
  a.keepdims = keepdims;
  return emit(op, {x}, a);
}

std::vector<int64_t> reduced_axes(const ir::Node& reduction) {
  return reduction.attrs.ints.empty() ? std::vector<int64_t>{reduction.attrs.axis} : reduction.attrs.ints;
}

ValueId AdjointBuilder::keep_reduced_axes(ValueId reduced, const ir::Node& reduction) {
  if (reduction.attrs.keepdims || type(reduced).rank() == 0) return reduced;  // a rank-0 value broadcasts as it is
  Shape kept = shape(reduction.args.at(0));
  const std::vector<int64_t> axes = reduced_axes(reduction);
  for (int64_t a : axes) kept[static_cast<size_t>(a)] = Dim::constant(1);
  return reshape(reduced, kept);
}

ValueId AdjointBuilder::count(Shape s, const std::vector<int64_t>& axes, DType dtype) {
  int64_t constant_part = 1;
  ValueId product = ir::kNoValue;
  for (int64_t a : axes) {
    const Dim& d = s.at(static_cast<size_t>(a));
    if (!d.is_runtime()) {
      constant_part *= d.extent;
      continue;
    }
    ir::Node leaf;  // the dim's value this run, as the lowering makes it
    leaf.op = Op::kDimValue;
    leaf.type = TensorType{DType::kI32, {}};
    leaf.attrs.axis = d.symbol;
    leaf.name = g.dims.at(static_cast<size_t>(d.symbol)).name;
    leaf.loc = loc;
    const ValueId value = cast(g.add(std::move(leaf)), dtype);
    product = product == ir::kNoValue ? value : mul(product, value);
  }
  if (product == ir::kNoValue) return constant(static_cast<double>(constant_part), dtype);
  return constant_part == 1 ? product : mul(product, constant(static_cast<double>(constant_part), dtype));
}

ValueId AdjointBuilder::arange(Dim n) {
  ir::Attrs range;
  range.ints = {0, n.is_runtime() ? 0 : n.extent, 1};  // the IR's stop of a run-time extent is 0
  return emit(Op::kArange, {}, range, TensorType{DType::kI32, {n}});
}

ValueId AdjointBuilder::reshape(ValueId x, Shape s) {
  if (shape(x) == s) return x;
  return emit(Op::kReshape, {x}, {}, TensorType{type(x).dtype, std::move(s)});
}

ValueId AdjointBuilder::transpose(ValueId x, std::vector<int64_t> perm) {
  ir::Attrs a;
  a.ints = std::move(perm);
  return emit(Op::kTranspose, {x}, a);
}

ValueId AdjointBuilder::swap_last_two(ValueId x) {
  std::vector<int64_t> perm(shape(x).size());
  for (size_t i = 0; i < perm.size(); ++i) perm[i] = static_cast<int64_t>(i);
  std::swap(perm[perm.size() - 1], perm[perm.size() - 2]);
  return transpose(x, std::move(perm));
}

ValueId AdjointBuilder::slice(ValueId x, std::vector<int64_t> bounds) {
  ir::Attrs a;
  a.ints = std::move(bounds);
  return emit(Op::kSlice, {x}, a);
}

ValueId AdjointBuilder::slice_last_axis(ValueId x, int64_t from, int64_t to) {
  const Shape& s = shape(x);
  std::vector<int64_t> bounds;
  for (size_t a = 0; a + 1 < s.size(); ++a) {
    if (s[a].is_runtime()) bounds.insert(bounds.end(), {0, -1});
    else bounds.insert(bounds.end(), {0, s[a].extent});
  }
  bounds.insert(bounds.end(), {from, to});
  return slice(x, std::move(bounds));
}

}  // namespace gdl::autodiff
