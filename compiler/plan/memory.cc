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
//    reads, transitively), kept from below in linear space (Ancestors): a
//    prefix of the schedule, all of whose steps are ancestors, plus bits
//    for the 1024 steps before. That is exact for the first 1025 steps, for
//    chains, and wherever branches merge within 1024 steps; otherwise it
//    misses some ancestors (two chains interleaved step by step for longer
//    than that), which only forgoes reuse: steps x steps bits made planning
//    quadratic in time and memory.
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
//    The blocking owners are found without testing every placed one
//    (assign_offsets): those whose span [first step after the writer's
//    ancestor prefix, last reader] meets the new one's, or, when every
//    placed owner blocks (the branches of a wide program), the holes of
//    their union, kept by size. Each owner costs about the number of
//    placed owners whose spans meet its own, or log n when all block it:
//    n log n for chains, layers and wide programs; an owner that many
//    placed owners block and many others do not (a wide part feeding a
//    long chain) still costs that many.
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
#include <map>
#include <numeric>
#include <set>

namespace gdl::plan {
namespace {

using ir::Op;
using ir::ValueId;

constexpr size_t kNoStep = std::numeric_limits<size_t>::max();

uint64_t align_up(uint64_t n) { return (n + kAlignment - 1) / kAlignment * kAlignment; }

// The dataflow ancestors of each step, from below: every step up to
// prefix[s], and those of the kWindow steps before s whose bits are set.
// Built in step order from each step's direct ancestors (the writers of the
// owners it reads): the prefix is the longest run from step 0 that the
// direct ancestors' prefixes and the window cover, the window is the direct
// ancestors' windows shifted, plus the direct ancestors. Exact for the
// first kWindow + 1 steps and whenever the ancestors older than kWindow
// steps form a prefix (a chain, a program whose branches merge within
// kWindow steps); otherwise it misses ancestors, never invents one, so the
// planner only forgoes reuse. Linear: kWindow bits per step.
class Ancestors {
 public:
  static constexpr size_t kWindow = 1024;

  explicit Ancestors(size_t steps) : prefix_(steps, -1), window_(steps * kWords, 0) {}

  // Step s reads what step w (< s) wrote. Add every direct ancestor of s
  // before close(s), after close(w).
  void add_direct(size_t w, size_t s) {
    // Every step before w is w's ancestor: so is w, with them, s's.
    const int64_t through_w = prefix_[w] + 1 == static_cast<int64_t>(w) ? prefix_[w] + 1 : prefix_[w];
    prefix_[s] = std::max(prefix_[s], through_w);
    const size_t d = s - w;  // step w is bit d - 1 of s's window
    if (d > kWindow) return;
    uint64_t* to = word(s);
    to[(d - 1) / 64] |= uint64_t{1} << ((d - 1) % 64);
    // Bit i of w's window (step w - 1 - i) is bit i + d of s's.
    const uint64_t* from = word(w);
    const size_t words = d / 64, bits = d % 64;
    for (size_t i = kWords; i-- > words;) {
      uint64_t v = from[i - words] << bits;
      if (bits != 0 && i > words) v |= from[i - words - 1] >> (64 - bits);
      to[i] |= v;
    }
  }

  // Extends s's prefix over the steps right after it that the window holds.
  void close(size_t s) {
    int64_t f = prefix_[s];
    while (static_cast<size_t>(f + 1) < s && s - static_cast<size_t>(f + 1) <= kWindow &&
           bit(s, s - 1 - static_cast<size_t>(f + 1)))
      ++f;
    prefix_[s] = f;
  }

  // Whether step a is known to be an ancestor of step s.
  bool contains(size_t s, size_t a) const {
    if (a >= s) return false;
    if (static_cast<int64_t>(a) <= prefix_[s]) return true;
    return s - a <= kWindow && bit(s, s - 1 - a);
  }

  // The last step of s's prefix, -1 when step 0 is no known ancestor.
  int64_t prefix(size_t s) const { return prefix_[s]; }

  // Calls f(a) for each known ancestor a of s after its prefix.
  template <typename F>
  void for_each_after_prefix(size_t s, F&& f) const {
    const size_t first = static_cast<size_t>(std::max<int64_t>(prefix_[s] + 1, static_cast<int64_t>(s) - static_cast<int64_t>(kWindow)));
    for (size_t a = first; a < s; ++a)
      if (bit(s, s - 1 - a)) f(a);
  }

 private:
  static constexpr size_t kWords = kWindow / 64;
  uint64_t* word(size_t s) { return &window_[s * kWords]; }
  const uint64_t* word(size_t s) const { return &window_[s * kWords]; }
  bool bit(size_t s, size_t i) const { return (word(s)[i / 64] >> (i % 64)) & 1; }

