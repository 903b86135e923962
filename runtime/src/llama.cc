// Hugging Face Llama configs, the decoder's consts and weight mapping, and
// RoPE tables (gdl/llama.h).
#include "gdl/llama.h"

#include <cmath>
#include <fstream>
#include <filesystem>
#include <nlohmann/json.hpp>
#include <sstream>

#include "cuda_util.h"
#include "text_file.h"

namespace gdl {
namespace {

using json = nlohmann::json;

constexpr const char* kLlamaMapping = R"(embed model.embed_tokens.weight
attn_norm[l] model.layers.{l}.input_layernorm.weight
wqkv[l] model.layers.{l}.self_attn.q_proj.weight model.layers.{l}.self_attn.k_proj.weight model.layers.{l}.self_attn.v_proj.weight
wo[l] model.layers.{l}.self_attn.o_proj.weight
mlp_norm[l] model.layers.{l}.post_attention_layernorm.weight
w_gate_up[l] model.layers.{l}.mlp.gate_proj.weight model.layers.{l}.mlp.up_proj.weight
w_down[l] model.layers.{l}.mlp.down_proj.weight
final_norm model.norm.weight
)";

std::string number_text(double v) {
  char text[40];
  std::snprintf(text, sizeof text, "%.17g", v);
  std::string s = text;
  if (s.find_first_of(".e") == std::string::npos) s += ".0";  // a float const, never an integer
  return s;
}

}  // namespace

