// Lays out every collective the way an NCCL call moves memory.
#pragma once

#include "ir.h"

namespace gdl {

// NCCL reads and writes each rank's part as one contiguous run of elements,
// in rank order. So, before planning:
// 1. all_gather and reduce_scatter along an axis with an extent other than
//    1 in front of it move that axis to the front (a transpose), run the
//    collective along axis 0 there, and move it back: the parts are then
//    contiguous, and the result is the same.
// 2. A collective whose argument has no storage (a constant, a run-time
//    scalar, a dim's value) reads a copy of it in a buffer (a cast to its
//    own dtype), since the call reads memory.
// Runs on the way to the GPU only; the CPU reference takes the collectives
// as written.
void lay_out_collectives(ir::Graph& g);

}  // namespace gdl
