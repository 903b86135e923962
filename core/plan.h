// The execution plan: which kernel nodes run, in what order, where every value
// lives in device memory, and which nodes must wait for which.
//
// The plan is plain data, made by the compiler's planning passes
// (compiler/plan/) and carried by the artifact. The runtime only turns it
// into graph nodes; the compiler's CPU interpreter can execute it in a host
// arena with the same offsets (run_planned), so a plan that aliases wrongly
// fails on machines without a GPU.
#pragma once

#include <cstdint>
#include <optional>
#include <string>
#include <vector>

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

// One run-time part of a view's byte offset: `coef` times the layout extent
// of each run-time dim in `dims` (symbols, ascending, a symbol repeated for
// its square). The layout extent is what kernels read as gdl_args.dims: the
// bucket's capacity under buckets, the actual value under node updates.
struct OffsetTerm {
  uint64_t coef = 0;
  std::vector<int> dims;
  bool operator==(const OffsetTerm&) const = default;
};

// Where one IR value lives. Sized for every run-time dim at its upper bound;
// for a smaller binding the value is stored row-major with the layout
// extents from the start of the buffer.
//
// A view (a reshape, or a slice whose region is contiguous in row-major
// order) has no storage of its own: its buffer lies inside its argument's,
// at an offset that is a multiple of its element size but not necessarily
// of kAlignment. A slice behind a run-time axis (`x[1]` of `x : f32[3, T, 8]`
// starts T * 32 bytes in) lies at `offset` plus its `terms` at the run's
// layout extents, and so do the views of it and an in-place write into it;
// a buffer that owns its storage never has terms. A value fused into a step
// (computed in registers, never stored) has Region::kNone.
struct Buffer {
  Region region = Region::kNone;
  uint64_t offset = 0;  // bytes from the region's base (the static part): a multiple of kAlignment, except for views
  uint64_t bytes = 0;   // the value's largest size
  std::vector<OffsetTerm> terms;  // the run-time part of a view's offset, canonical (add_offset_terms)
  bool operator==(const Buffer&) const = default;
};

// The buffer's offset in bytes at the layout extents `layout` (indexed by
// dim symbol). The plan was verified: no term overflows within the bounds.
uint64_t offset_at(const Buffer& b, const std::vector<int64_t>& layout);

// The lowest and highest offset of a buffer over every binding (each dim's
// layout extent in [lo, hi]); nullopt when a term names a dim that does not
// exist or the highest does not fit in 62 bits (a hostile artifact).
struct OffsetRange {
  uint64_t low = 0, high = 0;
};
std::optional<OffsetRange> offset_range(const Buffer& b, const std::vector<DimInfo>& dims);

// `a` + `b` in canonical form: terms with the same dims summed, ordered by
// their dims, none with a zero coefficient.
std::vector<OffsetTerm> add_offset_terms(std::vector<OffsetTerm> a, const std::vector<OffsetTerm>& b);

// The alignment in bytes that a kernel may assume for the address of a
// buffer at every binding (the regions' bases are kAlignment-aligned): the
// largest power of two dividing its offset and every term's coefficient,
// at most kAlignment.
uint64_t buffer_alignment(const Buffer& b);

