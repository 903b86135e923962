// rope(x, cos, sin): the rotary position embedding of Llama and most
// decoders since (transformers' rotate_half form): x [..., D], D even, its
// pairs (i, i + D/2) rotated by the angle whose cosine and sine are
// cos[..., i] and sin[..., i]:
//   out[..., i]         = x[..., i] * cos[..., i] - x[..., i + D/2] * sin[..., i]
//   out[..., i + D/2]   = x[..., i + D/2] * cos[..., i] + x[..., i] * sin[..., i]
// cos and sin have x's rank, D/2 last and every other dim x's or 1
// (broadcast: one angle per token shared by its heads). One kernel reads
// x, cos and sin once and writes the result, where the same rotation
// written with slices, products and a concat is five kernels.
#include "autodiff/adjoint_builder.h"
#include "codegen/cuda_text.h"
#include "codegen/step_emitter.h"
#include "interp/host_ops.h"
#include "ops/families.h"

namespace gdl::ops {
namespace {

using ir::Node;
using ir::ValueId;

TypeResult infer_rope(TypeQuery& q) {
  const TensorType* x = q.tensor(0, "rope");
  const TensorType* c = x ? q.tensor(1, "rope") : nullptr;
  const TensorType* s = c ? q.tensor(2, "rope") : nullptr;
  if (!s) return TypeResult::failed();
  if (!is_float(x->dtype)) return q.error(0, "rope rotates a float tensor, got " + q.text(*x), "cast it to f32, f16 or bf16");
  if (x->rank() == 0 || x->shape.back().is_runtime() || x->shape.back().extent % 2 != 0)
    return q.error(0, "rope needs a last dim of even compile-time extent (pairs i, i + D/2), got " + q.text(*x),
                   "rope rotates head vectors: x [..., heads, head_dim] with an even head_dim");
  const int64_t half = x->shape.back().extent / 2;
  for (int slot : {1, 2}) {
    const TensorType* t = slot == 1 ? c : s;
    const char* name = slot == 1 ? "cos" : "sin";
    if (t->dtype != x->dtype)
      return q.error(slot, std::string("rope's ") + name + " must be " + dtype_name(x->dtype) + " like x, got " + q.text(*t),
                     "cast it: cast(" + std::string(name) + ", " + dtype_name(x->dtype) + ")");
    bool fits = t->rank() == x->rank() && t->shape.back() == Dim::constant(half);
    for (size_t k = 0; fits && k + 1 < x->shape.size(); ++k)
      fits = t->shape[k] == x->shape[k] || t->shape[k] == Dim::constant(1);
    if (!fits)
      return q.error(slot, std::string("rope's ") + name + " " + q.text(*t) + " does not fit x " + q.text(*x),
                     "it has x's rank, D/2 = " + std::to_string(half) + " last, and each other dim x's or 1");
  }
  return *x;
}

void eval_rope(const Node&, const EvalArgs& in, HostTensor& out) {
  const HostTensor &x = *in.values[0], &c = *in.values[1], &s = *in.values[2];
  const int64_t d = x.shape.back(), half = d / 2, rows = host::product(x.shape) / d;
  host::Extents row_shape(x.shape.begin(), x.shape.end() - 1), angle_shape(c.shape.begin(), c.shape.end() - 1);
  host::BroadcastCursor cursor(row_shape, {angle_shape, host::Extents(s.shape.begin(), s.shape.end() - 1)});
  for (int64_t r = 0; r < rows; ++r, cursor.next()) {
    const double* xr = x.data.data() + r * d;
    const double* cr = c.data.data() + cursor.offset(0) * half;
    const double* sr = s.data.data() + cursor.offset(1) * half;
    double* o = out.data.data() + r * d;
    for (int64_t i = 0; i < half; ++i) {
      o[i] = xr[i] * cr[i] - xr[i + half] * sr[i];
      o[i + half] = xr[i + half] * cr[i] + xr[i] * sr[i];
    }
  }
}

// Element (..., e) of the result: x at e and at its partner, and the angle
// of pair e % D/2 (cos and sin broadcast over their dims of extent 1).
std::string element_rope(StepEmitter& e, ValueId v) {
  const Node& n = e.g.node(v);
  const ValueId x = n.args.at(0), c = n.args.at(1), s = n.args.at(2);
  const Shape& xs = e.g.node(x).type.shape;
  const size_t last = xs.size() - 1;
  const int64_t half = xs.back().extent / 2;
  const std::string xin = e.input_strides(x), cin = e.input_strides(c), sin_ = e.input_strides(s);
  auto angle_offset = [&](ValueId a, const std::string& in) {
    const Shape& as = e.g.node(a).type.shape;
    std::string off = "pair";
    for (size_t k = 0; k < last; ++k)
      if (!(as[k] == Dim::constant(1))) off += " + c.c[" + std::to_string(k) + "] * " + in + ".s[" + std::to_string(k) + "]";
    return off;
  };
  e.needs_coords = true;
  const std::string r = "r" + std::to_string(v);
  const std::string ct = compute_type(n.type.dtype);
  std::string out = "    " + ct + " " + r + ";\n    {\n";
  out += "      const " + e.idx + " along = c.c[" + std::to_string(last) + "];\n";
  out += "      const bool first = along < " + std::to_string(half) + ";\n";
  out += "      const " + e.idx + " pair = first ? along : along - " + std::to_string(half) + ";\n";
  out += "      const " + e.idx + " at = " + xin + ".at(c);\n";
  out += "      const " + ct + " self = gdl::ld(" + e.pointer(x) + "[at]);\n";
  out += "      const " + ct + " other = gdl::ld(" + e.pointer(x) + "[first ? at + " + std::to_string(half) + " * " + xin +
         ".s[" + std::to_string(last) + "] : at - " + std::to_string(half) + " * " + xin + ".s[" + std::to_string(last) + "]]);\n";
  out += "      const " + ct + " cs = gdl::ld(" + e.pointer(c) + "[" + angle_offset(c, cin) + "]);\n";
  out += "      const " + ct + " sn = gdl::ld(" + e.pointer(s) + "[" + angle_offset(s, sin_) + "]);\n";
  out += "      " + r + " = first ? self * cs - other * sn : self * cs + other * sn;\n";
  return out + "    }\n";
}

// A rotation's transpose is the rotation by minus the angle:
// dx = rope(dy, cos, -sin). With x = (x1, x2) and dy = (g1, g2) in halves,
// dcos = g1 x1 + g2 x2 and dsin = g2 x1 - g1 x2, summed over the dims cos
// and sin broadcast along.
void vjp_rope(autodiff::AdjointBuilder& b, ValueId y, ValueId dy, std::vector<ValueId>& d) {
  const Node n = b.node(y);
  const ValueId x = n.args[0], cos = n.args[1], sin = n.args[2];
  d[0] = b.emit(ir::Op::kRope, {dy, cos, b.neg(sin)});
  const int64_t half = b.shape(x).back().extent / 2;
  const auto halves = [&](ValueId v, int64_t from) { return b.slice_last_axis(v, from, from + half); };
  const ValueId x1 = halves(x, 0), x2 = halves(x, half), g1 = halves(dy, 0), g2 = halves(dy, half);
  const ValueId g1x1 = b.mul(g1, x1), g2x2 = b.mul(g2, x2), g2x1 = b.mul(g2, x1), g1x2 = b.mul(g1, x2);
  d[1] = b.sum_to(b.add(g1x1, g2x2), b.shape(cos));
  d[2] = b.sum_to(b.sub(g2x1, g1x2), b.shape(sin));
}

}  // namespace

void add_rope_ops(std::vector<OpDef>& defs) {
  OpDef d;
  d.op = ir::Op::kRope;
  d.fusion = FusionClass::kDataMovement;
  d.callable = "rope";
  d.params = {"x", "cos", "sin"};
  d.operands = d.required = 3;
  d.min_args = d.max_args = 3;
  d.infer = infer_rope;
  d.eval = eval_rope;
  d.element = element_rope;
  d.vjp = vjp_rope;
  defs.push_back(std::move(d));
}

}  // namespace gdl::ops
