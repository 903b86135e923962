// rand and randn on the device: each replay draws new numbers with no host
// work, a seed reproduces the stream by graph and by eager launch, and the
// uniforms equal the CPU reference's bit for bit (the normals within the
// dtype's tolerance), in a dropout whose mask feeds argmax and topk.
// bernoulli and dropout likewise (their masks are rand's), and the
// dropout_topk example's mask and Gumbel noise over graph replays.
#include <cstring>
#include <filesystem>

#include "gpu_test_util.h"

using namespace gdl;
using namespace gdl::gpu_test;

namespace {

const char* kDropout = R"(program dropout;
input x : f32[64, 256];
output u : f32[64, 256];
output n : f16[1000];
output y : f32[64, 256];
output best : i32[64];
output top : i32[64, 4];
let keep = rand([64, 256]);
u = keep;
n = randn([1000], dtype = f16);
y = where(keep < 0.1, 0.0, x / 0.9);
best = argmax(y, axis = 1);
top = topk_indices(y, 4, axis = 1);
)";

TensorData state_words(uint64_t seed, uint64_t offset) {
  TensorData d;
  d.dtype = ElementType::kI32;
  d.shape = {4};
  const int32_t words[4] = {static_cast<int32_t>(static_cast<uint32_t>(seed)), static_cast<int32_t>(seed >> 32),
                            static_cast<int32_t>(static_cast<uint32_t>(offset)), static_cast<int32_t>(offset >> 32)};
  d.bytes.resize(sizeof(words));
  std::memcpy(d.bytes.data(), words, sizeof(words));
  return d;
}

// Random bindings for a program's params, inputs and states, the same with
// the rng state set to (seed, offset), and the CPU reference's outputs from
// those (the states left out: compared as outputs only).
struct Drawn {
  std::map<std::string, TensorData> inputs, with_state, want;
};
Drawn draw_reference(const Program& program, const std::string& name, uint64_t seed, uint64_t offset,
                     const RangeFor& range = {}) {
  Drawn d;
  std::mt19937_64 rng(seed_for(name));
  d.inputs = random_bindings(program, {}, rng, range);
  d.with_state = d.inputs;
  d.with_state["rng.state"] = state_words(seed, offset);
  d.want = reference(program, d.with_state);
  d.want.erase("rng.state");
  return d;
}

}  // namespace

TEST_CASE("random: replays differ, a seed reproduces them, and the numbers are the CPU reference's") {
  Program program = compile_text(kDropout);
  const Drawn d = draw_reference(program, "random", 7, 0);
  const std::map<std::string, TensorData>& want = d.want;
  if (cpu_only) return;
  std::unique_ptr<Session> s = make_session(program);
  bind_inputs(*s, d.inputs);
  GDL_REQUIRE_OK(s->seed_rng(7));
  std::map<std::string, TensorData> first = run_and_read(*s, false);
  CHECK(first.at("u").bytes == want.at("u").bytes);  // uniforms: bit for bit
  CHECK(expect_match(first, want, "first run after seed 7"));
  std::map<std::string, TensorData> second = run_and_read(*s, false);  // a replay with nothing changed
  CHECK(second.at("u").bytes != first.at("u").bytes);
  CHECK(second.at("n").bytes != first.at("n").bytes);
  GDL_REQUIRE_OK(s->seed_rng(7));
  std::map<std::string, TensorData> again = run_and_read(*s, true);  // eager, same seed
  CHECK(again.at("u").bytes == first.at("u").bytes);
  CHECK(again.at("n").bytes == first.at("n").bytes);
  CHECK(again.at("best").bytes == first.at("best").bytes);
  std::map<std::string, TensorData> third = run_and_read(*s, false);  // graph after eager: the stream goes on
  CHECK(third.at("u").bytes == second.at("u").bytes);
  CHECK(s->seed_rng(1).ok());
  // The mask drops about a tenth.
  size_t dropped = 0, count = first.at("u").bytes.size() / 4;
  for (size_t i = 0; i < count; ++i) {
    float v;
    std::memcpy(&v, first.at("u").bytes.data() + 4 * i, 4);
    dropped += v < 0.1f;
  }
  CHECK(dropped > count / 20);
  CHECK(dropped < count / 5);
}

TEST_CASE("random: seed_rng on a program without random ops is NotFound") {
  if (cpu_only) return;
  Program program = compile_text("program p;\ninput x : f32[4];\noutput y : f32[4];\ny = x * 2.0;\n");
  std::unique_ptr<Session> s = make_session(program);
  CHECK(s->seed_rng(3).code() == StatusCode::kNotFound);
}

