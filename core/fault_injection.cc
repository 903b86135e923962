#include "fault_injection.h"

#include <array>
#include <atomic>
#include <mutex>
#include <unordered_map>

#include "gdl/testing.h"

namespace gdl {
namespace {

constexpr size_t kSites = static_cast<size_t>(FaultSite::kCount);
// Calls made per site since the process started, and the index of the
// call armed to fail plus one (0: none). Atomics: sessions on several
// threads count at once.
std::array<std::atomic<int64_t>, kSites> calls_made{};
std::array<std::atomic<int64_t>, kSites> fail_at_plus_one{};

// The live allocations by address: their site and size. Allocations happen
// at session creation and in the eager fallback, never per replay, so a
// mutex is cheap enough.
struct Allocation {
  FaultSite site;
  size_t bytes;
};
std::mutex ledger_mutex;
std::unordered_map<const void*, Allocation>& ledger() {
  static auto* live = new std::unordered_map<const void*, Allocation>();  // outlives static destructors
  return *live;
}

int site_index(const std::string& call) {
  for (size_t i = 0; i < kSites; ++i)
    if (call == kFaultSiteNames[i]) return static_cast<int>(i);
  return -1;
}

std::string site_list() {
  std::string out;
  for (const char* s : kFaultSiteNames) out += (out.empty() ? "" : ", ") + std::string(s);
  return out;
}

}  // namespace

bool fault_injected(FaultSite site) {
  const size_t i = static_cast<size_t>(site);
  const int64_t n = calls_made[i].fetch_add(1, std::memory_order_relaxed);
  int64_t armed = fail_at_plus_one[i].load(std::memory_order_relaxed);
  // Exactly one call fails: the one that takes the armed index clears it.
  return armed == n + 1 && fail_at_plus_one[i].compare_exchange_strong(armed, 0, std::memory_order_relaxed);
}

void note_allocation(FaultSite site, const void* p, size_t bytes) {
  if (!p) return;
  std::lock_guard lock(ledger_mutex);
  ledger()[p] = {site, bytes};
}

void note_release(const void* p) {
  if (!p) return;
  std::lock_guard lock(ledger_mutex);
  ledger().erase(p);
}

namespace testing {

LiveAllocations live_allocations() {
  std::lock_guard lock(ledger_mutex);
  LiveAllocations out;
  for (const auto& [p, a] : ledger()) {
    (a.site == FaultSite::kDeviceMalloc ? out.device_bytes : out.host_bytes) += static_cast<int64_t>(a.bytes);
    ++out.count;
  }
  return out;
}

Status fail_call(const std::string& call, int64_t nth) {
  const int i = site_index(call);
  if (i < 0) return Status::NotFound("gdl cannot fail '" + call + "'; the calls are " + site_list());
  if (nth < 0) return Status::InvalidArgument("fail_call: nth must be >= 0, not " + std::to_string(nth));
  fail_at_plus_one[static_cast<size_t>(i)].store(calls_made[static_cast<size_t>(i)].load() + nth + 1);
  return Status::Ok();
}

int64_t call_count(const std::string& call) {
  const int i = site_index(call);
  return i < 0 ? -1 : calls_made[static_cast<size_t>(i)].load();
}

bool call_failure_pending(const std::string& call) {
  const int i = site_index(call);
  return i >= 0 && fail_at_plus_one[static_cast<size_t>(i)].load() > 0;
}

void clear_call_failures() {
  for (auto& v : fail_at_plus_one) v.store(0);
}

}  // namespace testing
}  // namespace gdl
