// Run-time values in subscripts on the GPU against the CPU reference, under
// both dim policies: x[T - 1] and tab[pos] (a gather along the axis), and
// tab[0:T] (the first T rows of a static axis), at several values of T; and
// slices behind a run-time axis, views whose address moves with the layout.
#include <string>
#include <vector>

#include "gpu_test_util.h"
#include "plan.h"
#include "program_impl.h"

using namespace gdl;
using namespace gdl::gpu_test;

TEST_CASE("runtime values: run-time indices and slice bounds match the CPU reference") {
  for (const std::string policy : {"buckets", "update"}) {
    Program program = compile_text("program pick;\ndim T in [1, 300] policy(" + policy +
                                   ");\ninput x : f32[T, 40];\nparam tab : f16[512, 40];\ninput pos : i32;\n"
                                   "output last : f32[40];\noutput row : f16[40];\noutput prefix : f32[T, 40];\n"
                                   "last = x[T - 1] * 2.0;\nrow = tab[pos];\nprefix = x + cast(tab[0:T], f32);\n");
    for (int64_t t : {1, 37, 300})
      for (int64_t pos : {0, 511, 512, -1}) {  // the last two are outside tab: a zero row
        INFO(policy << ": T = " << t << ", pos = " << pos);
        CHECK(check_program(program, seed_for("runtime values/" + policy + std::to_string(t)), {t},
                            int_tensor_is("pos", pos)));
      }
  }
}

namespace {

// One session runs the dims of `runs` in turn (every third eagerly), each
// against the CPU reference (of `wide` where given: the program with a bound
// that admits every run), with padding poisoned: under updates a view's
// address follows the dims through node updates, under buckets each
// bucket's graph has its own, and the eager fallback plans for a larger bound.
void check_runs(const Program& program, const std::string& what, const std::vector<std::vector<int64_t>>& runs,
                const SessionOptions& options = {}, const Program* wide = nullptr) {
  if (cpu_only) return;
  std::unique_ptr<Session> s = make_session(program, options, /*poison_padding=*/true);
  std::mt19937_64 rng(seed_for(what));
  for (size_t i = 0; i < runs.size(); ++i) {
    INFO(what << ", run " << i << ", dims " << runs[i][0] << (runs[i].size() > 1 ? " x " + std::to_string(runs[i][1]) : ""));
    std::map<std::string, TensorData> tensors = random_bindings(wide ? *wide : program, runs[i], rng);
    bind_all(*s, tensors);
    CHECK(expect_match(run_and_read(*s, i % 3 == 2), reference(wide ? *wide : program, tensors), what));
  }
  CHECK(s->stats().reinstantiations == 0);
}

std::string one_dim_text(const std::string& policy, int64_t hi) {
  return "program dv;\ndim T in [1, " + std::to_string(hi) + "] policy(" + policy +
         ");\ninput x : f32[3, T, 8];\ninput w : f32[8, 8];\noutput y : f32[T, 8];\noutput h1 : f32[T, 8];\n"
         "let h = x * 2.0;\ny = x[1] @ w + x[2];\nh1 = h[1];\n";
}

}  // namespace

// x[1] of x : f32[3, T, 8] lies T * 32 bytes in (the bucket's capacity under
// buckets, the actual T under updates), and so does the output h1 = h[1],
// which read() finds at the run's layout; x[1] of f32[2, B, T, 8] lies
// B * T * 32 bytes in, z[2, 3] at 320 * T + 480. Every slice is a view: no
// slice step.
TEST_CASE("runtime values: slices behind a run-time axis are views at the run's layout") {
  for (const std::string policy : {"buckets", "update"}) {
    Program one = compile_text(one_dim_text(policy, 64));
    Program two = compile_text("program dv2;\ndim B in [1, 4] policy(" + policy + ");\ndim T in [4, 16] policy(" +
                               policy +
                               ");\ninput x : f32[2, B, T, 8];\ninput z : f32[3, T, 5, 8];\n"
                               "output y : f32[B, T, 8];\noutput r : f32[5, 8];\ny = x[1] * 2.0;\nr = z[2, 3] + 1.0;\n");
    for (const Program* program : {&one, &two}) {
      const plan::Plan& plan = program->internals().plan();
      int views = 0;
      for (size_t v = 0; v < plan.graph.nodes.size(); ++v)
        views += plan.graph.nodes[v].op == ir::Op::kSlice && !plan.buffers[v].terms.empty();
      CHECK(views == (program == &one ? 3 : 2));
      for (const plan::Step& step : plan.steps)
        for (ir::ValueId v : step.values) CHECK(plan.graph.node(v).op != ir::Op::kSlice);
    }
    check_runs(one, "dynamic views/" + policy, {{1}, {5}, {37}, {64}, {5}, {2}, {33}, {37}, {1}});
    check_runs(two, "dynamic views 2/" + policy, {{1, 4}, {3, 5}, {4, 16}, {2, 11}, {3, 9}, {1, 16}, {4, 4}, {3, 5}});

    // Above the bound: the eager fallback's plan puts the views at its own layout.
    Program narrow = compile_text(one_dim_text(policy, 16));
    SessionOptions options;
    options.eager_fallback = jit::recompiler();
    check_runs(narrow, "dynamic views fallback/" + policy, {{40}, {5}, {20}, {16}, {64}}, options, &one);
  }
}
