// Hooks for gdl's own tests and for users who test code built on gdl: they
// make failures show that would otherwise pass unseen. Not for production
// runs.
#pragma once

#include <cstdint>
#include <string>

#include "gdl/gdl.h"

namespace gdl::testing {

// Fills every arena byte of the session that does not belong to an input
// (or to the valid-dims block) with `byte` (ordered on the session's
// stream), so that elements a run fails to write show up.
Status poison_arena(Session& session, uint8_t byte = 0xFF);

// From now on, a bind of `session` that pads an input first fills the
// input's whole buffer with 0xFF bytes (NaN in every float dtype), so that
// padding which leaks into a valid result shows.
Status poison_padding(Session& session, bool on = true);

// Makes the next pass through a failpoint `site` ("planner", "codegen",
// "interpreter") fail as a bug in gdl would: the call that reaches it
// returns Status::Internal. NotFound for an unknown site. Process-wide until
// disarm_failpoints().
Status arm_failpoint(const std::string& site);
void disarm_failpoints();

}  // namespace gdl::testing
