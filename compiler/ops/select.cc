// Selection along one axis: argmax, argmin (the i32 position of the best
// element) and topk (the k best elements, best first), as two ops that
// make the same selection: topk_values and topk_indices. The IR has one
// result per node, so a program that wants both writes both; each is one
// step of its own.
//
// The order (gdl_select.cuh, `before` below): NaN first, lower index first
// among NaNs; then the larger value (argmin: the smaller); ties to the lower
// index. Over a run-time axis that buckets pad, only the valid positions
// are candidates; topk's k must fit the axis's smallest extent.
#include <algorithm>
#include <cmath>
#include <numeric>

#include "autodiff/adjoint_builder.h"
#include "codegen/cuda_text.h"
#include "codegen/step_emitter.h"
#include "interp/host_ops.h"
#include "internal_error.h"
#include "ops/families.h"
#include "plan/kernel_choice.h"

namespace gdl::ops {
namespace {

using ir::Op;

// The most elements topk selects: each one is a pass over the axis.
constexpr int64_t kMaxTopK = 256;

// --------------------------------------------------------------- type rules

// Operand 0: a numeric tensor of rank >= 1; nullptr after *bad is set.
const TensorType* numeric_rows_operand(TypeQuery& q, std::optional<TypeResult>* bad) {
  const std::string& name = q.what();
  const TensorType* x = q.tensor(0, name);
  if (!x) *bad = TypeResult::failed();
  else if (x->dtype == DType::kBool)
    *bad = q.error(0, name + " needs a numeric tensor, got " + q.text(*x), "convert it with cast(x, i32)");
  else if (x->rank() == 0)
    *bad = q.error(0, name + " needs a tensor of rank >= 1, got " + q.text(*x), "reshape it to [1] first");
  return *bad ? nullptr : x;
}

// argmax(x, axis = -1, keepdims = false), argmin: i32 positions.
TypeResult infer_arg(TypeQuery& q) {
  std::optional<TypeResult> bad;
  const TensorType* x = numeric_rows_operand(q, &bad);
  if (!x) return *bad;
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
  return TensorType{DType::kI32, s};
}

// topk_values(x, k, axis = -1), topk_indices: x's shape with k along the
// axis; the values in x's dtype, the indices i32.
template <Op kOp>
TypeResult infer_topk(TypeQuery& q) {
  std::optional<TypeResult> bad;
  const TensorType* x = numeric_rows_operand(q, &bad);
  if (!x) return *bad;
  int64_t k = 0;
  if (!q.integer(1, "k", &k)) return TypeResult::failed();
  int axis = x->rank() - 1;
  if (q.given(2))
    if (std::optional<TypeResult> bad = axis_of(q, 2, x->rank(), &axis)) return *bad;
  if (k < 1 || k > kMaxTopK)
    return q.error(1, q.what() + " selects 1 to " + std::to_string(kMaxTopK) + " elements, not k = " + std::to_string(k),
                   "sort fewer elements, or select in stages");
  const Dim& d = x->shape[static_cast<size_t>(axis)];
  const int64_t smallest = d.is_runtime() ? q.dims()[static_cast<size_t>(d.symbol)].lo : d.extent;
  if (k > smallest)
    return q.error(1,
                   "k = " + std::to_string(k) + " is more than the " + std::to_string(smallest) + " elements along axis " +
                       std::to_string(axis) + " of " + q.text(*x) +
                       (d.is_runtime() ? " (dim " + q.dims()[static_cast<size_t>(d.symbol)].name +
                                             " can be as small as " + std::to_string(smallest) + ")"
                                       : ""),
                   "k must fit every binding of the axis");
  Shape s = x->shape;
  s[static_cast<size_t>(axis)] = Dim::constant(k);
  q.attrs().axis = axis;
  q.attrs().ints = {k};
  return TensorType{kOp == Op::kTopKValues ? x->dtype : DType::kI32, s};
}

std::string arg_attrs(const ir::Attrs& a) {
  return "axis=" + std::to_string(a.axis) + (a.keepdims ? ", keepdims" : "");
}
std::string topk_attrs(const ir::Attrs& a) {
  return "k=" + std::to_string(a.ints.empty() ? 0 : a.ints[0]) + ", axis=" + std::to_string(a.axis);
}

// ---------------------------------------------------------------- CPU rules

// Whether a at position ia comes before b at ib (the order above).
bool before(bool largest, double a, int64_t ia, double b, int64_t ib) {
  const bool na = std::isnan(a), nb = std::isnan(b);
  if (na || nb) return na && (!nb || ia < ib);
  if (a != b) return largest ? a > b : a < b;
  return ia < ib;
}

void eval_arg(const ir::Node& n, const EvalArgs& in, HostTensor& out) {
  const HostTensor& x = *in.values[0];
  const int64_t valid = in.valid(0, n.attrs.axis);
  const bool largest = n.op == Op::kArgMax;
  host::AxisView v = host::view_around(x.shape, n.attrs.axis);
  GDL_INTERNAL_ASSERT(static_cast<int64_t>(out.data.size()) == v.outer * v.inner, "argmax result size");
  for (int64_t o = 0; o < v.outer; ++o)
    for (int64_t inner = 0; inner < v.inner; ++inner) {
      const double* p = x.data.data() + o * v.len * v.inner + inner;
      int64_t best = 0;
      for (int64_t i = 1; i < valid; ++i)
        if (before(largest, p[i * v.inner], i, p[best * v.inner], best)) best = i;
      out.data[static_cast<size_t>(o * v.inner + inner)] = static_cast<double>(best);
    }
}

void eval_topk(const ir::Node& n, const EvalArgs& in, HostTensor& out) {
  const HostTensor& x = *in.values[0];
  const int64_t valid = in.valid(0, n.attrs.axis);
  const int64_t k = n.attrs.ints.at(0);
  GDL_INTERNAL_ASSERT(k <= valid, "topk selects more elements than the axis holds");
  host::AxisView v = host::view_around(x.shape, n.attrs.axis);
  std::vector<int64_t> order(static_cast<size_t>(valid));
  for (int64_t o = 0; o < v.outer; ++o)
    for (int64_t inner = 0; inner < v.inner; ++inner) {
      const double* p = x.data.data() + o * v.len * v.inner + inner;
      std::iota(order.begin(), order.end(), 0);
      std::partial_sort(order.begin(), order.begin() + k, order.end(), [&](int64_t a, int64_t b) {
        return before(true, p[a * v.inner], a, p[b * v.inner], b);
      });
      for (int64_t r = 0; r < k; ++r) {
        const int64_t i = order[static_cast<size_t>(r)];
        out.data[static_cast<size_t>((o * k + r) * v.inner + inner)] =
            n.op == Op::kTopKValues ? p[i * v.inner] : static_cast<double>(i);
      }
    }
}

// ----------------------------------------------------------------- kernels

// gdl_select.cuh: the rows kernels (one block per row, or per part of a row
// where choose_selection splits it) when the axis is the last one with
// more than one element, the column kernels otherwise.
std::string emit_select(StepEmitter& e, const ir::Node& n, LaunchRule& rule) {
  const ir::ValueId x = n.args.at(0);
  const std::string in = e.pointer(x);
  const std::string out = e.result_pointer();
  const Shape& xs = e.g.node(x).type.shape;
  const auto axis = static_cast<size_t>(n.attrs.axis);
  const Shape outer = sub_shape(xs, 0, axis), inner = sub_shape(xs, axis + 1, xs.size());
  const bool last_axis = statically_one_element(inner);
  std::string body = e.local("outer", e.product(xs, 0, axis)) + e.local("len", e.dim(xs[axis]));
  if (!last_axis) body += e.local("inner", e.product(xs, axis + 1, xs.size()));
  // A run-time axis may be padded (buckets): its valid positions only are candidates.
  body += e.local("valid", xs[axis].is_runtime() ? valid_count_expr(xs[axis].symbol) : "len");
  const std::string order = n.op == Op::kArgMin ? "gdl::Order<false>" : "gdl::Order<true>";
  const bool arg = n.op == Op::kArgMax || n.op == Op::kArgMin;
  const std::string kind = arg ? "arg" : "topk";
  const std::string targs =
      "<" + order + (arg ? "" : n.op == Op::kTopKValues ? ", gdl::TopValues" : ", gdl::TopIndices") + ", " + e.idx + ">";
  const std::string k = arg ? "" : ", " + std::to_string(n.attrs.ints.at(0));
  if (last_axis) {  // a row in parts where the rows leave the GPU idle (choose_selection)
    const SelectionChoice choice = choose_selection(e.g, n);
    // Runs of whole_rows_from rows or more take a second kernel, one block a
    // row; the runtime picks it before this one at those rows, so this one's
    // scratch holds fewer rows' parts.
    const bool whole_rows = choice.whole_rows_from > 0 && e.second_kernel_from_rows(choice.whole_rows_from, outer);
    const int parts = whole_rows ? 1 : choice.parts;
    const std::string scratch = e.split_scratch(parts, false, choice.scratch, body);
    body += "  gdl::" + kind + "_rows" + targs + "(" + in + ", " + out + ", outer, len, valid" + k + ", " + scratch +
            ");\n";
    rule = task_launch({{outer, 1}, {{Dim::constant(parts)}, 1}},
                       row_block((max_extent(xs[axis], e.g) + parts - 1) / parts));
  } else {
    body += "  gdl::" + kind + "_cols" + targs + "(" + in + ", " + out + ", outer, len, inner, valid" + k + ");\n";
    rule = LaunchRule{};  // one thread per column, grid-stride
    rule.work = outer;
    rule.work.insert(rule.work.end(), inner.begin(), inner.end());
    rule.items_per_block = kElementwiseBlock;
    rule.block = kElementwiseBlock;
  }
  return body;
}

// topk_values is take_along_axis of its own indices: each selected element
// gets its part of dy back (of tied elements, the one the selection took),
// by take_along_axis's rule. argmax, argmin and topk_indices are integers
// and pass no gradient.
void vjp_topk_values(autodiff::AdjointBuilder& b, ir::ValueId y, ir::ValueId dy, std::vector<ir::ValueId>& d) {
  const ir::Node n = b.node(y);
  const ir::ValueId ids = b.emit(Op::kTopKIndices, {n.args[0]}, n.attrs);
  d[0] = take_along_axis_part(b, n.args[0], ids, n.attrs.axis, dy);
}

OpDef selection(Op op, const char* callable, std::vector<const char*> params, InferFn infer, EvalFn eval,
                std::string (*attr_text)(const ir::Attrs&)) {
  OpDef d;
  d.op = op;
  d.fusion = FusionClass::kReduction;
  d.callable = callable;
  d.params = std::move(params);
  d.operands = 1;
  d.required = op == Op::kArgMax || op == Op::kArgMin ? 1 : 2;
  d.min_args = d.max_args = 1;
  d.infer = infer;
  d.attr_text = attr_text;
  d.eval = eval;
  d.kernel = emit_select;
  return d;
}

}  // namespace

void add_select_ops(std::vector<OpDef>& defs) {
  defs.push_back(selection(Op::kArgMax, "argmax", {"x", "axis", "keepdims"}, infer_arg, eval_arg, arg_attrs));
  defs.push_back(selection(Op::kArgMin, "argmin", {"x", "axis", "keepdims"}, infer_arg, eval_arg, arg_attrs));
  defs.push_back(selection(Op::kTopKValues, "topk_values", {"x", "k", "axis"}, infer_topk<Op::kTopKValues>, eval_topk,
                           topk_attrs));
  defs.back().vjp = vjp_topk_values;
  defs.push_back(selection(Op::kTopKIndices, "topk_indices", {"x", "k", "axis"}, infer_topk<Op::kTopKIndices>,
                           eval_topk, topk_attrs));
}

}  // namespace gdl::ops
