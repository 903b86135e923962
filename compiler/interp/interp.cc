// The CPU reference interpreter.
//
// 1. validate_bindings: run-time dims inside their bounds, every input and
//    param bound with its dtype and concrete shape, no unknown names.
// 2. interpret: walk the nodes in topological order. Leaves come from the
//    bindings (inputs, params, run-time scalars) or from attrs.value
//    (constants, scalar defaults). A collective combines every rank's value
//    of its argument (Bindings::ranks; ops::combine_collective). Every
//    other node goes through eval_node.
//    A value is released after its last use, so a long program holds only
//    its live values (params are read in place when already rounded).
// 3. eval_node: the op's CPU rule (its entry in ops/: elementwise rules per
//    element with broadcasting, the others over whole tensors), computed in
//    double (reductions, matmul, softmax and norms accumulate in double),
//    then every element rounded to the node's dtype with round_to_dtype.
//
// Capacity mode (Bindings::valid_dims, the buckets policy): values are laid
// out at the capacity dims; eval_node gives each rule the valid extents of
// its arguments, and the rules that combine elements along an axis (reductions
// and softmax over it, norms over the last axis, matmul's K, attention's
// positions) combine only the valid positions. Positions past the valid count
// are computed from the padding like any other (softmax of a padded position
// uses the valid rows' peak and sum), so they hold garbage that no valid
// result reads.
#include "interp/interp.h"

#include <algorithm>
#include <atomic>
#include <cmath>
#include <condition_variable>
#include <limits>
#include <mutex>
#include <system_error>
#include <thread>

#include "interp/host_ops.h"
#include "ops/collective.h"
#include "ops/op_def.h"

#include "passes/padding.h"
#include "internal_error.h"

