// The reverse sweep:
// 1. The values on the way: those the loss reads (transitively) that read
//    wrt (transitively) through float values only. Only these need adjoints;
//    an integer or bool value (an argmax, a comparison) passes none.
// 2. From the loss down to wrt, each such value's adjoint is the sum of the
//    parts its consumers gave it. Every consumer that gives a part is itself
//    on the way and later in the graph, so the sum is complete when reached,
//    for any wrt: it is kept for later grad calls of the same loss.
// 3. A value with an adjoint that is not wrt runs its op's derivative rule
//    once, giving a part to each float operand. The rule builds new nodes
//    only (the forward is never changed); parts an operand never uses are
//    left for dead-code elimination.
#include "autodiff/gradient.h"

#include <algorithm>

#include "autodiff/adjoint_builder.h"
#include "internal_error.h"
#include "ops/op_def.h"

namespace gdl::autodiff {
namespace {

using ir::ValueId;

bool is_float_value(const ir::Graph& g, ValueId v) { return is_float(g.node(v).type.dtype); }

// Step 1: on_way[v] for v in [wrt, loss].
std::vector<bool> values_on_the_way(const ir::Graph& g, ValueId loss, ValueId wrt) {
  const auto n = static_cast<size_t>(loss) + 1;
  std::vector<bool> reads_wrt(n, false), read_by_loss(n, false);
  reads_wrt[static_cast<size_t>(wrt)] = is_float_value(g, wrt);
  for (ValueId v = wrt + 1; v <= loss; ++v) {
    if (!is_float_value(g, v)) continue;
    for (ValueId a : g.node(v).args) reads_wrt[static_cast<size_t>(v)] = reads_wrt[static_cast<size_t>(v)] || (a >= wrt && reads_wrt[static_cast<size_t>(a)]);
  }
  read_by_loss[static_cast<size_t>(loss)] = true;
  for (ValueId v = loss; v >= wrt; --v)
    if (read_by_loss[static_cast<size_t>(v)])
      for (ValueId a : g.node(v).args) read_by_loss[static_cast<size_t>(a)] = true;
  std::vector<bool> on_way(n, false);
  for (ValueId v = wrt; v <= loss; ++v) on_way[static_cast<size_t>(v)] = reads_wrt[static_cast<size_t>(v)] && read_by_loss[static_cast<size_t>(v)];
  return on_way;
}

// A part that is zeros with one region written (a slice's part: one
// layer's rows of a stacked weight read in a loop): the region's bounds.
const std::vector<int64_t>* written_region(const ir::Graph& g, ValueId part) {
  const ir::Node& n = g.node(part);
  if (n.op != ir::Op::kUpdateSlice) return nullptr;
  const ir::Node& base = g.node(n.args[0]);
  if (base.op != ir::Op::kBroadcastTo) return nullptr;
  const ir::Node& fill = g.node(base.args[0]);
  return fill.op == ir::Op::kConstant && fill.attrs.value == 0 ? &n.attrs.ints : nullptr;
}

// Slice bounds [start, end) per axis; an end of -1 is a whole run-time axis.
bool disjoint(const std::vector<int64_t>& a, const std::vector<int64_t>& b) {
  for (size_t i = 0; i + 1 < a.size(); i += 2)
    if (a[i + 1] >= 0 && b[i + 1] >= 0 && (a[i + 1] <= b[i] || b[i + 1] <= a[i])) return true;
  return false;
}

// Step 2: the sum of v's parts (kNoValue: none). A part that writes a
// region of zeros joins the first buffer of such parts whose regions it
// does not overlap, its region written in turn (L layers' parts of a
// stacked weight cost one pass over it, not L zeros and L adds); the
// buffers and the other parts are added.
ValueId whole_adjoint(AdjointBuilder& b, LossBackward& back, ValueId v) {
  if (auto done = back.adjoint.find(v); done != back.adjoint.end()) return done->second;
  struct Buffer {
    ValueId value;
    std::vector<std::vector<int64_t>> written;
  };
  std::vector<Buffer> buffers;
  std::vector<ValueId> addends;
  if (auto parts = back.parts.find(v); parts != back.parts.end())
    for (ValueId part : parts->second) {
      const std::vector<int64_t>* found = written_region(b.g, part);
      if (!found) {
        addends.push_back(part);
        continue;
      }
      const std::vector<int64_t> region = *found;  // a copy: emit moves the graph's nodes
      const auto apart = [&](const Buffer& buffer) {
        return std::all_of(buffer.written.begin(), buffer.written.end(),
                           [&](const std::vector<int64_t>& w) { return disjoint(w, region); });
      };
      auto into = std::find_if(buffers.begin(), buffers.end(), apart);
      if (into == buffers.end()) {
        buffers.push_back({part, {region}});
        continue;
      }
      const ir::Node n = b.g.node(part);
      into->value = b.emit(ir::Op::kUpdateSlice, {into->value, n.args[1]}, n.attrs);
      into->written.push_back(region);
    }
  for (const Buffer& buffer : buffers) addends.push_back(buffer.value);
  ValueId sum = ir::kNoValue;
  for (ValueId part : addends) sum = sum == ir::kNoValue ? part : b.add(sum, part);
  back.adjoint[v] = sum;
  return sum;
}

}  // namespace

Gradient gradient(ir::Graph& g, ValueId loss, ValueId wrt, SourceLoc at, Backwards& backwards) {
  GDL_INTERNAL_ASSERT(g.node(loss).type.rank() == 0 && is_float_value(g, loss), "grad of a loss that is not a float scalar");
  GDL_INTERNAL_ASSERT(is_float_value(g, wrt), "grad with respect to a value that is not a float");
  AdjointBuilder b(g);
  b.loc = at;
  const TensorType wrt_type = g.node(wrt).type;
  const auto zeros = [&] { return Gradient{b.zeros(wrt_type), ir::kNoValue, {}}; };
  if (wrt > loss) return zeros();  // defined after the loss: the loss cannot read it
  const std::vector<bool> on_way = values_on_the_way(g, loss, wrt);
  if (!on_way[static_cast<size_t>(wrt)]) return zeros();

  LossBackward& back = backwards[loss];
  if (back.parts.empty() && back.adjoint.empty()) back.parts[loss] = {b.constant(1, g.node(loss).type.dtype)};
  for (ValueId v = loss; v > wrt; --v) {
    if (!on_way[static_cast<size_t>(v)] || back.expanded.count(v)) continue;
    const ValueId adjoint = whole_adjoint(b, back, v);
    if (adjoint == ir::kNoValue) continue;  // its consumers pass it none (a zero derivative)
    const ir::Node forward = g.node(v);  // a copy: the rule appends to g.nodes
    const ops::OpDef& def = ops::op_def(forward.op);
    if (!def.vjp) return Gradient{ir::kNoValue, v, "which has no derivative rule"};
    std::vector<ValueId> parts(forward.args.size(), ir::kNoValue);
    b.loc = forward.loc.valid() ? forward.loc : at;
    def.vjp(b, v, adjoint, parts);
    if (!b.refused.empty()) return Gradient{ir::kNoValue, v, b.refused};
    for (size_t k = 0; k < parts.size(); ++k) {
      if (parts[k] == ir::kNoValue) continue;
      const ir::Node& arg = g.node(forward.args[k]);
      GDL_INTERNAL_ASSERT(g.node(parts[k]).type == arg.type,
                          std::string("the derivative rule of ") + ir::op_name(forward.op) + " gave operand " +
                              std::to_string(k) + " a part of another type");
      back.parts[forward.args[k]].push_back(parts[k]);
    }
    back.expanded.insert(v);
  }
  b.loc = at;
  const ValueId adjoint = whole_adjoint(b, back, wrt);
  return adjoint == ir::kNoValue ? zeros() : Gradient{adjoint, ir::kNoValue, {}};
}

}  // namespace gdl::autodiff
