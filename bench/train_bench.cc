// gdl_train_bench: gdl's side of the training benchmark (bench/train.sh).
// Reads what bench/train_torch.py wrote (DIR/manifest.json: the config,
// the initial weights, batches of tokens, the step's scalars, and PyTorch's
// loss, weights and Adam moments after one step), then:
// 1. compiles examples/train_lm.gdl with the config's sizes as consts;
// 2. sets the weights (states; the moments start at zero), the rope tables
//    (params), binds the first batch, runs one step, and compares the loss,
//    every weight's two moments and its update (size and sign) with
//    PyTorch's. A step that disagrees is reported and not timed;
// 3. times steps, each binding its own batch of tokens then running the
//    graph (and the same with eager launches): the wall clock over --steps
//    steps after --warmup, synchronized at both ends, divided by the steps.
//
// 4. with --profile N, times every kernel node of a step (profile_nodes,
//    eager launches with events around each) and prints the N slowest and
//    the sum, so that a slow step shows where its time goes.
//
//   gdl_train_bench --data DIR --program examples/train_lm.gdl --json OUT.json
//                   [--steps 50] [--warmup 10] [--cache-dir DIR] [--profile N]
#include <algorithm>
#include <chrono>
#include <cmath>
#include <cstdio>
#include <filesystem>
#include <fstream>
#include <optional>
#include <string>
#include <vector>

#include "bench_data.h"
#include "bench_json.h"
#include "gdl/gdl.h"
#include "gdl/jit.h"
#include "gdl/profile.h"

