// One standard op: everything the compiler knows about it, in one entry.
//
// Each op family's file (ops/elementwise.cc, reduce.cc, norm.cc, matmul.cc,
// data_movement.cc, attention.cc, leaves.cc) defines its entries, and
// op_table.cc collects them. Every stage dispatches through the entry:
//   lowering     the call's parameters (`name(params...)`), then `infer`
//   ir::verify   `infer` again on the node, and its arity
//   IR text      `attr_text`
//   constant folding, the CPU interpreter   `unary` / `binary` / `eval`
//   fusion       `fusion`
//   codegen      `device_function` / `element` / `kernel`
//   padding      `blocks_padding`
//   grad         `vjp` (autodiff/)
// docs/design.md ("Adding an op") lists what a new op touches.
#pragma once

#include <cstddef>
#include <cstdint>
#include <functional>
#include <optional>
#include <span>
#include <string>
#include <vector>

#include "interp/host_tensor.h"
#include "ir.h"
#include "kernel_table.h"

namespace gdl {
class StepEmitter;  // codegen/step_emitter.h
}
namespace gdl::autodiff {
class AdjointBuilder;  // autodiff/adjoint_builder.h
}

namespace gdl::ops {

// How an op takes part in fusion (plan/fuse.cc) and which kind of kernel
// computes it (codegen/).
enum class FusionClass : uint8_t {
  kLeaf,          // input, param, scalar, constant: no kernel
  kElementwise,   // joins elementwise kernels and matmul epilogues
  kDataMovement,  // reshape, transpose, slice, concat, gather, arange, one_hot: an elementwise kernel of its own
  kReduction,     // sum, mean, max, min over axes, softmax, cumsum, argmax, argmin, topk
  kNorm,          // layernorm, rmsnorm: may be a matmul's prologue
  kMatmul,        // anchors an epilogue
  kAttention,
  kUpdate,        // scatter, update_slice: a kernel over the elements they write, over their base's buffer
  kCollective,    // all_reduce, all_gather, reduce_scatter: the ranks of the process group combine values
};

// ------------------------------------------------------------ type rules

// Where a type rule points when the arguments do not fit: a parameter (an
// index into OpDef::params: operands, then attributes) or the op as written
// (the call's name, the operator).
inline constexpr int kAtOp = -1;

struct TypeError {
  int slot = kAtOp;  // a slice's rule points at an axis instead (its subscript)
  bool at_keyword = false;  // at the argument's keyword (`bias = ...`), not its value
  bool at_start = false;    // at a slice subscript's start (`x[1:]`), not the whole subscript
  std::string message, hint;
};

// How a subscript was written: x[3] (an index: its axis goes), x[1:] or no
// subscript (to the end: a stop of -1 on a run-time axis), x[1:4] (a range;
// a written stop of -1 is outside the axis, not its end).
enum class SubscriptForm : uint8_t { kRange, kIndex, kToEnd };

// A slice's stop that stands for "start + the value of run-time dim
// `symbol`" (x[0:T] over a static axis): -2 - symbol, below the -1 of
// kToEnd, so that the bounds stay one integer pair per axis.
inline constexpr int64_t runtime_length_stop(int symbol) { return -2 - symbol; }
inline constexpr int runtime_length_symbol(int64_t stop) { return stop <= -2 ? static_cast<int>(-2 - stop) : -1; }

// What a type rule sees: the operands and attributes by parameter slot
// (OpDef::params: operands first, then attributes). Lowering answers from
// the call's arguments (its operands evaluated in order before the rule
// runs, its attributes as the rule asks for them), converting each as
// asked, so that a mistake is a diagnostic at that argument, in the order
// the rule checks; ir::verify answers from the node. An accessor returns
// nullptr or false after reporting a mistake (lowering only) or when an
// optional operand is absent.
class TypeQuery {
 public:
  virtual ~TypeQuery() = default;

  const std::vector<DimInfo>& dims() const { return dims_; }
  // The size of the program's process group (ir::ProcessGroup; 0: it declares none).
  int64_t group_ranks() const { return group_ranks_; }
  // How the op was written, for messages: "'+'", "min", "layernorm".
  const std::string& what() const { return what_; }
  std::string text(const TensorType& t) const { return type_to_string(t, dims_); }
  std::string text(const Shape& s) const { return shape_to_string(s, dims_); }
  // The attributes the rule settles (normalized axes, defaults); lowering
  // puts them on the node.
  ir::Attrs& attrs() { return attrs_; }

