// What the example host programs share: compile (or load) a program, bind
// random inputs, run it by graph and eagerly, check both against the CPU
// reference, and report memory and timings. Each run_<name>.cc only says
// which program and which values make sense for it.
#pragma once

#include <functional>
#include <map>
#include <string>

#include "gdl/gdl.h"

namespace gdl::examples {

// Random values for one tensor: floats uniform in +-[lo, hi], ints in [int_lo, int_hi].
struct Values {
  double lo = 0.1, hi = 1.0;
  int64_t int_lo = -50, int_hi = 50;
};

struct ExampleSpec {
  std::string name;                          // "mlp": compiles examples/mlp.gdl by default
  std::map<std::string, int64_t> dims;       // run-time dims; default: upper bounds
  std::map<std::string, Values> values;      // per input / param name; default Values{}
  std::map<std::string, double> scalars;     // set after binding
  std::string note;                          // one line printed first
};

// usage: run_<name> [program.gdl | program.gdlx] [DIM=VALUE ...]
// Returns the process exit code: 0 when every output matched the reference
// (or there was no GPU and the CPU reference ran), 1 on a mismatch, 2 on an error.
int run_example(int argc, char** argv, ExampleSpec spec);

}  // namespace gdl::examples
