// The planner: schedule, liveness, fixed arena offsets and step dependencies.
//
// make_plan:
// 0. An output that is a leaf (input, param, constant, run-time scalar)
//    gets an identity kReshape node appended to the graph, and the output
//    names that node instead: every output then owns a buffer that a step
//    writes, read after the run, which a later bind cannot change.
// 1. Schedule: the graph's topological order (ValueId order). Every non-leaf
//    node becomes one Step, except a view, which runs nothing: a kReshape
//    shares its argument's buffer (same region, offset, bytes); a kSlice
//    whose elements are one contiguous row-major run at an offset that no
//    run-time dim changes (contiguous_slice_offset: `W[l]`, `bias[l]`) is
//    the part of its argument's buffer that holds them. A view still gets a
//    step when its argument has no storage (a constant or scalar) or when
//    it is an output whose storage would otherwise be an input or a param
//    (an output owns its buffer).
// 1b. Fusion (fuse.cc) groups those steps into fewer; every later stage works
//    on the fused steps. A value that a fused step computes but does not
//    write lives in registers: it has no buffer (Region::kNone).
// 2. Storage owners: a view's owner is its argument's owner; every other
//    value owns itself. Params go to Region::kParams, one slot each in
//    declaration order. Constants and run-time scalars have no buffer
//    (Region::kNone): kernels take them by value.
// 3. Fixed slots: inputs (bound by copy before a run) and every owner that
//    holds an output (read after the run) get arena slots of their own,
//    never reused: inputs first in declaration order, then outputs in
//    declaration order. An input that nothing reads still gets its slot.
//    A program with run-time dims first reserves the valid-dims block
//    (kValidDimsOffset, kValidDimsBytes), which no buffer may overlap.
// 4. Liveness of the other owners, in step indices: from the step that
//    writes the owner to the last step that reads it or any of its views.
//    Also the dataflow ancestors of every step (steps whose results it
//    reads, transitively).
// 5. Offsets for those owners (after the fixed slots), greedy by size with
//    best fit: sort by aligned size, largest first (ties: earlier start,
//    then smaller id); place each at the smallest gap that fits among the
//    owners already placed that it may not share with, or on top of them
//    when no gap fits. Largest first because a large buffer placed late can
//    only go on top of the fragments the small ones left, while small
//    buffers placed late fill the holes that large ones leave.
//    Owner B may take owner A's space only when A is dead before B is
//    written in the dataflow order, not just in the schedule: every step
//    that touches A (its writer and readers) is an ancestor of B's writer.
//    Then reuse never adds a WAR/WAW edge that the data did not already
//    imply, and parallel branches stay parallel, at the cost of no reuse
//    between them (the arena can exceed live_lower_bound).
//    Every size is rounded up to kAlignment, so every owner's offset is
//    aligned; a slice view lies at its owner's offset plus its own, which
//    is a multiple of its element size only.
// 6. Memory summary: arena_bytes = highest end rounded up to kAlignment;
//    naive_bytes = sum of the aligned sizes of the arena owners (views
//    need no storage even without reuse); live_lower_bound = most aligned
//    bytes live during one step (fixed slots count as always live).
// 7. Deps: step j must wait for an earlier step i when i writes bytes that
//    j reads (RAW), reads bytes that j writes (WAR), or writes bytes that j
//    writes (WAW), over overlapping [offset, offset + bytes) in one region.
//    Only the transitive reduction is kept: going over the conflicting
//    steps from the latest down, a step already reachable through the deps
//    chosen so far is implied and dropped. Independent branches stay
//    parallel in the CUDA graph.
// 8. Scratch (the working memory of split kernels, kernel_choice.h), in an
//    area after the arena: first every step's tickets, each its own range
//    (they must be zero when a launch starts); then the partial tiles,
//    placed first fit, sharing bytes only with steps that the deps order
//    before or after (never two launches at once). The deps are final, so
//    sharing adds none.
// 9. Chains (chain.h): runs of matmul steps that one persistent kernel may
//    run for small row counts, each with its own exchange area (counters
//    and mailboxes) last in the scratch area.
//
// check_plan recomputes everything it relies on from the graph and the
// buffers alone (never from make_plan's intermediate data), so a planner
// bug cannot hide itself: (1) every buffer in the region its role needs,
// aligned (a view to its element size, everything else to kAlignment),
// large enough, inside the region; (2) every non-leaf value written by at
// most one step (the step's result; other steps may recompute it in
// registers), and otherwise computed in registers by some step (then it has
// no buffer), or a view: a reshape sharing its argument's buffer or a
// contiguous slice at its place inside it; every read written before it is
// read; (3) liveness per storage
// owner in times (0 = binding, s + 1 = step s, last = reading outputs;
// inputs, outputs and params span all of them): no two owners live at the
// same time share a byte; (4) every RAW/WAR/WAW conflict between two steps
// is ordered by the transitive closure of the deps; (5) each step has the
// scratch its kernel needs, aligned, inside the scratch area; tickets share
// no byte with any other scratch; partial tiles share bytes only between
// steps the deps order; (6) chains are ascending runs of at least two steps,
// each exchange area its own bytes of scratch.
//
// run_planned executes the plan in two host byte arrays laid out as
// planned (poisoned with 0xFF, NaN in every float dtype): bind by copy,
// then per step decode the reads, eval_node, encode the result; outputs
// are decoded from their buffers at the end.
#include "plan.h"

