// The .gdlx artifact: everything the runtime needs, no compiler required.
//
// Layout: magic "GDLX\r\n\x1a\n", u32 format version, u64 payload size,
// u64 FNV-1a 64 checksum of the payload, then the payload (graph, plan,
// kernel table, module image). All integers little-endian. A file with the
// wrong magic, version, size or checksum, or whose tables do not fit
// together, is refused with a DataLoss status.
#pragma once

#include <cstdint>
#include <span>
#include <string>
#include <vector>

#include "gdl/status.h"
#include "kernel_table.h"
#include "plan.h"

namespace gdl {

// 9: a kernel table of alternatives per step (multi-step kernels, tensor
// maps), the dims' padding blockers, a chain's scratch range. 10: states.
// 11: take_along_axis and paged_attention among the structured ops (the
// opcodes after them moved). 12: a buffer's offset terms (a view behind a
// run-time axis). 15: the module as units (one NVRTC compile each), each
// naming its kernels. 16: kernels read inputs through gdl_args::inputs.
// 17: the process group. 18: collectives, as NCCL calls in the kernel table.
// 19: kernels take their buffer offsets as an argument (Kernel::offsets),
// and table entries share a kernel of the module.
inline constexpr uint32_t kArtifactVersion = 19;

struct Artifact {
  plan::Plan plan;          // holds the graph: names, shapes, dtypes
  KernelTable kernels;      // every kernel and each step's choices
  CompiledModule module;    // per unit: CUBIN + PTX and its kernels
  std::string cuda_source;  // kept for --emit=cuda on an artifact and for debugging
};

// What a checksum cannot prove (a writer bug or a hostile file): the graph's
// structure (ir.h verify_structure), the plan as data (plan.h verify_plan),
// the kernel ABI's limits, and a kernel table that fits the plan (launch
// rules a device can take, each step's choices ending in a kernel that
// always applies, multi-step kernels chosen alike by each of their steps,
// tensor maps inside the scratch area and the params region) with module
// units to load that define every kernel once. "" when it holds, else the first problem.
std::string verify_artifact(const Artifact& a);

std::vector<uint8_t> serialize_artifact(const Artifact& a);
Expected<Artifact> deserialize_artifact(std::span<const uint8_t> bytes);

Status write_artifact(const std::string& path, const Artifact& a);
Expected<Artifact> read_artifact(const std::string& path);

}  // namespace gdl
