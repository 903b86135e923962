// check_plan (check.h): verify_plan first, then per step the scratch its
// kernel needs against what the plan gave it, then per chain its row groups
// and its scratch against what its kernels use.
#include "plan/check.h"

#include "plan/chains.h"
#include "plan/kernel_choice.h"

namespace gdl::plan {

std::string check_plan(const Plan& p) {
  if (std::string problem = verify_plan(p); !problem.empty()) return problem;
  for (size_t s = 0; s < p.steps.size(); ++s) {
    const Step& st = p.steps[s];
    const SplitScratchSize need = step_scratch(p.graph, st.values);
    if (st.tickets_bytes < need.ticket_bytes() || st.scratch_bytes < need.partial_bytes())
      return "step " + std::to_string(s) + " has " + std::to_string(st.tickets_bytes) + " + " +
             std::to_string(st.scratch_bytes) + " bytes of scratch, its kernel needs " +
             std::to_string(need.ticket_bytes()) + " + " + std::to_string(need.partial_bytes());
  }
  for (const Chain& c : p.chains) {
    const std::string name = "the chain of steps " + std::to_string(c.first) + "-" + std::to_string(c.last);
    if (c.row_groups != 0 && c.row_groups != chain_row_groups(c.k, c.row_groups * chain::kMaxRows))
      return name + ": " + std::to_string(c.row_groups) + " row groups at K = " + std::to_string(c.k) +
             " are not a launch its kernel can run";
    if (c.scratch_bytes != chain_scratch_bytes(c))
      return name + ": its scratch of " + std::to_string(c.scratch_bytes) + " bytes is not the " +
             std::to_string(chain_scratch_bytes(c)) + " its kernels use";
  }
  return "";
}

}  // namespace gdl::plan
