// Generates tokens with a Llama-architecture model from its Hugging Face
// files (config.json and safetensors weights), through examples/llama/llama.gdl.
//
//   llama_generate --model DIR [--program llama.gdl | --artifact llama.gdlx]
//                  (--prompt "1 2 3" ... | --prompts FILE) [--max-new N] [--temperature T] [--top-p P]
//                  [--seed N] [--max-tokens N] [--max-seqs N] [--max-context N] [--blocks N]
//                  [--arrive-every K] [--solo-check] [--save-artifact FILE] [--tp N]   (--help lists every option)
//
// It compiles the program for the model (or loads an artifact compiled
// for it), loads the weights, runs every prompt through the continuous
// batching loop (llama_engine.h), and prints each sequence's tokens and the
// timings: time to first token, per-step latency, tokens/s. --solo-check
// runs every sequence again alone and reports whether its tokens match.
// --tp N runs examples/llama/llama_tp.gdl over GPUs 0..N-1 instead, each
// with its share of the weights from the one checkpoint.
#include <algorithm>
#include <chrono>
#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <fstream>
#include <limits>
#include <map>
#include <nlohmann/json.hpp>
#include <sstream>
#include <string>
#include <vector>

#include "command_line.h"
#include "gdl/jit.h"
#include "gdl/profile.h"
#include "gdl/llama.h"
#include "llama_engine.h"

