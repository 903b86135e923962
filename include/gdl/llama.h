// Llama-architecture models from Hugging Face files: the config.json
// fields gdl's decoder (examples/llama/llama.gdl) needs, the consts that
// size that program for a model, the mapping of the checkpoint's tensor
// names to its params, and the RoPE tables. Llama 2 and 3, and models of
// the same shape (no biases, SwiGLU, RMSNorm, grouped-query attention).
#pragma once

#include <cstdint>
#include <map>
#include <string>
#include <vector>

#include "gdl/gdl.h"
#include "gdl/weights.h"

namespace gdl {

struct LlamaConfig {
  int64_t hidden_size = 0, num_layers = 0, num_heads = 0, num_kv_heads = 0, head_dim = 0;
  int64_t intermediate_size = 0, vocab_size = 0, max_positions = 0;
  double rope_theta = 10000, rms_eps = 1e-6;
  // rope_scaling: "default" (none) or "llama3" (Llama 3.1 and later).
  std::string rope_type = "default";
  double rope_factor = 1, rope_low_freq_factor = 1, rope_high_freq_factor = 4;
  int64_t rope_original_max_positions = 8192;
  bool tie_word_embeddings = false;
  ElementType dtype = ElementType::kF32;  // torch_dtype (float32, float16, bfloat16)
  std::vector<int64_t> eos_token_ids;
  // config.json, or a directory holding it. InvalidArgument naming the field
  // for a missing or malformed one, a model type other than llama (or one
  // of its shape), or biases / rope scaling gdl's decoder does not compute.
  static Expected<LlamaConfig> read(const std::string& path);
  static Expected<LlamaConfig> parse(const std::string& json_text, const std::string& where = "config.json");
};

// How a decoder program is sized for serving: its tokens per step, the
// sequences per step, the KV cache's blocks, the sampling candidates.
struct LlamaServing {
  int64_t max_tokens = 64;       // tokens per step (a prefill chunk or decode batch)
  int64_t max_sequences = 8;     // sequences per step
  int64_t block_size = 64;       // positions per KV block (a stage of the attention kernel)
  int64_t blocks = 64;           // KV blocks in the pool
  int64_t max_context = 1024;    // positions per sequence (a multiple of block_size)
  int64_t top_k = 64;            // candidates top-p sampling draws from
};

// `gdlc -D` settings for examples/llama/llama.gdl: the model's sizes, its
// dtype (DT), and the serving sizes.
std::map<std::string, std::string> llama_const_settings(const LlamaConfig& config, const LlamaServing& serving);

// Hugging Face tensor names to llama.gdl's params: q/k/v fused into wqkv,
// gate/up into w_gate_up, layers stacked; the LM head is the embedding
// where config.tie_word_embeddings says so, else lm_head.weight.
WeightMapping llama_weight_mapping(const LlamaConfig& config);
// The same for rank `rank` of `ranks` of examples/llama/llama_tp.gdl (-D
// TP=ranks): its heads' rows of q, k and v and columns of o, its rows of
// gate and up and columns of down; the rest whole. Empty when the heads,
// k/v heads or MLP size are not multiples of `ranks`.
WeightMapping llama_weight_mapping(const LlamaConfig& config, int64_t rank, int64_t ranks);

// cos and sin of position p times each rotary frequency, [positions,
// head_dim / 2] row-major, as transformers computes them (f32 frequencies,
// llama3 scaling applied), for the params rope_cos and rope_sin.
void llama_rope_tables(const LlamaConfig& config, int64_t positions, std::vector<float>* cos, std::vector<float>* sin);

}  // namespace gdl
