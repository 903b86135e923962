// plan_memory (memory.h):
// 1. Storage owners: a value that no step computes and that is no leaf is a
//    view (schedule.h): its owner is its argument's owner; so is an
//    in-place write's (ir::writes_in_place), which a step writes into its
//    base's buffer. Every other
//    value owns itself; a computed value that no step writes lives in
//    registers and has no buffer. Params go to Region::kParams, one slot
//    each in declaration order. Constants and run-time scalars have no
//    buffer (Region::kNone): kernels take them by value.
// 2. Fixed slots: states (kept from run to run), inputs (bound by copy
//    before a run) and every owner that holds an output (read after the
//    run) get arena slots of their own, never reused: states first (their
//    offsets depend on no run-time dim), then inputs, then outputs, each in
//    declaration order. An input that nothing reads still gets its slot.
//    A program with run-time dims first reserves the valid-dims block
//    (kValidDimsOffset, kValidDimsBytes), which no buffer may overlap.
// 3. Liveness of the other owners, in step indices: from the step that
//    writes the owner to the last step that reads it or any of its views.
//    Also the dataflow ancestors of every step (steps whose results it
//    reads, transitively).
// 4. Offsets for those owners (after the fixed slots), greedy by size with
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
//    is a multiple of its element size only, and which may move with the
//    layout extents of run-time dims (Buffer::terms).
// 5. Memory summary: arena_bytes = highest end rounded up to kAlignment;
//    naive_bytes = sum of the aligned sizes of the arena owners (views
//    need no storage even without reuse); live_lower_bound = most aligned
//    bytes live during one step (fixed slots count as always live).
#include "plan/memory.h"

#include <algorithm>
#include <limits>
#include <numeric>

namespace gdl::plan {
namespace {

using ir::Op;
using ir::ValueId;

constexpr size_t kNoStep = std::numeric_limits<size_t>::max();

uint64_t align_up(uint64_t n) { return (n + kAlignment - 1) / kAlignment * kAlignment; }

// An owner with its live interval in steps.
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
  // Placed intervals by offset, so that the blocking ones come in offset
  // order without a sort per interval.
  std::vector<const Interval*> placed, blocking;
  auto by_offset = [](const Interval* a, const Interval* b) { return a->offset < b->offset; };
  for (size_t index : order) {
    Interval& iv = intervals[index];
    blocking.clear();
    for (const Interval* q : placed)
      if (!may_follow(*q, iv, ancestors) && !may_follow(iv, *q, ancestors)) blocking.push_back(q);
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
    placed.insert(std::upper_bound(placed.begin(), placed.end(), &iv, by_offset), &iv);
  }
}

}  // namespace

void plan_memory(Plan& p) {
  const ir::Graph& g = p.graph;
  const size_t count = g.nodes.size();

  // 1. Owners, registers, regions.
  std::vector<size_t> step_of(count, kNoStep);
  std::vector<bool> computed(count, false);
  for (size_t s = 0; s < p.steps.size(); ++s) {
    step_of[static_cast<size_t>(p.steps[s].result)] = s;
    for (ValueId v : p.steps[s].values) computed[static_cast<size_t>(v)] = true;
  }
  std::vector<ValueId> owner(count);
  for (size_t v = 0; v < count; ++v) {
    const bool view = !ir::is_leaf(g.nodes[v].op) && !computed[v];
    const bool shares = view || (ir::writes_in_place(g.nodes[v].op) && step_of[v] != kNoStep);
    owner[v] = shares ? owner[static_cast<size_t>(g.nodes[v].args[0])] : static_cast<ValueId>(v);
  }
  auto in_registers = [&](size_t v) { return computed[v] && step_of[v] == kNoStep; };

  std::vector<bool> pinned(count, false);
  std::vector<uint64_t> size(count, 0);  // aligned size of each owner
  p.buffers.assign(count, Buffer{});
  p.params_bytes = 0;
  for (size_t v = 0; v < count; ++v) {
    if (owner[v] != static_cast<ValueId>(v) || ir::has_no_storage(g.nodes[v].op) || in_registers(v)) continue;
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

  // 2. Fixed slots: the valid-dims block (programs with run-time dims), inputs, then the owners of outputs.
  const uint64_t reserved = g.dims.empty() ? 0 : kValidDimsOffset + kValidDimsBytes;
  uint64_t fixed_end = reserved;
  auto pin = [&](size_t v) {
    if (pinned[v] || p.buffers[v].region != Region::kArena) return;
    pinned[v] = true;
    p.buffers[v].offset = fixed_end;
    fixed_end += size[v];
  };
  for (size_t v = 0; v < count; ++v)
    if (g.nodes[v].op == Op::kState) pin(v);
  for (size_t v = 0; v < count; ++v)
    if (g.nodes[v].op == Op::kInput) pin(v);
  for (const ir::Output& o : g.outputs) pin(static_cast<size_t>(owner[static_cast<size_t>(o.value)]));

  // 3. Liveness of the reusable owners, and the dataflow ancestors of each step.
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

  // 4. Offsets.
  assign_offsets(intervals, fixed_end, ancestors);
  for (const Interval& iv : intervals) p.buffers[static_cast<size_t>(iv.owner)].offset = iv.offset;
  for (size_t v = 0; v < count; ++v) {  // views and in-place writes, after their arguments
    if (owner[v] == static_cast<ValueId>(v)) continue;
    const ir::Node& n = g.nodes[v];
    const Buffer& arg = p.buffers[static_cast<size_t>(n.args[0])];
    if (n.op == Op::kReshape || ir::writes_in_place(n.op)) p.buffers[v] = arg;
    else {
      const SliceOffset slice = contiguous_slice_offset(g, n).value();
      p.buffers[v] = Buffer{arg.region, arg.offset + slice.offset, value_bytes(g, n).value(),
                            add_offset_terms(arg.terms, slice.terms)};
    }
  }

  // 5. Memory summary.
  uint64_t top = reserved;
  p.naive_bytes = reserved;
  for (size_t v = 0; v < count; ++v) {
    if (owner[v] != static_cast<ValueId>(v) || p.buffers[v].region != Region::kArena) continue;
    top = std::max(top, p.buffers[v].offset + size[v]);
    p.naive_bytes += size[v];
  }
  p.arena_bytes = align_up(top);
  // The bytes live at each step, from where intervals start and end (a
  // sweep, not every interval at every step).
  std::vector<uint64_t> starting(p.steps.size() + 1, 0), ending(p.steps.size() + 1, 0);
  for (const Interval& iv : intervals) starting[iv.start] += iv.size, ending[iv.end + 1] += iv.size;
  p.live_lower_bound = fixed_end;
  uint64_t live = fixed_end;
  for (size_t s = 0; s < p.steps.size(); ++s) {
    live = live + starting[s] - ending[s];
    p.live_lower_bound = std::max(p.live_lower_bound, live);
  }
}

}  // namespace gdl::plan
