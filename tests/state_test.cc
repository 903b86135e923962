// State tensors and in-place writes: scatter and update_slice semantics on
// hand-computed values, the inplace pass's placement (no copy of a cache
// where none is needed, a named copy where one is), and the planned CPU
// execution of every plan against the interpreter.
#include <doctest/doctest.h>

#include <cmath>
#include <fstream>
#include <random>
#include <sstream>

#include "cpu_program.h"
#include "plan/check.h"
#include "plan/print.h"

namespace gdl {
namespace {

using namespace test_programs;

using ir::Op;

int count_steps_with(const plan::Plan& p, Op op) {
  int n = 0;
  for (const plan::Step& s : p.steps)
    for (ir::ValueId v : s.values) n += p.graph.node(v).op == op;
  return n;
}

TEST_CASE("scatter replaces the rows index names and skips indices outside the axis") {
  ir::Graph g = compile_text(R"(program s;
input base : f32[2, 4, 3];
input index : i32[2, 2];
input rows : f32[2, 2, 3];
output y : f32[2, 4, 3];
y = scatter(base, index, rows, axis = 1);
)");
  Bindings b;
  std::vector<double> base(24);
  for (int i = 0; i < 24; ++i) base[i] = i + 1;
  b.tensors["base"] = tensor(DType::kF32, {2, 4, 3}, base);
  b.tensors["index"] = tensor(DType::kI32, {2, 2}, {3, -1, 0, 4});  // -1 and 4 are outside [0, 4): not written
  b.tensors["rows"] = tensor(DType::kF32, {2, 2, 3}, {-1, -2, -3, -4, -5, -6, -7, -8, -9, -10, -11, -12});
  std::map<std::string, HostTensor> out = run_both(g, b);
  std::vector<double> want = base;
  want[9] = -1, want[10] = -2, want[11] = -3;    // batch 0, position 3
  want[12] = -7, want[13] = -8, want[14] = -9;   // batch 1, position 0
  CHECK(out.at("y").data == want);
}

TEST_CASE("scatter broadcasts an index of extent 1 over the dims before the axis") {
  ir::Graph g = compile_text(R"(program s;
input base : f32[2, 3, 2];
input at : i32[1];
input rows : f32[2, 2];
output y : f32[2, 3, 2];
y = scatter(base, at, rows, axis = 1);
)");
  Bindings b;
  b.tensors["base"] = tensor(DType::kF32, {2, 3, 2}, {1, 2, 3, 4, 5, 6, 7, 8, 9, 10, 11, 12});
  b.tensors["at"] = tensor(DType::kI32, {1}, {2});
  b.tensors["rows"] = tensor(DType::kF32, {2, 2}, {-1, -2, -3, -4});
  CHECK(run_both(g, b).at("y").data == std::vector<double>{1, 2, 3, 4, -1, -2, 7, 8, 9, 10, -3, -4});
}

TEST_CASE("a region assignment replaces the region of a let") {
  ir::Graph g = compile_text(R"(program r;
input x : f32[3, 2];
input v : f32[2];
output y : f32[3, 2];
let t = x * 2.0;
t[1] = v;
t[2, 0:1] = v[1:2];
y = t;
)");
  Bindings b;
  b.tensors["x"] = tensor(DType::kF32, {3, 2}, {1, 2, 3, 4, 5, 6});
  b.tensors["v"] = tensor(DType::kF32, {2}, {-1, -2});
  CHECK(run_both(g, b).at("y").data == std::vector<double>{2, 4, -1, -2, -2, 12});
}

const char* kCache = R"(program kv;
const L = 2;
const S = 4;
const T = 16;
const D = 8;
dim B in [1, 4];
state k_cache : f32[L, S, T, D];
input slot : i32[B];
input pos : i32[B];
input k : f32[L, B, D];
input q : f32[B, D];
output y : f32[L, B, T];

let scores = q @ transpose(k_cache[0, 0], [1, 0]);
for l in 0..L {
  let rows = reshape(k_cache[l], [S * T, D]);
  k_cache[l] = reshape(scatter(rows, slot * T + pos, k[l], axis = 0), [S, T, D]);
}
let later = q @ transpose(k_cache[1, 0], [1, 0]);
y = concat(reshape(scores, [1, B, T]), reshape(later, [1, B, T]), axis = 0);
)";

TEST_CASE("a KV cache in state is written in place: only the rows, and every reader of the old value first") {
  ir::Graph g = compile_text(kCache);
  plan::Plan p = plan_program(g);
  CHECK(count_steps_with(p, Op::kCopy) == 0);         // no copy of the cache
  CHECK(count_steps_with(p, Op::kUpdateSlice) == 0);  // the layer updates are views of the scatters
  CHECK(count_steps_with(p, Op::kScatter) == 2);
  const plan::Buffer& cache = p.buffers.at(static_cast<size_t>(p.graph.leaves(Op::kState).at(0)));
  for (const plan::Step& s : p.steps) {
    if (p.graph.node(s.result).op != Op::kScatter) continue;
    const plan::Buffer& b = p.buffers.at(static_cast<size_t>(s.result));
    CHECK(b.offset >= cache.offset);
    CHECK(b.offset + b.bytes <= cache.offset + cache.bytes);
  }
  CHECK(plan::print_plan(p).find("copy of") == std::string::npos);

  std::mt19937 rng(7);
  for (int64_t batch : {1, 3, 4}) {
    Bindings b;
    b.dims = {batch};
    b.tensors["k_cache"] = random_tensor(rng, DType::kF32, {2, 4, 16, 8});
    b.tensors["slot"] = random_tensor(rng, DType::kI32, {batch}, 0, 3);
    b.tensors["pos"] = random_tensor(rng, DType::kI32, {batch}, -1, 16);  // -1 and 16: rows not written
    b.tensors["k"] = random_tensor(rng, DType::kF32, {2, batch, 8});
    b.tensors["q"] = random_tensor(rng, DType::kF32, {batch, 8});
    std::map<std::string, HostTensor> out = run_both(g, b);
    CHECK(out.at("k_cache").data != b.tensors["k_cache"].data);
  }
}

TEST_CASE("a reader of the old value that needs nothing new runs before the write, without a copy") {
  ir::Graph g = compile_text(R"(program c;
state s : f32[4, 2];
input at : i32[1];
input row : f32[1, 2];
output y : f32[4, 2];
let old = s;
s = scatter(s, at, row, axis = 0);
y = old * 2.0 + s;
)");
  plan::Plan p = plan_program(g);
  CHECK(count_steps_with(p, Op::kCopy) == 0);
  std::mt19937 rng(4);
  Bindings b;
  b.tensors["s"] = random_tensor(rng, DType::kF32, {4, 2});
  b.tensors["at"] = tensor(DType::kI32, {1}, {1});
  b.tensors["row"] = random_tensor(rng, DType::kF32, {1, 2});
  run_both(g, b);
}

TEST_CASE("a write whose old value is read afterwards copies, and the plan says why") {
  ir::Graph g = compile_text(R"(program c;
state s : f32[4, 2];
input at : i32[1];
input row : f32[1, 2];
output y : f32[4, 2];
let old = s;
s = scatter(s, at, row, axis = 0);
y = old * s;
)");
  plan::Plan p = plan_program(g);
  CHECK(count_steps_with(p, Op::kCopy) >= 1);
  CHECK(plan::print_plan(p).find("reads the old value after the write") != std::string::npos);
  std::mt19937 rng(3);
  Bindings b;
  b.tensors["s"] = random_tensor(rng, DType::kF32, {4, 2});
  b.tensors["at"] = tensor(DType::kI32, {1}, {2});
  b.tensors["row"] = random_tensor(rng, DType::kF32, {1, 2});
  run_both(g, b);
}

TEST_CASE("a scatter that reads its own target as the updates writes into a copy") {
  // On the GPU, in place, the rotation read rows it had already overwritten.
  ir::Graph g = compile_text(R"(program rotate;
state s : f32[11, 4];
output y : f32[11, 4];
s = scatter(s, (arange(11) + 4) % 11, s, axis = 0);
y = s * 2.0;
)");
  plan::Plan p = plan_program(g);
  CHECK(count_steps_with(p, Op::kCopy) >= 1);
  CHECK(plan::print_plan(p).find("it reads the value it overwrites") != std::string::npos);
  std::mt19937 rng(5);
  Bindings b;
  b.tensors["s"] = random_tensor(rng, DType::kF32, {11, 4});
  run_both(g, b);
}

TEST_CASE("an optimizer's new weights and moments are computed into the states' memory: no step copies a state") {
  std::ifstream file(std::string(GDL_SOURCE_DIR) + "/examples/train_mlp.gdl");
  std::stringstream text;
  text << file.rdbuf();
  ir::Graph g = compile_text(text.str());
  plan::Plan p = plan_program(g);
  // Eight states, each given its new value by an update step that computes
  // it (the velocity's in the gradient matmul's epilogue); none alone.
  int updates = 0;
  for (const plan::Step& st : p.steps)
    if (p.graph.node(st.result).op == Op::kUpdateSlice) {
      ++updates;
      CHECK(st.values.size() > 1);
    }
  CHECK(updates == 8);
  CHECK(count_steps_with(p, Op::kCopy) == 0);
  const std::string listing = plan::print_plan(p);
  CHECK(listing.find("(state 'v_w1' = its new value, computed in this step)") != std::string::npos);
  CHECK(listing.find("a whole copy") == std::string::npos);
  std::mt19937 rng(6);
  Bindings b = random_bindings(g, {37}, rng);
  run_both(g, b);  // the planned interpreter equals the plain one (it reads a step's inputs before it writes: no race shows here)
}

TEST_CASE("a state's new value is computed in its writing step only where it reads the state at its own elements") {
  // w[0:1, :] is read by every row: a kernel writing w row by row would
  // overwrite row 0 before other rows read it, so that part runs before.
  ir::Graph g = compile_text(R"(program s;
state w : f32[4, 8];
input x : f32[4, 8];
w = w * 0.5 + w[0:1, :] + x;
)");
  plan::Plan p = plan_program(g);
  CHECK(plan::check_plan(p) == "");
  int writes = 0;
  for (const plan::Step& st : p.steps) {
    if (p.graph.node(st.result).op != Op::kUpdateSlice) continue;
    ++writes;
    for (ir::ValueId v : st.values)
      for (ir::ValueId a : p.graph.node(v).args) CHECK(p.graph.node(a).op != Op::kSlice);
    CHECK(st.values.size() > 1);  // x is still added in the writing step
  }
  CHECK(writes == 1);
  std::mt19937 rng(7);
  Bindings b = random_bindings(g, {}, rng);
  run_both(g, b);
}

TEST_CASE("a state given a new whole value gets it after every read of the old one") {
  ir::Graph g = compile_text(R"(program m;
state m : f32[8];
state steps : i32;
input g : f32[8];
output y : f32[8];
y = m * 3.0;
m = m * 0.9 + g * 0.1;
steps = steps + 1;
)");
  std::mt19937 rng(5);
  Bindings b;
  b.tensors["m"] = random_tensor(rng, DType::kF32, {8});
  b.tensors["steps"] = tensor(DType::kI32, {}, {41});
  b.tensors["g"] = random_tensor(rng, DType::kF32, {8});
  for (plan::PlanOptions options : {plan::PlanOptions{}, plan::PlanOptions{false, false, false}}) {
    std::map<std::string, HostTensor> out = run_both(g, b, options);
    CHECK(out.at("steps").data == std::vector<double>{42});
    CHECK(out.at("y").data[0] == doctest::Approx(b.tensors["m"].data[0] * 3.0).epsilon(1e-6));
  }
}

// examples/rolling_conv.gdl: the ring of the last K inputs, one column
// written in place per step, against the causal convolution over the
// whole history (zeros before step 0).
TEST_CASE("rolling conv example: one column moves in place, and steps equal the convolution over the history") {
  std::ifstream file(std::string(GDL_SOURCE_DIR) + "/examples/rolling_conv.gdl");
  std::stringstream text;
  text << file.rdbuf();
  ir::Graph g = compile_text(text.str());
  plan::Plan p = plan_program(g);
  CHECK(count_steps_with(p, Op::kCopy) == 0);
  CHECK(count_steps_with(p, Op::kUpdateSlice) == 0);  // no whole-window write
  CHECK(count_steps_with(p, Op::kScatter) == 1);
  const std::string listing = plan::print_plan(p);
  CHECK(listing.find("in place over") != std::string::npos);
  CHECK(listing.find("copy of") == std::string::npos);

  constexpr int64_t B = 4, C = 256, K = 4, kSteps = 9;  // more than twice round the ring
  std::mt19937 rng(21);
  const HostTensor w = random_tensor(rng, DType::kF32, {C, K});
  const HostTensor bias = random_tensor(rng, DType::kF32, {C});
  std::vector<HostTensor> history;
  HostTensor window = tensor(DType::kF32, {B, C, K}, std::vector<double>(B * C * K, 0.0));
  for (int64_t t = 0; t < kSteps; ++t) {
    CAPTURE(t);
    history.push_back(random_tensor(rng, DType::kF32, {B, C}));
    Bindings b;
    b.tensors["w"] = w;
    b.tensors["bias"] = bias;
    b.tensors["window"] = window;
    b.tensors["x"] = history.back();
    b.tensors["pos"] = tensor(DType::kI32, {}, {static_cast<double>(t)});
    std::map<std::string, HostTensor> out = run_both(g, b);
    window = out.at("window");
    for (int64_t bc = 0; bc < B * C; ++bc) {
      const int64_t c = bc % C;
      double sum = bias.data[static_cast<size_t>(c)];
      for (int64_t j = 0; j < K; ++j) {  // tap j meets step t - K + 1 + j
        const int64_t step = t - K + 1 + j;
        if (step >= 0) sum += w.data[static_cast<size_t>(c * K + j)] * history[static_cast<size_t>(step)].data[static_cast<size_t>(bc)];
      }
      const double want = sum / (1 + std::exp(-sum));
      CHECK(out.at("y").data[static_cast<size_t>(bc)] == doctest::Approx(want).epsilon(1e-5));
    }
    // Column t % K holds this step's x; the others what they held.
    for (int64_t bc = 0; bc < B * C; ++bc)
      CHECK(window.data[static_cast<size_t>(bc * K + t % K)] == history.back().data[static_cast<size_t>(bc)]);
  }
}

TEST_CASE("a state no statement changes keeps its value") {
  ir::Graph g = compile_text(R"(program k;
state s : f32[3];
output y : f32[3];
y = s + 1.0;
)");
  Bindings b;
  b.tensors["s"] = tensor(DType::kF32, {3}, {1, -2, 3});
  std::map<std::string, HostTensor> out = run_both(g, b);
  CHECK(out.at("s").data == std::vector<double>{1, -2, 3});
  CHECK(out.at("y").data == std::vector<double>{2, -1, 4});
}

}  // namespace
}  // namespace gdl
