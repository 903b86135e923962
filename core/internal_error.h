// Bugs in gdl, as opposed to mistakes in a user's program or call.
//
// A failed GDL_INTERNAL_ASSERT throws InternalError; every library entry
// point runs its body through guarded(), which turns it (and any other
// escaped exception) into Status::Internal. So a gdl bug inside a host
// process's call comes back as a Status and never ends the process; the
// command-line tools print it and exit with code 2.
//
// Failpoints: named sites where a test forces an internal error
// (gdl/testing.h arm_failpoint), to prove that the path from the site to the
// caller reports it.
#pragma once

#include <exception>
#include <string>
#include <utility>

#include "gdl/status.h"

namespace gdl {

class InternalError : public std::exception {
 public:
  explicit InternalError(std::string message) : message_(std::move(message)) {}
  const char* what() const noexcept override { return message_.c_str(); }

 private:
  std::string message_;
};

// Throws InternalError("gdl internal error at FILE:LINE: what (a bug in gdl, not in your program)").
[[noreturn]] void internal_error(const char* file, int line, const std::string& what);

// Throws InternalError when a test armed `site` (one of kFailpointSites).
void failpoint(const char* site);
inline constexpr const char* kFailpointSites[] = {"planner", "codegen", "interpreter"};

// Runs `body` (returning Status or Expected<T>) so that no exception leaves
// the public API: an escaped exception is a gdl bug, reported as Internal
// with `what` (the API call) in front.
template <typename Body>
auto guarded(const char* what, Body&& body) -> decltype(body()) {
  try {
    return body();
  } catch (const InternalError& e) {
    return Status::Internal(std::string(what) + ": " + e.what());
  } catch (const std::exception& e) {
    return Status::Internal(std::string(what) + ": unexpected exception: " + e.what());
  } catch (...) {
    return Status::Internal(std::string(what) + ": unexpected exception");
  }
}

}  // namespace gdl

#define GDL_INTERNAL_ASSERT(cond, what)                             \
  do {                                                              \
    if (!(cond)) ::gdl::internal_error(__FILE__, __LINE__, (what)); \
  } while (0)
