// The Llama decoder on the CPU reference: a tiny model written here as a
// safetensors checkpoint with a config.json, loaded through gdl's loader
// and mapping, run step by step through examples/llama/llama.gdl (prompt
// chunks, decode tokens, two sequences in one ragged batch, a paged cache
// in state) and compared with a plain double-precision Llama written below.
// Also the loader's refusals: corrupt files, mismatched params, bad mappings
// and configs.
#include <doctest/doctest.h>

#include <cmath>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <nlohmann/json.hpp>
#include <random>

#include "cpu_program.h"
#include "gdl/llama.h"
#include "gdl/weights.h"
#include "llama_tp_split.h"
#include "program_impl.h"

namespace gdl {
namespace {

namespace fs = std::filesystem;
using llama_tp::kTinyConfig;
using llama_tp::tiny_serving;
using test_programs::tensor;

// --------------------------------------------------------------- the files

struct NamedTensor {
  std::string name;
  std::string dtype = "F32";
  std::vector<int64_t> shape;
  std::vector<uint8_t> bytes;
};

std::vector<uint8_t> f32_bytes(const std::vector<float>& v) {
  std::vector<uint8_t> b(v.size() * 4);
  std::memcpy(b.data(), v.data(), b.size());
  return b;
}

// A safetensors file as the format says: header length, JSON header, data.
void write_safetensors(const fs::path& path, const std::vector<NamedTensor>& tensors, const std::string& header_override = "") {
  nlohmann::json header = nlohmann::json::object();
  uint64_t offset = 0;
  for (const NamedTensor& t : tensors) {
    header[t.name] = {{"dtype", t.dtype}, {"shape", t.shape}, {"data_offsets", {offset, offset + t.bytes.size()}}};
    offset += t.bytes.size();
  }
  header["__metadata__"] = {{"format", "pt"}};
  const std::string text = header_override.empty() ? header.dump() : header_override;
  std::ofstream out(path, std::ios::binary);
  uint64_t n = text.size();
  for (int i = 0; i < 8; ++i) out.put(static_cast<char>(n >> (8 * i) & 0xff));
  out << text;
  for (const NamedTensor& t : tensors) out.write(reinterpret_cast<const char*>(t.bytes.data()), static_cast<std::streamsize>(t.bytes.size()));
}

fs::path fresh_dir(const std::string& name) {
  fs::path dir = fs::temp_directory_path() / ("gdl_llama_test_" + name + "_" + std::to_string(::getpid()));
  fs::remove_all(dir);
  fs::create_directories(dir);
  return dir;
}

// ------------------------------------------------------------ the model

struct TinyModel {
  LlamaConfig config;
  std::map<std::string, std::vector<float>> weights;  // Hugging Face names, [out, in] row-major
  std::vector<NamedTensor> tensors() const {
    std::vector<NamedTensor> out;
    for (const auto& [name, w] : weights) {
      NamedTensor t;
      t.name = name;
      t.shape = shape_of(name);
      t.bytes = f32_bytes(w);
      out.push_back(std::move(t));
    }
    return out;
  }
  std::vector<int64_t> shape_of(const std::string& name) const {
    const LlamaConfig& c = config;
    if (name.find("norm") != std::string::npos) return {c.hidden_size};
    if (name.find("embed_tokens") != std::string::npos || name.find("lm_head") != std::string::npos) return {c.vocab_size, c.hidden_size};
    if (name.find("q_proj") != std::string::npos) return {c.num_heads * c.head_dim, c.hidden_size};
    if (name.find("k_proj") != std::string::npos || name.find("v_proj") != std::string::npos) return {c.num_kv_heads * c.head_dim, c.hidden_size};
    if (name.find("o_proj") != std::string::npos) return {c.hidden_size, c.num_heads * c.head_dim};
    if (name.find("down_proj") != std::string::npos) return {c.hidden_size, c.intermediate_size};
    return {c.intermediate_size, c.hidden_size};  // gate, up
  }
};

TinyModel make_tiny_model(uint32_t seed) {
  TinyModel m;
  Expected<LlamaConfig> c = LlamaConfig::parse(kTinyConfig);
  REQUIRE_MESSAGE(c.ok(), c.status().message());
  m.config = *c;
  std::mt19937 rng(seed);
  // Weights large enough that the logits are peaked (the greedy token does
  // not flip on rounding); norms away from 1 so that mapping them is tested.
  std::uniform_real_distribution<float> u(-1.0f, 1.0f);
  auto fill = [&](const std::string& name, float scale, float offset = 0) {
    std::vector<int64_t> shape = m.shape_of(name);
    int64_t n = 1;
    for (int64_t e : shape) n *= e;
    std::vector<float> w(n);
    for (float& x : w) x = offset + scale * u(rng);
    m.weights[name] = std::move(w);
  };
  const float in_scale = 1.5f / std::sqrt(64.0f);
  fill("model.embed_tokens.weight", 1.0f);
  fill("lm_head.weight", 3.0f / std::sqrt(64.0f));
  fill("model.norm.weight", 0.3f, 1.0f);
  for (int l = 0; l < 2; ++l) {
    const std::string p = "model.layers." + std::to_string(l) + ".";
    for (const char* w : {"self_attn.q_proj.weight", "self_attn.k_proj.weight", "self_attn.v_proj.weight",
                          "mlp.gate_proj.weight", "mlp.up_proj.weight"})
      fill(p + w, in_scale);
    fill(p + "self_attn.o_proj.weight", 1.0f / std::sqrt(64.0f));
    fill(p + "mlp.down_proj.weight", 1.0f / std::sqrt(128.0f));
    fill(p + "input_layernorm.weight", 0.3f, 1.0f);
    fill(p + "post_attention_layernorm.weight", 0.3f, 1.0f);
  }
  return m;
}

// The model in doubles, straight from its definition: the logits at every
// position of `ids`, attending causally over all of them.
std::vector<std::vector<double>> reference_logits(const TinyModel& m, const std::vector<int32_t>& ids) {
  const LlamaConfig& c = m.config;
  const int64_t H = c.hidden_size, NH = c.num_heads, KVH = c.num_kv_heads, D = c.head_dim, F = c.intermediate_size;
  const size_t n = ids.size();
  auto W = [&](const std::string& name) -> const std::vector<float>& { return m.weights.at(name); };
  auto linear = [](const std::vector<float>& w, const std::vector<double>& x, int64_t out) {
    std::vector<double> y(out, 0.0);
    const int64_t in = static_cast<int64_t>(x.size());
    for (int64_t o = 0; o < out; ++o)
      for (int64_t i = 0; i < in; ++i) y[o] += w[o * in + i] * x[i];
    return y;
  };
  auto rmsnorm = [&](const std::vector<double>& x, const std::vector<float>& g) {
    double ss = 0;
    for (double v : x) ss += v * v;
    const double r = 1.0 / std::sqrt(ss / x.size() + c.rms_eps);
    std::vector<double> y(x.size());
    for (size_t i = 0; i < x.size(); ++i) y[i] = x[i] * r * g[i];
    return y;
  };
  auto rope = [&](std::vector<double>& x, int64_t heads, size_t p) {
    for (int64_t h = 0; h < heads; ++h)
      for (int64_t i = 0; i < D / 2; ++i) {
        const double angle = static_cast<double>(p) * std::pow(c.rope_theta, -2.0 * i / D);
        const double a = x[h * D + i], b = x[h * D + i + D / 2];
        x[h * D + i] = a * std::cos(angle) - b * std::sin(angle);
        x[h * D + i + D / 2] = b * std::cos(angle) + a * std::sin(angle);
      }
  };
  std::vector<std::vector<double>> h(n);
  for (size_t t = 0; t < n; ++t) {
    const std::vector<float>& e = W("model.embed_tokens.weight");
    h[t].assign(e.begin() + ids[t] * H, e.begin() + (ids[t] + 1) * H);
  }
  for (int64_t l = 0; l < c.num_layers; ++l) {
    const std::string p = "model.layers." + std::to_string(l) + ".";
    std::vector<std::vector<double>> q(n), k(n), v(n);
    for (size_t t = 0; t < n; ++t) {
      const std::vector<double> x = rmsnorm(h[t], W(p + "input_layernorm.weight"));
      q[t] = linear(W(p + "self_attn.q_proj.weight"), x, NH * D);
      k[t] = linear(W(p + "self_attn.k_proj.weight"), x, KVH * D);
      v[t] = linear(W(p + "self_attn.v_proj.weight"), x, KVH * D);
      rope(q[t], NH, t);
      rope(k[t], KVH, t);
    }
    for (size_t t = 0; t < n; ++t) {
      std::vector<double> o(NH * D, 0.0);
      for (int64_t hq = 0; hq < NH; ++hq) {
        const int64_t kv = hq / (NH / KVH);
        std::vector<double> s(t + 1);
        double top = -INFINITY;
        for (size_t u = 0; u <= t; ++u) {
          double dot = 0;
          for (int64_t d = 0; d < D; ++d) dot += q[t][hq * D + d] * k[u][kv * D + d];
          s[u] = dot / std::sqrt(static_cast<double>(D));
          top = std::max(top, s[u]);
        }
        double sum = 0;
        for (double& x : s) sum += (x = std::exp(x - top));
        for (size_t u = 0; u <= t; ++u)
          for (int64_t d = 0; d < D; ++d) o[hq * D + d] += s[u] / sum * v[u][kv * D + d];
      }
      const std::vector<double> a = linear(W(p + "self_attn.o_proj.weight"), o, H);
      for (int64_t i = 0; i < H; ++i) h[t][i] += a[i];
      const std::vector<double> x = rmsnorm(h[t], W(p + "post_attention_layernorm.weight"));
      std::vector<double> g = linear(W(p + "mlp.gate_proj.weight"), x, F), up = linear(W(p + "mlp.up_proj.weight"), x, F);
      for (int64_t i = 0; i < F; ++i) g[i] = g[i] / (1 + std::exp(-g[i])) * up[i];
      const std::vector<double> d = linear(W(p + "mlp.down_proj.weight"), g, H);
      for (int64_t i = 0; i < H; ++i) h[t][i] += d[i];
    }
  }
  std::vector<std::vector<double>> logits(n);
  for (size_t t = 0; t < n; ++t) logits[t] = linear(W("lm_head.weight"), rmsnorm(h[t], W("model.norm.weight")), c.vocab_size);
  return logits;
}

double max_relative(const std::vector<double>& got, const std::vector<double>& want) {
  double diff = 0, scale = 0;
  for (size_t i = 0; i < want.size(); ++i) {
    diff = std::max(diff, std::abs(got[i] - want[i]));
    scale = std::max(scale, std::abs(want[i]));
  }
  return diff / scale;
}

HostTensor from_data(const TensorData& t) {
  int64_t n = 1;
  for (int64_t e : t.shape) n *= e;
  return tensor(static_cast<DType>(t.dtype), t.shape, decode_elements(t.dtype, t.bytes.data(), n));
}

// examples/llama/`file` for this config and serving, with `extra` consts (TP).
ir::Graph compile_llama(const LlamaConfig& config, const LlamaServing& serving, const std::string& file_name = "llama.gdl",
                        const std::map<std::string, std::string>& extra = {}) {
  const std::string path = std::string(GDL_SOURCE_DIR) + "/examples/llama/" + file_name;
  DiagnosticSink diags;
  std::string fatal;
  std::optional<SourceFile> file = load_source(path, diags, &fatal);
  REQUIRE_MESSAGE(file.has_value(), fatal);
  PipelineOptions options;
  options.const_settings = llama_const_settings(config, serving);
  options.const_settings.insert(extra.begin(), extra.end());
  std::optional<ir::Graph> g = compile_to_ir(*file, diags, options);
  INFO(diags.render(*file));
  REQUIRE(g.has_value());
  return std::move(*g);
}

std::vector<TensorInfo> param_infos(const ir::Graph& g) {
  std::vector<TensorInfo> out;
  for (ir::ValueId v : g.leaves(ir::Op::kParam)) out.push_back(rt::describe_tensor(g.node(v), g.node(v).name, g));
  return out;
}

// The bindings of llama.gdl's graph `g` for `model`: its params from a
// safetensors checkpoint through gdl's loader and mapping, the rope tables,
// a cache of random garbage (every position read must have been written),
// the generator at seed 5.
Bindings load_tiny_model(const TinyModel& model, const ir::Graph& g, const LlamaConfig& config,
                         const LlamaServing& serving, const std::string& name) {
  const fs::path dir = fresh_dir(name);
  write_safetensors(dir / "model.safetensors", model.tensors());
  Expected<Checkpoint> checkpoint = Checkpoint::open(dir.string());
  REQUIRE_MESSAGE(checkpoint.ok(), checkpoint.status().message());
  LoadReport report;
  Expected<std::map<std::string, TensorData>> params = assemble_params(*checkpoint, llama_weight_mapping(config), param_infos(g), &report);
  REQUIRE_MESSAGE(params.ok(), params.status().message());
  CHECK(report.params_unset == std::vector<std::string>{"rope_cos", "rope_sin"});
  Bindings b;
  for (const auto& [param, t] : *params) b.tensors[param] = from_data(t);
  std::vector<float> cos, sin;
  const int64_t positions = serving.max_context;
  llama_rope_tables(config, positions, &cos, &sin);
  b.tensors["rope_cos"] = tensor(DType::kF32, {positions, 8}, std::vector<double>(cos.begin(), cos.end()));
  b.tensors["rope_sin"] = tensor(DType::kF32, {positions, 8}, std::vector<double>(sin.begin(), sin.end()));
  std::mt19937 rng(3);
  for (const ir::Node& n : g.nodes)
    if (n.op == ir::Op::kState) b.tensors[n.name] = test_programs::random_tensor(rng, n.type.dtype, concrete_shape(n.type.shape, {}));
  b.tensors["rng.state"] = tensor(DType::kI32, {4}, {5, 0, 0, 0});
  fs::remove_all(dir);
  return b;
}

using llama_tp::Part;

// A step's inputs for the sequences' parts (greedy: temperature 0).
void set_step_inputs(Bindings& b, const std::vector<Part>& parts) {
  for (const llama_tp::StepInput& in : llama_tp::step_inputs(parts))
    b.tensors[in.name] = tensor(in.is_float ? DType::kF32 : DType::kI32, in.shape, in.values);
  b.dims = {b.tensors.at("tokens").shape[0], b.tensors.at("last").shape[0]};
}

// Rank r's bindings of llama_tp.gdl from llama.gdl's `whole`.
Bindings rank_bindings(const Bindings& whole, int64_t r, int64_t ranks, const LlamaConfig& c) {
  Bindings b = whole;
  for (const llama_tp::Split& split :
       llama_tp::rank_splits(r, ranks, c.num_heads, c.num_kv_heads, c.head_dim, c.intermediate_size)) {
    HostTensor& t = b.tensors.at(split.name);
    t.data = llama_tp::take_ranges(t.data, &t.shape, split.axis, split.ranges);
  }
  return b;
}

}  // namespace

TEST_CASE("llama: buckets can serve the decoders' tokens and sequences, as the tensor-parallel one's all-reduces need") {
  // A dim that padding cannot serve is served by node updates, which a
  // captured NCCL call cannot follow (Session::create refuses), and which
  // keep cuBLASLt's products from the matmuls.
  const LlamaConfig config = *LlamaConfig::parse(kTinyConfig);
  for (const std::string file : {"llama.gdl", "llama_tp.gdl"}) {
    const std::map<std::string, std::string> extra =
        file == "llama_tp.gdl" ? std::map<std::string, std::string>{{"TP", "2"}} : std::map<std::string, std::string>{};
    const ir::Graph g = compile_llama(config, tiny_serving(), file, extra);
    REQUIRE(g.dims.size() == 2);
    for (const DimInfo& d : g.dims) {
      INFO(file << ": dim " << d.name << ": " << d.padding_blocker);
      CHECK(d.padding_blocker.empty());
    }
  }
}

TEST_CASE("llama: the tensor-parallel decoder over two ranks gives the single decoder's logits and tokens") {
  // llama_tp.gdl at TP = 2 (heads and MLP columns split, an all_reduce after
  // attention and after the MLP) on the CPU reference, every rank on its
  // own thread, against llama.gdl over the same weights, step by step:
  // prompt chunks, a sequence joining, decode steps into new blocks.
  const TinyModel model = make_tiny_model(11);
  Expected<LlamaConfig> config = LlamaConfig::parse(kTinyConfig);
  REQUIRE_MESSAGE(config.ok(), config.status().message());
  const LlamaServing serving = tiny_serving();
  const ir::Graph single = compile_llama(*config, serving);
  const ir::Graph tp = compile_llama(*config, serving, "llama_tp.gdl", {{"TP", "2"}});
  REQUIRE(tp.group.ranks == 2);
  Bindings whole = load_tiny_model(model, single, *config, serving, "tp");
  std::vector<Bindings> ranks = {rank_bindings(whole, 0, 2, *config), rank_bindings(whole, 1, 2, *config)};
  {
    // Each rank's params straight from the checkpoint by its mapping (parts
    // of rows and of columns) are the split ones.
    const fs::path dir = fresh_dir("tp_mapping");
    write_safetensors(dir / "model.safetensors", model.tensors());
    Expected<Checkpoint> checkpoint = Checkpoint::open(dir.string());
    REQUIRE_MESSAGE(checkpoint.ok(), checkpoint.status().message());
    for (int64_t r = 0; r < 2; ++r) {
      const WeightMapping mapping = llama_weight_mapping(*config, r, 2);
      REQUIRE_FALSE(mapping.rules.empty());
      CHECK(mapping.text().find("o_proj.weight[:," + std::to_string(r * 32) + ":" + std::to_string(r * 32 + 32) + "]") !=
            std::string::npos);
      Expected<std::map<std::string, TensorData>> params = assemble_params(*checkpoint, mapping, param_infos(tp));
      REQUIRE_MESSAGE(params.ok(), params.status().message());
      for (const auto& loaded : *params) {
        INFO("rank " << r << ", " << loaded.first);
        const HostTensor& want = ranks[static_cast<size_t>(r)].tensors.at(loaded.first);
        CHECK(loaded.second.shape == want.shape);
        CHECK(from_data(loaded.second).data == want.data);
      }
    }
    CHECK(llama_weight_mapping(*config, 0, 3).rules.empty());  // 4 heads over 3 ranks
    fs::remove_all(dir);
  }

  double worst = 0;
  int compared = 0;
  auto run_step = [&](const std::vector<Part>& parts) {
    set_step_inputs(whole, parts);
    for (Bindings& b : ranks) set_step_inputs(b, parts);
    Expected<std::map<std::string, HostTensor>> want = interpret(single, whole);
    REQUIRE_MESSAGE(want.ok(), want.status().message());
    Expected<std::vector<std::map<std::string, HostTensor>>> got = interpret_ranks(tp, ranks);
    REQUIRE_MESSAGE(got.ok(), got.status().message());
    for (const char* state : {"k_pool", "v_pool", "rng.state"}) {
      whole.tensors[state] = want->at(state);
      for (size_t r = 0; r < 2; ++r) ranks[r].tensors[state] = (*got)[r].at(state);
    }
    for (size_t r = 0; r < 2; ++r) {
      INFO("rank " << r);
      worst = std::max(worst, max_relative((*got)[r].at("logits").data, want->at("logits").data));
      CHECK((*got)[r].at("next").data == want->at("next").data);
      CHECK((*got)[r].at("logits").data == (*got)[0].at("logits").data);  // every rank the same sums
      compared += 1;
    }
    std::vector<int32_t> next;
    for (double v : want->at("next").data) next.push_back(static_cast<int32_t>(v));
    return next;
  };
  llama_tp::run_two_sequences(run_step);
  MESSAGE("tensor-parallel vs single decoder: largest relative difference of the logits " << worst);
  CHECK(compared == 16);
  CHECK(worst > 0);     // the partial sums are rounded apart: not the same arithmetic
  CHECK(worst < 1e-5);  // f32, each partial product rounded once more
}

TEST_CASE("llama: a checkpoint loaded by mapping, run step by step on the CPU reference, equals the model in doubles") {
  const TinyModel model = make_tiny_model(7);
  const fs::path dir = fresh_dir("cpu");
  std::ofstream(dir / "config.json") << kTinyConfig;
  Expected<LlamaConfig> config = LlamaConfig::read(dir.string());
  fs::remove_all(dir);
  REQUIRE_MESSAGE(config.ok(), config.status().message());
  CHECK(config->num_kv_heads == 2);
  CHECK(config->eos_token_ids == std::vector<int64_t>{2});
  const LlamaServing serving = tiny_serving();
  const ir::Graph g = compile_llama(*config, serving);
  Bindings b = load_tiny_model(model, g, *config, serving, "cpu");

  // Two sequences: A's prompt in two chunks, then decode; B joins while A
  // decodes (its whole prompt beside A's token), then both decode.
  std::vector<int32_t> seq_a = {11, 200, 37, 5, 99, 142, 8, 63, 17};
  std::vector<int32_t> seq_b = {250, 3, 77, 120, 45};
  const std::vector<int32_t> blocks_a = {5, 0, 9, 2, 14, 3, 6, 1}, blocks_b = {7, 12, 4, 10, 13, 8, 11, 15};
  std::vector<std::vector<double>> logits_a, logits_b;
  size_t done_a = 0, done_b = 0;
  auto run_step = [&](std::vector<Part> parts) {
    const int64_t S = static_cast<int64_t>(parts.size());
    set_step_inputs(b, parts);
    Expected<std::map<std::string, HostTensor>> out = interpret(g, b);
    REQUIRE_MESSAGE(out.ok(), out.status().message());
    for (const char* state : {"k_pool", "v_pool", "rng.state"}) b.tensors[state] = out->at(state);
    std::vector<std::vector<double>> rows;
    std::vector<int32_t> next;
    for (int64_t s = 0; s < S; ++s) {
      const std::vector<double>& all = out->at("logits").data;
      rows.emplace_back(all.begin() + s * 256, all.begin() + (s + 1) * 256);
      next.push_back(static_cast<int32_t>(out->at("next").data[s]));
      // Greedy: the argmax of the row.
      CHECK(next.back() == std::max_element(rows.back().begin(), rows.back().end()) - rows.back().begin());
    }
    return std::pair{rows, next};
  };
  // Step 1: the first 6 of A's prompt (no token taken). Step 2: the rest of it.
  run_step({{{seq_a.begin(), seq_a.begin() + 6}, 0, blocks_a}});
  auto [r2, n2] = run_step({{{seq_a.begin() + 6, seq_a.end()}, 6, blocks_a}});
  logits_a.push_back(r2[0]);
  seq_a.push_back(n2[0]);
  done_a = seq_a.size() - 1;
  // Step 3: A decodes, B's whole prompt comes in beside it.
  auto [r3, n3] = run_step({{{seq_a.back()}, static_cast<int32_t>(done_a), blocks_a}, {seq_b, 0, blocks_b}});
  logits_a.push_back(r3[0]);
  logits_b.push_back(r3[1]);
  seq_a.push_back(n3[0]);
  seq_b.push_back(n3[1]);
  // Steps 4-8: both decode (A crosses into new blocks).
  for (int step = 0; step < 5; ++step) {
    done_a = seq_a.size() - 1;
    done_b = seq_b.size() - 1;
    auto [r, n] = run_step({{{seq_a.back()}, static_cast<int32_t>(done_a), blocks_a},
                            {{seq_b.back()}, static_cast<int32_t>(done_b), blocks_b}});
    logits_a.push_back(r[0]);
    logits_b.push_back(r[1]);
    seq_a.push_back(n[0]);
    seq_b.push_back(n[1]);
  }

  // The reference over each whole sequence: its logits at the positions
  // that produced the tokens.
  const std::vector<std::vector<double>> ref_a = reference_logits(model, seq_a), ref_b = reference_logits(model, seq_b);
  double worst = 0, smallest_margin = INFINITY;
  auto compare = [&](const std::vector<std::vector<double>>& got, const std::vector<std::vector<double>>& ref, size_t first) {
    for (size_t i = 0; i < got.size(); ++i) {
      const std::vector<double>& want = ref[first + i];
      worst = std::max(worst, max_relative(got[i], want));
      std::vector<double> sorted = want;
      std::partial_sort(sorted.begin(), sorted.begin() + 2, sorted.end(), std::greater<>());
      smallest_margin = std::min(smallest_margin, sorted[0] - sorted[1]);
    }
  };
  compare(logits_a, ref_a, 8);  // A's prompt is 9 tokens: its first generated token comes from position 8
  compare(logits_b, ref_b, 4);
  INFO("largest relative difference " << worst << ", smallest top-2 margin " << smallest_margin);
  CHECK(worst < 1e-4);
  // The generated tokens are the reference's greedy choices (the margins
  // are far above the f32 differences, so a flip would be a bug).
  double scale = 0;
  for (const auto& row : ref_a)
    for (double v : row) scale = std::max(scale, std::abs(v));
  CHECK(smallest_margin > 100 * worst * scale);
  for (size_t i = 9; i < seq_a.size(); ++i)
    CHECK(seq_a[i] == std::max_element(ref_a[i - 1].begin(), ref_a[i - 1].end()) - ref_a[i - 1].begin());
  for (size_t i = 5; i < seq_b.size(); ++i)
    CHECK(seq_b[i] == std::max_element(ref_b[i - 1].begin(), ref_b[i - 1].end()) - ref_b[i - 1].begin());
}

TEST_CASE("llama: sampling follows the temperature and keeps to the nucleus of the top candidates") {
  // The sampling head alone, on logits chosen here: llama.gdl's sample fn
  // through a program that feeds it the logits directly.
  const std::string program = R"(program sampling;
const TOPK = 8;
dim N in [1, 64];
input logits : f32[N, 32];
input temperature : f32[N];
input top_p : f32[N];
output next : i32[N];
fn sample(logits: f32[N, VOCAB], temperature: f32[N], top_p: f32[N]) -> i32[N] {
  let z = logits / reshape(max(temperature, 1e-6), [N, 1]);
  let ids = topk_indices(z, TOPK);
  let best = take_along_axis(z, ids);
  let weight = exp(best - best[:, 0:1]);
  let mass = weight / sum(weight, axis = -1, keepdims = true);
  let keep = cumsum(mass) - mass < reshape(top_p, [N, 1]);
  let noisy = where(keep, best - log(-log(rand([N, TOPK]))), -1e30);
  let drawn = take_along_axis(ids, reshape(argmax(noisy), [N, 1]));
  return where(temperature > 0.0, reshape(drawn, [N]), argmax(logits));
}
next = sample(logits, temperature, top_p);
)";
  // The fn must be llama.gdl's, word for word.
  std::ifstream in(std::string(GDL_SOURCE_DIR) + "/examples/llama/llama.gdl");
  const std::string source((std::istreambuf_iterator<char>(in)), std::istreambuf_iterator<char>());
  const size_t fn_start = program.find("fn sample"), fn_end = program.find("}\n", fn_start);
  std::string fn_text = program.substr(fn_start, fn_end - fn_start);
  std::string llama_fn = source.substr(source.find("fn sample"));
  llama_fn = llama_fn.substr(0, llama_fn.find("}\n"));
  auto strip = [](std::string s) {  // comments and spacing aside
    std::string out;
    for (size_t i = 0; i < s.size(); ++i) {
      if (s[i] == '#') i = s.find('\n', i);
      if (i == std::string::npos) break;
      if (!std::isspace(static_cast<unsigned char>(s[i]))) out += s[i];
    }
    return out;
  };
  REQUIRE(strip(fn_text) == strip(llama_fn));

