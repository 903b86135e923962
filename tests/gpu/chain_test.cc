// The chain kernel (gdl::MatmulChain, stdlib-kernels/gdl_chain.cuh): runs of
// square matmul steps in one cooperative launch, each step's rows handed to
// the next through mailboxes, against the CPU reference on a poisoned arena,
// graph and eager runs, the row count crossing the chain's limit of 8 rows
// within one session (the chain's launch counters, which only grow and name
// the mailboxes' contents, and the steps' own kernels with their tickets
// must both stay right; the kernel for 8 rows shares row group 0's counter
// and mailboxes with the kernel in row groups), at K = 1024 the kernel in row groups
// for up to 64 rows (full and partial groups, groups without rows), under
// buckets and under node updates, and with chains switched off.
#include <string>
#include <vector>

#include "gpu_test_util.h"

using namespace gdl;
using namespace gdl::gpu_test;

namespace {

std::string layers(const std::string& t, int h, int l, const std::string& batch, const std::string& norm) {
  return "program chain;\n" + batch + "\nconst H = " + std::to_string(h) + ";\nconst L = " + std::to_string(l) +
         ";\nparam W : " + t + "[L, H, H];\nparam bias : " + t + "[L, H];\nparam g : " + t + "[L, H];\nparam beta : " + t +
         "[L, H];\ninput x : " + t + "[B, H];\noutput y : " + t + "[B, H];\nlet h = x;\nfor l in 0..L {\n  h = " + norm +
         ";\n}\ny = h;\n";
}

// Which kernel runs a chain at `rows` rows, the layout's (a bucket's capacity
// under buckets): 1 its kernel for up to 8 rows, 2 its kernel in row groups
// (for up to `group_rows`, 0 where it has none), 0 the steps' kernels.
int chain_kernel_for(int64_t rows, const std::vector<int64_t>& buckets, int64_t group_rows) {
  for (int64_t b : buckets)
    if (b >= rows) {
      rows = b;
      break;
    }
  return rows <= 8 ? 1 : rows <= group_rows ? 2 : 0;
}

// One session over `rows_sequence`: fresh inputs each time, two graph runs
// and an eager run, each against the CPU reference, and a chain kernel
// launched exactly when chain_kernel_for says so.
void check_rows(const Program& program, const std::string& what, const std::vector<int64_t>& rows_sequence,
                const SessionOptions& options, bool updates, const std::vector<int64_t>& buckets, int64_t group_rows) {
  std::mt19937_64 rng(seed_for(what));
  std::map<std::string, TensorData> params = random_bindings(program, {rows_sequence.front()}, rng);
  if (cpu_only) {
    CHECK(!reference(program, params).empty());
    return;
  }
  std::unique_ptr<Session> s = make_session(program, options);
  const SessionStats first = s->stats();
  INFO("refusals: " << (first.kernel_refusals.empty() ? "none" : first.kernel_refusals.front()));
  const bool chains = options.multi_step_kernels && first.kernel_refusals.empty();
  if (options.multi_step_kernels && !chains) MESSAGE("the chain kernel does not fit this device: " << first.kernel_refusals.front());
  bind_all(*s, params);
  for (int64_t rows : rows_sequence) {
    std::map<std::string, TensorData> tensors = random_bindings(program, {rows}, rng);
    for (const TensorInfo& p : program.params()) tensors[p.name] = params[p.name];
    bind_inputs(*s, tensors);
    const std::map<std::string, TensorData> want = reference(program, tensors);
    const std::string at = what + ", B = " + std::to_string(rows);
    const uint64_t before = s->stats().multi_step_launches;
    for (int r = 0; r < 2; ++r) CHECK(expect_match(run_and_read(*s, false), want, at + ", graph run " + std::to_string(r)));
    CHECK(expect_match(run_and_read(*s, true), want, at + ", eager run"));
    INFO(at);
    CHECK(s->stats().multi_step_launches - before == (chains && chain_kernel_for(rows, buckets, group_rows) > 0 ? 3u : 0u));
  }
  // Under node updates each change of the kernel rebuilds the graph; buckets never do.
  uint64_t crossings = 0;
  for (size_t i = 1; i < rows_sequence.size(); ++i)
    crossings += chain_kernel_for(rows_sequence[i], buckets, group_rows) !=
                 chain_kernel_for(rows_sequence[i - 1], buckets, group_rows);
  CHECK(s->stats().reinstantiations == (chains && updates ? crossings : 0u));
}

}  // namespace

