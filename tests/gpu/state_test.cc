// State on the device: a KV cache written in place at per-sequence
// positions and a moment updated whole, over several runs by graph and by
// eager launch, each run checked (outputs and the state it leaves) against
// the CPU reference fed the state the previous run left; the plan has no
// step that copies the cache; the host calls that set, read and zero state.
#include <cuda_runtime_api.h>

#include <algorithm>
#include <cstring>
#include <functional>
#include <numeric>

#include "gdl/jit.h"
#include "gpu_test_util.h"
#include "plan.h"
#include "program_impl.h"

using namespace gdl;
using namespace gdl::gpu_test;

namespace {

// A two-layer cache of 4 slots x 64 positions; each run writes one row per
// sequence and layer, then attends over the slot's positions.
const char* kCache = R"(program kv_cache;
const L = 2;
const S = 4;
const T = 64;
const D = 32;
dim B in [1, 4];
state k_cache : {T}[L, S, T, D];
input slot : i32[B];
input pos : i32[B];
input k : {T}[L, B, D];
input q : {T}[B, D];
output y : {T}[L, B, T];
for l in 0..L {
  let rows = reshape(k_cache[l], [S * T, D]);
  k_cache[l] = reshape(scatter(rows, slot * T + pos, k[l], axis = 0), [S, T, D]);
}
let s0 = q @ transpose(k_cache[0, 0], [1, 0]);
let s1 = q @ transpose(k_cache[1, 0], [1, 0]);
y = concat(reshape(s0, [1, B, T]), reshape(s1, [1, B, T]), axis = 0);
)";

const char* kMoment = R"(program moment;
state m : f32[1000];
state steps : i32;
input g : f32[1000];
output y : f32[1000];
m = m * 0.9 + g * 0.1;
steps = steps + 1;
y = m * 2.0;
)";


}  // namespace

TEST_CASE("state: a KV cache is written in place at per-sequence positions, run after run, graph and eager") {
  for (const std::string t : {"f32", "f16", "bf16"}) {
    Program program = compile_text(with_dtype(kCache, t));
    // The plan writes rows only: no copy step, no update of a whole layer, and every write inside the cache.
    const plan::Plan& plan = program.internals().plan();
    const plan::Buffer& cache = plan.buffers.at(static_cast<size_t>(plan.graph.leaves(ir::Op::kState).at(0)));
    int scatters = 0;
    for (const plan::Step& step : plan.steps)
      for (ir::ValueId v : step.values) {
        const ir::Op op = plan.graph.node(v).op;
        CHECK(op != ir::Op::kCopy);
        CHECK(op != ir::Op::kUpdateSlice);
        if (op != ir::Op::kScatter) continue;
        ++scatters;
        const plan::Buffer& b = plan.buffers.at(static_cast<size_t>(v));
        CHECK(b.offset >= cache.offset);
        CHECK(b.offset + b.bytes <= cache.offset + cache.bytes);
      }
    CHECK(scatters == 2);
    // Positions in [-1, 64]: -1 and 64 are outside the slot's 64 positions, so those rows are not written.
    RangeFor range = [](const TensorInfo& info) {
      ValueRange r;
      if (info.name == "slot") r.int_lo = 0, r.int_hi = 3;
      if (info.name == "pos") r.int_lo = -1, r.int_hi = 64;
      return r;
    };
    check_runs(program, "kv cache " + t, 6, {1, 3, 4, 2}, range);
  }
}

TEST_CASE("state: a whole new value is copied in after every read of the old one") {
  Program program = compile_text(kMoment);
  check_runs(program, "moment", 5, {}, {});
}

