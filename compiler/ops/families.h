// The op families' registration functions (one per file of ops/), which
// op_table.cc calls in this order; the order of the callable ops is the
// order of the "did you mean" candidates.
#pragma once

#include <vector>

#include "ops/op_def.h"

namespace gdl::ops {

void add_elementwise_ops(std::vector<OpDef>& defs);    // elementwise.cc
void add_matmul_ops(std::vector<OpDef>& defs);         // matmul.cc
void add_reduce_ops(std::vector<OpDef>& defs);         // reduce.cc
void add_norm_ops(std::vector<OpDef>& defs);           // norm.cc
void add_data_movement_ops(std::vector<OpDef>& defs);  // data_movement.cc
void add_attention_ops(std::vector<OpDef>& defs);      // attention.cc
void add_select_ops(std::vector<OpDef>& defs);         // select.cc
void add_update_ops(std::vector<OpDef>& defs);         // update.cc
void add_random_ops(std::vector<OpDef>& defs);         // random.cc
void add_rope_ops(std::vector<OpDef>& defs);           // rope.cc
void add_collective_ops(std::vector<OpDef>& defs);     // collective.cc
void add_grad_ops(std::vector<OpDef>& defs);           // grad.cc
void add_leaf_ops(std::vector<OpDef>& defs);           // leaves.cc

// Shared by the type rules: the axis attribute at `slot` as written
// (negative from the end), checked against a rank-`rank` value and
// normalized to [0, rank) into *out. nullopt when it fits; else what the
// rule returns.
std::optional<TypeResult> axis_of(TypeQuery& q, size_t slot, int rank, int* out);
// The same check for an axis read already (one entry of a list of axes).
std::optional<TypeResult> normalize_axis(TypeQuery& q, size_t slot, int64_t axis, int rank, int* out);

// Shared by softmax's and the norms' rules: operand 0, a float tensor of
// rank >= 1, named as the op was written. nullptr after *bad is set to what
// the rule returns.
const TensorType* float_rows_operand(TypeQuery& q, std::optional<TypeResult>* bad);

// Shared CPU rule and identity test: x itself (copy, stop_gradient), and
// a node of its argument's type (a cast or reshape to it, a broadcast_to
// of its shape: constant folding drops them).
double identity_rule(double x, DType);
bool same_type(const ir::Node& n, const ir::Node& arg);

// Shared by the derivative rules of take_along_axis and topk_values (a
// take_along_axis of its own indices): x's part of take_along_axis(x,
// index, axis) for the adjoint dy; kNoValue with b.refused set when the
// rule cannot build it.
ir::ValueId take_along_axis_part(autodiff::AdjointBuilder& b, ir::ValueId x, ir::ValueId index, int axis, ir::ValueId dy);

// Shared by the IR text of the ops' attributes.
std::string number_text(double v);                     // shortest text that reads back as v
std::string ints_text(const std::vector<int64_t>& v);  // "[1, 0]"

}  // namespace gdl::ops