Expected<LlamaConfig> LlamaConfig::parse(const std::string& text, const std::string& where) {
  json j = json::parse(text, nullptr, false);
  if (j.is_discarded() || !j.is_object()) return Status::InvalidArgument(where + ": not a JSON object");
  auto bad = [&](const std::string& what) { return Status::InvalidArgument(where + ": " + what); };
  LlamaConfig c;
  auto integer = [&](const char* key, int64_t* out, bool required, int64_t lo = 1) -> Status {
    if (!j.contains(key) || j[key].is_null()) return required ? bad(std::string("no '") + key + "'") : Status::Ok();
    if (!j[key].is_number_integer() || j[key].get<int64_t>() < lo)
      return bad(std::string("'") + key + "' is not an integer >= " + std::to_string(lo));
    *out = j[key].get<int64_t>();
    return Status::Ok();
  };
  auto number = [&](const char* key, double* out) -> Status {
    if (!j.contains(key) || j[key].is_null()) return Status::Ok();
    if (!j[key].is_number() || !(j[key].get<double>() > 0)) return bad(std::string("'") + key + "' is not a positive number");
    *out = j[key].get<double>();
    return Status::Ok();
  };
  if (j.contains("model_type") && j["model_type"].is_string()) {
    const std::string type = j["model_type"].get<std::string>();
    if (type != "llama" && type != "mistral")
      return bad("model_type '" + type + "' is not a Llama-architecture model gdl's decoder computes");
  }
  for (const char* key : {"attention_bias", "mlp_bias"})
    if (j.contains(key) && j[key].is_boolean() && j[key].get<bool>()) return bad(std::string(key) + " is set; the decoder has no biases");
  if (j.contains("hidden_act") && j["hidden_act"] != "silu") return bad("hidden_act is not silu");
  if (j.contains("sliding_window") && !j["sliding_window"].is_null()) return bad("sliding-window attention is not computed");
  GDL_RETURN_IF_ERROR(integer("hidden_size", &c.hidden_size, true));
  GDL_RETURN_IF_ERROR(integer("num_hidden_layers", &c.num_layers, true));
  GDL_RETURN_IF_ERROR(integer("num_attention_heads", &c.num_heads, true));
  c.num_kv_heads = c.num_heads;
  GDL_RETURN_IF_ERROR(integer("num_key_value_heads", &c.num_kv_heads, false));
  GDL_RETURN_IF_ERROR(integer("intermediate_size", &c.intermediate_size, true));
  GDL_RETURN_IF_ERROR(integer("vocab_size", &c.vocab_size, true));
  c.max_positions = 2048;
  GDL_RETURN_IF_ERROR(integer("max_position_embeddings", &c.max_positions, false));
  GDL_RETURN_IF_ERROR(integer("head_dim", &c.head_dim, false));
  if (c.head_dim == 0) {  // transformers' default: the hidden size split over the heads
    if (c.hidden_size % c.num_heads != 0) return bad("hidden_size is not a multiple of num_attention_heads (and no head_dim)");
    c.head_dim = c.hidden_size / c.num_heads;
  }
  if (c.head_dim % 2 != 0) return bad("head_dim is odd; rotary embeddings rotate pairs");
  if (c.num_heads % c.num_kv_heads != 0) return bad("num_attention_heads is not a multiple of num_key_value_heads");
  GDL_RETURN_IF_ERROR(number("rope_theta", &c.rope_theta));
  GDL_RETURN_IF_ERROR(number("rms_norm_eps", &c.rms_eps));
  if (j.contains("tie_word_embeddings")) {
    if (!j["tie_word_embeddings"].is_boolean()) return bad("'tie_word_embeddings' is not true or false");
    c.tie_word_embeddings = j["tie_word_embeddings"].get<bool>();
  }
  const std::string dtype_key = j.contains("torch_dtype") ? "torch_dtype" : "dtype";
  if (j.contains(dtype_key) && j[dtype_key].is_string()) {
    const std::string d = j[dtype_key].get<std::string>();
    if (d == "float32") c.dtype = ElementType::kF32;
    else if (d == "float16") c.dtype = ElementType::kF16;
    else if (d == "bfloat16") c.dtype = ElementType::kBF16;
    else return bad(dtype_key + " '" + d + "' is not float32, float16 or bfloat16");
  }
  if (j.contains("eos_token_id")) {
    const json& e = j["eos_token_id"];
    if (e.is_number_integer()) c.eos_token_ids.push_back(e.get<int64_t>());
    else if (e.is_array())
      for (const json& x : e)
        if (x.is_number_integer()) c.eos_token_ids.push_back(x.get<int64_t>());
  }
  // transformers 5 writes rope_parameters (theta and scaling in one
  // object); earlier versions rope_theta and rope_scaling.
  const char* scaling_key = j.contains("rope_parameters") && !j["rope_parameters"].is_null() ? "rope_parameters" : "rope_scaling";
  if (j.contains(scaling_key) && !j[scaling_key].is_null()) {
    const json& r = j[scaling_key];
    if (!r.is_object()) return bad(std::string(scaling_key) + " is not an object");
    if (r.contains("rope_theta")) {
      if (!r["rope_theta"].is_number() || !(r["rope_theta"].get<double>() > 0)) return bad("rope_theta is not a positive number");
      c.rope_theta = r["rope_theta"].get<double>();
    }
    std::string type = r.contains("rope_type") && r["rope_type"].is_string() ? r["rope_type"].get<std::string>()
                       : r.contains("type") && r["type"].is_string()     ? r["type"].get<std::string>()
                                                                          : "";
    if (type != "default" && type != "llama3")
      return bad("rope_scaling type '" + type + "' is not computed (default and llama3 are)");
    c.rope_type = type;
    auto field = [&](const char* key, double* out) -> Status {
      if (!r.contains(key)) return type == "llama3" ? bad(std::string("rope_scaling has no '") + key + "'") : Status::Ok();
      if (!r[key].is_number() || !(r[key].get<double>() > 0)) return bad(std::string("rope_scaling '") + key + "' is not a positive number");
      *out = r[key].get<double>();
      return Status::Ok();
    };
    if (type == "llama3") {
      double original = 0;
      GDL_RETURN_IF_ERROR(field("factor", &c.rope_factor));
      GDL_RETURN_IF_ERROR(field("low_freq_factor", &c.rope_low_freq_factor));
      GDL_RETURN_IF_ERROR(field("high_freq_factor", &c.rope_high_freq_factor));
      GDL_RETURN_IF_ERROR(field("original_max_position_embeddings", &original));
      c.rope_original_max_positions = static_cast<int64_t>(original);
      if (c.rope_high_freq_factor <= c.rope_low_freq_factor) return bad("rope_scaling high_freq_factor is not above low_freq_factor");
    }
  }
  return c;
}

Expected<LlamaConfig> LlamaConfig::read(const std::string& path) {
  std::filesystem::path file = path;
  std::error_code ec;
  if (std::filesystem::is_directory(file, ec)) file /= "config.json";
  Expected<std::string> text = rt::read_text_file(file.string());
  if (!text) return text.status();
  return parse(*text, file.string());
}

std::map<std::string, std::string> llama_const_settings(const LlamaConfig& c, const LlamaServing& s) {
  auto n = [](int64_t v) { return std::to_string(v); };
  return {
      {"DT", element_type_name(c.dtype)},
      {"L", n(c.num_layers)},
      {"H", n(c.hidden_size)},
      {"NH", n(c.num_heads)},
      {"KVH", n(c.num_kv_heads)},
      {"HD", n(c.head_dim)},
      {"F", n(c.intermediate_size)},
      {"V", n(c.vocab_size)},
      {"EPS", number_text(c.rms_eps)},
      {"MAXT", n(s.max_tokens)},
      {"MAXS", n(s.max_sequences)},
      {"BS", n(s.block_size)},
      {"NB", n(s.blocks)},
      {"MAXB", n((s.max_context + s.block_size - 1) / s.block_size)},
      {"TOPK", n(s.top_k)},
  };
}

