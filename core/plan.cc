// The plan as data: sizes, views, conflicts between steps, and the proof
// that a plan is sound (verify_plan).
//
// verify_plan recomputes everything it relies on from the graph and the
// buffers alone (never from the planner's intermediate data), so a planner
// bug or a hostile artifact cannot hide itself:
// 0. enough structure that nothing below indexes out of bounds;
// 1. every buffer in the region its role needs, aligned (a view to its
//    element size, everything else to kAlignment), large enough, inside the
//    region, clear of the valid-dims block; a view whose offset has
//    run-time terms at every binding (its terms name existing dims, the
//    offset fits at their upper bounds), every other buffer without terms;
// 2. every non-leaf value written by at most one step (the step's result;
//    other steps may recompute it in registers), and otherwise computed in
//    registers by some step (then it has no buffer), or a view: a reshape
//    sharing its argument's buffer or a contiguous slice at its place inside
//    it (the same static part and terms that contiguous_slice_offset derives
//    from the graph); every read written before it is read;
// 3. liveness per storage owner in times (0 = binding, s + 1 = step s, last
//    = reading outputs; inputs, outputs and params span all of them): no two
//    owners live at the same time share a byte;
// 4. every RAW/WAR/WAW conflict between two steps is ordered by the
//    transitive closure of the deps (a view with terms counted over every
//    place it takes, access_of);
// 5. every step's scratch aligned and inside the scratch area; tickets share
//    no byte with any other scratch; partial tiles share bytes only between
//    steps the deps order;
// 6. chains are ascending runs of at least two steps, each one's scratch its
//    own bytes of the scratch area.
#include "plan.h"

#include "kernel_table.h"
#include "plan_conflicts.h"

#include <algorithm>
#include <limits>

