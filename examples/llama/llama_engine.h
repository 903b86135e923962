// A small serving loop over examples/llama/llama.gdl: one session, a paged
// KV cache whose blocks it hands out, and continuous batching: sequences
// join when they arrive and there is room, every step packs prompt chunks
// and decode tokens into one ragged batch, and a sequence leaves when it
// has its tokens (or EOS), its blocks freed for the next. Over
// examples/llama/llama_tp.gdl (-D TP=N) it drives one session per rank, on
// N GPUs of this process, each with its rank's share of the weights: every
// step binds the same inputs on every rank and launches every rank's graph,
// then reads rank 0's tokens (every rank computes the same).
#pragma once

#include <cstdint>
#include <memory>
#include <string>
#include <vector>

#include "gdl/gdl.h"
#include "gdl/llama.h"

namespace gdl::llama {

struct Request {
  std::vector<int32_t> prompt;      // at least one token
  int max_new_tokens = 16;
  float temperature = 0;            // 0: greedy
  float top_p = 1;
  int arrival_step = 0;             // joins at this step at the earliest
  // Teacher forcing: after each step the sequence consumes forced[i]
  // instead of the token it generated (the generated ones are still
  // returned), for comparisons that must not depend on earlier choices.
  std::vector<int32_t> forced;
  bool keep_logits = false;         // return the logits of every generated token
};

struct Result {
  std::vector<int32_t> tokens;              // generated, in order
  std::vector<std::vector<float>> logits;   // keep_logits: one row of vocab_size per generated token
  int first_step = -1, last_step = -1;      // the steps it took part in
  double time_to_first_token_s = 0;         // from the step it joined at to its first token
  bool stopped_at_eos = false;
};

struct StepTiming {
  int tokens = 0, sequences = 0;
  double host_us = 0;    // binds + run(): the host's part of the step
  double total_us = 0;   // to the next tokens on the host
};

class Engine {
 public:
  // A session of `program` (examples/llama/llama.gdl compiled with
  // llama_const_settings(config, serving)) with the weights of `checkpoint`
  // and the RoPE tables of `config`. For llama_tp.gdl over N > 1 ranks, a
  // session per rank on devices options.device .. options.device + N - 1.
  static Expected<std::unique_ptr<Engine>> create(const Program& program, const LlamaConfig& config,
                                                  const LlamaServing& serving, const std::string& checkpoint,
                                                  const SessionOptions& options = {});
  // Runs every request to its end; results in request order. A request
  // that can never fit (prompt + max_new_tokens above the context, more
  // blocks than the pool) is InvalidArgument before anything runs.
  Expected<std::vector<Result>> generate(const std::vector<Request>& requests, uint64_t seed = 0);

  // One step timed in isolation, for the benchmark: `batch` sequences each
  // decoding its token at position context - 1 (a full cache of `context`
  // positions each; the pool must hold batch * context / block_size
  // blocks), or one sequence prefilling `context` tokens (batch 0). Per
  // iteration the tokens and positions are bound again and the step run;
  // host_us is that (binds + run), device_us the session's device time.
  struct Timing {
    double device_us = 0, host_us = 0;  // medians
  };
  Expected<Timing> time_step(int64_t batch, int64_t context, int iterations);

  const std::vector<StepTiming>& steps() const { return steps_; }
  Session& session() { return *sessions_.front(); }  // rank 0's
  size_t ranks() const { return sessions_.size(); }
  const LoadReport& load_report() const { return load_report_; }
  double load_seconds() const { return load_seconds_; }

 private:
  Engine() = default;
  // The same inputs bound on every rank's session; every rank's run.
  Status bind(const char* name, const void* data, size_t bytes, ElementType type, const std::vector<int64_t>& shape);
  Status run();
  std::vector<std::unique_ptr<Session>> sessions_;  // rank order
  std::vector<std::shared_ptr<Communicator>> communicators_;  // over several ranks: aborted when a rank's run fails
  LlamaConfig config_;
  LlamaServing serving_;
  int64_t max_blocks_ = 0;  // per sequence (MAXB)
  ElementType dtype_ = ElementType::kF32;
  LoadReport load_report_;
  double load_seconds_ = 0;
  std::vector<StepTiming> steps_;
};

}  // namespace gdl::llama