#include <algorithm>
#include <cstdio>
#include <cstdlib>
#include <deque>
#include <limits>
#include <map>
#include <numeric>
#include <optional>

#include "chain.h"
#include "fuse.h"
#include "kernel_choice.h"

namespace gdl::plan {
namespace {

using ir::Op;
using ir::ValueId;

constexpr size_t kNoStep = std::numeric_limits<size_t>::max();

uint64_t align_up(uint64_t n) { return (n + kAlignment - 1) / kAlignment * kAlignment; }

bool has_no_storage(Op op) { return op == Op::kConstant || op == Op::kScalar; }
bool is_leaf(Op op) { return ir::op_info(op).cls == ir::OpClass::kLeaf; }

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

// Where a slice's elements lie inside its argument's buffer, in bytes, when
// they are one contiguous row-major run at the same offset for every binding
// of the run-time dims: leading axes with ranges of one element, then one
// axis with any range, then whole axes; and every axis with a non-zero start
// has only constant extents after it. nullopt otherwise (also for an empty
// slice, and for bounds a hostile artifact could hold).
std::optional<uint64_t> contiguous_slice_offset(const ir::Graph& g, const ir::Node& n) {
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
  if (partial == xs.size()) return 0;
  for (size_t axis = 0; axis < partial; ++axis) {
    int64_t length = stop(axis) != -1 ? stop(axis) - start(axis)
                     : xs[axis].is_runtime() ? -1 : xs[axis].extent - start(axis);
    if (length != 1) return std::nullopt;
  }
  constexpr uint64_t kLimit = uint64_t{1} << 62;
  uint64_t offset = 0, stride = 1;  // in elements; stride of the axis being visited
  bool constant_after = true;       // every extent after that axis is constant
  for (size_t axis = xs.size(); axis-- > 0;) {
    if (axis <= partial && start(axis) != 0) {
      if (!constant_after) return std::nullopt;
      auto first = static_cast<uint64_t>(start(axis));
      if (stride != 0 && first > (kLimit - offset) / stride) return std::nullopt;
      offset += first * stride;
    }
    if (xs[axis].is_runtime()) {
      constant_after = false;
      continue;
    }
    auto extent = static_cast<uint64_t>(xs[axis].extent);
    if (extent != 0 && stride > kLimit / extent) return std::nullopt;
    stride *= extent;
  }
  uint64_t size = dtype_size(n.type.dtype);
  if (offset > kLimit / size) return std::nullopt;
  return offset * size;
}

// A byte range one step touches.
struct Access {
  Region region;
  uint64_t begin, end;
};

Access access_of(const Buffer& b) { return {b.region, b.offset, b.offset + b.bytes}; }

bool overlaps(const Access& a, const Access& b) {
  return a.region == b.region && a.region != Region::kNone && a.begin < b.end && b.begin < a.end;
}

enum class Conflict { kNone, kReadAfterWrite, kWriteAfterRead, kWriteAfterWrite };

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
  Access earlier_write = access_of(p.buffers[static_cast<size_t>(earlier.result)]);
  Access later_write = access_of(p.buffers[static_cast<size_t>(later.result)]);
  for (ValueId r : later.reads)
    if (overlaps(earlier_write, access_of(p.buffers[static_cast<size_t>(r)]))) return Conflict::kReadAfterWrite;
  for (ValueId r : earlier.reads)
    if (overlaps(access_of(p.buffers[static_cast<size_t>(r)]), later_write)) return Conflict::kWriteAfterRead;
  if (overlaps(earlier_write, later_write)) return Conflict::kWriteAfterWrite;
  return Conflict::kNone;
}

// A set of step indices as a bitset, for reachability over deps.
class StepSet {
 public:
  explicit StepSet(size_t n) : words_((n + 63) / 64, 0) {}
  void insert(size_t i) { words_[i / 64] |= uint64_t{1} << (i % 64); }
  bool contains(size_t i) const { return (words_[i / 64] >> (i % 64)) & 1; }
  void merge(const StepSet& o) {
    for (size_t w = 0; w < words_.size(); ++w) words_[w] |= o.words_[w];
  }

