// The CPU reference interpreter: executes an IR graph for one binding of the
// run-time dims. It is the oracle for every GPU test and the fallback that
// runs programs on machines without a GPU.
//
// Values are held as doubles. Every op computes (and accumulates) in double,
// then rounds its result to the node's dtype, so a value held here is exactly
// representable in that dtype and encodes to raw bytes without loss.
#pragma once

#include <condition_variable>
#include <map>
#include <memory>
#include <mutex>
#include <optional>
#include <span>
#include <string>
#include <vector>

#include "gdl/status.h"
#include "interp/host_tensor.h"
#include "ir.h"

namespace gdl {

// The other ranks of the program's process group, for a run of one rank:
// exchange(rank, mine) returns every rank's value of the collective that
// the ranks reach next (they reach the same ones in the same order), in
// rank order, once every rank has given its own, shared by the ranks;
// nullptr when another rank failed (fail()).
class RankExchange {
 public:
  virtual ~RankExchange() = default;
  virtual std::shared_ptr<const std::vector<HostTensor>> exchange(int rank, const HostTensor& mine) = 0;
  virtual void fail() = 0;
};

// The exchange of ranks that run on threads of one process
// (interpret_ranks): a rank gives its value to the round it reaches next and
// waits until every rank has given theirs, or one has failed.
class ThreadRankExchange final : public RankExchange {
 public:
  explicit ThreadRankExchange(int ranks);
  std::shared_ptr<const std::vector<HostTensor>> exchange(int rank, const HostTensor& mine) override;
  void fail() override;

 private:
  struct Round {
    std::vector<HostTensor> values;
    int given = 0, taken = 0;
    std::shared_ptr<const std::vector<HostTensor>> done;  // every value, once given
  };
  const int ranks_;
  std::mutex mutex_;
  std::condition_variable changed_;
  std::map<uint64_t, Round> rounds_;
  std::vector<uint64_t> next_round_;
  bool failed_ = false;
};

// Capacity mode (the buckets policy): when valid_dims is not empty, `dims`
// holds the capacity of each run-time dim (the extents values are laid out
// with) and valid_dims the value the run is for (lo <= valid <= capacity).
// Inputs are bound at their capacity shape; positions past the valid count
// along a run-time axis are padding (fill them with NaN to prove they never
// leak: pad_to_capacity). Ops that combine elements along a padded axis
// (sum, mean, max, min, argmax, argmin, topk, softmax, layernorm, rmsnorm,
// the contracted K of a matmul, attention positions) use only the valid
// positions, and mean divides by the valid count; every other op computes
// the padding too. The valid part of every output (valid_part) then equals
// the plain run.
struct Bindings {
  std::vector<int64_t> dims;                   // value of each run-time dim (Graph::dims order); capacity in capacity mode
  std::map<std::string, HostTensor> tensors;   // inputs, params and states (their values at run start) by name
  std::map<std::string, double> scalars;       // run-time scalars; missing ones take their default
  std::vector<int64_t> valid_dims;             // capacity mode: the valid value of each run-time dim; empty otherwise
  // A program with a process group of more than one rank: which rank this
  // run is, and how its collectives reach the others (interpret_ranks).
  int rank = 0;
  RankExchange* ranks = nullptr;
};

// Evaluates one non-leaf node from its argument values (args[i] is the value
// of node.args[i]) with its op's CPU rule. A malformed node is an internal
// error; user errors cannot reach this point because lowering rejected them. In capacity
// mode arg_valid[i] holds the valid extents of args[i] (its shape with the
// valid dims); empty means every position is valid.
HostTensor eval_node(const ir::Node& node, std::span<const HostTensor* const> args,
                     const std::vector<int64_t>& dims, std::span<const std::vector<int64_t>> arg_valid = {});

// The value of collective node n on rank b.rank from this rank's value of
// its argument: every rank's value through b.ranks (a group of more than one
// rank; FailedPrecondition without it, or when another rank failed),
// combined (ops::combine_collective). The interpreter and run_planned both
// evaluate collectives here.
Expected<HostTensor> eval_collective(const ir::Graph& g, const ir::Node& n, const HostTensor& mine, const Bindings& b);

// Capacity mode helpers. pad_to_capacity lays a tensor of shape `s` at the
// valid dims out at the capacity dims, `fill` in the padding;
// valid_part copies the valid block of a tensor laid out at capacity.
HostTensor pad_to_capacity(const HostTensor& valid, const Shape& s, const std::vector<int64_t>& capacity, double fill);
HostTensor valid_part(const HostTensor& padded, const Shape& s, const std::vector<int64_t>& valid);

// Values are doubles here, 8 bytes an element whatever the dtype: a value
// of more elements than this is refused before anything is computed, since
// host memory would run out first.
inline constexpr int64_t kMaxReferenceElements = int64_t{1} << 28;

// The element count of shape `s` at `dims` when it is at most
// kMaxReferenceElements; nullopt when larger.
std::optional<int64_t> reference_elements(const Shape& s, const std::vector<int64_t>& dims);

// Checks bindings against the graph (every input and param present, dtype and
// shape equal, dims inside their bounds, every value within
// kMaxReferenceElements; in capacity mode valid dims inside [lo, capacity]
// and no padded dim that padding_blockers names) and returns a Status error
// naming the first mismatch.
Status validate_bindings(const ir::Graph& g, const Bindings& b);

// Runs the whole graph; returns every output, and every state's value at
// the end of the run, by name. A collective over a group of more than one
// rank needs b.ranks (FailedPrecondition without it); over one rank it is
// its argument's value.
Expected<std::map<std::string, HostTensor>> interpret(const ir::Graph& g, const Bindings& b);

// Runs the graph once per rank of its process group, each rank on its own
// thread with its own bindings (per_rank[r] for rank r; their rank and
// ranks fields are set here), the collectives exchanging values between
// them. Every rank's bindings are checked before any runs, and the ranks
// must bind the same run-time dims (and valid dims). Returns each rank's
// outputs and states, in rank order.
Expected<std::vector<std::map<std::string, HostTensor>>> interpret_ranks(const ir::Graph& g,
                                                                         std::vector<Bindings> per_rank);

}  // namespace gdl
