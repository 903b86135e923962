// chain_kernel (chain_kernel.h): a plan chain's persistent kernel.
// 1. The weights: each step's b, a [K, K] param; the kernel copies them slot
//    by slot through one tensor map per step (kernel_table.h TensorMap),
//    boxes of chain::kSlotRows rows of the block's columns, which the runtime
//    encodes into the chain's scratch when a session starts.
// 2. The launch: a grid of K / C x groups blocks of chain::kLaunchThreads, every
//    block resident at once (a cooperative kernel), with the shared memory
//    of gdl::chain::Layout<K, C>; it runs while the rows lie in
//    [min_rows, max_rows] (the steps' own kernels serve the other runs).
// 3. The text: the chain object over its tensor maps and exchange area, the
//    producer warp's return (it streams the weights before any wait), the
//    wait for the kernels before it, then every step as a block of its own
//    (StepEmitter, Variant::kChainStep): the step's dims, scalars, pointers,
//    prologue and epilogue around the chain's step call.
#include "codegen/chain_kernel.h"

#include <set>

#include "codegen/cuda_text.h"
#include "codegen/step_emitter.h"
#include "internal_error.h"
#include "plan/chains.h"
#include "plan/kernel_choice.h"

namespace gdl {
namespace {

// Whether a chain step's norm prologue takes its rows' statistics from the
// partial sums the blocks store in the step before (above the chain's
// mailbox K): a norm with a weight or a bias operand, which the kernel does
// not fold into its mma (MatmulChain::fold_of; a weight or bias that is a
// constant one or zero counts here too, which only costs the stores).
bool chain_norm_reads_partial_stats(const ir::Graph& g, const plan::Step& step) {
  const ir::ValueId norm = matmul_prologue(g, step.values);
  return norm != ir::kNoValue && g.node(norm).args.size() > 1;
}

}  // namespace

std::string chain_kernel(const plan::Plan& p, size_t c, int64_t groups, const std::map<ir::ValueId, int>& scalar_slot,
                         int sm, std::vector<Kernel>& out) {
  const plan::Chain& chain = p.chains[c];
  const ir::Graph& g = p.graph;
  std::vector<uint64_t> weights;  // params offsets
  DType dtype = DType::kF16;
  Shape rows;
  for (int s = chain.first; s <= chain.last; ++s) {
    const plan::Step& step = p.steps[static_cast<size_t>(s)];
    const ir::Node& matmul = g.node(step.values[matmul_prologue(g, step.values) == ir::kNoValue ? 0 : 1]);
    const plan::Buffer& b = p.buffers.at(static_cast<size_t>(matmul.args[1]));
    GDL_INTERNAL_ASSERT(matmul.op == ir::Op::kMatMul && b.region == plan::Region::kParams && b.terms.empty(),
                        "chain step " + std::to_string(s) + " is not a matmul with a param b at a fixed offset");
    dtype = matmul.type.dtype;
    rows = sub_shape(matmul.type.shape, 0, matmul.type.shape.size() - 1);
    weights.push_back(b.offset);
  }
  const int64_t cols = groups > 1 ? chain::group_cols_for(chain.k, groups) : chain::cols_for(chain.k);
  const std::string t = storage_type(dtype), k = std::to_string(chain.k), cols_text = std::to_string(cols);
  const uint32_t blocks = static_cast<uint32_t>(chain.k / cols);
  const uint64_t tensor_maps_offset = chain.scratch_offset + chain_tensor_maps_at(chain, chain_kernel_index(groups));
  Kernel info;
  info.symbol = "gdl_chain" + std::to_string(c) + (groups > 1 ? "_rows" + std::to_string(groups * chain::kMaxRows) : "");
  info.first_step = chain.first;
  info.last_step = chain.last;
  info.rows = rows;
  info.min_rows = groups > 1 ? chain::kMaxRows + 1 : 0;
  info.max_rows = groups * chain::kMaxRows;
  info.launch.work = {Dim::constant(blocks)};  // a grid of exactly blocks x groups
  info.launch.items_per_block = 1;
  info.launch.grid_y = static_cast<uint32_t>(groups);
  info.launch.block = chain::kLaunchThreads;
  info.launch.shared_bytes = chain::shared_bytes(chain.k, cols);
  info.cooperative = true;
  for (size_t i = 0; i < weights.size(); ++i) {
    // The producer copies a box of chain::kSlotRows rows of the block's
    // columns of each step's [K, K] weight (2-byte elements, moved as bits),
    // swizzled as gdl::chain::tile_at lays out rows of 2 C bytes.
    TensorMap m;
    m.scratch_offset = tensor_maps_offset + i * kTensorMapBytes;
    m.params_offset = weights[i];
    m.element_bytes = 2;
    m.columns = m.rows = static_cast<uint64_t>(chain.k);
    m.row_stride_bytes = static_cast<uint64_t>(chain.k) * 2;
    m.box_columns = static_cast<uint32_t>(cols);
    m.box_rows = static_cast<uint32_t>(chain::kSlotRows);
    m.swizzle_bytes = cols * 2 >= 32 ? static_cast<uint32_t>(cols * 2) : 0;  // 16-byte rows need none
    info.tensor_maps.push_back(m);
  }
  std::string src = "// steps " + std::to_string(chain.first) + "-" + std::to_string(chain.last) +
                    " as one persistent kernel (gdl_chain.cuh), launched in place of their kernels while the rows are " +
                    (groups > 1 ? std::to_string(info.min_rows) + " to " : "at most ") +
                    std::to_string(info.max_rows) + ": " + std::to_string(blocks) + " x " +
                    std::to_string(groups) + " blocks of " + std::to_string(chain::kLaunchThreads) + " (" + cols_text +
                    " columns of " + std::to_string(chain::kMaxRows) + " rows each), all resident (cooperative launch)\n";
  src += "extern \"C\" __global__ void __launch_bounds__(" + std::to_string(chain::kLaunchThreads) + ", 1) " + info.symbol +
         kKernelParameters + " {\n";
  src += "  extern __shared__ __align__(128) unsigned char chain_smem[];\n";
  src += "  static_assert(gdl::chain::Layout<" + k + ", " + cols_text + ">::bytes == " +
         std::to_string(info.launch.shared_bytes) + ", \"the shared memory gdlc asks the launch for\");\n";
  src += "  static_assert(gdl::chain::exchange_bytes(" + k + ", " + std::to_string(groups) +
         ") <= " + std::to_string(chain_exchange_bytes(chain.k, chain.row_groups)) +
         "ull, \"the exchange area gdlc planned\");\n";
  src += "  // the steps' weights through the tensor maps the runtime wrote (params +";
  for (size_t i = 0; i < weights.size(); ++i) src += " " + std::to_string(weights[i]);
  src += ")\n";
  src += "  gdl::MatmulChain<" + t + ", " + k + ", " + cols_text + "> chain(arena + " +
         std::to_string(tensor_maps_offset) + "ull, " + std::to_string(weights.size()) + ", arena + " +
         std::to_string(chain.scratch_offset) + "ull, chain_smem);  // its tensor maps, its exchange area\n";
  src += "  if (chain.produce()) return;  // the producer warp streams the weights, before any wait (gdl_abi.cuh)\n";
  src += "  gdl::wait_for_producers();\n";
  std::set<int> scalars;
  for (int s = chain.first; s <= chain.last; ++s) {
    StepEmitter step(p, static_cast<size_t>(s), scalar_slot, sm, Variant::kChainStep, s - chain.first,
                     s < chain.last && chain_norm_reads_partial_stats(g, p.steps[static_cast<size_t>(s) + 1]));
    src += step.emit_chain_step();
    scalars.insert(step.scalars_used().begin(), step.scalars_used().end());
    info.depends_on_dims |= step.uses_dims();
  }
  info.scalars_used.assign(scalars.begin(), scalars.end());
  info.depends_on_dims = true;  // the rows decide whether it runs
  src += "}\n";
  out.push_back(std::move(info));
  return src;
}

}  // namespace gdl