TEST_CASE("state: set, read, reset and view; wrong names and sizes change nothing") {
  if (cpu_only) return;
  Program program = compile_text(kMoment);
  std::unique_ptr<Session> s = make_session(program);
  const TensorInfo& m = *program.find_state("m");
  TensorData zero = read_state(*s, m);
  for (uint8_t byte : zero.bytes) REQUIRE(byte == 0);  // zero when the session starts
  std::vector<float> values(1000);
  for (size_t i = 0; i < values.size(); ++i) values[i] = 0.5f + static_cast<float>(i);
  GDL_REQUIRE_OK(s->set_state("m", values.data(), values.size() * sizeof(float)));
  CHECK(s->set_state("m", values.data(), 12).code() == StatusCode::kInvalidArgument);
  CHECK(s->set_state("g", values.data(), values.size() * sizeof(float)).code() == StatusCode::kInvalidArgument);
  CHECK(s->read_state("nope", values.data(), 4).code() == StatusCode::kNotFound);
  std::vector<float> back(1000);
  GDL_REQUIRE_OK(s->read_state("m", back.data(), back.size() * sizeof(float)));
  CHECK(back == values);
  Expected<Session::DeviceView> view = s->state_view("m");
  REQUIRE(view.ok());
  CHECK(view->bytes == 4000);
  std::vector<float> through_view(1000);
  REQUIRE(cudaMemcpy(through_view.data(), view->data, 4000, cudaMemcpyDeviceToHost) == cudaSuccess);
  CHECK(through_view == values);
  GDL_REQUIRE_OK(s->reset_state("m"));
  GDL_REQUIRE_OK(s->read_state("m", back.data(), back.size() * sizeof(float)));
  for (float v : back) REQUIRE(v == 0.0f);
  CHECK(s->reset_state("x").code() == StatusCode::kNotFound);
}

namespace {

void set_ints(std::map<std::string, TensorData>& t, const std::string& name, const std::vector<double>& values) {
  TensorData& d = t.at(name);
  REQUIRE(d.bytes.size() == values.size() * 4);
  d.bytes = encode_elements(ElementType::kI32, values);
}

// No step of the plan copies a state or writes a whole slice of one: the
// caches are written row by row, in place.
void check_no_cache_copy(const Program& program) {
  const plan::Plan& plan = program.internals().plan();
  for (const plan::Step& step : plan.steps)
    for (ir::ValueId v : step.values) {
      CHECK(plan.graph.node(v).op != ir::Op::kCopy);
      CHECK(plan.graph.node(v).op != ir::Op::kUpdateSlice);
    }
}

// examples/paged_decode.gdl: 4 sequences, 8 blocks of 16 positions each at
// most, a pool of 32 blocks per layer. Each sequence owns 8 distinct blocks
// (a random permutation of the pool split four ways), at its own position.
struct PagedBatch {
  std::vector<double> blocks, pos;
};
PagedBatch paged_batch(std::mt19937_64& rng, const std::vector<double>& pos) {
  std::vector<int> ids(32);
  std::iota(ids.begin(), ids.end(), 0);
  std::shuffle(ids.begin(), ids.end(), rng);
  PagedBatch b;
  b.blocks.assign(ids.begin(), ids.end());
  b.pos = pos;
  return b;
}

// examples/NAME.gdl, whose plan copies no cache.
Expected<Program> compile_serving_example(const std::string& name) {
  Expected<Program> compiled = jit::compile(source_dir() + "/examples/" + name + ".gdl");
  REQUIRE_MESSAGE(compiled.ok(), compiled.status().message());
  check_no_cache_copy(*compiled);
  return compiled;
}

// Small weights, so that activations stay O(1) through the layers.
ValueRange small_values(const TensorInfo&) {
  ValueRange r;
  r.lo = 0.05, r.hi = 0.5;
  return r;
}

}  // namespace

TEST_CASE("state: a decode layer with GQA attention over per-sequence lengths, RoPE and SwiGLU (examples/decode_layer.gdl)") {
  Expected<Program> compiled = compile_serving_example("decode_layer");
  RangeFor range = [](const TensorInfo& info) {
    ValueRange r = small_values(info);
    if (info.name == "pos") r.int_lo = 0, r.int_hi = 127;  // each sequence at its own position
    return r;
  };
  check_runs(*compiled, "decode layer", 4, {}, range);
}

