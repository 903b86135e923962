// Fusion: fewer kernel nodes. A node costs ~0.85 us on the device even when
// its kernel does nothing, and every value passed between two kernels costs
// a write and a read of memory.
//
// fuse_steps (fuse.h), right after the schedule, before buffers:
// 1. Facts per value: whether a step computes it (values no step computes
//    are leaves and views), its consumers (every node that takes it as an
//    argument, views included), whether it is an output, and whether it is
//    cheap: an elementwise value whose arguments are all constants, run-time
//    scalars or cheap values (a rank-0 value computed from no buffer, such as
//    `cast(alpha)`), which any kernel recomputes for free.
// 2. Groups, visiting the computed values from the last to the first, so that
//    every consumer of a value has its group before the value is visited:
//    a. a cheap value joins every group that computes one of its consumers,
//       and is recomputed there in registers; it gets a group of its own too
//       when something needs it in a buffer (an output, a view, a structured
//       or data-movement op) or nothing computes it otherwise (dead);
//    b. an elementwise value joins group G when every consumer of it is an
//       elementwise member of G (or G's whole update, taking it as its
//       value), it is not an output, nothing views it, G takes members,
//       and G's result has at most kMaxRecompute times its element count
//       (a value broadcast into the result is computed once per result
//       element: a little arithmetic is cheaper than a node, a long chain
//       over a vector broadcast into a matrix may not be); a
//       value made from its index alone (OpDef::joins_elementwise: rand,
//       randn, arange) joins the same way when it has G's result's shape and
//       G has no matmul, whose epilogue takes none: element i of the kernel
//       is then element i of the value;
//    c. a matmul joins group G the same way as its anchor (G's values then
//       form the matmul's epilogue, run once per matmul element at its flat
//       index) when G has no anchor yet, the matmul's shape is G's result's
//       shape, and both are floats (the epilogue returns a float);
//    d. anything else (an output, a value with consumers in two groups or
//       outside any group, a structured or data-movement op) starts a group
//       whose result it is. Only a group whose result is elementwise (or
//       a whole update, below) takes members; the one prologue is case e.
//    e. a layernorm or rmsnorm joins group G as its prologue when its only
//       consumer is G's matmul, as a (gdl_matmul.cuh then normalizes each
//       row as it stages it), the rows the matmul's blocks re-read for
//       the statistics stay within kMaxPrologueReread bytes
//       (kernel_choice.h: prologue_reread_bytes), and the rows kernel, if
//       the matmul may take it, holds at most kMaxPrologueRowTile rows in
//       registers, and the matmul reads a and b untransposed. The norm is visited
//       after its matmul, which has its group by then.
//    f. a value that reads storage an in-place write overwrites later
//       (plan::overwritten_readers) joins no group whose result comes after
//       that write: it must read the old value. The one exception is an
//       elementwise value joining the group whose result is that write,
//       when the write replaces its base whole (plan::replaces_whole, a
//       state's new value) and the value reads that storage whole at its
//       own elements (plan::reads_own_elements): the kernel reads element
//       i, then writes it.
//    A whole update takes its value as a member the way an elementwise
//    result does, so a state's new value (an optimizer's step) is computed
//    straight into the state's memory instead of copied there.
//    A value joins only a group that holds every consumer of it, and a
//    group's result has its largest id, so no dataflow path leaves a group
//    and comes back into it: the groups form a DAG and ordering them by
//    result is a schedule. A group has one result, so independent branches
//    never share a group and stay parallel in the graph; a non-cheap value
//    with consumers in two groups is stored once, never recomputed.
// 3. Steps, one per group in result order: its values (a prologue first,
//    then the anchor, then the others by ascending id, which is topological
//    since nothing in a group but its prologue feeds its anchor; a
//    recomputed cheap value right before its first user, so every block of
//    an unrolled loop lists its ops alike),
//    its result, and its reads (arguments of its values from outside it
//    that have storage, in the order first needed).
#include "plan/fuse.h"

#include <algorithm>
#include <limits>
#include <unordered_set>
#include <utility>

#include "internal_error.h"
#include "ops/op_def.h"
#include "ops/matmul.h"
#include "plan/kernel_choice.h"

