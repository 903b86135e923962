// lay_out_scratch (scratch.h), in an area after the arena:
// 1. Every step's tickets (kernel_choice.h step_scratch), each its own range:
//    they must be zero when a launch starts, and the kernels leave them so.
// 2. The partial tiles, placed first fit, sharing bytes only with steps
//    that the deps order before or after (never two launches at once; each
//    launch writes its partials before it reads them).
// 3. Each chain's scratch (its counters, mailboxes and tensor maps, sized by
//    find_matmul_chains), its own aligned range after the rest.
#include "plan/scratch.h"

#include <algorithm>

#include "plan/kernel_choice.h"

namespace gdl::plan {
namespace {

uint64_t align_up(uint64_t n) { return (n + kAlignment - 1) / kAlignment * kAlignment; }

}  // namespace

void lay_out_scratch(Plan& p) {
  const ir::Graph& g = p.graph;
  const std::vector<StepSet> reach = reachability(p.steps);
  // 1. Tickets.
  uint64_t tickets_end = p.arena_bytes;
  for (Step& st : p.steps) {
    st.tickets_bytes = step_scratch(g, st.values).ticket_bytes();
    st.tickets_offset = st.tickets_bytes > 0 ? tickets_end : 0;
    tickets_end += st.tickets_bytes;
  }
  // 2. Partial tiles, first fit among those of earlier steps that may run at the same time.
  uint64_t scratch_end = tickets_end;
  std::vector<std::pair<uint64_t, uint64_t>> taken;  // [begin, end) of concurrent steps' partials
  for (size_t j = 0; j < p.steps.size(); ++j) {
    Step& st = p.steps[j];
    st.scratch_bytes = step_scratch(g, st.values).partial_bytes();
    st.scratch_offset = 0;
    if (st.scratch_bytes == 0) continue;
    taken.clear();
    for (size_t i = 0; i < j; ++i)
      if (p.steps[i].scratch_bytes > 0 && !reach[j].contains(i))
        taken.push_back({p.steps[i].scratch_offset, p.steps[i].scratch_offset + p.steps[i].scratch_bytes});
    std::sort(taken.begin(), taken.end());
    uint64_t at = tickets_end;
    for (const auto& [begin, end] : taken) {
      if (begin >= at + st.scratch_bytes) break;
      at = std::max(at, end);
    }
    st.scratch_offset = at;
    scratch_end = std::max(scratch_end, at + st.scratch_bytes);
  }
  // 3. Chains.
  for (Chain& c : p.chains) {
    c.scratch_offset = align_up(scratch_end);
    scratch_end = c.scratch_offset + align_up(c.scratch_bytes);
  }
  p.scratch_bytes = scratch_end - p.arena_bytes;
}

}  // namespace gdl::plan
