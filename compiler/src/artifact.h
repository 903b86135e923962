// The .gdlx artifact: everything the runtime needs, no compiler required.
//
// Layout: magic "GDLX\r\n\x1a\n", u32 format version, u64 payload size,
// u64 FNV-1a 64 checksum of the payload, then the payload (graph, plan,
// kernel table, module image). All integers little-endian. A file with the
// wrong magic, version, size or checksum is refused with a DataLoss status.
#pragma once

#include <cstdint>
#include <span>
#include <string>
#include <vector>

#include "codegen.h"
#include "gdl/status.h"
#include "plan.h"

namespace gdl {

// 2: plan steps carry their scratch; 3: a step's large kernel; 4: chains;
// 5: the module holds the input copy kernel (codegen.h kInputCopySymbol);
// 6: a kernel's early_start; 7: a chain's row groups and their kernel;
// 8: a chain kernel's tensor maps and weights
inline constexpr uint32_t kArtifactVersion = 8;

struct Artifact {
  plan::Plan plan;                  // holds the graph: names, shapes, dtypes
  std::vector<KernelInfo> kernels;  // one per plan step
  std::vector<ChainKernel> chains;  // per plan chain: one, or two with row groups (codegen.h)
  CompiledModule module;            // CUBIN + PTX
  std::string cuda_source;          // kept for --emit=cuda on an artifact and for debugging
};

std::vector<uint8_t> serialize_artifact(const Artifact& a);
Expected<Artifact> deserialize_artifact(std::span<const uint8_t> bytes);

Status write_artifact(const std::string& path, const Artifact& a);
Expected<Artifact> read_artifact(const std::string& path);

}  // namespace gdl
