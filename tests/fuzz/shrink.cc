// shrink (shrink.h).
#include "fuzz/shrink.h"

namespace gdl::fuzz {
namespace {

std::string kind_of(const std::string& failure) { return failure.substr(0, failure.find(':')); }

}  // namespace

Shrunk shrink(const GenProgram& failing, const std::string& failure, const Check& check, int max_checks) {
  Shrunk best{failing, failure, 0};
  const std::string kind = kind_of(failure);
  bool progress = true;
  while (progress && best.checks < max_checks) {
    progress = false;
    for (size_t i = best.program.statements.size(); i-- > 0 && best.checks < max_checks;) {
      if (i >= best.program.statements.size()) continue;
      GenProgram smaller = without_statement(best.program, i);
      if (smaller.outputs.empty()) continue;
      ++best.checks;
      const std::string f = check(smaller);
      if (!f.empty() && kind_of(f) == kind) {
        best.program = std::move(smaller);
        best.failure = f;
        progress = true;
      }
    }
  }
  return best;
}

}  // namespace gdl::fuzz
