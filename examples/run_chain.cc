// A chain of 100 x = x * a + b steps over f32[4096] (examples/chain.gdl):
// what fusion and a graph save over 200 eager launches.
// usage: run_chain [chain.gdl | chain.gdlx]
#include "example_runner.h"

int main(int argc, char** argv) {
  gdl::examples::ExampleSpec spec;
  spec.name = "chain";
  spec.note = "elementwise chain: 100 x (x * a + b) over f32[4096]";
  spec.values["a"] = {0.5, 1.0};
  spec.scalars["b"] = 0.25;
  return gdl::examples::run_example(argc, argv, spec);
}
