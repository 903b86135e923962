// attention(q, k, v, len, scale = 1/sqrt(D)): q [..., NH, D], k and v
// [..., KVH, T, D(v)] with KVH dividing NH (grouped-query attention: query
// head h reads k/v head h / (NH / KVH); no repeated cache), len an i32:
// rank 0 (one length for every row, a device scalar input) or q's dims
// before its heads (one length per sequence, `len : i32[B]`). For every
// row of q, softmax(scale * q.k_t) over the positions t < clamp(len, 0, T),
// then the weighted sum of v_t; no valid position gives a zero row. Over a
// run-time T that buckets pad, positions past its valid count are padding
// whatever len says.
//
// Kernels (gdl_attention.cuh; plan/kernel_choice.h choose_attention): the
// streamed one (k and v through a ring of bulk copies, sm_90, head dims of
// whole 16-byte vectors, 16-byte aligned operands) or the split one; both
// split a row's positions over several blocks.
#include <algorithm>
#include <cmath>
#include <limits>

#include "codegen/cuda_text.h"
#include "codegen/step_emitter.h"
#include "interp/host_ops.h"
#include "internal_error.h"
#include "ops/families.h"
#include "plan/kernel_choice.h"

namespace gdl::ops {
namespace {

using ir::Node;
using ir::Op;

constexpr int kAttentionBlock = 256;
constexpr int kAttentionChunk = 512;             // positions scored per pass (shared memory)
constexpr int64_t kAttentionMaxHeadDim = 4096;   // keeps its static shared memory under 48 KiB

TypeResult infer_attention(TypeQuery& q) {
  const TensorType* tq = q.tensor(0, "attention q");
  const TensorType* tk = tq ? q.tensor(1, "attention k") : nullptr;
  const TensorType* tv = tk ? q.tensor(2, "attention v") : nullptr;
  if (!tv) return TypeResult::failed();
  std::string described;
  const TensorType* len = q.value(3, "attention len", DType::kI32, &described);
  if (!len && described.empty()) return TypeResult::failed();
  const std::string all = "q " + q.text(*tq) + ", k " + q.text(*tk) + ", v " + q.text(*tv);
  if (!is_float(tq->dtype) || tk->dtype != tq->dtype || tv->dtype != tq->dtype)
    return q.error(kAtOp, "attention q, k and v must share one float dtype: " + all, "convert them with cast");
  const std::string layout = "q is [..., NH, D], k and v are [..., KVH, T, D] with KVH dividing NH";
  if (tq->rank() < 2 || tk->rank() != tq->rank() + 1 || tv->rank() != tk->rank())
    return q.error(kAtOp, "attention ranks do not fit: " + all, layout);
  const Shape q_rows(tq->shape.begin(), tq->shape.end() - 1);
  const Shape k_rows(tk->shape.begin(), tk->shape.end() - 2);
  const Shape sequences(q_rows.begin(), q_rows.end() - 1);  // q's dims before its heads
  const Shape k_positions(tk->shape.begin(), tk->shape.end() - 1), v_positions(tv->shape.begin(), tv->shape.end() - 1);
  const Dim &heads = q_rows.back(), &kv_heads = k_rows.back();
  const bool grouped = heads == kv_heads || (!heads.is_runtime() && !kv_heads.is_runtime() && kv_heads.extent > 0 &&
                                             heads.extent % kv_heads.extent == 0);
  if (Shape(k_rows.begin(), k_rows.end() - 1) != sequences || !grouped || k_positions != v_positions ||
      !(tq->shape.back() == tk->shape.back()))
    return q.error(kAtOp, "attention shapes do not fit: " + all, layout);
  if (!len || len->dtype != DType::kI32 || (len->rank() != 0 && len->shape != sequences))
    return q.error(3,
                   "attention len must be a rank-0 i32 or one i32 per sequence" +
                       (sequences.empty() ? std::string() : " (" + q.text(sequences) + ")") + ", got " +
                       (len ? q.text(*len) : described),
                   "declare it as input len : i32; or input len : i32[B];");
  const Dim& head = tq->shape.back();
  if (q.given(4)) {
    if (!q.number(4, "scale", &q.attrs().value)) return TypeResult::failed();
  } else if (head.is_runtime()) {
    return q.error(kAtOp,
                   "the head dim of q is the run-time dim '" + q.dims()[static_cast<size_t>(head.symbol)].name +
                       "', so the default scale 1/sqrt(D) is unknown",
                   "give scale = ... explicitly");
  } else {
    q.attrs().value = 1.0 / std::sqrt(static_cast<double>(head.extent));
  }
  Shape out = q_rows;
  out.push_back(tv->shape.back());
  return TensorType{tq->dtype, out};
}

std::string scale_attr(const ir::Attrs& a) { return "scale=" + number_text(a.value); }

// For every query row, softmax(scale * q.k_t) over t < clamp(len, 0, the
// valid T), weighted sum of v_t.
void eval_attention(const Node& n, const EvalArgs& in, HostTensor& out) {
  const HostTensor &q = *in.values[0], &k = *in.values[1], &v = *in.values[2], &len = *in.values[3];
  const int64_t t_valid = in.valid(1, -2);
  size_t rq = q.shape.size();
  GDL_INTERNAL_ASSERT(rq >= 2 && k.shape.size() == rq + 1 && v.shape.size() == rq + 1, "attention operand ranks");
  int64_t d = q.shape.back(), t_max = k.shape[rq - 1], dv = v.shape.back();
  const int64_t heads = q.shape[rq - 2], kv_heads = k.shape[rq - 2];
  GDL_INTERNAL_ASSERT(host::Extents(q.shape.begin(), q.shape.end() - 2) == host::Extents(k.shape.begin(), k.shape.end() - 3) &&
                          kv_heads > 0 && heads % kv_heads == 0 &&
                          host::Extents(k.shape.begin(), k.shape.end() - 1) == host::Extents(v.shape.begin(), v.shape.end() - 1) &&
                          k.shape.back() == d,
                      "attention shapes disagree");
  int64_t rows = host::product(q.shape) / std::max<int64_t>(d, 1);
  GDL_INTERNAL_ASSERT(len.data.size() == 1 || static_cast<int64_t>(len.data.size()) * heads == rows, "attention len size");
  const int64_t group = heads / kv_heads;  // query heads per k/v head
  double scale = n.attrs.value;
  std::vector<double> score(static_cast<size_t>(t_max));
  for (int64_t r = 0; r < rows; ++r) {
    const double length = len.data[len.data.size() == 1 ? 0 : static_cast<size_t>(r / heads)];
    const int64_t valid = std::clamp<int64_t>(static_cast<int64_t>(length), 0, std::min(t_max, t_valid));
    const double* qr = q.data.data() + r * d;
    const double* kr = k.data.data() + r / group * t_max * d;
    const double* vr = v.data.data() + r / group * t_max * dv;
    double* o = out.data.data() + r * dv;  // stays zero when no position is valid
    double peak = -std::numeric_limits<double>::infinity();
    for (int64_t t = 0; t < valid; ++t) {
      double dot = 0;
      for (int64_t i = 0; i < d; ++i) dot += qr[i] * kr[t * d + i];
      score[t] = dot * scale;
      peak = std::max(peak, score[t]);
    }
    double total = 0;
    for (int64_t t = 0; t < valid; ++t) total += score[t] = std::exp(score[t] - peak);
    for (int64_t t = 0; t < valid; ++t)
      for (int64_t i = 0; i < dv; ++i) o[i] += score[t] / total * vr[t * dv + i];
  }
}

// The length as the kernels take it: a value, or read from its buffer; over
// a padded T clamped to its valid count.
std::string length_source(StepEmitter& e, const Node& n) {
  const ir::ValueId a = n.args.at(3);
  const Shape& qs = e.g.node(n.args.at(0)).type.shape;
  const bool per_sequence = e.g.node(a).type.rank() > 0;  // one length per sequence, for its query heads' rows
  const std::string source = e.is_inline_leaf(a) ? "gdl::IntValue{" + e.inline_value(a) + "}"
                             : per_sequence ? "gdl::IntPerRow{" + e.pointer(a) + ", " + e.dim(qs[qs.size() - 2]) + "}"
                                            : "gdl::IntAt{" + e.pointer(a) + "}";
  const Shape& ks = e.g.node(n.args.at(1)).type.shape;
  const Dim& positions = ks.at(ks.size() - 2);
  if (!positions.is_runtime()) return source;
  // A padded T: positions past its valid count are padding, whatever len says.
  const char* type = e.is_inline_leaf(a) ? "gdl::IntValue" : per_sequence ? "gdl::IntPerRow" : "gdl::IntAt";
  return std::string("gdl::ClampedLen<") + type + ">{" + source + ", " + valid_count_expr(positions.symbol) + "}";
}

std::string emit_attention(StepEmitter& e, const Node& n, LaunchRule& rule) {
  const std::string q = e.pointer(n.args.at(0)), k = e.pointer(n.args.at(1)), v = e.pointer(n.args.at(2));
  const std::string len = length_source(e, n);
  const std::string out = e.result_pointer();
  const Shape& qs = e.g.node(n.args.at(0)).type.shape;
  const Shape& ks = e.g.node(n.args.at(1)).type.shape;
  const Shape& vs = e.g.node(n.args.at(2)).type.shape;
  int64_t d_max = max_extent(qs.back(), e.g), dv_max = max_extent(vs.back(), e.g);
  GDL_INTERNAL_ASSERT(d_max <= kAttentionMaxHeadDim && dv_max <= kAttentionMaxHeadDim,
                      "attention head dims above " + std::to_string(kAttentionMaxHeadDim) + " are not supported");
  const AttentionChoice choice = choose_attention(e.g, n);
  std::string body;
  body += e.local("rows", e.product(qs, 0, qs.size() - 1));
  body += e.local("group", e.dim(qs[qs.size() - 2]) + " / " + e.dim(ks[ks.size() - 3]));  // query heads per k/v head
  body += e.local("positions", e.dim(ks[ks.size() - 2]));
  auto buffer = [&](int arg) -> const plan::Buffer& { return e.p.buffers.at(static_cast<size_t>(n.args.at(arg))); };
  auto aligned16 = [&](int arg) { return plan::buffer_alignment(buffer(arg)) >= 16; };
  const bool aligned = aligned16(0) && aligned16(1) && aligned16(2);  // q, k, v
  if (choice.stream_splits > 0 && aligned && e.sm >= 90) {  // bulk copies and mbarrier byte counts: sm_90
    const std::string layout = std::to_string(d_max) + ", " + std::to_string(dv_max);  // D, DV
    const std::string ring = std::to_string(choice.stream_positions) + ", " + std::to_string(choice.stream_stages);
    const std::string bytes = std::to_string(choice.stream_shared_bytes);
    body += "  // attention kernel: streamed, " + std::to_string(choice.stream_splits) +
            " block(s) per row over the positions, a ring of " + bytes + " bytes\n";
    body += "  extern __shared__ __align__(128) unsigned char attention_ring[];\n";
    body += "  static_assert(gdl::AttentionStream<" + layout + ", " + storage_type(n.type.dtype) + ", " + ring +
            ">::bytes == " + bytes + ", \"the shared memory gdlc asks the launch for\");\n";
    const std::string scratch = e.split_scratch(choice.stream_splits, false, choice.scratch, body);
    // k and v params (a KV cache that persists across runs): their first copies go out before the
    // kernel waits for the ones it depends on (gdl_attention.cuh KV_EARLY), so it waits in its body.
    auto param = [&](int arg) { return buffer(arg).region == plan::Region::kParams; };
    const bool kv_early = choice.stream_early && param(1) && param(2);
    e.waits_in_body |= kv_early;
    e.early_start |= kv_early;
    body += "  gdl::attention_stream<" + layout + ", " + ring + ", " + (kv_early ? "true" : "false") + ", " + e.idx + ">(" +
            q + ", " + k + ", " + v + ", " + out + ", " + len + ", rows, group, positions, " + float_literal(n.attrs.value) + ", " +
            scratch + ", attention_ring);\n";
    rule = task_launch({{sub_shape(qs, 0, qs.size() - 1), 1}, {{Dim::constant(choice.stream_splits)}, 1}}, kAttentionBlock);
    rule.shared_bytes = choice.stream_shared_bytes;
    return body;
  }
  body += e.local("D", e.dim(qs.back()));
  body += e.local("DV", e.dim(vs.back()));
  body += "  // attention kernel: split, " + std::to_string(choice.splits) + " block(s) per row over the positions\n";
  body += "  gdl::attention_split<" + std::to_string(std::max<int64_t>(1, d_max)) + ", " +
          std::to_string(std::max<int64_t>(1, dv_max)) + ", " + std::to_string(kAttentionChunk) + ", " + e.idx + ">(" + q +
          ", " + k + ", " + v + ", " + out + ", " + len + ", rows, group, positions, D, DV, " + float_literal(n.attrs.value) + ", " +
          e.split_scratch(choice.splits, false, choice.scratch, body) + ");\n";
  rule = task_launch({{sub_shape(qs, 0, qs.size() - 1), 1}, {{Dim::constant(choice.splits)}, 1}}, kAttentionBlock);
  return body;
}

// q.k would sum over padding.
void attention_blocks_padding(const ir::Graph& g, const Node& n, const PaddingBlock& block) {
  const Shape& q = g.node(n.args.at(0)).type.shape;
  if (!q.empty() && q.back().is_runtime())
    block(q.back().symbol, " has the run-time head dim " + g.dims[static_cast<size_t>(q.back().symbol)].name +
                               ": q.k would sum over padding");
}

}  // namespace

void add_attention_ops(std::vector<OpDef>& defs) {
  OpDef d;
  d.op = Op::kAttention;
  d.fusion = FusionClass::kAttention;
  d.callable = "attention";
  d.params = {"q", "k", "v", "len", "scale"};
  d.operands = 4;
  d.required = 4;
  d.min_args = d.max_args = 4;
  d.infer = infer_attention;
  d.attr_text = scale_attr;
  d.eval = eval_attention;
  d.kernel = emit_attention;
  d.blocks_padding = attention_blocks_padding;
  defs.push_back(d);
}

}  // namespace gdl::ops