  // How many operand slots there are (a variadic op's attributes follow them).
  virtual size_t operand_count() const = 0;
  // Whether the call gave the parameter (the node gives every attribute).
  virtual bool given(size_t slot) const = 0;
  // An operand that must be a tensor ("<what> needs a tensor" otherwise).
  virtual const TensorType* tensor(size_t slot, const std::string& what) = 0;
  // An operand that may be a compile-time value of `dtype`'s kind (an
  // integer for i32, true/false for bool), which lowering turns into a
  // constant; nullptr for anything else that is not a tensor, with
  // *described saying what it is.
  virtual const TensorType* value(size_t slot, const std::string& what, DType dtype, std::string* described) = 0;
  // Two operands of an elementwise op brought to one dtype (compile-time
  // values become constants, a run-time scalar follows a float tensor);
  // false after lowering reported a mismatch.
  virtual bool unify(size_t slot_a, size_t slot_b) = 0;

  // Attributes.
  virtual bool integer(size_t slot, const std::string& what, int64_t* out) = 0;          // an axis as written
  virtual bool flag(size_t slot, const std::string& what, bool* out) = 0;                // keepdims
  virtual bool number(size_t slot, const std::string& what, double* out) = 0;            // eps, scale
  virtual bool integers(size_t slot, const std::string& what, std::vector<int64_t>* out) = 0;  // perm, bounds
  // A reduction's axes, written as one integer or a list ([0, 2]); as written
  // (negative from the end). ir::verify answers Attrs::ints, else [axis].
  virtual bool axes(size_t slot, const std::string& what, std::vector<int64_t>* out) = 0;
  // A compile-time integer or the name of a declared run-time dim (arange's
  // stop). ir::verify answers the result's dim at `result_axis` when that is
  // a run-time dim, else the attribute from Attrs::ints.
  virtual bool extent(size_t slot, const std::string& what, size_t result_axis, Dim* out) = 0;
  virtual bool shape(size_t slot, Shape* out) = 0;                                       // reshape's target
  virtual bool dtype(size_t slot, DType* out) = 0;                                       // cast's target
  // A collective's reduction, written as a name (all_reduce(x, op = max)):
  // its ir::CollectiveReduce code into *out; ir::verify answers Attrs::ints[0].
  virtual bool reduction(size_t slot, int64_t* out) = 0;
  // Per axis of a slice, how the source wrote it; empty where the query
  // does not know (ir::verify).
  virtual std::vector<SubscriptForm> subscript_forms() const { return {}; }
  // An operand's value where the call wrote a compile-time integer (after
  // `value` made it a constant too); nullopt otherwise and where the query
  // does not know (ir::verify), so rules check such values at the call only.
  virtual std::optional<int64_t> static_integer(size_t) { return std::nullopt; }

  TypeError error(int slot, std::string message, std::string hint = {}) const {
    return TypeError{slot, false, false, std::move(message), std::move(hint)};
  }

 protected:
  TypeQuery(const std::vector<DimInfo>& dims, int64_t group_ranks, std::string what, ir::Attrs attrs)
      : dims_(dims), group_ranks_(group_ranks), what_(std::move(what)), attrs_(std::move(attrs)) {}

 private:
  const std::vector<DimInfo>& dims_;
  int64_t group_ranks_;
  std::string what_;
  ir::Attrs attrs_;
};

// The result type, or why the arguments do not fit (`failed` without a
// TypeError: an attribute accessor reported the mistake already).
struct TypeResult {
  std::optional<TensorType> type;
  std::optional<TypeError> error;
  TypeResult(TensorType t) : type(std::move(t)) {}
  TypeResult(TypeError e) : error(std::move(e)) {}
  static TypeResult failed() { return TypeResult(); }
  bool ok() const { return type.has_value(); }

