// find_matmul_chains (chains.h): one pass over the plan's steps in schedule
// order, growing a run while each step can join the one before it.
#include "plan/chains.h"

#include <algorithm>

#include "plan/kernel_choice.h"

namespace gdl {

namespace {

using ir::Op;
using ir::ValueId;

// A step the chain kernel can compute: its matmul's K (== N), else 0.
// `input` receives the value the step reads as a (the norm's input when the
// norm is the matmul's prologue), `rows_max` its rows at the largest binding.
int64_t chain_step_k(const plan::Plan& p, const plan::Step& step, ValueId& input, int64_t& rows_max) {
  const ir::Graph& g = p.graph;
  if (step.values.empty()) return 0;
  const ValueId norm = matmul_prologue(g, step.values);
  const ir::Node& matmul = g.node(step.values[norm == ir::kNoValue ? 0 : 1]);
  if (matmul.op != Op::kMatMul) return 0;
  const ir::Node& a = g.node(matmul.args[0]);
  const ir::Node& b = g.node(matmul.args[1]);
  const DType t = matmul.type.dtype;
  if ((t != DType::kF16 && t != DType::kBF16) || a.type.dtype != t || b.type.dtype != t) return 0;
  if (g.node(step.result).type.dtype != t) return 0;
  if (norm != ir::kNoValue && g.node(g.node(norm).args[0]).type.dtype != t) return 0;
  if (b.type.shape.size() != 2 || p.buffers.at(static_cast<size_t>(matmul.args[1])).region != plan::Region::kParams)
    return 0;
  const Dim &bk = b.type.shape[0], &bn = b.type.shape[1], &ak = a.type.shape.back();
  if (bk.is_runtime() || bn.is_runtime() || ak.is_runtime() || bk.extent != bn.extent || ak.extent != bk.extent)
    return 0;
  const int64_t k = bk.extent;
  if (k % kChainKMultiple != 0 || k < kChainMinK || k > kChainMaxK) return 0;
  const MatmulChoice choice = choose_matmul(g, matmul);
  if (!choice.fold_batch || !choice.use_rows || choice.rows_min > kChainMaxRows) return 0;
  input = norm == ir::kNoValue ? matmul.args[0] : g.node(norm).args[0];
  rows_max = choice.rows_max;
  return k;
}

}  // namespace

int64_t chain_block_columns(int64_t k) {
  return k <= 8 * kChainBlocks ? 8 : k <= 16 * kChainBlocks ? 16 : 32;
}

int64_t chain_group_columns(int64_t k, int64_t groups) {
  int64_t c = 8;
  while (c < 64 && (k / c) * groups > kChainBlocks) c *= 2;
  return c;
}

int64_t chain_row_groups(int64_t k, int64_t max_rows) {
  if (max_rows <= kChainMaxRows || k > kChainGroupMaxK) return 0;
  const int64_t groups = std::min(kChainMaxGroups, (max_rows + kChainMaxRows - 1) / kChainMaxRows);
  return (k / chain_group_columns(k, groups)) * groups <= kChainBlocks ? groups : 0;
}

uint32_t chain_shared_bytes(int64_t k, int64_t cols) {
  constexpr int64_t kMaxRows = kChainMaxRows, kWarps = kChainComputingWarps;
  constexpr int64_t kSmemLimit = 227 * 1024, kMaxSlots = 24;
  const int64_t slot_bytes = kWarps * 16 * cols * 2 + 2 * 8;  // the tiles and their two mbarriers
  const int64_t xn = kMaxRows * (k + 8) * 2, raw = kMaxRows * cols * 2, sums = kWarps * kMaxRows * cols * 4;
  // the warps' statistics, a flag, the rows' (mean, inv), their first elements in two steps, the
  // warps' parts of a folded step's row sums
  const int64_t misc = kWarps * 16 + 16 + kMaxRows * 8 + 2 * kMaxRows * 4 + kWarps * kMaxRows * 8;
  const int64_t rest = xn + raw + sums + misc + 1024;   // + the ring's alignment to 1024 bytes
  const int64_t slots = std::min(kMaxSlots, (kSmemLimit - rest) / slot_bytes);
  return static_cast<uint32_t>(slots * slot_bytes + rest);
}

uint64_t chain_exchange_bytes(int64_t k, int64_t row_groups) {
  const uint64_t groups = static_cast<uint64_t>(std::max<int64_t>(row_groups, 1));
  if (k > kChainMailboxMaxK) return kChainCounterBytes + 2 * kChainMaxRows * kChainBlocks * 8;  // partial statistics
  return kChainCounterBytes + groups * 2 * kChainMaxRows * static_cast<uint64_t>(k / 2) * 8;
}

int64_t chain_kernel_count(const plan::Chain& c) { return c.row_groups > 1 ? 2 : 1; }

uint64_t chain_tensor_maps_at(const plan::Chain& c, int64_t kernel) {
  const uint64_t exchange = (chain_exchange_bytes(c.k, c.row_groups) + kChainTensorMapBytes - 1) / kChainTensorMapBytes *
                            kChainTensorMapBytes;
  return exchange + static_cast<uint64_t>(kernel * (c.last - c.first + 1)) * kChainTensorMapBytes;
}

uint64_t chain_scratch_bytes(const plan::Chain& c) { return chain_tensor_maps_at(c, chain_kernel_count(c)); }

void find_matmul_chains(plan::Plan& p, const plan::PlanOptions& options) {
  p.chains.clear();
  if (!options.chain_matmuls) return;
  std::vector<plan::Chain>& chains = p.chains;
  plan::Chain run;
  int64_t run_k = 0;  // 0: no run open
  auto close = [&] {
    if (run_k > 0 && run.last > run.first) {
      run.scratch_bytes = chain_scratch_bytes(run);
      chains.push_back(run);
    }
    run_k = 0;
  };
  for (size_t i = 0; i < p.steps.size(); ++i) {
    ValueId input = ir::kNoValue;
    int64_t rows_max = 0;
    const int64_t k = chain_step_k(p, p.steps[i], input, rows_max);
    const int step = static_cast<int>(i);
    if (run_k > 0 && k == run_k && input == p.steps[i - 1].result) {
      run.last = step;
      run.row_groups = std::min(run.row_groups, chain_row_groups(k, rows_max));  // the same rows, a from the step before
      continue;
    }
    close();
    if (k > 0) {
      run = plan::Chain{step, step, k, chain_row_groups(k, rows_max)};
      run_k = k;
    }
  }
  close();
}

}  // namespace gdl