namespace {

using Clock = std::chrono::steady_clock;

std::vector<int32_t> parse_ids(const std::string& text, bool* ok) {
  std::vector<int32_t> ids;
  std::string t = text;
  for (char& c : t)
    if (c == ',') c = ' ';
  std::istringstream in(t);
  std::string word;
  *ok = true;
  while (in >> word) {
    char* end = nullptr;
    const long v = std::strtol(word.c_str(), &end, 10);
    if (*end != 0 || v < 0 || v > INT32_MAX) *ok = false;
    ids.push_back(static_cast<int32_t>(v));
  }
  return ids;
}

int fail(const std::string& what) {
  std::fprintf(stderr, "llama_generate: error: %s\n", what.c_str());
  return 1;
}

std::vector<int64_t> parse_list(const std::string& text) {
  std::vector<int64_t> out;
  std::stringstream s(text);
  for (std::string item; std::getline(s, item, ',');)
    if (!item.empty()) out.push_back(std::atoll(item.c_str()));
  return out;
}

// --bench decode:1,8@512,4096;prefill:128,2048
int run_bench(gdl::llama::Engine& engine, const std::string& spec, const std::string& json_path, double compile_s) {
  std::vector<std::pair<int64_t, int64_t>> rows;  // (batch, context); batch 0 = prefill
  std::stringstream parts(spec);
  for (std::string part; std::getline(parts, part, ';');) {
    if (part.rfind("decode:", 0) == 0) {
      const size_t at = part.find('@');
      if (at == std::string::npos) return fail("--bench decode:B,...@CTX,...: no @");
      for (int64_t ctx : parse_list(part.substr(at + 1)))
        for (int64_t b : parse_list(part.substr(7, at - 7))) rows.emplace_back(b, ctx);
    } else if (part.rfind("prefill:", 0) == 0) {
      for (int64_t p : parse_list(part.substr(8))) rows.emplace_back(0, p);
    } else {
      return fail("--bench: '" + part + "' is neither decode:... nor prefill:...");
    }
  }
  std::string json = "{\"compile_s\": " + std::to_string(compile_s) + ", \"rows\": [";
  std::printf("%-8s %6s %8s %12s %10s %12s\n", "phase", "batch", "context", "device_us", "host_us", "tokens/s");
  for (size_t i = 0; i < rows.size(); ++i) {
    const auto [batch, context] = rows[i];
    gdl::Expected<gdl::llama::Engine::Timing> t = engine.time_step(batch, context, 20);
    const char* phase = batch == 0 ? "prefill" : "decode";
    if (!t) {
      std::printf("%-8s %6lld %8lld  error: %s\n", phase, (long long)batch, (long long)context, t.status().message().c_str());
      continue;
    }
    const double tokens = batch == 0 ? static_cast<double>(context) : static_cast<double>(batch);
    std::printf("%-8s %6lld %8lld %12.1f %10.2f %12.0f\n", phase, (long long)(batch == 0 ? 1 : batch), (long long)context,
                t->device_us, t->host_us, tokens / t->device_us * 1e6);
    if (std::getenv("GDL_LLAMA_PROFILE") && engine.ranks() > 1) {
      std::printf("GDL_LLAMA_PROFILE: not over %zu ranks (rank 0's kernels alone would wait in its all_reduces)\n",
                  engine.ranks());
    } else if (std::getenv("GDL_LLAMA_PROFILE")) {
      // Where the step's device time goes: each node alone (profile_nodes),
      // summed by kernel (the symbol without its step number).
      gdl::Expected<std::vector<gdl::NodeTime>> nodes = gdl::profile_nodes(engine.session(), 5);
      if (nodes) {
        std::map<std::string, std::pair<double, int>> by_kernel;
        double total = 0;
        for (const gdl::NodeTime& n : *nodes) {
          std::string k = n.kernel;
          if (k.rfind("gdl_s", 0) == 0 && k.find('_', 5) != std::string::npos) k = k.substr(k.find('_', 5) + 1);
          by_kernel[k].first += n.device_us;
          by_kernel[k].second += 1;
          total += n.device_us;
        }
        std::vector<std::pair<double, std::string>> order;
        for (const auto& [k, v] : by_kernel) order.emplace_back(v.first, k);
        std::sort(order.rbegin(), order.rend());
        std::printf("  profile: %zu nodes, %.1f us launched one by one\n", nodes->size(), total);
        for (size_t j = 0; j < order.size() && j < 14; ++j)
          std::printf("    %9.1f us  %3d x %s\n", order[j].first, by_kernel[order[j].second].second, order[j].second.c_str());
      }
    }
    char row[256];
    std::snprintf(row, sizeof row, "%s{\"phase\": \"%s\", \"batch\": %lld, \"context\": %lld, \"device_us\": %.2f, \"host_us\": %.3f}",
                  i ? ", " : "", phase, (long long)(batch == 0 ? 1 : batch), (long long)context, t->device_us, t->host_us);
    json += row;
  }
  json += "]}\n";
  if (!json_path.empty()) std::ofstream(json_path) << json;
  return 0;
}

// The prefill of check.json's prompt against the logits saved beside it.
int check_logits(gdl::llama::Engine& engine, const std::string& dir, int64_t vocab) {
  std::ifstream meta(dir + "/check.json");
  if (!meta) return fail(dir + "/check.json: cannot be read");
  const nlohmann::json j = nlohmann::json::parse(meta, nullptr, /*allow_exceptions=*/false);
  if (j.is_discarded() || !j.contains("prompt") || !j["prompt"].is_array()) return fail("check.json has no prompt array");
  gdl::llama::Request r;
  for (const nlohmann::json& id : j["prompt"]) {
    if (!id.is_number_integer()) return fail("check.json's prompt holds something other than token ids");
    r.prompt.push_back(id.get<int32_t>());
  }
  r.max_new_tokens = 1;
  r.keep_logits = true;
  gdl::Expected<std::vector<gdl::llama::Result>> got = engine.generate({r});
  if (!got) return fail(got.status().message());
  std::ifstream in(dir + "/check_logits.f32", std::ios::binary);
  std::vector<float> want(vocab);
  in.read(reinterpret_cast<char*>(want.data()), vocab * 4);
  if (!in) return fail(dir + "/check_logits.f32: shorter than the vocabulary");
  double diff = 0, scale = 0;
  for (int64_t i = 0; i < vocab; ++i) {
    diff = std::max(diff, std::abs(static_cast<double>((*got)[0].logits[0][i]) - want[i]));
    scale = std::max(scale, std::abs(static_cast<double>(want[i])));
  }
  const int64_t mine = std::max_element((*got)[0].logits[0].begin(), (*got)[0].logits[0].end()) - (*got)[0].logits[0].begin();
  const int64_t theirs = std::max_element(want.begin(), want.end()) - want.begin();
  // The same five best tokens, best first, say the weights were loaded and
  // mapped right; the logits' distance is reported (two bf16 paths round
  // differently: tests/gpu/llama_test.cc measures both against f32).
  auto top5 = [](const std::vector<float>& row) {
    std::vector<int64_t> ids(row.size());
    for (size_t i = 0; i < ids.size(); ++i) ids[i] = static_cast<int64_t>(i);
    std::partial_sort(ids.begin(), ids.begin() + 5, ids.end(), [&](int64_t a, int64_t b) { return row[a] > row[b]; });
    ids.resize(5);
    return ids;
  };
  const bool same_top = top5((*got)[0].logits[0]) == top5(want);
  std::printf("check: prefill logits of a %zu-token prompt, max|gdl - pytorch| / max|pytorch| = %.3g; argmax %lld vs %lld;"
              " top 5 %s\n", r.prompt.size(), diff / scale, (long long)mine, (long long)theirs, same_top ? "the same" : "DIFFER");
  return mine == theirs ? 0 : 3;
}

}  // namespace

