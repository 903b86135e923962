// Chains of matmul steps (compiler/plan/chains.h): which runs of steps the
// planner chains and which it leaves alone, the plan's checks on them, the
// generated chain kernel (it must compile with NVRTC), and the artifact
// round trip. The chain kernel's results are checked on the GPU
// (tests/gpu/chain_test.cc).
#include <doctest/doctest.h>

#include <string>

#include "artifact.h"
#include "plan/chains.h"
#include "codegen/codegen.h"
#include "ir_builder.h"
#include "pipeline.h"
#include "plan.h"
#include "plan/check.h"
#include "plan/print.h"
#include "stand_in_module.h"

namespace gdl {
namespace {

using testing::graph_of;

// L residual layers of width H in dtype T, the W2 layer of the benchmark
// with a layernorm that has a weight and a bias; `batch` declares B.
std::string layers(const std::string& t, int h, int l, const std::string& batch = "dim B in [1, 64] buckets(1, 8, 64);") {
  return "program chain;\n" + batch + "\nconst H = " + std::to_string(h) + ";\nconst L = " + std::to_string(l) +
         ";\nparam W : " + t + "[L, H, H];\nparam bias : " + t + "[L, H];\nparam g : " + t + "[L, H];\nparam beta : " + t +
         "[L, H];\ninput x : " + t + "[B, H];\noutput y : " + t + "[B, H];\nlet h = x;\nfor l in 0..L {\n"
         "  h = h + gelu(layernorm(h, g[l], beta[l], eps = 1e-5) @ W[l] + bias[l]);\n}\ny = h;\n";
}

// The generated source compiles with NVRTC (no cache) and its PTX holds
// the kernel `entry`.
void require_compiles_with(const std::string& source, const std::string& entry) {
  CompileOptions options;
  options.cache_dir = "-";
  Expected<CompiledModule> module = compile_cuda(source, options);
  INFO(module.status().message());
  REQUIRE(module.ok());
  REQUIRE(module->units.size() == 1);
  CHECK(module->units[0].ptx.find(".entry " + entry + "(") != std::string::npos);
}

// The kernels of several steps (the chains'), in table order.
std::vector<const Kernel*> multi_step_kernels(const GeneratedCode& code) {
  std::vector<const Kernel*> out;
  for (const Kernel& k : code.kernels.kernels)
    if (k.first_step != k.last_step) out.push_back(&k);
  return out;
}

}  // namespace

TEST_CASE("chain: the W2 layers form one chain over every step, with its own exchange area in the scratch") {
  for (const std::string t : {"f16", "bf16"}) {
    INFO(t);
    plan::Plan p = plan_program(graph_of(layers(t, 2048, 4)));
    REQUIRE(plan::check_plan(p) == "");
    REQUIRE(p.steps.size() == 4);
    REQUIRE(p.chains.size() == 1);
    CHECK(p.chains[0].first == 0);
    CHECK(p.chains[0].last == 3);
    CHECK(p.chains[0].k == 2048);
    CHECK(p.chains[0].scratch_offset % plan::kAlignment == 0);
    // 8 counter lines of 128 bytes; no mailboxes above K = 1024 (a barrier
    // between the steps instead) but each block's partial statistics of its
    // rows: two step parities of 8 rows x 128 blocks, 8 bytes each.
    const uint64_t exchange_bytes = 8 * 128 + 2 * 8 * 128 * 8;
    CHECK(chain_exchange_bytes(2048, 0) == exchange_bytes);
    // At K = 1024, two mailboxes of 8 rows, each element 4 bytes there (two
    // per 8-byte word with a flag).
    CHECK(chain_exchange_bytes(1024, 0) == 8 * 128 + 2 * 8 * 1024 * 4);
    // Then the kernel's tensor maps, one of 128 bytes per step: last in the area.
    CHECK(chain_tensor_maps_at(p.chains[0], 0) == exchange_bytes);
    CHECK(chain_scratch_bytes(p.chains[0]) == exchange_bytes + 4 * 128);
    CHECK(p.chains[0].scratch_bytes == chain_scratch_bytes(p.chains[0]));
    CHECK(p.chains[0].scratch_offset + p.chains[0].scratch_bytes == p.arena_bytes + p.scratch_bytes);
    CHECK(p.chains[0].row_groups == 0);  // K = 2048: no row groups
    for (const plan::Step& st : p.steps)
      if (st.tickets_bytes > 0) CHECK(st.tickets_offset + st.tickets_bytes <= p.chains[0].scratch_offset);
    CHECK(plan::print_plan(p).find("chain: steps 0-3 as one persistent kernel while the rows are at most 8") !=
          std::string::npos);
    CHECK(plan::plan_to_dot(p).find("subgraph cluster_chain0 {") != std::string::npos);
    CHECK(plan::plan_to_dot(p).find(" s0; s1; s2; s3;\n") != std::string::npos);
  }
}

TEST_CASE("chain: steps the chain kernel cannot run stay out of every chain") {
  struct Case {
    const char* what;
    std::string text;
  };
  const std::vector<Case> cases = {
      {"f32 (the chain is f16 and bf16)", layers("f32", 2048, 4)},
      {"K not a multiple of 128", layers("f16", 2000, 4)},
      {"K below 1024: fewer than 128 blocks of 8 columns", layers("f16", 512, 4)},
      {"K above 4096", layers("f16", 4224, 2)},
      {"more than 8 rows in every run", layers("f16", 2048, 4, "dim B in [16, 64];")},
      {"one step only", layers("f16", 2048, 1)},
      {"b computed, not a param",
       "program c;\ninput x : f16[4, 256];\ninput w : f16[256, 256];\noutput y : f16[4, 256];\n"
       "y = (x @ w) @ w;\n"},
      {"a matmul that is not square",
       "program c;\ninput x : f16[4, 256];\nparam w1 : f16[256, 512];\nparam w2 : f16[512, 512];\n"
       "output y : f16[4, 512];\ny = (x @ w1) @ w2;\n"},
  };
  for (const Case& c : cases) {
    INFO(c.what << "\n" << c.text);
    plan::Plan p = plan_program(graph_of(c.text));
    REQUIRE(plan::check_plan(p) == "");
    CHECK(p.chains.empty());
  }
  plan::PlanOptions off;
  off.chain_matmuls = false;
  CHECK(plan_program(graph_of(layers("f16", 2048, 4)), off).chains.empty());
}

TEST_CASE("chain: a step that does not read the step before it ends the chain") {
  // Two runs of two layers: the third matmul reads x, not the second's result.
  const std::string text =
      "program c;\ndim B in [1, 8];\ninput x : f16[B, 2048];\nparam w : f16[4, 2048, 2048];\noutput y : f16[B, 2048];\n"
      "output z : f16[B, 2048];\ny = (x @ w[0]) @ w[1];\nz = (x @ w[2]) @ w[3];\n";
  plan::Plan p = plan_program(graph_of(text));
  REQUIRE(plan::check_plan(p) == "");
  REQUIRE(p.chains.size() == 2);
  CHECK(p.chains[0].last == p.chains[0].first + 1);
  CHECK(p.chains[1].first == p.chains[0].last + 1);
  CHECK(p.chains[1].last == p.chains[1].first + 1);
  CHECK(p.chains[0].scratch_offset != p.chains[1].scratch_offset);
}

TEST_CASE("chain: check_plan refuses chains that overlap, run backwards or share their scratch") {
  plan::Plan good = plan_program(graph_of(layers("f16", 4096, 2)));  // steps with tickets (H = 1024 splits in clusters)
  REQUIRE(good.chains.size() == 1);
  REQUIRE(good.steps[0].tickets_bytes > 0);
  {
    plan::Plan bad = good;
    bad.chains[0].last = bad.chains[0].first;
    CHECK(plan::check_plan(bad).find("not a run of at least two steps") != std::string::npos);
  }
  {
    plan::Plan bad = good;
    bad.chains[0].last = static_cast<int>(bad.steps.size());
    CHECK(plan::check_plan(bad).find("not a run of at least two steps") != std::string::npos);
  }
  {
    plan::Plan bad = good;
    bad.chains.push_back(bad.chains[0]);
    CHECK(plan::check_plan(bad).find("not a run of at least two steps") != std::string::npos);
  }
  {
    plan::Plan bad = good;
    bad.chains[0].scratch_offset = bad.steps[0].tickets_offset;
    CHECK(plan::check_plan(bad).find("share bytes with other scratch") != std::string::npos);
  }
  {
    plan::Plan bad = good;
    bad.chains[0].scratch_offset = bad.arena_bytes + bad.scratch_bytes;
    CHECK(plan::check_plan(bad).find("its scratch lies outside the scratch area") != std::string::npos);
  }
  {
    plan::Plan bad = good;
    bad.chains[0].scratch_bytes -= 128;  // one tensor map short
    CHECK(plan::check_plan(bad).find("is not the " + std::to_string(good.chains[0].scratch_bytes) +
                                     " its kernels use") != std::string::npos);
  }
  for (const int64_t groups : {1, 3, 9}) {
    plan::Plan bad = good;  // K = 4096: no row groups at all
    bad.chains[0].row_groups = groups;
    INFO(groups);
    CHECK(plan::check_plan(bad).find("row groups at K = 4096 are not a launch its kernel can run") != std::string::npos);
  }
}

TEST_CASE("chain: at K = 1024 a second kernel serves up to 64 rows in row groups of 8") {
  CHECK(chain_row_groups(1024, 64) == 8);
  CHECK(chain_row_groups(1024, 1000) == 8);  // the rest run the steps' kernels
  CHECK(chain_row_groups(1024, 16) == 2);
  CHECK(chain_row_groups(1024, 9) == 2);
  CHECK(chain_row_groups(1024, 8) == 0);  // the first kernel serves them all
  CHECK(chain_row_groups(2048, 64) == 0);  // measured at K = 1024 only
  CHECK(chain::group_cols_for(1024, 8) == 64);
  CHECK(chain::group_cols_for(1024, 4) == 32);
  CHECK(chain::group_cols_for(1024, 2) == 16);
  for (const int64_t groups : {2, 4, 8}) {
    const int64_t cols = chain::group_cols_for(1024, groups);
    CHECK(1024 / cols * groups == chain::kBlocks);
    CHECK(chain::shared_bytes(1024, cols) <= 227u * 1024u);
  }

  struct Case {
    std::string batch;
    int64_t groups;
  };
  for (const Case& c : std::vector<Case>{{"dim B in [1, 64] buckets(1, 8, 64);", 8}, {"dim B in [1, 16];", 2},
                                          {"dim B in [1, 8];", 0}}) {
    INFO(c.batch);
    plan::Plan p = plan_program(graph_of(layers("f16", 1024, 3, c.batch)));
    REQUIRE(plan::check_plan(p) == "");
    REQUIRE(p.chains.size() == 1);
    CHECK(p.chains[0].row_groups == c.groups);
    const GeneratedCode code = generate_cuda(p);
    const std::vector<const Kernel*> chains = multi_step_kernels(code);
    REQUIRE(chains.size() == (c.groups > 0 ? 2u : 1u));
    CHECK(chains[0]->launch.grid_y == 1u);
    CHECK(chains[0]->max_rows == 8);
    if (c.groups == 0) continue;
    CHECK(plan::print_plan(p).find("and one in " + std::to_string(c.groups) + " row groups of 8 up to " +
                                   std::to_string(8 * c.groups)) != std::string::npos);
    const Kernel& k = *chains[1];
    const int64_t cols = chain::group_cols_for(1024, c.groups);
    CHECK(k.symbol == "gdl_chain0_rows" + std::to_string(8 * c.groups));
    CHECK(k.first_step == 0);
    CHECK(k.last_step == 2);
    CHECK(k.cooperative);
    CHECK(k.launch.grid_y == static_cast<uint32_t>(c.groups));
    CHECK(k.launch.work == Shape{Dim::constant(1024 / cols)});
    CHECK(k.launch.shared_bytes == chain::shared_bytes(1024, cols));
    CHECK(!kernel_applies(k, {8}));
    CHECK(kernel_applies(k, {9}));
    CHECK(kernel_applies(k, {8 * c.groups}));
    CHECK(!kernel_applies(k, {8 * c.groups + 1}));
    CHECK(kernel_applies(*chains[0], {8}));
    CHECK(!kernel_applies(*chains[0], {9}));
    // Every step of the chain prefers its kernels, in the same order, before its own.
    for (int s = 0; s <= 2; ++s) {
      const std::vector<int>& choices = code.kernels.step_choices[static_cast<size_t>(s)];
      REQUIRE(choices.size() >= 3);
      CHECK(&code.kernels.kernels[static_cast<size_t>(choices[0])] == chains[0]);
      CHECK(&code.kernels.kernels[static_cast<size_t>(choices[1])] == chains[1]);
      CHECK(code.kernels.kernels[static_cast<size_t>(choices.back())].first_step == s);
    }
    CHECK(code.source.find("gdl::MatmulChain<__half, 1024, " + std::to_string(cols) + "> chain(") != std::string::npos);
  }
}

TEST_CASE("chain: a block owns 8, 16 or 32 columns, so that K = 1024, 2048 and 4096 each run 128 blocks") {
  CHECK(chain::cols_for(1024) == 8);
  CHECK(chain::cols_for(2048) == 16);
  CHECK(chain::cols_for(4096) == 32);
  CHECK(chain::cols_for(1536) == 16);  // 96 blocks
  CHECK(chain::cols_for(3072) == 32);  // 96 blocks
  for (int64_t k = kChainMinK; k <= kChainMaxK; k += chain::kSlotRows) {
    INFO("K = " << k);
    CHECK(k / chain::cols_for(k) <= chain::kBlocks);
    CHECK(k % chain::cols_for(k) == 0);
    CHECK(chain::shared_bytes(k, chain::cols_for(k)) <= 227u * 1024u);
  }
}

TEST_CASE("chain: the chain kernel is generated after the steps' kernels, each step in order, and compiles") {
  for (const int h : {4096, 1024}) {
  INFO("H = " << h);
  plan::Plan p = plan_program(graph_of(layers(h == 4096 ? "bf16" : "f16", h, 3, "dim B in [1, 16];")));
  REQUIRE(p.chains.size() == 1);
  const GeneratedCode code = generate_cuda(p);
  const std::vector<const Kernel*> chains = multi_step_kernels(code);
  REQUIRE(chains.size() == (h == 1024 ? 2u : 1u));  // K = 1024: and one in two row groups for B up to 16
  const Kernel& k = *chains[0];
  CHECK(k.symbol == "gdl_chain0");
  CHECK(k.first_step == 0);
  CHECK(k.last_step == 2);
  CHECK(k.launch.work == Shape{Dim::constant(128)});
  CHECK(k.launch.block == chain::kLaunchThreads);
  CHECK(k.launch.shared_bytes == chain::shared_bytes(h, chain::cols_for(h)));
  CHECK(k.launch.shared_bytes <= 227u * 1024u);
  CHECK(kernel_applies(k, {8}));
  CHECK(!kernel_applies(k, {9}));
  // One tensor map per step, over its [H, H] weight, in the chain's scratch.
  REQUIRE(k.tensor_maps.size() == 3);
  for (const TensorMap& m : k.tensor_maps) {
    CHECK(m.columns == static_cast<uint64_t>(h));
    CHECK(m.rows == static_cast<uint64_t>(h));
    CHECK(m.box_columns == static_cast<uint32_t>(chain::cols_for(h)));
    CHECK(m.box_rows == static_cast<uint32_t>(chain::kSlotRows));
    CHECK(m.scratch_offset >= p.chains[0].scratch_offset);
    CHECK(m.scratch_offset + kTensorMapBytes <= p.chains[0].scratch_offset + p.chains[0].scratch_bytes);
  }
  const size_t kernel = code.source.find("void __launch_bounds__(" + std::to_string(chain::kLaunchThreads) + ", 1) gdl_chain0(");
  REQUIRE(kernel != std::string::npos);
  for (const Kernel& info : code.kernels.kernels)
    if (info.first_step == info.last_step) CHECK(code.source.find(" " + info.symbol + "(") < kernel);
  // The producer warp streams the weights and leaves before the wait
  // (params only), the steps run in order after it.
  const size_t start = code.source.find("if (chain.produce()) return;", kernel),
               wait = code.source.find("wait_for_producers", kernel);
  size_t at = wait;
  CHECK(start < wait);
  for (int s = 0; s < 3; ++s) {
    const size_t call = code.source.find("chain.step(" + std::to_string(s) + ", ", kernel);
    INFO("step " << s);
    CHECK(call != std::string::npos);
    CHECK(call > at);
    at = call;
  }
  require_compiles_with(code.source, "gdl_chain0");
  }
  // The kernel in row groups (K = 1024, up to 64 rows) compiles too.
  const GeneratedCode grouped = generate_cuda(plan_program(graph_of(layers("f16", 1024, 2))));
  REQUIRE(multi_step_kernels(grouped).size() == 2);
  require_compiles_with(grouped.source, "gdl_chain0_rows64");
}

// Occurrences of `what` in source[from, to).
size_t count_in(const std::string& source, const std::string& what, size_t from, size_t to) {
  size_t n = 0;
  for (size_t at = source.find(what, from); at < to; at = source.find(what, at + what.size())) ++n;
  return n;
}

TEST_CASE("chain: a step stores its rows' partial statistics only where the next step's norm reads them") {
  // Above K = 1024 a norm without weight or bias is folded into the mma,
  // which sums the rows itself; one with a weight or a bias reads the sums
  // every block stored in the step before (gdl_chain.cuh, publish_stats).
  const std::string text =
      "program mixed;\ndim B in [1, 8];\nconst H = 2048;\nparam W : f16[4, H, H];\nparam g : f16[H];\n"
      "input x : f16[B, H];\noutput y : f16[B, H];\n"
      "let h = x + layernorm(x, eps = 1e-5) @ W[0];\n"  // step 0: folded
      "let h1 = h + rmsnorm(h, g) @ W[1];\n"           // step 1: weighted, reads step 0's sums
      "let h2 = h1 + rmsnorm(h1) @ W[2];\n"            // step 2: folded
      "y = h2 + layernorm(h2, eps = 1e-5) @ W[3];\n";  // step 3: folded
  plan::Plan p = plan_program(graph_of(text));
  REQUIRE(p.chains.size() == 1);
  REQUIRE(p.chains[0].last - p.chains[0].first == 3);
  const GeneratedCode code = generate_cuda(p);
  const std::vector<std::string> publish = {"true", "false", "false", "false"};
  for (int s = 0; s < 4; ++s) {
    INFO("step " << s);
    const size_t call = code.source.find("chain.step(" + std::to_string(s) + ", ");
    REQUIRE(call != std::string::npos);
    const size_t end = code.source.find(");", call);
    const std::string args = code.source.substr(call, end - call);
    CHECK(args.substr(args.rfind(", ") + 2) == publish[static_cast<size_t>(s)]);
  }
}

TEST_CASE("chain: a step's epilogue takes its residual from the rows the chain staged, only when it reads a") {
  // W2: every step adds its own a. With the input x as every step's
  // residual, only step 0 reads its a; steps 1 and 2 load x.
  const std::string w2 = layers("f16", 1024, 3, "dim B in [1, 16];");
  std::string from_x = w2;
  const std::string layer = "h = h + gelu(";
  from_x.replace(from_x.find(layer), layer.size(), "h = x + gelu(");
  for (const auto& variant : {std::pair{w2, 3u}, std::pair{from_x, 1u}}) {
    const std::string& text = variant.first;
    const unsigned staged = variant.second;
    INFO(text);
    const GeneratedCode code = generate_cuda(plan_program(graph_of(text)));
    REQUIRE(multi_step_kernels(code).size() == 2);
    const std::string bounds = "void __launch_bounds__(" + std::to_string(chain::kLaunchThreads) + ", 1) ";
    const size_t first = code.source.find(bounds + "gdl_chain0(");
    const size_t grouped = code.source.find(bounds + "gdl_chain0_rows16(");
    REQUIRE(first != std::string::npos);
    REQUIRE(grouped != std::string::npos);
    CHECK(count_in(code.source, "a_staged", 0, first) == 0);  // the steps' own kernels read a from memory
    CHECK(count_in(code.source, "(a_staged, ", first, grouped) == staged);
    CHECK(count_in(code.source, "(a_staged, ", grouped, code.source.size()) == staged);
    CHECK(count_in(code.source, "[i])", first, grouped) == 3 - staged);  // x loaded where it is not the step's a
  }
}

TEST_CASE("chain: the artifact keeps the chains' kernels and refuses tensor maps outside the scratch or the params") {
  plan::Plan p = plan_program(graph_of(layers("f16", 1024, 2)));  // two kernels: up to 8 rows, up to 64
  REQUIRE(p.chains.size() == 1);
  REQUIRE(p.chains[0].row_groups == 8);
  // Eight groups' counters, then each group's two mailboxes of 8 rows.
  CHECK(chain_exchange_bytes(1024, 8) == 8 * 128 + 8 * 2 * 8 * 1024 * 4);
  // Then the tensor maps of both kernels, two steps each.
  CHECK(chain_tensor_maps_at(p.chains[0], 1) == chain_tensor_maps_at(p.chains[0], 0) + 2 * 128);
  CHECK(p.chains[0].scratch_offset + chain_exchange_bytes(1024, 8) + 4 * 128 == p.arena_bytes + p.scratch_bytes);
  Artifact a;
  a.plan = p;
  GeneratedCode code = generate_cuda(p);
  a.kernels = code.kernels;
  a.module = stand_in_module(a.kernels);
  Expected<Artifact> back = deserialize_artifact(serialize_artifact(a));
  REQUIRE_MESSAGE(back.ok(), back.status().message());
  REQUIRE(back->plan.chains.size() == 1);
  CHECK(back->plan.chains[0].scratch_offset == p.chains[0].scratch_offset);
  CHECK(back->plan.chains[0].scratch_bytes == p.chains[0].scratch_bytes);
  CHECK(back->plan.chains[0].row_groups == 8);
  const std::vector<const Kernel*> chains = multi_step_kernels(code);
  REQUIRE(chains.size() == 2);
  for (size_t i = 0; i < 2; ++i) {
    // Each kernel maps the steps' weights, the b of each matmul in params,
    // from its own place in the chain's scratch.
    const Kernel& k = *chains[i];
    REQUIRE(k.tensor_maps.size() == 2);
    CHECK(k.tensor_maps[0].params_offset != k.tensor_maps[1].params_offset);
    for (size_t s = 0; s < 2; ++s) {
      const TensorMap& m = k.tensor_maps[s];
      CHECK(m.params_offset + 1024 * 1024 * 2 <= p.params_bytes);
      CHECK(m.params_offset == chains[0]->tensor_maps[s].params_offset);
      CHECK(m.scratch_offset == p.chains[0].scratch_offset + chain_tensor_maps_at(p.chains[0], static_cast<int64_t>(i)) + s * 128);
    }
  }
  const size_t last = a.kernels.kernels.size() - 1;  // the grouped kernel
  REQUIRE(a.kernels.kernels[last].symbol == "gdl_chain0_rows64");
  const auto refused = [](const Artifact& x) {
    Expected<Artifact> r = deserialize_artifact(serialize_artifact(x));
    return r.ok() ? std::string() : r.status().message();
  };
  Artifact moved = a;
  moved.kernels.kernels[last].tensor_maps[0].scratch_offset = moved.kernels.kernels[last - 1].tensor_maps[0].scratch_offset;
  CHECK(refused(moved).find("has two tensor maps in the same bytes") != std::string::npos);
  Artifact beyond = a;
  beyond.kernels.kernels[last].tensor_maps[1].params_offset = p.params_bytes - 1024 * 1024;  // half of it past the end
  CHECK(refused(beyond).find("maps a tensor outside the params region") != std::string::npos);
  Artifact everywhere = a;  // a cooperative kernel as some step's last choice: not every device runs it
  everywhere.kernels.step_choices[0].resize(2);  // the chain's two kernels, without the step's own
  CHECK(refused(everywhere).find("does not run it at every binding on every device") != std::string::npos);
}

}  // namespace gdl
