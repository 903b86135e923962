// Splits attention over a ragged batch of tokens between two kernels.
#pragma once

#include "ir.h"

namespace gdl {

// Every paged_attention over a ragged batch (its `sequence` form) for which
// plan/kernel_choice.h choose_shared_token_blocks gives a block becomes two
// nodes: the paged_attention itself, left to the decode kernels, whose
// result has zero rows for the tokens of whole blocks of one sequence
// (Attrs::ints, ops/attention.h shared_blocks_attrs), and
// paged_attention_shared, which computes those rows with the prefill
// kernel and takes the others from the first. Together they compute what
// the one node did; each use of it reads the second.
void share_ragged_attention(ir::Graph& g);

}  // namespace gdl
