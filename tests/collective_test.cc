// Collectives in the CPU reference: interpret_ranks runs every rank of a
// program's process group on its own thread, and its all_reduce,
// all_gather and reduce_scatter are checked against the same combination
// written out here, on fresh random values per rank; one rank computes
// each collective as its argument. Planned for the GPU, every rank's plan
// computes the same, and the kernel table names each NCCL call.
#include <doctest/doctest.h>

#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <fstream>
#include <optional>
#include <random>
#include <thread>

#include "artifact.h"
#include "cpu_program.h"
#include "gdl/gdl.h"
#include "ops/op_def.h"

namespace gdl {
namespace {

using test_programs::compile_text;
using test_programs::random_bindings;

// Element (o, j, i) of a [outer, along, inner] view.
int64_t at3(int64_t o, int64_t j, int64_t i, int64_t along, int64_t inner) { return (o * along + j) * inner + i; }

TEST_CASE("collectives: every rank's results equal the combination of the ranks' values") {
  const std::string text =
      "program tp;\ngroup world ranks({R});\ninput x : {T}[6, {N}];\n"
      "output s : {T}[6, {N}];\noutput mx : {T}[6, {N}];\noutput mn : {T}[6, {N}];\noutput p : {T}[6, {N}];\n"
      "output g0 : {T}[{G0}, {N}];\noutput g1 : {T}[6, {G1}];\noutput rs : {T}[6, {RS}];\n"
      "s = all_reduce(x);\nmx = all_reduce(x, op = max);\nmn = all_reduce(x, op = min);\np = all_reduce(x, op = prod);\n"
      "g0 = all_gather(x);\ng1 = all_gather(x, axis = 1);\nrs = reduce_scatter(x, axis = -1, op = sum);\n";
  for (const char* type : {"f32", "bf16", "i32"})
    for (int64_t ranks : {1, 2, 3, 4}) {
      const int64_t n = 4 * ranks;  // the scattered axis: ranks parts of 4
      std::string program = text;
      auto put = [&](const std::string& key, const std::string& value) {
        for (size_t at = program.find(key); at != std::string::npos; at = program.find(key, at + value.size()))
          program.replace(at, key.size(), value);
      };
      put("{R}", std::to_string(ranks));
      put("{T}", type);
      put("{N}", std::to_string(n));
      put("{G0}", std::to_string(6 * ranks));
      put("{G1}", std::to_string(n * ranks));
      put("{RS}", "4");
      INFO(type << ", " << ranks << " rank(s)");
      const ir::Graph g = compile_text(program);
      std::mt19937 rng(static_cast<unsigned>(17 * ranks + type[0]));
      std::vector<Bindings> per_rank;
      for (int64_t r = 0; r < ranks; ++r) per_rank.push_back(random_bindings(g, {}, rng, -3, 5));
      Expected<std::vector<std::map<std::string, HostTensor>>> got = interpret_ranks(g, per_rank);
      REQUIRE_MESSAGE(got.ok(), got.status().message());
      REQUIRE(got->size() == static_cast<size_t>(ranks));
      const DType dtype = per_rank[0].tensors.at("x").dtype;
      auto x = [&](int64_t r, int64_t i) { return per_rank[static_cast<size_t>(r)].tensors.at("x").data.at(static_cast<size_t>(i)); };
      for (int64_t r = 0; r < ranks; ++r) {
        const std::map<std::string, HostTensor>& out = (*got)[static_cast<size_t>(r)];
        for (int64_t i = 0; i < 6 * n; ++i) {
          double sum = 0, prod = 1, mx = -INFINITY, mn = INFINITY;
          for (int64_t k = 0; k < ranks; ++k) {
            sum += x(k, i), prod *= x(k, i);
            mx = std::max(mx, x(k, i)), mn = std::min(mn, x(k, i));
          }
          CHECK(out.at("s").data[static_cast<size_t>(i)] == round_to_dtype(sum, dtype));
          CHECK(out.at("p").data[static_cast<size_t>(i)] == round_to_dtype(prod, dtype));
          CHECK(out.at("mx").data[static_cast<size_t>(i)] == mx);
          CHECK(out.at("mn").data[static_cast<size_t>(i)] == mn);
        }
        // all_gather along 0: rank k's rows at k * 6; along 1: rank k's columns at k * n.
        for (int64_t k = 0; k < ranks; ++k)
          for (int64_t row = 0; row < 6; ++row)
            for (int64_t col = 0; col < n; ++col) {
              CHECK(out.at("g0").data[static_cast<size_t>((k * 6 + row) * n + col)] == x(k, row * n + col));
              CHECK(out.at("g1").data[static_cast<size_t>(row * n * ranks + k * n + col)] == x(k, row * n + col));
            }
        // reduce_scatter along the last axis: rank r keeps columns [4 r, 4 r + 4) of the sum.
        for (int64_t row = 0; row < 6; ++row)
          for (int64_t col = 0; col < 4; ++col) {
            double sum = 0;
            for (int64_t k = 0; k < ranks; ++k) sum += x(k, at3(row, r * 4 + col, 0, n, 1));
            CHECK(out.at("rs").data[static_cast<size_t>(row * 4 + col)] == round_to_dtype(sum, dtype));
          }
      }
    }
}

TEST_CASE("collectives: avg, a run-time dim beside the moved axis, and collectives in a loop") {
  const ir::Graph g = compile_text(
      "program loop;\ngroup world ranks(3);\ndim B in [1, 8];\ninput x : f32[B, 2];\noutput y : f32[B, 2];\n"
      "output g : f32[B, 6];\nlet h = x;\nfor i in 0..3 { h = all_reduce(h, op = avg) + x; }\ny = h;\n"
      "g = all_gather(x, axis = 1);\n");
  std::mt19937 rng(5);
  std::vector<Bindings> per_rank;
  for (int r = 0; r < 3; ++r) per_rank.push_back(random_bindings(g, {5}, rng));
  Expected<std::vector<std::map<std::string, HostTensor>>> got = interpret_ranks(g, per_rank);
  REQUIRE_MESSAGE(got.ok(), got.status().message());
  for (int r = 0; r < 3; ++r) {
    for (int64_t i = 0; i < 10; ++i) {
      // Three rounds of h = mean over ranks of h, plus this rank's x.
      std::vector<double> h(3);
      for (int k = 0; k < 3; ++k) h[static_cast<size_t>(k)] = per_rank[static_cast<size_t>(k)].tensors.at("x").data[static_cast<size_t>(i)];
      for (int round = 0; round < 3; ++round) {
        const double mean = round_to_dtype((h[0] + h[1] + h[2]) / 3, DType::kF32);
        for (int k = 0; k < 3; ++k)
          h[static_cast<size_t>(k)] =
              round_to_dtype(mean + per_rank[static_cast<size_t>(k)].tensors.at("x").data[static_cast<size_t>(i)], DType::kF32);
      }
      CHECK((*got)[static_cast<size_t>(r)].at("y").data[static_cast<size_t>(i)] == h[static_cast<size_t>(r)]);
    }
    const HostTensor& gathered = (*got)[static_cast<size_t>(r)].at("g");
    CHECK(gathered.shape == std::vector<int64_t>{5, 6});
    for (int64_t row = 0; row < 5; ++row)
      for (int64_t col = 0; col < 6; ++col)
        CHECK(gathered.data[static_cast<size_t>(row * 6 + col)] ==
              per_rank[static_cast<size_t>(col / 2)].tensors.at("x").data[static_cast<size_t>(row * 2 + col % 2)]);
  }
}

TEST_CASE("collectives: a group of one rank computes the program without them") {
  const std::string body = "input x : f16[4, 8];\noutput y : f16[4, 8];\noutput z : f16[4, 8];\n";
  const ir::Graph with = compile_text("program one;\ngroup world ranks(1);\n" + body +
                                      "y = all_reduce(x * 2.0) + 1.0;\nz = reduce_scatter(all_gather(x, axis = 1), axis = 1);\n");
  const ir::Graph without = compile_text("program one;\n" + body + "y = x * 2.0 + 1.0;\nz = x;\n");
  std::mt19937 rng(9);
  const Bindings b = random_bindings(with, {}, rng);
  Expected<std::map<std::string, HostTensor>> a = interpret(with, b), c = interpret(without, b);
  REQUIRE(a.ok());
  REQUIRE(c.ok());
  CHECK(a->at("y").data == c->at("y").data);
  CHECK(a->at("z").data == c->at("z").data);
  Expected<std::vector<std::map<std::string, HostTensor>>> ranks = interpret_ranks(with, {b});
  REQUIRE(ranks.ok());
  CHECK((*ranks)[0].at("y").data == c->at("y").data);
  CHECK((*ranks)[0].at("z").data == c->at("z").data);
}

TEST_CASE("collectives: refusals name the rank, and nothing hangs") {
  const ir::Graph g = compile_text(
      "program two;\ngroup world ranks(2);\ninput x : f32[3];\noutput y : f32[3];\ny = all_reduce(x);\n");
  std::mt19937 rng(3);
  const Bindings b = random_bindings(g, {}, rng);
  // One rank alone cannot combine two ranks' values.
  Expected<std::map<std::string, HostTensor>> alone = interpret(g, b);
  REQUIRE_FALSE(alone.ok());
  CHECK(alone.status().code() == StatusCode::kFailedPrecondition);
  CHECK(alone.status().message().find("combines the values of 2 ranks") != std::string::npos);
  // As many bindings as ranks.
  Expected<std::vector<std::map<std::string, HostTensor>>> three = interpret_ranks(g, {b, b, b});
  REQUIRE_FALSE(three.ok());
  CHECK(three.status().code() == StatusCode::kInvalidArgument);
  CHECK(three.status().message().find("3 rank(s)") != std::string::npos);
  // A wrong binding on rank 1 is named, before any rank runs.
  Bindings bad = b;
  bad.tensors.at("x").shape = {4};
  bad.tensors.at("x").data.push_back(1.0);
  Expected<std::vector<std::map<std::string, HostTensor>>> wrong = interpret_ranks(g, {b, bad});
  REQUIRE_FALSE(wrong.ok());
  CHECK(wrong.status().message().rfind("rank 1: ", 0) == 0);
}

TEST_CASE("collectives: i32 sums and products wrap, reduce_scatter with strides on both sides, f16 rounding") {
  const ir::Graph g = compile_text(
      "program wrap;\ngroup world ranks(2);\ninput i : i32[2];\ninput x : f16[2, 6, 3];\n"
      "output s : i32[2];\noutput p : i32[2];\noutput r : f16[2, 3, 3];\noutput h : f16[2, 6, 3];\n"
      "s = all_reduce(i);\np = all_reduce(i, op = prod);\nr = reduce_scatter(x, axis = 1, op = max);\nh = all_reduce(x);\n");
  std::mt19937 rng(21);
  std::vector<Bindings> per_rank = {random_bindings(g, {}, rng), random_bindings(g, {}, rng)};
  for (Bindings& b : per_rank) b.tensors.at("i").data = {2147483647, 65536};
  Expected<std::vector<std::map<std::string, HostTensor>>> got = interpret_ranks(g, per_rank);
  REQUIRE_MESSAGE(got.ok(), got.status().message());
  for (int r = 0; r < 2; ++r) {
    const std::map<std::string, HostTensor>& out = (*got)[static_cast<size_t>(r)];
    CHECK(out.at("s").data == std::vector<double>{-2, 131072});
    CHECK(out.at("p").data == std::vector<double>{1, 0});
    auto x = [&](int k, int64_t a, int64_t b, int64_t c) {
      return per_rank[static_cast<size_t>(k)].tensors.at("x").data.at(static_cast<size_t>((a * 6 + b) * 3 + c));
    };
    for (int64_t a = 0; a < 2; ++a)
      for (int64_t b = 0; b < 3; ++b)
        for (int64_t c = 0; c < 3; ++c)
          CHECK(out.at("r").data.at(static_cast<size_t>((a * 3 + b) * 3 + c)) ==
                std::max(x(0, a, r * 3 + b, c), x(1, a, r * 3 + b, c)));
    for (int64_t e = 0; e < 36; ++e)
      CHECK(out.at("h").data.at(static_cast<size_t>(e)) ==
            round_to_dtype(x(0, 0, 0, e) + x(1, 0, 0, e), DType::kF16));  // the f16 sum, rounded once
  }
}

TEST_CASE("collectives: a rank that fails releases the others, which say so") {
  // The exchange itself: rank 1 gives one round and fails; rank 0's second round is released.
  ThreadRankExchange exchange(2);
  const HostTensor one{DType::kF32, {1}, {1.0}};
  std::shared_ptr<const std::vector<HostTensor>> first, second;
  std::thread rank0([&] {
    first = exchange.exchange(0, one);
    second = exchange.exchange(0, one);
  });
  REQUIRE(exchange.exchange(1, HostTensor{DType::kF32, {1}, {2.0}}) != nullptr);
  exchange.fail();
  rank0.join();
  REQUIRE(first != nullptr);
  CHECK((*first)[1].data == std::vector<double>{2.0});
  CHECK(second == nullptr);

  // The interpreter's side: a collective whose exchange failed ends the run with why.
  class Failed final : public RankExchange {
   public:
    std::shared_ptr<const std::vector<HostTensor>> exchange(int, const HostTensor&) override { return nullptr; }
    void fail() override {}
  } failed;
  const ir::Graph g = compile_text(
      "program two;\ngroup world ranks(2);\ninput x : f32[3];\noutput y : f32[3];\ny = all_gather(x)[0:3];\n");
  std::mt19937 rng(4);
  Bindings b = random_bindings(g, {}, rng);
  b.rank = 1;
  b.ranks = &failed;
  Expected<std::map<std::string, HostTensor>> run = interpret(g, b);
  REQUIRE_FALSE(run.ok());
  CHECK(run.status().message() == "another rank of the group failed before all_gather");

  // The ranks bind one value of each run-time dim.
  const ir::Graph dims = compile_text(
      "program dims;\ngroup world ranks(2);\ndim B in [1, 4];\ninput x : f32[B, 2];\noutput y : f32[B, 2];\n"
      "y = all_reduce(x);\n");
  Expected<std::vector<std::map<std::string, HostTensor>>> apart =
      interpret_ranks(dims, {random_bindings(dims, {2}, rng), random_bindings(dims, {3}, rng)});
  REQUIRE_FALSE(apart.ok());
  CHECK(apart.status().code() == StatusCode::kInvalidArgument);
  CHECK(apart.status().message() == "rank 1 binds dim B = 3, rank 0 2: the ranks of a group run at the same dims");
}

// Each rank's plan run on its own thread (run_planned, the ranks exchanging
// through one ThreadRankExchange): rank r's outputs.
std::vector<std::map<std::string, HostTensor>> run_planned_ranks(const plan::Plan& p, std::vector<Bindings> per_rank) {
  ThreadRankExchange exchange(static_cast<int>(per_rank.size()));
  std::vector<std::optional<Expected<std::map<std::string, HostTensor>>>> results(per_rank.size());
  std::vector<std::thread> threads;
  for (size_t r = 0; r < per_rank.size(); ++r)
    threads.emplace_back([&, r] {
      per_rank[r].rank = static_cast<int>(r);
      per_rank[r].ranks = &exchange;
      results[r].emplace(plan::run_planned(p, per_rank[r]));
      if (!results[r]->ok()) exchange.fail();
    });
  for (std::thread& t : threads) t.join();
  std::vector<std::map<std::string, HostTensor>> out;
  for (auto& r : results) {
    REQUIRE_MESSAGE(r->ok(), r->status().message());
    out.push_back(std::move(*r).value());
  }
  return out;
}

TEST_CASE("collectives: planned for NCCL, each rank's plan computes what the interpreter does") {
  // Gathers and scatters along inner axes (moved to the front around the
  // call), a run-time dim beside them, a reduction of a run-time scalar (no
  // storage of its own), collectives fed by fused kernels and feeding them.
  const std::string text =
      "program tp;\ngroup world ranks(3);\ndim B in [1, 8] buckets(4, 8);\ninput x : f16[B, 12];\n"
      "param w : f16[12, 6];\nscalar alpha : f32 = 1.5;\n"
      "output y : f16[B, 6];\noutput g : f16[B, 36];\noutput r : f32[B, 4];\noutput a : f32;\noutput g3 : bf16[B, 9, 4];\n"
      "y = all_reduce(silu(x @ w)) * 2.0;\ng = all_gather(x, axis = 1);\n"
      "r = reduce_scatter(cast(x, f32) + 1.0, axis = 1, op = max);\na = all_reduce(alpha, op = avg);\n"
      "g3 = all_gather(reshape(cast(x, bf16), [B, 3, 4]) * 0.5, axis = 1);\n";
  const ir::Graph g = compile_text(text);
  const plan::Plan p = plan_program(g);
  // Every collective is a step of its own whose parts are contiguous.
  int collectives = 0;
  for (const plan::Step& s : p.steps) {
    const ir::Node& n = p.graph.node(s.result);
    if (ops::fusion_class(n.op) != ops::FusionClass::kCollective) continue;
    collectives += 1;
    CHECK(s.values.size() == 1);
    if (n.op != ir::Op::kAllReduce) CHECK(n.attrs.axis == 0);
    CHECK(p.buffers[static_cast<size_t>(n.args[0])].region == plan::Region::kArena);
  }
  CHECK(collectives == 5);
  // They are independent of each other, yet each waits for the one before: NCCL calls go in one order.
  const std::vector<plan::StepSet> reach = plan::reachability(p.steps);
  int previous = -1;
  for (size_t s = 0; s < p.steps.size(); ++s) {
    if (ops::fusion_class(p.graph.node(p.steps[s].result).op) != ops::FusionClass::kCollective) continue;
    if (previous >= 0) CHECK(reach[s].contains(static_cast<size_t>(previous)));
    previous = static_cast<int>(s);
  }
  for (int64_t b : {3, 8}) {
    INFO("B = " << b);
    std::mt19937 rng(static_cast<unsigned>(40 + b));
    std::vector<Bindings> per_rank;
    for (int r = 0; r < 3; ++r) {
      per_rank.push_back(random_bindings(g, {b}, rng));
      per_rank.back().scalars["alpha"] = 0.25 + r;
    }
    Expected<std::vector<std::map<std::string, HostTensor>>> want = interpret_ranks(g, per_rank);
    REQUIRE_MESSAGE(want.ok(), want.status().message());
    const std::vector<std::map<std::string, HostTensor>> got = run_planned_ranks(p, per_rank);
    for (size_t r = 0; r < 3; ++r)
      for (const auto& output : (*want)[r]) {  // not a structured binding: clang's INFO cannot capture one
        const std::string& name = output.first;
        INFO("rank " << r << ", " << name);
        CHECK(got[r].at(name).shape == output.second.shape);
        CHECK(got[r].at(name).data == output.second.data);
      }
    CHECK((*want)[1].at("a").data == std::vector<double>{1.25});  // the mean of 0.25, 1.25 and 2.25
  }
}

TEST_CASE("collectives: gdlc compiles them into an artifact whose kernel table names the NCCL calls") {
  const std::string path = "/tmp/gdl_collective_artifact.gdl";
  {
    std::ofstream out(path);
    out << "program gpu;\ngroup world ranks(2);\ninput x : f32[3, 4];\noutput y : f32[3, 4];\noutput z : f32[3, 8];\n"
           "y = all_reduce(x);\nz = all_gather(x, axis = 1);\n";
  }
  Expected<Artifact> artifact = compile_program_file(path);
  std::remove(path.c_str());
  REQUIRE_MESSAGE(artifact.ok(), artifact.status().message());
  int calls = 0;
  for (size_t s = 0; s < artifact->plan.steps.size(); ++s) {
    const Kernel& k = artifact->kernels.kernels[static_cast<size_t>(artifact->kernels.step_choices[s].back())];
    if (!k.is_collective()) continue;
    calls += 1;
    CHECK(k.symbol.empty());
    CHECK(k.collective == artifact->plan.steps[s].result);
    CHECK(artifact->kernels.step_choices[s].size() == 1);
  }
  CHECK(calls == 2);
  CHECK(artifact->cuda_source.find("all_reduce") == std::string::npos);  // no kernel text for the calls
  Expected<Artifact> back = deserialize_artifact(serialize_artifact(*artifact));
  REQUIRE_MESSAGE(back.ok(), back.status().message());
  CHECK(back->kernels.kernels.size() == artifact->kernels.kernels.size());
}

TEST_CASE("collectives: a dim that sets a collective's count is bucket-served, and NCCL missing is Unavailable") {
  const std::string path = "/tmp/gdl_collective_dims.gdl";
  {
    std::ofstream out(path);
    out << "program dims;\ngroup world ranks(2);\ndim B in [1, 8];\ndim S in [1, 4] policy(update);\n"
           "input x : f32[B, 4];\ninput t : f32[S];\noutput y : f32[B, 4];\noutput u : f32[S];\n"
           "y = all_reduce(x);\nu = t * 2.0;\n";
  }
  Expected<Artifact> artifact = compile_program_file(path);
  std::remove(path.c_str());
  REQUIRE_MESSAGE(artifact.ok(), artifact.status().message());
  const std::vector<uint8_t> bytes = serialize_artifact(*artifact);
  Expected<Program> program = Program::load_memory(bytes.data(), bytes.size());
  REQUIRE_MESSAGE(program.ok(), program.status().message());
  CHECK(program->group_ranks() == 2);
  Expected<std::vector<DimServing>> declared = program->dim_serving();
  REQUIRE_MESSAGE(declared.ok(), declared.status().message());
  CHECK_FALSE(declared->at(0).update);
  CHECK(declared->at(1).update);  // S feeds no collective: node updates serve it as declared
  SessionOptions update;
  update.dim_policies["B"] = DimPolicyChoice::kUpdate;
  Expected<std::vector<DimServing>> refused = program->dim_serving(update);
  REQUIRE_FALSE(refused.ok());
  CHECK(refused.status().code() == StatusCode::kFailedPrecondition);
  CHECK(refused.status().message() ==
        "run-time dim B of program dims sets the element count of a collective, whose captured NCCL call cannot "
        "change it, so buckets must serve it; it would be served by node updates (as asked)");

  // NCCL is loaded at the first communicator: from GDL_NCCL_LIBRARY when set.
  // (No other case of this binary loads it, so this one decides what the process gets.)
  setenv("GDL_NCCL_LIBRARY", "/nonexistent/libnccl.so.2", 1);
  Expected<CommunicatorId> id = Communicator::new_id();
  unsetenv("GDL_NCCL_LIBRARY");
  REQUIRE_FALSE(id.ok());
  CHECK(id.status().code() == StatusCode::kUnavailable);
  CHECK(id.status().message().find("NCCL could not be loaded from /nonexistent/libnccl.so.2") != std::string::npos);
  CHECK(id.status().message().find("GDL_NCCL_LIBRARY") != std::string::npos);
}

}  // namespace
}  // namespace gdl
