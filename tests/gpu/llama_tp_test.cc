// The tensor-parallel Llama decoder (examples/llama/llama_tp.gdl) on GPUs
// against llama.gdl on one GPU, over the same random f32 weights, step by
// step (prompt chunks, a sequence joining, decode steps into new blocks):
// at TP = 1 on one GPU (its all_reduces NCCL calls over one rank), and at
// TP = 2 on two (multi-gpu:*, left out by main.cc below 2 GPUs).
#include <doctest/doctest.h>

#include <algorithm>
#include <cmath>
#include <cstring>

#include "../llama_tp_split.h"
#include "gdl/jit.h"
#include "gdl/llama.h"
#include "gpu_test_util.h"

namespace gdl {
namespace {

using llama_tp::Part;

LlamaConfig tiny_config() {
  Expected<LlamaConfig> c = LlamaConfig::parse(llama_tp::kTinyConfig);
  REQUIRE_MESSAGE(c.ok(), c.status().message());
  return *c;
}

Program compile_decoder(const std::string& file, const LlamaConfig& config, int ranks) {
  jit::CompileSettings settings;
  settings.consts = llama_const_settings(config, llama_tp::tiny_serving());
  if (ranks > 0) settings.consts["TP"] = std::to_string(ranks);
  Expected<Program> p = jit::compile(gpu_test::source_dir() + "/examples/llama/" + file, settings);
  REQUIRE_MESSAGE(p.ok(), p.status().message());
  return *p;
}

TensorData split_tensor(const TensorData& t, const llama_tp::Split& split) {
  TensorData out = t;
  REQUIRE(element_size(t.dtype) == 4);  // f32 weights, f32 cache
  std::vector<uint32_t> words(t.bytes.size() / 4);
  std::memcpy(words.data(), t.bytes.data(), t.bytes.size());
  words = llama_tp::take_ranges(words, &out.shape, split.axis, split.ranges);
  out.bytes.resize(words.size() * 4);
  std::memcpy(out.bytes.data(), words.data(), out.bytes.size());
  return out;
}

void bind_step(Session& s, const std::vector<Part>& parts) {
  for (const llama_tp::StepInput& in : llama_tp::step_inputs(parts)) {
    const ElementType t = in.is_float ? ElementType::kF32 : ElementType::kI32;
    const std::vector<uint8_t> bytes = encode_elements(t, in.values);
    GDL_REQUIRE_OK(s.bind(in.name, bytes.data(), bytes.size(), t, in.shape));
  }
}

// llama_tp.gdl over `ranks` GPUs (devices 0..ranks-1) against llama.gdl on device 0.
void compare_with_single_decoder(int ranks) {
  const LlamaConfig config = tiny_config();
  const Program single = compile_decoder("llama.gdl", config, 0), tp = compile_decoder("llama_tp.gdl", config, ranks);
  REQUIRE(tp.group_ranks() == ranks);
  std::mt19937_64 rng(gpu_test::seed_for("llama tp " + std::to_string(ranks)));
  // Weights of either sign, small enough that 2 layers keep the logits finite and peaked.
  std::map<std::string, TensorData> whole = gpu_test::random_bindings(single, {1, 1}, rng, [](const TensorInfo&) {
    gpu_test::ValueRange r;
    r.lo = 0.02;
    r.hi = 0.25;
    return r;
  });
  std::unique_ptr<Session> one = gpu_test::make_session(single);
  std::vector<std::unique_ptr<Session>> rank_sessions;
  std::vector<std::shared_ptr<Communicator>> comms;
  if (ranks == 1) {
    rank_sessions.push_back(gpu_test::make_session(tp));
  } else {
    std::vector<int> devices;
    for (int r = 0; r < ranks; ++r) devices.push_back(r);
    Expected<std::vector<std::shared_ptr<Communicator>>> made = Communicator::create_local(devices);
    REQUIRE_MESSAGE(made.ok(), made.status().message());
    std::vector<SessionOptions> options(static_cast<size_t>(ranks));
    for (int r = 0; r < ranks; ++r) {
      options[static_cast<size_t>(r)].device = r;
      options[static_cast<size_t>(r)].communicator = (*made)[static_cast<size_t>(r)];
    }
    Expected<std::vector<std::unique_ptr<Session>>> sessions = Session::create_ranks(tp, options);
    REQUIRE_MESSAGE(sessions.ok(), sessions.status().message());
    rank_sessions = std::move(sessions).value();
  }
  for (const TensorInfo& p : single.params()) GDL_REQUIRE_OK(one->set_param(p.name, whole.at(p.name).bytes.data(), whole.at(p.name).bytes.size()));
  for (int r = 0; r < ranks; ++r) {
    std::map<std::string, TensorData> mine;
    for (const TensorInfo& p : single.params()) mine[p.name] = whole.at(p.name);
    for (const llama_tp::Split& split : llama_tp::rank_splits(r, ranks, config.num_heads, config.num_kv_heads,
                                                              config.head_dim, config.intermediate_size))
      if (mine.count(split.name)) mine[split.name] = split_tensor(mine.at(split.name), split);
    for (const TensorInfo& p : tp.params())
      GDL_REQUIRE_OK(rank_sessions[static_cast<size_t>(r)]->set_param(p.name, mine.at(p.name).bytes.data(), mine.at(p.name).bytes.size()));
  }
  // Every session's cache and generator start at zero: the same on every side.
  double worst = 0;
  int tokens_compared = 0;
  auto step = [&](const std::vector<Part>& parts) {
    bind_step(*one, parts);
    GDL_REQUIRE_OK(one->run());
    for (auto& s : rank_sessions) {
      bind_step(*s, parts);
      GDL_REQUIRE_OK(s->run());  // every rank's graph launched before any is read
    }
    const std::map<std::string, TensorData> want = gpu_test::read_outputs(*one);
    const std::vector<float> want_logits = [&] {
      std::vector<double> d = decode_elements(ElementType::kF32, want.at("logits").bytes.data(), want.at("logits").bytes.size() / 4);
      return std::vector<float>(d.begin(), d.end());
    }();
    const size_t vocab = static_cast<size_t>(config.vocab_size), sequences = parts.size();
    for (int r = 0; r < ranks; ++r) {
      const std::map<std::string, TensorData> got = gpu_test::read_outputs(*rank_sessions[static_cast<size_t>(r)]);
      const double rel = gpu_test::relative_error(got.at("logits"), want.at("logits"));
      worst = std::max(worst, rel);
      CHECK(rel < 1e-4);
      // The greedy token wherever the single decoder's top two are apart by more than the error allows.
      const std::vector<double> next = decode_elements(ElementType::kI32, got.at("next").bytes.data(), sequences);
      const std::vector<double> want_next = decode_elements(ElementType::kI32, want.at("next").bytes.data(), sequences);
      for (size_t s = 0; s < sequences; ++s) {
        std::vector<float> row(want_logits.begin() + static_cast<std::ptrdiff_t>(s * vocab),
                               want_logits.begin() + static_cast<std::ptrdiff_t>((s + 1) * vocab));
        std::vector<float> sorted = row;
        std::partial_sort(sorted.begin(), sorted.begin() + 2, sorted.end(), std::greater<>());
        double scale = 0;
        for (float v : row) scale = std::max(scale, std::abs(static_cast<double>(v)));
        if (sorted[0] - sorted[1] > 2e-4 * scale) {
          CHECK(next[s] == want_next[s]);
          tokens_compared += 1;
        }
      }
    }
    std::vector<int32_t> out;
    for (double v : decode_elements(ElementType::kI32, want.at("next").bytes.data(), sequences)) out.push_back(static_cast<int32_t>(v));
    return out;
  };
  llama_tp::run_two_sequences(step);
  MESSAGE("llama_tp.gdl at TP=" << ranks << " vs llama.gdl: worst relative error of the logits " << worst << ", "
                                << tokens_compared << " greedy tokens compared");
  CHECK(tokens_compared >= 8 * ranks);
}

}  // namespace
}  // namespace gdl

TEST_CASE("semantics: the tensor-parallel Llama decoder at TP=1 (NCCL over one rank) gives llama.gdl's logits and tokens") {
  gdl::compare_with_single_decoder(1);
}

TEST_CASE("multi-gpu: the tensor-parallel Llama decoder on two GPUs gives llama.gdl's logits and tokens") {
  gdl::compare_with_single_decoder(2);
}
