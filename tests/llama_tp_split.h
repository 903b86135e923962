// The tiny Llama model of the decoder tests and the tensor-parallel decoder
// (examples/llama/llama_tp.gdl) in them: the model's config.json and
// serving sizes, how rank r's params and cache come from llama.gdl's, and
// one step's inputs, shared by the CPU reference tests and the GPU tests.
#pragma once

#include <cstdint>
#include <functional>
#include <string>
#include <utility>
#include <vector>

#include "gdl/llama.h"

namespace gdl::llama_tp {

// 2 layers, hidden 64, 4 query heads over 2 k/v heads of 16, MLP 128, vocabulary 256, f32.
inline const char* const kTinyConfig = R"({
  "architectures": ["LlamaForCausalLM"], "model_type": "llama", "hidden_act": "silu",
  "hidden_size": 64, "num_hidden_layers": 2, "num_attention_heads": 4, "num_key_value_heads": 2,
  "head_dim": 16, "intermediate_size": 128, "vocab_size": 256, "max_position_embeddings": 128,
  "rms_norm_eps": 1e-5, "rope_theta": 10000.0, "tie_word_embeddings": false, "torch_dtype": "float32",
  "attention_bias": false, "mlp_bias": false, "eos_token_id": 2, "rope_scaling": null
})";

inline LlamaServing tiny_serving() {
  LlamaServing s;
  s.max_tokens = 16;
  s.max_sequences = 2;
  s.block_size = 4;  // small blocks: every sequence spans several, out of order
  s.blocks = 16;
  s.max_context = 32;
  s.top_k = 8;
  return s;
}

using Ranges = std::vector<std::pair<int64_t, int64_t>>;

// One tensor of rank r: the ranges [begin, end) of `axis` of llama.gdl's
// tensor `name`, in order.
struct Split {
  std::string name;
  size_t axis = 0;
  Ranges ranges;
};

// Rank r of `ranks`: its query heads' and k/v heads' rows of wqkv and
// columns of wo, its MLP columns (rows of gate and of up, columns of down),
// its k/v heads of the caches. Every other tensor is whole on every rank.
inline std::vector<Split> rank_splits(int64_t r, int64_t ranks, int64_t heads, int64_t kv_heads, int64_t head_dim,
                                      int64_t mlp) {
  const int64_t nh = heads / ranks, kvh = kv_heads / ranks, f = mlp / ranks;
  const int64_t q0 = r * nh * head_dim, kv0 = r * kvh * head_dim, k_at = heads * head_dim,
                v_at = (heads + kv_heads) * head_dim;
  return {
      {"wqkv", 1, {{q0, q0 + nh * head_dim}, {k_at + kv0, k_at + kv0 + kvh * head_dim}, {v_at + kv0, v_at + kv0 + kvh * head_dim}}},
      {"wo", 2, {{q0, q0 + nh * head_dim}}},
      {"w_gate_up", 1, {{r * f, (r + 1) * f}, {mlp + r * f, mlp + (r + 1) * f}}},
      {"w_down", 2, {{r * f, (r + 1) * f}}},
      {"k_pool", 1, {{r * kvh, (r + 1) * kvh}}},
      {"v_pool", 1, {{r * kvh, (r + 1) * kvh}}},
  };
}

// The elements of `data` (row-major, `shape`) in the ranges of `axis`;
// *shape becomes the result's.
template <typename T>
std::vector<T> take_ranges(const std::vector<T>& data, std::vector<int64_t>* shape, size_t axis, const Ranges& ranges) {
  int64_t outer = 1, inner = 1;
  for (size_t a = 0; a < axis; ++a) outer *= (*shape)[a];
  for (size_t a = axis + 1; a < shape->size(); ++a) inner *= (*shape)[a];
  const int64_t along = (*shape)[axis];
  std::vector<T> out;
  (*shape)[axis] = 0;
  for (const auto& [begin, end] : ranges) (*shape)[axis] += end - begin;
  for (int64_t o = 0; o < outer; ++o)
    for (const auto& [begin, end] : ranges)
      for (int64_t j = begin; j < end; ++j) {
        const auto from = data.begin() + (o * along + j) * inner;
        out.insert(out.end(), from, from + inner);
      }
  return out;
}

// One sequence's part of a step.
struct Part {
  std::vector<int32_t> tokens;
  int32_t start = 0;                // position of its first token
  std::vector<int32_t> blocks;      // its block table
};

// A step's inputs for the sequences' parts, greedy (temperature 0): each
// input's values and shape.
struct StepInput {
  std::string name;
  bool is_float = false;
  std::vector<int64_t> shape;
  std::vector<double> values;
};
inline std::vector<StepInput> step_inputs(const std::vector<Part>& parts) {
  std::vector<double> tokens, pos, seq, tables, last, temperature, top_p;
  for (size_t s = 0; s < parts.size(); ++s) {
    for (size_t i = 0; i < parts[s].tokens.size(); ++i) {
      tokens.push_back(parts[s].tokens[i]);
      pos.push_back(parts[s].start + static_cast<int32_t>(i));
      seq.push_back(static_cast<double>(s));
    }
    last.push_back(static_cast<double>(tokens.size() - 1));
    tables.insert(tables.end(), parts[s].blocks.begin(), parts[s].blocks.end());
    temperature.push_back(0.0);
    top_p.push_back(1.0);
  }
  const auto T = static_cast<int64_t>(tokens.size()), S = static_cast<int64_t>(parts.size());
  const auto blocks = static_cast<int64_t>(parts.at(0).blocks.size());
  return {{"tokens", false, {T}, tokens},     {"pos", false, {T}, pos},           {"seq", false, {T}, seq},
          {"tables", false, {S, blocks}, tables}, {"last", false, {S}, last}, {"temperature", true, {S}, temperature},
          {"top_p", true, {S}, top_p}};
}

// Eight steps of two sequences through `step` (the next token of each
// sequence in the step, in order): A's prompt in two chunks, then A's first
// decode beside B's whole prompt, then five decode steps of both, A
// crossing into new blocks.
inline void run_two_sequences(const std::function<std::vector<int32_t>(const std::vector<Part>&)>& step) {
  std::vector<int32_t> a = {11, 200, 37, 5, 99, 142, 8}, b = {250, 3, 77, 120, 45};
  const std::vector<int32_t> blocks_a = {5, 0, 9, 2, 14, 3, 6, 1}, blocks_b = {7, 12, 4, 10, 13, 8, 11, 15};
  step({{{a.begin(), a.begin() + 4}, 0, blocks_a}});
  a.push_back(step({{{a.begin() + 4, a.end()}, 4, blocks_a}}).at(0));
  std::vector<int32_t> next = step({{{a.back()}, static_cast<int32_t>(a.size() - 1), blocks_a}, {b, 0, blocks_b}});
  a.push_back(next.at(0));
  b.push_back(next.at(1));
  for (int i = 0; i < 5; ++i) {
    next = step({{{a.back()}, static_cast<int32_t>(a.size() - 1), blocks_a},
                 {{b.back()}, static_cast<int32_t>(b.size() - 1), blocks_b}});
    a.push_back(next.at(0));
    b.push_back(next.at(1));
  }
}

}  // namespace gdl::llama_tp
