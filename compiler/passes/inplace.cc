// place_in_place_writes (inplace.h):
// 1. Outputs that share storage with a state or with a value that an
//    in-place write changes read a copy (the output's buffer must hold its
//    value after the run).
// 2. The chain of each state: from its final value back through reshapes
//    and in-place writes; the writes on it may overwrite the state's leaf.
// 3. Each in-place write in id order: legal (see inplace.h) or its base is
//    copied. A legal write adds ordering edges from every reader of the old
//    value (plan::overwritten_readers) to itself; a reader that the write
//    already reaches through data and earlier edges would make a cycle, so
//    then the write copies instead.
// 4. Each state whose chain no longer reaches its leaf (its final value is
//    no in-place write, or a write on the chain had to copy) gets
//    update_slice(occupant, final) over the whole state, where the occupant
//    is the last value written into the state's storage. The final value's
//    other readers then read the update instead where they can, so that
//    fusion computes the value in the update's kernel (plan/fuse.cc).
// 5. A stable topological order of data and ordering edges, and the ids
//    renumbered.
#include "passes/inplace.h"

#include <algorithm>
#include <queue>
#include <set>

#include "internal_error.h"
#include "plan.h"

namespace gdl {
namespace {

using ir::Op;
using ir::ValueId;

using plan::strip_reshapes;

// The full bounds of a shape with no run-time dims.
std::vector<int64_t> whole_bounds(const Shape& s) {
  std::vector<int64_t> b;
  for (const Dim& d : s) {
    b.push_back(0);
    b.push_back(d.is_runtime() ? -1 : d.extent);
  }
  return b;
}

class Placer {
 public:
  explicit Placer(ir::Graph& g) : g_(g) {}

  void run() {
    copy_shared_outputs();
    mark_chains();
    const size_t original = g_.nodes.size();
    for (size_t v = 0; v < original; ++v)
      if (ir::writes_in_place(g_.nodes[v].op)) place(static_cast<ValueId>(v));
    finish_states();
    reorder();
  }

 private:
  ValueId append(ir::Node n) {
    const ValueId id = g_.add(std::move(n));
    after_.emplace_back();
    return id;
  }

  ValueId copy_of(ValueId v, const std::string& why) {
    ir::Node c;
    c.op = Op::kCopy;
    c.args = {v};
    c.type = g_.node(v).type;
    c.loc = g_.node(v).loc;
    c.name = "copy of " + (g_.node(v).name.empty() ? "%" + std::to_string(v) : "'" + g_.node(v).name + "'") + ": " + why;
    return append(std::move(c));
  }

  // 1.
  void copy_shared_outputs() {
    after_.assign(g_.nodes.size(), {});
    std::vector<bool> written(g_.nodes.size(), false);  // a storage root that some in-place write targets
    for (size_t v = 0; v < g_.nodes.size(); ++v)
      if (ir::writes_in_place(g_.nodes[v].op)) written[static_cast<size_t>(plan::write_target(g_, static_cast<ValueId>(v)).whole)] = true;
    for (ir::Output& o : g_.outputs) {
      ValueId root = o.value;
      while (plan::is_view_node(g_, g_.node(root)) || ir::writes_in_place(g_.node(root).op)) {
        if (written[static_cast<size_t>(root)]) break;
        root = g_.node(root).args.at(0);
      }
      const Op op = g_.node(root).op;
      if (op == Op::kState || written[static_cast<size_t>(root)] || ir::writes_in_place(op))
        o.value = copy_of(o.value, "output '" + o.name + "' would share its buffer with a value written in place");
    }
  }

  // 2.
  void mark_chains() {
    on_chain_.assign(g_.nodes.size(), ir::kNoValue);
    for (const ir::StateUpdate& u : g_.state_updates)
      for (ValueId v = strip_reshapes(g_, u.value); ir::writes_in_place(g_.node(v).op);
           v = strip_reshapes(g_, g_.node(v).args.at(0)))
        on_chain_[static_cast<size_t>(v)] = u.state;
    is_final_.assign(g_.nodes.size(), false);
    for (const ir::StateUpdate& u : g_.state_updates) is_final_[static_cast<size_t>(u.value)] = true;
    for (const ir::Output& o : g_.outputs) is_final_[static_cast<size_t>(o.value)] = true;
  }

