// The operands of an attention node by role, for the passes that look into
// one (kernel choice, codegen): attention(q, k, v, len, start),
// paged_attention(q, k_pool, v_pool, len, blocks, start), and the
// derivative's kernels attention_stats(q, k, o, do, len, start),
// attention_grad_q and attention_grad_kv(q, k, v, do, stats, len, start).
#pragma once

#include "ir.h"

namespace gdl::ops {

struct AttentionOperands {
  ir::ValueId q = ir::kNoValue, k = ir::kNoValue, v = ir::kNoValue, len = ir::kNoValue;
  ir::ValueId blocks = ir::kNoValue;  // paged: the block table [sequences..., max_blocks]
  ir::ValueId start = ir::kNoValue;   // causal: the position of each sequence's first query
  ir::ValueId o = ir::kNoValue;       // attention_stats: the forward's result
  ir::ValueId dout = ir::kNoValue;    // the derivative's kernels: the adjoint of the forward's result
  ir::ValueId stats = ir::kNoValue;   // attention_grad_q, attention_grad_kv: attention_stats' result
  bool paged() const { return blocks != ir::kNoValue; }
  bool causal() const { return start != ir::kNoValue; }
};
AttentionOperands attention_operands(const ir::Node& n);

// The positions a row may attend over: k's T, or for a paged cache
// max_blocks * block (static).
Dim attention_positions(const ir::Graph& g, const ir::Node& n);

}  // namespace gdl::ops
