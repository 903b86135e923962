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

enum class Op : uint8_t {
  // Leaves: values that come from outside or from the program text.
  kInput,     // bound by copy before each run (rank 0 i32 input = device scalar)
  kParam,     // bound once, persists
  kScalar,    // run-time scalar, updated through kernel node parameters
  kConstant,  // rank-0 compile-time value: attrs.value, type.dtype

  // Elementwise unary: result shape = argument shape.
  kNeg, kNot, kExp, kLog, kSqrt, kRsqrt, kTanh, kSigmoid, kRelu, kGelu, kSilu, kAbs,
  kCast,      // to type.dtype

  // Elementwise binary with numpy broadcasting. Comparisons produce bool.
  kAdd, kSub, kMul, kDiv, kMin, kMax, kPow,
  kLt, kLe, kGt, kGe, kEq, kNe, kAnd, kOr,
  kWhere,     // args: cond (bool), a, b; broadcast over all three

  // Structured ops.
  kMatMul,    // [..., M, K] @ [..., K, N] -> [..., M, N]; batch dims broadcast
  kSum, kMean, kReduceMax,  // over attrs.axis; attrs.keepdims
  kSoftmax,   // over attrs.axis
  kLayerNorm, // over the last axis; args: x [, weight, bias]; attrs.value = eps
  kRmsNorm,   // over the last axis; args: x [, weight];       attrs.value = eps
  kTranspose, // attrs.ints = permutation
  kReshape,   // to type.shape (same element count for every binding)
  kSlice,     // attrs.ints = [start0, stop0, start1, stop1, ...], one pair per axis
  kConcat,    // along attrs.axis; variadic
  kGather,    // args: table [V, ...], ids (i32) -> ids.shape + table.shape[1:]
              //   ids outside [0, V) give a zero row
  kAttention, // args: q [..., NH, D], k [..., NH, T, D], v [..., NH, T, D], len (i32 rank 0)
              //   softmax(q.k * scale) over positions t < clamp(len, 0, T), then @ v;
              //   attrs.value = scale; len <= 0 gives zeros
};

inline constexpr size_t kOpCount = static_cast<size_t>(Op::kAttention) + 1;

enum class OpClass : uint8_t { kLeaf, kUnary, kBinary, kWhere, kStructured };

struct OpInfo {
  const char* name;   // as printed in the IR text form
  OpClass cls;
};
const OpInfo& op_info(Op op);
inline const char* op_name(Op op) { return op_info(op).name; }
inline bool is_elementwise(Op op) {
  OpClass c = op_info(op).cls;
  return c == OpClass::kUnary || c == OpClass::kBinary || c == OpClass::kWhere;
}

struct Attrs {
  double value = 0;             // kConstant value; eps; attention scale; kScalar default
  int axis = 0;                 // reductions, softmax, concat (non-negative)
  bool keepdims = false;        // reductions
  std::vector<int64_t> ints;    // transpose perm; slice bounds
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

struct Graph {
  std::string program_name;
  std::vector<DimInfo> dims;     // run-time dims; Dim::symbol indexes this
  std::vector<Node> nodes;       // topological; ValueId == index
  std::vector<Output> outputs;   // declaration order

  ValueId add(Node n) {
    nodes.push_back(std::move(n));
    return static_cast<ValueId>(nodes.size() - 1);
  }
  const Node& node(ValueId id) const { return nodes.at(static_cast<size_t>(id)); }
  Node& node(ValueId id) { return nodes.at(static_cast<size_t>(id)); }

  // Leaves of a role in declaration order (inputs, params, run-time scalars).
  std::vector<ValueId> leaves(Op role) const;
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
