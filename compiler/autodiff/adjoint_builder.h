// What a derivative rule (ops::OpDef::vjp) writes its IR with: nodes
// appended to the graph, each typed by its own op's type rule (ir::infer),
// so a rule states only ops and operands, and located at the forward node
// being differentiated, so the backward's plan and kernels name the line of
// gdl they came from.
#pragma once

#include <cstdint>
#include <optional>
#include <string>
#include <vector>

#include "ir.h"

namespace gdl::autodiff {

using ir::ValueId;

class AdjointBuilder {
 public:
  explicit AdjointBuilder(ir::Graph& graph) : g(graph) {}

  ir::Graph& g;
  SourceLoc loc;  // where the nodes are located: the forward node's position
  // Set by a rule that cannot differentiate this node (a case its op
  // allows but its rule does not cover): why, for the error at the grad call.
  std::string refused;

  const ir::Node& node(ValueId v) const { return g.node(v); }
  const TensorType& type(ValueId v) const { return g.node(v).type; }
  const Shape& shape(ValueId v) const { return g.node(v).type.shape; }

  // Shapes and types are taken by value: the nodes a call appends may move
  // the graph's nodes, which references into it would point into.
  //
  // A node of `op` typed by its rule; `result` is the type the rule reads
  // for reshape, cast and broadcast_to. A rule that refuses is a compiler
  // bug (InternalError).
  ValueId emit(ir::Op op, std::vector<ValueId> args, ir::Attrs attrs = {}, std::optional<TensorType> result = {});

  ValueId constant(double v, DType dtype);
  // Elementwise, numpy broadcasting; a double is a constant of the other side's dtype.
  ValueId unary(ir::Op op, ValueId x) { return emit(op, {x}); }
  ValueId binary(ir::Op op, ValueId a, ValueId b) { return emit(op, {a, b}); }
  ValueId binary(ir::Op op, ValueId a, double b) { return emit(op, {a, constant(b, type(a).dtype)}); }
  ValueId add(ValueId a, ValueId b) { return binary(ir::Op::kAdd, a, b); }
  ValueId sub(ValueId a, ValueId b) { return binary(ir::Op::kSub, a, b); }
  ValueId mul(ValueId a, ValueId b) { return binary(ir::Op::kMul, a, b); }
  ValueId mul(ValueId a, double b) { return binary(ir::Op::kMul, a, b); }
  ValueId div(ValueId a, ValueId b) { return binary(ir::Op::kDiv, a, b); }
  ValueId neg(ValueId x) { return unary(ir::Op::kNeg, x); }
  ValueId where(ValueId cond, ValueId a, ValueId b) { return emit(ir::Op::kWhere, {cond, a, b}); }
  // where(cond, x, 0): x where cond holds, zero elsewhere.
  ValueId where_else_zero(ValueId cond, ValueId x);
  ValueId cast(ValueId x, DType dtype);

  // Zeros of a type (a constant broadcast to its shape).
  ValueId zeros(TensorType t);
  ValueId broadcast_to(ValueId x, Shape s);
  // x summed over the axes that broadcasting to x's shape added or widened
  // from `s`, and shaped as `s`: the adjoint of an operand that an
  // elementwise op or a batched matmul broadcast.
  ValueId sum_to(ValueId x, Shape s);
  // (over axes of one element only: x, reshaped when !keepdims)
  ValueId reduce(ir::Op op, ValueId x, const std::vector<int64_t>& axes, bool keepdims);
  // A reduction's result with its reduced axes put back as 1s (the
  // keepdims form), from the node's attributes; a rank-0 result as it is,
  // which broadcasts against anything.
  ValueId keep_reduced_axes(ValueId reduced, const ir::Node& reduction);
  // The number of elements over `axes` of s, as a rank-0 of dtype: a
  // constant, times the values of run-time dims this run.
  ValueId count(Shape s, const std::vector<int64_t>& axes, DType dtype);
  // i32 0, 1, ..., n - 1; a run-time n counts to its value this run.
  ValueId arange(Dim n);
  ValueId reshape(ValueId x, Shape s);
  ValueId transpose(ValueId x, std::vector<int64_t> perm);
  ValueId swap_last_two(ValueId x);  // transpose's default
  ValueId matmul(ValueId a, ValueId b) { return emit(ir::Op::kMatMul, {a, b}); }
  ValueId slice(ValueId x, std::vector<int64_t> bounds);
  ValueId slice_last_axis(ValueId x, int64_t from, int64_t to);  // the other axes whole
};

// The axes a reduction node reduced (ascending), from its attributes.
std::vector<int64_t> reduced_axes(const ir::Node& reduction);

}  // namespace gdl::autodiff