TEST_CASE("state: a paged decode layer, sequences of different lengths in one pool (examples/paged_decode.gdl)") {
  Expected<Program> compiled = compile_serving_example("paged_decode");
  RangeFor range = small_values;
  std::mt19937_64 rng(seed_for("paged decode tables"));
  const PagedBatch batch = paged_batch(rng, {3, 40, 100, 126});
  // Three steps: every sequence moves on by one position.
  const EditRun steps = [&](int run, std::map<std::string, TensorData>& in) {
    std::vector<double> pos = batch.pos;
    for (double& p : pos) p += run;
    set_ints(in, "blocks", batch.blocks);
    set_ints(in, "pos", pos);
  };
  check_runs(*compiled, "paged decode", 3, {}, range, steps);

  // Each row equals that sequence's result whatever the other rows hold:
  // other inputs, positions and blocks (from the same pool); the same weights
  // and the pool as before.
  if (cpu_only) return;
  std::unique_ptr<Session> s = make_session(*compiled);
  std::map<std::string, TensorData> base = random_bindings(*compiled, {}, rng, range);
  steps(0, base);
  auto run = [&](const std::map<std::string, TensorData>& in) {
    bind_all(*s, in);  // sets the pool states too
    return run_and_read(*s, false).at("y");
  };
  const TensorData all = run(base);
  for (int b = 0; b < 4; ++b) {
    INFO("sequence " << b << " with the others changed");
    std::map<std::string, TensorData> other = base;  // the same weights and pool
    other.at("x") = random_bindings(*compiled, {}, rng, range).at("x");
    // Row b keeps its input, position and blocks; the others swap their blocks among themselves.
    std::vector<double> blocks = batch.blocks, pos = {90, 7, 55, 20};
    const int next = (b + 1) % 4, after = (b + 2) % 4;
    std::swap_ranges(blocks.begin() + next * 8, blocks.begin() + next * 8 + 8, blocks.begin() + after * 8);
    pos[static_cast<size_t>(b)] = batch.pos[static_cast<size_t>(b)];
    set_ints(other, "blocks", blocks);
    set_ints(other, "pos", pos);
    TensorData& x = other.at("x");
    const size_t row = x.bytes.size() / 4;
    std::copy_n(base.at("x").bytes.begin() + static_cast<long>(row * b), row, x.bytes.begin() + static_cast<long>(row * b));
    const TensorData alone = run(other);
    // Equal within f32 tolerance.
    auto row_of = [&](const TensorData& y) {
      TensorData r = y;
      const size_t bytes = y.bytes.size() / 4;
      r.shape = {y.shape.back()};
      r.bytes.assign(y.bytes.begin() + static_cast<long>(bytes * b), y.bytes.begin() + static_cast<long>(bytes * (b + 1)));
      return r;
    };
    CHECK(relative_error(row_of(alone), row_of(all)) < tolerance(ElementType::kF32));
  }
}