namespace {

const char* kMasks = R"(program masks;
input x : f16[64, 256];
input w : f32[3000];
output y : f16[64, 256];
output m : bool[64, 256];
output v : f32[3000];
y = dropout(x, 0.2);
m = bernoulli(0.7, [64, 256]);
v = dropout(w * 3.0, 0.5) + 1.0;
)";

// Positions of the zeros of an output (the dropped elements of a dropout of
// non-zero values).
std::vector<bool> zeros(const TensorData& t) {
  const size_t count = t.bytes.size() / element_size(t.dtype);
  std::vector<bool> out;
  for (double v : decode_elements(t.dtype, t.bytes.data(), count)) out.push_back(v == 0);
  return out;
}

}  // namespace

TEST_CASE("random: bernoulli and dropout masks are the CPU reference's, new each replay, the same after seed_rng") {
  Program program = compile_text(kMasks);
  const Drawn d = draw_reference(program, "masks", 0x123456789ull, 77);
  const std::map<std::string, TensorData>& want = d.want;
  if (cpu_only) return;
  std::unique_ptr<Session> s = make_session(program);
  bind_all(*s, d.with_state);  // the state set directly: seed 0x123456789, offset 77
  std::map<std::string, TensorData> first = run_and_read(*s, false);
  CHECK(expect_match(first, want, "first run"));
  CHECK(first.at("m").bytes == want.at("m").bytes);
  CHECK(zeros(first.at("y")) == zeros(want.at("y")));  // the same elements dropped
  CHECK(first.at("v").bytes == want.at("v").bytes);     // f32: the same mask, scale and sum
  std::map<std::string, TensorData> second = run_and_read(*s, false);
  CHECK(second.at("m").bytes != first.at("m").bytes);
  CHECK(zeros(second.at("y")) != zeros(first.at("y")));
  bind_all(*s, d.with_state);
  std::map<std::string, TensorData> again = run_and_read(*s, true);  // eager, from the same state
  for (const auto& [name, t] : first) CHECK(again.at(name).bytes == t.bytes);
}

TEST_CASE("random: the dropout_topk example draws a new mask and noise each replay, and a seed replays them") {
  Expected<Program> compiled = jit::compile((std::filesystem::path(source_dir()) / "examples" / "dropout_topk.gdl").string());
  INFO(compiled.status().message());
  REQUIRE(compiled.ok());
  const Program& program = *compiled;
  // Logits of order 1, so that the Gumbel noise decides the sampled token.
  RangeFor range = [](const TensorInfo& t) {
    ValueRange r;
    if (t.name == "w_head") r.hi = 1.0 / 16, r.lo = r.hi / 10;
    return r;
  };
  const Drawn d = draw_reference(program, "dropout_topk", 11, 0, range);  // the state seed_rng(11) sets
  const std::map<std::string, TensorData>& want = d.want;
  CHECK(want.at("picked").bytes == want.at("top_logits").bytes);  // the logits at the topk indices
  if (cpu_only) return;
  std::unique_ptr<Session> s = make_session(program);
  bind_all(*s, d.inputs);
  GDL_REQUIRE_OK(s->seed_rng(11));
  std::map<std::string, TensorData> first = run_and_read(*s, false);
  CHECK(expect_match(first, want, "first replay after seed 11"));
  CHECK(first.at("picked").bytes == first.at("top_logits").bytes);
  std::map<std::string, TensorData> second = run_and_read(*s, false);  // the same graph, replayed
  CHECK(second.at("top_logits").bytes != first.at("top_logits").bytes);  // another dropout mask
  CHECK(second.at("sampled").bytes != first.at("sampled").bytes);        // other noise
  GDL_REQUIRE_OK(s->seed_rng(11));
  std::map<std::string, TensorData> replayed = run_and_read(*s, false);
  for (const auto& output : first) {
    const std::string& name = output.first;
    const TensorData& t = output.second;
    INFO("output " << name);
    CHECK(replayed.at(name).bytes == t.bytes);  // bit for bit
  }
  GDL_REQUIRE_OK(s->seed_rng(11));
  std::map<std::string, TensorData> eager = run_and_read(*s, true);
  for (const auto& output : first) {
    const std::string& name = output.first;
    const TensorData& t = output.second;
    INFO("output " << name << ", eager");
    CHECK(eager.at(name).bytes == t.bytes);
  }
}