  std::vector<int64_t> prefix_;
  std::vector<uint64_t> window_;
};

// An owner with its live interval in steps.
struct Interval {
  ValueId owner;
  size_t start, end;  // inclusive step indices: the writer, the last reader
  uint64_t size;      // aligned
  std::vector<size_t> accessors;  // the writer and every step that reads the owner or a view of it
  uint64_t offset = 0;
  size_t lo = 0;  // the first step after start's ancestor prefix: [lo, end] is its span (below)
};

// Whether `later` may take the space of `earlier`: every step that touches
// `earlier` must be a dataflow ancestor of the step that writes `later`, so
// the reuse adds no edge that the data did not already impose.
bool may_follow(const Interval& earlier, const Interval& later, const Ancestors& ancestors) {
  if (earlier.end >= later.start) return false;
  if (static_cast<int64_t>(earlier.end) <= ancestors.prefix(later.start)) return true;
  for (size_t a : earlier.accessors)
    if (!ancestors.contains(later.start, a)) return false;
  return true;
}

// The placed intervals by their spans [lo, end], for the ones whose span
// meets a given one: those that contain its lo (a segment tree that keeps
// each span at the O(log steps) nodes covering it) and those whose lo lies
// in (lo, end] (a segment tree that keeps each at the nodes above its lo).
class SpanIndex {
 public:
  explicit SpanIndex(size_t steps) {
    while (size_ < std::max<size_t>(steps, 1)) size_ *= 2;
    covering_.resize(2 * size_);
    starting_.resize(2 * size_);
  }

  void insert(const Interval* iv) {
    for (size_t n = iv->lo + size_; n >= 1; n /= 2) starting_[n].push_back(iv);
    for (size_t l = iv->lo + size_, r = iv->end + size_ + 1; l < r; l /= 2, r /= 2) {
      if (l & 1) covering_[l++].push_back(iv);
      if (r & 1) covering_[--r].push_back(iv);
    }
  }

  // Appends every inserted interval whose span meets [lo, end], once.
  void meeting(size_t lo, size_t end, std::vector<const Interval*>& out) const {
    for (size_t n = lo + size_; n >= 1; n /= 2) out.insert(out.end(), covering_[n].begin(), covering_[n].end());
    for (size_t l = lo + 1 + size_, r = end + size_ + 1; l < r; l /= 2, r /= 2) {
      if (l & 1) out.insert(out.end(), starting_[l].begin(), starting_[l].end()), ++l;
      if (r & 1) --r, out.insert(out.end(), starting_[r].begin(), starting_[r].end());
    }
  }

 private:
  size_t size_ = 1;
  std::vector<std::vector<const Interval*>> covering_, starting_;
};

// Counts of marked positions in [0, n), by prefix sums (a Fenwick tree).
class Counts {
 public:
  explicit Counts(size_t n) : tree_(n + 1, 0) {}
  void mark(size_t i) {
    for (++i; i < tree_.size(); i += i & (~i + 1)) ++tree_[i];
  }
  // Marks in [begin, end).
  size_t in(size_t begin, size_t end) const {
    end = std::min(end, tree_.size() - 1);
    return begin >= end ? 0 : below(end) - below(begin);
  }

 private:
  size_t below(size_t i) const {
    size_t n = 0;
    for (; i > 0; i -= i & (~i + 1)) n += tree_[i];
    return n;
  }
  std::vector<size_t> tree_;
};

// The union of the placed intervals' byte ranges and the holes it leaves
// above base, by size: where best fit puts an interval that every placed
// one blocks.
class Occupied {
 public:
  explicit Occupied(uint64_t base) : base_(base) {}

  void add(uint64_t begin, uint64_t end) {
    auto first = ranges_.upper_bound(begin);
    if (first != ranges_.begin() && std::prev(first)->second >= begin) --first;
    auto last = first;
    while (last != ranges_.end() && last->first <= end) {
      begin = std::min(begin, last->first), end = std::max(end, last->second);
      forget_hole_before(last++);
    }
    if (last != ranges_.end()) forget_hole_before(last);
    ranges_.erase(first, last);
    auto it = ranges_.emplace(begin, end).first;
    note_hole_before(it);
    if (std::next(it) != ranges_.end()) note_hole_before(std::next(it));
  }

  // The smallest hole that fits size (the lowest of equal ones), else the top.
  uint64_t best_fit(uint64_t size) const {
    auto hole = holes_.lower_bound({size, 0});
    if (hole != holes_.end()) return hole->second;
    return ranges_.empty() ? base_ : ranges_.rbegin()->second;
  }

 private:
  using Ranges = std::map<uint64_t, uint64_t>;  // begin -> end, disjoint and not touching
  std::pair<uint64_t, uint64_t> hole_before(Ranges::const_iterator it) const {
    const uint64_t from = it == ranges_.begin() ? base_ : std::prev(it)->second;
    return {it->first - from, from};
  }
  void forget_hole_before(Ranges::const_iterator it) { holes_.erase(hole_before(it)); }
  void note_hole_before(Ranges::const_iterator it) {
    if (auto hole = hole_before(it); hole.first > 0) holes_.insert(hole);
  }