namespace gdl::plan {
namespace {

using ir::Op;
using ir::ValueId;

// How many times a fused kernel may compute one element of a member that is
// broadcast into its result.
constexpr int64_t kMaxRecompute = 64;

constexpr int kNoGroup = -1;

// A norm node costs 2.5-4.6 us per W2 layer on the H200 (docs/performance.md,
// W2 with and without its layernorm); 32 MiB re-read from L2 by all blocks
// together takes about as long, and only at the largest binding.
constexpr uint64_t kMaxPrologueReread = uint64_t{32} << 20;
// The rows kernel with a register tile of more than 8 rows (f32) is the
// largest kernel; with the prologue its warps stalled on instruction fetch
// and W2 f32 got slower at every batch (docs/performance.md). Measured
// again with three row tiles and one-pass statistics: W2 H=1024 f32 B=1
// 65 -> 71 us, B=8 73 -> 86 us with the prologue, so it stays off.
constexpr int kMaxPrologueRowTile = 8;

bool is_matmul(Op op) { return ops::fusion_class(op) == ops::FusionClass::kMatmul; }
bool from_index(const ir::Node& n) { return ops::op_def(n.op).joins_elementwise; }

struct Group {
  ValueId result = ir::kNoValue;
  ValueId anchor = ir::kNoValue;  // a matmul whose epilogue the other values form
  ValueId prologue = ir::kNoValue;  // a norm that the anchor normalizes its a with
  bool takes_members = false;     // the result is elementwise, or a whole update
  bool has_indexed = false;       // a member is made from its index (case b): no matmul joins
  std::vector<ValueId> values;
};

class Fuser {
 public:
  Fuser(const ir::Graph& g, const PlanOptions& options) : g_(g), options_(options), count_(g.nodes.size()) {}

  std::vector<Step> run(std::vector<Step> steps) {
    // 1. Facts.
    computed_.assign(count_, false);
    for (const Step& s : steps) {
      GDL_INTERNAL_ASSERT(s.values.size() == 1 && s.result == s.values.front(),
                          "fusion expects one step per value");
      computed_[static_cast<size_t>(s.result)] = true;
    }
    consumers_.assign(count_, {});
    for (size_t v = 0; v < count_; ++v)
      for (ValueId a : g_.nodes[v].args) {
        auto& list = consumers_[static_cast<size_t>(a)];
        if (list.empty() || list.back() != static_cast<ValueId>(v)) list.push_back(static_cast<ValueId>(v));
      }
    is_output_.assign(count_, false);
    for (const ir::Output& o : g_.outputs) is_output_[static_cast<size_t>(o.value)] = true;
    cheap_.assign(count_, false);
    for (size_t v = 0; v < count_; ++v) {
      const ir::Node& n = g_.nodes[v];
      if (!computed_[v] || !ops::is_elementwise(n.op)) continue;
      cheap_[v] = std::all_of(n.args.begin(), n.args.end(), [&](ValueId a) {
        return ir::has_no_storage(g_.node(a).op) || cheap_[static_cast<size_t>(a)];
      });
    }

    deadline_.assign(count_, std::numeric_limits<ValueId>::max());
    const std::vector<std::vector<ValueId>> consumers = consumers_of(g_);
    for (size_t w = 0; w < count_; ++w)
      if (ir::writes_in_place(g_.nodes[w].op) && !update_is_view(g_, g_.nodes[w]))
        for (ValueId r : overwritten_readers(g_, static_cast<ValueId>(w), consumers))
          deadline_[static_cast<size_t>(r)] = std::min(deadline_[static_cast<size_t>(r)], static_cast<ValueId>(w));

    // 2. Groups, from the last value to the first.
    groups_of_.assign(count_, {});
    for (size_t v = count_; v-- > 0;) {
      if (!computed_[v]) continue;
      auto id = static_cast<ValueId>(v);
      if (cheap_[v] && options_.fuse_elementwise) {
        place_cheap(id);
        continue;
      }
      if (int into = prologue_group(id); into != kNoGroup) {
        groups_[static_cast<size_t>(into)].prologue = id;
        groups_[static_cast<size_t>(into)].values.push_back(id);
        groups_of_[v] = {into};
        continue;
      }
      int target = joinable_group(id);
      if (target == kNoGroup) {
        start_group(id);
      } else {
        Group& group = groups_[static_cast<size_t>(target)];
        if (is_matmul(g_.nodes[v].op)) group.anchor = id;
        if (from_index(g_.nodes[v])) group.has_indexed = true;
        group.values.push_back(id);
        groups_of_[v] = {target};
      }
    }

    // 3. Steps in result order.
    std::sort(groups_.begin(), groups_.end(), [](const Group& a, const Group& b) { return a.result < b.result; });
    std::vector<Step> fused;
    fused.reserve(groups_.size());
    for (Group& group : groups_) fused.push_back(step_of(group));
    return fused;
  }

 private:
  // Whether u computes v's elements at their own positions in its kernel:
  // an elementwise u, or a whole update whose value (not base) is v.
  bool takes_as_member(ValueId u, ValueId v) const {
    const ir::Node& n = g_.node(u);
    return ops::is_elementwise(n.op) || (replaces_whole(g_, n) && n.args[1] == v && n.args[0] != v);
  }