namespace {

using gdl::ElementType;
using gdl::Status;
using gdl_bench::Json;
using gdl_bench::JsonObject;

// bf16 and f32 agree to about 3 significant digits in a gradient; the
// gradient's moments are compared as whole tensors (relative norm).
constexpr double kLossTolerance = 1e-3, kMomentTolerance = 5e-2;
// At step 1 Adam moves each weight by lr times the sign of its gradient
// plus the decay, so a gradient near zero may point either way in bf16: at
// least this share of the updates must be PyTorch's within 1% (which
// checks lr, the bias corrections and the decay, not only the sign).
constexpr double kMatchingUpdates = 0.95, kUpdateTolerance = 1e-2;

struct Options {
  std::string data, program, json, cache_dir;
  int steps = 50, warmup = 10, profile = 0;
};

struct Fail {
  std::string why;
};
void require(const Status& s, const std::string& what) {
  if (!s.ok()) throw Fail{what + ": " + s.message()};
}

std::vector<uint8_t> read_bytes(const std::filesystem::path& path) {
  std::optional<std::vector<uint8_t>> bytes = gdl_bench::read_bytes(path);
  if (!bytes) throw Fail{"cannot read " + path.string()};
  return std::move(*bytes);
}

// DIR/FILE, exactly `count` f32 values.
std::vector<double> read_floats(const std::filesystem::path& dir, const std::string& file, size_t count) {
  std::optional<std::vector<double>> values = gdl_bench::load_reference(dir, file, false, count);
  if (count == 0 || !values) throw Fail{(dir / file).string() + ": not a file of " + std::to_string(count) + " floats"};
  return std::move(*values);
}

// Per step, in microseconds: bind a batch, run (graph or eager), for `steps`
// steps after `warmup`, synchronized at both ends.
double time_steps(gdl::Session& s, const std::vector<std::vector<uint8_t>>& batches, const std::vector<int64_t>& shape,
                  bool eager, int steps, int warmup) {
  const auto step = [&](int i) {
    const std::vector<uint8_t>& b = batches[static_cast<size_t>(i) % batches.size()];
    require(s.bind("tokens", b.data(), b.size(), ElementType::kI32, shape), "bind tokens");
    require(eager ? s.run_eager() : s.run(), "run");
  };
  for (int i = 0; i < warmup; ++i) step(i);
  require(s.synchronize(), "synchronize");
  const auto start = std::chrono::steady_clock::now();
  for (int i = 0; i < steps; ++i) step(i);
  require(s.synchronize(), "synchronize");
  return std::chrono::duration<double, std::micro>(std::chrono::steady_clock::now() - start).count() / steps;
}

int run(const Options& opt) {
  const std::filesystem::path dir(opt.data);
  std::string error;
  const std::vector<uint8_t> manifest_bytes = read_bytes(dir / "manifest.json");
  const std::optional<Json> manifest =
      gdl_bench::parse_json(std::string(manifest_bytes.begin(), manifest_bytes.end()), error);
  if (!manifest) throw Fail{"manifest.json: " + error};
  const Json& m = *manifest;
  gdl::jit::CompileSettings settings;
  settings.cache_dir = opt.cache_dir;
  for (const Json::Member& c : m["consts"].members)  // sizes, and the compute dtype DT
    settings.consts[c.key] = c.value.kind == Json::Kind::kString ? c.value.text : std::to_string(c.value.as_int());
  const auto compile_start = std::chrono::steady_clock::now();
  gdl::Expected<gdl::Program> program = gdl::jit::compile(opt.program, settings);
  require(program.status(), "compile " + opt.program);
  const double compile_ms =
      std::chrono::duration<double, std::milli>(std::chrono::steady_clock::now() - compile_start).count();
  gdl::Expected<std::unique_ptr<gdl::Session>> created = gdl::Session::create(*program);
  require(created.status(), "session");
  gdl::Session& s = **created;

  const std::vector<int64_t> token_shape = {m["consts"]["B"].as_int(), m["consts"]["S"].as_int() + 1};
  std::vector<std::vector<uint8_t>> batches;
  for (const Json& t : m["tokens"].items) batches.push_back(read_bytes(dir / t.text));
  for (const char* table : {"rope_cos", "rope_sin"}) {
    const std::vector<uint8_t> bytes = read_bytes(dir / m[table].text);
    require(s.set_param(table, bytes.data(), bytes.size()), table);
  }
  const auto set_weights = [&] {
    require(s.reset_state(), "reset_state");
    for (const Json::Member& w : m["weights"].members) {
      const std::vector<uint8_t> bytes = read_bytes(dir / w.value["file"].text);
      require(s.set_state(w.key, bytes.data(), bytes.size()), "set_state " + w.key);
    }
    for (const Json::Member& sc : m["scalars"].members) require(s.set_scalar(sc.key, sc.value.number), sc.key);
  };

  // The check: one step from PyTorch's initial weights.
  set_weights();
  require(s.bind("tokens", batches[0].data(), batches[0].size(), ElementType::kI32, token_shape), "bind tokens");
  require(s.run(), "run");
  float loss = 0;
  require(s.read("loss", &loss, sizeof loss), "read loss");
  const double loss_error = std::fabs(loss - m["loss"].number) / std::fabs(m["loss"].number);
  bool ok = std::isfinite(loss) && loss_error <= kLossTolerance;
  std::printf("gdl %s check: loss %.6f (torch %.6f, relative error %.2e)\n", m["config"].text.c_str(), loss,
              m["loss"].number, loss_error);
  double worst_moment = 0, worst_agreement = 1;
  for (const Json::Member& w : m["weights"].members) {
    const Json& after = m["after"][w.key];
    const gdl::TensorInfo* info = program->find_state(w.key);
    if (!info) throw Fail{"the program has no state " + w.key};
    const size_t count = info->max_bytes / sizeof(float);
    const std::vector<double> before = read_floats(dir, w.value["file"].text, count);
    const auto state = [&](const std::string& name) {
      std::vector<float> out(count);
      require(s.read_state(name, out.data(), out.size() * sizeof(float)), "read_state " + name);
      return gdl::decode_elements(ElementType::kF32, out.data(), count);
    };
    const double m_error = gdl_bench::relative_error(state("m_" + w.key), read_floats(dir, after["m"].text, count));
    const double v_error = gdl_bench::relative_error(state("v_" + w.key), read_floats(dir, after["v"].text, count));
    const std::vector<double> got = state(w.key), want = read_floats(dir, after["w"].text, count);
    size_t matching = 0;
    for (size_t i = 0; i < count; ++i) {
      const double step_got = got[i] - before[i], step_want = want[i] - before[i];
      matching += std::fabs(step_got - step_want) <= kUpdateTolerance * std::fabs(step_want);
    }
    const double agreement = double(matching) / double(count);
    std::printf("  %-10s m error %.2e, v error %.2e, updates within 1%% of torch's %.4f\n", w.key.c_str(), m_error,
                v_error, agreement);
    worst_moment = std::max({worst_moment, m_error, v_error});
    worst_agreement = std::min(worst_agreement, agreement);
    ok = ok && std::isfinite(m_error) && std::isfinite(v_error) && m_error <= kMomentTolerance &&
         v_error <= kMomentTolerance && agreement >= kMatchingUpdates;
  }

  JsonObject base;
  base.str("config", m["config"].text)
      .str("tool", "gdl")
      .num("compile_ms", compile_ms)
      .num("nodes", double(program->node_count()))
      .num("arena_bytes", double(program->arena_bytes()))
      .num("loss_error", loss_error)
      .num("worst_moment_error", worst_moment)
      .num("worst_matching_updates", worst_agreement)
      .flag("checked", ok);
  std::vector<std::string> rows;
  if (!ok) {
    std::printf("gdl %s: the step disagrees with PyTorch's; not timed\n", m["config"].text.c_str());
    rows.push_back(JsonObject(base).str("mode", "graph").text());
  } else {
    for (bool eager : {false, true}) {
      set_weights();
      const double us = time_steps(s, batches, token_shape, eager, opt.steps, opt.warmup);
      std::printf("gdl %s %s: %.1f us/step\n", m["config"].text.c_str(), eager ? "eager" : "graph", us);
      rows.push_back(JsonObject(base).str("mode", eager ? "eager" : "graph").num("step_us", us).text());
    }
  }
  if (ok && opt.profile > 0) {
    gdl::Expected<std::vector<gdl::NodeTime>> nodes = gdl::profile_nodes(s, 5);
    require(nodes.status(), "profile_nodes");
    std::vector<size_t> order(nodes->size());
    double total = 0;
    for (size_t i = 0; i < order.size(); ++i) order[i] = i, total += (*nodes)[i].device_us;
    std::sort(order.begin(), order.end(), [&](size_t a, size_t b) { return (*nodes)[a].device_us > (*nodes)[b].device_us; });
    std::printf("gdl %s profile: %zu kernel nodes, %.1f us of device time in all; the slowest:\n",
                m["config"].text.c_str(), nodes->size(), total);
    for (size_t i = 0; i < order.size() && i < static_cast<size_t>(opt.profile); ++i)
      std::printf("  #%-4zu %9.1f us  %s\n", order[i], (*nodes)[order[i]].device_us, (*nodes)[order[i]].kernel.c_str());
  }
  std::ofstream out(opt.json);
  out << "[";
  for (size_t i = 0; i < rows.size(); ++i) out << (i ? ",\n " : "") << rows[i];
  out << "]\n";
  return ok ? 0 : 3;
}

}  // namespace