  // Whether `from` reaches `to` over data and ordering edges.
  bool reaches(ValueId from, ValueId to, const std::vector<std::vector<ValueId>>& consumers) const {
    std::vector<bool> seen(g_.nodes.size(), false);
    std::vector<ValueId> pending = {from};
    while (!pending.empty()) {
      const ValueId v = pending.back();
      pending.pop_back();
      if (v == to) return true;
      auto visit = [&](ValueId n) {
        if (!seen[static_cast<size_t>(n)]) seen[static_cast<size_t>(n)] = true, pending.push_back(n);
      };
      for (ValueId c : consumers[static_cast<size_t>(v)]) visit(c);
      for (ValueId c : after_[static_cast<size_t>(v)]) visit(c);
    }
    return false;
  }

  // The value whose storage `v` lies in: through views and in-place writes.
  ValueId storage_root(ValueId v) const {
    while (plan::is_view_node(g_, g_.node(v)) || ir::writes_in_place(g_.node(v).op)) v = g_.node(v).args.at(0);
    return v;
  }

  // Why `writer` may not overwrite its target, or "" when it may.
  std::string refusal(ValueId writer, const std::vector<std::vector<ValueId>>& consumers) {
    const plan::WriteTarget t = plan::write_target(g_, writer);
    ValueId overwriter = writer;  // the write that replaces the target's value: an update_slice it is a view of
    if (t.region != ir::kNoValue) {
      ValueId v = writer;
      while (consumers[static_cast<size_t>(v)].size() == 1 && g_.node(consumers[static_cast<size_t>(v)][0]).op == Op::kReshape)
        v = consumers[static_cast<size_t>(v)][0];
      const auto& next = consumers[static_cast<size_t>(v)];
      if (next.size() != 1 || !plan::update_is_view(g_, g_.node(next[0])))
        return "the region it writes is not put back into its value";
      overwriter = next[0];
    }
    const ir::Node& whole = g_.node(t.whole);
    if (whole.op == Op::kState) {
      if (on_chain_[static_cast<size_t>(overwriter)] != t.whole) return "the state's old value is still needed";
    } else if (ir::is_leaf(whole.op)) {
      return std::string(ir::op_name(whole.op)) + "s are not written by the program";
    } else if (is_final_[static_cast<size_t>(t.whole)]) {
      return "it is an output or a state's final value";
    }
    if (claimed_.count(t.whole)) return "another write already changes it in place";
    // A write that also reads its target through another argument (a
    // scatter of a state into itself, permuted) would read rows it has
    // already overwritten.
    const ir::Node& w = g_.node(writer);
    for (size_t a = 1; a < w.args.size(); ++a)
      if (storage_root(w.args[a]) == t.whole) return "it reads the value it overwrites";
    for (ValueId r : plan::overwritten_readers(g_, writer, consumers))
      if (reaches(writer, r, consumers))
        return (g_.node(r).name.empty() ? "%" + std::to_string(r) : "'" + g_.node(r).name + "'") +
               " reads the old value after the write";
    return "";
  }

  // 3.
  void place(ValueId writer) {
    const std::vector<std::vector<ValueId>> consumers = plan::consumers_of(g_);
    if (plan::update_is_view(g_, g_.node(writer))) return;  // placed with the write it is a view of
    const std::string why = refusal(writer, consumers);
    if (!why.empty()) {
      const ValueId base = g_.node(writer).args[0];
      const ValueId c = copy_of(base, why);
      g_.node(writer).args[0] = c;
      claimed_.insert(c);
      return;
    }
    claimed_.insert(plan::write_target(g_, writer).whole);
    for (ValueId r : plan::overwritten_readers(g_, writer, consumers)) after_[static_cast<size_t>(r)].push_back(writer);
  }