 private:
  std::vector<uint64_t> words_;
};

// reach[j] = every step that step j waits for, directly or through deps.
// Deps must already be known to point backwards.
std::vector<StepSet> reachability(const std::vector<Step>& steps) {
  std::vector<StepSet> reach(steps.size(), StepSet(steps.size()));
  for (size_t j = 0; j < steps.size(); ++j)
    for (int d : steps[j].deps) {
      reach[j].merge(reach[static_cast<size_t>(d)]);
      reach[j].insert(static_cast<size_t>(d));
    }
  return reach;
}

// Greedy-by-size, best-fit offsets for owners with live intervals in steps.
struct Interval {
  ValueId owner;
  size_t start, end;  // inclusive step indices: the writer, the last reader
  uint64_t size;      // aligned
  std::vector<size_t> accessors;  // the writer and every step that reads the owner or a view of it
  uint64_t offset = 0;
};

// Whether `later` may take the space of `earlier`: every step that touches
// `earlier` must be a dataflow ancestor of the step that writes `later`, so
// the reuse adds no edge that the data did not already impose.
bool may_follow(const Interval& earlier, const Interval& later, const std::vector<StepSet>& ancestors) {
  if (earlier.end >= later.start) return false;
  for (size_t a : earlier.accessors)
    if (!ancestors[later.start].contains(a)) return false;
  return true;
}

void assign_offsets(std::vector<Interval>& intervals, uint64_t base, const std::vector<StepSet>& ancestors) {
  std::vector<size_t> order(intervals.size());
  std::iota(order.begin(), order.end(), 0);
  std::sort(order.begin(), order.end(), [&](size_t a, size_t b) {
    const Interval &x = intervals[a], &y = intervals[b];
    if (x.size != y.size) return x.size > y.size;
    if (x.start != y.start) return x.start < y.start;
    return x.owner < y.owner;
  });
  std::vector<const Interval*> placed, blocking;
  for (size_t index : order) {
    Interval& iv = intervals[index];
    blocking.clear();
    for (const Interval* q : placed)
      if (!may_follow(*q, iv, ancestors) && !may_follow(iv, *q, ancestors)) blocking.push_back(q);
    std::sort(blocking.begin(), blocking.end(),
              [](const Interval* a, const Interval* b) { return a->offset < b->offset; });
    uint64_t cursor = base, best = 0, best_gap = std::numeric_limits<uint64_t>::max();
    bool found = false;
    for (const Interval* q : blocking) {
      if (q->offset > cursor) {
        uint64_t gap = q->offset - cursor;
        if (gap >= iv.size && gap < best_gap) best = cursor, best_gap = gap, found = true;
      }
      cursor = std::max(cursor, q->offset + q->size);
    }
    iv.offset = found ? best : cursor;
    placed.push_back(&iv);
  }
}

std::string human_bytes(uint64_t n) {
  if (n < 1024) return std::to_string(n) + " B";
  const char* units[] = {"KiB", "MiB", "GiB", "TiB"};
  double v = static_cast<double>(n) / 1024.0;
  int u = 0;
  while (v >= 1024.0 && u < 3) v /= 1024.0, ++u;
  char buf[32];
  std::snprintf(buf, sizeof buf, "%.1f %s", v, units[u]);
  return buf;
}

// The shortest of %g and %.17g that reads back as the same double.
std::string number_text(double v) {
  char buf[32];
  std::snprintf(buf, sizeof buf, "%g", v);
  if (std::strtod(buf, nullptr) != v) std::snprintf(buf, sizeof buf, "%.17g", v);
  return buf;
}

std::string value_ref(ValueId v) { return "%" + std::to_string(v); }

std::string step_ops(const Plan& p, const Step& s) {
  std::string out;
  for (size_t i = 0; i < s.values.size(); ++i)
    out += (i ? "+" : "") + std::string(ir::op_name(p.graph.node(s.values[i]).op));
  return out;
}

// The ops of a step for listings: all of them up to kListedOps, else the
// first few, the last and how many values there are.
constexpr size_t kListedOps = 16;
std::string step_summary(const Plan& p, const Step& s) {
  if (s.values.size() <= kListedOps) return step_ops(p, s);
  std::string out;
  for (size_t i = 0; i < 6; ++i) out += std::string(ir::op_name(p.graph.node(s.values[i]).op)) + "+";
  return out + "...+" + ir::op_name(p.graph.node(s.values.back()).op) + " (" + std::to_string(s.values.size()) +
         " values)";
}

std::string region_text(const Buffer& b) {
  switch (b.region) {
    case Region::kArena: return "arena @" + std::to_string(b.offset) + " (" + human_bytes(b.bytes) + ")";
    case Region::kParams: return "params @" + std::to_string(b.offset) + " (" + human_bytes(b.bytes) + ")";
    case Region::kNone: break;
  }
  return "by value";
}

std::string dot_escape(const std::string& s) {
  std::string out;
  for (char c : s) {
    if (c == '"' || c == '\\') out += '\\';
    out += c;
  }
  return out;
}

}  // namespace

uint64_t buffer_alignment(const Buffer& b) {
  uint64_t alignment = kAlignment;
  while (alignment > 1 && b.offset % alignment != 0) alignment /= 2;
  return alignment;
}

// ------------------------------------------------------------------ make_plan

