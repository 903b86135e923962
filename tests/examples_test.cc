// Every example through the whole CPU-side pipeline: checked IR, a plan the
// plan checker proves sound, the planned-offset interpreter equal to the plain
// interpreter bit for bit on random inputs at several values of the run-time
// dims, and an artifact (NVRTC included) that survives a round trip.
#include <doctest/doctest.h>

#include <algorithm>
#include <filesystem>
#include <random>

#include "artifact.h"
#include "pipeline.h"
#include "plan.h"
#include "frontend/source_loader.h"
#include "passes/ir_print.h"
#include "plan/check.h"
#include "plan/print.h"
#include "plan/run_planned.h"

namespace fs = std::filesystem;

namespace {

std::vector<fs::path> example_files() {
  std::vector<fs::path> out;
  for (const auto& e : fs::directory_iterator(fs::path(GDL_SOURCE_DIR) / "examples"))
    if (e.path().extension() == ".gdl") out.push_back(e.path());
  std::sort(out.begin(), out.end());
  return out;
}

gdl::ir::Graph compile_example(const fs::path& path) {
  gdl::DiagnosticSink diags;
  std::string fatal;
  auto file = gdl::load_source(path.string(), diags, &fatal);
  REQUIRE(file.has_value());
  auto graph = gdl::compile_to_ir(*file, diags);
  INFO(diags.render(*file));
  REQUIRE(graph.has_value());
  return std::move(*graph);
}

// Fresh, non-zero random values for every input, param and state; i32 inputs
// (device scalars such as a KV length) get a value inside [1, 4096].
gdl::Bindings random_bindings(const gdl::ir::Graph& g, std::vector<int64_t> dims, uint64_t seed) {
  std::mt19937_64 rng(seed);
  std::uniform_real_distribution<double> uniform(0.05, 1.0);
  std::uniform_int_distribution<int> length(1, 4096);
  gdl::Bindings b;
  b.dims = std::move(dims);
  for (const gdl::ir::Node& n : g.nodes) {
    if (n.op != gdl::ir::Op::kInput && n.op != gdl::ir::Op::kParam && n.op != gdl::ir::Op::kState) continue;
    gdl::HostTensor t;
    t.dtype = n.type.dtype;
    t.shape = gdl::concrete_shape(n.type.shape, b.dims);
    int64_t count = 1;
    for (int64_t e : t.shape) count *= e;
    for (int64_t i = 0; i < count; ++i) {
      // Adam's second moments (states named v_*, examples/train_lm.gdl) are
      // never negative in a run: sqrt reads them.
      const bool moment = n.op == gdl::ir::Op::kState && n.name.rfind("v_", 0) == 0;
      double sign = (rng() & 1) || moment ? 1.0 : -1.0;
      double v = t.dtype == gdl::DType::kI32 ? length(rng) : sign * uniform(rng) * (n.op == gdl::ir::Op::kParam ? 0.05 : 1.0);
      t.data.push_back(gdl::round_to_dtype(v, t.dtype));
    }
    b.tensors[n.name] = std::move(t);
  }
  return b;
}

}  // namespace

