// Collectives in the CPU reference: interpret_ranks runs every rank of a
// program's process group on its own thread, and its all_reduce,
// all_gather and reduce_scatter are checked against the same combination
// written out here, on fresh random values per rank; one rank computes
// each collective as its argument; the GPU pipeline refuses them.
#include <doctest/doctest.h>

#include <cmath>
#include <cstdio>
#include <fstream>
#include <random>
#include <thread>

#include "cpu_program.h"

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

TEST_CASE("collectives: the GPU pipeline refuses them at the call") {
  const std::string path = "/tmp/gdl_collective_refused.gdl";
  {
    std::ofstream out(path);
    out << "program gpu;\ngroup world ranks(2);\ninput x : f32[3];\noutput y : f32[3];\ny = all_reduce(x);\n";
  }
  Expected<Artifact> artifact = compile_program_file(path);
  REQUIRE_FALSE(artifact.ok());
  CHECK(artifact.status().code() == StatusCode::kCompileError);
  CHECK(artifact.status().message().find(path + ":5:5: error: all_reduce: the GPU runtime does not run collectives yet") !=
        std::string::npos);
  CHECK(artifact.status().message().find("^~~~~~~~~~") != std::string::npos);
  std::remove(path.c_str());
}

}  // namespace
}  // namespace gdl
