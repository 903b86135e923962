// attention(q, k, v, len, start, scale = 1/sqrt(D)) and
// paged_attention(q, k_pool, v_pool, len, blocks, start, sequence, scale).
//
// q [S..., NH, D] holds one query per sequence (S... the sequence dims),
// or with `start` given [S..., Q, NH, D], Q queries per sequence: query i
// sits at position start + i and sees the positions up to its own (causal;
// prefill, chunked and speculative decode). k and v hold the keys and
// values with KVH heads dividing NH (grouped-query attention: query head h
// reads k/v head h / (NH / KVH); no repeated cache):
//   attention        k, v [S..., KVH, T, D(v)], one cache row per sequence;
//   paged_attention  k_pool, v_pool [NB, KVH, BS, D(v)], a pool of blocks of
//                    BS positions, and blocks i32 [S..., MAX_BLOCKS]: position
//                    t of a sequence is row t % BS of pool block
//                    blocks[t / BS] (vLLM's layout). A position whose block id
//                    is outside [0, NB) is skipped.
// len and start are i32, rank 0 (one for every sequence) or one per
// sequence (S...). For every row of q, softmax(scale * q.k_t) over the
// positions t < clamp(len, 0, T) (and t <= start + i), then the weighted
// sum of v_t; no position gives a zero row. Over a run-time T that buckets
// pad, positions past its valid count are padding whatever len says.
//
// paged_attention with `sequence` (i32 [T], not with start) serves a
// ragged batch of tokens: q [T, NH, D], len rank 0 or one per token, blocks
// [S, MAX_BLOCKS], token x reading the table row sequence[x] (outside the
// table's valid rows: a zero row). The pass ragged-attention
// (passes/ragged_attention.h) splits it into this op, left to the decode
// kernels, and paged_attention_shared(q, k_pool, v_pool, len, blocks,
// sequence, partial), which computes the rows of whole blocks of tokens of
// one sequence with the prefill kernel and takes the others from partial.
//
// grad: attention's derivative recomputes the probabilities (vjp_attention
// below); paged_attention has none.
//
// Kernels (plan/kernel_choice.h choose_attention): the prefill one
// (gdl_attention_prefill.cuh: blocks of causal queries on tensor cores,
// f16/bf16 heads of 64 or 128, where its tasks fill the GPU; and
// paged_attention_shared's token blocks), the grouped
// one (gdl_attention_group.cuh: the query heads of a k/v head on tensor cores,
// f16/bf16 heads of multiples of 64, sm_80) and, in gdl_attention.cuh, the
// streamed one (k and v through a ring of bulk copies, sm_90, head dims of
// whole 16-byte vectors, 16-byte aligned operands, a stage within one block
// of a paged cache) or the split one; all split a row's positions over
// several blocks.
#include <algorithm>
#include <cmath>
#include <limits>
#include <optional>

#include "autodiff/adjoint_builder.h"
#include "codegen/cuda_text.h"
#include "codegen/step_emitter.h"
#include "interp/host_ops.h"
#include "internal_error.h"
#include "ops/attention.h"
#include "ops/families.h"
#include "plan/kernel_choice.h"