int main(int argc, char** argv) {
  Options opt;
  if (argc % 2 == 0) {
    std::fprintf(stderr, "gdl_train_bench: every flag takes a value\n");
    return 2;
  }
  for (int i = 1; i + 1 < argc; i += 2) {
    const std::string flag = argv[i], value = argv[i + 1];
    if (flag == "--data") opt.data = value;
    else if (flag == "--program") opt.program = value;
    else if (flag == "--json") opt.json = value;
    else if (flag == "--cache-dir") opt.cache_dir = value;
    else if (flag == "--steps") opt.steps = std::atoi(value.c_str());
    else if (flag == "--warmup") opt.warmup = std::atoi(value.c_str());
    else if (flag == "--profile") opt.profile = std::atoi(value.c_str());
    else {
      std::fprintf(stderr, "gdl_train_bench: unknown flag %s\n", flag.c_str());
      return 2;
    }
  }
  if (opt.data.empty() || opt.program.empty() || opt.json.empty() || opt.steps < 1 || opt.warmup < 0) {
    std::fprintf(stderr,
                 "usage: gdl_train_bench --data DIR --program FILE.gdl --json OUT [--steps N] [--warmup N] "
                 "[--cache-dir DIR] [--profile N]\n");
    return 2;
  }
  try {
    return run(opt);
  } catch (const Fail& f) {
    std::fprintf(stderr, "gdl_train_bench: %s\n", f.why.c_str());
    return 1;
  }
}
