// Reductions (sum, mean, max, min) over one axis or several, softmax
// along one axis, and cumsum (an inclusive prefix sum along one axis).
//
// A reduction over one axis keeps it in Attrs::axis; over several, in
// Attrs::ints (ascending), and one kernel combines them all.
//
// Over a run-time axis that buckets pad, the kernels and the CPU rules
// combine only the valid positions (the valid-dims block, kernel_table.h);
// mean divides by the valid count; softmax gives every position, padding
// too, exp(x - peak) / sum over the valid ones. cumsum needs no mask: a
// valid position's prefix holds valid positions only.
#include <cmath>
#include <limits>

#include "autodiff/adjoint_builder.h"
#include "codegen/cuda_text.h"
#include "codegen/step_emitter.h"
#include "interp/host_ops.h"
#include "internal_error.h"
#include "ops/families.h"

namespace gdl::ops {
namespace {

using ir::Op;
using ir::ValueId;
using autodiff::AdjointBuilder;

// --------------------------------------------------------------- type rules

// sum(x, axis = -1, keepdims = false), mean, max(x, axis, keepdims), min;
// axis may be a list of distinct axes ([0, 2]).
template <Op kOp>
TypeResult infer_reduce(TypeQuery& q) {
  const std::string& name = q.what();
  const TensorType* x = q.tensor(0, name);
  if (!x) return TypeResult::failed();
  if (x->rank() == 0) return q.error(0, name + " cannot reduce a rank-0 value", "it is already a single value");
  if (x->dtype == DType::kBool || (kOp == Op::kMean && !is_float(x->dtype)))
    return q.error(0, name + " needs " + (kOp == Op::kMean ? "a float" : "a numeric") + " tensor, got " + q.text(*x),
                   "convert it with cast(x, f32)");
  std::vector<int64_t> written{-1};
  if (q.given(1)) {
    written.clear();
    if (!q.axes(1, "axis", &written)) return TypeResult::failed();
  }
  std::vector<bool> reduced(x->shape.size(), false);
  for (int64_t w : written) {
    int axis = 0;
    if (std::optional<TypeResult> bad = normalize_axis(q, 1, w, x->rank(), &axis)) return *bad;
    if (reduced[static_cast<size_t>(axis)])
      return q.error(1, "axis " + std::to_string(axis) + " is listed twice", "list each axis once");
    reduced[static_cast<size_t>(axis)] = true;
  }
  bool keepdims = false;
  if (q.given(2) && !q.flag(2, "keepdims", &keepdims)) return TypeResult::failed();
  Shape s;
  std::vector<int64_t> axes;
  for (size_t a = 0; a < x->shape.size(); ++a) {
    if (!reduced[a]) {
      s.push_back(x->shape[a]);
      continue;
    }
    axes.push_back(static_cast<int64_t>(a));
    if (keepdims) s.push_back(Dim::constant(1));
  }
  q.attrs().axis = axes.size() == 1 ? static_cast<int>(axes[0]) : 0;
  q.attrs().ints = axes.size() == 1 ? std::vector<int64_t>{} : axes;
  q.attrs().keepdims = keepdims;
  return TensorType{x->dtype, s};
}

// cumsum(x, axis = -1): the shape and dtype of x.
TypeResult infer_cumsum(TypeQuery& q) {
  const std::string& name = q.what();
  const TensorType* x = q.tensor(0, name);
  if (!x) return TypeResult::failed();
  if (x->dtype == DType::kBool)
    return q.error(0, name + " needs a numeric tensor, got " + q.text(*x), "convert it with cast(x, i32)");
  if (x->rank() == 0) return q.error(0, name + " needs a tensor of rank >= 1, got " + q.text(*x), "reshape it to [1] first");
  int axis = x->rank() - 1;
  if (q.given(1))
    if (std::optional<TypeResult> bad = axis_of(q, 1, x->rank(), &axis)) return *bad;
  q.attrs().axis = axis;
  return *x;
}

TypeResult infer_softmax(TypeQuery& q) {
  std::optional<TypeResult> bad;
  const TensorType* x = float_rows_operand(q, &bad);
  if (!x) return *bad;
  int axis = x->rank() - 1;
  if (q.given(1))
    if (std::optional<TypeResult> bad = axis_of(q, 1, x->rank(), &axis)) return *bad;
  q.attrs().axis = axis;
  return *x;
}

std::string reduce_attrs(const ir::Attrs& a) {
  return (a.ints.empty() ? "axis=" + std::to_string(a.axis) : "axes=" + ints_text(a.ints)) +
         (a.keepdims ? ", keepdims" : "");
}
std::string axis_attr(const ir::Attrs& a) { return "axis=" + std::to_string(a.axis); }

// ---------------------------------------------------------------- CPU rules

// The axes a reduction combines, ascending.
std::vector<int> reduced_axes(const ir::Attrs& a) {
  if (a.ints.empty()) return {a.axis};
  return std::vector<int>(a.ints.begin(), a.ints.end());
}

// Visits the valid positions of every reduced axis (every position of the
// others) in row-major order, combining each into its result: max and min
// propagate NaN, sums add in double (i32 in 64 bits, then wraps), mean
// divides by the number of positions combined.
void eval_reduce(const ir::Node& n, const EvalArgs& in, HostTensor& out) {
  const HostTensor& x = *in.values[0];
  const size_t rank = x.shape.size();
  std::vector<bool> reduced(rank, false);
  host::Extents limit = x.shape;  // positions visited along each axis
  int64_t combined = 1;           // positions per result
  for (int a : reduced_axes(n.attrs)) {
    reduced[static_cast<size_t>(a)] = true;
    limit[static_cast<size_t>(a)] = in.valid(0, a);
    combined *= limit[static_cast<size_t>(a)];
  }
  host::Extents to_out(rank, 0);  // a coordinate's step in `out`: 0 along the reduced axes
  for (int64_t run = 1, a = static_cast<int64_t>(rank) - 1; a >= 0; --a)
    if (!reduced[static_cast<size_t>(a)]) to_out[static_cast<size_t>(a)] = run, run *= x.shape[static_cast<size_t>(a)];
  const host::Extents from_in = host::row_major_strides(x.shape);
  GDL_INTERNAL_ASSERT(static_cast<int64_t>(out.data.size()) * combined == host::product(limit), "reduction result size");

  const bool extreme = n.op == Op::kReduceMax || n.op == Op::kReduceMin;
  const bool integer = x.dtype == DType::kI32;
  const double start = n.op == Op::kReduceMax ? -std::numeric_limits<double>::infinity()
                       : n.op == Op::kReduceMin ? std::numeric_limits<double>::infinity()
                                                : 0.0;
  std::vector<double> acc(out.data.size(), start);
  std::vector<int64_t> whole(out.data.size(), 0);  // i32 sums
  host::Extents c(rank, 0);
  for (int64_t left = host::product(limit); left > 0; --left) {
    int64_t src = 0, dst = 0;
    for (size_t a = 0; a < rank; ++a) src += c[a] * from_in[a], dst += c[a] * to_out[a];
    const double e = x.data[static_cast<size_t>(src)];
    double& r = acc[static_cast<size_t>(dst)];
    if (extreme) {
      if (!std::isnan(r)) r = std::isnan(e) ? e : n.op == Op::kReduceMax ? std::max(r, e) : std::min(r, e);
    } else if (integer) {
      whole[static_cast<size_t>(dst)] += static_cast<int64_t>(e);
    } else {
      r += e;
    }
    for (size_t a = rank; a-- > 0;) {  // the next coordinates in row-major order
      if (++c[a] < limit[a]) break;
      c[a] = 0;
    }
  }
  for (size_t i = 0; i < out.data.size(); ++i) {
    if (!extreme && integer)
      acc[i] = n.op == Op::kSum ? host::wrap_i32(whole[i]) : static_cast<double>(whole[i]) / static_cast<double>(combined);
    else if (n.op == Op::kMean)
      acc[i] /= static_cast<double>(combined);
    out.data[i] = acc[i];
  }
}

// Running sums along the axis in double (i32: 64 bits, each result wrapped).
void eval_cumsum(const ir::Node& n, const EvalArgs& in, HostTensor& out) {
  const HostTensor& x = *in.values[0];
  host::AxisView v = host::view_around(x.shape, n.attrs.axis);
  const bool integer = x.dtype == DType::kI32;
  for (int64_t o = 0; o < v.outer; ++o)
    for (int64_t inner = 0; inner < v.inner; ++inner) {
      const int64_t base = o * v.len * v.inner + inner;
      double total = 0;
      int64_t whole = 0;
      for (int64_t i = 0; i < v.len; ++i) {
        const auto at = static_cast<size_t>(base + i * v.inner);
        if (integer) {
          whole += static_cast<int64_t>(x.data[at]);
          out.data[at] = host::wrap_i32(whole);
        } else {
          total += x.data[at];
          out.data[at] = total;
        }
      }
    }
}

// Peak and sum over the first `valid` positions of the axis; every position
// (padding too) gets exp(x - peak) / sum.
void eval_softmax(const ir::Node& n, const EvalArgs& in, HostTensor& out) {
  const HostTensor& x = *in.values[0];
  const int64_t valid = in.valid(0, n.attrs.axis);
  host::AxisView v = host::view_around(x.shape, n.attrs.axis);
  std::vector<double> e(static_cast<size_t>(v.len));
  for (int64_t o = 0; o < v.outer; ++o) {
    for (int64_t inner = 0; inner < v.inner; ++inner) {
      int64_t base = o * v.len * v.inner + inner;
      double peak = -std::numeric_limits<double>::infinity();
      for (int64_t i = 0; i < valid; ++i) peak = std::max(peak, x.data[base + i * v.inner]);
      double total = 0;
      for (int64_t i = 0; i < v.len; ++i) e[i] = std::exp(x.data[base + i * v.inner] - peak);
      for (int64_t i = 0; i < valid; ++i) total += e[i];
      for (int64_t i = 0; i < v.len; ++i) out.data[base + i * v.inner] = e[i] / total;
    }
  }
}

// ----------------------------------------------------------------- kernels

// The policy of a reduction in gdl_reduce.cuh: "gdl::Sum<float>".
std::string reduce_policy(Op op, DType dtype) {
  const char* name = op == Op::kSum ? "Sum" : op == Op::kMean ? "Mean" : op == Op::kReduceMax ? "Max" : "Min";
  return std::string("gdl::") + name + "<" + storage_type(dtype) + ">";
}

// Several axes (gdl_reduce.cuh, AxesMap): a block per result when the last
// axis is reduced (its threads share the positions), else a thread per
// result (neighbouring threads read neighbouring elements of the kept last
// axis). Each result combines the valid positions of the reduced axes.
std::string emit_reduce_axes(StepEmitter& e, const ir::Node& n, LaunchRule& rule) {
  const ir::ValueId x = n.args.at(0);
  const std::string in = e.pointer(x);
  const std::string out = e.result_pointer();
  const Shape& xs = e.g.node(x).type.shape;
  std::vector<bool> reduced(xs.size(), false);
  for (int64_t a : n.attrs.ints) reduced[static_cast<size_t>(a)] = true;
  Shape kept;
  std::vector<std::string> kept_extents, kept_strides, counts, strides;
  int64_t longest = 1;  // the most positions one result combines
  for (size_t a = 0; a < xs.size(); ++a) {
    const std::string stride = e.product(xs, a + 1, xs.size());
    if (!reduced[a]) {
      kept.push_back(xs[a]);
      kept_extents.push_back(e.dim(xs[a]));
      kept_strides.push_back(stride);
      continue;
    }
    // A run-time axis may be padded (buckets): combine its valid positions only.
    counts.push_back(valid_count_or_extent(xs[a]));
    strides.push_back(stride);
    longest *= max_extent(xs[a], e.g);
  }
  if (kept.empty()) kept_extents = {"1"}, kept_strides = {"0"};  // one result
  auto list = [](const std::vector<std::string>& v) {
    std::string out;
    for (size_t i = 0; i < v.size(); ++i) out += (i ? ", " : "") + v[i];
    return "{" + out + "}";
  };
  const std::string map_type = "gdl::AxesMap<" + std::to_string(kept_extents.size()) + ", " +
                               std::to_string(counts.size()) + ", " + e.idx + ">";
  std::string body = "  const " + map_type + " map{" + list(kept_extents) + ", " + list(kept_strides) + ", " +
                     list(counts) + ", " + list(strides) + "};\n";
  body += e.local("results", e.product(kept, 0, kept.size()));
  const std::string p = reduce_policy(n.op, e.g.node(x).type.dtype);
  if (reduced.back()) {
    body += "  gdl::reduce_axes_rows<" + p + ">(" + in + ", " + out + ", results, map);\n";
    rule = task_launch({{kept, 1}}, row_block(longest));
  } else {
    body += "  gdl::reduce_axes_cols<" + p + ">(" + in + ", " + out + ", results, map);\n";
    rule = LaunchRule{};  // one thread per result, grid-stride
    rule.work = kept;
    rule.items_per_block = kElementwiseBlock;
    rule.block = kElementwiseBlock;
  }
  return body;
}

// gdl_reduce.cuh: the rows kernels (one block per row) when the axis is the
// last one with more than one element, the column kernels otherwise.
std::string emit_reduce(StepEmitter& e, const ir::Node& n, LaunchRule& rule) {
  if (!n.attrs.ints.empty()) return emit_reduce_axes(e, n, rule);
  const ir::ValueId x = n.args.at(0);
  const std::string in = e.pointer(x);
  const std::string out = e.result_pointer();
  const Shape& xs = e.g.node(x).type.shape;
  std::string body;
  const auto axis = static_cast<size_t>(n.attrs.axis);
  const bool last_axis = statically_one_element(sub_shape(xs, axis + 1, xs.size()));
  body += e.local("outer", e.product(xs, 0, axis));
  body += e.local("len", e.dim(xs[axis]));
  if (!last_axis) body += e.local("inner", e.product(xs, axis + 1, xs.size()));
  // A run-time axis may be padded (buckets): combine its valid positions only.
  const bool padded = xs[axis].is_runtime();
  if (padded) body += e.local("valid", valid_count_expr(xs[axis].symbol));
  const std::string valid_arg = padded ? ", valid" : "";
  const Shape outer = sub_shape(xs, 0, axis), inner = sub_shape(xs, axis + 1, xs.size());
  const std::string& idx = e.idx;
  if (n.op == Op::kSoftmax) {
    if (last_axis) {
      body += "  gdl::softmax_rows<" + idx + ">(" + in + ", " + out + ", outer, len" + valid_arg + ");\n";
      rule = task_launch({{outer, 1}}, row_block(max_extent(xs[axis], e.g)));
    } else {
      body += "  gdl::softmax_cols<" + idx + ">(" + in + ", " + out + ", outer, len, inner" + valid_arg + ");\n";
      rule = LaunchRule{};  // one thread per column, grid-stride
      rule.work = outer;
      rule.work.insert(rule.work.end(), inner.begin(), inner.end());
      rule.items_per_block = kElementwiseBlock;
      rule.block = kElementwiseBlock;
    }
    return body;
  }
  const std::string p = reduce_policy(n.op, e.g.node(x).type.dtype);
  if (last_axis) {
    body += "  gdl::reduce_rows<" + p + ", " + idx + ">(" + in + ", " + out + ", outer, len" + valid_arg + ");\n";
    rule = task_launch({{outer, 1}}, row_block(max_extent(xs[axis], e.g)));
  } else {
    body += "  gdl::reduce_cols<" + p + ", " + idx + ">(" + in + ", " + out + ", outer, len, inner" + valid_arg + ");\n";
    rule = task_launch({{outer, 1}, {inner, 32}}, 256);
  }
  return body;
}

// cumsum: a block per row scanning it in chunks when the axis is the last
// one, else a thread per column (gdl_reduce.cuh). No valid count: a valid
// position's prefix never reaches the padding.
std::string emit_cumsum(StepEmitter& e, const ir::Node& n, LaunchRule& rule) {
  const ir::ValueId x = n.args.at(0);
  const std::string in = e.pointer(x);
  const std::string out = e.result_pointer();
  const Shape& xs = e.g.node(x).type.shape;
  const auto axis = static_cast<size_t>(n.attrs.axis);
  const Shape outer = sub_shape(xs, 0, axis), inner = sub_shape(xs, axis + 1, xs.size());
  const std::string p = "gdl::ScanSum<" + std::string(storage_type(e.g.node(x).type.dtype)) + ">";
  std::string body = e.local("outer", e.product(xs, 0, axis)) + e.local("len", e.dim(xs[axis]));
  if (statically_one_element(inner)) {
    body += "  gdl::cumsum_rows<" + p + ", " + e.idx + ">(" + in + ", " + out + ", outer, len);\n";
    rule = task_launch({{outer, 1}}, row_block(max_extent(xs[axis], e.g)));
    return body;
  }
  body += e.local("inner", e.product(xs, axis + 1, xs.size()));
  body += "  gdl::cumsum_cols<" + p + ", " + e.idx + ">(" + in + ", " + out + ", outer, len, inner);\n";
  rule = LaunchRule{};  // one thread per column, grid-stride
  rule.work = outer;
  rule.work.insert(rule.work.end(), inner.begin(), inner.end());
  rule.items_per_block = kElementwiseBlock;
  rule.block = kElementwiseBlock;
  return body;
}

// --------------------------------------------------------- derivative rules

// sum: every element read takes the adjoint of the sum it went into.
void vjp_sum(AdjointBuilder& b, ValueId y, ValueId dy, std::vector<ValueId>& d) {
  const ir::Node n = b.node(y);
  d[0] = b.broadcast_to(b.keep_reduced_axes(dy, n), b.shape(n.args[0]));
}
// mean: the sum's, divided by the count in f32 (257 is 256 in bf16).
void vjp_mean(AdjointBuilder& b, ValueId y, ValueId dy, std::vector<ValueId>& d) {
  const ir::Node n = b.node(y);
  const ValueId count = b.count(b.shape(n.args[0]), autodiff::reduced_axes(n), DType::kF32);
  const ValueId share = b.cast(b.div(b.cast(b.keep_reduced_axes(dy, n), DType::kF32), count), n.type.dtype);
  d[0] = b.broadcast_to(share, b.shape(n.args[0]));
}
// max and min over axes: the elements equal to the result share its adjoint.
void vjp_extreme(AdjointBuilder& b, ValueId y, ValueId dy, std::vector<ValueId>& d) {
  const ir::Node n = b.node(y);
  const ValueId x = n.args[0];
  const ValueId chosen = b.cast(b.binary(Op::kEq, x, b.keep_reduced_axes(y, n)), n.type.dtype);
  const ValueId ties = b.reduce(Op::kSum, chosen, autodiff::reduced_axes(n), true);
  d[0] = b.mul(chosen, b.div(b.keep_reduced_axes(dy, n), ties));
}
// y = softmax(x): dx = y (dy - sum(dy y)) along the axis.
void vjp_softmax(AdjointBuilder& b, ValueId y, ValueId dy, std::vector<ValueId>& d) {
  const ValueId along = b.reduce(Op::kSum, b.mul(dy, y), {b.node(y).attrs.axis}, true);
  d[0] = b.mul(y, b.sub(dy, along));
}
// An element feeds the running sums from its position on: dx is dy summed
// from the end, total - (inclusive running sum) + dy, in f32 (in f16 or
// bf16 the difference of two large sums would cancel the late positions).
void vjp_cumsum(AdjointBuilder& b, ValueId y, ValueId dy, std::vector<ValueId>& d) {
  const int axis = b.node(y).attrs.axis;
  const DType t = b.type(y).dtype;
  ir::Attrs along;
  along.axis = axis;
  const ValueId g = b.cast(dy, DType::kF32);
  const ValueId running = b.emit(Op::kCumSum, {g}, along);
  d[0] = b.cast(b.add(b.sub(b.reduce(Op::kSum, g, {axis}, true), running), g), t);
}

OpDef reduction(Op op, const char* callable, InferFn infer) {
  OpDef d;
  d.op = op;
  d.fusion = FusionClass::kReduction;
  d.callable = callable;
  d.params = {"x", "axis", "keepdims"};
  d.operands = d.required = 1;
  d.min_args = d.max_args = 1;
  d.infer = infer;
  d.attr_text = reduce_attrs;
  d.eval = eval_reduce;
  d.kernel = emit_reduce;
  return d;
}

}  // namespace

void add_reduce_ops(std::vector<OpDef>& defs) {
  OpDef sum = reduction(Op::kSum, "sum", infer_reduce<Op::kSum>);
  sum.vjp = vjp_sum;
  defs.push_back(sum);
  OpDef mean = reduction(Op::kMean, "mean", infer_reduce<Op::kMean>);
  mean.vjp = vjp_mean;
  defs.push_back(mean);
  OpDef reduce_max = reduction(Op::kReduceMax, nullptr, infer_reduce<Op::kReduceMax>);  // called as max(x, axis)
  reduce_max.vjp = vjp_extreme;
  defs.push_back(reduce_max);
  OpDef reduce_min = reduction(Op::kReduceMin, nullptr, infer_reduce<Op::kReduceMin>);  // called as min(x, axis)
  reduce_min.vjp = vjp_extreme;
  defs.push_back(reduce_min);
  OpDef softmax = reduction(Op::kSoftmax, "softmax", infer_softmax);
  softmax.params = {"x", "axis"};
  softmax.attr_text = axis_attr;
  softmax.eval = eval_softmax;
  softmax.vjp = vjp_softmax;
  defs.push_back(softmax);
  OpDef cumsum = reduction(Op::kCumSum, "cumsum", infer_cumsum);
  cumsum.params = {"x", "axis"};
  cumsum.attr_text = axis_attr;
  cumsum.eval = eval_cumsum;
  cumsum.kernel = emit_cumsum;
  cumsum.vjp = vjp_cumsum;
  defs.push_back(cumsum);
}

}  // namespace gdl::ops