// One kernel node of the graph. Without fusion it computes one IR value; with
// fusion (compiler/plan/fuse.h) it computes `values` in order and writes only the last one.
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
// compiler/plan/chains.h) runs in place of their own kernels while the run's
// rows are few. The steps stay in the plan: their kernels serve the other
// runs, and the CPU reference runs them.
struct Chain {
  int first = 0, last = 0;  // steps [first, last], consecutive in schedule order
  int64_t k = 0;            // every step's K == N
  // Row groups of the chain's second kernel: 0 = none, the first kernel is
  // the only one.
  int64_t row_groups = 0;
  // Its scratch, [scratch_offset, + scratch_bytes) from the arena base: the
  // kernels' launch counters and mailboxes, zero when the session starts,
  // never reset, never shared; then the kernels' tensor maps of the weights,
  // which the runtime writes when the session starts.
  uint64_t scratch_offset = 0;
  uint64_t scratch_bytes = 0;
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

// The largest size of a value in bytes: every run-time dim at its upper
// bound, at least one element. nullopt when it does not fit in 62 bits (a
// hostile artifact; the compiler never makes such a graph).
std::optional<uint64_t> value_bytes(const ir::Graph& g, const ir::Node& n);

// Where a slice's elements lie inside its argument's buffer, in bytes, when
// they are one contiguous row-major run for every binding of the run-time
// dims (then the slice is a view: `W[l]`, `bias[l]`, `x[1]` of
// x : f32[3, T, 8]): a static part and terms in the layout extents of the
// run-time axes it starts behind; nullopt otherwise.
struct SliceOffset {
  uint64_t offset = 0;
  std::vector<OffsetTerm> terms;
};
std::optional<SliceOffset> contiguous_slice_offset(const ir::Graph& g, const ir::Node& n);

// ------------------------------------------------------- in-place writes
//
// A scatter or update_slice (ir::writes_in_place) writes over the storage
// of its first argument. compiler/passes/inplace.cc makes that legal (or
// inserts a copy); the planner, the fusion pass and verify_plan read the
// same facts through these functions.

// Whether a view of its argument: a reshape, or a slice whose elements are
// one contiguous run (contiguous_slice_offset).
bool is_view_node(const ir::Graph& g, const ir::Node& n);

// v through reshapes: the value whose elements it views in the same order.
ir::ValueId strip_reshapes(const ir::Graph& g, ir::ValueId v);

// The storage an in-place write targets: the value `whole` whose buffer it
// writes into (its first argument through reshapes), and when that
// argument is a contiguous slice of `whole`, the slice (`region`), else
// kNoValue.
struct WriteTarget {
  ir::ValueId whole = ir::kNoValue;
  ir::ValueId region = ir::kNoValue;
};
WriteTarget write_target(const ir::Graph& g, ir::ValueId writer);

// update_slice(c, v) {bounds} whose v (through reshapes) is an in-place
// write into the slice of c at the same bounds: v already lies where the
// update puts it, so the update is a view of c and runs nothing
// (`cache[l] = scatter(cache[l], ...)`).
bool update_is_view(const ir::Graph& g, const ir::Node& n);

// update_slice(base, v) over the whole of base (a state given a new value):
// element i of v goes to element i of base's storage, so fusion may compute
// v in the update's own kernel, writing straight into base (plan/fuse.cc).
bool replaces_whole(const ir::Graph& g, const ir::Node& n);

// Whether `reader`, computed in the step of `write` (which replaces its
// base whole), reads the storage the write overwrites only at the element
// it computes: an elementwise op whose every argument in that storage is
// all of it (through reshapes, no slice), shaped as the write's result. Then
// each element is read before the same thread writes it.
bool reads_own_elements(const ir::Graph& g, ir::ValueId reader, ir::ValueId write);

// consumers[v]: the nodes that take v as an argument, ascending.
std::vector<std::vector<ir::ValueId>> consumers_of(const ir::Graph& g);

// The nodes that read the storage an in-place write overwrites (the
// target's whole value and every view of it), other than the write itself
// and the views and update on its way: every one must run before it.
std::vector<ir::ValueId> overwritten_readers(const ir::Graph& g, ir::ValueId writer,
                                             const std::vector<std::vector<ir::ValueId>>& consumers);

// A step's ops for messages and listings: "matmul+add+gelu".
std::string step_ops(const Plan& p, const Step& s);

// ------------------------------------------------ conflicts between steps

// The bytes one step may touch in a buffer: for a view with terms, every
// place it takes over the bindings (from its lowest offset to its highest
// plus its largest size), so conflicts hold for every binding.
struct Access {
  Region region;
  uint64_t begin, end;
};
Access access_of(const Buffer& b, const std::vector<DimInfo>& dims);
bool overlaps(const Access& a, const Access& b);

// Per input (declaration order, the graph's kInput leaves): whether a run
// writes into its buffer (an in-place update of it, or a step result placed
// over it), so the next run needs it bound again.
std::vector<bool> inputs_clobbered_by_run(const Plan& p);

// Per value: the slot of gdl_args::inputs through which kernels read it,
// or -1. A value gets its input's slot when it is an input or a view of one
// (reshape, slice: no step computes it) and that input is readable in
// place: its index is below kMaxInputPointers and no run writes into its
// buffer. Codegen addresses such values from the slot's pointer; the
// runtime points the slot at the arena buffer or at the caller's memory
// (Session::bind_reference).
std::vector<int> input_pointer_slots(const Plan& p);

enum class Conflict { kNone, kReadAfterWrite, kWriteAfterRead, kWriteAfterWrite };
const char* conflict_name(Conflict c);

// Whether the later step must wait for the earlier one (over overlapping
// byte ranges of their writes and reads), and why.
Conflict conflict_between(const Plan& p, const Step& earlier, const Step& later);

// A set of step indices as a bitset, for reachability over deps.
class StepSet {
 public:
  explicit StepSet(size_t n) : words_((n + 63) / 64, 0) {}
  void insert(size_t i) { words_[i / 64] |= uint64_t{1} << (i % 64); }
  bool contains(size_t i) const { return (words_[i / 64] >> (i % 64)) & 1; }
  void merge(const StepSet& o) {
    for (size_t w = 0; w < words_.size(); ++w) words_[w] |= o.words_[w];
  }

 private:
  std::vector<uint64_t> words_;
};

// reach[j] = every step that step j waits for, directly or through deps
// (which must point backwards).
std::vector<StepSet> reachability(const std::vector<Step>& steps);

// Proves the plan sound as data, without knowing what any kernel does: every
// buffer in the region its role needs, aligned (a view to its element size),
// large enough and inside the region; every view where its argument's
// elements are; every step's reads produced by an earlier step (or leaves);
// no two arena values live at the same time overlapping; deps covering every
// read-after-write, write-after-read and write-after-write conflict; every
// step's scratch and every chain's scratch inside the scratch area, tickets
// and chain scratch never shared, partial tiles shared only between steps
// the deps order. Returns "" when sound, otherwise the first violation. The
// artifact reader runs it on every plan it loads; the compiler's check_plan
// (compiler/plan/check.h) adds what the kernels need.
std::string verify_plan(const Plan& p);

}  // namespace gdl::plan