  const ir::Graph g = test_programs::compile_text(program);
  const int64_t N = 64;
  // Halving probabilities over 8 tokens (3 first, then 17, 9, ...); the
  // other 24 far below. And a flat row: 32 equal logits, of which the top 8
  // are the first 8 positions (ties go to the lower position).
  const std::vector<int> order = {3, 17, 9, 30, 0, 21, 12, 5};
  std::vector<double> halving(32, -30.0), flat(32, 0.0);
  for (size_t i = 0; i < order.size(); ++i) halving[order[i]] = -static_cast<double>(i) * std::log(2.0);
  struct Scenario {
    const char* what;
    const std::vector<double>* row;
    double temperature, top_p;
    std::map<int, double> expected;  // token -> probability
  };
  auto geometric = [&](double ratio, int kept) {  // probabilities ratio^i over the first `kept` of `order`
    std::map<int, double> p;
    double total = 0;
    for (int i = 0; i < kept; ++i) total += std::pow(ratio, i);
    for (int i = 0; i < kept; ++i) p[order[i]] = std::pow(ratio, i) / total;
    return p;
  };
  std::map<int, double> flat8, flat4;
  for (int t = 0; t < 8; ++t) flat8[t] = 1.0 / 8;
  for (int t = 0; t < 4; ++t) flat4[t] = 1.0 / 4;
  const std::vector<Scenario> scenarios = {
      {"greedy", &halving, 0.0, 0.3, {{3, 1.0}}},
      {"T 1, top_p 1: the 8 candidates", &halving, 1.0, 1.0, geometric(0.5, 8)},
      {"T 1, top_p 0.6: the first two", &halving, 1.0, 0.6, geometric(0.5, 2)},
      {"T 0.5 sharpens", &halving, 0.5, 1.0, geometric(0.25, 8)},
      {"T 2 flattens", &halving, 2.0, 1.0, geometric(std::sqrt(0.5), 8)},
      // The nucleus is measured over the candidates (as transformers does
      // after its top-k): 4 of 8 equal ones reach 0.5, not 16 of 32.
      {"flat, top_p 1: the 8 candidates", &flat, 1.0, 1.0, flat8},
      {"flat, top_p 0.5: half of them", &flat, 1.0, 0.5, flat4},
  };
  for (const Scenario& sc : scenarios) {
    INFO(sc.what);
    Bindings b;
    b.dims = {N};
    std::vector<double> logits;
    for (int64_t n = 0; n < N; ++n) logits.insert(logits.end(), sc.row->begin(), sc.row->end());
    b.tensors["logits"] = tensor(DType::kF32, {N, 32}, logits);
    b.tensors["temperature"] = tensor(DType::kF32, {N}, std::vector<double>(N, sc.temperature));
    b.tensors["top_p"] = tensor(DType::kF32, {N}, std::vector<double>(N, sc.top_p));
    std::map<int, int> counts;
    const int runs = 40;
    for (int run = 0; run < runs; ++run) {
      b.tensors["rng.state"] = tensor(DType::kI32, {4}, {static_cast<double>(run + 1), 0, 0, 0});
      Expected<std::map<std::string, HostTensor>> out = interpret(g, b);
      REQUIRE(out.ok());
      for (double t : out->at("next").data) ++counts[static_cast<int>(t)];
    }
    // 2560 draws: a frequency's standard deviation is at most 0.01.
    const double draws = static_cast<double>(runs * N);
    for (const auto& token_count : counts) {
      const int token = token_count.first;
      INFO("token " << token);
      CHECK(sc.expected.count(token) == 1);
    }
    for (const auto& token_p : sc.expected) {
      const int token = token_p.first;
      const double p = token_p.second;
      INFO("token " << token << " expected " << p);
      CHECK(std::abs(counts[token] / draws - p) < 0.04);
    }
  }
}

