// add_step_dependencies (deps.h):
// 1. Step j must wait for an earlier step i when i writes bytes that j reads
//    (RAW), reads bytes that j writes (WAR), or writes bytes that j writes
//    (WAW), over overlapping [offset, offset + bytes) in one region
//    (conflict_between, plan.h).
// 2. Only the transitive reduction is kept: going over the conflicting
//    steps from the latest down, a step already reachable through the deps
//    chosen so far is implied and dropped. Independent branches stay
//    parallel in the CUDA graph.
// 3. Each step's deps ascend.
#include "plan/deps.h"

#include <algorithm>

namespace gdl::plan {

void add_step_dependencies(Plan& p) {
  std::vector<StepSet> reach;
  reach.reserve(p.steps.size());
  for (size_t j = 0; j < p.steps.size(); ++j) {
    reach.emplace_back(p.steps.size());
    p.steps[j].deps.clear();
    for (size_t i = j; i-- > 0;) {
      if (reach[j].contains(i) || conflict_between(p, p.steps[i], p.steps[j]) == Conflict::kNone) continue;
      p.steps[j].deps.push_back(static_cast<int>(i));
      reach[j].merge(reach[i]);
      reach[j].insert(i);
    }
    std::sort(p.steps[j].deps.begin(), p.steps[j].deps.end());
  }
}

}  // namespace gdl::plan
