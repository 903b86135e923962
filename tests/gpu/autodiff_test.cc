// Backward programs (grad) on the GPU against the CPU reference, by graph
// and by eager launch: the kernels the derivative rules produce
// (broadcast_to, sums back to a broadcast operand's shape, zeros with a
// slice's region written, matmuls reading an operand transposed, norms'
// statistics recomputed, scatter_add's atomic rows), at several values of
// a run-time batch; and
// training steps whose optimizer state is chained through state run after
// run.
#include <cmath>
#include <string>
#include <vector>

#include "gpu_test_util.h"

using namespace gdl;
using namespace gdl::gpu_test;

namespace {


// A classifier's loss and the gradients of its weights and its input, over
// a run-time batch.
const char* kClassifier = R"(program classifier;
dim B in [1, 48] buckets(8, 48);
input x : {T}[B, 96];
input targets : {T}[B, 24];
input w1 : {T}[96, 160];
input b1 : {T}[160];
input g : {T}[160];
input w2 : {T}[160, 24];
output loss : {T};
output d_w1 : {T}[96, 160];
output d_b1 : {T}[160];
output d_g : {T}[160];
output d_w2 : {T}[160, 24];
output d_x : {T}[B, 96];
let h = gelu(layernorm(x @ w1 + b1, weight = g));
let logits = h @ w2;
let top = max(logits, axis = 1, keepdims = true);
let log_probs = logits - top - log(sum(exp(logits - top), axis = 1, keepdims = true));
let l = -mean(sum(targets * log_probs, axis = 1));
loss = l;
d_w1 = grad(l, w1);
d_b1 = grad(l, b1);
d_g = grad(l, g);
d_w2 = grad(l, w2);
d_x = grad(l, x);
)";

// A decoder block's shapes: rmsnorm, rotary embedding over heads, a causal
// attention written from matmuls and softmax, a SwiGLU MLP, residuals.
const char* kBlock = R"(program block;
const T = 12;
const NH = 4;
const HD = 16;
const H = 64;
const F = 96;
input x : {T}[T, H];
input cos : {T}[T, 1, HD / 2];
input sin : {T}[T, 1, HD / 2];
input norm_w : {T}[H];
input w_qkv : {T}[H, 3 * H];
input w_o : {T}[H, H];
input w_up : {T}[H, 2 * F];
input w_down : {T}[F, H];
input dy : {T}[T, H];
output loss : {T};
output d_x : {T}[T, H];
output d_qkv : {T}[H, 3 * H];
output d_up : {T}[H, 2 * F];
output d_norm : {T}[H];
let n = rmsnorm(x, weight = norm_w);
let qkv = n @ w_qkv;
let q = transpose(rope(reshape(qkv[:, 0:H], [T, NH, HD]), cos, sin), perm = [1, 0, 2]);
let k = transpose(rope(reshape(qkv[:, H:2 * H], [T, NH, HD]), cos, sin), perm = [1, 0, 2]);
let v = transpose(reshape(qkv[:, 2 * H:3 * H], [T, NH, HD]), perm = [1, 0, 2]);
let scores = q @ transpose(k) * 0.25;
let causal = reshape(arange(T), [T, 1]) >= reshape(arange(T), [1, T]);
let p = softmax(where(causal, scores, -1e4), axis = 2);
let attended = reshape(transpose(p @ v, perm = [1, 0, 2]), [T, H]);
let h = x + attended @ w_o;
let up = rmsnorm(h) @ w_up;
let out = h + (silu(up[:, 0:F]) * up[:, F:2 * F]) @ w_down;
let l = sum(reshape(out * dy, [-1]));
loss = l;
d_x = grad(l, x);
d_qkv = grad(l, w_qkv);
d_up = grad(l, w_up);
d_norm = grad(l, norm_w);
)";

