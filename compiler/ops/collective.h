// The collectives' pieces that lowering and the CPU interpreter share
// (compiler/ops/collective.cc defines the ops).
#pragma once

#include <optional>
#include <span>
#include <string_view>

#include "interp/host_tensor.h"
#include "ir.h"

namespace gdl::ops {

// The reduction a collective names in the source (op = sum), or nullopt.
std::optional<ir::CollectiveReduce> collective_reduce_named(std::string_view name);

// The value of collective node `n` on rank `rank` of its group, from each
// rank's argument in rank order (ranks.size() == the group's size):
// all_reduce combines them elementwise (in rank order), all_gather
// concatenates them along its axis, reduce_scatter combines them and keeps
// this rank's part of its axis. Rounded to the node's dtype.
HostTensor combine_collective(const ir::Node& n, std::span<const HostTensor* const> ranks, int rank);

}  // namespace gdl::ops