  int start_group(ValueId v) {
    Group group;
    group.result = v;
    group.takes_members = ops::is_elementwise(g_.node(v).op) || replaces_whole(g_, g_.node(v));
    if (is_matmul(g_.node(v).op)) group.anchor = v;
    group.values = {v};
    groups_.push_back(std::move(group));
    int index = static_cast<int>(groups_.size() - 1);
    groups_of_[static_cast<size_t>(v)].push_back(index);
    return index;
  }

  // The group every consumer of v is an elementwise member of, or kNoGroup.
  int consumers_group(ValueId v) const {
    const auto& users = consumers_[static_cast<size_t>(v)];
    if (users.empty() || is_output_[static_cast<size_t>(v)]) return kNoGroup;
    int group = kNoGroup;
    for (ValueId u : users) {
      const auto& in = groups_of_[static_cast<size_t>(u)];
      if (!computed_[static_cast<size_t>(u)] || !takes_as_member(u, v) || in.size() != 1) return kNoGroup;
      if (group != kNoGroup && in.front() != group) return kNoGroup;
      group = in.front();
    }
    return groups_[static_cast<size_t>(group)].takes_members ? group : kNoGroup;
  }

  int joinable_group(ValueId v) const {
    const ir::Node& n = g_.node(v);
    bool elementwise = ops::is_elementwise(n.op);
    const bool indexed = from_index(n);
    if (elementwise || indexed ? !options_.fuse_elementwise : !(is_matmul(n.op) && options_.fuse_epilogues))
      return kNoGroup;
    int target = consumers_group(v);
    if (target == kNoGroup) return kNoGroup;
    const Group& group = groups_[static_cast<size_t>(target)];
    const ir::Node& result = g_.node(group.result);
    // Case f; an elementwise value may read the storage that its group's
    // whole update overwrites, at its own elements only (not through a
    // slice or a broadcast): it reads element i before the kernel writes it.
    const ValueId deadline = deadline_[static_cast<size_t>(v)];
    if (group.result > deadline ||
        (group.result == deadline && !(replaces_whole(g_, result) && reads_own_elements(g_, v, group.result))))
      return kNoGroup;
    if (indexed) return group.anchor == ir::kNoValue && n.type.shape == result.type.shape ? target : kNoGroup;
    if (elementwise) {
      int64_t mine = std::max<int64_t>(1, max_element_count(n.type.shape, g_.dims));
      int64_t theirs = max_element_count(result.type.shape, g_.dims);
      return theirs / mine <= kMaxRecompute ? target : kNoGroup;
    }
    bool fits = group.anchor == ir::kNoValue && !group.has_indexed && n.type.shape == result.type.shape &&
                is_float(n.type.dtype) && is_float(result.type.dtype);
    return fits ? target : kNoGroup;
  }

  // Case 2e: the group whose matmul takes norm v as its a, or kNoGroup.
  int prologue_group(ValueId v) const {
    const ir::Node& n = g_.node(v);
    if (!options_.fuse_prologues || ops::fusion_class(n.op) != ops::FusionClass::kNorm) return kNoGroup;
    const auto& users = consumers_[static_cast<size_t>(v)];
    if (users.size() != 1 || is_output_[static_cast<size_t>(v)] || !computed_[static_cast<size_t>(users[0])])
      return kNoGroup;
    const ir::Node& matmul = g_.node(users[0]);
    const ir::Node& x = g_.node(n.args.at(0));
    // The prologue and its fold read a and b as stored, untransposed (gdl_matmul_prologue.cuh).
    const auto reads_rows = [&] {
      const ops::MatmulLayout l = ops::matmul_layout(matmul);
      return !l.transpose_a && !l.transpose_b;
    };
    bool fits = is_matmul(matmul.op) && matmul.args.at(0) == v && matmul.args.at(1) != v &&
                matmul.type.dtype == n.type.dtype && x.type.dtype == n.type.dtype && !ir::has_no_storage(x.op) &&
                reads_rows();
    const auto& in = groups_of_[static_cast<size_t>(users[0])];
    if (!fits || in.size() != 1) return kNoGroup;
    const Group& group = groups_[static_cast<size_t>(in.front())];
    if (group.anchor != users[0] || group.prologue != ir::kNoValue) return kNoGroup;
    if (group.result >= deadline_[static_cast<size_t>(v)]) return kNoGroup;  // case f
    const MatmulChoice choice = choose_matmul(g_, matmul);
    if (choice.use_rows && choice.row_tile > kMaxPrologueRowTile) return kNoGroup;
    const uint64_t reread = prologue_reread_bytes(g_, matmul);
    return reread > 0 && reread <= kMaxPrologueReread ? in.front() : kNoGroup;
  }

