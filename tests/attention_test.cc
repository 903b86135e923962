// Attention for serving on the CPU reference and through its plan:
// grouped-query heads, per-sequence lengths, causal queries from a
// per-sequence start, and a paged cache read through its block table, each
// checked against plain attention over the equivalent contiguous cache; a
// ragged batch of tokens (paged_attention's `sequence` form) against the
// same attention through gathered block-table rows, also where it is split
// between the decode and prefill kernels.
#include <doctest/doctest.h>

#include <algorithm>

#include "cpu_program.h"
#include "ops/attention.h"

namespace gdl {
namespace {

using namespace test_programs;

// Plain attention over one query per sequence: 4 query heads over 2 k/v
// heads, 6 positions, a length per sequence.
constexpr const char* kGrouped = R"(program g;
input q : f32[2, 4, 8];
input k : f32[2, 2, 6, 8];
input v : f32[2, 2, 6, 8];
input len : i32[2];
output y : f32[2, 4, 8];
y = attention(q, k, v, len);
)";

void check_close(const std::vector<double>& got, size_t at, const std::vector<double>& want) {
  REQUIRE(at + want.size() <= got.size());
  for (size_t i = 0; i < want.size(); ++i) CHECK(got[at + i] == doctest::Approx(want[i]).epsilon(1e-12));
}

TEST_CASE("attention: grouped-query heads read their group's k/v head, and each sequence its own length") {
  // The same with every k/v head repeated for its query heads, one sequence and one length at a time.
  ir::Graph repeated = compile_text(R"(program r;
input q : f32[4, 8];
input k : f32[2, 6, 8];
input v : f32[2, 6, 8];
input len : i32;
output y : f32[4, 8];
let k4 = concat(k[0:1], k[0:1], k[1:2], k[1:2], axis = 0);
let v4 = concat(v[0:1], v[0:1], v[1:2], v[1:2], axis = 0);
y = attention(q, k4, v4, len);
)");
  std::mt19937 rng(11);
  Bindings b;
  b.tensors["q"] = random_tensor(rng, DType::kF32, {2, 4, 8});
  b.tensors["k"] = random_tensor(rng, DType::kF32, {2, 2, 6, 8});
  b.tensors["v"] = random_tensor(rng, DType::kF32, {2, 2, 6, 8});
  b.tensors["len"] = tensor(DType::kI32, {2}, {3, 5});
  const std::vector<double> y = run_both(compile_text(kGrouped), b).at("y").data;
  for (int64_t seq = 0; seq < 2; ++seq) {
    Bindings one;
    auto part = [&](const std::string& name, std::vector<int64_t> shape) {
      const HostTensor& all = b.tensors[name];
      const size_t n = all.data.size() / 2;
      one.tensors[name] = tensor(DType::kF32, std::move(shape),
                                 {all.data.begin() + static_cast<long>(seq * n), all.data.begin() + static_cast<long>((seq + 1) * n)});
    };
    part("q", {4, 8});
    part("k", {2, 6, 8});
    part("v", {2, 6, 8});
    one.tensors["len"] = tensor(DType::kI32, {}, {seq == 0 ? 3.0 : 5.0});
    check_close(y, static_cast<size_t>(seq) * 32, run_both(repeated, one).at("y").data);
  }
}

// Query i of sequence b of a causal program, alone: plain attention with
// the length min(len[b], start[b] + i + 1).
void check_causal(const std::vector<double>& y, const Bindings& b, const std::vector<double>& len,
                  const std::vector<double>& start, const Bindings& cache) {
  ir::Graph plain = compile_text(kGrouped);
  const HostTensor& q = b.tensors.at("q");  // [2, 3, 4, 8]
  for (int64_t i = 0; i < 3; ++i) {
    Bindings one = cache;
    one.tensors["q"] = tensor(DType::kF32, {2, 4, 8}, {});
    std::vector<double> lengths;
    for (int64_t seq = 0; seq < 2; ++seq) {
      const auto row = q.data.begin() + static_cast<long>((seq * 3 + i) * 32);
      one.tensors["q"].data.insert(one.tensors["q"].data.end(), row, row + 32);
      lengths.push_back(std::min(len[static_cast<size_t>(seq)], start[static_cast<size_t>(seq)] + static_cast<double>(i) + 1));
    }
    one.tensors["len"] = tensor(DType::kI32, {2}, lengths);
    const std::vector<double> alone = run_both(plain, one).at("y").data;
    INFO("query " << i);
    for (int64_t seq = 0; seq < 2; ++seq)
      check_close(y, static_cast<size_t>((seq * 3 + i) * 32),
                  {alone.begin() + static_cast<long>(seq * 32), alone.begin() + static_cast<long>(seq * 32 + 32)});
  }
}

// Causal attention of 3 queries per sequence over a contiguous cache of T positions.
std::string causal_program(int positions) {
  const std::string cache = "f32[2, 2, " + std::to_string(positions) + ", 8]";
  return "program c;\ninput q : f32[2, 3, 4, 8];\ninput k : " + cache + ";\ninput v : " + cache +
         ";\ninput len : i32[2];\ninput start : i32[2];\noutput y : f32[2, 3, 4, 8];\n"
         "y = attention(q, k, v, len, start = start);\n";
}

TEST_CASE("attention with start: query i sees the positions up to start + i, within len") {
  ir::Graph causal = compile_text(causal_program(6));
  std::mt19937 rng(5);
  Bindings cache;
  cache.tensors["k"] = random_tensor(rng, DType::kF32, {2, 2, 6, 8});
  cache.tensors["v"] = random_tensor(rng, DType::kF32, {2, 2, 6, 8});
  Bindings b = cache;
  b.tensors["q"] = random_tensor(rng, DType::kF32, {2, 3, 4, 8});
  // Sequence 0: queries at 2, 3, 4 with len 4 (the last one capped); sequence 1: a prefill from 0.
  const std::vector<double> len = {4, 6}, start = {2, 0};
  b.tensors["len"] = tensor(DType::kI32, {2}, len);
  b.tensors["start"] = tensor(DType::kI32, {2}, start);
  check_causal(run_both(causal, b).at("y").data, b, len, start, cache);

  SUBCASE("a compile-time start for every sequence") {
    ir::Graph from_one = compile_text(R"(program c;
input q : f32[2, 3, 4, 8];
input k : f32[2, 2, 6, 8];
input v : f32[2, 2, 6, 8];
input len : i32[2];
output y : f32[2, 3, 4, 8];
y = attention(q, k, v, len, start = 1);
)");
    b.tensors.erase("start");
    check_causal(run_both(from_one, b).at("y").data, b, len, {1, 1}, cache);
  }
}

// A pool of 5 blocks of 4 positions and a table of 3 blocks per sequence,
// and the contiguous cache [2, 2, 12, 8] the table describes, positions of
// blocks outside the pool left out (the positions after them move up).
struct PagedCase {
  Bindings pool;                // k_pool, v_pool
  Bindings contiguous;          // k, v
  std::vector<double> table;    // [2, 3]
  std::vector<int64_t> stored;  // per sequence, how many of its first `len` positions are stored
};

PagedCase paged_case(std::mt19937& rng, std::vector<double> table, const std::vector<double>& len) {
  constexpr int64_t kBlock = 4, kHeads = 2, kD = 8, kMaxBlocks = 3, kPool = 5;
  PagedCase c;
  c.table = std::move(table);
  for (const char* name : {"k", "v"}) {
    const HostTensor pool = random_tensor(rng, DType::kF32, {kPool, kHeads, kBlock, kD});
    HostTensor cache = tensor(DType::kF32, {2, kHeads, kMaxBlocks * kBlock, kD}, {});
    cache.data.assign(static_cast<size_t>(2 * kHeads * kMaxBlocks * kBlock * kD), 0.5);
    c.stored.assign(2, 0);
    for (int64_t seq = 0; seq < 2; ++seq) {
      int64_t kept = 0;
      for (int64_t t = 0; t < kMaxBlocks * kBlock; ++t) {
        const int64_t id = static_cast<int64_t>(c.table[static_cast<size_t>(seq * kMaxBlocks + t / kBlock)]);
        if (id < 0 || id >= kPool) continue;
        for (int64_t h = 0; h < kHeads; ++h)
          for (int64_t i = 0; i < kD; ++i)
            cache.data[static_cast<size_t>(((seq * kHeads + h) * kMaxBlocks * kBlock + kept) * kD + i)] =
                pool.data[static_cast<size_t>(((id * kHeads + h) * kBlock + t % kBlock) * kD + i)];
        if (t < static_cast<int64_t>(len[static_cast<size_t>(seq)])) ++c.stored[static_cast<size_t>(seq)];
        ++kept;
      }
    }
    c.pool.tensors[std::string(name) + "_pool"] = pool;
    c.contiguous.tensors[name] = cache;
  }
  return c;
}

TEST_CASE("paged_attention reads each sequence's positions through its block table") {
  ir::Graph paged = compile_text(R"(program p;
input q : f32[2, 4, 8];
input k_pool : f32[5, 2, 4, 8];
input v_pool : f32[5, 2, 4, 8];
input blocks : i32[2, 3];
input len : i32[2];
output y : f32[2, 4, 8];
y = paged_attention(q, k_pool, v_pool, len, blocks);
)");
  ir::Graph contiguous = compile_text(R"(program c;
input q : f32[2, 4, 8];
input k : f32[2, 2, 12, 8];
input v : f32[2, 2, 12, 8];
input len : i32[2];
output y : f32[2, 4, 8];
y = attention(q, k, v, len);
)");
  std::mt19937 rng(23);
  const HostTensor q = random_tensor(rng, DType::kF32, {2, 4, 8});
  struct Case {
    const char* what;
    std::vector<double> table, len;
  };
  for (const Case& test : {Case{"blocks in any order; past len the table is never read", {3, 0, 4, 1, 2, 77}, {10, 7}},
                           Case{"a block id outside the pool skips its positions", {4, -1, 0, 1, 5, 2}, {11, 12}},
                           Case{"no position", {0, 1, 2, 3, 4, 0}, {0, -2}}}) {
    INFO(test.what);
    PagedCase c = paged_case(rng, test.table, test.len);
    Bindings b = c.pool;
    b.tensors["q"] = q;
    b.tensors["blocks"] = tensor(DType::kI32, {2, 3}, c.table);
    b.tensors["len"] = tensor(DType::kI32, {2}, test.len);
    const std::vector<double> y = run_both(paged, b).at("y").data;
    Bindings want = c.contiguous;
    want.tensors["q"] = q;
    want.tensors["len"] = tensor(DType::kI32, {2}, {static_cast<double>(c.stored[0]), static_cast<double>(c.stored[1])});
    check_close(y, 0, run_both(contiguous, want).at("y").data);
  }
}

TEST_CASE("paged_attention with start: causal queries over a paged cache (chunked prefill)") {
  ir::Graph paged = compile_text(R"(program p;
input q : f32[2, 3, 4, 8];
input k_pool : f32[5, 2, 4, 8];
input v_pool : f32[5, 2, 4, 8];
input blocks : i32[2, 3];
input len : i32[2];
input start : i32[2];
output y : f32[2, 3, 4, 8];
y = paged_attention(q, k_pool, v_pool, len, blocks, start = start);
)");
  ir::Graph contiguous = compile_text(causal_program(12));
  std::mt19937 rng(29);
  const std::vector<double> len = {9, 3};
  PagedCase c = paged_case(rng, {2, 4, 0, 1, 3, 3}, len);
  Bindings b = c.pool;
  b.tensors["q"] = random_tensor(rng, DType::kF32, {2, 3, 4, 8});
  b.tensors["blocks"] = tensor(DType::kI32, {2, 3}, c.table);
  b.tensors["len"] = tensor(DType::kI32, {2}, len);
  b.tensors["start"] = tensor(DType::kI32, {2}, {6, 0});
  const std::vector<double> y = run_both(paged, b).at("y").data;
  Bindings want = c.contiguous;
  for (const char* name : {"q", "len", "start"}) want.tensors[name] = b.tensors[name];
  check_close(y, 0, run_both(contiguous, want).at("y").data);
}

// A ragged batch: token x of q reads the table row sequence[x]. The same as
// a table gathered per token; a sequence id outside the table gives a zero
// row.
TEST_CASE("paged_attention with sequence: a ragged batch of tokens, each over its sequence's blocks") {
  const std::string head = R"(program r;
input q : f32[6, 4, 8];
input k_pool : f32[5, 2, 4, 8];
input v_pool : f32[5, 2, 4, 8];
input tables : i32[2, 3];
input seq : i32[6];
input len : i32[6];
output y : f32[6, 4, 8];
)";
  ir::Graph ragged = compile_text(head + "y = paged_attention(q, k_pool, v_pool, len, tables, sequence = seq);\n");
  ir::Graph gathered = compile_text(head + "y = paged_attention(q, k_pool, v_pool, len, gather(tables, seq));\n");
  std::mt19937 rng(31);
  PagedCase c = paged_case(rng, {3, 0, 4, 1, 2, -1}, {10, 7});
  Bindings b = c.pool;
  b.tensors["q"] = random_tensor(rng, DType::kF32, {6, 4, 8});
  b.tensors["tables"] = tensor(DType::kI32, {2, 3}, c.table);
  b.tensors["len"] = tensor(DType::kI32, {6}, {10, 3, 7, 12, 1, 0});
  b.tensors["seq"] = tensor(DType::kI32, {6}, {0, 0, 1, 1, 1, 0});
  check_close(run_both(ragged, b).at("y").data, 0, run_both(gathered, b).at("y").data);
  b.tensors["seq"] = tensor(DType::kI32, {6}, {0, -1, 1, 2, 1, 0});  // tokens 1 and 3: no such sequence
  const std::vector<double> y = run_both(ragged, b).at("y").data;
  for (int64_t token : {1, 3})
    CHECK(std::all_of(y.begin() + token * 32, y.begin() + token * 32 + 32, [](double x) { return x == 0.0; }));
}

