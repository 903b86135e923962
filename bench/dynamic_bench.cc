// gdl_dynamic_bench: what run-time dims cost, on the example programs
// (examples/*.gdl), as markdown tables for docs/dynamic.md.
//
//   gdl_dynamic_bench [--examples DIR] [--runs N]
//
// 1. Padding waste (arithmetic, no GPU needed): for every run-time dim of
//    every example, the share of computed rows that are padding when each
//    value in [lo, hi] is equally likely, for the program's buckets, for
//    the default powers of two and for a single bucket at hi.
// 2. With a GPU, on mlp.gdl (B in [1, 64] buckets(1, 8, 64)), every
//    bucket's graph built at Session::create:
//    a. bucket switch: N runs of (bind x + run + synchronize) with B
//       alternating 5, 6 (bucket 8), 40, 41 (bucket 64), and 5, 40
//       (switching every run); medians of the host time of run() and of
//       the whole step. Switch cost = switching - mean of the two stays.
//    b. update policy, B alternating 5, 40: the node updates each run
//       needs and their host time per node (SessionStats).
//    c. padding waste measured: N runs with B uniform in [1, 64] under
//       buckets; rows computed against rows valid (SessionStats), beside
//       the arithmetic of step 1.
// 3. With a GPU, on every example: Session::measure_graph_update_costs,
//    the host time of cudaGraphExecKernelNodeSetParams per node, of
//    cudaGraphExecUpdate and of instantiating the same graph again.
// Without a GPU the measured part is skipped, said so, and the exit code is 0.
#include "command_line.h"

#include <algorithm>
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <filesystem>
#include <map>
#include <memory>
#include <random>
#include <string>
#include <vector>

#include "passes/padding.h"  // default_buckets: the powers of two that the compiler gives a dim without buckets
#include "gdl/gdl.h"
#include "gdl/jit.h"
#include "gdl/profile.h"
#include "gdl/testing.h"

namespace {

using gdl::ElementType;
using gdl::Status;
using Clock = std::chrono::steady_clock;

double us_since(Clock::time_point t) { return std::chrono::duration<double, std::micro>(Clock::now() - t).count(); }

double median(std::vector<double> v) {
  if (v.empty()) return 0;
  std::sort(v.begin(), v.end());
  return v[v.size() / 2];
}

std::string buckets_text(const std::vector<int64_t>& b) {
  std::string out;
  for (size_t i = 0; i < b.size(); ++i) out += (i ? ", " : "") + std::to_string(b[i]);
  return out;
}

// Padding share over v uniform in [lo, hi] for buckets `b`: the compiler's
// own arithmetic (buckets.h), so the table and the stats agree.
double uniform_waste(int64_t lo, int64_t hi, const std::vector<int64_t>& b) {
  gdl::DimInfo d;
  d.lo = lo;
  d.hi = hi;
  d.buckets = b;
  return gdl::uniform_padding_waste(d).waste();
}

gdl::TensorData random_tensor(const gdl::TensorInfo& info, const std::vector<int64_t>& dims, std::mt19937_64& rng) {
  gdl::TensorData t;
  t.dtype = info.dtype;
  size_t count = 1;
  for (const gdl::AxisInfo& a : info.shape) {
    t.shape.push_back(a.is_runtime() ? dims[static_cast<size_t>(a.dim)] : a.extent);
    count *= static_cast<size_t>(t.shape.back());
  }
  std::vector<double> values(count);
  std::uniform_real_distribution<double> u(-0.05, 0.05);
  for (double& v : values) v = info.dtype == ElementType::kI32 ? 1 + static_cast<double>(rng() % 4096) : u(rng);
  t.bytes = gdl::encode_elements(t.dtype, values);
  return t;
}

struct Loaded {
  std::string name;
  gdl::Program program;
};

Status bind_inputs(gdl::Session& s, const std::vector<int64_t>& dims, std::mt19937_64& rng) {
  for (const gdl::TensorInfo& in : s.program().inputs()) {
    gdl::TensorData t = random_tensor(in, dims, rng);
    if (Status st = s.bind(in.name, t.bytes.data(), t.bytes.size(), t.dtype, t.shape); !st.ok()) return st;
  }
  return Status::Ok();
}

Status set_params(gdl::Session& s, std::mt19937_64& rng) {
  for (const gdl::TensorInfo& p : s.program().params()) {
    gdl::TensorData t = random_tensor(p, {}, rng);
    if (Status st = s.set_param(p.name, t.bytes.data(), t.bytes.size()); !st.ok()) return st;
  }
  return Status::Ok();
}

std::vector<int64_t> upper(const gdl::Program& p) {
  std::vector<int64_t> d;
  for (const gdl::RuntimeDimInfo& r : p.dims()) d.push_back(r.hi);
  return d;
}

}  // namespace