TEST_CASE("chain: W2 layers in one launch match the CPU reference, rows crossing the chain's limit") {
  struct Case {
    std::string t;
    int h, l;
    std::string batch, layer;
    std::vector<int64_t> rows;  // the CPU reference of the 4096-wide layers is slow: fewer runs there
    int64_t group_rows;         // rows the chain's kernel in row groups serves (0: it has none)
  };
  const std::string w2 = "h + gelu(layernorm(h, g[l], beta[l], eps = 1e-5) @ W[l] + bias[l])";
  const std::vector<Case> cases = {
      {"f16", 2048, 3, "dim B in [1, 64] buckets(1, 8, 64);", w2, {1, 5, 8, 12, 3, 16, 8}, 0},
      {"bf16", 2048, 3, "dim B in [1, 64] buckets(1, 8, 64);", w2, {1, 5, 8, 12, 3}, 0},
      // K = 1024: 8 columns per block up to 8 rows, then 8 row groups of 64
      // columns per block (the bucket of 64), with and without a norm
      {"f16", 1024, 4, "dim B in [1, 64] buckets(1, 8, 64);", w2, {1, 7, 8, 40, 2, 64, 8}, 64},
      {"bf16", 1024, 3, "dim B in [1, 64] buckets(1, 8, 64);", w2, {64, 3, 33}, 64},
      // two row groups of 16 columns per block; 13 rows: a partial group
      {"bf16", 1024, 3, "dim B in [1, 16];", "tanh((h @ W[l]) * 0.02 + bias[l])", {8, 3, 16, 13, 1}, 16},
      // node updates on 8 row groups: 37 and 20 rows leave groups without rows
      {"f16", 1024, 3, "dim B in [1, 64];", w2, {37, 64, 5, 20}, 64},
      // node updates: one graph whose chain node comes and goes with the rows
      // (2 -> 5: the chain's node updated in place; 5 -> 12 -> 8: rebuilt)
      {"f16", 4096, 3, "dim B in [1, 16];", "h + rmsnorm(h, g[l]) @ W[l]", {2, 5, 12, 8}, 0},
      {"bf16", 4096, 3, "dim B in [1, 16];", w2, {8, 9, 1}, 0},
      // no norm: the chain stages a as it is
      {"f16", 2048, 3, "dim B in [1, 16];", "tanh((h @ W[l]) * 0.02 + bias[l])", {3, 7, 16, 1}, 0},
      // norms without weights above K = 1024: folded into the mma (the
      // column sums for layernorm, the scale alone for rmsnorm), the rows'
      // statistics from a third mma over the staged rows
      {"f16", 4096, 3, "dim B in [1, 16];", "h + gelu(layernorm(h, eps = 1e-5) @ W[l] + bias[l])", {1, 8, 6}, 0},
      {"bf16", 2048, 3, "dim B in [1, 16];", "h + rmsnorm(h) @ W[l]", {3, 8, 16}, 0},
      // folded and weighted norms in turn (two steps per layer): a step
      // stores its partial sums only for a next step with a weighted norm
      {"f16", 2048, 2, "dim B in [1, 16];",
       "h + gelu(layernorm(h, eps = 1e-5) @ W[l] + bias[l]);\n  h = h + rmsnorm(h, g[l]) @ W[l]", {1, 8, 5}, 0},
      {"bf16", 4096, 2, "dim B in [1, 16];",
       "h + rmsnorm(h) @ W[l];\n  h = h + gelu(layernorm(h, g[l], beta[l], eps = 1e-5) @ W[l] + bias[l])", {8, 3}, 0},
      // the residual is x, the step's a only in step 0 (the others load x)
      {"f16", 1024, 3, "dim B in [1, 64] buckets(1, 8, 64);", "x + gelu(layernorm(h, eps = 1e-5) @ W[l] + bias[l])",
       {5, 40}, 64},
  };
  for (const Case& c : cases) {
    const std::string text = layers(c.t, c.h, c.l, c.batch, c.layer);
    INFO(text);
    Program program = compile_text(text);
    // The steps' kernels (a layer of two statements is two steps); the chain replaces them.
    const size_t per_layer = c.layer.find("\n  h = ") == std::string::npos ? 1 : 2;
    CHECK(program.node_count() == per_layer * static_cast<size_t>(c.l));
    const std::string what = "chain " + c.t + " H=" + std::to_string(c.h) + " " + c.layer;
    // Every case is one chain: one chain kernel per run while chain_kernel_for says so.
    // Programs without buckets run under node updates (one graph for every
    // B; the default policy would give them power-of-two buckets).
    const bool updates = c.batch.find("buckets") == std::string::npos;
    SessionOptions on;
    if (updates) on.dim_policy = DimPolicyChoice::kUpdate;
    const std::vector<int64_t> buckets = updates ? std::vector<int64_t>{} : std::vector<int64_t>{1, 8, 64};
    check_rows(program, what, c.rows, on, updates, buckets, c.group_rows);
    SessionOptions off = on;
    off.multi_step_kernels = false;
    check_rows(program, what + " (chains off)", {c.rows.back()}, off, updates, buckets, c.group_rows);
  }
}

