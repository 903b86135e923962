#include "internal_error.h"

#include <atomic>
#include <cstring>
#include <mutex>
#include <set>

#include "gdl/testing.h"

namespace gdl {
namespace {

std::mutex armed_mutex;
std::set<std::string> armed_sites;
std::atomic<bool> any_armed{false};  // the common case reads only this

bool known_site(const std::string& site) {
  for (const char* s : kFailpointSites)
    if (site == s) return true;
  return false;
}

std::string known_sites() {
  std::string out;
  for (const char* s : kFailpointSites) out += (out.empty() ? "" : ", ") + std::string(s);
  return out;
}

}  // namespace

void internal_error(const char* file, int line, const std::string& what) {
  const char* base = std::strrchr(file, '/');
  throw InternalError("gdl internal error at " + std::string(base ? base + 1 : file) + ":" + std::to_string(line) +
                      ": " + what + " (a bug in gdl, not in your program)");
}

void failpoint(const char* site) {
  if (!any_armed.load(std::memory_order_acquire)) return;
  std::lock_guard<std::mutex> lock(armed_mutex);
  if (armed_sites.count(site)) internal_error(__FILE__, __LINE__, std::string("failpoint '") + site + "' is armed");
}

namespace testing {

Status arm_failpoint(const std::string& site) {
  if (!known_site(site)) return Status::NotFound("no failpoint '" + site + "'; the sites are " + known_sites());
  std::lock_guard<std::mutex> lock(armed_mutex);
  armed_sites.insert(site);
  any_armed.store(true, std::memory_order_release);
  return Status::Ok();
}

void disarm_failpoints() {
  std::lock_guard<std::mutex> lock(armed_mutex);
  armed_sites.clear();
  any_armed.store(false, std::memory_order_release);
}

}  // namespace testing
}  // namespace gdl