int main(int argc, char** argv) {
  std::string model, program_path, artifact, save_artifact, cache_dir;
  std::vector<std::vector<int32_t>> prompts;
  int max_new = 32, arrive_every = 0;
  double temperature = 0, top_p = 1;
  uint64_t seed = 0;
  int64_t tp = 1;
  bool solo_check = false;
  std::string bench, json_path, check_dir;
  gdl::LlamaServing serving;
  serving.max_tokens = 256;
  serving.blocks = 0;
  std::vector<std::string> prompt_texts;
  std::string prompts_file;
  using gdl::tools::strict_number;
  CLI::App app("llama_generate: generates tokens with a Llama-architecture model from its Hugging Face files "
               "(config.json and safetensors weights) through examples/llama/llama.gdl",
               "llama_generate");
  gdl::tools::add_standard_flags(app, "llama_generate");
  app.add_option("--model", model, "config.json and model.safetensors (or its index and shards)")
      ->required()
      ->type_name("DIR");
  CLI::Option* program_option =
      app.add_option("--program", program_path,
                     "the decoder source (default: examples/llama/llama.gdl under $GDL_SOURCE_DIR or .)")
          ->type_name("FILE.gdl");
  app.add_option("--artifact", artifact, "a .gdlx compiled for this model and these sizes, instead of compiling")
      ->excludes(program_option)
      ->type_name("FILE.gdlx");
  app.add_option("--save-artifact", save_artifact, "write the compiled program")->type_name("FILE.gdlx");
  app.add_option("--cache-dir", cache_dir, "the NVRTC cache")->type_name("DIR");
  app.add_option("--tp", tp,
                 "tensor-parallel ranks: examples/llama/llama_tp.gdl over GPUs 0..N-1 of this process (default 1: "
                 "llama.gdl on one GPU)")
      ->check(strict_number<int64_t>("an integer from 1 to 64", 1, 64))
      ->default_val(tp)
      ->type_name("N");
  gdl::tools::one_word_each(
      app.add_option("--prompt", prompt_texts, "token ids of one prompt, separated by spaces or commas (repeatable)"))
      ->type_name("IDS");
  app.add_option("--prompts", prompts_file, "one prompt per line")->type_name("FILE");
  const auto integer = [&](const char* flag, auto& into, int64_t lo, const char* help) {
    app.add_option(flag, into, help)
        ->check(strict_number<int64_t>("an integer >= " + std::to_string(lo), lo, std::numeric_limits<int32_t>::max()))
        ->default_val(into)
        ->type_name("N");
  };
  integer("--max-new", max_new, 1, "tokens to generate per prompt, fewer at EOS");
  app.add_option("--seed", seed, "the sampling seed")
      ->check(strict_number<uint64_t>("an integer from 0 to 2^64-1"))
      ->default_val(seed)
      ->type_name("N");
  integer("--max-tokens", serving.max_tokens, 1, "tokens per step: the prefill chunk");
  integer("--max-seqs", serving.max_sequences, 1, "sequences per step");
  integer("--max-context", serving.max_context, 1, "positions per sequence");
  integer("--blocks", serving.blocks, 0, "KV blocks of 64 positions in the pool (0: max-seqs * max-context / 64)");
  integer("--arrive-every", arrive_every, 0, "prompt i joins at step i*K (0: all at once)");
  app.add_option("--temperature", temperature, "0 is greedy; else sampling with --top-p")
      ->check(strict_number<double>("a temperature >= 0", 0.0))
      ->default_val(temperature)
      ->type_name("T");
  app.add_option("--top-p", top_p, "the nucleus of sampling")
      ->check(strict_number<double>("a probability in (0, 1]", 1e-30, 1.0))
      ->default_val(top_p)
      ->type_name("P");
  app.add_flag("--solo-check", solo_check, "run each prompt again alone; its tokens must match (greedy)");
  app.add_option("--bench", bench,
                 "time steps instead of generating: decode:B,B,...@CTX,CTX,...;prefill:P,P,... (each row: device "
                 "and host time per step, tokens/s)")
      ->type_name("SPEC");
  app.add_option("--json", json_path, "--bench's rows as JSON")->type_name("FILE");
  app.add_option("--check", check_dir,
                 "compare the logits of DIR/check.json's prompt with DIR/check_logits.f32 (bench/llama_torch.py "
                 "--save-dir writes them)")
      ->type_name("DIR");
  gdl::tools::CommandLineOutcome outcome = gdl::tools::parse_command_line(app, argc, argv, 2);
  if (outcome.go_on && prompt_texts.empty() && prompts_file.empty() && bench.empty() && check_dir.empty())
    outcome = {false, 2, true, "give at least one prompt (--prompt or --prompts), --bench or --check"};
  if (!outcome.go_on) return gdl::tools::report_command_line("llama_generate", outcome);
  std::vector<std::string> lines = prompt_texts;
  if (!prompts_file.empty()) {
    std::ifstream in(prompts_file);
    if (!in) return fail("--prompts " + prompts_file + ": cannot be read");
    for (std::string line; std::getline(in, line);)
      if (line.find_first_not_of(" \t\r,") != std::string::npos) lines.push_back(line);
  }
  for (const std::string& line : lines) {
    bool ok = true;
    prompts.push_back(parse_ids(line, &ok));
    if (!ok) return fail("prompt '" + line + "' is not a list of token ids");
  }
  serving.max_context = (serving.max_context + serving.block_size - 1) / serving.block_size * serving.block_size;
  if (serving.blocks == 0) serving.blocks = serving.max_sequences * serving.max_context / serving.block_size;

  gdl::Expected<gdl::LlamaConfig> config = gdl::LlamaConfig::read(model);
  if (!config) return fail(config.status().message());

  // The program, compiled for this model's sizes (NVRTC, cached on disk).
  const auto compile_start = Clock::now();
  gdl::Expected<gdl::Program> program = gdl::Status::NotFound("no program");
  if (!artifact.empty()) {
    program = gdl::Program::load(artifact);
  } else {
    if (program_path.empty()) {
      const char* root = std::getenv("GDL_SOURCE_DIR");
      program_path = std::string(root ? root : ".") + (tp > 1 ? "/examples/llama/llama_tp.gdl" : "/examples/llama/llama.gdl");
    }
    gdl::jit::CompileSettings settings;
    settings.cache_dir = cache_dir;
    settings.consts = gdl::llama_const_settings(*config, serving);
    if (tp > 1) settings.consts["TP"] = std::to_string(tp);
    program = gdl::jit::compile(program_path, settings);
  }
  if (!program) return fail(program.status().message());
  const double compile_s = std::chrono::duration<double>(Clock::now() - compile_start).count();
  if (!save_artifact.empty())
    if (gdl::Status s = program->save(save_artifact); !s.ok()) return fail(s.message());

  gdl::SessionOptions options;
  options.record_device_time = true;
  gdl::Expected<std::unique_ptr<gdl::llama::Engine>> engine =
      gdl::llama::Engine::create(*program, *config, serving, model, options);
  if (!engine) return fail(engine.status().message());
  std::printf("model: %lld layers, hidden %lld, %lld/%lld heads, vocab %lld, %s; weights %.2f GB loaded in %.2f s\n",
              (long long)config->num_layers, (long long)config->hidden_size, (long long)config->num_heads,
              (long long)config->num_kv_heads, (long long)config->vocab_size, gdl::element_type_name(config->dtype),
              (*engine)->load_report().bytes / 1e9, (*engine)->load_seconds());
  std::printf("program: %s in %.2f s (%zu kernel nodes, arena %.1f MB%s)\n", artifact.empty() ? "compiled" : "loaded",
              compile_s, program->node_count(), program->arena_bytes() / 1e6,
              (*engine)->ranks() > 1 ? (", on each of " + std::to_string((*engine)->ranks()) + " GPUs").c_str() : "");

  int status = 0;
  if (!check_dir.empty()) status |= check_logits(**engine, check_dir, config->vocab_size);
  if (!bench.empty()) return status | run_bench(**engine, bench, json_path, compile_s);
  if (prompts.empty()) return status;

  std::vector<gdl::llama::Request> requests;
  for (size_t i = 0; i < prompts.size(); ++i) {
    gdl::llama::Request r;
    r.prompt = prompts[i];
    r.max_new_tokens = max_new;
    r.temperature = static_cast<float>(temperature);
    r.top_p = static_cast<float>(top_p);
    r.arrival_step = static_cast<int>(i) * arrive_every;
    requests.push_back(std::move(r));
  }
  const auto run_start = Clock::now();
  gdl::Expected<std::vector<gdl::llama::Result>> results = (*engine)->generate(requests, seed);
  if (!results) return fail(results.status().message());
  const double run_s = std::chrono::duration<double>(Clock::now() - run_start).count();

  size_t generated = 0;
  for (size_t i = 0; i < results->size(); ++i) {
    const gdl::llama::Result& r = (*results)[i];
    std::printf("sequence %zu (%zu prompt tokens, steps %d..%d, first token after %.2f ms%s):", i, prompts[i].size(),
                r.first_step, r.last_step, r.time_to_first_token_s * 1e3, r.stopped_at_eos ? ", EOS" : "");
    for (int32_t t : r.tokens) std::printf(" %d", t);
    std::printf("\n");
    generated += r.tokens.size();
  }
  // Decode steps: those with one token per sequence.
  double decode_us = 0, decode_host_us = 0;
  int decode_steps = 0;
  for (const gdl::llama::StepTiming& s : (*engine)->steps())
    if (s.tokens == s.sequences) {
      decode_us += s.total_us;
      decode_host_us += s.host_us;
      ++decode_steps;
    }
  std::printf("%zu tokens in %.3f s: %.1f tokens/s; %zu steps", generated, run_s, generated / run_s,
              (*engine)->steps().size());
  if (decode_steps)
    std::printf(", decode steps %.1f us each (host %.1f us of it)", decode_us / decode_steps, decode_host_us / decode_steps);
  std::printf("\n");

  if (solo_check) {
    int mismatches = 0;
    for (size_t i = 0; i < requests.size(); ++i) {
      gdl::llama::Request alone = requests[i];
      alone.arrival_step = 0;
      gdl::Expected<std::vector<gdl::llama::Result>> solo = (*engine)->generate({alone}, seed);
      if (!solo) return fail(solo.status().message());
      const bool same = (*solo)[0].tokens == (*results)[i].tokens;
      mismatches += !same;
      std::printf("solo check, sequence %zu: %s\n", i, same ? "same tokens" : "DIFFERENT tokens");
    }
    if (mismatches) return 3;
  }
  return 0;
}
