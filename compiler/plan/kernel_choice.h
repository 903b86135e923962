// Which stdlib kernel computes a matmul or an attention step, how it splits
// its work across blocks, and the scratch memory that split needs. The
// planner reserves the scratch (plan::Step::scratch) and codegen emits the
// call; both ask here, so they always agree.
#pragma once

#include <cstdint>
#include <limits>
#include <vector>

#include "ir.h"

namespace gdl {

// Blocks of the matmul kernels (256 threads, about 128 registers) that
// reside on one multiprocessor, and of the attention kernel.
inline constexpr int64_t kMatmulBlocksPerSM = 2;
inline constexpr int64_t kAttentionBlocksPerSM = 3;
// Row counts up to this take the memory-bound rows kernel (gdl::matmul_rows):
// f32, and f16/bf16 up to kMatmulRowsLimitTensorCores (tensor-core tiles above).
inline constexpr int64_t kMatmulRowsLimit = 16;
inline constexpr int64_t kMatmulRowsLimitTensorCores = 1;
inline constexpr int kMaxSplits = 16;           // K splits of one matmul output tile
inline constexpr int kMaxClusterSplits = 8;     // the portable cluster size
inline constexpr int kAttentionMaxSplits = 64;  // == gdl::kAttentionMaxSplits (gdl_attention.cuh)
inline constexpr uint64_t kMaxScratchBytes = uint64_t{64} << 20;  // fewer splits rather than more scratch

// Output tiles of gdl::matmul_simt and the largest of gdl::matmul_mma
// (gdl_matmul.cuh), which also takes 16 and 32 rows (MatmulChoice::tile_m).
inline constexpr int64_t kMatmulTileRows = 64, kMatmulTileCols = 128;
inline constexpr int64_t kMatmulMmaBK = 32;  // K positions per stage of gdl::matmul_mma (mm::kMmaBK)
inline constexpr int kMaxMmaStages = 6;      // stage buffers of gdl::matmul_mma
// Columns of b per block of gdl::matmul_rows: 128 bytes (8 threads x 16 bytes).
int64_t matmul_strip_columns(DType t);

enum class MatmulKernel : uint8_t {
  kGeneral,  // gdl::matmul: any dtype; the only one for i32 and bool
  kRows,     // gdl::matmul_rows: few rows against a shared b (f32, f16, bf16)
  kMma,      // gdl::matmul_mma: tensor cores (f16, bf16)
  kSimt,     // gdl::matmul_simt: f32 FMA
};
const char* matmul_kernel_name(MatmulKernel k);  // "general", "rows", "mma", "simt"

// Scratch of a kernel that splits output tiles across blocks: `tickets`
// counters (zero between launches, never shared with another step) and
// `partial_floats` floats of partial tiles (written before they are read in
// every launch, so steps that never run at the same time may share them).
struct SplitScratchSize {
  int64_t tickets = 0;
  int64_t partial_floats = 0;
  uint64_t ticket_bytes() const;   // rounded up to 256; 0 when nothing is split
  uint64_t partial_bytes() const;  // rounded up to 256; 0 when nothing is split
};

struct MatmulChoice {
  // b has no batch extents of its own (every batch dim of b is 1): the batch
  // of a folds into its rows, a [rows, K] @ b [K, N].
  bool fold_batch = false;
  // M, times the batch when folded, over every binding (or those of the band
  // the choice was asked for).
  int64_t rows_min = 0, rows_max = 0;
  // The rows kernel serves bindings with at most kMatmulRowsLimit rows (f32)
  // or kMatmulRowsLimitTensorCores (f16, bf16), the tiled kernels the others
  // (a kernel per band of matmul_tile_bands); the runtime picks per run.
  bool use_rows = false, use_tiles = true;
  MatmulKernel tiles = MatmulKernel::kGeneral;
  int row_tile = 1;        // rows held in registers by the rows kernel (MR)
  int rows_splits = 1;     // K splits of the rows kernel
  int tile_splits = 1;     // K splits of the tiled kernel (kMma, kSimt)
  // The tiled kernel's tile rows (kMma: 16, 32 or 64; kSimt: 64), and for
  // kMma its stage buffers and their dynamic shared memory
  // (gdl::MmaTile<tile_m>::bytes(mma_stages, transposed b)).
  int tile_m = static_cast<int>(kMatmulTileRows);
  int mma_stages = 0;
  uint32_t mma_shared_bytes = 0;
  // The tensor-core kernel's splits of one tile form a thread-block cluster
  // (2 to kMaxClusterSplits blocks, b shared, at most a block per
  // multiprocessor in the launch): the parts stay in shared memory and need
  // no scratch (gdl_matmul.cuh, cluster split).
  bool tile_cluster = false;
  bool rows_cluster = false;  // the same for the rows kernel's splits of one strip
  SplitScratchSize scratch;  // shared by both kernels: only one runs per launch
};
// Rows [lo, hi] of a matmul (folded rows when b is shared).
struct RowsBand {
  int64_t lo = 0, hi = std::numeric_limits<int64_t>::max();
};
// The choice at every binding, or (band) at the bindings whose rows lie in
// the band: a kernel of the step that serves only those (codegen emits one
// per band of matmul_tile_bands, the runtime picks it by the run's rows).
MatmulChoice choose_matmul(const ir::Graph& g, const ir::Node& matmul, RowsBand band = {});
// The row bands of a matmul's tiled kernels, ascending, each served by a
// kernel chosen at its largest rows: with b shared, one per tensor-core
// tile height ((16, 32] for 32 rows; the rows kernel takes 16 and fewer),
// then (32, 64], (64, 128], ... until a band's tiles need no K split, so
// that a run's tiles hold its rows and its K splits fill the GPU at its
// rows, not at the largest; otherwise (b batched) one band, the whole
// tiled range. Empty when only the rows kernel runs.
std::vector<RowsBand> matmul_tile_bands(const ir::Graph& g, const ir::Node& matmul);

// cuBLASLt for a matmul step's product (kernel_table.h LibraryMatmul), in
// front of a generated kernel that applies the step's epilogue, for the
// runs above the rows the weight-streaming rows kernel takes
// (library_matmul_rows_above: f16/bf16 from 2 rows, f32 from 17), where
// the generated code would run its tiles: there cuBLASLt's kernels (wgmma
// and TMA on sm_90, chosen per GPU by its heuristic) outrun the generated
// tiles (K = N = 2048 f16 at 2 to 16 rows: 12.4-12.8 us against
// 14.1-14.9 on an H100, docs/performance.md);
// GDL_MATMUL_LIBRARY_ROWS_ABOVE=N moves the line for A/B runs. A norm
// fused in front of the matmul runs as a kernel of its own before the
// call, writing the normalized rows into the scratch.
// Possible for an f16, bf16 or f32 matmul whose b is shared by the batch
// (folded into the rows), a not transposed under a norm prologue, K,
// N and the stored rows' lengths static, no dim of the rows that only node
// updates can serve; the runtime takes it where the session serves the
// rows by buckets (a graph's captured call keeps its shape).
// GDL_MATMUL_LIBRARY=0 turns it off.
int64_t library_matmul_rows_above(DType t);
inline constexpr uint64_t kLibraryMatmulWorkspaceBytes = uint64_t{32} << 20;  // cuBLAS's advice for Hopper
struct LibraryMatmulChoice {
  bool possible = false;
  int64_t min_rows = 0;         // the runs it serves: from these rows up
  int64_t rows_max = 0;         // the product's rows at the largest binding
  uint64_t product_bytes = 0;   // [rows_max, N] in the matmul's dtype, rounded up to 256
  uint64_t normalized_bytes = 0;  // a norm prologue's rows, [rows_max, K], rounded up to 256 (0: none)
  // In the step's scratch: the product, the workspace, then the normalized
  // rows (offsets from the scratch's start).
  uint64_t workspace_at() const { return product_bytes; }
  uint64_t normalized_at() const { return product_bytes + kLibraryMatmulWorkspaceBytes; }
  uint64_t scratch_bytes() const { return possible ? normalized_at() + normalized_bytes : 0; }
};
// For the step computing `values` (a matmul first, else not possible).
LibraryMatmulChoice choose_library_matmul(const ir::Graph& g, const std::vector<ir::ValueId>& values);

// The ring of gdl::attention_stream: about this many bytes of stages per
// block (2 to 8 stages), so that several blocks share a multiprocessor.
inline constexpr int64_t kAttentionStreamRingBytes = 96 * 1024;
// Query heads of one k/v head that a streamed attention task takes together.
inline constexpr int64_t kAttentionMaxStreamHeads = 4;
inline constexpr int64_t kAttentionStreamHeadsDims = 512;  // head dims of a task's heads together
// Query heads of one k/v head that a gdl::attention_group task takes: the 16 rows of an mma tile.
inline constexpr int64_t kAttentionMaxGroupHeads = 16;
// gdl::attention_prefill: warps of a block, each taking 16 rows of a task.
inline constexpr int64_t kAttentionPrefillWarps = 4;
// Its ring: about this many bytes of stages (two to four), so that three
// blocks share a multiprocessor.
inline constexpr int64_t kAttentionPrefillRingBytes = 64 * 1024;
// Stages of its row a gdl::attention_group split takes at least, at run time:
// two, the fewest whose copies overlap the math of a stage. A one-stage
// split exposes its copy's latency and still pays a ticket and a combine
// (the sweep's graph device time on the H100 at least 1 / 2 / 4 stages, one
// sequence, 32 query heads over 8 KV heads, head dim 64: 128 positions
// 11.0 / 9.7 / 9.8 us, 1000 positions 12.1 / 11.9 / 13.1).
inline constexpr int64_t kAttentionLeastSplitStages = 2;
// Tiled kernels of one matmul step at most (matmul_tile_bands): the last
// band serves every run above it, with the K splits of the largest rows.
inline constexpr int64_t kMaxTileBands = 5;

struct AttentionChoice {
  int splits = 1;  // gdl::attention_split: blocks per row of q, each taking a range of positions
  // gdl::attention_stream, possible when the head dims are static and each
  // row of k and v is 8 to 32 whole 16-byte vectors; codegen takes it when k
  // and v are also 16-byte aligned. 0 when not possible.
  int stream_splits = 0;
  int stream_heads = 1;              // query rows per task, sharing each stage (grouped-query attention)
  int stream_stages = 0;             // stages of its ring
  int stream_positions = 0;          // positions of k and v per stage
  uint32_t stream_shared_bytes = 0;  // the ring: == gdl::AttentionStream<D, DV, T, positions, stages>::bytes
  bool stream_early = false;         // over a param KV cache, copies before the wait (KV_EARLY; GDL_ATTENTION_KV_EARLY=1)
  // gdl::attention_group (gdl_attention_group.cuh), the query heads of a k/v
  // head on tensor cores: possible for f16/bf16 with static head dims that
  // are multiples of 64 (up to 256) and at least two query heads a k/v head,
  // unless GDL_ATTENTION_GROUPED=0 (kernel_choice.cc); codegen takes
  // it before the others when q, k and v are 16-byte aligned and the target
  // has cp.async and ldmatrix (sm_80). 0 when not possible.
  int group_splits = 0;
  int group_heads = 0;               // query rows per task (HEADS)
  int group_stages = 0;              // stages of its ring
  int group_positions = 0;           // positions of k and v per stage (P)
  int group_least_split_stages = kAttentionLeastSplitStages;  // stages a split of a row takes at least, at run time (a shorter row, fewer splits)
  uint32_t group_shared_bytes = 0;   // == gdl::AttentionGroup<D, DV, T, P, stages, heads>::bytes
  // gdl::attention_prefill (gdl_attention_prefill.cuh), blocks of causal
  // queries on tensor cores: possible for f16/bf16 with static head dims of
  // 64 or 128 and static heads (over a paged cache, a stage of 16 to 64
  // positions dividing its block), where the
  // tasks fill the GPU (kernel_choice.cc; GDL_ATTENTION_PREFILL); codegen
  // takes it before the others when q, k and v are 16-byte aligned and the
  // target has sm_80. 0 when not possible.
  int prefill_query_block = 0;        // queries a task takes (QB), times the group's heads: its rows
  int prefill_positions = 0;          // positions of k and v per stage (P)
  int prefill_stages = 0;             // stages of its ring
  uint32_t prefill_shared_bytes = 0;  // == gdl::AttentionPrefill<D, DV, T, P, stages, warps>::bytes
  SplitScratchSize scratch;  // enough for any of the kernels
};
AttentionChoice choose_attention(const ir::Graph& g, const ir::Node& attention);

// A paged_attention over a ragged batch of tokens (its `sequence` form) in
// two steps (passes/ragged_attention.h): the decode kernels for most
// tokens, and gdl::attention_prefill for the blocks of `block` consecutive
// tokens of one sequence (prompt chunks), which read each stage of the
// cache once for all of them; `block` is the prefill kernel's query block
// (its 16 * warps rows over the group's heads). Both decide at run time
// which tokens are whose (gdl::SharedTokenBlocks): a whole block of one
// sequence goes to the prefill kernel when the step has at least
// min_tokens valid tokens, enough for a task per multiprocessor if they
// were all such blocks (the prefill kernel has no splits). Possible where
// the prefill kernel is (f16/bf16 heads of 64 or 128, static heads, a
// cache block of a multiple of 16 positions, GDL_ATTENTION_PREFILL not 0)
// and the step can hold min_tokens tokens; block 0 otherwise.
struct SharedTokenBlocksChoice {
  int64_t block = 0, min_tokens = 0;
};
SharedTokenBlocksChoice choose_shared_token_blocks(const ir::Graph& g, const ir::Node& paged_attention);

// Whether the tensor-core kernels over blocks of query rows
// (gdl::attention_prefill and the derivative's three kernels,
// gdl_attention_backward.cuh) can compute attention of dtype t: f16/bf16
// heads (D, DV) of 64 or 128 with 1 to a task's 16 *
// kAttentionPrefillWarps rows of query heads a k/v head (`group`).
// vjp_attention builds the derivative's kernels where they can, and its
// matmuls otherwise.
bool attention_blocks_fit(DType t, int64_t d, int64_t dv, int64_t group);
struct AttentionBackwardChoice {
  int query_block = 0;        // queries a task of the stats and q kernels takes (times the group's heads: its rows)
  int positions = 0;          // P: positions of k and v (stats, q) or query rows (kv) a stage holds
  int stages = 0;             // stages of its ring
  uint32_t shared_bytes = 0;  // == gdl::AttentionBackward<D, DV, T, P, stages, warps>::{stats,q,kv}_bytes
};
// For an attention_stats, attention_grad_q or attention_grad_kv node.
AttentionBackwardChoice choose_attention_backward(const ir::Graph& g, const ir::Node& n);

// argmax, argmin and topk along the last axis (gdl_select.cuh, one block
// per row): the parts each row is read in, by as many blocks, where the
// rows at their fewest leave the GPU idle (fewer than its
// multiprocessors). At the longest row each part reads at least
// kSelectPartElements elements and keeps its best (topk: its k best, k <=
// 256, at most a sixteenth of the part) in the scratch; the last part to
// arrive picks the row's from those. parts = ceil(multiprocessors *
// kSelectBlocksPerSM / rows) at the fewest rows, or fewer, as the rule
// above and the scratch (within kMaxScratchBytes) allow. Where the rows
// can also fill the GPU, a second kernel serves the runs of
// `whole_rows_from` rows or more with one block a row (the runtime picks
// it by rows, kernel_table.h), so the scratch holds the parts of the fewer
// rows only. parts 1 (no scratch) otherwise, or with GDL_SELECT_SPLIT=0
// (an experiment knob).
inline constexpr int64_t kSelectPartElements = 4096;
inline constexpr int64_t kSelectBlocksPerSM = 4;
struct SelectionChoice {
  int parts = 1;
  int64_t whole_rows_from = 0;  // 0: no second kernel
  SplitScratchSize scratch;
};
SelectionChoice choose_selection(const ir::Graph& g, const ir::Node& selection);

// A layernorm or rmsnorm run as the prologue of a matmul (gdl_matmul.cuh)
// reads the rows of the norm's input again for their statistics: the rows
// kernel once per block, the tiled kernels once per output tile (the split
// parts of a tile share the work). This is that re-read in bytes at the
// largest binding, over whichever kernel reads more (fuse.cc fuses the norm
// only when it is small); 0 when the kernel takes no prologue (the general
// kernel).
uint64_t prologue_reread_bytes(const ir::Graph& g, const ir::Node& matmul);

// The norm fused in front of a step's matmul: values[0] when it is a
// layernorm or rmsnorm and values[1] a matmul whose a it is; else kNoValue.
ir::ValueId matmul_prologue(const ir::Graph& g, const std::vector<ir::ValueId>& values);

// The scratch of the kernel of a step computing `values` (its anchor, a
// matmul, an attention or a selection, comes first, after a norm prologue if it has one);
// all zero when it needs none.
SplitScratchSize step_scratch(const ir::Graph& g, const std::vector<ir::ValueId>& values);

}  // namespace gdl
