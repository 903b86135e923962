// Kernel choice for matmul and attention steps.
//
// choose_matmul:
// 1. Rows: when every batch dim of b is 1, b is shared and the batch of a
//    folds into its rows; rows_min / rows_max are the row count at every
//    run-time dim's lower / upper bound.
// 2. Kernels: non-float dtypes take the general kernel. Floats take the
//    rows kernel when b is shared and some binding has at most
//    rows_limit rows (f32: kMatmulRowsLimit; f16, bf16: one, above which
//    the tensor cores are faster), and the tiled kernel (tensor cores for
//    f16 and bf16, FMA for f32) when some binding has more, or when b is
//    batched.
// 3. Tiles: the tensor-core kernel's tile has the fewest of 16, 32 or 64
//    rows that hold a batch entry's rows at the largest binding (64 above
//    that), so that 9 rows cost a 16-row tile's tensor-core work, not a
//    64-row one's (with b shared, a step has a tiled kernel per band of
//    rows, matmul_tile_bands, each chosen at its band's largest rows); its
//    stage buffers fill the dynamic shared memory that
//    kMatmulBlocksPerSM blocks leave each other on g.target's
//    multiprocessor (2 to kMaxMmaStages: more copies in flight while the
//    rows are few and the weights stream).
// 4. Splits: a kernel's output tiles (rows kernel: 128-byte column strips
//    of b; tiled kernels: tile_m x 128 tiles at the largest binding) are
//    multiplied by a K split count so that the launch has about
//    g.target.multiprocessors * kMatmulBlocksPerSM blocks, at most
//    kMaxSplits, and each split keeps at least kMinKPerSplit positions of
//    K. Then the count drops until the partial tiles fit
//    kMaxScratchBytes.
//    The tensor-core kernel's 2 to 8 splits of a tile with b shared run
//    as one thread-block cluster (tile_cluster) when the launch has at most
//    a block per multiprocessor; so do the rows kernel's splits of a strip
//    (rows_cluster).
// 5. Scratch: one ticket per tile and splits partial tiles, for whichever
//    kernel needs more (only one runs per launch); none for a cluster.
//
// choose_attention: f16/bf16 grouped-query attention with head dims of
// multiples of 64 takes gdl::attention_group (GDL_ATTENTION_GROUPED=0: never):
// a task is the query heads of one k/v head (up to 16), stages of 64
// positions (fewer over a paged cache, to divide its block), its splits
// aiming at the blocks its ring and registers let a multiprocessor hold.
// Otherwise, where the rows alone fill the GPU, the streamed
// kernel's tasks take the query heads of a k/v head together (up to
// kAttentionMaxStreamHeads of them), copying each stage of k and v once for
// all. For the split kernel, positions split into about
// g.target.multiprocessors * kAttentionBlocksPerSM / rows (at the lower bound)
// parts, at most kAttentionMaxSplits, each at least 64 positions long at the
// largest T. The streamed kernel is possible for static head dims whose
// rows are 8 to 32 whole 16-byte vectors; its ring (the layout of
// gdl::AttentionStream) sets how many blocks share a multiprocessor, and
// its splits aim at filling them, each at least a stage and 64 positions
// long; over a paged cache a stage also divides the block size (or the
// split kernel computes it). Causal queries of f16/bf16 heads of 64 or 128
// take gdl::attention_prefill where its tasks (a block of queries times the
// query heads of a k/v head) fill the GPU (choose_prefill).
// Scratch is one ticket per row and, per row and split, (max, sum)
// and DV partial sums, for the largest binding and the kernel with more
// splits.
#include "plan/kernel_choice.h"

#include <algorithm>
#include <cstdlib>
#include <numeric>
#include <string>

#include "frontend/diagnostics.h"
#include "internal_error.h"
#include "ops/attention.h"
#include "ops/matmul.h"
#include "ops/op_def.h"