namespace gdl::ops {
namespace {

using autodiff::AdjointBuilder;
using ir::Node;
using ir::Op;
using ir::ValueId;

constexpr int kAttentionBlock = 256;
constexpr int kAttentionChunk = 512;             // positions scored per pass (shared memory)
constexpr int64_t kAttentionMaxHeadDim = 4096;   // keeps its static shared memory under 48 KiB

// The call's parameter slots: attention (q, k, v, len, start, scale),
// paged (q, k, v, len, blocks, start, sequence, scale).
template <bool kPaged> struct Slots {
  static constexpr size_t q = 0, k = 1, v = 2, len = 3, blocks = kPaged ? 4 : SIZE_MAX, start = kPaged ? 5 : 4,
                          sequence = kPaged ? 6 : SIZE_MAX, scale = kPaged ? 7 : 5;
};

// "[2, B]" -> "2, B".
std::string inner(const std::string& shape_text) { return shape_text.substr(1, shape_text.size() - 2); }

template <bool kPaged>
TypeResult infer_attention(TypeQuery& q) {
  using S = Slots<kPaged>;
  const std::string name = kPaged ? "paged_attention" : "attention";
  const TensorType* tq = q.tensor(S::q, name + " q");
  const TensorType* tk = tq ? q.tensor(S::k, name + (kPaged ? " k_pool" : " k")) : nullptr;
  const TensorType* tv = tk ? q.tensor(S::v, name + (kPaged ? " v_pool" : " v")) : nullptr;
  if (!tv) return TypeResult::failed();
  const std::string all = "q " + q.text(*tq) + ", k " + q.text(*tk) + ", v " + q.text(*tv);
  if (!is_float(tq->dtype) || tk->dtype != tq->dtype || tv->dtype != tq->dtype)
    return q.error(kAtOp, name + " q, k and v must share one float dtype: " + all, "convert them with cast");
  // A ragged batch: q [T, NH, D], a sequence per token. A node holds the
  // given operands in order, so there `sequence` is in start's slot and
  // Attrs::axis says which it is.
  const bool from_node = kPaged && q.attrs().axis == kBySequence && !q.given(S::sequence);
  const bool by_sequence = kPaged && (q.given(S::sequence) || from_node);
  const size_t sequence_slot = from_node || !kPaged ? S::start : S::sequence;
  const bool causal = q.given(S::start) && !from_node;
  if (causal && by_sequence)
    return q.error(static_cast<int>(sequence_slot),
                   "paged_attention takes start (the queries of each sequence) or sequence (a ragged batch of tokens), "
                   "not both",
                   "over a ragged batch, give each token's length (its position + 1) as len");
  const int q_tail = causal ? 3 : 2;  // [Q,] NH, D
  const std::string q_layout = causal        ? "q is [..., Q, NH, D] (with start)"
                               : by_sequence ? "q is [T, NH, D] (with sequence)"
                                             : "q is [..., NH, D]";
  const std::string layout = q_layout + (kPaged ? ", k_pool and v_pool are [NB, KVH, BS, D]"
                                                : ", k and v are [..., KVH, T, D]") +
                             " with KVH dividing NH";
  const int k_rank = kPaged ? 4 : tq->rank() - q_tail + 3;
  if (tq->rank() < q_tail || (by_sequence && tq->rank() != 3) || tk->rank() != k_rank || tv->rank() != tk->rank())
    return q.error(kAtOp, name + " ranks do not fit: " + all, layout);
  const Shape sequences(tq->shape.begin(), tq->shape.end() - static_cast<std::ptrdiff_t>(q_tail));
  const Dim &heads = tq->shape[tq->rank() - 2], &kv_heads = tk->shape[tk->rank() - 3];
  const bool grouped = heads == kv_heads || (!heads.is_runtime() && !kv_heads.is_runtime() && kv_heads.extent > 0 &&
                                             heads.extent % kv_heads.extent == 0);
  const Shape k_positions(tk->shape.begin(), tk->shape.end() - 1), v_positions(tv->shape.begin(), tv->shape.end() - 1);
  const bool cache_fits = kPaged || Shape(tk->shape.begin(), tk->shape.end() - 3) == sequences;
  if (!cache_fits || !grouped || k_positions != v_positions || !(tq->shape.back() == tk->shape.back()))
    return q.error(kAtOp, name + " shapes do not fit: " + all, layout);
  int64_t paged_positions = 0;  // MAX_BLOCKS * BS
  if constexpr (kPaged) {
    const Dim& block = tk->shape[2];
    if (block.is_runtime())
      return q.error(S::k, "the block size of a paged cache must be static, got " + q.text(*tk), layout);
    const TensorType* table = q.tensor(S::blocks, "paged_attention blocks");
    if (!table) return TypeResult::failed();
    // One row of block ids per sequence: q's sequence dims, or any count of them for a ragged batch.
    Shape want = by_sequence && table->rank() == 2 ? Shape{table->shape[0]} : sequences;
    want.push_back(table->rank() > 0 ? table->shape.back() : Dim::constant(1));
    if (table->dtype != DType::kI32 || table->rank() != static_cast<int>(want.size()) || table->shape != want ||
        want.back().is_runtime())
      return q.error(S::blocks,
                     "the block table must be i32[" +
                         (by_sequence ? std::string("S") : sequences.empty() ? std::string() : inner(q.text(sequences))) +
                         (by_sequence || !sequences.empty() ? ", " : "") +
                         "MAX_BLOCKS] (one row of block ids per sequence, MAX_BLOCKS static), got " + q.text(*table),
                     by_sequence ? "declare it as input tables : i32[S, MAX_BLOCKS];"
                                 : "declare it as input blocks : i32[B, MAX_BLOCKS];");
    paged_positions = want.back().extent * block.extent;
    if (by_sequence) {
      const TensorType* ids = q.tensor(sequence_slot, "paged_attention sequence");
      if (!ids) return TypeResult::failed();
      if (ids->dtype != DType::kI32 || ids->shape != sequences)
        return q.error(static_cast<int>(sequence_slot),
                       "sequence must be i32[" + inner(q.text(sequences)) + "] (each token's row of the block table), got " +
                           q.text(*ids),
                       "declare it as input seq : i32[T];");
      q.attrs().axis = kBySequence;
    }
  }
  // len, and start: rank 0 or one per sequence (over a ragged batch, per token).
  const std::string each = by_sequence ? "token" : "sequence";
  auto per_sequence = [&](size_t slot, const std::string& role, const std::string& hint) -> std::optional<TypeResult> {
    std::string described;
    const TensorType* t = q.value(slot, name + " " + role, DType::kI32, &described);
    if (!t && described.empty()) return TypeResult::failed();
    if (t && t->dtype == DType::kI32 && (t->rank() == 0 || t->shape == sequences)) return std::nullopt;
    return q.error(static_cast<int>(slot),
                   name + " " + role + " must be a rank-0 i32 or one i32 per " + each +
                       (sequences.empty() ? std::string() : " (" + q.text(sequences) + ")") + ", got " +
                       (t ? q.text(*t) : described),
                   hint);
  };
  if (auto bad = per_sequence(S::len, "len",
                              by_sequence ? "declare it as input len : i32[T]; (each token's position + 1)"
                                          : "declare it as input len : i32; or input len : i32[B];"))
    return *bad;
  // A run-time len is clamped to [0, T]; a compile-time one outside it is a mistake seen now.
  if (std::optional<int64_t> len = q.static_integer(S::len)) {
    int64_t positions = 0;
    std::string t_text;
    if constexpr (kPaged) {
      positions = paged_positions;
      t_text = "MAX_BLOCKS * BS = " + std::to_string(positions);
    } else {
      const Dim& t = tk->shape[tk->rank() - 2];
      positions = t.is_runtime() ? q.dims()[static_cast<size_t>(t.symbol)].hi : t.extent;
      t_text = t.is_runtime() ? "the upper bound " + std::to_string(positions) + " of T = " +
                                    q.dims()[static_cast<size_t>(t.symbol)].name
                              : "T = " + std::to_string(positions);
    }
    if (*len < 0 || *len > positions)
      return q.error(S::len,
                     name + " len is " + std::to_string(*len) + ", outside [0, T] for the cache's " + t_text +
                         " positions",
                     "give a length between 0 and T; a run-time len (an i32 input) is clamped to [0, T]");
  }
  if (causal)
    if (auto bad = per_sequence(S::start, "start", "give the position of each sequence's first query, e.g. start = 0"))
      return *bad;
  const Dim& head = tq->shape.back();
  if (q.given(S::scale)) {
    if (!q.number(S::scale, "scale", &q.attrs().value)) return TypeResult::failed();
  } else if (head.is_runtime()) {
    return q.error(kAtOp,
                   "the head dim of q is the run-time dim '" + q.dims()[static_cast<size_t>(head.symbol)].name +
                       "', so the default scale 1/sqrt(D) is unknown",
                   "give scale = ... explicitly");
  } else {
    q.attrs().value = 1.0 / std::sqrt(static_cast<double>(head.extent));
  }
  Shape out(tq->shape.begin(), tq->shape.end() - 1);
  out.push_back(tv->shape.back());
  return TensorType{tq->dtype, out};
}

// The derivative's kernels, built by vjp_attention from operands the
// forward's rule checked: their results' types.
TypeResult infer_attention_stats(TypeQuery& q) {  // f32 [S..., (Q,) NH, 2]: (lse, delta) per row
  const TensorType* tq = q.tensor(0, "attention_stats q");
  if (!tq || tq->rank() < 2) return TypeResult::failed();
  Shape rows(tq->shape.begin(), tq->shape.end() - 1);
  rows.push_back(Dim::constant(2));
  return TensorType{DType::kF32, rows};
}
TypeResult infer_attention_grad_q(TypeQuery& q) {  // q's type
  const TensorType* tq = q.tensor(0, "attention_grad_q q");
  if (!tq) return TypeResult::failed();
  return *tq;
}
TypeResult infer_attention_grad_kv(TypeQuery& q) {  // [S..., KVH, T, D + DV]: dk and dv side by side
  const TensorType* tk = q.tensor(1, "attention_grad_kv k");
  const TensorType* tv = tk ? q.tensor(2, "attention_grad_kv v") : nullptr;
  if (!tv || tk->rank() < 3 || tk->shape.back().is_runtime() || tv->shape.back().is_runtime())
    return TypeResult::failed();
  Shape s(tk->shape.begin(), tk->shape.end() - 1);
  s.push_back(Dim::constant(tk->shape.back().extent + tv->shape.back().extent));
  return TensorType{tk->dtype, s};
}

// paged_attention_shared(q, k_pool, v_pool, len, blocks, sequence,
// partial), built by share_ragged_attention from a paged_attention the rule
// above checked: partial's type, which is that paged_attention's ([T, NH,
// DV] in q's dtype), and the token blocks it serves (Attrs::ints).
TypeResult infer_attention_shared(TypeQuery& q) {
  const TensorType* tq = q.tensor(0, "paged_attention_shared q");
  const TensorType* tv = tq ? q.tensor(2, "paged_attention_shared v_pool") : nullptr;
  const TensorType* ids = tv ? q.tensor(5, "paged_attention_shared sequence") : nullptr;
  const TensorType* partial = ids ? q.tensor(6, "paged_attention_shared partial") : nullptr;
  if (!partial) return TypeResult::failed();
  const std::vector<int64_t>& blocks = q.attrs().ints;
  const bool fits = tq->rank() == 3 && tv->rank() == 4 && ids->dtype == DType::kI32 &&
                    ids->shape == Shape{tq->shape[0]} &&
                    *partial == TensorType{tq->dtype, {tq->shape[0], tq->shape[1], tv->shape.back()}} &&
                    blocks.size() == 2 && blocks[0] > 0 && blocks[1] >= blocks[0];
  if (!fits) return q.error(kAtOp, "paged_attention_shared operands or token blocks do not fit", "");
  return *partial;
}

std::string scale_attr(const ir::Attrs& a) {
  std::string text = "scale=" + number_text(a.value);
  if (a.axis == kBySequence) text += ", by sequence";
  if (a.ints.size() == 2)
    text += ", shared blocks of " + std::to_string(a.ints[0]) + " tokens from " + std::to_string(a.ints[1]);
  return text;
}

}  // namespace

AttentionOperands attention_operands(const Node& n) {
  if (n.op == Op::kAttentionStats || n.op == Op::kAttentionGradQ || n.op == Op::kAttentionGradKV) {
    const bool stats = n.op == Op::kAttentionStats;
    const size_t start = stats ? 5 : 6;
    GDL_INTERNAL_ASSERT(n.args.size() == start || n.args.size() == start + 1, "attention derivative argument count");
    AttentionOperands a;
    a.q = n.args[0], a.k = n.args[1], a.dout = n.args[3];
    (stats ? a.o : a.v) = n.args[2];
    if (!stats) a.stats = n.args[4];
    a.len = n.args[start - 1];
    if (n.args.size() > start) a.start = n.args[start];
    return a;
  }
  GDL_INTERNAL_ASSERT(n.op == Op::kAttention || n.op == Op::kPagedAttention || n.op == Op::kPagedAttentionShared,
                      "attention_operands of " + std::string(op_name(n.op)));
  const bool paged = n.op != Op::kAttention;
  const size_t start = paged ? 5 : 4;
  const bool shared = n.op == Op::kPagedAttentionShared;
  GDL_INTERNAL_ASSERT(shared ? n.args.size() == 7 : n.args.size() == start || n.args.size() == start + 1,
                      "attention argument count");
  AttentionOperands a;
  a.q = n.args[0], a.k = n.args[1], a.v = n.args[2], a.len = n.args[3];
  if (paged) a.blocks = n.args[4];
  if (shared || n.attrs.axis == kBySequence) {
    a.sequence = n.args[5];
    if (shared) a.partial = n.args[6];
    GDL_INTERNAL_ASSERT(n.attrs.ints.empty() || n.attrs.ints.size() == 2, "the shared token blocks of attention");
    if (n.attrs.ints.size() == 2) a.shared_block = n.attrs.ints[0], a.shared_min_tokens = n.attrs.ints[1];
  } else if (n.args.size() > start) {
    a.start = n.args[start];
  }
  return a;
}

ir::Attrs shared_blocks_attrs(const ir::Attrs& attention, int64_t block, int64_t min_tokens) {
  ir::Attrs a = attention;
  a.ints = {block, min_tokens};
  return a;
}

Dim attention_positions(const ir::Graph& g, const Node& n) {
  const AttentionOperands a = attention_operands(n);
  const Shape& ks = g.node(a.k).type.shape;
  if (!a.paged()) return ks.at(ks.size() - 2);
  const Dim& block = ks.at(2);
  const Dim& max_blocks = g.node(a.blocks).type.shape.back();
  GDL_INTERNAL_ASSERT(!block.is_runtime() && !max_blocks.is_runtime(), "a paged cache with a run-time block count or size");
  return Dim::constant(block.extent * max_blocks.extent);
}

namespace {

// How query rows (sequence, query, head) map onto sequences and k/v rows
// (q [S..., (Q,) NH, D], k [S..., KVH, T, D] or a paged pool), and how many
// positions each row attends over: t < clamp(len, 0, t_max) and, with
// start, t <= start + query.
struct RowLayout {
  int64_t heads = 1, queries = 1, kv_heads = 1, group = 1, t_max = 0;
  const HostTensor* len = nullptr;
  const HostTensor* start = nullptr;
  RowLayout(const HostTensor& q, const HostTensor& k, const HostTensor& len_, const HostTensor* start_, int64_t t)
      : t_max(t), len(&len_), start(start_) {
    const size_t rq = q.shape.size(), rk = k.shape.size();
    GDL_INTERNAL_ASSERT(rq >= 2 && rk >= 3, "attention operand ranks");
    heads = q.shape[rq - 2];
    queries = start ? q.shape[rq - 3] : 1;
    kv_heads = k.shape[rk - 3];
    GDL_INTERNAL_ASSERT(kv_heads > 0 && heads % kv_heads == 0 && k.shape.back() == q.shape.back(),
                        "attention shapes disagree");
    group = heads / kv_heads;
  }
  int64_t sequence(int64_t row) const { return row / (heads * queries); }
  int64_t query(int64_t row) const { return row / heads % queries; }
  int64_t kv_row(int64_t row) const { return sequence(row) * kv_heads + row % heads / group; }
  int64_t per_sequence(const HostTensor& t, int64_t row) const {
    return static_cast<int64_t>(t.data[t.data.size() == 1 ? 0 : static_cast<size_t>(sequence(row))]);
  }
  int64_t length(int64_t row) const {
    int64_t limit = per_sequence(*len, row);
    if (start) limit = std::min(limit, per_sequence(*start, row) + query(row) + 1);
    return std::clamp<int64_t>(limit, 0, t_max);
  }
};

double dot(const double* a, const double* b, int64_t n) {
  double sum = 0;
  for (int64_t i = 0; i < n; ++i) sum += a[i] * b[i];
  return sum;
}

// Whether token `token` of a ragged batch lies in a block that
// paged_attention_shared serves (SharedTokenBlocks, gdl_attention.cuh).
bool shared_token(const AttentionOperands& a, const HostTensor& sequence, int64_t valid_tokens, int64_t token) {
  if (a.shared_block <= 0) return false;
  const int64_t first = token / a.shared_block * a.shared_block;
  if (valid_tokens < a.shared_min_tokens || first + a.shared_block > valid_tokens) return false;
  for (int64_t x = first + 1; x < first + a.shared_block; ++x)
    if (sequence.data[static_cast<size_t>(x)] != sequence.data[static_cast<size_t>(first)]) return false;
  return true;
}

// For every query row, softmax(scale * q.k_t) over its positions (t <
// clamp(len, 0, the valid T), t <= start + query, stored), weighted sum of v_t.
// Over a ragged batch split in two (AttentionOperands::shared_block), each
// node computes its own tokens' rows: paged_attention leaves zeros in the
// others, paged_attention_shared the rows of `partial`.
void eval_attention(const Node& n, const EvalArgs& in, HostTensor& out) {
  const AttentionOperands a = attention_operands(n);
  const HostTensor &q = *in.values[0], &k = *in.values[1], &v = *in.values[2], &len = *in.values[3];
  const size_t start_arg = a.paged() ? 5 : 4;
  const HostTensor* table = a.paged() ? in.values[4] : nullptr;
  const HostTensor* sequence = a.by_sequence() ? in.values[5] : nullptr;
  const bool shared_rows = n.op == Op::kPagedAttentionShared;  // the rows this node computes, when split
  if (shared_rows) out.data = in.values[6]->data;
  const size_t rk = k.shape.size();
  GDL_INTERNAL_ASSERT(v.shape.size() == rk, "attention operand ranks");
  const int64_t d = q.shape.back(), dv = v.shape.back(), block = k.shape[rk - 2];
  const int64_t max_blocks = table ? table->shape.back() : 1;
  const int64_t pool_blocks = k.shape[0];
  const RowLayout rows_of(q, k, len, a.causal() ? in.values[start_arg] : nullptr,
                          table ? max_blocks * block : std::min(block, in.valid(1, -2)));
  const int64_t rows = host::product(q.shape) / std::max<int64_t>(d, 1);
  // Row r's row of the block table: its sequence's, or over a ragged batch
  // its token's sequence id, none (-1) outside the table's valid rows.
  auto table_row = [&](int64_t r) -> int64_t {
    if (!sequence) return rows_of.sequence(r);
    const auto id = static_cast<int64_t>(sequence->data[static_cast<size_t>(rows_of.sequence(r))]);
    return id >= 0 && id < in.valid(4, 0) ? id : -1;
  };
  // The row of k and v (in rows of D and DV) holding position t of row r
  // (paged: whose block table row is `in_table`), or -1.
  auto stored_at = [&](int64_t r, int64_t in_table, int64_t t) -> int64_t {
    if (!table) return rows_of.kv_row(r) * block + t;
    const int64_t id = static_cast<int64_t>(table->data[static_cast<size_t>(in_table * max_blocks + t / block)]);
    if (id < 0 || id >= pool_blocks) return -1;
    return (id * rows_of.kv_heads + r % rows_of.heads / rows_of.group) * block + t % block;
  };
  const double scale = n.attrs.value;
  std::vector<double> score(static_cast<size_t>(std::max<int64_t>(rows_of.t_max, 0)));
  std::vector<int64_t> at(score.size());
  for (int64_t r = 0; r < rows; ++r) {
    if (a.shared_block > 0 && shared_token(a, *sequence, in.valid(0, 0), rows_of.sequence(r)) != shared_rows) continue;
    const int64_t in_table = table ? table_row(r) : -1;
    const int64_t valid = sequence && in_table < 0 ? 0 : rows_of.length(r);
    const double* qr = q.data.data() + r * d;
    double* o = out.data.data() + r * dv;  // zero when no position is valid
    std::fill(o, o + dv, 0.0);
    double peak = -std::numeric_limits<double>::infinity();
    for (int64_t t = 0; t < valid; ++t) {
      at[t] = stored_at(r, in_table, t);
      if (at[t] < 0) continue;
      score[t] = dot(qr, k.data.data() + at[t] * d, d) * scale;
      peak = std::max(peak, score[t]);
    }
    double total = 0;
    for (int64_t t = 0; t < valid; ++t)
      if (at[t] >= 0) total += score[t] = std::exp(score[t] - peak);
    for (int64_t t = 0; t < valid; ++t)
      if (at[t] >= 0)
        for (int64_t i = 0; i < dv; ++i) o[i] += score[t] / total * v.data[static_cast<size_t>(at[t] * dv + i)];
  }
}

// attention_stats: per query row (lse, delta), lse = log sum_t exp(scale
// q.k_t) over its positions (0 with none), delta = do . o.
void eval_attention_stats(const Node& n, const EvalArgs& in, HostTensor& out) {
  const AttentionOperands a = attention_operands(n);
  const HostTensor &q = *in.values[0], &k = *in.values[1], &o = *in.values[2], &dout = *in.values[3];
  const int64_t d = q.shape.back(), dv = o.shape.back(), positions = k.shape[k.shape.size() - 2];
  const RowLayout rows_of(q, k, *in.values[4], a.causal() ? in.values[5] : nullptr, std::min(positions, in.valid(1, -2)));
  const int64_t rows = host::product(q.shape) / std::max<int64_t>(d, 1);
  std::vector<double> score(static_cast<size_t>(positions));
  for (int64_t r = 0; r < rows; ++r) {
    const int64_t valid = rows_of.length(r);
    double peak = -std::numeric_limits<double>::infinity(), total = 0;
    for (int64_t t = 0; t < valid; ++t) {
      score[t] = dot(q.data.data() + r * d, k.data.data() + (rows_of.kv_row(r) * positions + t) * d, d) * n.attrs.value;
      peak = std::max(peak, score[t]);
    }
    for (int64_t t = 0; t < valid; ++t) total += std::exp(score[t] - peak);
    out.data[static_cast<size_t>(2 * r)] = valid > 0 ? peak + std::log(total) : 0.0;
    out.data[static_cast<size_t>(2 * r + 1)] = dot(dout.data.data() + r * dv, o.data.data() + r * dv, dv);
  }
}

// attention_grad_q (dq [rows, D]) and attention_grad_kv (dk and dv side by
// side, [.., KVH, T, D + DV]): with p_rt = exp(scale q_r.k_t - lse_r) and
// ds_rt = p_rt (do_r.v_t - delta_r) scale, dq_r = sum_t ds_rt k_t, dk_t =
// sum_r ds_rt q_r, dv_t = sum_r p_rt do_r.
void eval_attention_grad(const Node& n, const EvalArgs& in, HostTensor& out) {
  const AttentionOperands a = attention_operands(n);
  const HostTensor &q = *in.values[0], &k = *in.values[1], &v = *in.values[2], &dout = *in.values[3];
  const HostTensor& stats = *in.values[4];
  const int64_t d = q.shape.back(), dv = v.shape.back(), positions = k.shape[k.shape.size() - 2];
  const RowLayout rows_of(q, k, *in.values[5], a.causal() ? in.values[6] : nullptr, std::min(positions, in.valid(1, -2)));
  const int64_t rows = host::product(q.shape) / std::max<int64_t>(d, 1);
  const bool for_q = n.op == Op::kAttentionGradQ;
  for (int64_t r = 0; r < rows; ++r) {
    const int64_t valid = rows_of.length(r);
    const double* qr = q.data.data() + r * d;
    const double* dor = dout.data.data() + r * dv;
    const double lse = stats.data[static_cast<size_t>(2 * r)], delta = stats.data[static_cast<size_t>(2 * r + 1)];
    for (int64_t t = 0; t < valid; ++t) {
      const int64_t kv = rows_of.kv_row(r) * positions + t;
      const double* kt = k.data.data() + kv * d;
      const double p = std::exp(dot(qr, kt, d) * n.attrs.value - lse);
      const double ds = p * (dot(dor, v.data.data() + kv * dv, dv) - delta) * n.attrs.value;
      if (for_q) {
        for (int64_t i = 0; i < d; ++i) out.data[static_cast<size_t>(r * d + i)] += ds * kt[i];
        continue;
      }
      double* row = out.data.data() + kv * (d + dv);
      for (int64_t i = 0; i < d; ++i) row[i] += ds * qr[i];
      for (int64_t i = 0; i < dv; ++i) row[d + i] += p * dor[i];
    }
  }
}

// A kernel argument built as `type{fields}`, kept apart so that a wrapper
// can name the type it wraps.
struct Source {
  std::string type, fields;
  std::string text() const { return type + "{" + fields + "}"; }
};

// A length or start as the kernels read it for a row: a value, the device
// scalar, or one per sequence (its queries' heads' rows are consecutive).
Source int_source(StepEmitter& e, ir::ValueId a, const std::string& rows_per_sequence) {
  if (e.is_inline_leaf(a)) return {"gdl::IntValue", e.inline_value(a)};
  if (e.g.node(a).type.rank() > 0) return {"gdl::IntPerRow", e.pointer(a) + ", " + rows_per_sequence};
  return {"gdl::IntAt", e.pointer(a)};
}

// Whether q's rows lead with a run-time axis, the only run-time one among
// them: its rows past the valid count are then the last rows of the step.
bool padded_leading_rows(const Shape& qs) {
  if (qs.size() < 2 || !qs[0].is_runtime()) return false;
  for (size_t i = 1; i + 1 < qs.size(); ++i)
    if (qs[i].is_runtime()) return false;
  return true;
}

// The locals every attention kernel reads: rows of q (sequence, query,
// head), heads, queries (1 without start), kv_heads, group, positions.
std::string row_locals(StepEmitter& e, const Shape& qs, const Shape& ks, bool causal, const Dim& positions) {
  return e.local("rows", e.product(qs, 0, qs.size() - 1)) + e.local("heads", e.dim(qs[qs.size() - 2])) +
         e.local("queries", causal ? e.dim(qs[qs.size() - 3]) : "1") + e.local("kv_heads", e.dim(ks[ks.size() - 3])) +
         e.local("group", "heads / kv_heads") +  // query heads per k/v head
         e.local("positions", e.dim(positions));
}

// A row's length as the kernels read it: len, with start the causal limit
// (the positions up to the query's own), clamped to a padded T's valid
// count, and none for the padding rows of a padded leading axis.
Source row_lengths(StepEmitter& e, Source len, const std::optional<Source>& start, const Shape& qs,
                   const Dim& positions) {
  if (start)
    len = {"gdl::CausalLen<" + len.type + ", " + start->type + ">", len.text() + ", " + start->text() + ", heads, queries"};
  if (positions.is_runtime())  // a padded T: positions past its valid count are padding, whatever len says
    len = {"gdl::ClampedLen<" + len.type + ">", len.text() + ", " + valid_count_expr(positions.symbol)};
  if (padded_leading_rows(qs))  // queries past the valid ones are padding: no positions (a bucket's waste stays small)
    len = {"gdl::ValidRowsLen<" + len.type + ">", len.text() + ", (long long)" + valid_count_expr(qs[0].symbol) +
                                                      " * " + e.product(qs, 1, qs.size() - 1)};
  return len;
}

// A ring kernel's dynamic shared memory, checked against what its layout
// struct says (`size`: the struct's byte count, e.g. gdl::AttentionGroup<...>::bytes).
std::string ring_declaration(const std::string& size, const std::string& bytes) {
  return "  extern __shared__ __align__(128) unsigned char attention_ring[];\n  static_assert(" + size + " == " + bytes +
         ", \"the shared memory gdlc asks the launch for\");\n";
}

bool aligned16(const StepEmitter& e, ir::ValueId id) {
  return plan::buffer_alignment(e.p.buffers.at(static_cast<size_t>(id))) >= 16;
}

std::string emit_attention(StepEmitter& e, const Node& n, LaunchRule& rule) {
  const AttentionOperands a = attention_operands(n);
  const std::string q = e.pointer(a.q), k = e.pointer(a.k), v = e.pointer(a.v);
  const Shape& qs = e.g.node(a.q).type.shape;
  const Shape& ks = e.g.node(a.k).type.shape;
  const Shape& vs = e.g.node(a.v).type.shape;
  const Dim positions_dim = attention_positions(e.g, n);
  // paged_attention_shared takes the tokens of its ragged batch as the queries of one sequence.
  const bool shared = n.op == Op::kPagedAttentionShared;
  std::string body = row_locals(e, qs, ks, a.causal() || shared, positions_dim);
  // The operands' sources in argument order (their pointers are declared in that order).
  Source len = int_source(e, a.len, a.by_sequence() ? "heads" : "heads * queries");
  std::string kv, shared_blocks, partial;
  if (a.paged()) {
    const std::string table = e.pointer(a.blocks);
    const Shape& bs = e.g.node(a.blocks).type.shape;
    const std::string block = std::to_string(ks[2].extent);
    if (a.by_sequence()) {
      const std::string ids = e.pointer(a.sequence);
      kv = "gdl::KvPagesBySequence<" + block + ">{" + table + ", " + ids + ", heads, kv_heads, group, " +
           e.dim(bs.back()) + ", " + e.dim(ks[0]) + ", " + valid_count_or_extent(bs[0]) + "}";
      shared_blocks = "gdl::SharedTokenBlocks{" + ids + ", " + valid_count_or_extent(qs[0]) + ", " +
                      std::to_string(a.shared_block) + ", " + std::to_string(a.shared_min_tokens) + "}";
      // The decode kernels leave the shared blocks to paged_attention_shared, which leaves the others to them.
      len = {"gdl::SequenceLen<" + len.type + ">", len.text() + ", " + ids + ", heads, " + valid_count_or_extent(bs[0]) + ", " +
                                                       (shared ? "gdl::SharedTokenBlocks{}" : shared_blocks)};
      if (shared) partial = e.pointer(a.partial);
    } else {
      kv = "gdl::KvPages<" + block + ">{" + table + ", heads, queries, kv_heads, group, " + e.dim(bs.back()) + ", " +
           e.dim(ks[0]) + "}";
    }
  } else {
    kv = "gdl::KvRows{heads, queries, kv_heads, group, positions}";
  }
  std::optional<Source> start;
  if (a.causal()) start = int_source(e, a.start, "heads * queries");
  const Source lengths = row_lengths(e, len, start, qs, positions_dim);
  const std::string out = e.result_pointer();
  const std::string shared_tasks = shared ? ", gdl::SharedBlocksOnly<" + std::to_string(vs.back().extent) + ", " +
                                                storage_type(n.type.dtype) + ">{" + shared_blocks + ", " + partial +
                                                ", " + out + ", queries, heads, group}"
                                          : "";
  int64_t d_max = max_extent(qs.back(), e.g), dv_max = max_extent(vs.back(), e.g);
  GDL_INTERNAL_ASSERT(d_max <= kAttentionMaxHeadDim && dv_max <= kAttentionMaxHeadDim,
                      "attention head dims above " + std::to_string(kAttentionMaxHeadDim) + " are not supported");
  const AttentionChoice choice = choose_attention(e.g, n);
  auto buffer = [&](ir::ValueId id) -> const plan::Buffer& { return e.p.buffers.at(static_cast<size_t>(id)); };
  const bool aligned = aligned16(e, a.q) && aligned16(e, a.k) && aligned16(e, a.v);
  // A ragged batch's decode kernels where the step can hold shared token
  // blocks (min_tokens tokens or more at the layout): a second kernel, without
  // splits, which the runtime takes at those rows. The tokens alone fill the
  // GPU there, and every split of a shared block's token is a block launched
  // to find no work (with 3 splits, 203 us a layer at 2048 tokens, H100).
  const bool one_split = n.op == Op::kPagedAttention && a.shared_block > 0 &&
                         e.second_kernel_from_rows(a.shared_min_tokens * qs[1].extent, sub_shape(qs, 0, qs.size() - 1));
  // share_ragged_attention splits a paged_attention only where the prefill kernel fits (choose_shared_token_blocks);
  // whole rows of f16/bf16 heads of 64 or 128 are 16-byte aligned, and sm_80 is the f16/bf16 kernels' floor.
  GDL_INTERNAL_ASSERT(!shared || (choice.prefill_query_block == a.shared_block && aligned && e.sm >= 80 &&
                                  aligned16(e, a.partial)),
                      "paged_attention_shared needs the prefill kernel, 16-byte aligned operands and sm_80");
  const std::string type = storage_type(n.type.dtype);
  const std::string layout = std::to_string(d_max) + ", " + std::to_string(dv_max);  // D, DV
  if (choice.prefill_query_block > 0 && aligned && e.sm >= 80) {  // cp.async, ldmatrix and bf16 mma: sm_80
    const std::string ring = std::to_string(choice.prefill_positions) + ", " + std::to_string(choice.prefill_stages) +
                             ", " + std::to_string(kAttentionPrefillWarps);  // P, STAGES, WARPS
    const std::string bytes = std::to_string(choice.prefill_shared_bytes);
    body += "  // attention kernel: blocks of " + std::to_string(choice.prefill_query_block) +
            (shared ? " tokens of one sequence" : " causal queries") +
            " times the query heads of a k/v head on tensor cores, a ring of " + bytes + " bytes\n";
    body += ring_declaration("gdl::AttentionPrefill<" + layout + ", " + type + ", " + ring + ">::bytes", bytes);
    body += "  gdl::attention_prefill<" + layout + ", " + ring + ", " + e.idx + ">(" + q + ", " + k + ", " + v + ", " +
            out + ", " + lengths.text() + ", " + kv + ", rows, heads, queries, kv_heads, positions, " +
            std::to_string(choice.prefill_query_block) + ", " + float_literal(n.attrs.value) + ", attention_ring" +
            shared_tasks + ");\n";
    rule = task_launch({{sub_shape(qs, 0, qs.size() - 3), 1},
                        {{ks[ks.size() - 3]}, 1},
                        {{qs[qs.size() - 3]}, choice.prefill_query_block}},
                       static_cast<uint32_t>(32 * kAttentionPrefillWarps));
    rule.shared_bytes = choice.prefill_shared_bytes;
    return body;
  }
  if (choice.group_splits > 0 && aligned && e.sm >= 80) {  // cp.async, ldmatrix and bf16 mma: sm_80
    const int splits = one_split ? 1 : choice.group_splits;
    const std::string ring = std::to_string(choice.group_positions) + ", " + std::to_string(choice.group_stages) +
                             ", " + std::to_string(choice.group_heads);  // P, STAGES, HEADS
    const std::string bytes = std::to_string(choice.group_shared_bytes);
    body += "  // attention kernel: grouped query heads on tensor cores, " + std::to_string(choice.group_heads) +
            " query head(s) a task, " + std::to_string(splits) + " block(s) per task over the positions, a ring of " +
            bytes + " bytes\n";
    body += ring_declaration("gdl::AttentionGroup<" + layout + ", " + type + ", " + ring + ">::bytes", bytes);
    const std::string scratch = e.split_scratch(splits, false, choice.scratch, body);
    body += "  gdl::attention_group<" + layout + ", " + ring + ", " + e.idx + ">(" + q + ", " + k + ", " + v + ", " + out +
            ", " + lengths.text() + ", " + kv + ", rows, positions, " + float_literal(n.attrs.value) + ", " + scratch +
            ", attention_ring, " + std::to_string(choice.group_least_split_stages) + ");\n";
    rule = task_launch({{sub_shape(qs, 0, qs.size() - 1), choice.group_heads}, {{Dim::constant(splits)}, 1}},
                       kAttentionBlock);
    rule.shared_bytes = choice.group_shared_bytes;
    return body;
  }
  if (choice.stream_splits > 0 && aligned && e.sm >= 90) {  // bulk copies and mbarrier byte counts: sm_90
    const int splits = one_split ? 1 : choice.stream_splits;
    const std::string ring = std::to_string(choice.stream_positions) + ", " + std::to_string(choice.stream_stages);
    const std::string bytes = std::to_string(choice.stream_shared_bytes);
    body += "  // attention kernel: streamed, " + std::to_string(splits) +
            " block(s) per row over the positions, a ring of " + bytes + " bytes, " +
            std::to_string(choice.stream_heads) + " query head(s) a task\n";
    body += ring_declaration("gdl::AttentionStream<" + layout + ", " + type + ", " + ring + ">::bytes", bytes);
    const std::string scratch = e.split_scratch(splits, false, choice.scratch, body);
    // k and v params (a KV cache that persists across runs): their first copies go out before the
    // kernel waits for the ones it depends on (gdl_attention.cuh KV_EARLY), so it waits in its body.
    auto param = [&](ir::ValueId id) { return buffer(id).region == plan::Region::kParams; };
    const bool kv_early = choice.stream_early && !a.paged() && param(a.k) && param(a.v);
    e.waits_in_body |= kv_early;
    e.early_start |= kv_early;
    body += "  gdl::attention_stream<" + layout + ", " + ring + ", " + (kv_early ? "true" : "false") + ", " +
            std::to_string(choice.stream_heads) + ", " + e.idx + ">(" +
            q + ", " + k + ", " + v + ", " + out + ", " + lengths.text() + ", " + kv + ", rows, positions, " +
            float_literal(n.attrs.value) + ", " + scratch + ", attention_ring);\n";
    rule = task_launch({{sub_shape(qs, 0, qs.size() - 1), choice.stream_heads}, {{Dim::constant(splits)}, 1}},
                       kAttentionBlock);
    rule.shared_bytes = choice.stream_shared_bytes;
    return body;
  }
  body += e.local("D", e.dim(qs.back()));
  body += e.local("DV", e.dim(vs.back()));
  const int splits = one_split ? 1 : choice.splits;
  body += "  // attention kernel: split, " + std::to_string(splits) + " block(s) per row over the positions\n";
  body += "  gdl::attention_split<" + std::to_string(std::max<int64_t>(1, d_max)) + ", " +
          std::to_string(std::max<int64_t>(1, dv_max)) + ", " + std::to_string(kAttentionChunk) + ", " + e.idx + ">(" + q +
          ", " + k + ", " + v + ", " + out + ", " + lengths.text() + ", " + kv + ", rows, positions, D, DV, " +
          float_literal(n.attrs.value) + ", " + e.split_scratch(splits, false, choice.scratch, body) + ");\n";
  rule = task_launch({{sub_shape(qs, 0, qs.size() - 1), 1}, {{Dim::constant(splits)}, 1}}, kAttentionBlock);
  return body;
}

// The derivative's kernels (gdl_attention_backward.cuh, kernel_choice.cc
// choose_attention_backward). vjp_attention builds them for f16/bf16 heads
// of 64 or 128; they also need sm_80, as the f16/bf16 matmul kernels do,
// and 16-byte aligned operands, which whole rows of such heads always are
// (a view's offset is a multiple of a row), so either missing is a
// compiler bug.
std::string emit_attention_backward(StepEmitter& e, const Node& n, LaunchRule& rule) {
  const AttentionOperands a = attention_operands(n);
  const bool stats_kernel = n.op == Op::kAttentionStats, kv_kernel = n.op == Op::kAttentionGradKV;
  // The pointers in argument order.
  const std::string q = e.pointer(a.q), k = e.pointer(a.k), v_or_o = e.pointer(stats_kernel ? a.o : a.v),
                    dout = e.pointer(a.dout), stats = stats_kernel ? "" : e.pointer(a.stats);
  const Shape& qs = e.g.node(a.q).type.shape;
  const Shape& ks = e.g.node(a.k).type.shape;
  const Dim positions = ks[ks.size() - 2];
  std::string body = row_locals(e, qs, ks, a.causal(), positions);
  const Source len = int_source(e, a.len, "heads * queries");
  std::optional<Source> start;
  if (a.causal()) start = int_source(e, a.start, "heads * queries");
  const Source lengths = row_lengths(e, len, start, qs, positions);
  const std::string out = e.result_pointer();
  const AttentionBackwardChoice c = choose_attention_backward(e.g, n);
  GDL_INTERNAL_ASSERT(c.query_block > 0 && e.sm >= 80 && aligned16(e, a.q) && aligned16(e, a.k) &&
                          aligned16(e, stats_kernel ? a.o : a.v) && aligned16(e, a.dout),
                      "attention's derivative kernels need f16/bf16 heads of 64 or 128, 16-byte aligned operands and sm_80");
  const std::string d = std::to_string(qs.back().extent),
                    dv = std::to_string(e.g.node(stats_kernel ? a.o : a.v).type.shape.back().extent);
  const std::string layout = d + ", " + dv + ", " + std::to_string(c.positions) + ", " + std::to_string(c.stages) + ", " +
                             std::to_string(kAttentionPrefillWarps);  // D, DV, P, STAGES, WARPS
  const std::string bytes = std::to_string(c.shared_bytes);
  const char* kernel = stats_kernel ? "stats" : kv_kernel ? "kv" : "q";
  body += "  // attention's derivative kernel (" + std::string(kernel) + "), a ring of " + bytes + " bytes\n";
  body += ring_declaration("gdl::AttentionBackward<" + d + ", " + dv + ", " + storage_type(e.g.node(a.q).type.dtype) +
                               ", " + std::to_string(c.positions) + ", " + std::to_string(c.stages) + ", " +
                               std::to_string(kAttentionPrefillWarps) + ">::" + kernel + "_bytes",
                           bytes);
  const std::string tail = lengths.text() + ", gdl::KvRows{heads, queries, kv_heads, group, positions}, rows, heads, "
                           "queries, kv_heads, positions, ";
  const std::string block = std::to_string(c.query_block) + ", ";
  const std::string scale = float_literal(n.attrs.value);
  body += "  gdl::attention_backward_" + std::string(kernel) + "<" + layout + ", " + e.idx + ">(" + q + ", " + k + ", " +
          v_or_o + ", " + dout + ", " + (stats_kernel ? "" : stats + ", ") + out + ", " + tail +
          (kv_kernel ? "" : block) + scale + ", attention_ring);\n";
  const size_t sequence_dims = qs.size() - (a.causal() ? 3 : 2);
  const TaskFactor sequences{sub_shape(qs, 0, sequence_dims), 1}, kv_heads{{ks[ks.size() - 3]}, 1};
  const TaskFactor blocks = kv_kernel ? TaskFactor{{positions}, 16 * kAttentionPrefillWarps}
                                      : TaskFactor{{a.causal() ? qs[sequence_dims] : Dim::constant(1)}, c.query_block};
  rule = task_launch({sequences, kv_heads, blocks}, static_cast<uint32_t>(32 * kAttentionPrefillWarps));
  rule.shared_bytes = c.shared_bytes;
  return body;
}

// q.k would sum over padding.
void attention_blocks_padding(const ir::Graph& g, const Node& n, const PaddingBlock& block) {
  const Shape& q = g.node(n.args.at(0)).type.shape;
  if (!q.empty() && q.back().is_runtime())
    block(q.back().symbol, " has the run-time head dim " + g.dims[static_cast<size_t>(q.back().symbol)].name +
                               ": q.k would sum over padding");
}

// The derivative of attention, recomputed from its operands (the forward
// keeps no probabilities). Where the derivative's kernels fit
// (attention_blocks_fit: f16/bf16 heads of 64 or 128), three kernels
// that stream the positions; otherwise matmuls with the query heads of each
// k/v head as one matrix
// of rows (head in group, query), so GQA's k and v are read once per group
// and their parts summed over the group by the matmuls themselves.
//   s = (scale q) k^T, masked to t < len (and t <= start + i), in f32
//   p = softmax(s) over the valid positions (a row with none: zeros)
//   dv = p^T do;  dp = do v^T;  ds = p (dp - sum(dp p)) scale
//   dq = ds k;    dk = ds^T q
// The five matmuls run in the operands' dtype (in f16 or bf16 the
// recomputed scores are rounded to it, as PyTorch's math path rounds
// them), the softmax and ds in f32. It holds p and ds whole (rows x T per
// k/v head), like PyTorch's math path.
void vjp_attention(AdjointBuilder& b, ValueId y, ValueId dy, std::vector<ValueId>& d) {
  const Node n = b.node(y);
  const AttentionOperands a = attention_operands(n);
  const TensorType q = b.type(a.q), k = b.type(a.k), v = b.type(a.v);
  const size_t kr = k.shape.size();
  const Dim positions = k.shape[kr - 2];
  if (positions.is_runtime() || q.shape.back().is_runtime() || v.shape.back().is_runtime()) {
    b.refused = "over a run-time number of positions or a run-time head dim (its gradient is written for fixed ones)";
    return;
  }
  const Shape sequences(k.shape.begin(), k.shape.end() - 3);
  const auto s = static_cast<int64_t>(sequences.size());
  const Dim heads = q.shape[q.shape.size() - 2], kv_heads = k.shape[kr - 3];
  const int64_t queries = a.causal() ? q.shape[q.shape.size() - 3].extent : 1;
  if (heads.is_runtime() || kv_heads.is_runtime() || (a.causal() && q.shape[q.shape.size() - 3].is_runtime())) {
    b.refused = "with a run-time number of heads or queries (its gradient is written for fixed ones)";
    return;
  }
  const int64_t group = heads.extent / kv_heads.extent, rows = group * queries;
  if (attention_blocks_fit(q.dtype, q.shape.back().extent, v.shape.back().extent, group)) {
    // Three kernels that stream the positions (gdl_attention_backward.cuh).
    std::vector<ValueId> tail = {a.len};
    if (a.causal()) tail.push_back(a.start);
    auto operands = [&](std::vector<ValueId> head) {
      head.insert(head.end(), tail.begin(), tail.end());
      return head;
    };
    const ValueId stats = b.emit(Op::kAttentionStats, operands({a.q, a.k, y, dy}), n.attrs);
    d[0] = b.emit(Op::kAttentionGradQ, operands({a.q, a.k, a.v, dy, stats}), n.attrs);
    const ValueId dkv = b.emit(Op::kAttentionGradKV, operands({a.q, a.k, a.v, dy, stats}), n.attrs);
    const int64_t dk = q.shape.back().extent;
    d[1] = b.slice_last_axis(dkv, 0, dk);
    d[2] = b.slice_last_axis(dkv, dk, dk + v.shape.back().extent);
    return;
  }
  if (s + 4 > kMaxRank) {  // [S..., Q, KVH, G, D]
    b.refused = "with " + std::to_string(s) + " sequence dims (its gradient splits q into [sequences..., Q, KVH, " +
                "G, D], rank at most " + std::to_string(kMaxRank) + ")";
    return;
  }
  const auto with = [&](std::initializer_list<Dim> tail) {
    Shape r = sequences;
    r.insert(r.end(), tail);
    return r;
  };
  const auto lead = [&](std::initializer_list<int64_t> tail) {
    std::vector<int64_t> perm;
    for (int64_t i = 0; i < s; ++i) perm.push_back(i);
    for (int64_t t : tail) perm.push_back(s + t);
    return perm;
  };
  const Dim kvh = kv_heads, g = Dim::constant(group), qd = Dim::constant(queries), r = Dim::constant(rows);
  // [S..., (Q,) NH, X] -> [S..., KVH, G * Q, X] and back.
  const auto grouped = [&](ValueId x) {
    const Dim width = b.shape(x).back();
    const ValueId split = b.reshape(x, with({qd, kvh, g, width}));
    return b.reshape(b.transpose(split, lead({1, 2, 0, 3})), with({kvh, r, width}));
  };
  const auto ungrouped = [&](ValueId x, const Shape& like) {
    const Dim width = b.shape(x).back();
    const ValueId split = b.reshape(x, with({kvh, g, qd, width}));
    return b.reshape(b.transpose(split, lead({2, 0, 1, 3})), like);
  };
  const ValueId qg = grouped(a.q), dog = grouped(dy);

  // The mask over [S..., KVH, G * Q, T]: position t < len, and with start t <= start + (row % Q).
  const auto per_sequence = [&](ValueId x) {  // rank 0, or S... -> [S..., 1, 1, 1]
    return b.type(x).rank() == 0 ? x : b.reshape(x, with({Dim::constant(1), Dim::constant(1), Dim::constant(1)}));
  };
  const ValueId t = b.arange(positions);
  ValueId valid = b.binary(Op::kLt, t, per_sequence(a.len));
  if (a.causal()) {
    const ValueId row = b.arange(r);
    const ValueId query = b.reshape(b.binary(Op::kMod, row, b.constant(static_cast<double>(queries), DType::kI32)),
                                    {r, Dim::constant(1)});
    const ValueId last = b.add(per_sequence(a.start), query);
    valid = b.binary(Op::kAnd, valid, b.binary(Op::kLe, t, last));
  }
  // q scaled before the product, as the scores' magnitude is what an f16
  // result can hold (the forward kernels scale an f32 sum instead).
  const ValueId scale = b.constant(n.attrs.value, DType::kF32);
  const ValueId scaled = b.mul(qg, n.attrs.value);
  const ValueId scores = b.cast(b.matmul(scaled, b.swap_last_two(a.k)), DType::kF32);
  const ValueId lowest = b.constant(-std::numeric_limits<float>::max(), DType::kF32);
  ir::Attrs last;
  last.axis = static_cast<int>(s + 2);
  const ValueId p = b.where_else_zero(valid, b.emit(Op::kSoftmax, {b.where(valid, scores, lowest)}, last));

  const ValueId dp = b.cast(b.matmul(dog, b.swap_last_two(a.v)), DType::kF32);
  const ValueId along = b.reduce(Op::kSum, b.mul(dp, p), {last.axis}, true);
  const ValueId ds = b.cast(b.mul(b.mul(p, b.sub(dp, along)), scale), q.dtype);
  d[0] = ungrouped(b.matmul(ds, a.k), q.shape);
  d[1] = b.matmul(b.swap_last_two(ds), qg);
  d[2] = b.matmul(b.swap_last_two(b.cast(p, q.dtype)), dog);
}

}  // namespace

void add_attention_ops(std::vector<OpDef>& defs) {
  // Operands first (start, and paged_attention's sequence, optional), then scale.
  auto add = [&](Op op, const char* callable, std::vector<const char*> params, size_t operands, InferFn infer,
                 EvalFn eval, KernelFn kernel) {
    OpDef d;
    d.op = op;
    d.fusion = FusionClass::kAttention;
    d.callable = callable;
    d.params = std::move(params);
    d.operands = operands;
    d.required = d.operands - 1;  // all but start
    d.min_args = d.required;
    d.max_args = d.operands;
    d.infer = infer;
    d.attr_text = scale_attr;
    d.eval = eval;
    d.kernel = kernel;
    defs.push_back(d);
  };
  // paged_attention has no derivative rule: its cache is a pool shared by
  // sequences, written by serving, not trained through.
  add(Op::kAttention, "attention", {"q", "k", "v", "len", "start", "scale"}, 5, infer_attention<false>, eval_attention,
      emit_attention);
  defs.back().vjp = vjp_attention;
  defs.back().blocks_padding = attention_blocks_padding;
  add(Op::kPagedAttention, "paged_attention", {"q", "k_pool", "v_pool", "len", "blocks", "start", "sequence", "scale"},
      7, infer_attention<true>, eval_attention, emit_attention);
  defs.back().required = defs.back().min_args = 5;  // start or sequence, never both
  defs.back().max_args = 6;
  defs.back().blocks_padding = attention_blocks_padding;
  // A ragged batch's shared token blocks (share_ragged_attention): no source form.
  add(Op::kPagedAttentionShared, nullptr, {"q", "k_pool", "v_pool", "len", "blocks", "sequence", "partial"}, 7,
      infer_attention_shared, eval_attention, emit_attention);
  defs.back().required = defs.back().min_args = 7;
  // The derivative's kernels: no source form (scale is the forward's attribute), no derivative of their own.
  add(Op::kAttentionStats, nullptr, {"q", "k", "o", "do", "len", "start"}, 6, infer_attention_stats,
      eval_attention_stats, emit_attention_backward);
  add(Op::kAttentionGradQ, nullptr, {"q", "k", "v", "do", "stats", "len", "start"}, 7, infer_attention_grad_q,
      eval_attention_grad, emit_attention_backward);
  add(Op::kAttentionGradKV, nullptr, {"q", "k", "v", "do", "stats", "len", "start"}, 7, infer_attention_grad_kv,
      eval_attention_grad, emit_attention_backward);
}

}  // namespace gdl::ops
