// The program that the GPU dynamic test runs and the CPU buckets test checks
// in capacity mode, kept in one place so that both test the same text.
#pragma once

namespace gdl::testing {

// layernorm, matmul, gelu, reductions and softmax over B (axis 0), and an
// input and an output whose run-time dim is not the leading axis (strided
// copies in bind and read).
inline constexpr const char* kDynamicProgram = R"(program dyn;
dim B in [1, 48] buckets(4, 16, 48);
param w : f32[64, 32];
param bias : f32[32];
input x : f32[B, 64];
input m : f32[8, B];
scalar alpha : f32 = 1.0;
output y : f32[B, 32];
output colsum : f32[32];
output colmean : f32[32];
output colmax : f32[32];
output probs : f32[B, 32];
output msum : f32[8];
output mscaled : f32[8, B];
let h = gelu(layernorm(x) @ w + bias) * alpha;
y = h;
colsum = sum(h, axis = 0);
colmean = mean(h, axis = 0);
colmax = max(h, axis = 0);
probs = softmax(h, axis = 0);
msum = sum(m, axis = 1);
mscaled = m * 2.0 + 1.0;
)";

}  // namespace gdl::testing
