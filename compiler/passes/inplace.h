// In-place writes: state updates, scatter and update_slice without copies.
#pragma once

#include "ir.h"

namespace gdl {

// Makes every in-place write of the graph legal and gives every state its
// final value in its own storage, so that the planner can give a scatter or
// update_slice its base's buffer (plan/memory.cc) and a state update writes
// only the elements it replaces:
//  - a write may overwrite its target (plan::write_target) only when that is
//    a state leaf whose final value the write leads to, or a computed value
//    that is no output and no state's final value; only one write per
//    target; the write reads the target through no other argument; and no
//    reader of the old value may depend on the write.
//    Otherwise the write gets a copy of its base (a `copy` node named for
//    the reason, which --emit=plan shows).
//  - a state whose final value does not lead back to its leaf through
//    in-place writes gets update_slice(state, value) over the whole state: a
//    copy of the new value into the state's storage.
//  - an output that would share storage with a state, or with a value an
//    in-place write changes, reads a copy.
//  - the nodes are reordered (stably) so that every reader of an
//    overwritten value comes before the write.
// Graph::state_updates is empty afterwards: every state's final value is in
// its storage.
void place_in_place_writes(ir::Graph& g);

}  // namespace gdl
