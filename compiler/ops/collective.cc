// Collectives over the program's process group (`group NAME ranks(N);`):
// every rank runs the same program, and a collective combines the value
// each rank holds of its argument.
//   all_reduce(x, op = sum)            x's type; every rank gets the
//                                      elementwise reduction over the ranks
//   all_gather(x, axis = 0)            x's shape with axis N times longer:
//                                      the ranks' x concatenated in rank order
//   reduce_scatter(x, axis = 0, op = sum)
//                                      x's shape with axis N times shorter:
//                                      rank r keeps part r of the reduction
// op is sum, prod, max, min or avg (floats only); x is f32, f16, bf16 or
// i32; the gathered or scattered axis has a compile-time extent (scattered:
// a multiple of N). The checker keeps collectives out of `if` blocks, so
// every rank reaches the same collectives in the same order. The CPU
// interpreter computes them (combine_collective) from every rank's value.
#include "ops/collective.h"

#include <algorithm>
#include <cmath>

#include "internal_error.h"
#include "interp/host_ops.h"
#include "ops/families.h"

namespace gdl::ops {
namespace {

using ir::CollectiveReduce;
using ir::Node;

constexpr const char* kReduceNames[] = {"sum", "prod", "max", "min", "avg"};

// x: operand 0, a tensor the collectives move (not bool), in a program
// that declares its group; nullptr after *bad is set.
const TensorType* collective_operand(TypeQuery& q, std::optional<TypeResult>* bad) {
  const std::string& name = q.what();
  const TensorType* x = q.tensor(0, name);
  if (!x) return *bad = TypeResult::failed(), nullptr;
  if (q.group_ranks() < 1)
    return *bad = q.error(kAtOp, name + " needs the program's process group",
                          "declare the ranks that run the program together: group world ranks(2);"),
           nullptr;
  if (x->dtype == DType::kBool)
    return *bad = q.error(0, name + " moves f32, f16, bf16 or i32 values, got " + q.text(*x), "cast it with cast(x, i32)"),
           nullptr;
  return x;
}

// The reduction at `slot` (sum when not given) into q.attrs().ints.
std::optional<TypeResult> reduce_of(TypeQuery& q, size_t slot, const TensorType& x) {
  int64_t code = static_cast<int64_t>(CollectiveReduce::kSum);
  if (q.given(slot) && !q.reduction(slot, &code)) return TypeResult::failed();
  if (code < 0 || code > static_cast<int64_t>(CollectiveReduce::kAvg))
    return TypeResult(q.error(static_cast<int>(slot), "unknown reduction code " + std::to_string(code)));
  if (code == static_cast<int64_t>(CollectiveReduce::kAvg) && !is_float(x.dtype))
    return TypeResult(q.error(static_cast<int>(slot), q.what() + " with op = avg needs a float tensor, got " + q.text(x),
                              "use op = sum and divide, or cast it to f32"));
  q.attrs().ints = {code};
  return std::nullopt;
}

// The gathered or scattered axis (0 when not given) into q.attrs().axis: a
// compile-time extent, for a scatter a multiple of the group's size.
std::optional<TypeResult> split_axis_of(TypeQuery& q, const TensorType& x, bool scatter, int* axis) {
  if (x.rank() == 0)
    return TypeResult(q.error(0, q.what() + " needs a tensor of rank >= 1, got " + q.text(x), "reshape it to [1] first"));
  *axis = 0;
  if (q.given(1))
    if (std::optional<TypeResult> bad = axis_of(q, 1, x.rank(), axis)) return bad;
  const Dim& d = x.shape[static_cast<size_t>(*axis)];
  const int64_t ranks = q.group_ranks();
  if (d.is_runtime())
    return TypeResult(q.error(0, q.what() + " along axis " + std::to_string(*axis) + " of " + q.text(x) +
                                     ", a run-time dim: every rank's part must have a compile-time extent",
                              "gather or scatter along an axis of fixed extent"));
  if (scatter && d.extent % ranks != 0)
    return TypeResult(q.error(0, "reduce_scatter splits axis " + std::to_string(*axis) + " of " + q.text(x) + " among " +
                                     std::to_string(ranks) + " ranks: " + std::to_string(d.extent) + " is not a multiple",
                              "pad the axis to a multiple of the group's size"));
  q.attrs().axis = *axis;
  return std::nullopt;
}

TypeResult infer_all_reduce(TypeQuery& q) {
  std::optional<TypeResult> bad;
  const TensorType* x = collective_operand(q, &bad);
  if (!x) return *bad;
  if (std::optional<TypeResult> bad_op = reduce_of(q, 1, *x)) return *bad_op;
  return *x;
}

TypeResult infer_all_gather(TypeQuery& q) {
  std::optional<TypeResult> bad;
  const TensorType* x = collective_operand(q, &bad);
  if (!x) return *bad;
  int axis = 0;
  if (std::optional<TypeResult> bad_axis = split_axis_of(q, *x, false, &axis)) return *bad_axis;
  TensorType out = *x;
  out.shape[static_cast<size_t>(axis)] = Dim::constant(x->shape[static_cast<size_t>(axis)].extent * q.group_ranks());
  return out;
}

TypeResult infer_reduce_scatter(TypeQuery& q) {
  std::optional<TypeResult> bad;
  const TensorType* x = collective_operand(q, &bad);
  if (!x) return *bad;
  int axis = 0;
  if (std::optional<TypeResult> bad_axis = split_axis_of(q, *x, true, &axis)) return *bad_axis;
  if (std::optional<TypeResult> bad_op = reduce_of(q, 2, *x)) return *bad_op;
  TensorType out = *x;
  out.shape[static_cast<size_t>(axis)] = Dim::constant(x->shape[static_cast<size_t>(axis)].extent / q.group_ranks());
  return out;
}

std::string reduce_text(const ir::Attrs& a) {
  const int64_t code = a.ints.empty() ? 0 : a.ints[0];
  return std::string("op=") + (code >= 0 && code <= 4 ? kReduceNames[code] : "?");
}
std::string gather_text(const ir::Attrs& a) { return "axis=" + std::to_string(a.axis); }
std::string scatter_text(const ir::Attrs& a) { return gather_text(a) + ", " + reduce_text(a); }

// Element i of the ranks' values combined by `r`, in rank order: in double,
// i32 sums and products in 64-bit integers wrapped to 32 bits at each step
// (as the language's i32 arithmetic and NCCL wrap).
double reduce_at(CollectiveReduce r, std::span<const HostTensor* const> ranks, int64_t i, DType dtype) {
  if (dtype == DType::kI32 && (r == CollectiveReduce::kSum || r == CollectiveReduce::kProd)) {
    auto acc = static_cast<int64_t>(ranks[0]->data.at(static_cast<size_t>(i)));
    for (size_t k = 1; k < ranks.size(); ++k) {
      const auto v = static_cast<int64_t>(ranks[k]->data.at(static_cast<size_t>(i)));
      acc = static_cast<int64_t>(host::wrap_i32(r == CollectiveReduce::kSum ? acc + v : acc * v));
    }
    return static_cast<double>(acc);
  }
  double acc = ranks[0]->data.at(static_cast<size_t>(i));
  for (size_t k = 1; k < ranks.size(); ++k) {
    const double v = ranks[k]->data.at(static_cast<size_t>(i));
    switch (r) {
      case CollectiveReduce::kSum:
      case CollectiveReduce::kAvg: acc += v; break;
      case CollectiveReduce::kProd: acc *= v; break;
      case CollectiveReduce::kMax: acc = std::isnan(acc) || std::isnan(v) ? NAN : std::max(acc, v); break;
      case CollectiveReduce::kMin: acc = std::isnan(acc) || std::isnan(v) ? NAN : std::min(acc, v); break;
    }
  }
  return r == CollectiveReduce::kAvg ? acc / static_cast<double>(ranks.size()) : acc;
}

}  // namespace

std::optional<CollectiveReduce> collective_reduce_named(std::string_view name) {
  for (int i = 0; i < 5; ++i)
    if (name == kReduceNames[i]) return static_cast<CollectiveReduce>(i);
  return std::nullopt;
}

HostTensor combine_collective(const Node& n, std::span<const HostTensor* const> ranks, int rank) {
  GDL_INTERNAL_ASSERT(!ranks.empty() && rank >= 0 && static_cast<size_t>(rank) < ranks.size(),
                      "a collective's values: rank " + std::to_string(rank) + " of " + std::to_string(ranks.size()));
  const HostTensor& mine = *ranks[static_cast<size_t>(rank)];
  for (const HostTensor* t : ranks)
    GDL_INTERNAL_ASSERT(t->shape == mine.shape && t->dtype == mine.dtype, "ranks disagree on a collective's argument");
  const auto reduce = static_cast<CollectiveReduce>(n.attrs.ints.empty() ? 0 : n.attrs.ints[0]);
  HostTensor out{n.type.dtype, mine.shape, {}};
  const auto count = static_cast<int64_t>(ranks.size());
  // [outer, axis, inner] views of the argument along the node's axis.
  const auto axis = static_cast<size_t>(n.attrs.axis);
  int64_t outer = 1, inner = 1;
  if (n.op != ir::Op::kAllReduce) {
    for (size_t k = 0; k < axis; ++k) outer *= mine.shape[k];
    for (size_t k = axis + 1; k < mine.shape.size(); ++k) inner *= mine.shape[k];
  }
  switch (n.op) {
    case ir::Op::kAllReduce:
      out.data.resize(mine.data.size());
      for (int64_t i = 0; i < mine.size(); ++i) out.data[static_cast<size_t>(i)] = reduce_at(reduce, ranks, i, mine.dtype);
      break;
    case ir::Op::kAllGather: {
      const int64_t along = mine.shape[axis];
      out.shape[axis] = along * count;
      out.data.reserve(mine.data.size() * ranks.size());
      for (int64_t o = 0; o < outer; ++o)
        for (const HostTensor* t : ranks)
          out.data.insert(out.data.end(), t->data.begin() + o * along * inner, t->data.begin() + (o + 1) * along * inner);
      break;
    }
    case ir::Op::kReduceScatter: {
      const int64_t part = mine.shape[axis] / count;
      out.shape[axis] = part;
      out.data.reserve(mine.data.size() / ranks.size());
      for (int64_t o = 0; o < outer; ++o)
        for (int64_t j = 0; j < part * inner; ++j)
          out.data.push_back(reduce_at(reduce, ranks, (o * mine.shape[axis] + rank * part) * inner + j, mine.dtype));
      break;
    }
    default: GDL_INTERNAL_ASSERT(false, std::string(ir::op_name(n.op)) + " is not a collective");
  }
  for (double& v : out.data) v = round_to_dtype(v, out.dtype);
  return out;
}

void add_collective_ops(std::vector<OpDef>& defs) {
  auto add = [&](ir::Op op, const char* callable, std::vector<const char*> params, InferFn infer,
                 std::string (*text)(const ir::Attrs&)) {
    OpDef d;
    d.op = op;
    d.fusion = FusionClass::kCollective;
    d.callable = callable;
    d.params = std::move(params);
    d.operands = d.required = 1;
    d.min_args = d.max_args = 1;
    d.infer = infer;
    d.attr_text = text;
    defs.push_back(std::move(d));
  };
  add(ir::Op::kAllReduce, "all_reduce", {"x", "op"}, infer_all_reduce, reduce_text);
  add(ir::Op::kAllGather, "all_gather", {"x", "axis"}, infer_all_gather, gather_text);
  add(ir::Op::kReduceScatter, "reduce_scatter", {"x", "axis", "op"}, infer_reduce_scatter, scatter_text);
}

}  // namespace gdl::ops