Plan make_plan(ir::Graph graph, const PlanOptions& options) {
  Plan p;
  p.graph = std::move(graph);
  for (ir::Output& o : p.graph.outputs) {
    const ir::Node& leaf = p.graph.node(o.value);
    if (!is_leaf(leaf.op)) continue;
    ir::Node copy;
    copy.op = Op::kReshape;
    copy.args = {o.value};
    copy.type = leaf.type;
    copy.name = o.name;
    copy.loc = o.loc;
    o.value = p.graph.add(std::move(copy));
  }
  const ir::Graph& g = p.graph;
  size_t count = g.nodes.size();
  std::vector<bool> is_output(count, false);
  for (const ir::Output& o : g.outputs) is_output.at(static_cast<size_t>(o.value)) = true;

  // 1-2. Steps and storage owners.
  std::vector<ValueId> owner(count);
  std::iota(owner.begin(), owner.end(), 0);
  auto stored = [&](ValueId v) { return !has_no_storage(g.node(owner[static_cast<size_t>(v)]).op); };
  std::vector<size_t> step_of(count, kNoStep);
  for (size_t v = 0; v < count; ++v) {
    const ir::Node& n = g.nodes[v];
    if (is_leaf(n.op)) continue;
    bool view = (n.op == Op::kReshape && n.args.size() == 1) || contiguous_slice_offset(g, n).has_value();
    if (view && stored(n.args[0])) {
      ValueId root = owner[static_cast<size_t>(n.args[0])];
      Op root_op = g.node(root).op;
      bool output_over_bound_leaf = is_output[v] && (root_op == Op::kInput || root_op == Op::kParam);
      if (!output_over_bound_leaf) {
        owner[v] = root;
        continue;
      }
    }
    Step s;
    s.values = {static_cast<ValueId>(v)};
    s.result = static_cast<ValueId>(v);
    for (ValueId a : n.args)
      if (stored(a) && std::find(s.reads.begin(), s.reads.end(), a) == s.reads.end()) s.reads.push_back(a);
    p.steps.push_back(std::move(s));
  }

  // 2b. Fusion (fuse.cc). A computed value that no fused step writes lives
  //     in registers and gets no buffer.
  p.steps = fuse_steps(g, std::move(p.steps), options);
  for (size_t s = 0; s < p.steps.size(); ++s) step_of[static_cast<size_t>(p.steps[s].result)] = s;
  auto in_registers = [&](size_t v) {
    return !is_leaf(g.nodes[v].op) && owner[v] == static_cast<ValueId>(v) && step_of[v] == kNoStep;
  };

  std::vector<bool> pinned(count, false);
  std::vector<uint64_t> size(count, 0);  // aligned size of each owner
  p.buffers.assign(count, Buffer{});
  for (size_t v = 0; v < count; ++v) {
    if (owner[v] != static_cast<ValueId>(v) || has_no_storage(g.nodes[v].op) || in_registers(v)) continue;
    p.buffers[v].bytes = value_bytes(g, g.nodes[v]).value();
    size[v] = align_up(p.buffers[v].bytes);
    if (g.nodes[v].op == Op::kParam) {
      p.buffers[v].region = Region::kParams;
      p.buffers[v].offset = p.params_bytes;
      p.params_bytes += size[v];
    } else {
      p.buffers[v].region = Region::kArena;
    }
  }

  // 3. Fixed slots: the valid-dims block (programs with run-time dims), inputs, then the owners of outputs.
  const uint64_t reserved = g.dims.empty() ? 0 : kValidDimsOffset + kValidDimsBytes;
  uint64_t fixed_end = reserved;
  auto pin = [&](size_t v) {
    if (pinned[v] || p.buffers[v].region != Region::kArena) return;
    pinned[v] = true;
    p.buffers[v].offset = fixed_end;
    fixed_end += size[v];
  };
  for (size_t v = 0; v < count; ++v)
    if (g.nodes[v].op == Op::kInput) pin(v);
  for (const ir::Output& o : g.outputs) pin(static_cast<size_t>(owner[static_cast<size_t>(o.value)]));

  // 4. Liveness of the reusable owners, and the dataflow ancestors of each step.
  std::vector<std::vector<size_t>> readers(count);
  std::vector<StepSet> ancestors(p.steps.size(), StepSet(p.steps.size()));
  for (size_t s = 0; s < p.steps.size(); ++s)
    for (ValueId r : p.steps[s].reads) {
      auto o = static_cast<size_t>(owner[static_cast<size_t>(r)]);
      readers[o].push_back(s);
      if (size_t w = step_of[o]; w != kNoStep) {
        ancestors[s].merge(ancestors[w]);
        ancestors[s].insert(w);
      }
    }
  std::vector<Interval> intervals;
  for (size_t v = 0; v < count; ++v) {
    if (pinned[v] || step_of[v] == kNoStep || p.buffers[v].region != Region::kArena) continue;
    Interval iv{static_cast<ValueId>(v), step_of[v], step_of[v], size[v], {step_of[v]}};
    for (size_t r : readers[v]) iv.end = std::max(iv.end, r), iv.accessors.push_back(r);
    intervals.push_back(std::move(iv));
  }

  // 5. Offsets.
  assign_offsets(intervals, fixed_end, ancestors);
  for (const Interval& iv : intervals) p.buffers[static_cast<size_t>(iv.owner)].offset = iv.offset;
  for (size_t v = 0; v < count; ++v) {  // views, after their arguments
    if (owner[v] == static_cast<ValueId>(v)) continue;
    const ir::Node& n = g.nodes[v];
    const Buffer& arg = p.buffers[static_cast<size_t>(n.args[0])];
    if (n.op == Op::kReshape) p.buffers[v] = arg;
    else p.buffers[v] = Buffer{arg.region, arg.offset + contiguous_slice_offset(g, n).value(), value_bytes(g, n).value()};
  }

  // 6. Memory summary.
  uint64_t top = reserved;
  p.naive_bytes = reserved;
  for (size_t v = 0; v < count; ++v) {
    if (owner[v] != static_cast<ValueId>(v) || p.buffers[v].region != Region::kArena) continue;
    top = std::max(top, p.buffers[v].offset + size[v]);
    p.naive_bytes += size[v];
  }
  p.arena_bytes = align_up(top);
  p.live_lower_bound = fixed_end;
  for (size_t s = 0; s < p.steps.size(); ++s) {
    uint64_t live = fixed_end;
    for (const Interval& iv : intervals)
      if (iv.start <= s && s <= iv.end) live += iv.size;
    p.live_lower_bound = std::max(p.live_lower_bound, live);
  }

  // 7. Deps, transitively reduced.
  std::vector<StepSet> reach;
  reach.reserve(p.steps.size());
  for (size_t j = 0; j < p.steps.size(); ++j) {
    reach.emplace_back(p.steps.size());
    for (size_t i = j; i-- > 0;) {
      if (reach[j].contains(i) || conflict_between(p, p.steps[i], p.steps[j]) == Conflict::kNone) continue;
      p.steps[j].deps.push_back(static_cast<int>(i));
      reach[j].merge(reach[i]);
      reach[j].insert(i);
    }
    std::sort(p.steps[j].deps.begin(), p.steps[j].deps.end());
  }

  // 8. Scratch after the arena: every step's tickets, then partial tiles,
  //    first fit among those of earlier steps that may run at the same time.
  uint64_t tickets_end = p.arena_bytes;
  for (Step& st : p.steps) {
    st.tickets_bytes = step_scratch(g, st.values).ticket_bytes();
    st.tickets_offset = st.tickets_bytes > 0 ? tickets_end : 0;
    tickets_end += st.tickets_bytes;
  }
  uint64_t scratch_end = tickets_end;
  std::vector<std::pair<uint64_t, uint64_t>> taken;  // [begin, end) of concurrent steps' partials
  for (size_t j = 0; j < p.steps.size(); ++j) {
    Step& st = p.steps[j];
    st.scratch_bytes = step_scratch(g, st.values).partial_bytes();
    if (st.scratch_bytes == 0) continue;
    taken.clear();
    for (size_t i = 0; i < j; ++i)
      if (p.steps[i].scratch_bytes > 0 && !reach[j].contains(i))
        taken.push_back({p.steps[i].scratch_offset, p.steps[i].scratch_offset + p.steps[i].scratch_bytes});
    std::sort(taken.begin(), taken.end());
    uint64_t at = tickets_end;
    for (const auto& [begin, end] : taken) {
      if (begin >= at + st.scratch_bytes) break;
      at = std::max(at, end);
    }
    st.scratch_offset = at;
    scratch_end = std::max(scratch_end, at + st.scratch_bytes);
  }
  // 9. Chains (chain.h), each with its exchange area after the rest.
  if (options.chain_matmuls) p.chains = find_matmul_chains(p);
  for (Chain& c : p.chains) {
    c.exchange_offset = align_up(scratch_end);
    scratch_end = c.exchange_offset + align_up(chain_scratch_bytes(c));  // its exchange area and tensor maps
  }
  p.scratch_bytes = scratch_end - p.arena_bytes;
  return p;
}