  // 4.
  void finish_states() {
    for (ir::StateUpdate& u : g_.state_updates) {
      ValueId v = strip_reshapes(g_, u.value);
      while (ir::writes_in_place(g_.node(v).op)) {
        const plan::WriteTarget t = plan::write_target(g_, v);
        if (t.region != ir::kNoValue && !plan::update_is_view(g_, g_.node(v))) break;
        v = strip_reshapes(g_, g_.node(v).args[0]);
      }
      if (v == u.state) continue;
      // The last value written into the state's storage: follow legal writes from the leaf.
      ValueId occupant = u.state;
      for (bool moved = true; moved;) {
        moved = false;
        const std::vector<std::vector<ValueId>> consumers = plan::consumers_of(g_);
        for (size_t w = 0; w < g_.nodes.size() && !moved; ++w) {
          const ValueId writer = static_cast<ValueId>(w);
          if (!ir::writes_in_place(g_.nodes[w].op) || plan::update_is_view(g_, g_.nodes[w])) continue;
          if (plan::write_target(g_, writer).whole != occupant) continue;
          ValueId next = writer;  // a write into a region: its update is the value now in the storage
          while (consumers[static_cast<size_t>(next)].size() == 1 &&
                 (g_.node(consumers[static_cast<size_t>(next)][0]).op == Op::kReshape ||
                  plan::update_is_view(g_, g_.node(consumers[static_cast<size_t>(next)][0]))))
            next = consumers[static_cast<size_t>(next)][0];
          occupant = strip_reshapes(g_, next);
          moved = occupant != plan::write_target(g_, writer).whole;
        }
      }
      ir::Node update;
      update.op = Op::kUpdateSlice;
      update.args = {occupant, u.value};
      update.type = g_.node(u.state).type;
      update.attrs.ints = whole_bounds(update.type.shape);
      update.name = "state '" + g_.node(u.state).name + "' = its new value";
      update.loc = u.loc;
      const ValueId id = append(std::move(update));
      const std::vector<std::vector<ValueId>> consumers = plan::consumers_of(g_);
      const std::vector<ValueId> readers = plan::overwritten_readers(g_, id, consumers);
      for (ValueId r : readers) after_[static_cast<size_t>(r)].push_back(id);
      read_from_state(u.value, id, readers);
      u.value = id;
    }
  }

  // The new value's other readers read it from the state's memory once
  // `update` has put it there, so that the update is its only reader and
  // fusion computes it in the update's own kernel (no copy). Not a reader
  // of the old value (it must run before the update), a view, or one that
  // leads to such a reader (the update would then wait for itself).
  void read_from_state(ValueId value, ValueId update, const std::vector<ValueId>& old_readers) {
    const std::vector<std::vector<ValueId>> consumers = plan::consumers_of(g_);
    for (ValueId c : consumers[static_cast<size_t>(value)]) {
      if (c == update || plan::is_view_node(g_, g_.node(c)) ||
          std::find(old_readers.begin(), old_readers.end(), c) != old_readers.end() || reaches(c, update, consumers))
        continue;
      for (ValueId& a : g_.node(c).args)
        if (a == value) a = update;
    }
  }

  // 5. Kahn's algorithm, smallest id first.
  void reorder() {
    const size_t n = g_.nodes.size();
    std::vector<int> waiting(n, 0);
    std::vector<std::vector<ValueId>> next(n);
    auto edge = [&](ValueId from, ValueId to) {
      next[static_cast<size_t>(from)].push_back(to);
      ++waiting[static_cast<size_t>(to)];
    };
    for (size_t v = 0; v < n; ++v) {
      for (ValueId a : g_.nodes[v].args) edge(a, static_cast<ValueId>(v));
      for (ValueId w : after_[v]) edge(static_cast<ValueId>(v), w);
    }
    std::priority_queue<ValueId, std::vector<ValueId>, std::greater<>> ready;
    for (size_t v = 0; v < n; ++v)
      if (waiting[v] == 0) ready.push(static_cast<ValueId>(v));
    std::vector<ValueId> order, new_id(n, ir::kNoValue);
    while (!ready.empty()) {
      const ValueId v = ready.top();
      ready.pop();
      new_id[static_cast<size_t>(v)] = static_cast<ValueId>(order.size());
      order.push_back(v);
      for (ValueId w : next[static_cast<size_t>(v)])
        if (--waiting[static_cast<size_t>(w)] == 0) ready.push(w);
    }
    GDL_INTERNAL_ASSERT(order.size() == n, "the in-place ordering edges form a cycle");
    std::vector<ir::Node> nodes;
    nodes.reserve(n);
    for (ValueId v : order) {
      ir::Node node = std::move(g_.nodes[static_cast<size_t>(v)]);
      for (ValueId& a : node.args) a = new_id[static_cast<size_t>(a)];
      nodes.push_back(std::move(node));
    }
    g_.nodes = std::move(nodes);
    g_.renumber_results(new_id);
  }

  ir::Graph& g_;
  std::vector<std::vector<ValueId>> after_;  // ordering edges: after_[r] must come before each of its entries
  std::vector<ValueId> on_chain_;            // the state whose final value a write leads to
  std::vector<bool> is_final_;               // outputs' and states' final values
  std::set<ValueId> claimed_;                // targets that a write changes in place
};

}  // namespace

void place_in_place_writes(ir::Graph& g) { Placer(g).run(); }

}  // namespace gdl
