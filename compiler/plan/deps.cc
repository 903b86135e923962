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
// 4. A collective also waits for the collective before it: every rank must
//    issue its NCCL calls in one order, one at a time, and independent
//    branches would otherwise let two run at once or in another order.
// The conflicts come from visit_conflict_candidates (plan_conflicts.h),
// which finds the few that matter without testing every earlier step
// (quadratic in the steps); their reduction is that of all the conflicts.
#include "plan/deps.h"

#include <algorithm>

#include "ops/op_def.h"
#include "plan_conflicts.h"

namespace gdl::plan {

void add_step_dependencies(Plan& p) {
  std::vector<StepSet> reach;
  reach.reserve(p.steps.size());
  int last_collective = -1;
  std::vector<size_t> ordered;
  visit_conflict_candidates(p, [&](size_t j, const std::vector<size_t>& conflicts) {
    reach.emplace_back(p.steps.size());
    std::vector<int>& deps = p.steps[j].deps;
    deps.clear();
    const std::vector<size_t>* candidates = &conflicts;
    if (ops::fusion_class(p.graph.node(p.steps[j].result).op) == ops::FusionClass::kCollective) {  // 4
      if (last_collective >= 0) {
        ordered = conflicts;
        ordered.push_back(static_cast<size_t>(last_collective));
        std::sort(ordered.rbegin(), ordered.rend());
        ordered.erase(std::unique(ordered.begin(), ordered.end()), ordered.end());
        candidates = &ordered;
      }
      last_collective = static_cast<int>(j);
    }
    for (size_t i : *candidates) {  // the latest first
      if (reach[j].contains(i)) continue;
      deps.push_back(static_cast<int>(i));
      reach[j].merge(reach[i]);
      reach[j].insert(i);
    }
    std::sort(deps.begin(), deps.end());
    return true;
  });
}

}  // namespace gdl::plan
