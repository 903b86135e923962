// Matmuls that read a transposed operand or a column window of their
// weight in place (no copy step) on the GPU against the CPU reference, on
// every kernel the shapes reach: the rows kernel (few rows, with K splits
// at a long K), the tensor-core and SIMT tiles (many rows, batched), under
// both dim policies, with vector-friendly and ragged extents and windows
// that start off a 16-byte boundary.
#include <string>
#include <vector>

#include "gdl/jit.h"
#include "gpu_test_util.h"
#include "plan.h"
#include "program_impl.h"

using namespace gdl;
using namespace gdl::gpu_test;

namespace {

std::string layouts_program(const std::string& t, const std::string& policy) {
  return "program layouts;\ndim B in [1, 300] policy(" + policy + ");\n" +
         "input x : " + t + "[B, 136];\n"
         "param w : " + t + "[200, 136];\n"          // x @ transpose(w): b transposed
         "input x2 : " + t + "[B, 75];\n"
         "param w2 : " + t + "[72, 75];\n"           // K odd: element loads
         "input x3 : " + t + "[B, 2048];\n"
         "param w3 : " + t + "[96, 2048];\n"         // long K: split
         "param wqkv : " + t + "[136, 120];\n"       // column windows of a fused projection
         "param wt : " + t + "[120, 136];\n"         // a window of a transposed b
         "input y : " + t + "[B, 24];\n"
         "input u : " + t + "[B, 40];\n"             // transpose(y) @ u: a transposed, K = B padded
         "input q3 : " + t + "[4, 6, 32];\n"
         "input k3 : " + t + "[4, 10, 32];\n"        // batched, b with its own batch
         "output o : " + t + "[B, 200];\noutput o2 : " + t + "[B, 72];\noutput o3 : " + t + "[B, 96];\n"
         "output q : " + t + "[B, 40];\noutput k : " + t + "[B, 40];\noutput v : " + t + "[B, 39];\n"
         "output p : " + t + "[B, 40];\noutput z : " + t + "[24, 40];\noutput s : " + t + "[4, 6, 10];\n"
         "o = x @ transpose(w);\no2 = x2 @ transpose(w2);\no3 = x3 @ transpose(w3);\n"
         "let qkv = x @ wqkv;\nq = qkv[:, 0:40];\nk = qkv[:, 40:80] * 2.0;\nv = qkv[:, 81:120];\n"
         "p = (x @ transpose(wt))[:, 8:48];\n"
         "z = transpose(y) @ u;\n"
         "s = q3 @ transpose(k3);\n";
}

}  // namespace

TEST_CASE("matmul layouts: transposed operands and column windows match the CPU reference on every kernel") {
  for (const std::string t : {"f16", "bf16", "f32"})
    for (const std::string policy : {"buckets", "update"}) {
      Program program = compile_text(layouts_program(t, policy));
      // No step copies a transpose or a slice: every one is read in place.
      const plan::Plan& plan = program.internals().plan();
      int matmuls = 0;
      for (const plan::Step& step : plan.steps)
        for (ir::ValueId v : step.values) {
          const ir::Op op = plan.graph.node(v).op;
          CHECK(op != ir::Op::kTranspose);
          CHECK(op != ir::Op::kSlice);
          matmuls += op == ir::Op::kMatMul;
        }
      CHECK(matmuls == 9);
      for (int64_t b : {1, 5, 16, 17, 300}) {
        INFO(t << ", " << policy << ": B = " << b);
        CHECK(check_program(program, seed_for("matmul layouts/" + t + policy + std::to_string(b)), {b}));
      }
    }
}