// Where the prefill kernel fits (bf16 heads of 64, 8 query heads over 2,
// blocks of 16 positions), the ragged-attention pass splits the op: whole
// blocks of 16 tokens of one sequence go to paged_attention_shared when
// the step has at least min_tokens (a 4-multiprocessor target: 2 tasks of
// 2 k/v heads, 32 tokens), the rest to the decode kernels. Together they
// give what the op gives unsplit, at token counts on both sides of
// min_tokens, with blocks of one sequence, mixed blocks, a partial last
// block and a token of no sequence.
TEST_CASE("paged_attention with sequence: split between the decode and prefill kernels, the same result") {
  const std::string text = R"(program r;
dim T in [1, 64];
input q : bf16[T, 8, 64];
input k_pool : bf16[12, 2, 16, 64];
input v_pool : bf16[12, 2, 16, 64];
input tables : i32[3, 4];
input seq : i32[T];
input len : i32[T];
output y : bf16[T, 8, 64];
y = paged_attention(q, k_pool, v_pool, len, tables, sequence = seq);
)";
  PipelineOptions split_options;
  split_options.target.multiprocessors = 4;
  DiagnosticSink diags;
  std::optional<ir::Graph> split = compile_to_ir(source_from_string("r.gdl", text), diags, split_options);
  REQUIRE(split.has_value());
  PipelineOptions whole_options = split_options;
  whole_options.optimize = false;  // no ragged-attention pass
  std::optional<ir::Graph> whole = compile_to_ir(source_from_string("r.gdl", text), diags, whole_options);
  REQUIRE(whole.has_value());
  int shared = 0;
  for (const ir::Node& n : split->nodes)
    if (n.op == ir::Op::kPagedAttentionShared) {
      ++shared;
      const ops::AttentionOperands a = ops::attention_operands(n);
      CHECK(a.shared_block == 16);
      CHECK(a.shared_min_tokens == 32);
    }
  CHECK(shared == 1);
  std::mt19937 rng(37);
  for (int64_t tokens : {20, 40, 64}) {
    INFO(tokens << " tokens");
    Bindings b;
    b.dims = {tokens};
    for (const char* name : {"k_pool", "v_pool"}) b.tensors[name] = random_tensor(rng, DType::kBF16, {12, 2, 16, 64});
    b.tensors["q"] = random_tensor(rng, DType::kBF16, {tokens, 8, 64});
    b.tensors["tables"] = tensor(DType::kI32, {3, 4}, {7, 2, 9, 0, 11, 4, 1, 5, 3, 6, 8, 10});
    // Tokens 0-2 decode sequences 0-2; from 3 a prompt chunk of sequence 1 at positions 10..;
    // token 35 (of no sequence) breaks the block it falls in.
    std::vector<double> seq, len;
    for (int64_t x = 0; x < tokens; ++x) {
      const bool decode = x < 3;
      seq.push_back(decode ? static_cast<double>(x) : x == 35 ? 3.0 : 1.0);
      len.push_back(decode ? static_cast<double>(20 + 13 * x) : static_cast<double>(std::min<int64_t>(64, 8 + x)));
    }
    b.tensors["seq"] = tensor(DType::kI32, {tokens}, seq);
    b.tensors["len"] = tensor(DType::kI32, {tokens}, len);
    const std::vector<double> got = run_both(*split, b).at("y").data;
    const std::vector<double> want = run_both(*whole, b).at("y").data;
    REQUIRE(got.size() == want.size());
    for (size_t i = 0; i < got.size(); ++i) CHECK(got[i] == want[i]);
  }
}

}  // namespace
}  // namespace gdl
