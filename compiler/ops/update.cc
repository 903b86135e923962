// The ops that write into their first argument's storage (ir::writes_in_place)
// and the copy the inplace pass inserts when they may not:
//  - scatter(base, index, values, axis): base with rows replaced. With
//    base of shape [L..., E, R...] (L the dims before `axis`), index is
//    i32 [L'..., Q...] (one or more count axes) or [L'...] (each L' equal
//    to its L or 1, broadcast) and values [L..., Q..., R...] or
//    [L..., R...]: values[l, q, r] goes to base[l, index[l, q], r], the
//    count axes taken as one in row-major order (`[T, KVH]` rows per
//    token and head). Only the first count axis may be a run-time dim. Rows whose index is outside [0, E) are not
//    written (a padded or finished sequence can pass -1). Two rows aimed at
//    one position: which one lands is unspecified. Over a run-time Q only
//    the valid rows are written, so buckets never write padding.
//  - scatter_add(base, index, values, axis): the same rows added to base's
//    instead of replacing them; rows aimed at one position all add (on the
//    GPU atomically, in no fixed order; on the CPU in index order). The
//    derivative of gather and take_along_axis.
//  - update_slice(base, value) {bounds}: base with the region of the bounds
//    (a slice's [start, stop) pairs) replaced by value, shaped as the slice
//    (`x[l] = v`, `s = v` for a state: the whole region).
//  - copy(x): x in a buffer of its own.
// Each computes its whole result on the CPU; the kernels write only the
// replaced elements, over the base's buffer (plan/memory.cc shares it).
#include <functional>

#include "autodiff/adjoint_builder.h"
#include "codegen/cuda_text.h"
#include "codegen/step_emitter.h"
#include "interp/host_ops.h"
#include "internal_error.h"
#include "ops/families.h"