TEST_CASE("llama: the loader refuses corrupt files and params that do not fit, naming them") {
  const fs::path dir = fresh_dir("corrupt");
  NamedTensor w{"w", "F32", {4, 3}, f32_bytes({1, 2, 3, 4, 5, 6, 7, 8, 9, 10, 11, 12})};
  NamedTensor u{"u", "F32", {2, 3}, f32_bytes({-1, -2, -3, -4, -5, -6})};
  write_safetensors(dir / "good.safetensors", {w, u});
  TensorInfo param;
  param.name = "p";
  param.dtype = ElementType::kF32;
  param.shape = {{6, -1}, {3, -1}};
  param.max_bytes = 72;
  param.type_text = "f32[6, 3]";

  SUBCASE("a good file, two tensors fused by rows") {
    Expected<Checkpoint> c = Checkpoint::open((dir / "good.safetensors").string());
    REQUIRE_MESSAGE(c.ok(), c.status().message());
    CHECK(c->size() == 2);
    CHECK(c->find("w")->shape == std::vector<int64_t>{4, 3});
    Expected<WeightMapping> m = WeightMapping::parse("p w u   # fused\n");
    REQUIRE(m.ok());
    Expected<std::map<std::string, TensorData>> p = assemble_params(*c, *m, {param});
    REQUIRE_MESSAGE(p.ok(), p.status().message());
    const std::vector<double> v = decode_elements(ElementType::kF32, p->at("p").bytes.data(), 18);
    CHECK(v[0] == 1);
    CHECK(v[11] == 12);
    CHECK(v[12] == -1);
    CHECK(v[17] == -6);
  }
  SUBCASE("truncated") {
    std::ifstream in(dir / "good.safetensors", std::ios::binary);
    std::string bytes((std::istreambuf_iterator<char>(in)), std::istreambuf_iterator<char>());
    std::ofstream(dir / "cut.safetensors", std::ios::binary) << bytes.substr(0, bytes.size() - 5);
    Expected<Checkpoint> c = Checkpoint::open((dir / "cut.safetensors").string());
    REQUIRE_FALSE(c.ok());
    CHECK(c.status().code() == StatusCode::kDataLoss);
    CHECK(c.status().message().find("tensor 'u'") != std::string::npos);
    CHECK(c.status().message().find("truncated") != std::string::npos);
  }
  SUBCASE("corrupt headers") {
    const std::vector<std::pair<std::string, std::string>> cases = {
        {"{not json", "not a JSON object"},
        {R"({"w": {"dtype": "F32", "shape": [4, 3], "data_offsets": [0, 40]}})", "holds 40 bytes"},
        {R"({"w": {"dtype": "F17", "shape": [4, 3], "data_offsets": [0, 48]}})", "unknown dtype"},
        {R"({"w": {"dtype": "F32", "shape": [4, -3], "data_offsets": [0, 48]}})", "non-negative"},
        {R"({"w": {"dtype": "F32", "shape": [4, 3], "data_offsets": [0, 48]}, "u": {"dtype": "F32", "shape": [2, 3], "data_offsets": [24, 48]}})", "overlap"},
        {R"({"w": {"dtype": "F32", "shape": [4, 3]}})", "needs dtype, shape and data_offsets"},
    };
    for (const auto& header_and_expected : cases) {
      const std::string& header = header_and_expected.first;
      const std::string& expected = header_and_expected.second;
      write_safetensors(dir / "bad.safetensors", {w, u}, header);
      Expected<Checkpoint> c = Checkpoint::open((dir / "bad.safetensors").string());
      INFO(header);
      REQUIRE_FALSE(c.ok());
      CHECK(c.status().code() == StatusCode::kDataLoss);
      CHECK(c.status().message().find(expected) != std::string::npos);
    }
    std::ofstream(dir / "short.safetensors", std::ios::binary) << "abc";
    CHECK(Checkpoint::open((dir / "short.safetensors").string()).status().code() == StatusCode::kDataLoss);
    CHECK(Checkpoint::open((dir / "missing.safetensors").string()).status().code() == StatusCode::kNotFound);
    CHECK(Checkpoint::open(dir.string()).status().code() == StatusCode::kNotFound);  // neither model.safetensors nor an index
  }
  SUBCASE("params that do not fit") {
    Expected<Checkpoint> c = Checkpoint::open((dir / "good.safetensors").string());
    REQUIRE(c.ok());
    auto refusal = [&](const std::string& rules, TensorInfo p) {
      Expected<WeightMapping> m = WeightMapping::parse(rules);
      REQUIRE(m.ok());
      Expected<std::map<std::string, TensorData>> out = assemble_params(*c, *m, {p});
      REQUIRE_FALSE(out.ok());
      return out.status();
    };
    const Status short_rows = refusal("p w\n", param);
    INFO(short_rows.message());
    CHECK(short_rows.message().find("hold 4 rows, the param 6") != std::string::npos);
    CHECK(refusal("p w u u\n", param).message().find("more rows") != std::string::npos);
    CHECK(refusal("p w nothing|nada\n", param).message().find("'nothing' or 'nada'") != std::string::npos);
    CHECK(refusal("q w u\n", param).code() == StatusCode::kNotFound);
    TensorInfo half = param;
    half.dtype = ElementType::kBF16;
    half.max_bytes = 36;
    CHECK(refusal("p w u\n", half).message().find("is F32, the param is bf16") != std::string::npos);
    TensorInfo wide = param;
    wide.shape = {{3, -1}, {4, -1}};
    CHECK(refusal("p w\n", wide).message().find("does not fit rows") != std::string::npos);
  }
  SUBCASE("sharded, by the index") {
    write_safetensors(dir / "model-00001-of-00002.safetensors", {w});
    write_safetensors(dir / "model-00002-of-00002.safetensors", {u});
    std::ofstream(dir / "model.safetensors.index.json")
        << R"({"metadata": {"total_size": 72}, "weight_map": {"w": "model-00001-of-00002.safetensors", "u": "model-00002-of-00002.safetensors"}})";
    Expected<Checkpoint> c = Checkpoint::open(dir.string());
    REQUIRE_MESSAGE(c.ok(), c.status().message());
    CHECK(c->files().size() == 2);
    CHECK(c->total_bytes() == 72);
    std::ofstream(dir / "model.safetensors.index.json")
        << R"({"weight_map": {"w": "model-00001-of-00002.safetensors", "u": "model-00001-of-00002.safetensors"}})";
    Expected<Checkpoint> wrong = Checkpoint::open(dir.string());
    REQUIRE_FALSE(wrong.ok());
    CHECK(wrong.status().message().find("'u'") != std::string::npos);
    std::ofstream(dir / "model.safetensors.index.json") << R"({"weight_map": {"w": "../escape.safetensors"}})";
    CHECK(Checkpoint::open(dir.string()).status().code() == StatusCode::kDataLoss);
  }
  fs::remove_all(dir);
}