TEST_CASE("state: a causal prefill fills the cache chunk by chunk (examples/prefill.gdl)") {
  Expected<Program> compiled = compile_serving_example("prefill");
  RangeFor range = small_values;
  // Chunks of 16, 5 and 64 tokens, each starting where the last ended (sequence 1 one position later).
  const std::vector<int64_t> chunks = {16, 5, 64};
  const EditRun chunked = [&](int run, std::map<std::string, TensorData>& in) {
    double start = 0;
    for (int r = 0; r < run; ++r) start += static_cast<double>(chunks[static_cast<size_t>(r)]);
    set_ints(in, "start", {start, start + 1});
  };
  check_runs(*compiled, "prefill", 3, chunks, range, chunked);

  // Two chunks give the last tokens the same result as the whole prompt at once.
  if (cpu_only) return;
  std::mt19937_64 rng(seed_for("prefill whole"));
  std::map<std::string, TensorData> whole = random_bindings(*compiled, {21}, rng, range);
  set_ints(whole, "start", {0, 0});
  for (const TensorInfo& info : compiled->states()) whole.erase(info.name);  // zero caches
  std::unique_ptr<Session> one = make_session(*compiled), two = make_session(*compiled);
  bind_all(*one, whole);
  const TensorData all = run_and_read(*one, false).at("y");  // [2, 21, H]
  const TensorData& x = whole.at("x");
  const size_t h = x.shape.back(), row = h * 4;
  TensorData y2;
  for (int chunk = 0; chunk < 2; ++chunk) {
    const int64_t first = chunk == 0 ? 0 : 16, count = chunk == 0 ? 16 : 5;
    std::map<std::string, TensorData> in = whole;
    TensorData& part = in.at("x");
    part.shape = {2, count, static_cast<int64_t>(h)};
    part.bytes.clear();
    for (int64_t b = 0; b < 2; ++b)
      part.bytes.insert(part.bytes.end(), x.bytes.begin() + static_cast<long>((b * 21 + first) * row),
                        x.bytes.begin() + static_cast<long>((b * 21 + first + count) * row));
    set_ints(in, "start", {static_cast<double>(first), static_cast<double>(first)});
    bind_all(*two, in);
    y2 = run_and_read(*two, false).at("y");
  }
  TensorData tail = y2;  // the whole run's last 5 tokens, [2, 5, H]
  tail.bytes.clear();
  for (int64_t b = 0; b < 2; ++b)
    tail.bytes.insert(tail.bytes.end(), all.bytes.begin() + static_cast<long>((b * 21 + 16) * row),
                      all.bytes.begin() + static_cast<long>((b * 21 + 21) * row));
  CHECK(relative_error(y2, tail) < 1e-4);  // f32, summed in another order
}

TEST_CASE("limits: a state of more than 2^31 elements is updated whole and written past element 2^31") {
  if (cpu_only) return;  // the CPU reference would hold 2^31 doubles
  // 17 * 8 * 4096 * 4096 = 2^31 + 2^27 f16 elements (4.3 GB).
  Program program = compile_text(R"(program big;
state m : f16[17, 8, 4096, 4096];
input row : f16[4096];
input at : i32[1];
output last : f16[4096];
m = m * 0.5 + 1.0;
let rows = reshape(m[16, 7], [4096, 4096]);
m[16, 7] = scatter(rows, at, reshape(row, [1, 4096]), axis = 0);
last = m[16, 7, 4095];
)");
  std::unique_ptr<Session> s = make_session(program);
  std::vector<double> values(4096);
  for (size_t i = 0; i < values.size(); ++i) values[i] = 0.25 * static_cast<double>(i % 64) + 2;
  const std::vector<uint8_t> row_bytes = encode_elements(ElementType::kF16, values);
  std::vector<uint16_t> row(4096);
  std::memcpy(row.data(), row_bytes.data(), row_bytes.size());
  const int32_t at = 4095;
  GDL_REQUIRE_OK(s->bind("row", row.data(), row.size() * 2, ElementType::kF16, {4096}));
  GDL_REQUIRE_OK(s->bind("at", &at, 4, ElementType::kI32, {1}));
  for (int run = 0; run < 2; ++run) GDL_REQUIRE_OK(s->run());
  std::vector<uint16_t> last(4096);
  GDL_REQUIRE_OK(s->read("last", last.data(), last.size() * 2));
  CHECK(last == row);  // the last row of the tensor: elements 2^31 + 2^27 - 4096 onwards
  // Every other element ran m = m * 0.5 + 1 twice from zero: 1.5.
  const TensorInfo& info = *program.find_state("m");
  std::vector<uint16_t> all(info.max_bytes / 2);
  GDL_REQUIRE_OK(s->read_state("m", all.data(), all.size() * 2));
  const std::vector<double> one_and_half = {1.5};
  const std::vector<uint8_t> bytes = encode_elements(ElementType::kF16, one_and_half);
  const uint16_t want = static_cast<uint16_t>(bytes[0] | bytes[1] << 8);
  size_t wrong = 0;
  for (size_t i = 0; i + 4096 < all.size(); ++i) wrong += all[i] != want;
  CHECK(wrong == 0);
  CHECK(std::equal(row.begin(), row.end(), all.end() - 4096));
}
