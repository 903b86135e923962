// Residual MLP decode step (examples/mlp.gdl): L = 8 blocks, H = 1024, f16.
// usage: run_mlp [mlp.gdl | mlp.gdlx] [B=1..64]
#include "example_runner.h"

int main(int argc, char** argv) {
  gdl::examples::ExampleSpec spec;
  spec.name = "mlp";
  spec.note = "residual MLP: y = x + alpha * gelu(layernorm(x) @ W[l] + bias[l]), 8 layers";
  spec.dims["B"] = 1;                        // decode: one row (pass B=... for more)
  spec.values["W"] = {0.005, 0.05};          // about 1/sqrt(H): activations stay O(1) in f16
  spec.values["bias"] = {0.01, 0.1};
  spec.scalars["alpha"] = 0.5;               // a node-parameter update before the first run
  return gdl::examples::run_example(argc, argv, spec);
}
