// visit_conflict_candidates (plan_conflicts.h): each region's touched bytes
// are kept as disjoint segments that remember their last writer and the
// readers since. A step collects its candidates from the segments its
// ranges overlap, then records its reads and, over them, its write.
#include "plan_conflicts.h"

#include <algorithm>
#include <iterator>
#include <limits>
#include <map>

namespace gdl::plan {
namespace {

constexpr size_t kNoStep = std::numeric_limits<size_t>::max();

// A run of bytes [first, end) with the same history.
struct Segment {
  uint64_t end = 0;
  size_t writer = kNoStep;      // the last step that wrote it
  std::vector<size_t> readers;  // the steps that read it since, ascending
};

// One region's touched bytes, in disjoint segments keyed by their first byte.
class History {
 public:
  // The steps a later access to `a` conflicts with: the last writers, and
  // for a write the readers since.
  void collect(const Access& a, bool writing, std::vector<size_t>& out) const {
    for (auto it = first_overlapping(a.begin); it != segments_.end() && it->first < a.end; ++it) {
      if (it->second.writer != kNoStep) out.push_back(it->second.writer);
      if (writing) out.insert(out.end(), it->second.readers.begin(), it->second.readers.end());
    }
  }

  void read(const Access& a, size_t step) {
    cover(a.begin, a.end);
    for (auto it = segments_.find(a.begin); it != segments_.end() && it->first < a.end; ++it)
      if (it->second.readers.empty() || it->second.readers.back() != step) it->second.readers.push_back(step);
  }

  // A write replaces the history of its bytes: one segment, no readers.
  void write(const Access& a, size_t step) {
    split(a.begin);
    split(a.end);
    segments_.erase(segments_.lower_bound(a.begin), segments_.lower_bound(a.end));
    segments_.emplace(a.begin, Segment{a.end, step, {}});
  }

 private:
  using Map = std::map<uint64_t, Segment>;

  Map::const_iterator first_overlapping(uint64_t at) const {
    auto it = segments_.upper_bound(at);
    if (it != segments_.begin() && std::prev(it)->second.end > at) --it;
    return it;
  }

  // A segment boundary at `at` (the segment holding it is cut in two).
  void split(uint64_t at) {
    auto it = segments_.upper_bound(at);
    if (it == segments_.begin()) return;
    --it;
    if (it->first >= at || it->second.end <= at) return;
    Segment right = it->second;
    it->second.end = at;
    segments_.emplace(at, std::move(right));
  }

  // Segments over all of [begin, end), with boundaries at both ends.
  void cover(uint64_t begin, uint64_t end) {
    split(begin);
    split(end);
    uint64_t at = begin;
    auto it = segments_.lower_bound(begin);
    while (at < end) {
      if (it == segments_.end() || it->first > at) {  // a gap: bytes no step touched yet
        const uint64_t gap_end = it == segments_.end() ? end : std::min(end, it->first);
        it = std::next(segments_.emplace_hint(it, at, Segment{gap_end, kNoStep, {}}));
        at = gap_end;
      } else {
        at = it->second.end;
        ++it;
      }
    }
  }

  Map segments_;
};

}  // namespace

void visit_conflict_candidates(const Plan& p, const std::function<bool(size_t, const std::vector<size_t>&)>& visit) {
  std::map<Region, History> regions;
  // An empty range overlaps nothing (overlaps, plan.h), and neither does a value without storage.
  auto access = [&](ir::ValueId v, Access* out) {
    *out = access_of(p.buffers.at(static_cast<size_t>(v)), p.graph.dims);
    return out->region != Region::kNone && out->begin < out->end;
  };
  std::vector<size_t> candidates;
  Access a{};
  for (size_t j = 0; j < p.steps.size(); ++j) {
    const Step& st = p.steps[j];
    candidates.clear();
    for (ir::ValueId r : st.reads)
      if (access(r, &a)) regions[a.region].collect(a, false, candidates);
    if (access(st.result, &a)) regions[a.region].collect(a, true, candidates);
    std::sort(candidates.begin(), candidates.end(), std::greater<>());
    candidates.erase(std::unique(candidates.begin(), candidates.end()), candidates.end());
    if (!visit(j, candidates)) return;
    // Reads first: the step's own write then supersedes its reads of those bytes.
    for (ir::ValueId r : st.reads)
      if (access(r, &a)) regions[a.region].read(a, j);
    if (access(st.result, &a)) regions[a.region].write(a, j);
  }
}

}  // namespace gdl::plan