namespace gdl::ops {
namespace {

using ir::Node;
using ir::Op;
using ir::ValueId;

// ------------------------------------------------------------ type rules

TypeResult infer_scatter(TypeQuery& q) {
  const std::string& name = q.what();
  const TensorType* base = q.tensor(0, name);
  if (!base) return TypeResult::failed();
  std::string described;
  const TensorType* index = q.value(1, name, DType::kI32, &described);
  if (!index && described.empty()) return TypeResult::failed();
  if (!index || index->dtype != DType::kI32)
    return q.error(1, name + "'s index must be i32, got " + (index ? q.text(*index) : described),
                   "convert it with cast(index, i32)");
  const TensorType* values = q.tensor(2, name);
  if (!values) return TypeResult::failed();
  if (name == "scatter_add" && base->dtype == DType::kBool)  // the call's name and the op's IR name alike
    return q.error(0, "scatter_add adds numbers, got " + q.text(*base), "use scatter to set bools, or cast(x, i32) first");
  if (base->rank() == 0) return q.error(0, name + " needs a base of rank >= 1, got " + q.text(*base));
  for (const Dim& d : base->shape)
    if (d.is_runtime())
      return q.error(0, name + "'s base must have a fixed shape, got " + q.text(*base),
                     "scatter into a state or param-shaped buffer; a run-time count of rows belongs to index and values");
  int axis = 0;
  if (q.given(3))
    if (std::optional<TypeResult> bad = axis_of(q, 3, base->rank(), &axis)) return *bad;
  const auto a = static_cast<size_t>(axis);
  if (index->rank() < axis)
    return q.error(1,
                   name + " along axis " + std::to_string(axis) + " needs an index of rank " + std::to_string(axis) +
                       " (one row per position before the axis) or more (counts of rows last), got " + q.text(*index));
  for (size_t k = a + 1; k < index->shape.size(); ++k)
    if (index->shape[k].is_runtime())
      return q.error(1, name + "'s index " + q.text(*index) + " has a run-time dim after its first count axis",
                     "put the run-time count first: [T, KVH], not [KVH, T]");
  for (size_t k = 0; k < a; ++k)
    if (!(index->shape[k] == base->shape[k]) && !(index->shape[k] == Dim::constant(1)))
      return q.error(1, name + "'s index " + q.text(*index) + " does not fit the dims of " + q.text(*base) +
                            " before axis " + std::to_string(axis),
                     "each of its first " + std::to_string(axis) + " dims must equal the base's or be 1");
  Shape want(base->shape.begin(), base->shape.begin() + axis);
  want.insert(want.end(), index->shape.begin() + axis, index->shape.end());
  want.insert(want.end(), base->shape.begin() + axis + 1, base->shape.end());
  if (values->dtype != base->dtype || values->shape != want)
    return q.error(2, name + "'s values must be " + q.text(TensorType{base->dtype, want}) + ", got " + q.text(*values),
                   "the base's shape with the axis replaced by the index's count of rows");
  q.attrs().axis = axis;
  return *base;
}

// The region the bounds select, as a slice's shape: [start, stop) per axis,
// a whole run-time axis as [0, -1).
TypeResult infer_update_slice(TypeQuery& q) {
  const TensorType* base = q.tensor(0, "update_slice");
  const TensorType* value = base ? q.tensor(1, "update_slice") : nullptr;
  std::vector<int64_t> b;
  if (!value || !q.integers(2, "bounds", &b)) return TypeResult::failed();
  if (b.size() != 2 * base->shape.size()) return q.error(2, "update_slice needs one [start, stop] pair per axis");
  Shape region;
  for (size_t axis = 0; axis < base->shape.size(); ++axis) {
    const Dim& d = base->shape[axis];
    const int64_t start = b[2 * axis], stop = b[2 * axis + 1];
    if (d.is_runtime()) {
      if (start != 0 || stop != -1) return q.error(2, "update_slice must take a run-time axis whole");
      region.push_back(d);
    } else if (start < 0 || start >= stop || stop > d.extent) {
      return q.error(2, "update_slice bounds " + ints_text(b) + " do not fit " + q.text(*base));
    } else {
      region.push_back(Dim::constant(stop - start));
    }
  }
  if (value->dtype != base->dtype || value->shape != region)
    return q.error(1, "the value written into " + q.text(*base) + " must be " +
                          q.text(TensorType{base->dtype, region}) + ", got " + q.text(*value));
  q.attrs().ints = b;
  return *base;
}

TypeResult infer_copy(TypeQuery& q) {
  const TensorType* x = q.tensor(0, "copy");
  if (!x) return TypeResult::failed();
  return *x;
}

std::string axis_attr(const ir::Attrs& a) { return "axis=" + std::to_string(a.axis); }
std::string bounds_attr(const ir::Attrs& a) { return "bounds=" + ints_text(a.ints); }

// --------------------------------------------------------------- CPU rules

// The scatter's geometry: [lead, extent, inner] for the base, rows per lead
// position in values (Q, or 1), and the index's broadcast over the lead dims.
struct ScatterView {
  int64_t lead = 1, extent = 0, inner = 1, rows = 1;
  bool counted = false;  // index has the count axis
  std::vector<int64_t> lead_dims, index_strides;  // per lead axis: the index's stride there (0: broadcast)
};

ScatterView scatter_view(const Node& n, const host::Extents& base, const host::Extents& index,
                         const host::Extents& values) {
  ScatterView s;
  const auto a = static_cast<size_t>(n.attrs.axis);
  s.lead_dims.assign(base.begin(), base.begin() + static_cast<ptrdiff_t>(a));
  s.lead = host::product(base, 0, a);
  s.extent = base[a];
  s.inner = host::product(base, a + 1);
  s.counted = index.size() > a;
  s.rows = host::product(index, a);  // the count axes as one
  host::Extents strides = host::row_major_strides(index);
  s.index_strides.resize(a);
  for (size_t k = 0; k < a; ++k) s.index_strides[k] = index[k] == 1 && base[k] != 1 ? 0 : strides[k];
  GDL_INTERNAL_ASSERT(host::product(values) == s.lead * s.rows * s.inner, "scatter values size");
  return s;
}

// Offset of lead position l's first index (before the count axis).
int64_t index_lead_offset(const ScatterView& s, int64_t l) {
  int64_t offset = 0;
  for (size_t k = s.lead_dims.size(); k-- > 0;) {
    offset += (l % s.lead_dims[k]) * s.index_strides[k];
    l /= s.lead_dims[k];
  }
  return offset;
}

void eval_scatter(const Node& n, const EvalArgs& in, HostTensor& out) {
  const HostTensor &base = *in.values[0], &index = *in.values[1], &values = *in.values[2];
  out.data = base.data;
  const ScatterView s = scatter_view(n, base.shape, index.shape, values.shape);
  // A padded count writes its valid rows only: the valid part of the first
  // count axis, times the (fixed) axes after it.
  const int64_t valid = s.counted ? in.valid(1, n.attrs.axis) * (s.rows / index.shape[n.attrs.axis]) : 1;
  for (int64_t l = 0; l < s.lead; ++l)
    for (int64_t q = 0; q < valid; ++q) {
      const auto at = static_cast<int64_t>(index.data[static_cast<size_t>(index_lead_offset(s, l) + q)]);
      if (at < 0 || at >= s.extent) continue;
      const double* src = values.data.data() + (l * s.rows + q) * s.inner;
      double* dst = out.data.data() + (l * s.extent + at) * s.inner;
      if (n.op == Op::kScatterAdd) std::transform(src, src + s.inner, dst, dst, std::plus<>());  // in index order
      else std::copy(src, src + s.inner, dst);
    }
}

void eval_update_slice(const Node& n, const EvalArgs& in, HostTensor& out) {
  const HostTensor &base = *in.values[0], &value = *in.values[1];
  out.data = base.data;
  const host::Extents strides = host::row_major_strides(base.shape);
  int64_t origin = 0;
  for (size_t axis = 0; axis < base.shape.size(); ++axis) origin += n.attrs.ints.at(2 * axis) * strides[axis];
  host::Extents at(value.shape.size(), 0);
  for (size_t i = 0; i < value.data.size(); ++i) {
    int64_t offset = origin;
    for (size_t k = 0; k < at.size(); ++k) offset += at[k] * strides[k];
    out.data[static_cast<size_t>(offset)] = value.data[i];
    for (size_t k = at.size(); k-- > 0;) {
      if (++at[k] < value.shape[k]) break;
      at[k] = 0;
    }
  }
}

// ----------------------------------------------------------------- kernels

// One thread per written element: values[l, q, r] to (scatter_add: added to) out[l, index[l, q], r].
std::string emit_scatter(StepEmitter& e, const Node& n, LaunchRule& rule) {
  const ValueId index = n.args.at(1), values = n.args.at(2);
  const Shape& bs = n.type.shape;
  const Shape& is = e.g.node(index).type.shape;
  const auto a = static_cast<size_t>(n.attrs.axis);
  const bool counted = is.size() > a;
  const std::string out = e.result_pointer();
  GDL_INTERNAL_ASSERT(e.p.buffers.at(static_cast<size_t>(n.args[0])) == e.p.buffers.at(static_cast<size_t>(e.step.result)),
                      "scatter step " + std::to_string(e.index) + " does not write over its base");
  std::string body;
  body += e.local("lead", e.product(bs, 0, a));
  body += e.local("extent", e.dim(bs[a]));
  body += e.local("inner", e.product(bs, a + 1, bs.size()));
  body += e.local("rows", counted ? e.product(is, a, is.size()) : "1");
  const bool padded = counted && is[a].is_runtime();
  body += e.local("valid", padded ? "(" + valid_count_expr(is[a].symbol) + ") * " + e.product(is, a + 1, is.size()) : "rows");
  // The index's offset for lead position l, broadcast over its dims of extent 1.
  std::string lead_offset = "0";
  if (a > 0) {
    bool broadcast = false;
    for (size_t k = 0; k < a; ++k) broadcast |= !(is[k] == bs[k]);
    if (!broadcast) {
      lead_offset = "l";
    } else {
      std::string terms;
      int64_t below = 1, index_below = 1;
      for (size_t k = a; k-- > 0;) {
        const int64_t extent = bs[k].extent, index_extent = is[k].extent;
        if (index_extent != 1)
          terms += (terms.empty() ? "" : " + ") + ("(l / " + std::to_string(below) + " % " + std::to_string(extent) +
                                                  ") * " + std::to_string(index_below));
        below *= extent;
        index_below *= index_extent;
      }
      lead_offset = terms.empty() ? "0" : "(" + terms + ")";
    }
  }
  const std::string at = e.is_inline_leaf(index)
                             ? e.inline_value(index)
                             : "gdl::ld(" + e.pointer(index) + "[" + lead_offset + " * rows + q])";
  const std::string source =
      e.is_inline_leaf(values) ? std::string("gdl::cvt<") + storage_type(n.type.dtype) + ">(" + e.inline_value(values) + ")"
                               : e.pointer(values) + "[(l * rows + q) * inner + r]";
  const std::string& I = e.idx;
  const bool add = n.op == Op::kScatterAdd;
  body += "  // " + std::string(add ? "scatter_add: " : "scatter: ") + (padded ? "the valid rows" : "every row") +
          " of values " + (add ? "added at" : "to") + " the positions index names; others are not written\n";
  body += "  gdl::for_each_element<" + I + ">(lead * valid * inner, [&](" + I + " i) {\n";
  body += "    const " + I + " r = i % inner, q = i / inner % valid, l = i / inner / valid;\n";
  body += "    const int at = " + at + ";\n";
  body += "    if (at < 0 || (" + I + ")at >= extent) return;\n";
  // Rows at one position add atomically, in no fixed order: float sums may
  // differ in their last bits from run to run.
  if (add) body += "    atomicAdd(&" + out + "[(l * extent + at) * inner + r], " + source + ");\n";
  else body += "    " + out + "[(l * extent + at) * inner + r] = " + source + ";\n";
  body += "  });\n";
  rule = LaunchRule{};
  rule.work = sub_shape(bs, 0, a);
  if (counted) rule.work.insert(rule.work.end(), is.begin() + static_cast<ptrdiff_t>(a), is.end());
  const Shape rest = sub_shape(bs, a + 1, bs.size());
  rule.work.insert(rule.work.end(), rest.begin(), rest.end());
  rule.items_per_block = kElementwiseBlock;
  rule.block = kElementwiseBlock;
  return body;
}

// One thread per element of the value, written at its place in the region.
std::string emit_update_slice(StepEmitter& e, const Node& n, LaunchRule& rule) {
  const ValueId value = n.args.at(1);
  const Shape& vs = e.g.node(value).type.shape;
  const std::string out = e.result_pointer();
  GDL_INTERNAL_ASSERT(e.p.buffers.at(static_cast<size_t>(n.args[0])) == e.p.buffers.at(static_cast<size_t>(e.step.result)),
                      "update_slice step " + std::to_string(e.index) + " does not write over its base");
  const std::string& I = e.idx;
  const Shape& bs = n.type.shape;
  auto stride = [&](size_t axis) { return e.product(bs, axis + 1, bs.size()); };  // the base's, in elements
  std::string origin;
  for (size_t axis = 0; axis < vs.size(); ++axis)
    if (int64_t start = n.attrs.ints.at(2 * axis); start != 0)
      origin += (origin.empty() ? "" : " + ") + std::to_string(start) + " * " + stride(axis);
  std::string body;
  body += e.local("origin", origin.empty() ? "0" : origin);
  body += e.local("count", e.product(vs, 0, vs.size()));
  const std::string source = e.is_inline_leaf(value)
                                 ? std::string("gdl::cvt<") + storage_type(n.type.dtype) + ">(" + e.inline_value(value) + ")"
                                 : e.pointer(value) + "[i]";
  body += "  // update_slice: the value's elements, at their places in the region\n";
  body += "  gdl::for_each_element<" + I + ">(count, [&](" + I + " i) {\n";
  body += "    " + I + " rest = i, offset = origin;\n";
  for (size_t k = vs.size(); k-- > 0;) {
    const std::string extent = e.dim(vs[k]);
    body += "    offset += rest % " + extent + " * " + stride(k) + ";\n";
    if (k > 0) body += "    rest /= " + extent + ";\n";
  }
  body += "    " + out + "[offset] = " + source + ";\n";
  body += "  });\n";
  rule = LaunchRule{};
  rule.work = vs.empty() ? Shape{Dim::constant(1)} : vs;
  rule.items_per_block = kElementwiseBlock;
  rule.block = kElementwiseBlock;
  return body;
}

// y = x with a region replaced by v: dx is dy with that region zeroed, dv
// the region of dy.
void vjp_update_slice(autodiff::AdjointBuilder& b, ValueId y, ValueId dy, std::vector<ValueId>& d) {
  const Node n = b.node(y);
  const ValueId value = n.args[1];
  d[0] = b.emit(Op::kUpdateSlice, {dy, b.zeros(b.type(value))}, n.attrs);
  d[1] = b.slice(dy, n.attrs.ints);
}

}  // namespace

void add_update_ops(std::vector<OpDef>& defs) {
  OpDef scatter;
  scatter.op = Op::kScatter;
  scatter.fusion = FusionClass::kUpdate;
  scatter.callable = "scatter";
  scatter.params = {"base", "index", "values", "axis"};
  scatter.operands = 3;
  scatter.required = 3;
  scatter.min_args = scatter.max_args = 3;
  scatter.infer = infer_scatter;
  scatter.attr_text = axis_attr;
  scatter.eval = eval_scatter;
  scatter.kernel = emit_scatter;
  defs.push_back(scatter);
  OpDef scatter_add = scatter;
  scatter_add.op = Op::kScatterAdd;
  scatter_add.callable = "scatter_add";
  defs.push_back(scatter_add);

  OpDef update;  // written `x[...] = v;` or `state = v;`
  update.op = Op::kUpdateSlice;
  update.fusion = FusionClass::kUpdate;
  update.params = {"base", "value", "bounds"};
  update.operands = 2;
  update.required = 3;
  update.min_args = update.max_args = 2;
  update.infer = infer_update_slice;
  update.attr_text = bounds_attr;
  update.eval = eval_update_slice;
  update.kernel = emit_update_slice;
  update.vjp = vjp_update_slice;
  defs.push_back(update);

  OpDef copy;  // inserted by the inplace pass only
  copy.op = Op::kCopy;
  copy.fusion = FusionClass::kElementwise;
  copy.params = {"x"};
  copy.operands = copy.required = 1;
  copy.min_args = copy.max_args = 1;
  copy.infer = infer_copy;
  copy.unary = identity_rule;
  copy.device_function = "gdl::op::copy";
  defs.push_back(copy);
}

}  // namespace gdl::ops
