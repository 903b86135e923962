// Attention decode over a KV cache (examples/attention.gdl): 32 heads,
// head dim 128, capacity 4096, kv_len valid positions (a device scalar).
// usage: run_attention [attention.gdl | attention.gdlx]
#include "example_runner.h"

int main(int argc, char** argv) {
  gdl::examples::ExampleSpec spec;
  spec.name = "attention";
  spec.note = "attention decode: softmax(q.k / sqrt(D)) over kv_len of 4096 cached positions, then @ w_o";
  spec.values["kv_len"] = {0, 0, 3000, 3000};  // valid positions: a content update, no graph change
  spec.values["w_o"] = {0.005, 0.03};
  return gdl::examples::run_example(argc, argv, spec);
}