int main(int argc, char** argv) {
  std::string examples;
  if (const char* env = std::getenv("GDL_SOURCE_DIR"); env && *env) examples = std::string(env) + "/examples";
  else examples = std::string(GDL_SOURCE_DIR) + "/examples";
  int runs = 200;
  CLI::App app("gdl_dynamic_bench: what run-time dims cost (buckets, node updates, graph updates, padding) on the "
               "example programs (docs/dynamic.md)",
               "gdl_dynamic_bench");
  gdl::tools::add_standard_flags(app, "gdl_dynamic_bench");
  app.add_option("--examples", examples, "the .gdl programs")->default_val(examples)->type_name("DIR");
  app.add_option("--runs", runs, "timed runs per figure")
      ->check(gdl::tools::strict_number<int>("a count of at least 10", 10))
      ->default_val(runs)
      ->type_name("N");
  gdl::tools::CommandLineOutcome outcome = gdl::tools::parse_command_line(app, argc, argv, 2);
  if (!outcome.go_on) return gdl::tools::report_command_line("gdl_dynamic_bench", outcome);

  std::vector<Loaded> programs;
  std::vector<std::filesystem::path> files;
  for (const auto& entry : std::filesystem::directory_iterator(examples))
    if (entry.path().extension() == ".gdl") files.push_back(entry.path());
  std::sort(files.begin(), files.end());
  for (const auto& f : files) {
    gdl::Expected<gdl::Program> p = gdl::jit::compile(f.string());
    if (!p) {
      std::fprintf(stderr, "error: %s: %s\n", f.string().c_str(), p.status().ToString().c_str());
      return 2;
    }
    programs.push_back({f.stem().string(), std::move(p).value()});
  }

  // 1. Padding waste, arithmetic.
  std::printf("## Padding waste of buckets, uniform batch over [lo, hi] (arithmetic)\n\n");
  std::printf("| program | dim | range | buckets | padding waste | powers of two | one bucket at hi |\n");
  std::printf("|---|---|---|---|---|---|---|\n");
  for (const Loaded& l : programs)
    for (const gdl::RuntimeDimInfo& d : l.program.dims())
      std::printf("| %s | %s | [%lld, %lld] | %s | %.1f%% | %.1f%% | %.1f%% |\n", l.name.c_str(), d.name.c_str(),
                  static_cast<long long>(d.lo), static_cast<long long>(d.hi), buckets_text(d.buckets).c_str(),
                  100 * uniform_waste(d.lo, d.hi, d.buckets),
                  100 * uniform_waste(d.lo, d.hi, gdl::default_buckets(d.lo, d.hi)),
                  100 * uniform_waste(d.lo, d.hi, {d.hi}));
  std::printf("\n");

  // The GPU part.
  const Loaded* mlp = nullptr;
  for (const Loaded& l : programs)
    if (l.name == "mlp") mlp = &l;
  gdl::Expected<std::unique_ptr<gdl::Session>> probe = gdl::Session::create(programs.front().program);
  if (!probe && probe.status().code() == gdl::StatusCode::kUnavailable) {
    std::printf("no GPU here (%s): the measured tables are skipped\n", probe.status().message().c_str());
    return 0;
  }
  if (!probe) {
    std::fprintf(stderr, "error: Session::create: %s\n", probe.status().ToString().c_str());
    return 2;
  }
  probe->reset();
  std::mt19937_64 rng(2024);

  if (mlp && mlp->program.dims().size() == 1) {
    // 2a. Bucket switch.
    gdl::SessionOptions options;
    options.build_buckets_at_create = true;
    gdl::Expected<std::unique_ptr<gdl::Session>> created = gdl::Session::create(mlp->program, options);
    if (!created) {
      std::fprintf(stderr, "error: Session::create: %s\n", created.status().ToString().c_str());
      return 2;
    }
    gdl::Session& s = **created;
    GDL_EXIT_ON_ERROR(set_params(s, rng), 2);
    struct Pattern {
      const char* what;
      int64_t a, b;
    };
    const Pattern patterns[] = {{"stay in bucket 8 (B = 5, 6)", 5, 6},
                                {"stay in bucket 64 (B = 40, 41)", 40, 41},
                                {"switch 8 <-> 64 every run (B = 5, 40)", 5, 40}};
    std::printf("## Bucket switch (mlp, every bucket's graph built at Session::create, %d runs each)\n\n", runs);
    std::printf("| pattern | run() host submit | bind + run + sync | node updates | valid-block writes |\n|---|---|---|---|---|\n");
    double submit[3] = {}, step[3] = {};
    for (int k = 0; k < 3; ++k) {
      const Pattern& p = patterns[k];
      for (int w = 0; w < 10; ++w) {
        GDL_EXIT_ON_ERROR(bind_inputs(s, {w % 2 ? p.b : p.a}, rng), 2);
        GDL_EXIT_ON_ERROR(s.run(), 2);
      }
      GDL_EXIT_ON_ERROR(s.synchronize(), 2);
      gdl::SessionStats before = s.stats();
      std::vector<double> submits, steps;
      for (int i = 0; i < runs; ++i) {
        GDL_EXIT_ON_ERROR(bind_inputs(s, {i % 2 ? p.b : p.a}, rng), 2);
        Clock::time_point t = Clock::now();
        GDL_EXIT_ON_ERROR(s.run(), 2);
        submits.push_back(s.stats().last_submit_us);
        GDL_EXIT_ON_ERROR(s.synchronize(), 2);
        steps.push_back(us_since(t));
      }
      gdl::SessionStats after = s.stats();
      submit[k] = median(submits);
      step[k] = median(steps);
      std::printf("| %s | %.2f us | %.1f us | %llu | %llu |\n", p.what, submit[k], step[k],
                  static_cast<unsigned long long>(after.node_updates - before.node_updates),
                  static_cast<unsigned long long>(after.valid_block_writes - before.valid_block_writes));
    }
    std::printf("\nswitch cost: %.2f us host submit, %.1f us run to completion (switching minus the mean of the two stays)\n\n",
                submit[2] - (submit[0] + submit[1]) / 2, step[2] - (step[0] + step[1]) / 2);

    // 2b. The update policy.
    gdl::SessionOptions update_options;
    update_options.dim_policy = gdl::DimPolicyChoice::kUpdate;
    gdl::Expected<std::unique_ptr<gdl::Session>> updated = gdl::Session::create(mlp->program, update_options);
    if (!updated) {
      std::fprintf(stderr, "error: Session::create: %s\n", updated.status().ToString().c_str());
      return 2;
    }
    gdl::Session& u = **updated;
    for (int w = 0; w < 10; ++w) {
      GDL_EXIT_ON_ERROR(bind_inputs(u, {w % 2 ? 40 : 5}, rng), 2);
      GDL_EXIT_ON_ERROR(u.run(), 2);
    }
    GDL_EXIT_ON_ERROR(u.synchronize(), 2);
    gdl::SessionStats before = u.stats();
    std::vector<double> submits, steps;
    for (int i = 0; i < runs; ++i) {
      GDL_EXIT_ON_ERROR(bind_inputs(u, {i % 2 ? 40 : 5}, rng), 2);
      Clock::time_point t = Clock::now();
      GDL_EXIT_ON_ERROR(u.run(), 2);
      submits.push_back(u.stats().last_submit_us);
      GDL_EXIT_ON_ERROR(u.synchronize(), 2);
      steps.push_back(us_since(t));
    }
    gdl::SessionStats after = u.stats();
    uint64_t updates = after.node_updates - before.node_updates;
    double update_us = after.node_update_us - before.node_update_us;
    std::printf("## Update policy (mlp, one graph, B alternating 5, 40, %d runs)\n\n", runs);
    std::printf("| nodes | node updates per run | host time per node update | run() host submit | bind + run + sync | re-instantiations |\n");
    std::printf("|---|---|---|---|---|---|\n");
    std::printf("| %zu | %.1f | %.2f us | %.2f us | %.1f us | %llu |\n\n", mlp->program.node_count(),
                static_cast<double>(updates) / runs, updates ? update_us / static_cast<double>(updates) : 0.0,
                median(submits), median(steps), static_cast<unsigned long long>(after.reinstantiations));

    // 2c. Padding measured under buckets, uniform B.
    std::uniform_int_distribution<int64_t> batch(mlp->program.dims()[0].lo, mlp->program.dims()[0].hi);
    gdl::SessionStats pad_before = s.stats();
    for (int i = 0; i < runs; ++i) {
      GDL_EXIT_ON_ERROR(bind_inputs(s, {batch(rng)}, rng), 2);
      GDL_EXIT_ON_ERROR(s.run(), 2);
    }
    GDL_EXIT_ON_ERROR(s.synchronize(), 2);
    gdl::SessionStats pad_after = s.stats();
    double computed = static_cast<double>(pad_after.dims[0].rows_computed - pad_before.dims[0].rows_computed);
    double valid = static_cast<double>(pad_after.dims[0].rows_valid - pad_before.dims[0].rows_valid);
    const gdl::RuntimeDimInfo& d = mlp->program.dims()[0];
    std::printf("padding waste measured (mlp, %d runs, B uniform in [%lld, %lld], buckets %s): %.1f%% of computed rows "
                "(arithmetic: %.1f%%)\n\n",
                runs, static_cast<long long>(d.lo), static_cast<long long>(d.hi), buckets_text(d.buckets).c_str(),
                computed > 0 ? 100 * (1 - valid / computed) : 0.0, 100 * uniform_waste(d.lo, d.hi, d.buckets));
    std::printf("mlp session stats after the bucket runs:\n%s\n", gdl::format_stats(s.stats()).c_str());
  }

  // 3. What changing an instantiated graph costs, per example.
  std::printf("## Changing an instantiated graph (host time, %d repeats)\n\n", std::min(runs, 100));
  std::printf("| program | nodes | SetParams per node | all nodes by SetParams | cudaGraphExecUpdate | re-instantiate |\n");
  std::printf("|---|---|---|---|---|---|\n");
  for (const Loaded& l : programs) {
    gdl::Expected<std::unique_ptr<gdl::Session>> created = gdl::Session::create(l.program);
    if (!created) {
      std::fprintf(stderr, "error: Session::create(%s): %s\n", l.name.c_str(), created.status().ToString().c_str());
      return 2;
    }
    gdl::Session& s = **created;
    GDL_EXIT_ON_ERROR(set_params(s, rng), 2);
    GDL_EXIT_ON_ERROR(bind_inputs(s, upper(l.program), rng), 2);
    GDL_EXIT_ON_ERROR(s.run(), 2);
    gdl::Expected<gdl::GraphUpdateCosts> c = gdl::measure_graph_update_costs(s, std::min(runs, 100));
    if (!c) {
      std::fprintf(stderr, "error: %s: %s\n", l.name.c_str(), c.status().ToString().c_str());
      return 2;
    }
    std::printf("| %s | %zu | %.2f us | %.1f us | %.1f us | %.1f us |\n", l.name.c_str(), c->nodes, c->set_params_us_per_node,
                c->set_params_us_per_node * static_cast<double>(c->nodes), c->exec_update_us, c->reinstantiate_us);
  }
  return 0;
}