namespace gdl {
namespace {

constexpr int64_t kRowsLanes = 8;  // gdl_matmul.cuh: mm::kRowLanes
constexpr int64_t kTileCols = kMatmulTileCols;
// Positions of K that one split part of a matmul keeps at least (rows and
// tiled kernels; four K steps of the tensor-core kernel, eight of the FMA
// one). 128 rather than 64: measured on the H200, W2 H=1024 (K =
// 1024, 8 parts instead of 16) f16 B=1 63.1 -> 60.7 us, B=8 74.5 -> 67.1,
// B=64 193 -> 181, f32 B=64 223 -> 213; the last part adds fewer partials.
constexpr int64_t kMinKPerSplit = 128;
constexpr int64_t kMinPositionsPerSplit = 64;  // attention

uint64_t align256(uint64_t n) { return (n + 255) / 256 * 256; }
int64_t ceil_div(int64_t a, int64_t b) { return (a + b - 1) / b; }

int64_t extent_at(const Dim& d, const ir::Graph& g, bool upper) {
  if (!d.is_runtime()) return d.extent;
  const DimInfo& info = g.dims.at(static_cast<size_t>(d.symbol));
  return upper ? info.hi : info.lo;
}

int64_t product_at(const Shape& s, size_t from, size_t to, const ir::Graph& g, bool upper) {
  int64_t n = 1;
  for (size_t i = from; i < to && i < s.size(); ++i) n *= std::max<int64_t>(0, extent_at(s[i], g, upper));
  return n;
}

int64_t pow2_at_least(int64_t n) {
  int64_t p = 1;
  while (p < n) p *= 2;
  return p;
}

// Rows of one batch entry of a tiled kernel (the batch folded in when b is
// shared), and its output tiles, at the largest binding.
int64_t entry_rows(const ir::Graph& g, const ir::Node& n, const MatmulChoice& c) {
  const Shape& rs = n.type.shape;
  return std::max<int64_t>(1, c.fold_batch ? c.rows_max : extent_at(rs[rs.size() - 2], g, true));
}
int64_t tile_count(const ir::Graph& g, const ir::Node& n, const MatmulChoice& c) {
  const Shape& rs = n.type.shape;
  const size_t batch_rank = rs.size() - 2;
  return (c.fold_batch ? 1 : product_at(rs, 0, batch_rank, g, true)) * ceil_div(entry_rows(g, n, c), c.tile_m) *
         ceil_div(std::max<int64_t>(1, extent_at(rs.back(), g, true)), kTileCols);
}

// gdl::MmaTile<tile_m>::bytes(stages, transposed_b) (gdl_matmul_common.cuh):
// the stage buffers, or the result tile that overlays them if larger.
uint32_t mma_shared_bytes(int tile_m, int stages, bool transposed_b) {
  const int64_t bk = kMatmulMmaBK, bn = kTileCols;
  const int64_t stage_a = std::max(tile_m * (bk + 8), bk * (tile_m + 8));
  const int64_t stage_b = transposed_b ? bn * (bk + 8) : bk * (bn + 8);
  return static_cast<uint32_t>(std::max(stages * (stage_a + stage_b) * 2, tile_m * (bn + 4) * 4));
}

// A positive count from the environment variable `name`; 0 when it is
// unset or not a positive number. Most callers read it once and keep it.
int64_t env_count(const char* name) {
  const char* text = std::getenv(name);
  const long long v = text ? std::atoll(text) : 0;
  return v >= 1 ? static_cast<int64_t>(v) : 0;
}

// GDL_MAX_SPLITS=N caps every split count (matmul K, attention positions)
// at N. An experiment knob, for measuring what the splits cost
// (docs/performance.md); unset, the choice below stands.
int64_t split_cap() {
  static const int64_t cap = [] {
    const int64_t v = env_count("GDL_MAX_SPLITS");
    return v >= 1 ? v : std::max<int64_t>(kMaxSplits, kAttentionMaxSplits);
  }();
  return cap;
}

// GDL_ATTENTION_STREAM=0 leaves every attention to the split kernel,
// GDL_ATTENTION_KV_EARLY=1 lets the streamed kernel issue its first copies
// of a param KV cache before it waits (they assume every position valid:
// right only when the length is the cache's, wasted copies below it; off
// by default, docs/performance.md),
// GDL_ATTENTION_RING_KIB=N sets the streamed kernel's ring to about N KiB
// and GDL_ATTENTION_STAGE_POSITIONS=N the positions of a stage;
// GDL_ATTENTION_SPLITS=N asks for N splits of a row (within the same caps).
// Experiment knobs like the one above, for A/B runs of the kernels.
bool env_is(const char* name, const char* value) {
  const char* text = std::getenv(name);
  return text && std::string(text) == value;
}
bool attention_stream_allowed() {
  static const bool allowed = !env_is("GDL_ATTENTION_STREAM", "0");
  return allowed;
}
bool attention_kv_early_allowed() {
  static const bool allowed = env_is("GDL_ATTENTION_KV_EARLY", "1");
  return allowed;
}
int64_t attention_stage_positions() {
  static const int64_t n = env_count("GDL_ATTENTION_STAGE_POSITIONS");
  return n;
}
// GDL_ATTENTION_HEADS=N caps the query heads of a streamed attention task
// (1: each head streams its own k and v, an A/B of the grouping).
int64_t attention_heads_cap() {
  static const int64_t n = env_count("GDL_ATTENTION_HEADS");
  return n >= 1 ? std::min<int64_t>(n, kAttentionMaxStreamHeads) : kAttentionMaxStreamHeads;
}
// Which attention steps take gdl::attention_group: those with two or more
// query heads a k/v head; GDL_ATTENTION_GROUPED (read at every choice, so
// that a test can set it) "0" none, "all" single heads too. Measured on the
// H200 (bench/sweep.sh, 32 query heads over 8, against the streamed
// kernel): 16 sequences at 32768 positions 980 -> 257 us (head dim 64) and
// 1127 -> 498 (128), one sequence at 32768 82 -> 36 and 89 -> 53; one
// sequence up to 4096 positions 1.1-1.6x slower (128 positions 9.6 -> 14.7
// us), the only rows where it lost.
enum class GroupedAttention { kNone, kGroups, kAll };
GroupedAttention grouped_attention() {
  if (env_is("GDL_ATTENTION_GROUPED", "all")) return GroupedAttention::kAll;
  if (env_is("GDL_ATTENTION_GROUPED", "0")) return GroupedAttention::kNone;
  return GroupedAttention::kGroups;
}
int64_t attention_splits_wanted() {
  static const int64_t n = env_count("GDL_ATTENTION_SPLITS");
  return n;
}
// GDL_ATTENTION_LEAST_SPLIT_STAGES=N: the group kernel's splits take at
// least N stages of a row at run time instead of kAttentionLeastSplitStages
// (read at each choice, so a test can set it around a compile).
int64_t attention_least_split_stages() {
  const int64_t n = env_count("GDL_ATTENTION_LEAST_SPLIT_STAGES");
  return n > 0 ? n : kAttentionLeastSplitStages;
}
// The most rows the rows kernel takes: f32 (FMA alone, no tensor cores)
// kMatmulRowsLimit; f16/bf16 one (kMatmulRowsLimitTensorCores), above it
// the 16-row tensor-core tiles (measured on the H200, K = N = 4096 bf16:
// the rows kernel 26.5 us at 2 rows, 49.8 at 16; the tiles 19.6 and 20.8;
// bench/sweep.sh). GDL_MATMUL_ROWS_LIMIT=N (1 to 16) sets the f16/bf16
// limit instead, an experiment knob for A/B runs of the two kernels.
int64_t rows_limit(DType t) {
  static const int64_t knob = std::min(env_count("GDL_MATMUL_ROWS_LIMIT"), kMatmulRowsLimit);
  if (t == DType::kF32) return kMatmulRowsLimit;
  return knob >= 1 ? knob : kMatmulRowsLimitTensorCores;
}

int64_t attention_ring_bytes() {
  static const int64_t bytes = [] {
    const int64_t kib = env_count("GDL_ATTENTION_RING_KIB");
    return kib >= 1 ? kib * 1024 : kAttentionStreamRingBytes;
  }();
  return bytes;
}

// The stages of a streamed attention kernel's ring of `stage` bytes each:
// about attention_ring_bytes() of them, 2 to 12, leaving 8 KiB of the
// multiprocessor's shared memory for the block's static shared memory (a
// large ring, by the knob).
int64_t ring_stages(int64_t stage, int64_t shared_per_sm) {
  int64_t stages = std::clamp<int64_t>(attention_ring_bytes() / stage, 2, 12);
  while (stages > 2 && stages * stage > shared_per_sm - 8 * 1024) --stages;
  return stages;
}

// Whether the `splits` K splits of each of `units` output tiles (or rows
// kernel strips) run as one thread-block cluster: 2 to kMaxClusterSplits
// of them, and only where every block of the launch can have a
// multiprocessor of its own. Measured on the H200, W2 H=1024 B=64 (64
// blocks) went from 137 to 85 us with clusters, but H=4096 B=64 (256
// blocks in 32 clusters of 8) from 317 to 333 (f16) and 357 to 381 us
// (bf16), presumably because fewer clusters of 8 than that fit the GPCs at
// once. A cluster's blocks are consecutive along grid.y, which then holds
// every part (below 65535, so never folded into the work).
bool split_as_cluster(const ir::Graph& g, int splits, int64_t units) {
  return splits > 1 && splits <= kMaxClusterSplits && units * splits <= g.target.multiprocessors;
}

// Splits of `tiles` output tiles: about the blocks that fill the GPU, at
// most `most`, at least one.
int split_count(int64_t tiles, int64_t blocks_wanted, int64_t most) {
  int64_t s = blocks_wanted / std::max<int64_t>(1, tiles);
  return static_cast<int>(std::clamp<int64_t>(std::min({s, most, split_cap()}), 1, kMaxSplits));
}

}  // namespace

int64_t matmul_strip_columns(DType t) { return kRowsLanes * (16 / static_cast<int64_t>(dtype_size(t))); }

const char* matmul_kernel_name(MatmulKernel k) {
  switch (k) {
    case MatmulKernel::kGeneral: return "general";
    case MatmulKernel::kRows: return "rows";
    case MatmulKernel::kMma: return "mma";
    case MatmulKernel::kSimt: return "simt";
  }
  return "general";
}

uint64_t SplitScratchSize::ticket_bytes() const { return align256(static_cast<uint64_t>(tickets) * 4); }
uint64_t SplitScratchSize::partial_bytes() const { return align256(static_cast<uint64_t>(partial_floats) * 4); }

MatmulChoice choose_matmul(const ir::Graph& g, const ir::Node& n, RowsBand band) {
  GDL_INTERNAL_ASSERT(n.op == ir::Op::kMatMul && n.args.size() == 2, "choose_matmul on a node that is not a matmul");
  const Shape as = ops::matmul_a_shape(g, n), bs = ops::matmul_b_shape(g, n);  // as the matmul reads them
  const Shape& rs = n.type.shape;
  GDL_INTERNAL_ASSERT(as.size() >= 2 && bs.size() >= 2 && rs.size() >= 2, "matmul operands of rank < 2");
  MatmulChoice c;
  // 1. rows
  // The batch folds into the rows when b is shared by every batch entry and
  // a's rows follow one another in memory (a transposed a holds a batch
  // entry's rows as columns: folded, row r of entry e is not row e * M + r).
  const size_t batch_rank = rs.size() - 2;
  const int64_t batch_max = product_at(rs, 0, batch_rank, g, true);
  c.fold_batch = std::all_of(bs.begin(), bs.end() - 2, [](const Dim& d) { return !d.is_runtime() && d.extent == 1; }) &&
                 (batch_max == 1 || !ops::matmul_layout(n).transpose_a);
  const Dim& m = rs[batch_rank];
  c.rows_min = extent_at(m, g, false) * (c.fold_batch ? product_at(rs, 0, batch_rank, g, false) : 1);
  c.rows_max = extent_at(m, g, true) * (c.fold_batch ? batch_max : 1);
  c.rows_min = std::max(c.rows_min, band.lo);  // a band inside the rows
  c.rows_max = std::max(c.rows_min, std::min(c.rows_max, band.hi));
  const int64_t n_max = extent_at(rs.back(), g, true);
  const int64_t k_max = extent_at(as.back(), g, true);
  const DType t = n.type.dtype;

  // 2. kernels
  if (!is_float(t)) {
    c.use_rows = false;
    c.use_tiles = true;
    c.tiles = MatmulKernel::kGeneral;
    return c;
  }
  c.use_rows = c.fold_batch && c.rows_min <= rows_limit(t);
  c.use_tiles = !c.use_rows || c.rows_max > rows_limit(t);
  c.tiles = t == DType::kF32 ? MatmulKernel::kSimt : MatmulKernel::kMma;

  // 3. tiles
  if (c.use_tiles && c.tiles == MatmulKernel::kMma) {
    const int64_t rows = entry_rows(g, n, c);
    c.tile_m = rows <= 16 ? 16 : rows <= 32 ? 32 : 64;
    // A block's share of the multiprocessor's shared memory, less its static
    // part (the fold's tile, about 4 KiB) and the 1 KiB the driver keeps per block.
    const int64_t budget = g.target.shared_bytes_per_sm / kMatmulBlocksPerSM - 5 * 1024;
    const bool tb = ops::matmul_layout(n).transpose_b;
    c.mma_stages = kMaxMmaStages;
    while (c.mma_stages > 2 && mma_shared_bytes(c.tile_m, c.mma_stages, tb) > budget) --c.mma_stages;
    c.mma_shared_bytes = mma_shared_bytes(c.tile_m, c.mma_stages, tb);
  }

  // 4. splits
  const int64_t blocks_wanted = g.target.multiprocessors * kMatmulBlocksPerSM;
  const int64_t strip_cols = matmul_strip_columns(t);
  const int64_t strips = ceil_div(std::max<int64_t>(1, n_max), strip_cols);
  const int64_t rows_held = std::min(std::max<int64_t>(1, c.rows_max), rows_limit(t));
  const int64_t tiles = tile_count(g, n, c);  // at the largest binding
  if (c.use_rows) {
    c.row_tile = static_cast<int>(std::min<int64_t>(pow2_at_least(rows_held), t == DType::kF32 ? 16 : 8));
    c.rows_splits = split_count(strips, blocks_wanted, std::max<int64_t>(1, k_max / kMinKPerSplit));
    while (c.rows_splits > 1 &&
           static_cast<uint64_t>(c.rows_splits * strips * rows_held * strip_cols) * 4 > kMaxScratchBytes)
      --c.rows_splits;
    c.rows_cluster = split_as_cluster(g, c.rows_splits, strips);
  }
  if (c.use_tiles && c.tiles != MatmulKernel::kGeneral) {
    c.tile_splits = split_count(tiles, blocks_wanted, std::max<int64_t>(1, k_max / kMinKPerSplit));
    while (c.tile_splits > 1 &&
           static_cast<uint64_t>(c.tile_splits * tiles * c.tile_m * kTileCols) * 4 > kMaxScratchBytes)
      --c.tile_splits;
    c.tile_cluster = c.tiles == MatmulKernel::kMma && c.fold_batch && split_as_cluster(g, c.tile_splits, tiles);
  }

  // 5. scratch
  if (c.use_rows && c.rows_splits > 1 && !c.rows_cluster) {
    c.scratch.tickets = std::max(c.scratch.tickets, strips);
    c.scratch.partial_floats = std::max(c.scratch.partial_floats, c.rows_splits * strips * rows_held * strip_cols);
  }
  if (c.use_tiles && c.tile_splits > 1 && !c.tile_cluster) {
    c.scratch.tickets = std::max(c.scratch.tickets, tiles);
    c.scratch.partial_floats = std::max(c.scratch.partial_floats, c.tile_splits * tiles * c.tile_m * kTileCols);
  }
  return c;
}

std::vector<RowsBand> matmul_tile_bands(const ir::Graph& g, const ir::Node& n) {
  const MatmulChoice c = choose_matmul(g, n);
  if (!c.use_tiles) return {};
  const RowsBand tiled{c.use_rows ? rows_limit(n.type.dtype) + 1 : c.rows_min, c.rows_max};
  if (!c.fold_batch || c.tiles == MatmulKernel::kGeneral) return {{c.use_rows ? tiled.lo : 0, RowsBand{}.hi}};
  // Band edges: the tensor-core tile heights, then twice the rows each
  // time, while the band's tiles still leave room for K splits (their
  // count follows the tiles, which follow the rows: 48 rows must not split
  // as if they were 256).
  std::vector<RowsBand> bands;
  int64_t lo = c.tiles == MatmulKernel::kMma ? 1 : 17;
  for (int64_t hi = c.tiles == MatmulKernel::kMma ? 16 : 64; lo <= tiled.hi; lo = hi + 1, hi *= 2) {
    const RowsBand b{std::max(lo, tiled.lo), std::min(hi, tiled.hi)};
    if (b.lo > b.hi) continue;
    bands.push_back(b);
    if (hi >= kMatmulTileRows && choose_matmul(g, n, b).tile_splits == 1) break;  // the tallest tiles, split no further
    if (static_cast<int64_t>(bands.size()) == kMaxTileBands) break;  // each band is a kernel to compile
  }
  bands.back().hi = RowsBand{}.hi;         // the last band serves any run above it,
  if (!c.use_rows) bands.front().lo = 0;  // and the first, without a rows kernel, any below it
  return bands;
}

namespace {

// Which attention steps take gdl::attention_prefill: GDL_ATTENTION_PREFILL
// (read at every choice, so that a test can set it) "0" none, "all" every
// one it can compute, otherwise those whose tasks fill the GPU.
enum class PrefillAttention { kNone, kFilling, kAll };
PrefillAttention prefill_attention() {
  if (env_is("GDL_ATTENTION_PREFILL", "all")) return PrefillAttention::kAll;
  if (env_is("GDL_ATTENTION_PREFILL", "0")) return PrefillAttention::kNone;
  return PrefillAttention::kFilling;
}

// The prefill kernel's queries a task (its 16 * warps rows over the group's heads).
int64_t prefill_query_block(int64_t group) { return 16 * kAttentionPrefillWarps / group; }
// Its positions a stage: 64, over a paged cache of `block` positions halved
// until they divide it (a stage lies in one block), 0 where even 16 do not.
int64_t prefill_stage_positions(bool paged, int64_t block) {
  int64_t positions = 64;
  if (paged)
    while (positions > 16 && block % positions != 0) positions /= 2;
  return paged && block % positions != 0 ? 0 : positions;
}

// gdl::attention_prefill for causal queries of f16/bf16 heads of 64 or 128
// with `group` (static) query heads a k/v head, at most a task's rows. A
// task takes the group's heads of QB = rows / group queries; the kernel has
// no splits, so it is chosen where the tasks at the smallest binding give
// every multiprocessor one (fewer, and a long cache is better split over
// blocks by the decode kernels); for paged_attention_shared, whose tokens
// are its queries, that is a rule it applies at run time
// (choose_shared_token_blocks). Stages of 64 positions (over a paged cache
// halved until they divide its block), about kAttentionPrefillRingBytes of
// them.

void choose_prefill(const ir::Graph& g, const ops::AttentionOperands& a, int64_t esize, int64_t group,
                    AttentionChoice& c) {
  const PrefillAttention wanted = prefill_attention();
  const bool shared = a.partial != ir::kNoValue;
  const Shape& qs = g.node(a.q).type.shape;
  const Shape& ks = g.node(a.k).type.shape;
  const Dim& d = qs.back();
  const Dim& dv = g.node(a.v).type.shape.back();
  if (!(a.causal() || shared) || (wanted == PrefillAttention::kNone && !shared) || d.is_runtime() || dv.is_runtime() ||
      !attention_blocks_fit(g.node(a.q).type.dtype, d.extent, dv.extent, group))
    return;
  const int64_t query_block = prefill_query_block(group);
  const size_t query_axis = qs.size() - 3;
  const int64_t tasks_min = product_at(qs, 0, query_axis, g, false) * ks[ks.size() - 3].extent *
                            ceil_div(extent_at(qs[query_axis], g, false), query_block);
  if (wanted != PrefillAttention::kAll && !shared && tasks_min < g.target.multiprocessors) return;
  const int64_t positions = prefill_stage_positions(a.paged(), a.paged() ? ks[2].extent : 0);
  if (positions == 0) return;
  const int64_t stage = positions * (d.extent + dv.extent) * esize;
  const int64_t stages = std::clamp<int64_t>(kAttentionPrefillRingBytes / stage, 2, 4);
  c.prefill_query_block = static_cast<int>(query_block);
  c.prefill_positions = static_cast<int>(positions);
  c.prefill_stages = static_cast<int>(stages);
  c.prefill_shared_bytes = static_cast<uint32_t>(stages * stage);
}

}  // namespace

AttentionChoice choose_attention(const ir::Graph& g, const ir::Node& n) {
  const ops::AttentionOperands a = ops::attention_operands(n);
  const Shape& qs = g.node(a.q).type.shape;
  const Shape& ks = g.node(a.k).type.shape;
  const Shape& vs = g.node(a.v).type.shape;
  GDL_INTERNAL_ASSERT(qs.size() >= 2 && ks.size() >= 3 && vs.size() >= 3, "attention operand ranks");
  const int64_t rows_min = std::max<int64_t>(1, product_at(qs, 0, qs.size() - 1, g, false));
  const int64_t rows_max = std::max<int64_t>(1, product_at(qs, 0, qs.size() - 1, g, true));
  const int64_t t_max = std::max<int64_t>(1, extent_at(ops::attention_positions(g, n), g, true));
  const int64_t dv_max = std::max<int64_t>(1, extent_at(vs.back(), g, true));
  // Splits of at least `min_positions` positions aiming at `blocks` blocks
  // for tasks of `heads` rows each, within the scratch cap.
  auto splits_for = [&](int64_t blocks, int64_t min_positions, int64_t heads) {
    const int64_t most = std::min({int64_t{kAttentionMaxSplits}, ceil_div(t_max, min_positions), split_cap()});
    int64_t s = std::clamp<int64_t>(blocks / ceil_div(rows_min, heads), 1, std::max<int64_t>(1, most));
    while (s > 1 && static_cast<uint64_t>(rows_max * s * (2 + dv_max)) * 4 > kMaxScratchBytes) --s;
    return static_cast<int>(s);
  };
  AttentionChoice c;
  c.splits = splits_for(g.target.multiprocessors * kAttentionBlocksPerSM, kMinPositionsPerSplit, 1);

  const Dim& d = qs.back();
  const Dim& dv = vs.back();
  const Dim& nh = qs[qs.size() - 2];   // query heads
  const Dim& kvh = ks[ks.size() - 3];  // k/v heads
  const int64_t esize = static_cast<int64_t>(dtype_size(n.type.dtype));
  const bool float_type = n.type.dtype == DType::kF16 || n.type.dtype == DType::kBF16 || n.type.dtype == DType::kF32;
  const bool whole_vectors = !d.is_runtime() && !dv.is_runtime() && (d.extent * esize) % 16 == 0 &&
                             (dv.extent * esize) % 16 == 0;
  if (attention_stream_allowed() && float_type && whole_vectors) {
    // The layout of gdl::AttentionStream (gdl_attention.cuh).
    const int64_t qv = d.extent * esize / 16, vv = dv.extent * esize / 16;
    if (std::max(qv, vv) >= 8 && std::max(qv, vv) <= 32) {
      const int64_t lanes = pow2_at_least(std::max(qv, vv));
      // f16/bf16 heads of 64-256 take the tensor-core scores (att::StreamMma):
      // 16-row tiles shared by the 8 warps, 64 positions a stage by default.
      // The others take att::StreamLanes: 256 / lanes groups, 32 positions.
      const bool mma = esize == 2 && d.extent % 64 == 0 && dv.extent % 64 == 0;  // == att::StreamUsesMma
      const int64_t unit = mma ? 16 : 256 / lanes;
      const int64_t asked = attention_stage_positions() > 0 ? attention_stage_positions() : (mma ? 64 : 32);
      int64_t positions = mma ? std::min<int64_t>(pow2_at_least(std::max(asked, unit)), 128)  // tiles dividing 8 warps
                              : (std::max(asked, unit) + unit - 1) / unit * unit;
      // A stage of a paged cache lies in one block (its positions are one run): halve it until it divides the block.
      if (a.paged())
        while (positions / 2 % unit == 0 && positions / 2 >= unit && ks[2].extent % positions != 0) positions /= 2;
      const bool contiguous = !a.paged() || ks[2].extent % positions == 0;
      const int64_t stage = positions * (d.extent + dv.extent) * esize;
      const int64_t shared_per_sm = g.target.shared_bytes_per_sm;
      c.stream_stages = static_cast<int>(ring_stages(stage, shared_per_sm));
      c.stream_positions = static_cast<int>(positions);
      c.stream_shared_bytes = static_cast<uint32_t>(c.stream_stages * stage);
      const int64_t per_sm = std::max<int64_t>(1, shared_per_sm / (c.stream_shared_bytes + 1024));
      // Query heads of a k/v head (grouped-query attention) share a task, so
      // a stage is copied once for all of them: the largest power of two
      // dividing the group, at most kAttentionMaxStreamHeads (each keeps its
      // accumulators in registers); only where the rows alone fill the GPU.
      // With fewer rows the blocks split the positions, the repeated reads
      // mostly hit L2, and a block's math for several heads costs more than
      // the copies it saves (measured on the H200, 32 query heads over 8,
      // head dim 128: B=16 at 32768 positions 1511 -> 1212 us grouped, B=1
      // at 4096 positions 22.1 -> 35.7 us).
      const bool rows_fill = rows_min >= g.target.multiprocessors * per_sm;
      if (rows_fill && !nh.is_runtime() && !kvh.is_runtime() && kvh.extent > 0 && nh.extent % kvh.extent == 0) {
        // Each head holds q and its accumulators in registers: at most
        // kAttentionStreamHeadsDims of head dims together (4 heads of 128, 2 of 256).
        const int64_t group = nh.extent / kvh.extent,
                      most = std::min(attention_heads_cap(),
                                      std::max<int64_t>(1, kAttentionStreamHeadsDims / std::max(d.extent, dv.extent)));
        while (c.stream_heads * 2 <= std::min(group, most) && group % (c.stream_heads * 2) == 0) c.stream_heads *= 2;
      }
      const int64_t wanted = attention_splits_wanted();
      if (contiguous)
        c.stream_splits = splits_for(wanted > 0 ? wanted * ceil_div(rows_min, c.stream_heads) : g.target.multiprocessors * per_sm,
                                     std::max(kMinPositionsPerSplit, positions), c.stream_heads);
    }
  }
  c.stream_early = attention_kv_early_allowed();

  // gdl::attention_group: the task takes every query head of its k/v head
  // (or the largest divisor of the group up to 16, the rows of an mma tile)
  // whatever the row count, since its math for a group costs about what it
  // costs for one head. Stages of 64 positions by default: 4 slices of 16,
  // two warps a slice each computing half the columns (a narrower stage
  // leaves a warp fewer than 16 columns); over a paged cache halved until
  // it divides the block.
  const bool static_heads = !nh.is_runtime() && !kvh.is_runtime() && kvh.extent > 0 && nh.extent % kvh.extent == 0;
  const int64_t group = static_heads ? nh.extent / kvh.extent : 0;
  const bool group_dims = esize == 2 && float_type && !d.is_runtime() && !dv.is_runtime() && d.extent % 64 == 0 &&
                          dv.extent % 64 == 0 && d.extent <= 256 && dv.extent <= 256;
  const GroupedAttention grouped = grouped_attention();
  if (group_dims && ((grouped != GroupedAttention::kNone && group >= 2) || (grouped == GroupedAttention::kAll && group == 1))) {
    int64_t heads = std::min(group, kAttentionMaxGroupHeads);
    while (group % heads != 0) --heads;
    constexpr int64_t kWarps = 8;  // gdl::kAttentionThreads / 32
    // A warp's columns, DV * P / (16 * kWarps), must be a multiple of 16: P a multiple of 2048 / gcd(DV, 2048).
    const int64_t fewest = std::max<int64_t>(16, 16 * kWarps * 16 / std::gcd(dv.extent, int64_t{16 * kWarps * 16}));
    int64_t positions = attention_stage_positions() > 0 ? attention_stage_positions() : 64;
    positions = std::clamp<int64_t>(pow2_at_least(positions), fewest, 16 * kWarps);
    if (a.paged())
      while (positions / 2 >= fewest && ks[2].extent % positions != 0) positions /= 2;
    if (!a.paged() || ks[2].extent % positions == 0) {
      const int64_t stage = positions * (d.extent + dv.extent) * esize;
      const int64_t merge = positions / 16 * heads * (2 + dv.extent) * 4;  // the warps' results, in the ring
      const int64_t shared_per_sm = g.target.shared_bytes_per_sm;
      int64_t stages = ring_stages(stage, shared_per_sm);
      while (stages * stage < merge) ++stages;
      if (stages * stage <= shared_per_sm - 8 * 1024) {
        c.group_heads = static_cast<int>(heads);
        c.group_positions = static_cast<int>(positions);
        c.group_stages = static_cast<int>(stages);
        c.group_shared_bytes = static_cast<uint32_t>(stages * stage);
        // At most the cache's stages: more would change nothing.
        c.group_least_split_stages =
            static_cast<int>(std::clamp<int64_t>(attention_least_split_stages(), 1, ceil_div(t_max, positions)));
        // Blocks a multiprocessor holds: by the ring, and by registers (a block
        // holds q's fragments and D * DV / 128 accumulators a lane: ptxas gives
        // about 128 registers for heads of 128, over 190 for 192 and 256).
        const int64_t by_registers = d.extent + dv.extent <= 256 ? 2 : 1;
        const int64_t per_sm =
            std::clamp<int64_t>(shared_per_sm / (c.group_shared_bytes + 1024), 1, by_registers);
        const int64_t wanted = attention_splits_wanted();
        c.group_splits = splits_for(wanted > 0 ? wanted * ceil_div(rows_min, heads) : g.target.multiprocessors * per_sm,
                                    std::max(kMinPositionsPerSplit, positions), heads);
      }
    }
  }
  choose_prefill(g, a, esize, static_heads ? group : 0, c);
  const int most = std::max({c.splits, c.stream_splits, c.group_splits});
  if (most > 1) {
    c.scratch.tickets = rows_max;
    c.scratch.partial_floats = rows_max * most * (2 + dv_max);
  }
  return c;
}

SharedTokenBlocksChoice choose_shared_token_blocks(const ir::Graph& g, const ir::Node& n) {
  SharedTokenBlocksChoice c;
  if (n.op != ir::Op::kPagedAttention) return c;
  const ops::AttentionOperands a = ops::attention_operands(n);
  if (!a.by_sequence() || a.shared_block > 0 || prefill_attention() == PrefillAttention::kNone) return c;
  const Shape& qs = g.node(a.q).type.shape;
  const Shape& ks = g.node(a.k).type.shape;
  const Dim &heads = qs[1], &kv_heads = ks[1], &d = qs[2], &dv = g.node(a.v).type.shape.back();
  if (heads.is_runtime() || kv_heads.is_runtime() || kv_heads.extent < 1 || d.is_runtime() || dv.is_runtime() ||
      prefill_stage_positions(true, ks[2].extent) == 0)
    return c;
  const int64_t group = heads.extent / kv_heads.extent;
  if (!attention_blocks_fit(n.type.dtype, d.extent, dv.extent, group)) return c;
  const int64_t block = prefill_query_block(group);
  const int64_t min_tokens = ceil_div(g.target.multiprocessors, kv_heads.extent) * block;
  if (extent_at(qs[0], g, true) < min_tokens) return c;  // never as many tokens
  c.block = block;
  c.min_tokens = min_tokens;
  return c;
}

bool attention_blocks_fit(DType t, int64_t d, int64_t dv, int64_t group) {
  auto head = [](int64_t x) { return x == 64 || x == 128; };
  return (t == DType::kF16 || t == DType::kBF16) && head(d) && head(dv) && group >= 1 &&
         group <= 16 * kAttentionPrefillWarps;
}

// The derivative's kernels take the forward prefill kernel's tasks (query
// blocks of the group's heads) or, for dk and dv, 16 * warps positions;
// stages of 64 positions or query rows (32 for heads of 128, whose
// fragments and accumulators leave fewer registers), about
// kAttentionPrefillRingBytes of them.
AttentionBackwardChoice choose_attention_backward(const ir::Graph& g, const ir::Node& n) {
  const ops::AttentionOperands a = ops::attention_operands(n);
  const Shape& qs = g.node(a.q).type.shape;
  const Shape& ks = g.node(a.k).type.shape;
  const bool stats = n.op == ir::Op::kAttentionStats;
  const int64_t d = qs.back().extent, dv = g.node(stats ? a.o : a.v).type.shape.back().extent;
  const Dim& heads = qs[qs.size() - 2];
  const Dim& kv_heads = ks[ks.size() - 3];
  AttentionBackwardChoice c;
  if (heads.is_runtime() || kv_heads.is_runtime() || kv_heads.extent < 1) return c;
  const int64_t group = heads.extent / kv_heads.extent;
  if (!attention_blocks_fit(g.node(a.q).type.dtype, d, dv, group)) return c;
  const int64_t positions = d + dv <= 128 ? 64 : 32;
  int64_t stage = positions * d * 2;                                                  // stats: k
  if (n.op == ir::Op::kAttentionGradQ) stage = positions * (d + dv) * 2;              // k and v
  if (n.op == ir::Op::kAttentionGradKV) stage = positions * (d + dv) * 2 + positions * 12;  // q, do, lse, delta, len
  c.query_block = static_cast<int>(prefill_query_block(group));
  c.positions = static_cast<int>(positions);
  c.stages = static_cast<int>(std::clamp<int64_t>(kAttentionPrefillRingBytes / stage, 2, 4));
  c.shared_bytes = static_cast<uint32_t>(c.stages * stage);
  return c;
}

namespace {

// prologue_reread_bytes of one kernel choice.
uint64_t reread_bytes(const ir::Graph& g, const ir::Node& n, const MatmulChoice& c) {
  if (!c.use_rows && c.tiles == MatmulKernel::kGeneral) return 0;
  const Shape as = ops::matmul_a_shape(g, n);
  const Shape& rs = n.type.shape;
  const uint64_t row_bytes = static_cast<uint64_t>(std::max<int64_t>(1, extent_at(as.back(), g, true))) *
                             dtype_size(n.type.dtype);
  const int64_t n_max = std::max<int64_t>(1, extent_at(rs.back(), g, true));
  uint64_t most = 0;
  if (c.use_rows) {  // every block takes every row, MR at a time
    const int64_t blocks = ceil_div(n_max, matmul_strip_columns(n.type.dtype)) * c.rows_splits;
    most = static_cast<uint64_t>(blocks * std::min(c.rows_max, rows_limit(n.type.dtype))) * row_bytes;
  }
  if (c.use_tiles) {  // the fold: the parts of a tile share its rows' statistics
    most = std::max(most, static_cast<uint64_t>(tile_count(g, n, c) * std::min<int64_t>(entry_rows(g, n, c), c.tile_m)) * row_bytes);
  }
  return most;
}

// The choices of every kernel of the step: all bindings', then each tile band's.
std::vector<MatmulChoice> matmul_choices(const ir::Graph& g, const ir::Node& n) {
  std::vector<MatmulChoice> choices = {choose_matmul(g, n)};
  for (const RowsBand& band : matmul_tile_bands(g, n)) choices.push_back(choose_matmul(g, n, band));
  return choices;
}

}  // namespace

uint64_t prologue_reread_bytes(const ir::Graph& g, const ir::Node& n) {
  uint64_t most = 0;
  for (const MatmulChoice& c : matmul_choices(g, n)) most = std::max(most, reread_bytes(g, n, c));
  return most;
}

ir::ValueId matmul_prologue(const ir::Graph& g, const std::vector<ir::ValueId>& values) {
  if (values.size() < 2) return ir::kNoValue;
  const ir::Node& first = g.node(values[0]);
  const ir::Node& second = g.node(values[1]);
  const bool norm = ops::fusion_class(first.op) == ops::FusionClass::kNorm;
  const bool matmul = ops::fusion_class(second.op) == ops::FusionClass::kMatmul;
  return norm && matmul && second.args.at(0) == values[0] ? values[0] : ir::kNoValue;
}

int64_t library_matmul_rows_above(DType t) {
  static const int64_t knob = env_count("GDL_MATMUL_LIBRARY_ROWS_ABOVE");
  return knob > 0 ? knob : rows_limit(t);
}

LibraryMatmulChoice choose_library_matmul(const ir::Graph& g, const std::vector<ir::ValueId>& values) {
  const bool allowed = !env_is("GDL_MATMUL_LIBRARY", "0");  // read at each choice: a test turns it off around a compile
  LibraryMatmulChoice c;
  if (!allowed || values.empty()) return c;
  const bool prologue = matmul_prologue(g, values) != ir::kNoValue;
  const ir::Node& n = g.node(values[prologue ? 1 : 0]);
  if (n.op != ir::Op::kMatMul) return c;
  const DType t = n.type.dtype;
  if (t != DType::kF16 && t != DType::kBF16 && t != DType::kF32) return c;
  const int64_t rows_above = library_matmul_rows_above(t);
  const MatmulChoice m = choose_matmul(g, n);
  const Shape as = ops::matmul_a_shape(g, n), bs = ops::matmul_b_shape(g, n);
  const Shape& rs = n.type.shape;
  const Shape &stored_a = g.node(n.args.at(0)).type.shape, &stored_b = g.node(n.args.at(1)).type.shape;
  if (!m.fold_batch || (prologue && ops::matmul_layout(n).transpose_a) || as.back().is_runtime() || bs.back().is_runtime() || stored_a.back().is_runtime() ||
      stored_b.back().is_runtime() || m.rows_max <= rows_above)
    return c;
  for (size_t i = 0; i + 1 < rs.size(); ++i)  // no dim of the rows always served by updates (a session picks the others')
    if (rs[i].is_runtime() && !g.dims.at(static_cast<size_t>(rs[i].symbol)).padding_blocker.empty()) return c;
  const uint64_t product =
      align256(static_cast<uint64_t>(m.rows_max) * static_cast<uint64_t>(bs.back().extent) * dtype_size(t));
  const uint64_t normalized =
      prologue ? align256(static_cast<uint64_t>(m.rows_max) * static_cast<uint64_t>(as.back().extent) * dtype_size(t)) : 0;
  if (product > kMaxScratchBytes || normalized > kMaxScratchBytes) return c;
  c.possible = true;
  c.min_rows = rows_above + 1;
  c.rows_max = m.rows_max;
  c.product_bytes = product;
  c.normalized_bytes = normalized;
  return c;
}

SelectionChoice choose_selection(const ir::Graph& g, const ir::Node& n) {
  SelectionChoice c;
  static const bool allowed = !env_is("GDL_SELECT_SPLIT", "0");
  const Shape& xs = g.node(n.args.at(0)).type.shape;
  const auto axis = static_cast<size_t>(n.attrs.axis);
  if (!allowed || axis + 1 != xs.size()) return c;  // the column kernels: a thread per column
  const bool topk = n.op == ir::Op::kTopKIndices || n.op == ir::Op::kTopKValues;
  const int64_t kept = topk ? n.attrs.ints.at(0) : 1;  // by each part
  const int64_t len = extent_at(xs[axis], g, true);
  const int64_t rows_min = std::max<int64_t>(1, product_at(xs, 0, axis, g, false));
  const int64_t rows_max = std::max<int64_t>(1, product_at(xs, 0, axis, g, true));
  const int64_t sms = g.target.multiprocessors;
  if (rows_min >= sms) return c;
  const int64_t rows_split = std::min(rows_max, sms - 1);
  const int64_t parts = std::min({len / kSelectPartElements, ceil_div(sms * kSelectBlocksPerSM, rows_min),
                                  static_cast<int64_t>(kMaxScratchBytes / 4 / (rows_split * 2 * kept))});
  if (parts < 2) return c;
  c.parts = static_cast<int>(parts);
  if (rows_max >= sms) c.whole_rows_from = sms;
  c.scratch.tickets = rows_split;
  c.scratch.partial_floats = rows_split * parts * kept * 2;  // each part's values or keys, and their positions
  return c;
}

SplitScratchSize step_scratch(const ir::Graph& g, const std::vector<ir::ValueId>& values) {
  if (values.empty()) return {};
  const bool prologue = matmul_prologue(g, values) != ir::kNoValue;
  const ir::Node& anchor = g.node(values[prologue ? 1 : 0]);
  if (anchor.op == ir::Op::kMatMul) {  // the most any of its kernels needs
    SplitScratchSize need;
    // cuBLASLt's product and workspace, in the partial tiles' place (only one kernel runs per launch).
    need.partial_floats = static_cast<int64_t>(choose_library_matmul(g, values).scratch_bytes() / 4);
    for (const MatmulChoice& c : matmul_choices(g, anchor)) {
      need.tickets = std::max(need.tickets, c.scratch.tickets);
      need.partial_floats = std::max(need.partial_floats, c.scratch.partial_floats);
      if (prologue && c.use_tiles && c.tile_splits > 1 && !c.tile_cluster) {  // the fold: each part's column sums, each tile's statistics
        const int64_t tiles = tile_count(g, anchor, c);
        need.partial_floats = std::max(need.partial_floats, c.tile_splits * tiles * (c.tile_m * kTileCols + 2 * kTileCols) +
                                                                tiles * 2 * c.tile_m);
      }
    }
    return need;
  }
  if (anchor.op == ir::Op::kAttention || anchor.op == ir::Op::kPagedAttention) return choose_attention(g, anchor).scratch;
  if (anchor.op == ir::Op::kArgMax || anchor.op == ir::Op::kArgMin || anchor.op == ir::Op::kTopKIndices ||
      anchor.op == ir::Op::kTopKValues)
    return choose_selection(g, anchor).scratch;
  return {};
}

}  // namespace gdl
