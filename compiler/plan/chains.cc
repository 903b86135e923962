// find_matmul_chains (chains.h), the chains pass:
// 1. For each step in schedule order, whether the chain kernel can compute
//    it (chain_step_k: a square f16/bf16 matmul over a param at a fixed
//    offset with K in range, the rows kernel serving its smallest
//    bindings, any norm prologue and epilogue) and which value it reads
//    as a.
// 2. A step with the run's K that reads the step before it extends the
//    open run; its row groups are the fewest any step of the run allows.
// 3. Any other step closes the run (kept when it has two steps or more,
//    with its scratch size) and may open the next one.
#include "plan/chains.h"

#include <algorithm>

#include "ops/matmul.h"
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
  if (matmul.op != Op::kMatMul || !ops::matmul_layout(matmul).as_stored()) return 0;  // the chain streams b as stored
  const ir::Node& a = g.node(matmul.args[0]);
  const ir::Node& b = g.node(matmul.args[1]);
  const DType t = matmul.type.dtype;
  if ((t != DType::kF16 && t != DType::kBF16) || a.type.dtype != t || b.type.dtype != t) return 0;
  if (g.node(step.result).type.dtype != t) return 0;
  if (norm != ir::kNoValue && g.node(g.node(norm).args[0]).type.dtype != t) return 0;
  // The runtime encodes b's tensor maps once per session: b lies at a fixed address.
  const plan::Buffer& b_buffer = p.buffers.at(static_cast<size_t>(matmul.args[1]));
  if (b.type.shape.size() != 2 || b_buffer.region != plan::Region::kParams || !b_buffer.terms.empty()) return 0;
  const Dim &bk = b.type.shape[0], &bn = b.type.shape[1], &ak = a.type.shape.back();
  if (bk.is_runtime() || bn.is_runtime() || ak.is_runtime() || bk.extent != bn.extent || ak.extent != bk.extent)
    return 0;
  const int64_t k = bk.extent;
  if (k % chain::kSlotRows != 0 || k < kChainMinK || k > kChainMaxK) return 0;
  const MatmulChoice choice = choose_matmul(g, matmul);
  if (!choice.fold_batch || choice.rows_min > chain::kMaxRows) return 0;
  input = norm == ir::kNoValue ? matmul.args[0] : g.node(norm).args[0];
  rows_max = choice.rows_max;
  return k;
}

}  // namespace

int64_t chain_row_groups(int64_t k, int64_t max_rows) {
  if (max_rows <= chain::kMaxRows || k > chain::kGroupMaxK) return 0;
  const int64_t groups = std::min<int64_t>(chain::kMaxGroups, (max_rows + chain::kMaxRows - 1) / chain::kMaxRows);
  return (k / chain::group_cols_for(static_cast<int>(k), static_cast<int>(groups))) * groups <= chain::kBlocks ? groups
                                                                                                           : 0;
}

int64_t chain_kernel_count(const plan::Chain& c) { return c.row_groups > 1 ? 2 : 1; }

uint64_t chain_tensor_maps_at(const plan::Chain& c, int64_t kernel) {
  const uint64_t exchange = (chain_exchange_bytes(c.k, c.row_groups) + chain::kTensorMapBytes - 1) / chain::kTensorMapBytes *
                            chain::kTensorMapBytes;
  return exchange + static_cast<uint64_t>(kernel * (c.last - c.first + 1)) * chain::kTensorMapBytes;
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
