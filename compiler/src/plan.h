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

// A program with run-time dims reserves [kValidDimsOffset, +kValidDimsBytes)
// of the arena for the valid counts: int32 valid[kMaxRuntimeDims], the value
// of each run-time dim for the current run, which the runtime writes by copy
// before a run whenever it changed. Under the buckets policy values are laid
// out at the bucket's capacity and kernels that combine elements along a
// run-time axis read the valid count there (codegen.h, docs/dynamic.md).
// No value's buffer overlaps it. A program without run-time dims has none.
inline constexpr uint64_t kValidDimsOffset = 0;
inline constexpr uint64_t kValidDimsBytes = 256;

enum class Region : uint8_t {
  kArena,   // per session: inputs, outputs, intermediates (space reused after last use)
  kParams,  // persistent, shareable by the sessions of one program on a device
  kNone,    // a value with no storage of its own (a leaf the program never reads)
};

// Where one IR value lives. Sized for every run-time dim at its upper bound;
// for a smaller binding the value is stored row-major with the actual extents
// from the start of the buffer.
//
// A view (a reshape, or a slice whose region is contiguous in row-major
// order) has no storage of its own: its buffer lies inside its argument's,
// at an offset that is a multiple of its element size but not necessarily
// of kAlignment. A value fused into a step (computed in registers, never
// stored) has Region::kNone.
struct Buffer {
  Region region = Region::kNone;
  uint64_t offset = 0;  // bytes from the region's base: a multiple of kAlignment, except for views
  uint64_t bytes = 0;   // the value's largest size
};

// The alignment in bytes that a kernel may assume for the address of a
// buffer (the regions' bases are kAlignment-aligned): the largest power of
// two dividing its offset, at most kAlignment.
uint64_t buffer_alignment(const Buffer& b);

// One kernel node of the graph. Without fusion it computes one IR value; with
// fusion (fuse.h) it computes `values` in order and writes only the last one.
// The others live in registers; a value that is cheap to recompute (a rank-0
// function of constants and run-time scalars) may be computed by several steps.
struct Step {
  std::vector<ir::ValueId> values;  // IR nodes evaluated by this step, in order (a matmul anchor first)
  ir::ValueId result = ir::kNoValue;  // the value written to its buffer (== values.back())
  std::vector<ir::ValueId> reads;   // values read from buffers (outside `values`)
  std::vector<int> deps;            // earlier steps that must finish first (ascending)
  // Working memory of the step's kernel (kernel_choice.h), in the scratch
  // area after the arena, as offsets from the arena base (0 bytes: none):
  // its tickets, zero between launches and never shared with another step,
  // and its partial tiles, which a step ordered before or after it by the
  // deps may share (each launch writes them before it reads them).
  uint64_t tickets_offset = 0;
  uint64_t tickets_bytes = 0;
  uint64_t scratch_offset = 0;
  uint64_t scratch_bytes = 0;
};

// Consecutive matmul steps that one persistent kernel (gdl::MatmulChain,
// chain.h) runs in place of their own kernels while the run's rows are at
// most kChainMaxRows, and with row groups a second one for up to
// kChainMaxRows x row_groups. The steps stay in the plan: their kernels
// serve the other runs, and the CPU reference runs them.
struct Chain {
  int first = 0, last = 0;      // steps [first, last], consecutive in schedule order
  int64_t k = 0;                // every step's K == N
  // chain_scratch_bytes of scratch (chain.h): the kernels' launch counters,
  // which only grow, and their mailboxes (chain_exchange_bytes), zero when
  // the session starts, never reset, never shared; then the kernels' tensor
  // maps of the weights, which the runtime writes when the session starts.
  uint64_t exchange_offset = 0;
  // Row groups of the chain's second kernel (chain_row_groups): 0 = none,
  // the first kernel (at most kChainMaxRows rows) is the only one.
  int64_t row_groups = 0;
};

struct Plan {
  ir::Graph graph;
  std::vector<Buffer> buffers;   // indexed by ValueId
  std::vector<Step> steps;       // schedule order
  uint64_t arena_bytes = 0;      // size of the per-session arena
  uint64_t params_bytes = 0;     // size of the persistent params region
  uint64_t naive_bytes = 0;      // every value its own buffer (the arena without reuse)
  uint64_t live_lower_bound = 0; // most bytes live at one time in the arena
  // The scratch area, [arena_bytes, arena_bytes + scratch_bytes) from the
  // arena base, allocated with the arena: every step's tickets, then the
  // partial tiles. The runtime zeroes it once when a session starts and
  // never poisons it; kernels leave their tickets at zero after every launch.
  uint64_t scratch_bytes = 0;
  std::vector<Chain> chains;     // ascending, disjoint
};

// What make_plan may fuse (fuse.h). Both on by default; tests that study the
// planner itself on one step per value turn them off.
struct PlanOptions {
  bool fuse_elementwise = true;  // chains and trees of elementwise ops become one step
  bool fuse_epilogues = true;    // elementwise consumers of a matmul join the matmul's step
  bool fuse_prologues = true;    // a norm whose only use is a matmul's a joins the matmul's step
  bool chain_matmuls = true;     // runs of square matmul steps also get one persistent kernel (chain.h)
};

// Builds the plan for an optimised graph: schedule, views, fusion, liveness,
// offsets, deps.
Plan make_plan(ir::Graph graph, const PlanOptions& options = {});

// Proves the plan sound: no two arena values live at the same time overlap,
// every buffer is aligned (views to their element size) and inside its
// region, every view lies where its argument's elements are, every step's reads are
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
