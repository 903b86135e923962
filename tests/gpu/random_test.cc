// rand and randn on the device: each replay draws new numbers with no host
// work, a seed reproduces the stream by graph and by eager launch, and the
// uniforms equal the CPU reference's bit for bit (the normals within the
// dtype's tolerance), in a dropout whose mask feeds argmax and topk.
#include <cstring>

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

}  // namespace

TEST_CASE("random: replays differ, a seed reproduces them, and the numbers are the CPU reference's") {
  Program program = compile_text(kDropout);
  std::mt19937_64 rng(seed_for("random"));
  std::map<std::string, TensorData> inputs = random_bindings(program, {}, rng);
  std::map<std::string, TensorData> with_state = inputs;
  with_state["rng.state"] = state_words(7, 0);
  std::map<std::string, TensorData> want = reference(program, with_state);
  want.erase("rng.state");  // compared as outputs only
  if (cpu_only) return;
  std::unique_ptr<Session> s = make_session(program);
  bind_inputs(*s, inputs);
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