  // Case 2a: recompute v wherever an elementwise consumer is computed; a
  // group of its own where a buffer of it is needed.
  void place_cheap(ValueId v) {
    std::vector<int> into;
    bool needs_buffer = is_output_[static_cast<size_t>(v)];
    for (ValueId u : consumers_[static_cast<size_t>(v)]) {
      if (!computed_[static_cast<size_t>(u)] || !takes_as_member(u, v)) {
        needs_buffer = true;
        continue;
      }
      for (int group : groups_of_[static_cast<size_t>(u)])
        if (std::find(into.begin(), into.end(), group) == into.end()) into.push_back(group);
    }
    for (int group : into) groups_[static_cast<size_t>(group)].values.push_back(v);
    groups_of_[static_cast<size_t>(v)] = into;
    if (needs_buffer || into.empty()) start_group(v);
  }

  Step step_of(Group& group) const {
    const auto rank = [&](ValueId v) { return v == group.prologue ? 0 : v == group.anchor ? 1 : 2; };
    std::sort(group.values.begin(), group.values.end(), [&](ValueId a, ValueId b) {
      if (rank(a) != rank(b)) return rank(a) < rank(b);
      return a < b;
    });
    // A group can hold a whole unrolled chain, so membership is a binary
    // search and the reads seen a set: linear searches made this quadratic
    // (a 300,000-op chain took more than ten minutes).
    Members members(group.values);
    Step step;
    for (ValueId v : group.values)
      if (!cheap_[static_cast<size_t>(v)] || v == group.result) place_after_cheap_args(v, members, step.values);
    GDL_INTERNAL_ASSERT(step.values.size() == group.values.size() && step.values.back() == group.result,
                        "a fused group's values do not all lead to its result");
    step.result = group.result;
    std::unordered_set<ValueId> read;
    for (ValueId v : group.values)
      for (ValueId a : g_.node(v).args) {
        if (members.position(a) != Members::kNone || ir::has_no_storage(g_.node(a).op)) continue;
        if (read.insert(a).second) step.reads.push_back(a);
      }
    return step;
  }

  // A group's values, and which of them are placed in its step yet.
  struct Members {
    static constexpr size_t kNone = std::numeric_limits<size_t>::max();
    explicit Members(std::vector<ValueId> values) : sorted(std::move(values)), placed(sorted.size(), false) {
      std::sort(sorted.begin(), sorted.end());
    }
    size_t position(ValueId v) const {
      auto it = std::lower_bound(sorted.begin(), sorted.end(), v);
      return it != sorted.end() && *it == v ? static_cast<size_t>(it - sorted.begin()) : kNone;
    }
    std::vector<ValueId> sorted;
    std::vector<bool> placed;
  };

  // Appends v to `order`, after those of its cheap arguments in the group
  // that are not there yet (depth first, with a stack of its own: a chain
  // of cheap values can be as long as the program).
  void place_after_cheap_args(ValueId v, Members& members, std::vector<ValueId>& order) const {
    if (members.placed[members.position(v)]) return;
    std::vector<std::pair<ValueId, size_t>> pending{{v, 0}};  // a value, and its next argument to look at
    while (!pending.empty()) {
      const ValueId top = pending.back().first;
      const std::vector<ValueId>& args = g_.node(top).args;
      if (size_t& next = pending.back().second; next < args.size()) {
        const ValueId a = args[next++];
        const size_t at = cheap_[static_cast<size_t>(a)] ? members.position(a) : Members::kNone;
        if (at != Members::kNone && !members.placed[at]) pending.push_back({a, 0});
        continue;
      }
      pending.pop_back();
      if (size_t at = members.position(top); !members.placed[at]) {
        members.placed[at] = true;
        order.push_back(top);
      }
    }
  }

  const ir::Graph& g_;
  const PlanOptions& options_;
  size_t count_;
  std::vector<bool> computed_, is_output_, cheap_;
  std::vector<std::vector<ValueId>> consumers_;
  std::vector<std::vector<int>> groups_of_;  // the groups that compute each value
  std::vector<Group> groups_;
  std::vector<ValueId> deadline_;  // case f: the first in-place write each value must precede
};

}  // namespace

void fuse_steps(Plan& p, const PlanOptions& options) {
  if (!options.fuse_elementwise && !options.fuse_epilogues && !options.fuse_prologues) return;
  p.steps = Fuser(p.graph, options).run(std::move(p.steps));
}

}  // namespace gdl::plan