TEST_CASE("chain: kernels before and after a chain, and two chains in one program") {
  // Ordinary graph edges into and out of a chain's node (session_run.cc):
  // an elementwise step before the first chain, a softmax and a scale
  // between the two chains, a softmax after the second.
  const std::string text =
      "program around;\ndim B in [1, 16];\nconst H = 2048;\nparam W : f16[4, H, H];\nparam bias : f16[4, H];\n"
      "input x : f16[B, H];\noutput y : f16[B, H];\nlet h = x * 0.5 + 0.25;\n"
      "for l in 0..2 {\n  h = h + gelu(layernorm(h, eps = 1e-5) @ W[l] + bias[l]);\n}\nh = softmax(h) * 2048.0;\n"
      "for l in 2..4 {\n  h = h + gelu(layernorm(h, eps = 1e-5) @ W[l] + bias[l]);\n}\ny = softmax(h);\n";
  Program program = compile_text(text);
  CHECK(program.node_count() == 8u);  // x * 0.5 + 0.25, two layers, softmax, * 2048, two layers, softmax
  std::mt19937_64 rng(seed_for("chain around"));
  std::map<std::string, TensorData> params = random_bindings(program, {1}, rng);
  if (cpu_only) {
    CHECK(!reference(program, params).empty());
    return;
  }
  for (const bool overlap : {true, false}) {
    SessionOptions options;
    options.overlap_launches = overlap;
    std::unique_ptr<Session> s = make_session(program, options);
    bind_all(*s, params);
    for (int64_t rows : {1, 6, 11}) {
      std::map<std::string, TensorData> tensors = random_bindings(program, {rows}, rng);
      for (const TensorInfo& p : program.params()) tensors[p.name] = params[p.name];
      bind_inputs(*s, tensors);
      const std::map<std::string, TensorData> want = reference(program, tensors);
      const std::string at = std::string(overlap ? "overlap" : "ordinary edges") + ", B = " + std::to_string(rows);
      const uint64_t before = s->stats().multi_step_launches;
      CHECK(expect_match(run_and_read(*s, false), want, at + ", graph run"));
      CHECK(expect_match(run_and_read(*s, true), want, at + ", eager run"));
      INFO(at);
      // two chains, one graph run and one eager run
      if (s->stats().kernel_refusals.empty()) CHECK(s->stats().multi_step_launches - before == (rows <= 8 ? 4u : 0u));
    }
  }
}

TEST_CASE("chain: 200 replays in one session keep the launch counters and the results right") {
  struct Case {
    int h;
    std::string batch;
    int64_t rows;
  };
  // K = 2048 at 4 rows: one row group; K = 1024 at 45 rows (the default
  // power-of-two bucket of 64): eight row groups, each its counter.
  for (const Case& c : std::vector<Case>{{2048, "dim B in [1, 8];", 4}, {1024, "dim B in [1, 64];", 45}}) {
    const std::string text = layers("f16", c.h, 4, c.batch, "h + gelu(layernorm(h, g[l], beta[l]) @ W[l] + bias[l])");
    INFO(text);
    Program program = compile_text(text);
    std::mt19937_64 rng(seed_for("chain replays " + std::to_string(c.h)));
    std::map<std::string, TensorData> tensors = random_bindings(program, {c.rows}, rng);
    if (cpu_only) {
      CHECK(!reference(program, tensors).empty());
      continue;
    }
    std::unique_ptr<Session> s = make_session(program);
    bind_all(*s, tensors);
    const std::map<std::string, TensorData> want = reference(program, tensors);
    const std::map<std::string, TensorData> first = run_and_read(*s, false);
    CHECK(expect_match(first, want, "first run"));
    for (int r = 0; r < 200; ++r) GDL_REQUIRE_OK(s->run());
    const std::map<std::string, TensorData> last = read_outputs(*s);
    CHECK(expect_match(last, first, "run 201 against run 1"));
    CHECK(relative_error(last.at("y"), first.at("y")) == 0.0);  // the same kernel, the same order of sums: the same bits
    if (s->stats().kernel_refusals.empty()) CHECK(s->stats().multi_step_launches == 201u);
    // Node updates on the chain's node (the graph update costs) leave the graph computing the same.
    Expected<GraphUpdateCosts> costs = measure_graph_update_costs(*s, 3);
    REQUIRE(costs.ok());
    if (s->stats().kernel_refusals.empty()) CHECK(costs->nodes == 1u);
    CHECK(relative_error(run_and_read(*s, false).at("y"), first.at("y")) == 0.0);
  }
}
