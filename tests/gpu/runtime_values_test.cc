// Run-time values in subscripts on the GPU against the CPU reference, under
// both dim policies: x[T - 1] and tab[pos] (a gather along the axis), and
// tab[0:T] (the first T rows of a static axis), at several values of T.
#include <string>
#include <vector>

#include "gpu_test_util.h"

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