TEST_CASE("weights: a source's part of rows or columns fills a param, and a part that does not fit is refused") {
  const fs::path dir = fresh_dir("parts");
  std::vector<float> w(6 * 4);
  for (size_t i = 0; i < w.size(); ++i) w[i] = static_cast<float>(i) - 7.5f;  // [6, 4], row-major
  write_safetensors(dir / "w.safetensors", {{"w", "F32", {6, 4}, f32_bytes(w)}});
  Expected<Checkpoint> checkpoint = Checkpoint::open((dir / "w.safetensors").string());
  REQUIRE_MESSAGE(checkpoint.ok(), checkpoint.status().message());
  const auto info = [](const std::string& name, std::vector<int64_t> shape) {
    TensorInfo t;
    t.name = name;
    t.dtype = ElementType::kF32;
    size_t n = 4;
    for (int64_t e : shape) t.shape.push_back({e, -1}), n *= static_cast<size_t>(e);
    t.max_bytes = n;
    return t;
  };
  // rows 1..2 then rows 4..5 stacked; columns 1..2 of every row.
  Expected<WeightMapping> mapping = WeightMapping::parse("rows w[1:3] w[4:6]\ncols w[:,1:3]\n");
  REQUIRE_MESSAGE(mapping.ok(), mapping.status().message());
  Expected<std::map<std::string, TensorData>> params =
      assemble_params(*checkpoint, *mapping, {info("rows", {4, 4}), info("cols", {6, 2})});
  REQUIRE_MESSAGE(params.ok(), params.status().message());
  std::vector<double> want_rows, want_cols;
  for (int r : {1, 2, 4, 5})
    for (int c = 0; c < 4; ++c) want_rows.push_back(w[static_cast<size_t>(r * 4 + c)]);
  for (int r = 0; r < 6; ++r)
    for (int c : {1, 2}) want_cols.push_back(w[static_cast<size_t>(r * 4 + c)]);
  CHECK(from_data(params->at("rows")).data == want_rows);
  CHECK(from_data(params->at("cols")).data == want_cols);
  // Malformed parts, at parse; parts outside the tensor or of the wrong size, at load.
  for (const char* bad : {"p w[3:1]", "p w[:,1]", "p w[1:2", "p w[a:b]", "p w[:,-1:2]"}) {
    Expected<WeightMapping> m = WeightMapping::parse(bad);
    REQUIRE_FALSE(m.ok());
    CHECK(m.status().message().find("a part is NAME[a:b]") != std::string::npos);
  }
  const auto load_error = [&](const std::string& text, const TensorInfo& param) {
    Expected<std::map<std::string, TensorData>> p = assemble_params(*checkpoint, *WeightMapping::parse(text), {param});
    REQUIRE_FALSE(p.ok());
    return p.status().message();
  };
  WeightMapping built;  // a rule made in code, which parse never saw
  built.rules.push_back(WeightRule{"p", false, {{"w[3:1]"}}});
  Expected<std::map<std::string, TensorData>> unparsed = assemble_params(*checkpoint, built, {info("p", {2, 4})});
  REQUIRE_FALSE(unparsed.ok());
  CHECK(unparsed.status().message().find("'w[3:1]': a part is NAME[a:b]") != std::string::npos);
  CHECK(load_error("p w[4:7]", info("p", {3, 4})).find("has no part [4:7]") != std::string::npos);
  CHECK(load_error("p w[:,2:5]", info("p", {6, 3})).find("has no part [:,2:5]") != std::string::npos);
  CHECK(load_error("p w[:,0:3]", info("p", {6, 2})).find("(its part [6, 3]) of shape [6, 4] does not fit rows of [6, 2]") !=
        std::string::npos);
  fs::remove_all(dir);
}

