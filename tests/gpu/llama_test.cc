// The Llama decoder against Hugging Face transformers on the GPU: models
// that tests/gpu/llama_reference.py built with random weights and saved
// with save_pretrained, with transformers' logits for teacher-forced steps
// and its greedy generations. Each directory of GDL_LLAMA_REFERENCE
// (comma-separated; scripts/gpu-check.sh llama makes them) is loaded
// through the safetensors loader and the Llama mapping and run through the
// continuous-batching engine over examples/llama/llama.gdl.
#include <doctest/doctest.h>

#include <algorithm>
#include <cmath>
#include <cstdlib>
#include <fstream>
#include <nlohmann/json.hpp>
#include <sstream>

#include "gdl/jit.h"
#include "gdl/llama.h"
#include "gpu_test_util.h"
#include "llama_engine.h"

namespace gdl {
namespace {

std::vector<std::string> reference_dirs() {
  const char* env = std::getenv("GDL_LLAMA_REFERENCE");
  std::vector<std::string> dirs;
  if (!env) return dirs;
  std::stringstream s(env);
  for (std::string d; std::getline(s, d, ',');)
    if (!d.empty()) dirs.push_back(d);
  return dirs;
}

std::vector<std::vector<float>> read_rows(const std::string& path, size_t rows, size_t vocab) {
  std::ifstream in(path, std::ios::binary);
  REQUIRE_MESSAGE(in.good(), path);
  std::vector<std::vector<float>> out(rows, std::vector<float>(vocab));
  for (auto& r : out) in.read(reinterpret_cast<char*>(r.data()), static_cast<std::streamsize>(vocab * 4));
  REQUIRE_MESSAGE(in.good(), path << " is shorter than its rows");
  return out;
}

// max |got - want| / max |want| over a row.
double row_relative(const std::vector<float>& got, const std::vector<float>& want) {
  double diff = 0, scale = 0;
  for (size_t i = 0; i < want.size(); ++i) {
    diff = std::max(diff, std::abs(static_cast<double>(got[i]) - want[i]));
    scale = std::max(scale, std::abs(static_cast<double>(want[i])));
  }
  return diff / scale;
}

int32_t argmax(const std::vector<float>& row) {
  return static_cast<int32_t>(std::max_element(row.begin(), row.end()) - row.begin());
}

std::vector<int32_t> ids(const nlohmann::json& j) { return j.get<std::vector<int32_t>>(); }

}  // namespace

// Every reference directory through the engine over examples/llama/`file`
// (-D TP=tp when tp > 1: one session per rank on GPUs 0..tp-1).
static void check_against_transformers(const std::string& file, int tp) {
  for (const std::string& dir : reference_dirs()) {
    CAPTURE(dir);
    std::ifstream in(dir + "/reference.json");
    REQUIRE_MESSAGE(in.good(), (dir + "/reference.json"));
    const nlohmann::json ref = nlohmann::json::parse(in);
    const bool f32 = ref["dtype"] == "f32";
    const double tolerance = f32 ? 1e-4 : 2e-2;
    const std::string model = dir + "/" + ref["model_dir"].get<std::string>();
    Expected<LlamaConfig> config = LlamaConfig::read(model);
    REQUIRE_MESSAGE(config.ok(), config.status().message());
    const nlohmann::json& cases = ref["cases"];
    size_t longest = 0;
    for (const auto& c : cases) longest = std::max(longest, c["prompt"].size() + c["forced"].size());
    LlamaServing serving;
    serving.max_tokens = 64;
    serving.max_sequences = static_cast<int64_t>(cases.size());
    serving.max_context = static_cast<int64_t>((longest + 15) / 16 * 16);
    serving.blocks = serving.max_sequences * serving.max_context / serving.block_size;
    jit::CompileSettings settings;
    settings.consts = llama_const_settings(*config, serving);
    if (tp > 1) settings.consts["TP"] = std::to_string(tp);
    Expected<Program> program = jit::compile(gpu_test::source_dir() + "/examples/llama/" + file, settings);
    REQUIRE_MESSAGE(program.ok(), program.status().message());
    Expected<std::unique_ptr<llama::Engine>> engine = llama::Engine::create(*program, *config, serving, model);
    REQUIRE_MESSAGE(engine.ok(), engine.status().message());
    REQUIRE((*engine)->ranks() == static_cast<size_t>(std::max(tp, 1)));
    CAPTURE(file);
    const size_t vocab = static_cast<size_t>(config->vocab_size);

    // 1. Teacher-forced, every case in one continuous batch (the later ones
    // join while the first decode): the logits of every step.
    std::vector<llama::Request> forced;
    for (size_t i = 0; i < cases.size(); ++i) {
      llama::Request r;
      r.prompt = ids(cases[i]["prompt"]);
      r.forced = ids(cases[i]["forced"]);
      r.max_new_tokens = static_cast<int>(r.forced.size());
      r.keep_logits = true;
      r.arrival_step = static_cast<int>(3 * i);
      forced.push_back(std::move(r));
    }
    Expected<std::vector<llama::Result>> got = (*engine)->generate(forced);
    REQUIRE_MESSAGE(got.ok(), got.status().message());
    double worst = 0;
    int compared_tokens = 0, skipped_tokens = 0;
    for (size_t i = 0; i < cases.size(); ++i) {
      const size_t steps = cases[i]["forced"].size();
      const auto want = read_rows(dir + "/" + cases[i]["forced_logits"].get<std::string>(), steps, vocab);
      REQUIRE((*got)[i].logits.size() == steps);
      for (size_t s = 0; s < steps; ++s) {
        const double rel = row_relative((*got)[i].logits[s], want[s]);
        worst = std::max(worst, rel);
        CAPTURE(i);
        CAPTURE(s);
        CHECK(rel < tolerance);
        // The greedy token where the reference's top two are further apart
        // than both sides' error allows.
        std::vector<float> sorted = want[s];
        std::partial_sort(sorted.begin(), sorted.begin() + 2, sorted.end(), std::greater<>());
        double scale = 0;
        for (float v : want[s]) scale = std::max(scale, std::abs(static_cast<double>(v)));
        if (sorted[0] - sorted[1] > 2 * tolerance * scale) {
          CHECK(argmax((*got)[i].logits[s]) == argmax(want[s]));
          ++compared_tokens;
        } else {
          ++skipped_tokens;
        }
      }
    }
    // Below f32, both sides round: their distance from the same weights
    // evaluated in f32 says whose rounding is worse.
    if (!f32 && cases[0].contains("forced_logits_f32") && cases[0]["forced_logits_f32"].is_string()) {
      double gdl_vs_f32 = 0, theirs_vs_f32 = 0;
      for (size_t i = 0; i < cases.size(); ++i) {
        const size_t steps = cases[i]["forced"].size();
        const auto truth = read_rows(dir + "/" + cases[i]["forced_logits_f32"].get<std::string>(), steps, vocab);
        const auto want = read_rows(dir + "/" + cases[i]["forced_logits"].get<std::string>(), steps, vocab);
        for (size_t s = 0; s < steps; ++s) {
          gdl_vs_f32 = std::max(gdl_vs_f32, row_relative((*got)[i].logits[s], truth[s]));
          theirs_vs_f32 = std::max(theirs_vs_f32, row_relative(want[s], truth[s]));
        }
      }
      MESSAGE(dir << ": against the same weights in f32, gdl's worst row is off by " << gdl_vs_f32
                  << ", transformers' by " << theirs_vs_f32);
      CHECK(gdl_vs_f32 <= 1.5 * theirs_vs_f32);
    }
    MESSAGE(dir << ": teacher-forced logits, worst row max|gdl - transformers| / max|transformers| = " << worst
                << " (tolerance " << tolerance << "); greedy token compared at " << compared_tokens << " steps, "
                << skipped_tokens << " steps with a top-two margin under 2 x tolerance x max|logit| not compared");

    // 2. Free-running greedy generation, all cases batched, then each alone:
    // the same tokens as transformers' generate, and batching changes none.
    if (!f32) continue;  // bf16 rounding makes free-running paths part ways at near ties; the forced steps above cover bf16
    std::vector<llama::Request> greedy;
    for (size_t i = 0; i < cases.size(); ++i) {
      llama::Request r;
      r.prompt = ids(cases[i]["prompt"]);
      r.max_new_tokens = static_cast<int>(cases[i]["greedy"].size());
      r.arrival_step = static_cast<int>(5 * i);
      greedy.push_back(std::move(r));
    }
    Expected<std::vector<llama::Result>> batched = (*engine)->generate(greedy);
    REQUIRE_MESSAGE(batched.ok(), batched.status().message());
    for (size_t i = 0; i < cases.size(); ++i) {
      CAPTURE(i);
      const std::vector<int32_t> want = ids(cases[i]["greedy"]);
      CHECK((*batched)[i].tokens == want);
      llama::Request alone = greedy[i];
      alone.arrival_step = 0;
      Expected<std::vector<llama::Result>> solo = (*engine)->generate({alone});
      REQUIRE(solo.ok());
      CHECK((*solo)[0].tokens == (*batched)[i].tokens);
      MESSAGE(dir << " case " << i << ": " << want.size() << " greedy tokens, smallest top-two margin on transformers' path "
                  << cases[i]["min_greedy_margin"].get<double>());
    }
  }
}

TEST_CASE("llama: logits and greedy tokens equal transformers' on models saved with save_pretrained" *
          doctest::skip(std::getenv("GDL_LLAMA_REFERENCE") == nullptr)) {
  check_against_transformers("llama.gdl", 1);
}

TEST_CASE("multi-gpu: the tensor-parallel decoder over two GPUs gives transformers' logits and greedy tokens" *
          doctest::skip(std::getenv("GDL_LLAMA_REFERENCE") == nullptr)) {
  check_against_transformers("llama_tp.gdl", 2);  // each rank's weights from the one checkpoint
}

}  // namespace gdl
