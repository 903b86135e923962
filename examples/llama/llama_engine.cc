#include "llama_engine.h"

#include <algorithm>
#include <chrono>
#include <deque>

#include "gdl/weights.h"

namespace gdl::llama {
namespace {

using Clock = std::chrono::steady_clock;

double micros_since(Clock::time_point t) { return std::chrono::duration<double, std::micro>(Clock::now() - t).count(); }

// A sequence being served.
struct Live {
  size_t request = 0;
  std::vector<int32_t> tokens;  // prompt, then what it consumed after it
  size_t prefilled = 0;         // tokens of `tokens` already in the cache
  std::vector<int32_t> blocks;
  int generated = 0;
  Clock::time_point joined;
};

#define ENGINE_TRY(expr)                  \
  do {                                    \
    ::gdl::Status _s = (expr);            \
    if (!_s.ok()) return _s;              \
  } while (0)

}  // namespace

Expected<std::unique_ptr<Engine>> Engine::create(const Program& program, const LlamaConfig& config,
                                                 const LlamaServing& serving, const std::string& checkpoint,
                                                 const SessionOptions& options) {
  std::unique_ptr<Engine> e(new Engine());
  e->config_ = config;
  e->serving_ = serving;
  e->max_blocks_ = (serving.max_context + serving.block_size - 1) / serving.block_size;
  const TensorInfo* embed = program.find_param("embed");
  if (!embed) return Status::InvalidArgument("program " + program.name() + " has no param 'embed': not llama.gdl");
  e->dtype_ = embed->dtype;
  // The serving sizes must be the ones the program was compiled with: a
  // block id past the pool would be skipped by the cache writes and reads.
  const TensorInfo* pool = program.find_state("k_pool");
  const TensorInfo* tables = program.find_input("tables");
  if (!pool || !tables || pool->shape.size() != 4 || tables->shape.size() != 2)
    return Status::InvalidArgument("program " + program.name() + " has no k_pool state or tables input: not llama.gdl");
  if (pool->shape[0].extent != config.num_layers * serving.blocks || pool->shape[2].extent != serving.block_size ||
      tables->shape[1].extent != e->max_blocks_)
    return Status::InvalidArgument("program " + program.name() + " was compiled for another KV cache (k_pool " +
                                   pool->type_text + ", tables " + tables->type_text + ") than these serving sizes");
  const int ranks = std::max(1, program.group_ranks());
  if (ranks == 1) {
    Expected<std::unique_ptr<Session>> session = Session::create(program, options);
    if (!session) return session.status();
    e->sessions_.push_back(std::move(*session));
  } else {  // one process driving every rank's GPU
    std::vector<int> devices;
    for (int r = 0; r < ranks; ++r) devices.push_back(options.device + r);
    Expected<std::vector<std::shared_ptr<Communicator>>> comms = Communicator::create_local(devices);
    if (!comms) return comms.status();
    std::vector<SessionOptions> per_rank(static_cast<size_t>(ranks), options);
    e->communicators_ = *comms;
    for (int r = 0; r < ranks; ++r) {
      per_rank[static_cast<size_t>(r)].eager_fallback = nullptr;  // one thread cannot take every rank's fallback
      per_rank[static_cast<size_t>(r)].device = devices[static_cast<size_t>(r)];
      per_rank[static_cast<size_t>(r)].communicator = (*comms)[static_cast<size_t>(r)];
      per_rank[static_cast<size_t>(r)].record_device_time = options.record_device_time && r == 0;
    }
    Expected<std::vector<std::unique_ptr<Session>>> sessions = Session::create_ranks(program, per_rank);
    if (!sessions) return sessions.status();
    e->sessions_ = std::move(*sessions);
  }
  const auto start = Clock::now();
  std::vector<float> cos, sin;
  const int64_t positions = e->max_blocks_ * serving.block_size;
  llama_rope_tables(config, positions, &cos, &sin);
  for (int r = 0; r < ranks; ++r) {
    Session& s = *e->sessions_[static_cast<size_t>(r)];
    // llama_tp.gdl's rank r takes its rows and columns; llama.gdl the whole tensors.
    const WeightMapping mapping = program.group_ranks() > 0 ? llama_weight_mapping(config, r, ranks) : llama_weight_mapping(config);
    if (mapping.rules.empty())
      return Status::InvalidArgument("the model's heads, k/v heads or MLP size are not multiples of the " +
                                     std::to_string(ranks) + " ranks of program " + program.name());
    LoadReport report;
    ENGINE_TRY(s.load_params(checkpoint, mapping, &report));
    e->load_report_.bytes += report.bytes;
    if (r == 0) {
      e->load_report_.params_loaded = report.params_loaded;
      e->load_report_.params_unset = report.params_unset;
    }
    for (auto [name, table] : {std::pair{"rope_cos", &cos}, std::pair{"rope_sin", &sin}}) {
      const std::vector<double> values(table->begin(), table->end());
      const std::vector<uint8_t> bytes = encode_elements(e->dtype_, values);
      ENGINE_TRY(s.set_param(name, bytes.data(), bytes.size()));
    }
  }
  e->load_seconds_ = std::chrono::duration<double>(Clock::now() - start).count();
  e->load_report_.seconds = e->load_seconds_;
  return e;
}

Status Engine::bind(const char* name, const void* data, size_t bytes, ElementType type, const std::vector<int64_t>& shape) {
  for (auto& s : sessions_) ENGINE_TRY(s->bind(name, data, bytes, type, shape));
  return Status::Ok();
}

Status Engine::run() {
  for (auto& s : sessions_)  // every rank's graph launched before any is read
    if (Status st = s->run(); !st.ok()) {
      for (const std::shared_ptr<Communicator>& c : communicators_) c->abort();  // the others wait for this rank
      return st;
    }
  return Status::Ok();
}

Expected<std::vector<Result>> Engine::generate(const std::vector<Request>& requests, uint64_t seed) {
  const int64_t bs = serving_.block_size, max_context = max_blocks_ * bs;
  for (size_t i = 0; i < requests.size(); ++i) {
    const Request& r = requests[i];
    // Positions it writes into the cache: the last generated token never enters it.
    const int64_t length = static_cast<int64_t>(r.prompt.size()) + r.max_new_tokens - 1;
    if (r.prompt.empty() || r.max_new_tokens < 1)
      return Status::InvalidArgument("request " + std::to_string(i) + ": an empty prompt or no token to generate");
    if (length > max_context)
      return Status::InvalidArgument("request " + std::to_string(i) + ": " + std::to_string(length) +
                                     " positions, the context holds " + std::to_string(max_context));
    if ((length + bs - 1) / bs > serving_.blocks)
      return Status::InvalidArgument("request " + std::to_string(i) + " needs more KV blocks than the pool's " +
                                     std::to_string(serving_.blocks));
    for (const std::vector<int32_t>* ids : {&r.prompt, &r.forced})
      for (int32_t t : *ids)
        if (t < 0 || t >= config_.vocab_size)
          return Status::InvalidArgument("request " + std::to_string(i) + ": token " + std::to_string(t) +
                                         " outside the vocabulary");
  }
  for (auto& s : sessions_) ENGINE_TRY(s->seed_rng(seed));  // every rank draws the same numbers
  std::vector<Result> results(requests.size());
  std::deque<size_t> waiting;
  for (size_t i = 0; i < requests.size(); ++i) waiting.push_back(i);
  std::vector<int32_t> free_blocks;
  for (int64_t b = serving_.blocks - 1; b >= 0; --b) free_blocks.push_back(static_cast<int32_t>(b));
  std::vector<Live> live;
  const int64_t vocab = config_.vocab_size;
  std::vector<int32_t> tokens, pos, seq, tables, last;
  std::vector<float> temperature, top_p;
  std::vector<int32_t> next;
  std::vector<uint8_t> logit_bytes;

  for (int step = 0; !waiting.empty() || !live.empty(); ++step) {
    // 1. Join: first come, first served among the requests that have
    // arrived, while a slot and the blocks of the whole sequence are free
    // (reserved up front: a sequence never waits mid-way). The first that
    // does not fit waits, and those behind it wait for it.
    for (auto it = waiting.begin(); it != waiting.end();) {
      const Request& r = requests[*it];
      const int64_t need = (static_cast<int64_t>(r.prompt.size()) + r.max_new_tokens - 1 + bs - 1) / bs;
      if (r.arrival_step > step) {
        ++it;
        continue;
      }
      if (static_cast<int64_t>(live.size()) >= serving_.max_sequences || need > static_cast<int64_t>(free_blocks.size()))
        break;
      Live l;
      l.request = *it;
      l.tokens = r.prompt;
      for (int64_t b = 0; b < need; ++b) {
        l.blocks.push_back(free_blocks.back());
        free_blocks.pop_back();
      }
      l.joined = Clock::now();
      results[*it].first_step = step;
      live.push_back(std::move(l));
      it = waiting.erase(it);
    }
    if (live.empty()) continue;  // the next arrival is later

    // 2. The step's ragged batch: each live sequence's unconsumed tokens (a
    // prompt chunk, or its last token), as many as the budget allows.
    tokens.clear(), pos.clear(), seq.clear(), tables.clear(), last.clear();
    temperature.clear(), top_p.clear();
    std::vector<size_t> in_step;
    for (size_t s = 0; s < live.size(); ++s) {
      Live& l = live[s];
      const int64_t budget = serving_.max_tokens - static_cast<int64_t>(tokens.size());
      const int64_t take = std::min<int64_t>(budget, static_cast<int64_t>(l.tokens.size() - l.prefilled));
      if (take <= 0) continue;
      const int32_t row = static_cast<int32_t>(in_step.size());
      for (int64_t i = 0; i < take; ++i) {
        tokens.push_back(l.tokens[l.prefilled + i]);
        pos.push_back(static_cast<int32_t>(l.prefilled + i));
        seq.push_back(row);
      }
      last.push_back(static_cast<int32_t>(tokens.size() - 1));
      for (int64_t b = 0; b < max_blocks_; ++b) tables.push_back(b < static_cast<int64_t>(l.blocks.size()) ? l.blocks[b] : -1);
      const Request& r = requests[l.request];
      temperature.push_back(r.temperature);
      top_p.push_back(r.top_p);
      in_step.push_back(s);
    }
    const int64_t T = static_cast<int64_t>(tokens.size()), S = static_cast<int64_t>(in_step.size());

    // 3. Bind, run, read the next tokens.
    const auto start = Clock::now();
    ENGINE_TRY(bind("tokens", tokens.data(), T * 4, ElementType::kI32, {T}));
    ENGINE_TRY(bind("pos", pos.data(), T * 4, ElementType::kI32, {T}));
    ENGINE_TRY(bind("seq", seq.data(), T * 4, ElementType::kI32, {T}));
    ENGINE_TRY(bind("tables", tables.data(), S * max_blocks_ * 4, ElementType::kI32, {S, max_blocks_}));
    ENGINE_TRY(bind("last", last.data(), S * 4, ElementType::kI32, {S}));
    ENGINE_TRY(bind("temperature", temperature.data(), S * 4, ElementType::kF32, {S}));
    ENGINE_TRY(bind("top_p", top_p.data(), S * 4, ElementType::kF32, {S}));
    ENGINE_TRY(run());
    StepTiming timing;
    timing.host_us = micros_since(start);
    next.resize(S);
    ENGINE_TRY(session().read("next", next.data(), S * 4));
    bool want_logits = false;
    for (size_t s : in_step) want_logits |= requests[live[s].request].keep_logits;
    if (want_logits) {
      logit_bytes.resize(S * vocab * element_size(dtype_));
      ENGINE_TRY(session().read("logits", logit_bytes.data(), logit_bytes.size()));
    }
    timing.total_us = micros_since(start);
    timing.tokens = static_cast<int>(T);
    timing.sequences = static_cast<int>(S);
    steps_.push_back(timing);

    // 4. Sequences whose step reached the end of what they had consumed
    // take their next token; the finished leave.
    for (size_t row = 0; row < in_step.size(); ++row) {
      Live& l = live[in_step[row]];
      const int64_t took = std::count(seq.begin(), seq.end(), static_cast<int32_t>(row));
      l.prefilled += took;
      if (l.prefilled < l.tokens.size()) continue;  // more of the prompt to go
      const Request& r = requests[l.request];
      Result& out = results[l.request];
      if (out.tokens.empty())
        out.time_to_first_token_s = std::chrono::duration<double>(Clock::now() - l.joined).count();
      out.tokens.push_back(next[row]);
      if (r.keep_logits) {
        std::vector<double> row_values = decode_elements(dtype_, logit_bytes.data() + row * vocab * element_size(dtype_), vocab);
        out.logits.emplace_back(row_values.begin(), row_values.end());
      }
      ++l.generated;
      const bool eos = r.forced.empty() && std::find(config_.eos_token_ids.begin(), config_.eos_token_ids.end(),
                                                      next[row]) != config_.eos_token_ids.end();
      if (l.generated >= r.max_new_tokens || eos) {
        out.stopped_at_eos = eos;
        out.last_step = step;
        continue;
      }
      const size_t i = static_cast<size_t>(l.generated - 1);
      l.tokens.push_back(i < r.forced.size() ? r.forced[i] : next[row]);
    }
    for (auto it = live.begin(); it != live.end();) {
      if (results[it->request].last_step >= 0) {
        free_blocks.insert(free_blocks.end(), it->blocks.rbegin(), it->blocks.rend());
        it = live.erase(it);
      } else {
        ++it;
      }
    }
  }
  return results;
}

Expected<Engine::Timing> Engine::time_step(int64_t batch, int64_t context, int iterations) {
  const bool prefill = batch == 0;
  const int64_t S = prefill ? 1 : batch, T = prefill ? context : batch, bs = serving_.block_size;
  const int64_t per_seq = (context + bs - 1) / bs;
  if (per_seq > max_blocks_ || S * per_seq > serving_.blocks || T > serving_.max_tokens || S > serving_.max_sequences)
    return Status::InvalidArgument("time_step: " + std::to_string(S) + " sequences of " + std::to_string(context) +
                                   " positions do not fit the program's sizes");
  std::vector<int32_t> tokens(T), pos(T), seq(T), tables(S * max_blocks_, -1), last(S);
  std::vector<float> temperature(S, 0.0f), top_p(S, 1.0f);
  for (int64_t t = 0; t < T; ++t) {
    tokens[t] = static_cast<int32_t>((t * 7919 + 13) % config_.vocab_size);
    pos[t] = static_cast<int32_t>(prefill ? t : context - 1);
    seq[t] = static_cast<int32_t>(prefill ? 0 : t);
  }
  for (int64_t s = 0; s < S; ++s) {
    last[s] = static_cast<int32_t>(prefill ? T - 1 : s);
    for (int64_t b = 0; b < per_seq; ++b) tables[s * max_blocks_ + b] = static_cast<int32_t>(s * per_seq + b);
  }
  ENGINE_TRY(bind("seq", seq.data(), T * 4, ElementType::kI32, {T}));
  ENGINE_TRY(bind("tables", tables.data(), tables.size() * 4, ElementType::kI32, {S, max_blocks_}));
  ENGINE_TRY(bind("last", last.data(), S * 4, ElementType::kI32, {S}));
  ENGINE_TRY(bind("temperature", temperature.data(), S * 4, ElementType::kF32, {S}));
  ENGINE_TRY(bind("top_p", top_p.data(), S * 4, ElementType::kF32, {S}));
  std::vector<double> host, device;
  for (int i = 0; i < iterations + 3; ++i) {  // the first runs build the graph and warm up
    const auto start = Clock::now();
    ENGINE_TRY(bind("tokens", tokens.data(), T * 4, ElementType::kI32, {T}));
    ENGINE_TRY(bind("pos", pos.data(), T * 4, ElementType::kI32, {T}));
    ENGINE_TRY(run());
    const double h = micros_since(start);
    for (auto& s : sessions_) ENGINE_TRY(s->synchronize());
    if (i < 3) continue;
    host.push_back(h);
    device.push_back(session().stats().last_device_us);  // rank 0's, which waits for every rank's all_reduces
  }
  auto median = [](std::vector<double> v) {
    std::sort(v.begin(), v.end());
    return v[v.size() / 2];
  };
  return Timing{median(device), median(host)};
}

}  // namespace gdl::llama