namespace gdl::plan {
namespace {

using ir::Op;
using ir::ValueId;

constexpr size_t kNoStep = std::numeric_limits<size_t>::max();

std::string value_ref(ValueId v) { return "%" + std::to_string(v); }

}  // namespace

std::string step_ops(const Plan& p, const Step& s) {
  std::string out;
  for (size_t i = 0; i < s.values.size(); ++i)
    out += (i ? "+" : "") + std::string(ir::op_name(p.graph.node(s.values[i]).op));
  return out;
}

// The largest size of a value in bytes: every run-time dim at its upper
// bound, at least one element. nullopt when it does not fit in 63 bits (a
// hostile artifact; make_plan never sees such a graph).
std::optional<uint64_t> value_bytes(const ir::Graph& g, const ir::Node& n) {
  uint64_t count = 1;
  constexpr uint64_t kLimit = uint64_t{1} << 62;
  for (const Dim& d : n.type.shape) {
    int64_t e = d.is_runtime() ? g.dims[static_cast<size_t>(d.symbol)].hi : d.extent;
    if (e < 0) return std::nullopt;
    auto extent = static_cast<uint64_t>(e);
    if (extent != 0 && count > kLimit / extent) return std::nullopt;
    count *= extent;
  }
  count = std::max<uint64_t>(count, 1);
  uint64_t size = dtype_size(n.type.dtype);
  if (count > kLimit / size) return std::nullopt;
  return count * size;
}

bool is_view_node(const ir::Graph& g, const ir::Node& n) {
  return (n.op == Op::kReshape && n.args.size() == 1) || contiguous_slice_offset(g, n).has_value();
}

ValueId strip_reshapes(const ir::Graph& g, ValueId v) {
  while (g.node(v).op == Op::kReshape && g.node(v).args.size() == 1) v = g.node(v).args[0];
  return v;
}

WriteTarget write_target(const ir::Graph& g, ValueId writer) {
  const ValueId base = strip_reshapes(g, g.node(writer).args.at(0));
  const ir::Node& b = g.node(base);
  if (b.op == Op::kSlice && contiguous_slice_offset(g, b)) return {strip_reshapes(g, b.args[0]), base};
  return {base, ir::kNoValue};
}

bool update_is_view(const ir::Graph& g, const ir::Node& n) {
  if (n.op != Op::kUpdateSlice || n.args.size() != 2) return false;
  const ValueId writer = strip_reshapes(g, n.args[1]);
  if (!ir::writes_in_place(g.node(writer).op) || g.node(writer).args.empty()) return false;
  const WriteTarget t = write_target(g, writer);
  return t.region != ir::kNoValue && t.whole == strip_reshapes(g, n.args[0]) && g.node(t.region).attrs.ints == n.attrs.ints;
}

bool reads_own_elements(const ir::Graph& g, ValueId reader, ValueId write) {
  const ir::Node& r = g.node(reader);
  if (!ir::reads_elementwise(r.op)) return false;
  const ValueId target = write_target(g, write).whole;
  for (ValueId a : r.args) {
    ValueId root = a;  // through views: does a lie in the target's storage?
    while (root != target && is_view_node(g, g.node(root))) root = g.node(root).args.at(0);
    if (root != target) continue;
    if (strip_reshapes(g, a) != target || !(g.node(a).type.shape == g.node(write).type.shape)) return false;
  }
  return true;
}

bool replaces_whole(const ir::Graph& g, const ir::Node& n) {
  return n.op == Op::kUpdateSlice && n.args.size() == 2 && !update_is_view(g, n) && g.node(n.args[1]).type == n.type;
}

std::vector<std::vector<ValueId>> consumers_of(const ir::Graph& g) {
  std::vector<std::vector<ValueId>> out(g.nodes.size());
  for (size_t v = 0; v < g.nodes.size(); ++v)
    for (ValueId a : g.nodes[v].args) {
      auto& list = out.at(static_cast<size_t>(a));
      if (list.empty() || list.back() != static_cast<ValueId>(v)) list.push_back(static_cast<ValueId>(v));
    }
  return out;
}

std::vector<ValueId> overwritten_readers(const ir::Graph& g, ValueId writer, const std::vector<std::vector<ValueId>>& consumers) {
  const WriteTarget t = write_target(g, writer);
  // The writer's way: from the target through views to the writer, and on to the update it is a view of.
  std::vector<ValueId> way = {writer};
  for (ValueId v = g.node(writer).args.at(0); v != t.whole; v = g.node(v).args.at(0)) way.push_back(v);
  for (ValueId v = writer;;) {
    const auto& next = consumers.at(static_cast<size_t>(v));
    if (next.size() != 1) break;
    const ir::Node& c = g.node(next[0]);
    if (c.op == Op::kReshape) {
      way.push_back(next[0]);
      v = next[0];
      continue;
    }
    if (update_is_view(g, c)) way.push_back(next[0]);
    break;
  }
  auto on_way = [&](ValueId v) { return std::find(way.begin(), way.end(), v) != way.end(); };
  std::vector<ValueId> readers, pending = {t.whole};
  std::vector<bool> seen(g.nodes.size(), false);
  seen[static_cast<size_t>(t.whole)] = true;
  while (!pending.empty()) {
    const ValueId v = pending.back();
    pending.pop_back();
    for (ValueId c : consumers.at(static_cast<size_t>(v))) {
      if (seen[static_cast<size_t>(c)]) continue;
      seen[static_cast<size_t>(c)] = true;
      if (on_way(c)) {
        if (g.node(c).op != Op::kUpdateSlice && c != writer) pending.push_back(c);  // views on the way: their other readers
        continue;
      }
      if (is_view_node(g, g.node(c)) || update_is_view(g, g.node(c))) pending.push_back(c);
      else readers.push_back(c);
    }
  }
  std::sort(readers.begin(), readers.end());
  return readers;
}

// Where a slice's elements lie inside its argument's buffer, in bytes, when
// they are one contiguous row-major run for every binding of the run-time
// dims: leading axes with ranges of one element, then one axis with any
// range, then whole axes (a run-time axis is whole only as [0, end)). A
// start behind a run-time axis moves with that axis's layout extent: a term.
// nullopt otherwise (also for an empty slice, and for bounds a hostile
// artifact could hold).
std::optional<SliceOffset> contiguous_slice_offset(const ir::Graph& g, const ir::Node& n) {
  if (n.op != Op::kSlice || n.args.size() != 1) return std::nullopt;
  const Shape& xs = g.node(n.args[0]).type.shape;
  const std::vector<int64_t>& bounds = n.attrs.ints;
  if (bounds.size() != 2 * xs.size() || max_element_count(n.type.shape, g.dims) <= 0) return std::nullopt;
  auto start = [&](size_t axis) { return bounds[2 * axis]; };
  auto stop = [&](size_t axis) { return bounds[2 * axis + 1]; };
  for (size_t axis = 0; axis < xs.size(); ++axis) {
    bool fits = start(axis) >= 0 && (stop(axis) == -1 || start(axis) <= stop(axis)) &&
                (xs[axis].is_runtime() || std::max(start(axis), stop(axis)) <= xs[axis].extent);
    if (!fits) return std::nullopt;
    if (xs[axis].is_runtime() && (static_cast<size_t>(xs[axis].symbol) >= g.dims.size() ||
                                  g.dims[static_cast<size_t>(xs[axis].symbol)].hi < 1))
      return std::nullopt;
  }
  auto whole = [&](size_t axis) {
    return start(axis) == 0 && (stop(axis) == -1 || (!xs[axis].is_runtime() && stop(axis) == xs[axis].extent));
  };
  size_t partial = xs.size();  // the last axis that is not whole
  for (size_t axis = xs.size(); axis-- > 0;)
    if (!whole(axis)) {
      partial = axis;
      break;
    }
  if (partial == xs.size()) return SliceOffset{};
  for (size_t axis = 0; axis < partial; ++axis) {
    int64_t length = stop(axis) != -1 ? stop(axis) - start(axis)
                     : xs[axis].is_runtime() ? -1 : xs[axis].extent - start(axis);
    if (length != 1) return std::nullopt;
  }
  // In elements: each start times its axis's stride, the product of the
  // extents after it; the run-time ones among them make it a term. Bounded
  // at the dims' upper bounds (every term is at most its value there, as
  // every upper bound is at least 1), so that nothing below overflows.
  constexpr uint64_t kLimit = uint64_t{1} << 62;
  SliceOffset out;
  uint64_t high = 0;                     // the offset at the upper bounds
  uint64_t stride = 1, stride_high = 1;  // the stride's constant factor; the stride at the upper bounds
  std::vector<int> stride_dims;          // the stride's run-time factors
  for (size_t axis = xs.size(); axis-- > 0;) {
    if (axis <= partial && start(axis) != 0) {
      auto first = static_cast<uint64_t>(start(axis));
      if (first > (kLimit - high) / stride_high) return std::nullopt;
      high += first * stride_high;
      if (stride_dims.empty()) out.offset += first * stride;
      else out.terms = add_offset_terms(std::move(out.terms), {OffsetTerm{first * stride, stride_dims}});
    }
    const bool runtime = xs[axis].is_runtime();
    auto extent = static_cast<uint64_t>(runtime ? g.dims[static_cast<size_t>(xs[axis].symbol)].hi : xs[axis].extent);
    if (extent != 0 && stride_high > kLimit / extent) return std::nullopt;
    stride_high *= extent;
    if (runtime) {
      stride_dims.insert(std::upper_bound(stride_dims.begin(), stride_dims.end(), xs[axis].symbol), xs[axis].symbol);
    } else {
      stride *= extent;
    }
    if (stride_high == 0) break;  // an empty axis: every start before it adds nothing
  }
  uint64_t size = dtype_size(n.type.dtype);
  if (high > kLimit / size) return std::nullopt;
  out.offset *= size;
  for (OffsetTerm& t : out.terms) t.coef *= size;
  return out;
}

uint64_t offset_at(const Buffer& b, const std::vector<int64_t>& layout) {
  uint64_t offset = b.offset;
  for (const OffsetTerm& t : b.terms) {
    uint64_t term = t.coef;
    for (int d : t.dims) term *= static_cast<uint64_t>(layout.at(static_cast<size_t>(d)));
    offset += term;
  }
  return offset;
}

std::optional<OffsetRange> offset_range(const Buffer& b, const std::vector<DimInfo>& dims) {
  constexpr uint64_t kLimit = uint64_t{1} << 62;
  if (b.offset > kLimit) return std::nullopt;
  OffsetRange r{b.offset, b.offset};
  for (const OffsetTerm& t : b.terms) {
    if (t.coef > kLimit) return std::nullopt;
    uint64_t low = t.coef, high = t.coef;
    for (int d : t.dims) {
      if (d < 0 || static_cast<size_t>(d) >= dims.size()) return std::nullopt;
      const DimInfo& info = dims[static_cast<size_t>(d)];
      const auto hi = static_cast<uint64_t>(std::max<int64_t>(info.hi, 0));
      const auto lo = std::min(static_cast<uint64_t>(std::max<int64_t>(info.lo, 0)), hi);
      if (hi != 0 && high > kLimit / hi) return std::nullopt;
      high *= hi;
      low *= lo;
    }
    r.low += low;
    r.high += high;
    if (r.high > kLimit) return std::nullopt;
  }
  return r;
}

std::vector<OffsetTerm> add_offset_terms(std::vector<OffsetTerm> a, const std::vector<OffsetTerm>& b) {
  for (const OffsetTerm& t : b) {
    auto same = std::find_if(a.begin(), a.end(), [&](const OffsetTerm& x) { return x.dims == t.dims; });
    if (same != a.end()) same->coef += t.coef;
    else a.push_back(t);
  }
  std::erase_if(a, [](const OffsetTerm& t) { return t.coef == 0; });
  std::sort(a.begin(), a.end(), [](const OffsetTerm& x, const OffsetTerm& y) { return x.dims < y.dims; });
  return a;
}

Access access_of(const Buffer& b, const std::vector<DimInfo>& dims) {
  constexpr uint64_t kEnd = std::numeric_limits<uint64_t>::max();
  std::optional<OffsetRange> r = offset_range(b, dims);
  if (!r) return {b.region, 0, kEnd};  // no range (verify_plan refuses it): all of the region
  return {b.region, r->low, r->high > kEnd - b.bytes ? kEnd : r->high + b.bytes};
}

bool overlaps(const Access& a, const Access& b) {
  return a.region == b.region && a.region != Region::kNone && a.begin < b.end && b.begin < a.end;
}

std::vector<bool> inputs_clobbered_by_run(const Plan& p) {
  std::vector<bool> clobbered;
  for (ValueId in : p.graph.leaves(ir::Op::kInput)) {
    const Buffer& b = p.buffers[static_cast<size_t>(in)];
    bool written = false;
    for (const Step& s : p.steps) {
      const Buffer& r = p.buffers[static_cast<size_t>(s.result)];
      written |= b.bytes > 0 && r.bytes > 0 && overlaps(access_of(b, p.graph.dims), access_of(r, p.graph.dims));
    }
    clobbered.push_back(written);
  }
  return clobbered;
}

std::vector<int> input_pointer_slots(const Plan& p) {
  const ir::Graph& g = p.graph;
  std::vector<int> slot(g.nodes.size(), -1);
  const std::vector<ValueId> inputs = g.leaves(ir::Op::kInput);
  const std::vector<bool> clobbered = inputs_clobbered_by_run(p);
  for (size_t i = 0; i < inputs.size() && i < static_cast<size_t>(kMaxInputPointers); ++i)
    if (!clobbered[i] && p.buffers[static_cast<size_t>(inputs[i])].region == Region::kArena)
      slot[static_cast<size_t>(inputs[i])] = static_cast<int>(i);
  std::vector<bool> computed(g.nodes.size(), false);
  for (const Step& s : p.steps)
    for (ValueId v : s.values) computed[static_cast<size_t>(v)] = true;
  // A view lies in its argument's buffer (memory.cc); values come after their arguments.
  for (size_t v = 0; v < g.nodes.size(); ++v) {
    const ir::Node& n = g.nodes[v];
    if (!ir::is_leaf(n.op) && !computed[v] && !n.args.empty() && p.buffers[v].region == Region::kArena)
      slot[v] = slot[static_cast<size_t>(n.args[0])];
  }
  return slot;
}

const char* conflict_name(Conflict c) {
  switch (c) {
    case Conflict::kReadAfterWrite: return "read-after-write";
    case Conflict::kWriteAfterRead: return "write-after-read";
    case Conflict::kWriteAfterWrite: return "write-after-write";
    case Conflict::kNone: break;
  }
  return "none";
}

// Whether the later step must wait for the earlier one, and why.
Conflict conflict_between(const Plan& p, const Step& earlier, const Step& later) {
  auto access = [&](ValueId v) { return access_of(p.buffers[static_cast<size_t>(v)], p.graph.dims); };
  Access earlier_write = access(earlier.result), later_write = access(later.result);
  for (ValueId r : later.reads)
    if (overlaps(earlier_write, access(r))) return Conflict::kReadAfterWrite;
  for (ValueId r : earlier.reads)
    if (overlaps(access(r), later_write)) return Conflict::kWriteAfterRead;
  if (overlaps(earlier_write, later_write)) return Conflict::kWriteAfterWrite;
  return Conflict::kNone;
}

std::vector<StepSet> reachability(const std::vector<Step>& steps) {
  std::vector<StepSet> reach(steps.size(), StepSet(steps.size()));
  for (size_t j = 0; j < steps.size(); ++j)
    for (int d : steps[j].deps) {
      reach[j].merge(reach[static_cast<size_t>(d)]);
      reach[j].insert(static_cast<size_t>(d));
    }
  return reach;
}

uint64_t buffer_alignment(const Buffer& b) {
  auto divides = [&](uint64_t alignment) {
    if (b.offset % alignment != 0) return false;
    for (const OffsetTerm& t : b.terms)
      if (t.coef % alignment != 0) return false;
    return true;
  };
  uint64_t alignment = kAlignment;
  while (alignment > 1 && !divides(alignment)) alignment /= 2;
  return alignment;
}

std::string verify_plan(const Plan& p) {
  const ir::Graph& g = p.graph;
  size_t count = g.nodes.size();
  auto ref = [&](ValueId v) {
    return value_ref(v) + " (" + ir::op_name(g.node(v).op) + ")";
  };

  // 0. Enough structure that nothing below can index out of bounds.
  if (p.buffers.size() != count)
    return "the plan has " + std::to_string(p.buffers.size()) + " buffers for " + std::to_string(count) + " values";
  for (size_t v = 0; v < count; ++v) {
    const ir::Node& n = g.nodes[v];
    if (static_cast<size_t>(n.op) >= ir::kOpCount) return "value %" + std::to_string(v) + " has an unknown op";
    for (ValueId a : n.args)
      if (a < 0 || static_cast<size_t>(a) >= v) return "value %" + std::to_string(v) + " reads a value that does not precede it";
    for (const Dim& d : n.type.shape)
      if (d.is_runtime() && static_cast<size_t>(d.symbol) >= g.dims.size())
        return "value %" + std::to_string(v) + " uses an unknown run-time dim";
  }
  for (const ir::Output& o : g.outputs)
    if (o.value < 0 || static_cast<size_t>(o.value) >= count) return "output '" + o.name + "' names no value";

  // 1. Buffers: the right region for the role, aligned, large enough, inside
  //    the region. A non-leaf value that no step writes can only be a view
  //    (proved in 2), which needs only its element size's alignment.
  std::vector<bool> written(count, false);
  for (const Step& st : p.steps)
    if (st.result >= 0 && static_cast<size_t>(st.result) < count) written[static_cast<size_t>(st.result)] = true;
  for (size_t v = 0; v < count; ++v) {
    auto id = static_cast<ValueId>(v);
    const ir::Node& n = g.nodes[v];
    const Buffer& b = p.buffers[v];
    if (b.region != Region::kArena && b.region != Region::kParams && b.region != Region::kNone)
      return ref(id) + " has an unknown region";
    if (n.op == Op::kParam && b.region != Region::kParams) return "param " + ref(id) + " is not in the params region";
    if (n.op != Op::kParam && b.region == Region::kParams && n.op != Op::kReshape && n.op != Op::kSlice)
      return ref(id) + " is in the params region, which only params (and views of them) may use";
    if ((n.op == Op::kInput || n.op == Op::kState) && b.region != Region::kArena)
      return std::string(ir::op_name(n.op)) + " " + ref(id) + " has no arena buffer";
    if (ir::has_no_storage(n.op) && b.region != Region::kNone)
      return ref(id) + " has a buffer, but kernels take constants and scalars by value";
    if (b.region == Region::kNone) {
      if (!b.terms.empty()) return ref(id) + " has no buffer but an offset with run-time terms";
      continue;
    }
    // In-place writes share their base's buffer, which may be a view; only
    // a view's offset moves with the run-time dims.
    const bool owns = (ir::is_leaf(n.op) || written[v]) && !ir::writes_in_place(n.op);
    if (owns && !b.terms.empty()) return ref(id) + " owns its buffer, but its offset has run-time terms";
    std::optional<OffsetRange> at = offset_range(b, g.dims);
    if (!at) return ref(id) + ": its offset names a dim that does not exist or is too large at the dims' upper bounds";
    uint64_t alignment = owns ? kAlignment : dtype_size(n.type.dtype);
    if (buffer_alignment(b) < alignment)
      return ref(id) + " at offset " + std::to_string(b.offset) + (b.terms.empty() ? "" : " (with run-time terms)") +
             " is not aligned to " + std::to_string(alignment);
    std::optional<uint64_t> need = value_bytes(g, n);
    if (!need) return ref(id) + " is too large to plan";
    if (b.bytes < *need)
      return ref(id) + " needs " + std::to_string(*need) + " bytes but its buffer holds " + std::to_string(b.bytes);
    uint64_t limit = b.region == Region::kArena ? p.arena_bytes : p.params_bytes;
    if (b.bytes > limit || at->high > limit - b.bytes)
      return ref(id) + " at [" + std::to_string(at->high) + ", +" + std::to_string(b.bytes) +
             ") (its highest offset) lies outside its region of " + std::to_string(limit) + " bytes";
    if (!g.dims.empty() && b.region == Region::kArena && b.bytes > 0 && at->low < kValidDimsOffset + kValidDimsBytes &&
        kValidDimsOffset < at->high + b.bytes)
      return ref(id) + " overlaps the valid-dims block [" + std::to_string(kValidDimsOffset) + ", +" +
             std::to_string(kValidDimsBytes) + ")";
  }
  if (!g.dims.empty() && p.arena_bytes < kValidDimsOffset + kValidDimsBytes)
    return "the arena of " + std::to_string(p.arena_bytes) + " bytes does not hold the valid-dims block";

  // 2. Steps: each non-leaf value written by at most one step, computed by
  //    some step or a view; reads ready before they are read.
  size_t steps = p.steps.size();
  std::vector<size_t> written_by(count, kNoStep);
  std::vector<bool> computed(count, false);
  std::vector<size_t> in_step(count, kNoStep);  // the last step seen computing each value
  for (size_t s = 0; s < steps; ++s) {
    const Step& st = p.steps[s];
    std::string name = "step " + std::to_string(s);
    if (st.values.empty()) return name + " computes nothing";
    for (size_t i = 0; i < st.values.size(); ++i) {
      ValueId v = st.values[i];
      if (v < 0 || static_cast<size_t>(v) >= count) return name + " computes an unknown value";
      if (ir::is_leaf(g.node(v).op)) return name + " computes the leaf " + ref(v);
      if (in_step[static_cast<size_t>(v)] == s) return name + " computes " + ref(v) + " twice";
      in_step[static_cast<size_t>(v)] = s;
      computed[static_cast<size_t>(v)] = true;
    }
    if (st.result != st.values.back()) return name + ": its result is not its last value";
    if (written_by[static_cast<size_t>(st.result)] != kNoStep)
      return ref(st.result) + " is written by step " + std::to_string(written_by[static_cast<size_t>(st.result)]) +
             " and " + name;
    written_by[static_cast<size_t>(st.result)] = s;
    if (p.buffers[static_cast<size_t>(st.result)].region != Region::kArena)
      return name + " writes " + ref(st.result) + ", which has no arena buffer";
    for (ValueId r : st.reads)
      if (r < 0 || static_cast<size_t>(r) >= count) return name + " reads an unknown value";
    for (size_t d = 0; d < st.deps.size(); ++d) {
      if (st.deps[d] < 0 || static_cast<size_t>(st.deps[d]) >= s) return name + " waits for a step that is not earlier";
      if (d > 0 && st.deps[d] <= st.deps[d - 1]) return name + ": deps are not strictly ascending";
    }
  }

  // A value that no step writes lives in registers, or is a leaf or a view
  // of its argument.
  std::vector<bool> is_view(count, false);
  std::vector<ValueId> owner(count);
  constexpr size_t kNever = std::numeric_limits<size_t>::max();
  std::vector<size_t> ready(count, kNever);  // steps after which the buffer holds the value; 0 = before the run
  for (size_t v = 0; v < count; ++v) {
    auto id = static_cast<ValueId>(v);
    const ir::Node& n = g.nodes[v];
    owner[v] = id;
    if (n.op == Op::kInput || n.op == Op::kParam || n.op == Op::kState) ready[v] = 0;
    if (ir::writes_in_place(n.op) && written_by[v] != kNoStep) {  // written over its base's buffer
      if (p.buffers[v] != p.buffers[static_cast<size_t>(n.args.at(0))])
        return "the in-place write " + ref(id) + " does not share the buffer of " + value_ref(n.args[0]);
      owner[v] = owner[static_cast<size_t>(n.args[0])];
      continue;
    }
    if (ir::is_leaf(n.op) || written_by[v] != kNoStep) continue;
    if (computed[v]) {
      if (p.buffers[v].region != Region::kNone) return ref(id) + " has a buffer, but no step writes it";
      continue;
    }
    std::optional<SliceOffset> slice = contiguous_slice_offset(g, n);
    const bool update_view = update_is_view(g, n);
    if (!(n.op == Op::kReshape && n.args.size() == 1) && !slice && !update_view)
      return ref(id) + " is computed by no step";
    auto arg = static_cast<size_t>(n.args[0]);
    const Buffer &b = p.buffers[v], &ab = p.buffers[arg];
    if (ab.region == Region::kNone) return "view " + ref(id) + " aliases " + value_ref(n.args[0]) + ", which has no buffer";
    if ((n.op == Op::kReshape || update_view) && b != ab)
      return "view " + ref(id) + " does not share the buffer of " + value_ref(n.args[0]);
    // A slice lies at its argument's offset plus its own at every binding
    // (both proved in range in 1, so the sums cannot overflow), and so
    // inside it; at the upper bounds both end where their largest sizes do.
    if (slice && (b.region != ab.region || b.offset != ab.offset + slice->offset ||
                  b.terms != add_offset_terms(ab.terms, slice->terms) || b.bytes > ab.bytes ||
                  access_of(b, g.dims).end > access_of(ab, g.dims).end))
      return "view " + ref(id) + " does not lie where its elements are in the buffer of " + value_ref(n.args[0]);
    is_view[v] = true;
    owner[v] = owner[arg];
  }
  for (size_t s = 0; s < steps; ++s) ready[static_cast<size_t>(p.steps[s].result)] = s + 1;
  for (size_t v = 0; v < count; ++v)  // views after their arguments; an update view once its value is written
    if (is_view[v]) ready[v] = ready[static_cast<size_t>(g.nodes[v].args[g.nodes[v].op == Op::kUpdateSlice ? 1 : 0])];

  std::vector<size_t> read_by(count, kNoStep), done_in(count, kNoStep);  // per value: the last step that marked it
  for (size_t s = 0; s < steps; ++s) {
    const Step& st = p.steps[s];
    std::string name = "step " + std::to_string(s);
    for (ValueId r : st.reads) {
      if (p.buffers[static_cast<size_t>(r)].region == Region::kNone) return name + " reads " + ref(r) + ", which has no buffer";
      if (ready[static_cast<size_t>(r)] == kNever || ready[static_cast<size_t>(r)] > s)
        return name + " reads " + ref(r) + " before any earlier step writes it";
      read_by[static_cast<size_t>(r)] = s;
    }
    for (ValueId v : st.values) {  // each argument computed earlier in the step, read, or taken by value
      for (ValueId a : g.node(v).args) {
        bool inside = done_in[static_cast<size_t>(a)] == s, read = read_by[static_cast<size_t>(a)] == s;
        if (!inside && !read && !ir::has_no_storage(g.node(a).op))
          return name + " uses " + ref(a) + " without reading its buffer";
      }
      done_in[static_cast<size_t>(v)] = s;
    }
  }
  // Every reader of the value an in-place write overwrites runs in an
  // earlier step, or, for a write that replaces its base whole, is a value
  // of the write's own step that reads only the element it computes
  // (reads_own_elements: read before the same thread writes it).
  const std::vector<std::vector<ValueId>> consumers = consumers_of(g);
  for (size_t v = 0; v < count; ++v) {
    if (!ir::writes_in_place(g.nodes[v].op) || written_by[v] == kNoStep) continue;
    const bool whole = replaces_whole(g, g.nodes[v]);
    for (ValueId r : overwritten_readers(g, static_cast<ValueId>(v), consumers))
      if (in_step[static_cast<size_t>(r)] != kNoStep && in_step[static_cast<size_t>(r)] >= written_by[v] &&
          !(whole && in_step[static_cast<size_t>(r)] == written_by[v] && reads_own_elements(g, r, static_cast<ValueId>(v))))
        return ref(r) + " reads the value that step " + std::to_string(written_by[v]) + " overwrites in place (" +
               ref(static_cast<ValueId>(v)) + "), but runs in step " + std::to_string(in_step[static_cast<size_t>(r)]);
  }
  for (const ir::Output& o : g.outputs) {
    if (p.buffers[static_cast<size_t>(o.value)].region != Region::kArena)
      return "output '" + o.name + "' " + ref(o.value) + " has no arena buffer";
    if (ready[static_cast<size_t>(o.value)] == kNever) return "output '" + o.name + "' " + ref(o.value) + " is never written";
  }

  // 3. Liveness per storage owner, in times: 0 = binding before the run,
  //    s + 1 = step s, steps + 1 = reading outputs after the run. Inputs,
  //    outputs and params occupy their buffers for the whole session.
  size_t end_time = steps + 1;
  std::vector<size_t> first(count, kNever), last(count, 0);
  auto touch = [&](size_t v, size_t t) {
    auto o = static_cast<size_t>(owner[v]);
    first[o] = std::min(first[o], t);
    last[o] = std::max(last[o], t);
  };
  for (size_t v = 0; v < count; ++v) {
    Op op = g.nodes[v].op;
    if (op == Op::kInput || op == Op::kParam || op == Op::kState) touch(v, 0), touch(v, end_time);
  }
  for (const ir::Output& o : g.outputs) touch(static_cast<size_t>(o.value), 0), touch(static_cast<size_t>(o.value), end_time);
  for (size_t s = 0; s < steps; ++s) {
    touch(static_cast<size_t>(p.steps[s].result), s + 1);
    for (ValueId r : p.steps[s].reads) touch(static_cast<size_t>(r), s + 1);
  }
  std::vector<size_t> owners;
  for (size_t v = 0; v < count; ++v)
    if (owner[v] == static_cast<ValueId>(v) && p.buffers[v].region != Region::kNone && first[v] != kNever) owners.push_back(v);
  std::sort(owners.begin(), owners.end(), [&](size_t a, size_t b) {
    const Buffer &x = p.buffers[a], &y = p.buffers[b];
    if (x.region != y.region) return x.region < y.region;
    return x.offset < y.offset;
  });
  for (size_t i = 0; i < owners.size(); ++i) {
    const Buffer& a = p.buffers[owners[i]];
    for (size_t j = i + 1; j < owners.size(); ++j) {
      const Buffer& b = p.buffers[owners[j]];
      if (b.region != a.region || b.offset >= a.offset + a.bytes) break;
      if (b.bytes == 0 || a.bytes == 0) continue;
      size_t x = owners[i], y = owners[j];
      if (first[x] <= last[y] && first[y] <= last[x])
        return ref(static_cast<ValueId>(x)) + " and " + ref(static_cast<ValueId>(y)) +
               " are live at the same time (times " + std::to_string(first[x]) + ".." + std::to_string(last[x]) +
               " and " + std::to_string(first[y]) + ".." + std::to_string(last[y]) + ") but their buffers overlap";
    }
  }

  // 4. Every conflict between two steps is ordered by the deps' transitive
  //    closure. Checking each step's candidates suffices: at the first step
  //    with an unordered conflict, some candidate is unordered too.
  std::vector<StepSet> reach = reachability(p.steps);
  std::string unordered;
  visit_conflict_candidates(p, [&](size_t j, const std::vector<size_t>& candidates) {
    for (auto i = candidates.rbegin(); i != candidates.rend(); ++i) {  // the earliest first
      if (reach[j].contains(*i)) continue;
      const Conflict c = conflict_between(p, p.steps[*i], p.steps[j]);
      unordered = "step " + std::to_string(j) + " (" + step_ops(p, p.steps[j]) + ") does not wait for step " +
                  std::to_string(*i) + " (" + step_ops(p, p.steps[*i]) + ") despite a " + conflict_name(c) + " conflict";
      return false;
    }
    return true;
  });
  if (!unordered.empty()) return unordered;

  // 5. Scratch: aligned, inside the area; tickets never shared; partial
  //    tiles shared only by steps the deps order.
  struct Range {
    uint64_t begin, end;
    size_t step;
    bool tickets;
  };
  std::vector<Range> ranges;
  const uint64_t area_end = p.arena_bytes + p.scratch_bytes;
  if (area_end < p.arena_bytes) return "the scratch area does not fit in 64 bits";
  for (size_t s = 0; s < steps; ++s) {
    const Step& st = p.steps[s];
    std::string name = "step " + std::to_string(s);
    for (bool tickets : {true, false}) {
      uint64_t offset = tickets ? st.tickets_offset : st.scratch_offset;
      uint64_t bytes = tickets ? st.tickets_bytes : st.scratch_bytes;
      if (bytes == 0) continue;
      if (offset % kAlignment != 0) return name + ": its scratch is not aligned";
      if (offset < p.arena_bytes || offset > area_end || bytes > area_end - offset)
        return name + ": its scratch [" + std::to_string(offset) + ", +" + std::to_string(bytes) +
               ") lies outside the scratch area";
      ranges.push_back({offset, offset + bytes, s, tickets});
    }
  }
  // 6. Chains: consecutive steps, ascending and disjoint, each one's scratch
  //    its own aligned bytes (counted with the tickets: never shared).
  int chain_end = -1;
  for (const Chain& c : p.chains) {
    const std::string name = "the chain of steps " + std::to_string(c.first) + "-" + std::to_string(c.last);
    if (c.first <= chain_end || c.last <= c.first || static_cast<size_t>(c.last) >= steps)
      return name + " is not a run of at least two steps after the chain before it";
    chain_end = c.last;
    if (c.scratch_offset % kAlignment != 0 || c.scratch_offset < p.arena_bytes || c.scratch_offset > area_end ||
        c.scratch_bytes > area_end - c.scratch_offset)
      return name + ": its scratch lies outside the scratch area or is not aligned";
    ranges.push_back({c.scratch_offset, c.scratch_offset + c.scratch_bytes, static_cast<size_t>(c.first), true});
  }
  std::sort(ranges.begin(), ranges.end(), [](const Range& x, const Range& y) { return x.begin < y.begin; });
  for (size_t i = 0; i < ranges.size(); ++i)
    for (size_t j = i + 1; j < ranges.size() && ranges[j].begin < ranges[i].end; ++j) {
      const Range &x = ranges[i], &y = ranges[j];
      size_t first = std::min(x.step, y.step), second = std::max(x.step, y.step);
      if (x.tickets || y.tickets || first == second)
        return "the tickets of step " + std::to_string(x.tickets ? x.step : y.step) + " share bytes with other scratch";
      if (!reach[second].contains(first))
        return "steps " + std::to_string(first) + " and " + std::to_string(second) +
               " may run at the same time but share scratch at " + std::to_string(y.begin);
    }
  return "";
}

}  // namespace gdl::plan