TEST_CASE("llama: mappings and configs are checked, naming the line or the field") {
  CHECK(WeightMapping::parse("p\n").status().message().find("line 1") != std::string::npos);
  CHECK(WeightMapping::parse("p a\np b\n").status().message().find("line 2: param 'p' has a rule already") != std::string::npos);
  CHECK(WeightMapping::parse("p x.{l}.w\n").status().message().find("not per layer") != std::string::npos);
  CHECK(WeightMapping::parse("p a||b\n").status().message().find("empty tensor name") != std::string::npos);


  Expected<LlamaConfig> c = LlamaConfig::parse(R"({"hidden_size": 2048, "num_hidden_layers": 16, "num_attention_heads": 32,
    "num_key_value_heads": 8, "head_dim": 64, "intermediate_size": 8192, "vocab_size": 128256, "rope_theta": 500000.0,
    "rope_scaling": {"factor": 32.0, "high_freq_factor": 4.0, "low_freq_factor": 1.0, "original_max_position_embeddings": 8192, "rope_type": "llama3"},
    "tie_word_embeddings": true, "torch_dtype": "bfloat16", "eos_token_id": [128001, 128008, 128009]})");
  REQUIRE_MESSAGE(c.ok(), c.status().message());
  CHECK(c->rope_type == "llama3");
  CHECK(c->dtype == ElementType::kBF16);
  CHECK(c->eos_token_ids.size() == 3);
  Expected<WeightMapping> m = WeightMapping::parse(llama_weight_mapping(*c).text());
  REQUIRE(m.ok());
  CHECK(m->rules.size() == 9);
  CHECK(m->text().find("lm_head model.embed_tokens.weight\n") != std::string::npos);  // tied
  LlamaConfig untied = *c;
  untied.tie_word_embeddings = false;
  CHECK(llama_weight_mapping(untied).text().find("lm_head lm_head.weight\n") != std::string::npos);
  std::map<std::string, std::string> consts = llama_const_settings(*c, LlamaServing{});
  CHECK(consts["DT"] == "bf16");
  CHECK(consts["KVH"] == "8");
  CHECK(consts["EPS"] == "9.9999999999999995e-07");  // rms_norm_eps not given: transformers' default 1e-6
  // llama3 scaling: the highest frequency is untouched, the lowest divided by the factor.
  std::vector<float> cos, sin;
  llama_rope_tables(*c, 2, &cos, &sin);
  CHECK(cos[32 + 0] == doctest::Approx(std::cos(1.0)));
  const double lowest = std::pow(500000.0, -62.0 / 64) / 32;
  CHECK(sin[32 + 31] == doctest::Approx(std::sin(lowest)).epsilon(1e-5));
  // The smoothed band between wavelengths 8192 / 4 and 8192 / 1: the
  // frequency blends f / 32 and f by (8192 / wavelength - 1) / 3.
  int smoothed = 0;
  for (int i = 0; i < 32; ++i) {
    const double f = std::pow(500000.0, -2.0 * i / 64), wavelength = 2 * M_PI / f;
    if (wavelength < 8192.0 / 4 || wavelength > 8192.0) continue;
    const double s = (8192.0 / wavelength - 1) / 3, want = (1 - s) * f / 32 + s * f;
    CHECK(sin[32 + i] == doctest::Approx(std::sin(want)).epsilon(1e-5));
    ++smoothed;
  }
  CHECK(smoothed >= 2);

  CHECK(LlamaConfig::parse(R"({"hidden_size": 64})").status().message().find("num_hidden_layers") != std::string::npos);
  CHECK(LlamaConfig::parse(R"({"model_type": "gpt2"})").status().message().find("gpt2") != std::string::npos);
  CHECK(LlamaConfig::parse(R"({"hidden_size": 64, "num_hidden_layers": 1, "num_attention_heads": 4, "intermediate_size": 8,
    "vocab_size": 8, "attention_bias": true})").status().message().find("attention_bias") != std::string::npos);
  CHECK(LlamaConfig::parse(R"({"hidden_size": 64, "num_hidden_layers": 1, "num_attention_heads": 4, "intermediate_size": 8,
    "vocab_size": 8, "rope_scaling": {"rope_type": "yarn", "factor": 4.0}})").status().message().find("yarn") != std::string::npos);
}