  uint64_t base_;
  Ranges ranges_;
  std::set<std::pair<uint64_t, uint64_t>> holes_;  // (size, begin)
};

// Best fit among the placed intervals that block the new one. An interval
// may share space with a placed one only when one may follow the other; it
// may follow whenever the earlier one's end lies in the later one's start's
// ancestor prefix. So with span [prefix(start) + 1, end], two intervals
// whose spans do not meet never block each other, and two whose spans meet
// block each other unless the windows say otherwise, which can only be
// when the earlier one ends in the window of the later one's start. Two
// ways to the blocking ones, each in time about their number:
// - every placed interval blocks (none ends before the span, none's span
//   starts after it, and the windows allow no sharing): the gaps between
//   them are the holes of the placed union (Occupied);
// - otherwise the placed intervals whose spans meet the new one's
//   (SpanIndex), tested one by one and sorted by offset.
// The first serves the parallel branches of a wide program (each blocks all
// the others), the second chains and layers (few intervals meet).
void assign_offsets(std::vector<Interval>& intervals, uint64_t base, const Ancestors& ancestors, size_t steps) {
  std::vector<size_t> order(intervals.size());
  std::iota(order.begin(), order.end(), 0);
  std::sort(order.begin(), order.end(), [&](size_t a, size_t b) {
    const Interval &x = intervals[a], &y = intervals[b];
    if (x.size != y.size) return x.size > y.size;
    if (x.start != y.start) return x.start < y.start;
    return x.owner < y.owner;
  });
  for (Interval& iv : intervals) iv.lo = static_cast<size_t>(ancestors.prefix(iv.start) + 1);
  SpanIndex placed(steps);
  Occupied occupied(base);
  Counts ends(steps), los(steps), starts(steps);
  std::vector<std::vector<const Interval*>> ending(steps), starting(steps);
  std::vector<const Interval*> candidates, blocking;
  auto by_offset = [](const Interval* a, const Interval* b) { return a->offset < b->offset; };
  auto blocks = [&](const Interval* q, const Interval& iv) {
    return !may_follow(*q, iv, ancestors) && !may_follow(iv, *q, ancestors);
  };
  // Whether every placed interval blocks iv.
  auto all_block = [&](const Interval& iv) {
    if (ends.in(0, iv.lo) > 0 || los.in(iv.end + 1, steps) > 0) return false;
    bool all = true;
    ancestors.for_each_after_prefix(iv.start, [&](size_t a) {
      for (const Interval* q : ending[a]) all = all && blocks(q, iv);
    });
    const size_t after = iv.end + 1, until = iv.end + 1 + Ancestors::kWindow;
    if (all && starts.in(after, until) > 0)
      for (size_t s = after; s < std::min(until, steps) && all; ++s)
        for (const Interval* q : starting[s]) all = all && blocks(q, iv);
    return all;
  };
  for (size_t index : order) {
    Interval& iv = intervals[index];
    if (all_block(iv)) {
      iv.offset = occupied.best_fit(iv.size);
    } else {
      candidates.clear();
      placed.meeting(iv.lo, iv.end, candidates);
      blocking.clear();
      for (const Interval* q : candidates)
        if (blocks(q, iv)) blocking.push_back(q);
      std::sort(blocking.begin(), blocking.end(), by_offset);
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
    }
    placed.insert(&iv);
    occupied.add(iv.offset, iv.offset + iv.size);
    ends.mark(iv.end), los.mark(iv.lo), starts.mark(iv.start);
    ending[iv.end].push_back(&iv), starting[iv.start].push_back(&iv);
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
  Ancestors ancestors(p.steps.size());
  for (size_t s = 0; s < p.steps.size(); ++s) {
    for (ValueId r : p.steps[s].reads) {
      auto o = static_cast<size_t>(owner[static_cast<size_t>(r)]);
      readers[o].push_back(s);
      if (size_t w = step_of[o]; w < s) ancestors.add_direct(w, s);
    }
    ancestors.close(s);
  }
  std::vector<Interval> intervals;
  for (size_t v = 0; v < count; ++v) {
    if (pinned[v] || step_of[v] == kNoStep || p.buffers[v].region != Region::kArena) continue;
    Interval iv{static_cast<ValueId>(v), step_of[v], step_of[v], size[v], {step_of[v]}};
    for (size_t r : readers[v]) iv.end = std::max(iv.end, r), iv.accessors.push_back(r);
    intervals.push_back(std::move(iv));
  }

  // 4. Offsets.
  assign_offsets(intervals, fixed_end, ancestors, p.steps.size());
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