// Attention by the attention op in a training step: grouped-query heads,
// causal from position 0, a length per sequence (a padded batch), over a
// run-time batch; attention_block() sets S, NH, KVH and HD.
const char* kAttentionBlock = R"(program attention_block;
dim B in [1, 8];
const S = 16;
const NH = 4;
const KVH = 2;
const HD = 32;
const H = NH * HD;
input x : {T}[B, S, H];
input lens : i32[B];
input norm_w : {T}[H];
input w_q : {T}[H, H];
input w_kv : {T}[H, 2 * KVH * HD];
input w_o : {T}[H, H];
input dy : {T}[B, S, H];
output loss : {T};
output d_x : {T}[B, S, H];
output d_q : {T}[H, H];
output d_kv : {T}[H, 2 * KVH * HD];
output d_o : {T}[H, H];
let n = rmsnorm(x, weight = norm_w);
let q = reshape(n @ w_q, [B, S, NH, HD]);
let kv = n @ w_kv;
let k = transpose(reshape(kv[:, :, 0:KVH * HD], [B, S, KVH, HD]), perm = [0, 2, 1, 3]);
let v = transpose(reshape(kv[:, :, KVH * HD:2 * KVH * HD], [B, S, KVH, HD]), perm = [0, 2, 1, 3]);
let o = attention(q, k, v, lens, start = 0);
let h = x + reshape(o, [B, S, H]) @ w_o;
let l = sum(h * dy, axis = [0, 1, 2]);
loss = l;
d_x = grad(l, x);
d_q = grad(l, w_q);
d_kv = grad(l, w_kv);
d_o = grad(l, w_o);
)";

// A language model's ends: token embeddings read by gather (repeated ids
// among 40 tokens of a 50-row table), and a cross-entropy picked by
// take_along_axis; the table's gradient is scatter_add's atomic sums.
const char* kEmbedding = R"(program embedding;
dim B in [1, 40];
input ids : i32[B];
input targets : i32[B];
input table : {T}[50, 64];
input w_out : {T}[64, 50];
output loss : {T};
output d_table : {T}[50, 64];
output d_w_out : {T}[64, 50];
let logits = rmsnorm(gather(table, ids)) @ w_out;
let top = max(logits, axis = 1, keepdims = true);
let log_probs = logits - top - log(sum(exp(logits - top), axis = 1, keepdims = true));
let l = -mean(take_along_axis(log_probs, reshape(targets, [B, 1])), axis = [0, 1]);
loss = l;
d_table = grad(l, table);
d_w_out = grad(l, w_out);
)";

// Selections in the loss: the 8 best of each row of an input and the 4 best
// of each column of another (both sides select the same elements: the
// values compared are the bound ones, not results that round differently),
// through a matmul, over a run-time batch. topk_values' gradient reaches
// only the selected ones.
const char* kTopK = R"(program topk;
dim B in [1, 16];
input x : {T}[B, 64];
input y : {T}[32, 24];
input w_out : {T}[8, 24];
input weights : {T}[B, 24];
input column_weights : {T}[4, 24];
output loss : {T};
output d_w_out : {T}[8, 24];
output d_x : {T}[B, 64];
output d_y : {T}[32, 24];
let l = sum((topk_values(x, 8) @ w_out) * weights, axis = [0, 1]) +
        sum(topk_values(y, 4, axis = 0) * column_weights, axis = [0, 1]);
loss = l;
d_w_out = grad(l, w_out);
d_x = grad(l, x);
d_y = grad(l, y);
)";

// Weights like trained ones: scaled by 1/sqrt(fan-in), so activations stay O(1).
ValueRange scaled_weights(const TensorInfo& t) {
  ValueRange r;
  if (t.shape.size() == 2 && t.name.rfind("w", 0) == 0) {
    r.hi = 1.0 / std::sqrt(static_cast<double>(t.shape[0].extent));
    r.lo = r.hi / 10;
  }
  return r;
}

