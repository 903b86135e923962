// A random program generator for differential testing (Csmith's idea for
// gdl): well-typed .gdl programs over the ops, dtypes, run-time dims,
// views, state and random numbers, built statement by statement from a
// pool of typed values. The same seed gives the same program.
//
// What a generated program may compute is chosen so that every executor
// must agree with the CPU reference within the dtype's tolerance:
// - values stay bounded (inputs are small, a product is scaled back, exp
//   and log only see bounded or shifted arguments), so f16 never overflows;
// - an op that jumps (floor, round, sign, a comparison, argmax, topk, a
//   float-to-int cast) only reads "exact" values: ones that every executor
//   computes bit for bit (inputs, i32 arithmetic, a single f32 +, -, *),
//   so a last-bit difference upstream cannot flip its result.
// The shrinker (shrink.h) works on the statement list, so a program is
// kept as data and printed by text().
#pragma once

#include <cstdint>
#include <string>
#include <vector>

namespace gdl::fuzz {

// A dim of a value's type: a compile-time extent, or a run-time dim by name.
struct GenDim {
  int64_t extent = 1;
  std::string runtime;  // empty: static
  bool operator==(const GenDim&) const = default;
};

struct GenType {
  std::string dtype;  // "f32", "f16", "bf16", "i32", "bool"
  std::vector<GenDim> shape;
  bool operator==(const GenType&) const = default;
  std::string text() const;  // "f16[B, 17]"
};

struct GenRuntimeDim {
  std::string name;
  int64_t lo = 1, hi = 1;
  std::string policy;  // "buckets" or "update"
};

// An input, param or state.
struct GenLeaf {
  std::string kind;  // "input", "param", "state"
  std::string name;
  GenType type;
};

// `let name = expr;` over earlier names (`uses`), or for a state `name = expr;`.
struct GenStatement {
  std::string name;
  GenType type;
  std::string expr;
  std::vector<std::string> uses;
  bool exact = false;       // every executor computes it bit for bit
  double magnitude = 1.0;   // a bound on |value| (float), used to keep values finite
  bool assigns_state = false;  // `name` is a state: the statement assigns it
};

struct GenProgram {
  uint64_t seed = 0;
  std::vector<GenRuntimeDim> dims;
  std::vector<GenLeaf> leaves;
  std::vector<GenStatement> statements;
  std::vector<std::string> outputs;  // statement names, declared as outputs
  std::string text() const;
  // The run-time dims' values a run may take, each in [lo, hi].
  size_t size() const { return statements.size(); }
};

struct GenOptions {
  int min_statements = 4, max_statements = 16;
  int max_outputs = 3;
  bool runtime_dims = true;
  bool state = true;
  bool random_ops = true;
  bool large_shapes = false;  // extents up to 2048: split-K, tensor cores, chains
};

GenProgram generate_program(uint64_t seed, const GenOptions& options = {});

// The program without statement i: later uses of it take another value of
// its type when there is one, else their statements go too; outputs that
// went are dropped (a program keeps at least one). nullopt-like: an empty
// program (no outputs) when nothing is left.
GenProgram without_statement(const GenProgram& p, size_t i);

}  // namespace gdl::fuzz
