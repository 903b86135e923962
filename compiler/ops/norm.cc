// layernorm(x, weight, bias, eps = 1e-5) and rmsnorm(x, weight, eps = 1e-6)
// over the last axis. The variance is the biased one (divided by the axis
// length); weight and bias hold one element per position of the last axis,
// or a single element. Over a run-time last axis that buckets pad, the
// statistics cover the valid positions only, and every position is
// normalized. A norm whose only use is a matmul's a runs as that matmul's
// prologue (plan/fuse.cc, ops/matmul.cc).
#include "ops/norm.h"

#include <cmath>

#include "autodiff/adjoint_builder.h"
#include "codegen/cuda_text.h"
#include "codegen/step_emitter.h"
#include "interp/host_ops.h"
#include "internal_error.h"
#include "ops/families.h"

namespace gdl::ops {
namespace {

using ir::Op;

template <Op kOp>
TypeResult infer_norm(TypeQuery& q) {
  const std::string& name = q.what();
  std::optional<TypeResult> bad;
  const TensorType* x = float_rows_operand(q, &bad);
  if (!x) return *bad;
  const TensorType per_column{x->dtype, {x->shape.back()}};
  const size_t eps_slot = kOp == Op::kLayerNorm ? 3 : 2;
  if (kOp == Op::kLayerNorm && q.given(2) && !q.given(1)) {
    TypeError e = q.error(2, name + " with a bias needs a weight too",
                          "pass weight = ... as well (a weight of ones keeps the scale)");
    e.at_keyword = true;
    return e;
  }
  for (size_t slot = 1; slot < eps_slot; ++slot) {
    if (!q.given(slot)) continue;
    const std::string role = slot == 1 ? "weight" : "bias";
    const TensorType* w = q.tensor(slot, name + " " + role);
    if (!w) return TypeResult::failed();
    if (!(*w == per_column))
      return q.error(static_cast<int>(slot),
                     "the " + role + " of " + name + " must be " + q.text(per_column) + " (the last dim of x), got " +
                         q.text(*w),
                     "normalisation runs over the last axis; give one element per position of it");
  }
  double eps = kOp == Op::kLayerNorm ? 1e-5 : 1e-6;
  if (q.given(eps_slot)) {
    if (!q.number(eps_slot, "eps", &eps)) return TypeResult::failed();
    if (eps < 0) return q.error(static_cast<int>(eps_slot), "eps must not be negative", "use a small positive value such as 1e-5");
  }
  q.attrs().value = eps;
  return *x;
}

std::string eps_attr(const ir::Attrs& a) { return "eps=" + number_text(a.value); }

// weight or bias: one element per position of the last axis.
double per_column(const HostTensor* t, int64_t column, double absent) {
  return t ? t->data[static_cast<size_t>(column)] : absent;
}

// Statistics over the first `valid` columns; every column is normalised.
void eval_norm(const ir::Node& n, const EvalArgs& in, HostTensor& out) {
  const HostTensor& x = *in.values[0];
  const HostTensor* weight = in.values.size() > 1 ? in.values[1] : nullptr;
  const HostTensor* bias = in.values.size() > 2 ? in.values[2] : nullptr;
  const int64_t valid = in.valid(0, -1);
  GDL_INTERNAL_ASSERT(!x.shape.empty(), "norm of a rank-0 value");
  int64_t cols = x.shape.back(), rows = host::product(x.shape) / std::max<int64_t>(cols, 1);
  for (const HostTensor* t : {weight, bias})
    GDL_INTERNAL_ASSERT(!t || static_cast<int64_t>(t->data.size()) == cols,
                        "norm weight/bias length differs from the last axis");
  double eps = n.attrs.value;
  for (int64_t r = 0; r < rows; ++r) {
    const double* p = x.data.data() + r * cols;
    double* o = out.data.data() + r * cols;
    double mean = 0, second = 0;
    if (n.op == Op::kLayerNorm) {
      for (int64_t c = 0; c < valid; ++c) mean += p[c];
      mean /= static_cast<double>(valid);
    }
    for (int64_t c = 0; c < valid; ++c) second += (p[c] - mean) * (p[c] - mean);
    double inv = 1.0 / std::sqrt(second / static_cast<double>(valid) + eps);
    for (int64_t c = 0; c < cols; ++c) o[c] = (p[c] - mean) * inv * per_column(weight, c, 1.0) + per_column(bias, c, 0.0);
  }
}

// gdl::layernorm_rows / rmsnorm_rows (gdl_reduce.cuh): one block per row.
std::string emit_norm(StepEmitter& e, const ir::Node& n, LaunchRule& rule) {
  const std::string x = e.pointer(n.args.at(0));
  std::vector<std::string> columns;
  for (size_t i = 1; i < n.args.size(); ++i) columns.push_back(norm_column_source(e, n, i));
  const std::string out = e.result_pointer();
  const Shape& xs = e.g.node(n.args.at(0)).type.shape;
  std::string body;
  body += e.local("rows", e.product(xs, 0, xs.size() - 1));
  body += e.local("len", e.dim(xs.back()));
  // A run-time last axis may be padded (buckets): statistics over its valid positions only.
  const bool padded = xs.back().is_runtime();
  if (padded) body += e.local("valid", valid_count_expr(xs.back().symbol));
  const std::string extents = padded ? ", rows, len, valid, " : ", rows, len, ";
  const std::string eps = float_literal(n.attrs.value);
  const std::string weight = columns.size() > 0 ? columns[0] : "gdl::One{}";
  if (n.op == Op::kLayerNorm) {
    const std::string bias = columns.size() > 1 ? columns[1] : "gdl::Zero{}";
    body += "  gdl::layernorm_rows<" + e.idx + ">(" + x + ", " + weight + ", " + bias + ", " + out + extents + eps + ");\n";
  } else {
    body += "  gdl::rmsnorm_rows<" + e.idx + ">(" + x + ", " + weight + ", " + out + extents + eps + ");\n";
  }
  rule = task_launch({{sub_shape(xs, 0, xs.size() - 1), 1}}, row_block(max_extent(xs.back(), e.g)));
  return body;
}

// --------------------------------------------------------- derivative rules

// The statistics are recomputed from x (one more read of x, no saved
// tensor), in f32 whatever x's dtype, as the kernel computes them:
// xhat = (x - mean) r with r = 1 / sqrt(var + eps) (rmsnorm: no mean, the
// mean square for var). With g = dy * weight:
//   dx = r (g - mean(g) - xhat mean(g xhat))   (rmsnorm: without mean(g))
//   dweight = sum of dy xhat, dbias = sum of dy, over every row.
void vjp_norm(autodiff::AdjointBuilder& b, ir::ValueId y, ir::ValueId dy, std::vector<ir::ValueId>& d) {
  const ir::Node n = b.node(y);
  const DType t = n.type.dtype, f = DType::kF32;
  const int64_t last = n.type.rank() - 1;
  const auto row_mean = [&](ir::ValueId v) { return b.reduce(Op::kMean, v, {last}, true); };
  const ir::ValueId x = b.cast(n.args[0], f), dyf = b.cast(dy, f);
  const ir::ValueId centred = n.op == Op::kLayerNorm ? b.sub(x, row_mean(x)) : x;
  const ir::ValueId variance = row_mean(b.mul(centred, centred));
  const ir::ValueId r = b.unary(Op::kRsqrt, b.add(variance, b.constant(n.attrs.value, f)));
  const ir::ValueId xhat = b.mul(centred, r);
  const bool has_weight = n.args.size() > 1;
  const ir::ValueId g = has_weight ? b.mul(dyf, b.cast(n.args[1], f)) : dyf;
  ir::ValueId inner = b.sub(g, b.mul(xhat, row_mean(b.mul(g, xhat))));
  if (n.op == Op::kLayerNorm) inner = b.sub(inner, row_mean(g));
  d[0] = b.cast(b.mul(r, inner), t);
  const Shape column{n.type.shape.back()};
  if (has_weight) d[1] = b.cast(b.sum_to(b.mul(dyf, xhat), column), t);
  if (n.args.size() > 2) d[2] = b.cast(b.sum_to(dyf, column), t);
}

}  // namespace

std::string norm_column_source(StepEmitter& e, const ir::Node& norm, size_t arg) {
  const ir::ValueId a = norm.args.at(arg);
  return std::string("gdl::Column<") + storage_type(e.g.node(a).type.dtype) + ">{" + e.pointer(a) + "}";
}

void add_norm_ops(std::vector<OpDef>& defs) {
  OpDef layernorm;
  layernorm.op = Op::kLayerNorm;
  layernorm.fusion = FusionClass::kNorm;
  layernorm.callable = "layernorm";
  layernorm.params = {"x", "weight", "bias", "eps"};
  layernorm.operands = 3;
  layernorm.required = 1;
  layernorm.min_args = 1;
  layernorm.max_args = 3;
  layernorm.infer = infer_norm<Op::kLayerNorm>;
  layernorm.attr_text = eps_attr;
  layernorm.eval = eval_norm;
  layernorm.kernel = emit_norm;
  layernorm.vjp = vjp_norm;
  defs.push_back(layernorm);
  OpDef rmsnorm = layernorm;
  rmsnorm.op = Op::kRmsNorm;
  rmsnorm.callable = "rmsnorm";
  rmsnorm.params = {"x", "weight", "eps"};
  rmsnorm.operands = 2;
  rmsnorm.max_args = 2;
  rmsnorm.infer = infer_norm<Op::kRmsNorm>;
  defs.push_back(rmsnorm);
}

}  // namespace gdl::ops
