// Shrinks a failing generated program to a small one that fails the same way.
#pragma once

#include <functional>
#include <string>

#include "fuzz/program_gen.h"

namespace gdl::fuzz {

// What a check found wrong with a program: "" when nothing. The kind (the
// text before the first ':') decides whether a smaller program "fails the
// same way".
using Check = std::function<std::string(const GenProgram&)>;

// Greedy delta debugging over statements: drop one statement at a time,
// from the last, keeping a drop when the smaller program (with at least one
// output) still fails with the same kind; repeat until no single drop does,
// or `max_checks` checks were spent. Returns the smallest failing program
// found and its failure.
struct Shrunk {
  GenProgram program;
  std::string failure;
  int checks = 0;
};
Shrunk shrink(const GenProgram& failing, const std::string& failure, const Check& check, int max_checks = 400);

}  // namespace gdl::fuzz