// scaled_weights, and i32 tensors drawn in [lo, hi].
RangeFor scaled_weights_and_ints(int64_t lo, int64_t hi) {
  return [=](const TensorInfo& info) {
    ValueRange r = scaled_weights(info);
    r.int_lo = lo;
    r.int_hi = hi;
    return r;
  };
}

// kAttentionBlock at other sizes.
std::string attention_block(int s, int nh, int kvh, int hd) {
  std::string text = kAttentionBlock;
  auto set = [&](const std::string& name, int value) {
    const std::string at = "const " + name + " = ";
    const size_t i = text.find(at);
    REQUIRE(i != std::string::npos);
    text.replace(i, text.find(';', i) - i, at + std::to_string(value));
  };
  set("S", s);
  set("NH", nh);
  set("KVH", kvh);
  set("HD", hd);
  return text;
}

// The program in f32 and in `narrow` (f16 or bf16), against the CPU
// reference at each batch (a program without run-time dims: once).
void check_in_two_dtypes(const std::string& text, const std::string& name, const std::string& narrow,
                         const std::vector<int64_t>& batches, const RangeFor& range) {
  for (const std::string& t : {std::string("f32"), narrow}) {
    INFO(t);
    Program program = compile_text(with_dtype(text, t));
    if (batches.empty()) CHECK(check_program(program, seed_for(name + " " + t), {}, range));
    for (int64_t batch : batches) {
      INFO("batch " << batch);
      CHECK(check_program(program, seed_for(name + " " + t + std::to_string(batch)), {batch}, range));
    }
  }
}

}  // namespace

TEST_CASE("grad: a classifier's gradients on the GPU match the CPU reference, at every batch") {
  check_in_two_dtypes(kClassifier, "classifier", "bf16", {1, 5, 8, 33, 48}, scaled_weights);
}

TEST_CASE("grad: an embedding's and a cross-entropy's gradients (scatter_add, take_along_axis) match the CPU reference") {
  // ids and targets: rows of the table, classes of the logits.
  check_in_two_dtypes(kEmbedding, "embedding", "bf16", {1, 17, 40}, scaled_weights_and_ints(0, 49));
}

TEST_CASE("grad: a decoder block's gradients (rope, causal softmax, SwiGLU, norms) match the CPU reference") {
  check_in_two_dtypes(kBlock, "block", "f16", {}, scaled_weights);
}

TEST_CASE("grad: attention's gradients (grouped heads, causal, a length per sequence) match the CPU reference") {
  // lens: 1 to S positions.
  check_in_two_dtypes(kAttentionBlock, "attention block", "bf16", {1, 3, 8}, scaled_weights_and_ints(1, 16));
}

TEST_CASE("grad: attention's derivative kernels (heads of 64 and 128) match the CPU reference") {
  // f16/bf16 heads of 64 or 128 take the three kernels that stream the
  // positions (gdl_attention_backward.cuh; f32 the matmul rule): 100
  // positions (a partial last stage of 64) with 4 query heads a k/v head;
  // heads of 128 (stages of 32), one query head each.
  check_in_two_dtypes(attention_block(100, 8, 2, 64), "attention kernels 64", "bf16", {1, 3},
                      scaled_weights_and_ints(1, 100));
  check_in_two_dtypes(attention_block(70, 4, 4, 128), "attention kernels 128", "f16", {2},
                      scaled_weights_and_ints(1, 70));
}

// The derivative's kernels with DV != D, grouped heads, causal queries from
// a start per sequence and a length that cuts them short, and a sequence
// with no position at all; and without start (one query per sequence).
TEST_CASE("grad: attention's derivative kernels with a start, DV != D and lengths of 0") {
  const std::string causal = R"(program attention_kernels;
input q : {T}[3, 40, 8, 64];
input k : {T}[3, 2, 90, 64];
input v : {T}[3, 2, 90, 128];
input lens : i32[3];
input starts : i32[3];
input w : {T}[3, 40, 8, 128];
output d_q : {T}[3, 40, 8, 64];
output d_k : {T}[3, 2, 90, 64];
output d_v : {T}[3, 2, 90, 128];
let l = sum(reshape(attention(q, k, v, lens, start = starts) * w, [-1]));
d_q = grad(l, q);
d_k = grad(l, k);
d_v = grad(l, v);
)";
  const std::string decode = R"(program attention_kernels_decode;
