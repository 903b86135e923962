// Reductions over one axis (sum, mean, max) and softmax along one axis.
//
// Over a run-time axis that buckets pad, the kernels and the CPU rules
// combine only the valid positions (the valid-dims block, kernel_table.h);
// mean divides by the valid count; softmax gives every position, padding
// too, exp(x - peak) / sum over the valid ones.
#include <cmath>
#include <limits>

#include "codegen/cuda_text.h"
#include "codegen/step_emitter.h"
#include "interp/host_ops.h"
#include "internal_error.h"
#include "ops/families.h"

namespace gdl::ops {
namespace {

using ir::Op;

// --------------------------------------------------------------- type rules

// sum(x, axis = -1, keepdims = false), mean, max(x, axis, keepdims).
template <Op kOp>
TypeResult infer_reduce(TypeQuery& q) {
  const std::string& name = q.what();
  const TensorType* x = q.tensor(0, name);
  if (!x) return TypeResult::failed();
  if (x->rank() == 0) return q.error(0, name + " cannot reduce a rank-0 value", "it is already a single value");
  if (x->dtype == DType::kBool || (kOp == Op::kMean && !is_float(x->dtype)))
    return q.error(0, name + " needs " + (kOp == Op::kMean ? "a float" : "a numeric") + " tensor, got " + q.text(*x),
                   "convert it with cast(x, f32)");
  int axis = x->rank() - 1;
  if (q.given(1))
    if (std::optional<TypeResult> bad = axis_of(q, 1, x->rank(), &axis)) return *bad;
  bool keepdims = false;
  if (q.given(2) && !q.flag(2, "keepdims", &keepdims)) return TypeResult::failed();
  Shape s = x->shape;
  if (keepdims)
    s[static_cast<size_t>(axis)] = Dim::constant(1);
  else
    s.erase(s.begin() + axis);
  q.attrs().axis = axis;
  q.attrs().keepdims = keepdims;
  return TensorType{x->dtype, s};
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
  return "axis=" + std::to_string(a.axis) + (a.keepdims ? ", keepdims" : "");
}
std::string axis_attr(const ir::Attrs& a) { return "axis=" + std::to_string(a.axis); }

// ---------------------------------------------------------------- CPU rules

// Over the first `valid` positions of the axis.
void eval_reduce(const ir::Node& n, const EvalArgs& in, HostTensor& out) {
  const HostTensor& x = *in.values[0];
  const int64_t valid = in.valid(0, n.attrs.axis);
  host::AxisView v = host::view_around(x.shape, n.attrs.axis);
  GDL_INTERNAL_ASSERT(static_cast<int64_t>(out.data.size()) == v.outer * v.inner, "reduction result size");
  const bool integer = x.dtype == DType::kI32;
  for (int64_t o = 0; o < v.outer; ++o) {
    for (int64_t inner = 0; inner < v.inner; ++inner) {
      const double* p = x.data.data() + o * v.len * v.inner + inner;
      double result;
      if (n.op == Op::kReduceMax) {
        result = -std::numeric_limits<double>::infinity();
        for (int64_t i = 0; i < valid; ++i) {
          double e = p[i * v.inner];
          if (std::isnan(e)) {
            result = e;
            break;
          }
          result = std::max(result, e);
        }
      } else if (integer) {
        int64_t total = 0;
        for (int64_t i = 0; i < valid; ++i) total += static_cast<int64_t>(p[i * v.inner]);
        result = n.op == Op::kSum ? host::wrap_i32(total) : static_cast<double>(total) / static_cast<double>(valid);
      } else {
        double total = 0;
        for (int64_t i = 0; i < valid; ++i) total += p[i * v.inner];
        result = n.op == Op::kSum ? total : total / static_cast<double>(valid);
      }
      out.data[static_cast<size_t>(o * v.inner + inner)] = result;
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

// gdl_reduce.cuh: the rows kernels (one block per row) when the axis is the
// last one with more than one element, the column kernels otherwise.
std::string emit_reduce(StepEmitter& e, const ir::Node& n, LaunchRule& rule) {
  const ir::ValueId x = n.args.at(0);
  const std::string in = e.pointer(x);
  const std::string out = e.result_pointer();
  const Shape& xs = e.g.node(x).type.shape;
  std::string body;
  const auto axis = static_cast<size_t>(n.attrs.axis);
  const bool last_axis = statically_one_element(sub_shape(xs, axis + 1, xs.size()));
  const std::string in_type = storage_type(e.g.node(x).type.dtype);
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
  const char* policy = n.op == Op::kSum ? "Sum" : n.op == Op::kMean ? "Mean" : "Max";
  const std::string p = std::string("gdl::") + policy + "<" + in_type + ">";
  if (last_axis) {
    body += "  gdl::reduce_rows<" + p + ", " + idx + ">(" + in + ", " + out + ", outer, len" + valid_arg + ");\n";
    rule = task_launch({{outer, 1}}, row_block(max_extent(xs[axis], e.g)));
  } else {
    body += "  gdl::reduce_cols<" + p + ", " + idx + ">(" + in + ", " + out + ", outer, len, inner" + valid_arg + ");\n";
    rule = task_launch({{outer, 1}, {inner, 32}}, 256);
  }
  return body;
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
  defs.push_back(reduction(Op::kSum, "sum", infer_reduce<Op::kSum>));
  defs.push_back(reduction(Op::kMean, "mean", infer_reduce<Op::kMean>));
  defs.push_back(reduction(Op::kReduceMax, nullptr, infer_reduce<Op::kReduceMax>));  // called as max(x, axis)
  OpDef softmax = reduction(Op::kSoftmax, "softmax", infer_softmax);
  softmax.params = {"x", "axis"};
  softmax.attr_text = axis_attr;
  softmax.eval = eval_softmax;
  defs.push_back(softmax);
}

}  // namespace gdl::ops
