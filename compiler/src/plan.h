// The execution plan: which kernel nodes run, in what order, where every value
// lives in device memory, and which nodes must wait for which.
//
// The plan is plain data. The runtime only turns it into graph nodes; the CPU
// interpreter can execute it in a host arena with the same offsets
// (run_planned), so a plan that aliases wrongly fails on machines without a GPU.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include "gdl/status.h"
#include "interp.h"
#include "ir.h"

namespace gdl::plan {

inline constexpr uint64_t kAlignment = 256;

enum class Region : uint8_t {
  kArena,   // per session: inputs, outputs, intermediates (space reused after last use)
  kParams,  // persistent, shareable by the sessions of one program on a device
  kNone,    // a value with no storage of its own (a leaf the program never reads)
};

// Where one IR value lives. Sized for every run-time dim at its upper bound;
// for a smaller binding the value is stored row-major with the actual extents
// from the start of the buffer.
struct Buffer {
  Region region = Region::kNone;
  uint64_t offset = 0;  // bytes from the region's base, a multiple of kAlignment
  uint64_t bytes = 0;   // the value's largest size
};

// One kernel node of the graph. Without fusion it computes one IR value; with
// fusion it computes `values` in order and writes only the last one.
struct Step {
  std::vector<ir::ValueId> values;  // IR nodes evaluated by this step, in order
  ir::ValueId result = ir::kNoValue;  // the value written to its buffer (== values.back())
  std::vector<ir::ValueId> reads;   // values read from buffers (outside `values`)
  std::vector<int> deps;            // earlier steps that must finish first (ascending)
};

struct Plan {
  ir::Graph graph;
  std::vector<Buffer> buffers;   // indexed by ValueId
  std::vector<Step> steps;       // schedule order
  uint64_t arena_bytes = 0;      // size of the per-session arena
  uint64_t params_bytes = 0;     // size of the persistent params region
  uint64_t naive_bytes = 0;      // every value its own buffer (the arena without reuse)
  uint64_t live_lower_bound = 0; // most bytes live at one time in the arena
};

// Builds the plan for an optimised graph: schedule, liveness, offsets, deps.
Plan make_plan(ir::Graph graph);

// Proves the plan sound: no two arena values live at the same time overlap,
// every buffer is aligned and inside its region, every step's reads are
// produced by an earlier step (or are leaves), deps cover every read-after-write,
// write-after-read and write-after-write conflict over overlapping byte ranges.
// Returns "" when sound, otherwise the first violation.
std::string check_plan(const Plan& p);

// A human-readable listing for `gdlc --emit=plan`: each step with its kernel
// node, the values and their offsets, and the memory summary line
//   "arena 12.3 KiB (naive 40.0 KiB, live lower bound 12.0 KiB), params 8.0 MiB".
std::string print_plan(const Plan& p);

// Graphviz DOT of the steps and their deps (`gdlc --emit=graph`).
std::string plan_to_dot(const Plan& p);

// Runs the plan on the CPU inside host memory laid out exactly as planned:
// each step reads its arguments from the host arena at their offsets, and
// writes its result at its offset. Returns outputs like interpret().
Expected<std::map<std::string, HostTensor>> run_planned(const Plan& p, const Bindings& b);

}  // namespace gdl::plan