input q : {T}[5, 16, 128];
input k : {T}[5, 4, 70, 128];
input v : {T}[5, 4, 70, 64];
input lens : i32[5];
input w : {T}[5, 16, 64];
output d_q : {T}[5, 16, 128];
output d_k : {T}[5, 4, 70, 128];
output d_v : {T}[5, 4, 70, 64];
let l = sum(reshape(attention(q, k, v, lens) * w, [-1]));
d_q = grad(l, q);
d_k = grad(l, k);
d_v = grad(l, v);
)";
  for (const std::string t : {"f16", "bf16"}) {
    INFO(t);
    // Sequence 0 from 50 to the cache's end; 1 from 0, cut at 25 positions; 2 with none.
    const Adjust causal_lengths = [](std::map<std::string, TensorData>& b) {
      b.at("starts").bytes = encode_elements(ElementType::kI32, std::vector<double>{50, 0, 7});
      b.at("lens").bytes = encode_elements(ElementType::kI32, std::vector<double>{90, 25, 0});
    };
    CHECK(check_program(compile_text(with_dtype(causal, t)), seed_for("attention kernels causal " + t), {},
                        scaled_weights, {}, causal_lengths));
    const Adjust decode_lengths = [](std::map<std::string, TensorData>& b) {
      b.at("lens").bytes = encode_elements(ElementType::kI32, std::vector<double>{70, 1, 0, 64, 65});
    };
    CHECK(check_program(compile_text(with_dtype(decode, t)), seed_for("attention kernels decode " + t), {},
                        scaled_weights, {}, decode_lengths));
  }
}

TEST_CASE("grad: topk_values' gradient (the selected elements only) matches the CPU reference") {
  check_in_two_dtypes(kTopK, "topk", "f16", {1, 7, 16}, scaled_weights);
}

TEST_CASE("training: AdamW steps, state chained run after run, match the CPU reference at every step") {
  const char* text = R"(program adamw;
dim B in [1, 64];
const D = 64;
const H = 128;
const LR = 0.01;
const DECAY = 0.01;
state w1 : f32[D, H];
state w2 : f32[H, 4];
state m1 : f32[D, H];
state v1 : f32[D, H];
state m2 : f32[H, 4];
state v2 : f32[H, 4];
state t : f32;
input x : f32[B, D];
input y : f32[B, 4];
output loss : f32;
let err = tanh(x @ w1) @ w2 - y;
let l = mean(err * err, axis = [0, 1]);
loss = l;
let g1 = grad(l, w1);
let g2 = grad(l, w2);
t = t + 1.0;
let c1 = 1.0 - pow(0.9, t);
let c2 = 1.0 - pow(0.999, t);
m1 = 0.9 * m1 + 0.1 * g1;
v1 = 0.999 * v1 + 0.001 * g1 * g1;
m2 = 0.9 * m2 + 0.1 * g2;
v2 = 0.999 * v2 + 0.001 * g2 * g2;
w1 = w1 - LR * ((m1 / c1) / (sqrt(v1 / c2) + 1e-8) + DECAY * w1);
w2 = w2 - LR * ((m2 / c1) / (sqrt(v2 / c2) + 1e-8) + DECAY * w2);
)";
  Program program = compile_text(text);
  // Second moments and the step count are positive, as training leaves them.
  const RangeFor range = [](const TensorInfo& info) {
    ValueRange r;
    r.positive = info.name == "t" || info.name.rfind("v", 0) == 0;
    return r;
  };
  check_runs(program, "adamw", 6, {64, 7, 1, 33}, range);
}
