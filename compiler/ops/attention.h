// The operands of an attention node by role, for the passes that look into
// one (kernel choice, codegen): attention(q, k, v, len, start),
// paged_attention(q, k_pool, v_pool, len, blocks, start) or, over a ragged
// batch of tokens, (q, k_pool, v_pool, len, blocks, sequence) (Attrs::axis
// == kBySequence), paged_attention_shared(q, k_pool, v_pool, len, blocks,
// sequence, partial), and the derivative's kernels attention_stats(q, k, o,
// do, len, start), attention_grad_q and attention_grad_kv(q, k, v, do,
// stats, len, start).
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
  // A ragged batch: token x of q [T, NH, D] reads the block table's row sequence[x].
  ir::ValueId sequence = ir::kNoValue;
  ir::ValueId partial = ir::kNoValue;  // paged_attention_shared: the decode kernels' rows
  // The token blocks that paged_attention_shared serves (SharedTokenBlocks in
  // gdl_attention.cuh): blocks of shared_block tokens of one sequence, in a
  // step of at least shared_min_tokens; 0 (a whole paged_attention): none.
  int64_t shared_block = 0, shared_min_tokens = 0;
  bool paged() const { return blocks != ir::kNoValue; }
  bool causal() const { return start != ir::kNoValue; }
  bool by_sequence() const { return sequence != ir::kNoValue; }
};
AttentionOperands attention_operands(const ir::Node& n);

// paged_attention's Attrs::axis when its last operand is `sequence`.
inline constexpr int kBySequence = 1;
// The Attrs::ints of a paged_attention over a ragged batch that leaves the
// shared token blocks to paged_attention_shared, and of that op:
// {shared_block, shared_min_tokens}.
ir::Attrs shared_blocks_attrs(const ir::Attrs& attention, int64_t block, int64_t min_tokens);

// The positions a row may attend over: k's T, or for a paged cache
// max_blocks * block (static).
Dim attention_positions(const ir::Graph& g, const ir::Node& n);

}  // namespace gdl::ops