TEST_CASE("gdlc -D: consts set from the command line, dtype consts, and the refusals") {
  const std::string text = "program p;\nconst DT = f32;\nconst N = 4;\nconst EPS = 1e-5;\ninput x : DT[N];\noutput y : DT[N];\n"
                           "y = x * EPS + cast(x, DT);\n";
  auto compile = [&](std::map<std::string, std::string> settings, DiagnosticSink& diags) {
    PipelineOptions options;
    options.const_settings = std::move(settings);
    return compile_to_ir(source_from_string("p.gdl", text), diags, options);
  };
  DiagnosticSink ok_diags;
  std::optional<ir::Graph> g = compile({{"DT", "bf16"}, {"N", "12"}, {"EPS", "0.5"}}, ok_diags);
  REQUIRE(g.has_value());
  const ir::Node* x = nullptr;
  for (const ir::Node& n : g->nodes)
    if (n.op == ir::Op::kInput) x = &n;
  REQUIRE(x);
  CHECK(x->type.dtype == DType::kBF16);
  CHECK(x->type.shape[0].extent == 12);
  for (const auto& [settings, expected] : std::vector<std::pair<std::map<std::string, std::string>, std::string>>{
           {{{"M", "3"}}, "declares no const named 'M'"},
           {{{"N", "3x"}}, "is not an integer, a finite float"},
           {{{"N", "1e999"}}, "is not an integer, a finite float"},
           {{{"N", "99999999999999999999"}}, "is not an integer, a finite float"},
       }) {
    DiagnosticSink diags;
    CHECK_FALSE(compile(settings, diags).has_value());
    const std::string rendered = diags.render(source_from_string("p.gdl", text));
    INFO(rendered);
    CHECK(rendered.find(expected) != std::string::npos);
  }
  // A dtype const's name stands for the dtype everywhere: no value may take it.
  DiagnosticSink shadow;
  const std::string reuse = "program p;\nconst DT = f32;\ninput x : DT[4];\noutput y : DT[4];\nlet DT = x;\ny = DT;\n";
  PipelineOptions options;
  CHECK_FALSE(compile_to_ir(source_from_string("r.gdl", reuse), shadow, options).has_value());
  CHECK(shadow.render(source_from_string("r.gdl", reuse)).find("'DT' is a dtype const; it cannot also name a value") !=
        std::string::npos);
}

}  // namespace gdl