WeightMapping llama_weight_mapping(const LlamaConfig& config) {
  // A tied head is the embedding; an untied one must be in the checkpoint.
  const std::string head = config.tie_word_embeddings ? "lm_head model.embed_tokens.weight\n" : "lm_head lm_head.weight\n";
  Expected<WeightMapping> m = WeightMapping::parse(kLlamaMapping + head);
  return m ? *m : WeightMapping{};
}

WeightMapping llama_weight_mapping(const LlamaConfig& c, int64_t rank, int64_t ranks) {
  if (ranks < 1 || rank < 0 || rank >= ranks || c.num_heads % ranks || c.num_kv_heads % ranks ||
      c.intermediate_size % ranks)
    return WeightMapping{};
  const int64_t q = c.num_heads / ranks * c.head_dim, kv = c.num_kv_heads / ranks * c.head_dim,
                f = c.intermediate_size / ranks;
  const auto rows = [](int64_t size, int64_t r) { return "[" + std::to_string(r * size) + ":" + std::to_string((r + 1) * size) + "]"; };
  const auto columns = [](int64_t size, int64_t r) {
    return "[:," + std::to_string(r * size) + ":" + std::to_string((r + 1) * size) + "]";
  };
  const std::string layer = "model.layers.{l}.";
  std::string text = kLlamaMapping;
  const auto rule = [&](const std::string& param, const std::string& sources) {
    const size_t at = text.find(param + "[l] ");  // the whole-tensor rule, replaced by this rank's parts
    text.replace(at, text.find('\n', at) - at, param + "[l] " + sources);
  };
  rule("wqkv", layer + "self_attn.q_proj.weight" + rows(q, rank) + " " + layer + "self_attn.k_proj.weight" + rows(kv, rank) +
                   " " + layer + "self_attn.v_proj.weight" + rows(kv, rank));
  rule("wo", layer + "self_attn.o_proj.weight" + columns(q, rank));
  rule("w_gate_up", layer + "mlp.gate_proj.weight" + rows(f, rank) + " " + layer + "mlp.up_proj.weight" + rows(f, rank));
  rule("w_down", layer + "mlp.down_proj.weight" + columns(f, rank));
  const std::string head = c.tie_word_embeddings ? "lm_head model.embed_tokens.weight\n" : "lm_head lm_head.weight\n";
  Expected<WeightMapping> m = WeightMapping::parse(text + head);
  return m ? *m : WeightMapping{};
}

void llama_rope_tables(const LlamaConfig& c, int64_t positions, std::vector<float>* cos, std::vector<float>* sin) {
  const int64_t half = c.head_dim / 2;
  // transformers: inv_freq = 1 / theta^(2i / d) in f32, then the llama3
  // rescaling by wavelength, then angle = position * inv_freq in f32.
  // All of it in f32, as transformers computes it.
  std::vector<float> inv(half);
  const float factor = static_cast<float>(c.rope_factor), low = static_cast<float>(c.rope_low_freq_factor),
              high = static_cast<float>(c.rope_high_freq_factor);
  const float original = static_cast<float>(c.rope_original_max_positions);
  for (int64_t i = 0; i < half; ++i) {
    const float exponent = static_cast<float>(2 * i) / static_cast<float>(c.head_dim);
    inv[i] = 1.0f / std::pow(static_cast<float>(c.rope_theta), exponent);
    if (c.rope_type == "llama3") {
      const float low_wavelen = original / low, high_wavelen = original / high;
      const float wavelen = 2.0f * static_cast<float>(M_PI) / inv[i];
      if (wavelen > low_wavelen) {
        inv[i] = inv[i] / factor;
      } else if (wavelen >= high_wavelen) {
        const float smooth = (original / wavelen - low) / (high - low);
        inv[i] = (1.0f - smooth) * inv[i] / factor + smooth * inv[i];
      }
    }
  }
  cos->assign(positions * half, 0.0f);
  sin->assign(positions * half, 0.0f);
  for (int64_t p = 0; p < positions; ++p)
    for (int64_t i = 0; i < half; ++i) {
      const float angle = static_cast<float>(p) * inv[i];
      (*cos)[p * half + i] = static_cast<float>(std::cos(static_cast<double>(angle)));
      (*sin)[p * half + i] = static_cast<float>(std::sin(static_cast<double>(angle)));
    }
}

}  // namespace gdl