namespace gdl {
namespace {

using ir::Node;
using ir::Op;
using host::Extents;
using host::extents_text;
using host::make_tensor;
using host::product;

// ---------------------------------------------------------------- leaves

bool is_bound_leaf(Op op) { return op == Op::kInput || op == Op::kParam || op == Op::kState; }
const char* role_name(Op op) {
  return op == Op::kInput ? "input" : op == Op::kParam ? "param" : op == Op::kState ? "state" : "scalar";
}

bool already_rounded(const HostTensor& t) {
  for (double v : t.data) {
    double r = round_to_dtype(v, t.dtype);
    if (!(r == v || (std::isnan(r) && std::isnan(v)))) return false;
  }
  return true;
}

HostTensor filled(DType dtype, Extents shape, double value) {
  HostTensor t = make_tensor(dtype, std::move(shape));
  std::fill(t.data.begin(), t.data.end(), round_to_dtype(value, dtype));
  return t;
}

}  // namespace

HostTensor eval_node(const ir::Node& node, std::span<const HostTensor* const> args,
                     const std::vector<int64_t>& dims, std::span<const std::vector<int64_t>> arg_valid) {
  GDL_INTERNAL_ASSERT(!ir::is_leaf(node.op), "eval_node called on a leaf");
  const ops::OpDef& def = ops::op_def(node.op);
  GDL_INTERNAL_ASSERT(args.size() >= def.min_args && args.size() <= def.max_args,
                      std::string(ir::op_name(node.op)) + ": wrong number of arguments");
  for (const HostTensor* a : args) GDL_INTERNAL_ASSERT(a != nullptr, "missing argument value");
  GDL_INTERNAL_ASSERT(arg_valid.empty() || arg_valid.size() == args.size(), "valid extents for some arguments only");
  HostTensor out = make_tensor(node.type.dtype, concrete_shape(node.type.shape, dims));
  if (def.unary) {
    const HostTensor& x = *args[0];
    GDL_INTERNAL_ASSERT(x.shape == out.shape, "unary op changes the shape");
    for (size_t i = 0; i < out.data.size(); ++i) out.data[i] = def.unary(x.data[i], x.dtype);
  } else if (def.binary) {
    const HostTensor &a = *args[0], &b = *args[1];
    host::BroadcastCursor cursor(out.shape, {a.shape, b.shape});
    for (double& v : out.data) {
      v = def.binary(a.data[cursor.offset(0)], b.data[cursor.offset(1)], a.dtype);
      cursor.next();
    }
  } else {
    GDL_INTERNAL_ASSERT(def.eval != nullptr, std::string("no CPU rule for ") + ir::op_name(node.op));
    def.eval(node, ops::EvalArgs{args, arg_valid}, out);
  }
  for (double& v : out.data) v = round_to_dtype(v, out.dtype);
  return out;
}

namespace {

// The leading `count` block of `from` at the same coordinates of a tensor
// of shape `to_shape`, whose other elements are `fill`.
HostTensor copy_block(const HostTensor& from, const std::vector<int64_t>& count, std::vector<int64_t> to_shape, double fill) {
  HostTensor to = make_tensor(from.dtype, std::move(to_shape));
  std::fill(to.data.begin(), to.data.end(), fill);
  const Extents from_strides = host::row_major_strides(from.shape), to_strides = host::row_major_strides(to.shape);
  Extents index(count.size(), 0);
  for (int64_t n = product(count); n > 0; --n) {
    int64_t src = 0, dst = 0;
    for (size_t a = 0; a < index.size(); ++a) src += index[a] * from_strides[a], dst += index[a] * to_strides[a];
    to.data[static_cast<size_t>(dst)] = from.data[static_cast<size_t>(src)];
    for (size_t a = index.size(); a-- > 0;) {  // the next coordinates in row-major order
      if (++index[a] < count[a]) break;
      index[a] = 0;
    }
  }
  return to;
}

}  // namespace

HostTensor pad_to_capacity(const HostTensor& valid, const Shape& s, const std::vector<int64_t>& capacity, double fill) {
  GDL_INTERNAL_ASSERT(valid.shape.size() == s.size(), "pad_to_capacity: rank differs from the shape");
  return copy_block(valid, valid.shape, concrete_shape(s, capacity), fill);
}

HostTensor valid_part(const HostTensor& padded, const Shape& s, const std::vector<int64_t>& valid) {
  GDL_INTERNAL_ASSERT(padded.shape.size() == s.size(), "valid_part: rank differs from the shape");
  std::vector<int64_t> shape = concrete_shape(s, valid);
  return copy_block(padded, shape, shape, 0.0);
}

std::optional<int64_t> reference_elements(const Shape& s, const std::vector<int64_t>& dims) {
  int64_t n = 1;
  for (const Dim& d : s) {
    const int64_t e = extent_of(d, dims);
    if (e < 0 || __builtin_mul_overflow(n, e, &n) || n > kMaxReferenceElements) return std::nullopt;
  }
  return n;
}

Status validate_bindings(const ir::Graph& g, const Bindings& b) {
  if (b.dims.size() != g.dims.size())
    return Status::InvalidArgument("expected " + std::to_string(g.dims.size()) + " run-time dim value(s), got " +
                                   std::to_string(b.dims.size()));
  for (size_t i = 0; i < g.dims.size(); ++i) {
    const DimInfo& d = g.dims[i];
    if (b.dims[i] < d.lo || b.dims[i] > d.hi)
      return Status::OutOfRange("dim " + d.name + " = " + std::to_string(b.dims[i]) + " is outside [" +
                                std::to_string(d.lo) + ", " + std::to_string(d.hi) + "]");
  }
  if (!b.valid_dims.empty()) {
    if (b.valid_dims.size() != g.dims.size())
      return Status::InvalidArgument("expected " + std::to_string(g.dims.size()) + " valid dim value(s), got " +
                                     std::to_string(b.valid_dims.size()));
    std::vector<std::string> blockers = padding_blockers(g);
    for (size_t i = 0; i < g.dims.size(); ++i) {
      const DimInfo& d = g.dims[i];
      if (b.valid_dims[i] < d.lo || b.valid_dims[i] > b.dims[i])
        return Status::OutOfRange("dim " + d.name + " = " + std::to_string(b.valid_dims[i]) + " is outside [" +
                                  std::to_string(d.lo) + ", " + std::to_string(b.dims[i]) + "] (its capacity)");
      if (b.valid_dims[i] < b.dims[i] && !blockers[i].empty())
        return Status::FailedPrecondition("dim " + d.name + " cannot be padded: " + blockers[i]);
    }
  }
  for (size_t i = 0; i < g.nodes.size(); ++i)
    if (!reference_elements(g.nodes[i].type.shape, b.dims)) {
      const ir::Node& n = g.nodes[i];
      return Status::OutOfRange(
          (n.name.empty() ? "value %" + std::to_string(i) + " (" + ir::op_name(n.op) + ")" : "'" + n.name + "'") +
          " : " + type_to_string(n.type, g.dims) + " holds more than 2^28 elements at these dims, the most the CPU "
          "reference holds (8 bytes each)");
    }
  for (const ir::Node& n : g.nodes) {
    if (!is_bound_leaf(n.op)) continue;
    std::string what = std::string(role_name(n.op)) + " '" + n.name + "'";
    auto it = b.tensors.find(n.name);
    if (it == b.tensors.end())
      return Status::NotFound("missing " + what + " : " + type_to_string(n.type, g.dims));
    const HostTensor& t = it->second;
    if (t.dtype != n.type.dtype)
      return Status::InvalidArgument(what + ": expected dtype " + dtype_name(n.type.dtype) + ", got " +
                                     dtype_name(t.dtype));
    Extents expected = concrete_shape(n.type.shape, b.dims);
    if (t.shape != expected)
      return Status::InvalidArgument(what + ": expected shape " + extents_text(expected) + " (" +
                                     type_to_string(n.type, g.dims) + "), got " + extents_text(t.shape));
    if (t.size() != product(expected))
      return Status::InvalidArgument(what + ": shape " + extents_text(expected) + " holds " +
                                     std::to_string(product(expected)) + " elements, but the data has " +
                                     std::to_string(t.size()));
  }
  auto leaf_named = [&](const std::string& name) -> const ir::Node* {
    for (const ir::Node& n : g.nodes)
      if (n.op != Op::kConstant && ir::is_leaf(n.op) && n.name == name) return &n;
    return nullptr;
  };
  for (const auto& [name, tensor] : b.tensors) {
    const ir::Node* leaf = leaf_named(name);
    if (!leaf) return Status::NotFound("unknown input, param or state '" + name + "'");
    if (!is_bound_leaf(leaf->op))
      return Status::InvalidArgument("'" + name + "' is a run-time scalar: bind it through Bindings::scalars");
  }
  for (const auto& [name, value] : b.scalars) {
    const ir::Node* leaf = leaf_named(name);
    if (!leaf) return Status::NotFound("unknown run-time scalar '" + name + "'");
    if (leaf->op != Op::kScalar)
      return Status::InvalidArgument("'" + name + "' is not a run-time scalar but a " + role_name(leaf->op) +
                                     ": bind it through Bindings::tensors");
  }
  return Status::Ok();
}

Expected<std::map<std::string, HostTensor>> interpret(const ir::Graph& g, const Bindings& b) {
  if (Status s = validate_bindings(g, b); !s.ok()) return s;
  failpoint("interpreter");

  // The last node that reads each value (itself when none does); outputs
  // are never released.
  size_t count = g.nodes.size();
  std::vector<size_t> last_use(count);
  for (size_t i = 0; i < count; ++i) {
    last_use[i] = i;
    for (ir::ValueId a : g.nodes[i].args) last_use[static_cast<size_t>(a)] = i;
  }
  for (const ir::Output& o : g.outputs) last_use.at(static_cast<size_t>(o.value)) = SIZE_MAX;
  for (const ir::StateUpdate& u : g.state_updates) last_use.at(static_cast<size_t>(u.value)) = SIZE_MAX;
  for (size_t i = 0; i < count; ++i)
    if (g.nodes[i].op == Op::kState) last_use[i] = SIZE_MAX;

  std::vector<HostTensor> owned(count);
  std::vector<const HostTensor*> value(count, nullptr);
  std::vector<const HostTensor*> args;
  std::vector<std::vector<int64_t>> arg_valid;
  auto release = [&](size_t id) {
    owned[id] = HostTensor{};
    value[id] = nullptr;
  };
  for (size_t i = 0; i < count; ++i) {
    const ir::Node& n = g.nodes[i];
    if (is_bound_leaf(n.op)) {
      const HostTensor& bound = b.tensors.at(n.name);
      if (already_rounded(bound)) {
        value[i] = &bound;  // read in place: weights are not copied
        continue;
      }
      owned[i] = bound;
      for (double& v : owned[i].data) v = round_to_dtype(v, owned[i].dtype);
    } else if (n.op == Op::kScalar) {
      auto it = b.scalars.find(n.name);
      owned[i] = filled(n.type.dtype, concrete_shape(n.type.shape, b.dims),
                        it != b.scalars.end() ? it->second : n.attrs.value);
    } else if (n.op == Op::kDimValue) {  // the dim's value this run (the valid one in capacity mode)
      const auto d = static_cast<size_t>(n.attrs.axis);
      owned[i] = filled(DType::kI32, {}, static_cast<double>(b.valid_dims.empty() ? b.dims.at(d) : b.valid_dims.at(d)));
    } else if (n.op == Op::kConstant) {
      owned[i] = filled(n.type.dtype, concrete_shape(n.type.shape, b.dims), n.attrs.value);
    } else {
      if (ops::fusion_class(n.op) == ops::FusionClass::kCollective) {
        Expected<HostTensor> combined = eval_collective(g, n, *value.at(static_cast<size_t>(n.args.at(0))), b);
        if (!combined) return combined.status();
        owned[i] = std::move(combined).value();
      } else {
        args.clear();
        for (ir::ValueId a : n.args) args.push_back(value.at(static_cast<size_t>(a)));
        arg_valid.clear();
        if (!b.valid_dims.empty())
          for (ir::ValueId a : n.args) arg_valid.push_back(concrete_shape(g.node(a).type.shape, b.valid_dims));
        owned[i] = eval_node(n, args, b.dims, arg_valid);
      }
      for (ir::ValueId a : n.args)
        if (last_use[static_cast<size_t>(a)] == i) release(static_cast<size_t>(a));
    }
    value[i] = &owned[i];
    if (last_use[i] == i) release(i);  // nothing reads it: dead code
  }

  std::map<std::string, HostTensor> results;
  for (const ir::Output& o : g.outputs) results[o.name] = *value.at(static_cast<size_t>(o.value));
  for (size_t i = 0; i < count; ++i)  // each state's value at the end of the run, under its name
    if (g.nodes[i].op == Op::kState) results[g.nodes[i].name] = *value.at(i);
  for (const ir::StateUpdate& u : g.state_updates)
    results[g.node(u.state).name] = *value.at(static_cast<size_t>(u.value));
  return results;
}

Expected<HostTensor> eval_collective(const ir::Graph& g, const ir::Node& n, const HostTensor& mine, const Bindings& b) {
  if (g.group.ranks <= 1) return ops::combine_collective(n, std::vector<const HostTensor*>{&mine}, 0);
  if (!b.ranks)
    return Status::FailedPrecondition(std::string(ir::op_name(n.op)) + " at " + std::to_string(n.loc.line) + ":" +
                                      std::to_string(n.loc.col) + " combines the values of " +
                                      std::to_string(g.group.ranks) + " ranks: run every rank together (interpret_ranks)");
  std::shared_ptr<const std::vector<HostTensor>> everyone = b.ranks->exchange(b.rank, mine);
  if (!everyone) return Status::FailedPrecondition("another rank of the group failed before " + std::string(ir::op_name(n.op)));
  std::vector<const HostTensor*> ranks;
  for (const HostTensor& t : *everyone) ranks.push_back(&t);
  return ops::combine_collective(n, ranks, b.rank);
}

ThreadRankExchange::ThreadRankExchange(int ranks) : ranks_(ranks), next_round_(static_cast<size_t>(ranks), 0) {}

std::shared_ptr<const std::vector<HostTensor>> ThreadRankExchange::exchange(int rank, const HostTensor& mine) {
  std::unique_lock<std::mutex> lock(mutex_);
  const uint64_t at = next_round_.at(static_cast<size_t>(rank))++;
  Round& round = rounds_[at];  // a map's entries stay where they are while others come and go
  if (round.values.empty()) round.values.resize(static_cast<size_t>(ranks_));
  round.values[static_cast<size_t>(rank)] = mine;
  if (++round.given == ranks_) {
    round.done = std::make_shared<const std::vector<HostTensor>>(std::move(round.values));
    changed_.notify_all();
  }
  changed_.wait(lock, [&] { return failed_ || round.done != nullptr; });
  if (round.done == nullptr) return nullptr;  // a failure ended the wait; a round already complete is still given
  std::shared_ptr<const std::vector<HostTensor>> everyone = round.done;
  if (++round.taken == ranks_) rounds_.erase(at);
  return everyone;
}

void ThreadRankExchange::fail() {
  std::lock_guard<std::mutex> lock(mutex_);
  failed_ = true;
  changed_.notify_all();
}

Expected<std::vector<std::map<std::string, HostTensor>>> interpret_ranks(const ir::Graph& g,
                                                                         std::vector<Bindings> per_rank) {
  const int64_t ranks = std::max<int64_t>(1, g.group.ranks);
  if (static_cast<int64_t>(per_rank.size()) != ranks)
    return Status::InvalidArgument("bindings for " + std::to_string(per_rank.size()) + " rank(s); program " +
                                   g.program_name + " runs on " + std::to_string(ranks));
  for (size_t r = 0; r < per_rank.size(); ++r) {
    if (Status s = validate_bindings(g, per_rank[r]); !s.ok())
      return Status(s.code(), "rank " + std::to_string(r) + ": " + s.message());
    // Every rank's collectives move values of one shape: the ranks run at the same dims.
    for (size_t d = 0; d < g.dims.size(); ++d) {
      auto dim = [&](const Bindings& b) { return b.valid_dims.empty() ? b.dims.at(d) : b.valid_dims.at(d); };
      if (per_rank[r].dims.at(d) != per_rank[0].dims.at(d) || dim(per_rank[r]) != dim(per_rank[0]))
        return Status::InvalidArgument("rank " + std::to_string(r) + " binds dim " + g.dims[d].name + " = " +
                                       std::to_string(dim(per_rank[r])) + ", rank 0 " + std::to_string(dim(per_rank[0])) +
                                       ": the ranks of a group run at the same dims");
    }
  }
  ThreadRankExchange exchange(static_cast<int>(ranks));
  std::vector<std::optional<Expected<std::map<std::string, HostTensor>>>> results(per_rank.size());
  // The rank that failed first, by itself: the others fail after it, released by exchange.fail().
  std::atomic<int> first_failed{-1};
  std::vector<std::thread> threads;
  auto run_rank = [&](size_t r) {
    Bindings& b = per_rank[r];
    b.rank = static_cast<int>(r);
    b.ranks = &exchange;
    try {
      results[r].emplace(interpret(g, b));
    } catch (const std::exception& e) {  // an internal error: reported as one, after the other ranks stop
      results[r].emplace(Status::Internal(e.what()));
    } catch (...) {
      results[r].emplace(Status::Internal("an exception that is not a std::exception"));
    }
    if (results[r]->ok()) return;
    int none = -1;
    first_failed.compare_exchange_strong(none, static_cast<int>(r));
    exchange.fail();
  };
  try {
    for (size_t r = 0; r < per_rank.size(); ++r) threads.emplace_back(run_rank, r);
  } catch (const std::system_error& e) {  // no thread for a rank: release the ranks that wait for it
    exchange.fail();
    for (std::thread& t : threads) t.join();
    return Status::ResourceExhausted("interpret_ranks: no thread for rank " + std::to_string(threads.size()) + " of " +
                                     std::to_string(ranks) + ": " + e.what());
  }
  for (std::thread& t : threads) t.join();
  if (const int r = first_failed.load(); r >= 0) {
    const Status& s = results[static_cast<size_t>(r)]->status();
    return Status(s.code(), "rank " + std::to_string(r) + ": " + s.message());
  }
  std::vector<std::map<std::string, HostTensor>> out;
  for (auto& r : results) out.push_back(std::move(*r).value());
  return out;
}

}  // namespace gdl
