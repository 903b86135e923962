// The gdl IR: one static single-assignment dataflow graph per program.
//
// A Graph is a list of Nodes in topological order (every argument of a node
// has a smaller id). Each node produces exactly one tensor value whose id is
// the node's index. There is no control flow: functions are inlined and loops
// unrolled by lower.cc before anything reaches this form.
//
// Shapes may contain run-time dims (Dim::runtime(symbol)); Graph::dims says
// their bounds. Every later stage (interpreter, planner, codegen) reads this.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include "source_loc.h"
#include "types.h"

namespace gdl::ir {

using ValueId = int32_t;
inline constexpr ValueId kNoValue = -1;

// The IR's opcodes and the names the IR text prints, in the order the
// artifact numbers them. What each op means (its operands and attributes,
// type rule, CPU rule and kernel) is its entry in compiler/ops/.
#define GDL_IR_OPS(X)                                                                                  \
  /* Leaves: values that come from outside or from the program text. */                              \
  X(kInput, "input") X(kParam, "param") X(kScalar, "scalar") X(kConstant, "const") X(kState, "state")  \
  X(kDimValue, "dim_value")                                                                            \
  /* Elementwise. */                                                                                   \
  X(kNeg, "neg") X(kNot, "not") X(kExp, "exp") X(kLog, "log") X(kSqrt, "sqrt") X(kRsqrt, "rsqrt")     \
  X(kTanh, "tanh") X(kSigmoid, "sigmoid") X(kRelu, "relu") X(kGelu, "gelu") X(kSilu, "silu")          \
  X(kAbs, "abs") X(kCast, "cast")                                                                      \
  X(kAdd, "add") X(kSub, "sub") X(kMul, "mul") X(kDiv, "div") X(kMin, "min") X(kMax, "max")           \
  X(kPow, "pow") X(kLt, "lt") X(kLe, "le") X(kGt, "gt") X(kGe, "ge") X(kEq, "eq") X(kNe, "ne")        \
  X(kAnd, "and") X(kOr, "or") X(kWhere, "where")                                                       \
  X(kCos, "cos") X(kSin, "sin") X(kErf, "erf") X(kFloor, "floor") X(kCeil, "ceil") X(kRound, "round") \
  X(kSign, "sign") X(kClamp, "clamp") X(kFloorDiv, "floordiv") X(kMod, "mod") X(kBitAnd, "bitand")     \
  X(kBitOr, "bitor") X(kBitXor, "bitxor") X(kShl, "shl") X(kShr, "shr")                                \
  /* Structured. */                                                                                    \
  X(kMatMul, "matmul") X(kSum, "sum") X(kMean, "mean") X(kReduceMax, "reduce_max")                    \
  X(kSoftmax, "softmax") X(kLayerNorm, "layernorm") X(kRmsNorm, "rmsnorm")                             \
  X(kTranspose, "transpose") X(kReshape, "reshape") X(kSlice, "slice") X(kConcat, "concat")           \
  X(kGather, "gather") X(kAttention, "attention") X(kPagedAttention, "paged_attention")               \
  X(kReduceMin, "reduce_min") X(kArgMax, "argmax") X(kArgMin, "argmin")                                \
  X(kTopKValues, "topk_values") X(kTopKIndices, "topk_indices") X(kCumSum, "cumsum")                   \
  X(kArange, "arange") X(kOneHot, "one_hot") X(kTakeAlongAxis, "take_along_axis")                     \
  /* Writes into their first argument's storage (see writes_in_place). */                             \
  X(kScatter, "scatter") X(kUpdateSlice, "update_slice") X(kCopy, "copy")                               \
  /* Random numbers (compiler/ops/random.cc). */                                                       \
  X(kRandUniform, "rand") X(kRandNormal, "randn") X(kRngAdvance, "rng_advance")                         \
  /* Rotary position embedding (compiler/ops/rope.cc). */                                              \
  X(kRope, "rope")                                                                                     \
  /* Collectives over the program's process group (compiler/ops/collective.cc). */                    \
  X(kAllReduce, "all_reduce") X(kAllGather, "all_gather") X(kReduceScatter, "reduce_scatter")         \
  /* Added after the others: an operand repeated to a shape (elementwise); rows added in place; */    \
  /* a value that passes no gradient (elementwise; constant folding removes it). */                  \
  X(kBroadcastTo, "broadcast_to") X(kScatterAdd, "scatter_add") X(kStopGradient, "stop_gradient")         \
  /* Attention's derivative in three kernels (compiler/ops/attention.cc; no source form). */           \
  X(kAttentionStats, "attention_stats") X(kAttentionGradQ, "attention_grad_q")                         \
  X(kAttentionGradKV, "attention_grad_kv")                                                             \
  /* A ragged batch's token blocks of one sequence, in blocks of queries (no source form). */         \
  X(kPagedAttentionShared, "paged_attention_shared")

enum class Op : uint8_t {
#define GDL_IR_OP_ENUM(id, name) id,
  GDL_IR_OPS(GDL_IR_OP_ENUM)
#undef GDL_IR_OP_ENUM
};

#define GDL_IR_OP_COUNT(id, name) +1
inline constexpr size_t kOpCount = 0 GDL_IR_OPS(GDL_IR_OP_COUNT);
#undef GDL_IR_OP_COUNT

const char* op_name(Op op);
// Ops whose element i reads only element i of each argument (as broadcast):
// the op table's elementwise ops (compiler/ops/op_table.cc checks that the
// two agree). The plan's checks read it where they cannot reach the table.
inline bool reads_elementwise(Op op) {
  return (op >= Op::kNeg && op <= Op::kShr) || op == Op::kBroadcastTo || op == Op::kStopGradient || op == Op::kCopy;
}
// Inputs, params, state, run-time scalars and constants: values no kernel computes.
inline bool is_leaf(Op op) {
  return op == Op::kInput || op == Op::kParam || op == Op::kScalar || op == Op::kConstant || op == Op::kState ||
         op == Op::kDimValue;
}
// scatter, scatter_add, update_slice and rng_advance: their result is their first
// argument with some elements replaced (or added to), written over that argument's
// storage (compiler/passes/inplace.h proves that nothing reads the old value
// afterwards, or copies it).
inline bool writes_in_place(Op op) {
  return op == Op::kScatter || op == Op::kScatterAdd || op == Op::kUpdateSlice || op == Op::kRngAdvance;
}
// Constants, run-time scalars and run-time dims' values: kernels take their
// values (compiled in, from gdl_args, from the valid-dims block), so they
// have no buffer.
inline bool has_no_storage(Op op) { return op == Op::kConstant || op == Op::kScalar || op == Op::kDimValue; }

struct Attrs {
  double value = 0;             // kConstant value; eps; attention scale; kScalar default
  // kDimValue: the run-time dim (Graph::dims index) whose value this run it is, in `axis`
  int axis = 0;                 // reductions, softmax, concat, gather, take_along_axis, argmax, topk, cumsum (non-negative);
                                // paged_attention: 1 over a ragged batch (ops/attention.h kBySequence)
  bool keepdims = false;        // reductions, argmax, argmin
  // transpose perm; slice bounds; a reduction's axes when it combines two or
  // more (ascending; `axis` is then 0); any other integer attribute at its
  // position among the op's attributes (topk [k], one_hot [n], arange
  // [start, stop, step], whose stop is 0 when its extent is a run-time dim;
  // a ragged batch's shared token blocks [block, min_tokens] of paged_attention and
  // paged_attention_shared, ops/attention.h).
  std::vector<int64_t> ints;
  bool operator==(const Attrs&) const = default;
};

struct Node {
  Op op = Op::kConstant;
  std::vector<ValueId> args;
  TensorType type;
  Attrs attrs;
  std::string name;  // leaves: the declared name; otherwise the `let` name if any (for readability)
  SourceLoc loc;     // where the value was written in the source
};

struct Output {
  std::string name;
  ValueId value = kNoValue;
  SourceLoc loc;
};

// The value a `state` tensor holds at the end of a run (lowering: the last
// value assigned to it in program order).
struct StateUpdate {
  ValueId state = kNoValue;  // the kState leaf
  ValueId value = kNoValue;
  SourceLoc loc;             // the last assignment
};

// The GPU a program's kernel choices aim at: K and position splits sized to
// fill its multiprocessors, attention rings sized to its shared memory. Any
// value gives correct results on any GPU; the right one is fast there.
struct Target {
  int64_t multiprocessors = 132;              // H100 / H200 SXM
  int64_t shared_bytes_per_sm = 227 * 1024;   // usable by the blocks of one multiprocessor (sm_90)
  bool operator==(const Target&) const = default;
};

// The ranks that run a program together (`group NAME ranks(N);`): every
// rank runs the same program, and its collectives combine the ranks'
// values. ranks == 0: the program declares no group.
struct ProcessGroup {
  std::string name;
  int64_t ranks = 0;
  SourceLoc loc;
  bool operator==(const ProcessGroup&) const = default;
};

inline constexpr int64_t kMaxGroupRanks = 1024;

// How all_reduce and reduce_scatter combine the ranks' elements (Attrs::ints[0]).
enum class CollectiveReduce : int64_t { kSum, kProd, kMax, kMin, kAvg };

struct Graph {
  std::string program_name;
  Target target;
  ProcessGroup group;
  std::vector<DimInfo> dims;     // run-time dims; Dim::symbol indexes this
  std::vector<Node> nodes;       // topological; ValueId == index
  std::vector<Output> outputs;   // declaration order
  // States whose value changes in a run, in declaration order. After the
  // inplace pass every final value lives in its state's buffer (the runtime
  // needs none of this; the artifact keeps it for the IR text and checks).
  std::vector<StateUpdate> state_updates;

  ValueId add(Node n) {
    nodes.push_back(std::move(n));
    return static_cast<ValueId>(nodes.size() - 1);
  }
  const Node& node(ValueId id) const { return nodes.at(static_cast<size_t>(id)); }
  Node& node(ValueId id) { return nodes.at(static_cast<size_t>(id)); }

  // Leaves of a role in declaration order (inputs, params, run-time scalars).
  std::vector<ValueId> leaves(Op role) const;
  // The outputs' and state updates' values through an old-to-new table,
  // after a pass rebuilt `nodes` (their arguments renumbered already).
  void renumber_results(const std::vector<ValueId>& new_id);
};

// The invariants that need no op's type rule, which the runtime relies on:
// run-time dims with 1 <= lo <= hi and ascending buckets ending at hi; every
// node's type of rank <= kMaxRank with declared run-time dims and extents
// >= 0, its arguments before it; leaves without arguments, inputs, params
// and scalars named and no two alike, scalars and constants rank 0, scalars
// f32 or i32; outputs naming values, no two alike. "" when they hold, else
// the first problem. The compiler's ir::verify (compiler/passes/ir_verify.h)
// adds every op's type rule.
std::string verify_structure(const Graph& g);

}  // namespace gdl::ir