 private:
  TypeResult() = default;
};

using InferFn = TypeResult (*)(TypeQuery& q);

// ------------------------------------------------------------- CPU rules

// The arguments of a node being evaluated, and in capacity mode (buckets)
// the valid extent of each argument's axes.
struct EvalArgs {
  std::span<const HostTensor* const> values;
  std::span<const std::vector<int64_t>> valid_extents;  // empty: every position is valid
  // The valid extent of axis `axis` (negative: from the end) of argument i.
  int64_t valid(size_t i, int axis) const;
};

// Elementwise CPU rules on one element each, computed in double (eval_node
// rounds the result to the node's dtype); `dtype` is the operands' dtype.
using UnaryFn = double (*)(double x, DType dtype);
using BinaryFn = double (*)(double a, double b, DType dtype);
// Any other op: fills `out` (shaped as the node's result, zero) from the arguments.
using EvalFn = void (*)(const ir::Node& node, const EvalArgs& args, HostTensor& out);

// -------------------------------------------------------------- emitters

// A data-movement op: the statements that compute element `i` of the
// result into `r<v>` inside the elementwise loop.
using ElementFn = std::string (*)(StepEmitter& e, ir::ValueId v);
// A reduction, norm, matmul or attention: the kernel's body (after the
// declarations StepEmitter makes) and its launch rule. It declares its
// operands' pointers (StepEmitter::pointer) in argument order, then the
// result's (StepEmitter::result_pointer).
using KernelFn = std::string (*)(StepEmitter& e, const ir::Node& n, LaunchRule& rule);

// ------------------------------------------------------ derivative rules

// Reverse mode (autodiff/gradient.h): given the adjoint `dy` of node `y`'s
// result, sets d[k] to operand k's part of its adjoint, of operand k's type,
// built through `b`; leaves kNoValue where none flows (an integer or bool
// operand, a derivative that is zero almost everywhere).
using VjpFn = void (*)(autodiff::AdjointBuilder& b, ir::ValueId y, ir::ValueId dy, std::vector<ir::ValueId>& d);
// The rule of ops whose derivative is zero wherever it exists (floor, sign).
void zero_derivative(autodiff::AdjointBuilder& b, ir::ValueId y, ir::ValueId dy, std::vector<ir::ValueId>& d);

// Reports that padding run-time dim `dim` could change a valid result:
// `why` follows the op's name and position ("reshape at 3:4 moves dim B
// across ...").
using PaddingBlock = std::function<void(int dim, const std::string& why)>;

// ------------------------------------------------------------------- entry

// A call that lowering writes as other ops instead of a node of its own:
// bernoulli(p, shape) as rand(shape) < p, dropout(x, p) as where(rand <
// 1 - p, x / (1 - p), 0) (Lowerer::random), so they draw through rand's
// one definition and share its counters; grad(loss, wrt) as the backward's
// ops (Lowerer::gradient, autodiff/gradient.h).
enum class Expansion : uint8_t { kNone, kBernoulli, kDropout, kGrad };

struct OpDef {
  ir::Op op = ir::Op::kConstant;
  FusionClass fusion = FusionClass::kLeaf;

  // The source form `callable(params...)`; nullptr: written as an operator
  // or a subscript only. Operands come first in `params`, then attributes.
  const char* callable = nullptr;
  std::vector<const char*> params;
  size_t operands = 0;   // how many of params are operands
  size_t required = 0;   // how many params a call must give
  // A call that leaves operand 1 out is this op instead (max(x, axis) is
  // reduce_max, max(a, b) is max; min likewise).
  std::optional<ir::Op> without_second_operand;
  // Not kNone: the entry is a call's parameters and type rule only, found
  // by its name (find_callable), never by op_def(op); `op` is the op it
  // expands around.
  Expansion expansion = Expansion::kNone;

  // IR arguments: at least min_args, at most max_args (SIZE_MAX: variadic).
  size_t min_args = 0, max_args = 0;

  InferFn infer = nullptr;                          // the type and shape rule (non-leaves)
  std::string (*attr_text)(const ir::Attrs&) = nullptr;  // "axis=1, keepdims" in the IR text; nullptr: none

  UnaryFn unary = nullptr;
  BinaryFn binary = nullptr;
  // Compile-time integer operands fold exactly through these (abs(-3) is 3,
  // min(2, 5) is 2; nullopt: the result overflows int64); an op without
  // them folds integers through `unary` / `binary` into a float (exp(0) is 1.0).
  std::optional<int64_t> (*fold_unary_int)(int64_t x) = nullptr;
  std::optional<int64_t> (*fold_binary_int)(int64_t a, int64_t b) = nullptr;
  EvalFn eval = nullptr;

  const char* device_function = nullptr;  // elementwise: gdl::op::<f>(operands...) (gdl_ops.cuh)
  ElementFn element = nullptr;
  // A data-movement op whose `element` may run inside an elementwise
  // kernel whose result has the op's shape: rand, randn and arange make
  // element i from i alone (so dropout's draw, comparison and where are
  // one kernel).
  bool joins_elementwise = false;
  KernelFn kernel = nullptr;

  // The derivative rule; nullptr: none (grad through the op is an error).
  VjpFn vjp = nullptr;

  // Which run-time dims padding (capacity > value) would let this node
  // change a valid result for (passes/padding.h); nullptr: none.
  void (*blocks_padding)(const ir::Graph& g, const ir::Node& n, const PaddingBlock& block) = nullptr;
  // Whether the node computes its argument unchanged (constant folding drops it).
  bool (*is_identity)(const ir::Node& n, const ir::Node& arg) = nullptr;
};

// The entry of an op.
const OpDef& op_def(ir::Op op);
// The entry called `name` in gdl source (for max: the elementwise one), or nullptr.
const OpDef* find_callable(std::string_view name);
// Every callable name, in a fixed order (for "did you mean" hints).
const std::vector<std::string>& callable_names();

inline FusionClass fusion_class(ir::Op op) { return op_def(op).fusion; }
inline bool is_elementwise(ir::Op op) { return fusion_class(op) == FusionClass::kElementwise; }

// The attributes as the IR text shows them: " {axis=1, keepdims}" or "".
std::string attrs_text(const ir::Node& n);

}  // namespace gdl::ops
