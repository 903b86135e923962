// The conflicts between a plan's steps, found without testing every pair.
#pragma once

#include <functional>
#include <vector>

#include "plan.h"

namespace gdl::plan {

// Calls visit(j, candidates) for each step j in order; stops when visit
// returns false. The candidates (descending, no repeats) are the earlier
// steps that j conflicts with (conflict_between) as the last writers of
// bytes j reads or writes, or as readers of bytes j writes since their last
// write. Every other earlier step that j conflicts with is reachable from a
// candidate through conflicts of earlier steps, so when every step's deps
// cover its candidates they cover all its conflicts, and the transitive
// reduction of the candidates is that of all the conflicts. Linear in the
// accesses, times the segments a range spans.
void visit_conflict_candidates(const Plan& p, const std::function<bool(size_t, const std::vector<size_t>&)>& visit);

}  // namespace gdl::plan
