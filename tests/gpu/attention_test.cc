// Attention for serving on the GPU against the CPU reference: causal
// queries from a per-sequence start (prefill, chunked decode), a paged
// cache read through a block table and a ragged batch of tokens over one,
// in every float dtype, through each kernel that can compute them: the
// prefill kernel (blocks of causal queries), the grouped one, the streamed
// one (head dims of whole 16-byte vectors) and the split one.
#include <algorithm>
#include <numeric>
#include <random>
#include <string>
#include <vector>

#include "gpu_test_util.h"
#include "scoped_env.h"

using namespace gdl;
using namespace gdl::gpu_test;

namespace {

std::string with(std::string text, const std::map<std::string, std::string>& values) {
  for (const auto& [key, value] : values)
    for (size_t at = text.find(key); at != std::string::npos; at = text.find(key, at + value.size()))
      text.replace(at, key.size(), value);
  return text;
}

// The kernel a case asks for through the knobs of kernel_choice.cc (where
// the step can take it; otherwise the next one down the list).
struct KernelKnobs {
  testing::ScopedEnv grouped, prefill;
  explicit KernelKnobs(const std::string& kernel)
      : grouped("GDL_ATTENTION_GROUPED", kernel == "streamed" ? "0" : "1"),
        prefill("GDL_ATTENTION_PREFILL", kernel == "prefill" ? "all" : "0") {}
};
const std::vector<std::string> kKernels = {"streamed", "grouped", "prefill"};

void set_ints(std::map<std::string, TensorData>& t, const std::string& name, const std::vector<double>& values) {
  TensorData& d = t.at(name);
  REQUIRE(d.dtype == ElementType::kI32);
  REQUIRE(d.bytes.size() == values.size() * 4);
  d.bytes = encode_elements(ElementType::kI32, values);
}

TEST_CASE("attention with start: causal queries over a contiguous cache") {
  // B sequences of Q queries, 8 query heads over 2 k/v heads, T positions.
  const std::string text =
      "program causal;\ninput q : {T}[3, {Q}, 8, {D}];\ninput k : {T}[3, 2, 300, {D}];\n"
      "input v : {T}[3, 2, 300, {D}];\ninput len : i32[3];\ninput start : i32[3];\n"
      "output y : {T}[3, {Q}, 8, {D}];\ny = attention(q, k, v, len, start = start);\n";
  for (const std::string& kernel : kKernels)
  for (const std::string t : {"f32", "f16", "bf16"})
    for (const std::string d : {"64", "128", "40"})
      for (const std::string q : {"1", "7", "33"}) {
        if (kernel == "prefill" && (t == "f32" || d == "40")) continue;  // f16/bf16 heads of 64 or 128 only
        const KernelKnobs knobs(kernel);
        INFO(kernel << " kernel, " << t << " D = " << d << " Q = " << q);
        Program program = compile_text(with(text, {{"{T}", t}, {"{D}", d}, {"{Q}", q}}));
        const double queries = std::stod(q);
        // A prefill from 0; a chunk after 250 cached positions; a chunk cut short by len.
        const Adjust adjust = [&](std::map<std::string, TensorData>& b) {
          set_ints(b, "start", {0, 250, 100});
          set_ints(b, "len", {queries, std::min(300.0, 250 + queries), 100 + queries / 2});
        };
        CHECK(check_program(program, seed_for("causal/" + t + d + q), {}, {}, {}, adjust));
      }
}

TEST_CASE("attention with start over a run-time prompt length, padded by buckets") {
  for (const std::string& kernel : kKernels) {
    const KernelKnobs knobs(kernel);
    Program program = compile_text(
        "program prefill;\ndim P in [1, 64];\ninput q : f16[2, P, 8, 64];\ninput k : f16[2, 2, 128, 64];\n"
        "input v : f16[2, 2, 128, 64];\ninput len : i32[2];\noutput y : f16[2, P, 8, 64];\n"
        "y = attention(q, k, v, len, start = 0);\n");
    for (int64_t p : {1, 5, 64}) {
      INFO(kernel << " kernel, P = " << p);
      const Adjust adjust = [&](std::map<std::string, TensorData>& b) {
        set_ints(b, "len", {static_cast<double>(p), static_cast<double>(std::max<int64_t>(1, p - 1))});
      };
      CHECK(check_program(program, seed_for("prefill/" + std::to_string(p)), {p}, {}, {}, adjust));
    }
  }
}

// The prefill kernel (gdl_attention_prefill.cuh) at its edges: groups of 1
// to 64 query heads a k/v head (12 over 4: a task's rows past 21 queries'
// are padding; 64 over 1: one query a task), head dims 64 and 128 with DV
// != D, query counts that leave a partial last block, 300 positions (a
// partial last stage), chunks that start after cached positions, lengths
// that cut the causal rows short, and a sequence with no position.
TEST_CASE("attention: blocks of causal queries on tensor cores, every group size and head dims") {
  const std::string text =
      "program prefill_blocks;\ninput q : {T}[3, {Q}, {NH}, {D}];\ninput k : {T}[3, {KVH}, 300, {D}];\n"
      "input v : {T}[3, {KVH}, 300, {DV}];\ninput len : i32[3];\ninput start : i32[3];\n"
      "output y : {T}[3, {Q}, {NH}, {DV}];\ny = attention(q, k, v, len, start = start, scale = 0.07);\n";
  struct Case {
    std::string nh, kvh, d, dv;
  };
  const std::vector<Case> cases = {{"8", "8", "64", "64"},    {"12", "4", "128", "128"}, {"16", "4", "64", "128"},
                                   {"16", "2", "128", "64"}, {"64", "1", "64", "64"}};
  const KernelKnobs knobs("prefill");
  for (const std::string t : {"f16", "bf16"})
    for (const Case& c : cases)
      for (const std::string q : {"1", "33", "100"}) {
        INFO(t << ": " << c.nh << " query heads over " << c.kvh << ", D = " << c.d << ", DV = " << c.dv << ", Q = " << q);
        Program program = compile_text(
            with(text, {{"{T}", t}, {"{NH}", c.nh}, {"{KVH}", c.kvh}, {"{D}", c.d}, {"{DV}", c.dv}, {"{Q}", q}}));
        const double queries = std::stod(q);
        using Lengths = std::pair<std::vector<double>, std::vector<double>>;  // start, len
        for (const Lengths& lengths : {Lengths{{0, 200, 37}, {queries, std::min(300.0, 200 + queries), 37 + queries / 2}},
                                       Lengths{{0, 0, 299}, {0, 300, 300}}}) {
          INFO("start " << lengths.first[0] << ", " << lengths.first[1] << ", " << lengths.first[2] << "; len "
                        << lengths.second[0] << ", " << lengths.second[1] << ", " << lengths.second[2]);
          const Adjust adjust = [&](std::map<std::string, TensorData>& b) {
            set_ints(b, "start", lengths.first);
            set_ints(b, "len", lengths.second);
          };
          CHECK(check_program(program, seed_for("prefill_blocks/" + t + c.nh + c.kvh + c.d + c.dv + q), {}, {}, {},
                              adjust));
        }
      }
}

// A pool of NB blocks shared by B sequences: each sequence's table holds
// distinct blocks in a random order, one entry inside its length is outside
// the pool (its positions are skipped) and entries past the length are
// anything.
Adjust paged_tables(int64_t sequences, int64_t max_blocks, int64_t pool, int64_t block, uint64_t seed) {
  return [=](std::map<std::string, TensorData>& b) {
    std::mt19937_64 rng(seed);
    std::vector<double> table, len;
    std::vector<int64_t> ids(static_cast<size_t>(pool));
    std::iota(ids.begin(), ids.end(), 0);
    std::shuffle(ids.begin(), ids.end(), rng);
    for (int64_t s = 0; s < sequences; ++s) {
      const int64_t length = 1 + static_cast<int64_t>(rng() % static_cast<uint64_t>(max_blocks * block));
      len.push_back(static_cast<double>(length));
      for (int64_t j = 0; j < max_blocks; ++j) {
        const bool used = j * block < length;
        double id = used ? static_cast<double>(ids[static_cast<size_t>((s * max_blocks + j) % pool)]) : 1e6;
        if (used && j == 1 && s % 2 == 1) id = -1;  // skipped
        table.push_back(id);
      }
    }
    set_ints(b, "blocks", table);
    set_ints(b, "len", len);
  };
}

// Grouped-query decode over a param cache: where the rows fill the GPU (B =
// 12 sequences of 32 query heads: 384 rows), query heads of one k/v head
// share a task (up to 4: a group of 8 takes two tasks, of 3 one head a
// task); with 3 sequences each head streams its own; lengths from none to
// the whole cache, one of them inside the first stage.
TEST_CASE("attention: grouped query heads share each k/v stage, every group size") {
  const std::string text =
      "program gqa;\ninput q : {T}[{B}, {NH}, {D}];\nparam k : {T}[{B}, {KVH}, 300, {D}];\n"
      "param v : {T}[{B}, {KVH}, 300, {D}];\ninput len : i32[{B}];\noutput y : {T}[{B}, {NH}, {D}];\n"
      "y = attention(q, k, v, len);\n";
  struct Case {
    std::string b, nh, kvh;
  };
  const std::vector<Case> cases = {{"3", "8", "8"}, {"3", "8", "4"}, {"3", "6", "2"}, {"12", "32", "32"},
                                   {"12", "32", "16"}, {"12", "32", "8"}, {"12", "32", "4"}, {"12", "24", "8"}};
  for (const char* grouped : {"0", "1"})  // the streamed kernel, then the group kernel where it applies
  for (const std::string t : {"f32", "f16", "bf16"})
    for (const std::string d : {"64", "128"})
      for (const Case& c : cases) {
        testing::ScopedEnv knob("GDL_ATTENTION_GROUPED", grouped);
        INFO("GDL_ATTENTION_GROUPED=" << grouped << ", " << t << " D = " << d << ", B = " << c.b << ": " << c.nh
                                      << " query heads over " << c.kvh);
        Program program =
            compile_text(with(text, {{"{T}", t}, {"{D}", d}, {"{B}", c.b}, {"{NH}", c.nh}, {"{KVH}", c.kvh}}));
        const size_t b = std::stoul(c.b);
        for (const double first : {0.0, 65.0}) {
          std::vector<double> len(b);
          for (size_t i = 0; i < b; ++i) len[i] = i == 0 ? first : static_cast<double>((i * 97 + 1) % 301);  // 1 .. 300
          INFO("first len " << first);
          const Adjust adjust = [&](std::map<std::string, TensorData>& bind) { set_ints(bind, "len", len); };
          CHECK(check_program(program, seed_for("gqa/" + t + d + c.b + c.nh + c.kvh + std::to_string(first)), {}, {}, {},
                              adjust));
        }
      }
}

// The tensor-core group kernel (gdl_attention_group.cuh) at its edges: 16
// query heads a k/v head (A's rows 8-15 hold heads), a group of 6 (rows
// past the group are padding), head dims 64 to 256 with DV != D, and
// lengths at and around the 64-position stages, one stage, several splits
// and the whole cache; also with splits of at least 3 stages, where a
// short row takes fewer splits than the kernel has (one, with no combine).
TEST_CASE("attention: grouped heads on tensor cores, groups up to 16, head dims up to 256") {
  const std::string text =
      "program gqa_edges;\ninput q : {T}[4, {NH}, {D}];\nparam k : {T}[4, 2, 1000, {D}];\n"
      "param v : {T}[4, 2, 1000, {DV}];\ninput len : i32[4];\noutput y : {T}[4, {NH}, {DV}];\n"
      "y = attention(q, k, v, len, scale = 0.05);\n";
  struct Case {
    std::string nh, d, dv;
  };
  const std::vector<Case> cases = {{"32", "128", "128"}, {"12", "64", "64"}, {"4", "256", "256"},
                                   {"16", "192", "64"},  {"8", "64", "256"}};
  testing::ScopedEnv grouped("GDL_ATTENTION_GROUPED", "1");
  for (const char* least : {"1", "3"})
  for (const std::string t : {"f16", "bf16"})
    for (const Case& c : cases) {
      INFO(t << ": " << c.nh << " query heads over 2, D = " << c.d << ", DV = " << c.dv << ", splits of at least "
             << least << " stage(s)");
      testing::ScopedEnv least_stages("GDL_ATTENTION_LEAST_SPLIT_STAGES", least);
      Program program = compile_text(with(text, {{"{T}", t}, {"{NH}", c.nh}, {"{D}", c.d}, {"{DV}", c.dv}}));
      for (const std::vector<double>& len :
           std::vector<std::vector<double>>{{1, 15, 16, 17}, {63, 64, 65, 129}, {999, 1000, 2000, 500}}) {
        INFO("len " << len[0] << ", " << len[1] << ", " << len[2] << ", " << len[3]);
        const Adjust adjust = [&](std::map<std::string, TensorData>& bind) { set_ints(bind, "len", len); };
        CHECK(check_program(program, seed_for("gqa_edges/" + t + c.nh + c.d + c.dv + std::to_string(len[0])), {}, {},
                            {}, adjust));
      }
    }
}

TEST_CASE("paged_attention: sequences of different lengths share one pool") {
  const std::string text =
      "program paged;\ninput q : {T}[5, {Q}8, {D}];\ninput k_pool : {T}[40, 2, {BS}, {D}];\n"
      "input v_pool : {T}[40, 2, {BS}, {D}];\ninput blocks : i32[5, 8];\ninput len : i32[5];\n{START_DECL}"
      "output y : {T}[5, {Q}8, {D}];\ny = paged_attention(q, k_pool, v_pool, len, blocks{START});\n";
  for (const std::string& kernel : kKernels)
  for (const std::string t : {"f32", "f16", "bf16"})
    for (const std::string d : {"128", "40"})
      for (const std::string bs : {"16", "64", "12"})
        for (bool causal : {false, true}) {
          // The prefill kernel: causal queries of f16/bf16 heads of 64 or 128 only.
          if (kernel == "prefill" && (!causal || t == "f32" || d == "40")) continue;
          const KernelKnobs knobs(kernel);
          INFO(kernel << " kernel, " << t << " D = " << d << " block " << bs << (causal ? " causal" : ""));
          Program program = compile_text(with(text, {{"{T}", t},
                                                     {"{D}", d},
                                                     {"{BS}", bs},
                                                     {"{Q}", causal ? "4, " : ""},
                                                     {"{START_DECL}", causal ? "input start : i32[5];\n" : ""},
                                                     {"{START}", causal ? ", start = start" : ""}}));
          const uint64_t seed = seed_for("paged/" + t + d + bs + (causal ? "c" : ""));
          const Adjust tables = paged_tables(5, 8, 40, std::stoll(bs), seed);
          const Adjust adjust = [&](std::map<std::string, TensorData>& b) {
            tables(b);
            if (!causal) return;
            const std::vector<double> len = decode_elements(ElementType::kI32, b.at("len").bytes.data(), 5);
            std::vector<double> start;
            for (double l : len) start.push_back(std::max(0.0, l - 4));  // the last 4 positions are this chunk
            set_ints(b, "start", start);
          };
          CHECK(check_program(program, seed, {}, {}, {}, adjust));
        }
}

// A ragged batch of tokens (paged_attention's `sequence` form) as a Llama
// step serves it: decode tokens of four sequences, a token of no sequence,
// a prompt chunk that starts inside a block of 16 tokens and one from
// position 0, and a last token whose sequence id is past the table. At 100
// tokens (fewer than the 272 the prefill kernel waits for on 132
// multiprocessors: every token goes to the decode kernels) and at 400 (in
// the bucket of 512: the whole blocks of 16 tokens of one sequence go to
// the prefill kernel, paged_attention_shared), through the grouped and the
// streamed decode kernels, and with the split off (GDL_ATTENTION_PREFILL=0).
TEST_CASE("paged_attention with sequence: a ragged batch of decode tokens and prompt chunks") {
  const std::string text =
      "program ragged;\ndim T in [1, 512];\ninput q : {T}[T, 32, {D}];\ninput k_pool : {T}[{NB}, 8, {BS}, {D}];\n"
      "input v_pool : {T}[{NB}, 8, {BS}, {D}];\ninput tables : i32[6, {MAXB}];\ninput seq : i32[T];\n"
      "input len : i32[T];\noutput y : {T}[T, 32, {D}];\n"
      "y = paged_attention(q, k_pool, v_pool, len, tables, sequence = seq);\n";
  struct Kernels {
    const char *decode, *grouped, *prefill;
  };
  for (const std::string t : {"f16", "bf16"})
    for (const std::string d : {"64", "128"})
      for (const int64_t block : {16, 64})
        for (const Kernels& k : {Kernels{"grouped", "1", "1"}, Kernels{"streamed", "0", "1"}, Kernels{"grouped", "1", "0"}}) {
          const testing::ScopedEnv grouped("GDL_ATTENTION_GROUPED", k.grouped), prefill("GDL_ATTENTION_PREFILL", k.prefill);
          const int64_t max_blocks = 512 / block, pool = 6 * max_blocks;
          Program program = compile_text(with(text, {{"{T}", t},
                                                     {"{D}", d},
                                                     {"{BS}", std::to_string(block)},
                                                     {"{NB}", std::to_string(pool)},
                                                     {"{MAXB}", std::to_string(max_blocks)}}));
          for (const int64_t tokens : {100, 400}) {
            INFO(t << " D = " << d << ", blocks of " << block << ", " << k.decode << " decode kernel, prefill "
                   << k.prefill << ", " << tokens << " tokens");
            const uint64_t seed = seed_for("ragged/" + t + d + std::to_string(block) + k.decode + k.prefill);
            const Adjust adjust = [&](std::map<std::string, TensorData>& b) {
              std::mt19937_64 rng(seed);
              std::vector<int64_t> ids(static_cast<size_t>(pool));
              std::iota(ids.begin(), ids.end(), 0);
              std::shuffle(ids.begin(), ids.end(), rng);
              set_ints(b, "tables", std::vector<double>(ids.begin(), ids.end()));  // 6 sequences of distinct blocks
              std::vector<double> seq, len;
              const int64_t chunk = tokens == 400 ? 300 : 60;
              for (int64_t x = 0; x < tokens; ++x) {
                if (x < 4) {  // decode tokens
                  seq.push_back(static_cast<double>(x));
                  len.push_back(static_cast<double>(1 + rng() % 512));
                } else if (x == 4 || x == tokens - 1) {  // no sequence; past the table
                  seq.push_back(x == 4 ? -1.0 : 6.0);
                  len.push_back(50);
                } else if (x < 5 + chunk) {  // a chunk of sequence 4 at positions 130..
                  seq.push_back(4);
                  len.push_back(static_cast<double>(131 + x - 5));
                } else {  // a chunk of sequence 5 from position 0
                  seq.push_back(5);
                  len.push_back(static_cast<double>(1 + x - 5 - chunk));
                }
              }
              set_ints(b, "seq", seq);
              set_ints(b, "len", len);
            };
            CHECK(check_program(program, seed, {tokens}, {}, {}, adjust));
          }
        }
}

}  // namespace