TEST_CASE("examples: the plan is sound and the planned interpreter equals the plain one") {
  for (const fs::path& path : example_files()) {
    CAPTURE(path.string());
    gdl::ir::Graph graph = compile_example(path);
    gdl::plan::Plan plan = gdl::plan_program(graph);
    CHECK(gdl::plan::check_plan(plan) == "");
    CHECK(plan.arena_bytes <= plan.naive_bytes);
    CHECK(plan.arena_bytes >= plan.live_lower_bound);
    // Each run-time dim at its lower bound, a middle value and its upper bound.
    for (int pick = 0; pick < 3; ++pick) {
      std::vector<int64_t> dims;
      for (const gdl::DimInfo& d : graph.dims) dims.push_back(pick == 0 ? d.lo : pick == 1 ? (d.lo + d.hi) / 2 : d.hi);
      gdl::Bindings b = random_bindings(graph, dims, 1000 + static_cast<uint64_t>(pick));
      auto plain = gdl::interpret(graph, b);
      auto planned = gdl::plan::run_planned(plan, b);
      REQUIRE(plain.ok());
      REQUIRE(planned.ok());
      for (const auto& output : *plain) {
        const std::string& name = output.first;
        const gdl::HostTensor& want = output.second;
        CAPTURE(name);
        const gdl::HostTensor& got = planned->at(name);
        REQUIRE(got.data.size() == want.data.size());
        bool any_nonzero = false;
        for (size_t i = 0; i < want.data.size(); ++i) any_nonzero |= want.data[i] != 0;
        CHECK(any_nonzero);
        CHECK(got.data == want.data);  // bit for bit: same ops, same rounding
      }
    }
  }
}

TEST_CASE("examples: the artifact round trip keeps plan, kernels and module") {
  for (const fs::path& path : example_files()) {
    CAPTURE(path.string());
    gdl::PipelineOptions options;
    options.codegen.cache_dir = (fs::path(GDL_BINARY_DIR) / "test-nvrtc-cache").string();
    auto artifact = gdl::build_artifact(compile_example(path), options);
    REQUIRE_MESSAGE(artifact.ok(), artifact.status().ToString());
    std::vector<uint8_t> bytes = gdl::serialize_artifact(*artifact);
    auto back = gdl::deserialize_artifact(bytes);
    REQUIRE_MESSAGE(back.ok(), back.status().ToString());
    CHECK(gdl::ir::print_ir(back->plan.graph) == gdl::ir::print_ir(artifact->plan.graph));
    CHECK(gdl::plan::print_plan(back->plan) == gdl::plan::print_plan(artifact->plan));
    CHECK(back->kernels.step_choices.size() == artifact->plan.steps.size());
    CHECK(back->module.units == artifact->module.units);
    CHECK(back->cuda_source == artifact->cuda_source);
  }
}

TEST_CASE("examples: the MoE router reads only the chosen experts' weights") {
  gdl::ir::Graph graph = compile_example(fs::path(GDL_SOURCE_DIR) / "examples" / "moe_router.gdl");
  gdl::plan::Plan plan = gdl::plan_program(graph);
  const gdl::ir::Graph& g = plan.graph;
  // The experts' weights and any view of them.
  std::vector<bool> expert(g.nodes.size(), false);
  int64_t all_experts = 0;
  for (size_t v = 0; v < g.nodes.size(); ++v) {
    const gdl::ir::Node& n = g.nodes[v];
    if (n.op == gdl::ir::Op::kParam && (n.name == "w_in" || n.name == "w_out")) {
      expert[v] = true;
      all_experts = gdl::max_element_count(n.type.shape, g.dims);
    }
    const bool view = n.op == gdl::ir::Op::kReshape || n.op == gdl::ir::Op::kSlice;
    if (view && expert[static_cast<size_t>(n.args.at(0))]) expert[v] = true;
  }
  int gathers = 0;
  for (const gdl::plan::Step& s : plan.steps)
    for (gdl::ir::ValueId r : s.reads) {
      if (!expert[static_cast<size_t>(r)]) continue;
      CAPTURE(gdl::plan::step_ops(plan, s));
      // Only a gather of the chosen experts reads them: [B, 2, ...] of [E, ...].
      REQUIRE(s.values.size() == 1);
      const gdl::ir::Node& n = g.node(s.result);
      CHECK(n.op == gdl::ir::Op::kGather);
      CHECK(n.type.shape.at(1) == gdl::Dim::constant(2));
      CHECK(gdl::max_element_count(n.type.shape, g.dims) * 4 == all_experts);  // B * 2 of E = 32 experts
      ++gathers;
    }
  CHECK(gathers == 2);
}