// ----------------------------------------------------------------- check_plan

std::string check_plan(const Plan& p) {
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
    if (static_cast<size_t>(n.op) > static_cast<size_t>(Op::kAttention)) return "value %" + std::to_string(v) + " has an unknown op";
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
    if (n.op == Op::kInput && b.region != Region::kArena) return "input " + ref(id) + " has no arena buffer";
    if (has_no_storage(n.op) && b.region != Region::kNone)
      return ref(id) + " has a buffer, but kernels take constants and scalars by value";
    if (b.region == Region::kNone) continue;
    uint64_t alignment = is_leaf(n.op) || written[v] ? kAlignment : dtype_size(n.type.dtype);
    if (b.offset % alignment != 0)
      return ref(id) + " at offset " + std::to_string(b.offset) + " is not aligned to " + std::to_string(alignment);
    std::optional<uint64_t> need = value_bytes(g, n);
    if (!need) return ref(id) + " is too large to plan";
    if (b.bytes < *need)
      return ref(id) + " needs " + std::to_string(*need) + " bytes but its buffer holds " + std::to_string(b.bytes);
    uint64_t limit = b.region == Region::kArena ? p.arena_bytes : p.params_bytes;
    if (b.bytes > limit || b.offset > limit - b.bytes)
      return ref(id) + " at [" + std::to_string(b.offset) + ", +" + std::to_string(b.bytes) + ") lies outside its region of " +
             std::to_string(limit) + " bytes";
    if (!g.dims.empty() && b.region == Region::kArena && b.bytes > 0 && b.offset < kValidDimsOffset + kValidDimsBytes &&
        kValidDimsOffset < b.offset + b.bytes)
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
      if (is_leaf(g.node(v).op)) return name + " computes the leaf " + ref(v);
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
    if (n.op == Op::kInput || n.op == Op::kParam) ready[v] = 0;
    if (is_leaf(n.op) || written_by[v] != kNoStep) continue;
    if (computed[v]) {
      if (p.buffers[v].region != Region::kNone) return ref(id) + " has a buffer, but no step writes it";
      continue;
    }
    std::optional<uint64_t> slice_offset = contiguous_slice_offset(g, n);
    if (!(n.op == Op::kReshape && n.args.size() == 1) && !slice_offset) return ref(id) + " is computed by no step";
    auto arg = static_cast<size_t>(n.args[0]);
    const Buffer &b = p.buffers[v], &ab = p.buffers[arg];
    if (ab.region == Region::kNone) return "view " + ref(id) + " aliases " + value_ref(n.args[0]) + ", which has no buffer";
    if (n.op == Op::kReshape && (b.region != ab.region || b.offset != ab.offset || b.bytes != ab.bytes))
      return "view " + ref(id) + " does not share the buffer of " + value_ref(n.args[0]);
    if (slice_offset && (b.region != ab.region || ab.offset > std::numeric_limits<uint64_t>::max() - *slice_offset ||
                         b.offset != ab.offset + *slice_offset || b.bytes > ab.bytes || b.offset - ab.offset > ab.bytes - b.bytes))
      return "view " + ref(id) + " does not lie where its elements are in the buffer of " + value_ref(n.args[0]);
    is_view[v] = true;
    owner[v] = owner[arg];
  }
  for (size_t s = 0; s < steps; ++s) ready[static_cast<size_t>(p.steps[s].result)] = s + 1;
  for (size_t v = 0; v < count; ++v)  // views after their arguments
    if (is_view[v]) ready[v] = ready[static_cast<size_t>(g.nodes[v].args[0])];

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
        if (!inside && !read && !has_no_storage(g.node(a).op))
          return name + " uses " + ref(a) + " without reading its buffer";
      }
      done_in[static_cast<size_t>(v)] = s;
    }
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
    if (op == Op::kInput || op == Op::kParam) touch(v, 0), touch(v, end_time);
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

  // 4. Every conflict between two steps is ordered by the deps' transitive closure.
  std::vector<StepSet> reach = reachability(p.steps);
  for (size_t j = 0; j < steps; ++j)
    for (size_t i = 0; i < j; ++i) {
      Conflict c = conflict_between(p, p.steps[i], p.steps[j]);
      if (c != Conflict::kNone && !reach[j].contains(i))
        return "step " + std::to_string(j) + " (" + step_ops(p, p.steps[j]) + ") does not wait for step " +
               std::to_string(i) + " (" + step_ops(p, p.steps[i]) + ") despite a " + conflict_name(c) + " conflict";
    }

  // 5. Scratch: what each kernel needs, aligned, inside the area; tickets
  //    never shared; partial tiles shared only by steps the deps order.
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
    const SplitScratchSize need = step_scratch(g, st.values);
    if (st.tickets_bytes < need.ticket_bytes() || st.scratch_bytes < need.partial_bytes())
      return name + " has " + std::to_string(st.tickets_bytes) + " + " + std::to_string(st.scratch_bytes) +
             " bytes of scratch, its kernel needs " + std::to_string(need.ticket_bytes()) + " + " +
             std::to_string(need.partial_bytes());
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
  // 6. Chains: consecutive steps, ascending and disjoint, each exchange area its
  //    own aligned bytes of scratch (counted with the tickets: never shared).
  int chain_end = -1;
  for (const Chain& c : p.chains) {
    const std::string name = "the chain of steps " + std::to_string(c.first) + "-" + std::to_string(c.last);
    if (c.first <= chain_end || c.last <= c.first || static_cast<size_t>(c.last) >= steps)
      return name + " is not a run of at least two steps after the chain before it";
    chain_end = c.last;
    if (c.row_groups != 0 && c.row_groups != chain_row_groups(c.k, c.row_groups * kChainMaxRows))
      return name + ": " + std::to_string(c.row_groups) + " row groups at K = " + std::to_string(c.k) +
             " are not a launch its kernel can run";
    const uint64_t exchange_bytes = chain_scratch_bytes(c);  // its size follows the row groups and the steps
    if (c.exchange_offset % kAlignment != 0 || c.exchange_offset < p.arena_bytes || c.exchange_offset > area_end ||
        exchange_bytes > area_end - c.exchange_offset)
      return name + ": its exchange area lies outside the scratch area or is not aligned";
    ranges.push_back({c.exchange_offset, c.exchange_offset + exchange_bytes, static_cast<size_t>(c.first), true});
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

// ----------------------------------------------------------------- print_plan

std::string print_plan(const Plan& p) {
  const ir::Graph& g = p.graph;
  std::string out = "plan " + g.program_name + ": " + std::to_string(p.steps.size()) + " steps\n";
  std::vector<bool> written(g.nodes.size(), false);
  for (const Step& st : p.steps) written.at(static_cast<size_t>(st.result)) = true;
  for (size_t v = 0; v < g.nodes.size(); ++v) {
    const ir::Node& n = g.nodes[v];
    bool view = !is_leaf(n.op) && !written[v] && p.buffers[v].region != Region::kNone;
    if (!is_leaf(n.op) && !view) continue;
    out += "  " + value_ref(static_cast<ValueId>(v)) + " " + ir::op_name(n.op);
    if (is_leaf(n.op) && n.op != Op::kConstant) out += " \"" + n.name + "\"";
    if (n.op == Op::kConstant || n.op == Op::kScalar) out += (n.op == Op::kScalar ? " default " : " ") + number_text(n.attrs.value);
    if (view) out += " view of " + value_ref(n.args[0]);
    out += " : " + type_to_string(n.type, g.dims) + " -> " + region_text(p.buffers[v]) + "\n";
  }
  // "step 3: matmul+add+gelu [%9 %10 %11] reads %8 %5 %7 -> %11 f16[B, 1024] in arena @0 (128.0 KiB); after 2"
  for (size_t s = 0; s < p.steps.size(); ++s) {
    const Step& st = p.steps[s];
    const ir::Node& n = g.node(st.result);
    out += "  step " + std::to_string(s) + ": " + step_summary(p, st) + " [";
    for (size_t i = 0; i < st.values.size(); ++i) {
      if (st.values.size() > kListedOps && i == 6) {
        out += " ...";
        i = st.values.size() - 1;
      }
      out += (i ? " " : "") + value_ref(st.values[i]);
    }
    out += "]";
    if (!st.reads.empty()) out += " reads";
    for (ValueId r : st.reads) out += " " + value_ref(r);
    out += " -> " + value_ref(st.result) + " " + type_to_string(n.type, g.dims) + " in " +
           region_text(p.buffers[static_cast<size_t>(st.result)]);
    if (!st.deps.empty()) {
      out += "; after";
      for (size_t d = 0; d < st.deps.size(); ++d) out += (d ? ", " : " ") + std::to_string(st.deps[d]);
    }
    if (st.tickets_bytes > 0 || st.scratch_bytes > 0)
      out += "; scratch: tickets @" + std::to_string(st.tickets_offset) + ", partials @" +
             std::to_string(st.scratch_offset) + " (" + human_bytes(st.scratch_bytes) + ")";
    out += "\n";
  }
  for (const Chain& c : p.chains)
    out += "  chain: steps " + std::to_string(c.first) + "-" + std::to_string(c.last) +
           " as one persistent kernel while the rows are at most " + std::to_string(kChainMaxRows) +
           (c.row_groups > 0 ? ", and one in " + std::to_string(c.row_groups) + " row groups of " +
                                   std::to_string(kChainMaxRows) + " up to " +
                                   std::to_string(c.row_groups * kChainMaxRows)
                             : std::string()) +
           " (K = " + std::to_string(c.k) + "); exchange @" + std::to_string(c.exchange_offset) + " (" +
           human_bytes(chain_exchange_bytes(c.k, c.row_groups)) + "), tensor maps @" +
           std::to_string(chain_tensor_maps_offset(c, 0)) + "\n";
  for (const ir::Output& o : g.outputs)
    out += "  output \"" + o.name + "\" = " + value_ref(o.value) + " -> " +
           region_text(p.buffers.at(static_cast<size_t>(o.value))) + "\n";
  out += "arena " + human_bytes(p.arena_bytes) + " (naive " + human_bytes(p.naive_bytes) + ", live lower bound " +
         human_bytes(p.live_lower_bound) + "), params " + human_bytes(p.params_bytes);
  if (p.scratch_bytes > 0) out += ", scratch " + human_bytes(p.scratch_bytes);
  out += "\n";
  return out;
}

// ---------------------------------------------------------------- plan_to_dot

std::string plan_to_dot(const Plan& p) {
  const ir::Graph& g = p.graph;
  std::string out = "digraph \"" + dot_escape(g.program_name) + "\" {\n  node [fontname=\"monospace\"];\n";
  // The step that writes each value's storage, for edges into output boxes.
  std::vector<int> writer(g.nodes.size(), -1);
  for (size_t s = 0; s < p.steps.size(); ++s) writer[static_cast<size_t>(p.steps[s].result)] = static_cast<int>(s);
  auto source_of = [&](ValueId v) -> std::string {
    // Through views to the value that owns the storage.
    while (writer[static_cast<size_t>(v)] < 0 && (g.node(v).op == Op::kReshape || g.node(v).op == Op::kSlice))
      v = g.node(v).args[0];
    if (writer[static_cast<size_t>(v)] >= 0) return "s" + std::to_string(writer[static_cast<size_t>(v)]);
    Op op = g.node(v).op;
    if (op == Op::kInput || op == Op::kParam) return "v" + std::to_string(v);
    return "";
  };
  for (size_t v = 0; v < g.nodes.size(); ++v) {
    const ir::Node& n = g.nodes[v];
    if (n.op != Op::kInput && n.op != Op::kParam) continue;
    out += "  v" + std::to_string(v) + " [shape=box" + (n.op == Op::kParam ? ", style=dashed" : "") + ", label=\"" +
           ir::op_name(n.op) + " " + dot_escape(n.name) + "\\n" + dot_escape(type_to_string(n.type, g.dims)) + "\"];\n";
  }
  for (size_t s = 0; s < p.steps.size(); ++s) {
    const Step& st = p.steps[s];
    out += "  s" + std::to_string(s) + " [label=\"#" + std::to_string(s) + " " + step_summary(p, st) + "\\n" +
           dot_escape(type_to_string(g.node(st.result).type, g.dims)) + "\"];\n";
  }
  // A chain's steps in one box: one kernel runs them while the rows are at most kChainMaxRows.
  for (size_t c = 0; c < p.chains.size(); ++c) {
    out += "  subgraph cluster_chain" + std::to_string(c) + " {\n    label=\"chain " + std::to_string(c) +
           ": one kernel at <= " + std::to_string(kChainMaxRows) + " rows" +
           (p.chains[c].row_groups > 0 ? ", one at <= " + std::to_string(p.chains[c].row_groups * kChainMaxRows)
                                       : std::string()) +
           "\";\n    style=dashed;\n   ";
    for (int s = p.chains[c].first; s <= p.chains[c].last; ++s) out += " s" + std::to_string(s) + ";";
    out += "\n  }\n";
  }
  for (size_t i = 0; i < g.outputs.size(); ++i)
    out += "  o" + std::to_string(i) + " [shape=box, style=bold, label=\"output " + dot_escape(g.outputs[i].name) + "\"];\n";
  for (size_t s = 0; s < p.steps.size(); ++s) {
    for (int d : p.steps[s].deps) out += "  s" + std::to_string(d) + " -> s" + std::to_string(s) + ";\n";
    for (ValueId r : p.steps[s].reads) {
      std::string src = source_of(r);
      if (!src.empty() && src[0] == 'v') out += "  " + src + " -> s" + std::to_string(s) + " [style=dashed];\n";
    }
  }
  for (size_t i = 0; i < g.outputs.size(); ++i) {
    std::string src = source_of(g.outputs[i].value);
    if (!src.empty()) out += "  " + src + " -> o" + std::to_string(i) + ";\n";
  }
  return out + "}\n";
}

// ---------------------------------------------------------------- run_planned

Expected<std::map<std::string, HostTensor>> run_planned(const Plan& p, const Bindings& b) {
  const ir::Graph& g = p.graph;
  if (Status s = validate_bindings(g, b); !s.ok()) return s;
  if (std::string problem = check_plan(p); !problem.empty()) return Status::Internal("unsound plan: " + problem);

  constexpr unsigned char kPoison = 0xFF;  // NaN in every float dtype: a read of unwritten bytes shows
  std::vector<unsigned char> arena(p.arena_bytes, kPoison), params(p.params_bytes, kPoison);
  // The bytes of value v for the current dims; check_plan proved they fit.
  auto storage = [&](ValueId v) -> unsigned char* {
    const Buffer& buf = p.buffers[static_cast<size_t>(v)];
    return (buf.region == Region::kArena ? arena.data() : params.data()) + buf.offset;
  };
  auto decode = [&](ValueId v) {
    const ir::Node& n = g.node(v);
    HostTensor t;
    t.dtype = n.type.dtype;
    t.shape = concrete_shape(n.type.shape, b.dims);
    if (has_no_storage(n.op)) {
      double value = n.attrs.value;
      if (auto it = b.scalars.find(n.name); n.op == Op::kScalar && it != b.scalars.end()) value = it->second;
      t.data.assign(static_cast<size_t>(element_count(n.type.shape, b.dims)), round_to_dtype(value, t.dtype));
      return t;
    }
    const unsigned char* bytes = storage(v);
    t.data.resize(static_cast<size_t>(element_count(n.type.shape, b.dims)));
    for (size_t i = 0; i < t.data.size(); ++i) t.data[i] = load_element(bytes, t.dtype, i);
    return t;
  };
  auto encode = [&](ValueId v, const HostTensor& t) {
    unsigned char* bytes = storage(v);
    for (size_t i = 0; i < t.data.size(); ++i) store_element(bytes, t.dtype, i, t.data[i]);
  };

  // 1. Bind inputs and params by copy into their buffers.
  for (size_t v = 0; v < g.nodes.size(); ++v) {
    const ir::Node& n = g.nodes[v];
    if (n.op == Op::kInput || n.op == Op::kParam) encode(static_cast<ValueId>(v), b.tensors.at(n.name));
  }

  // 2. Each step: decode what it reads, evaluate its values, encode its result.
  for (size_t s = 0; s < p.steps.size(); ++s) {
    const Step& st = p.steps[s];
    std::map<ValueId, HostTensor> local;
    std::deque<HostTensor> loaded;  // stable addresses for the argument pointers
    std::vector<const HostTensor*> args;
    for (ValueId v : st.values) {
      const ir::Node& n = g.node(v);
      args.clear();
      for (ValueId a : n.args) {
        if (auto it = local.find(a); it != local.end()) {
          args.push_back(&it->second);
        } else {
          loaded.push_back(decode(a));
          args.push_back(&loaded.back());
        }
      }
      HostTensor result = eval_node(n, args, b.dims);
      if (result.size() != element_count(n.type.shape, b.dims))
        return Status::Internal("step " + std::to_string(s) + ": " + value_ref(v) + " has the wrong element count");
      local[v] = std::move(result);
    }
    encode(st.result, local.at(st.result));
  }

  // 3. Outputs, read after the run.
  std::map<std::string, HostTensor> results;
  for (const ir::Output& o : g.outputs) results[o.name] = decode(o.value);
  return results;
}

}  // namespace gdl::plan
