// The generated kernels and when each runs: what codegen hands the runtime
// through the artifact.
//
// Kernel ABI (every generated kernel, so the runtime launches them alike):
//   extern "C" __global__ void NAME(unsigned char* arena,
//                                   const unsigned char* params,
//                                   gdl_args args,
//                                   gdl_offsets offsets);
//   struct gdl_args { int dims[kMaxRuntimeDims]; float scalars[kMaxScalars];
//                     const unsigned char* inputs[kMaxInputPointers]; };
//   struct gdl_offsets { unsigned long long at[kMaxKernelOffsets]; };
// dims holds the layout extent of each run-time dim (Graph::dims order):
// every index, stride and launch dim uses it. Under the buckets policy it is
// the capacity of the run's bucket, under the update policy the value itself.
// scalars holds the current value of each run-time scalar (Graph leaves of op
// kScalar, in order; an i32 scalar travels as its bit pattern). inputs
// holds where each input's contents are this run (plan.h
// input_pointer_slots): its arena buffer, or the caller's memory.
// offsets holds Kernel::offsets: the byte offsets, from arena or params, of
// the buffers the kernel's code addresses through it, so that several
// kernel table entries (the same layer's step in every layer) can run one
// kernel of the module on their own buffers.
// The valid counts: a program with run-time dims holds int32
// valid[kMaxRuntimeDims] in the arena at plan::kValidDimsOffset, the value
// of each run-time dim for this run (valid <= dims), written by the runtime
// before a run whenever it changed. Only kernels that combine elements along
// a run-time axis read it (docs/dynamic.md).
//
// Alternatives: a plan step lists the kernels that may compute it, in order
// of preference (step_choices). A run takes the first that applies at its
// dims (its rows inside its range) and that the device can run; the last
// choice always applies. A kernel may compute several consecutive steps at
// once: its node then stands for all of them.
#pragma once

#include <cstdint>
#include <limits>
#include <string>
#include <vector>

#include "gdl_abi_types.cuh"
#include "types.h"

namespace gdl {

inline constexpr int kMaxRuntimeDims = GDL_MAX_RUNTIME_DIMS;
inline constexpr int kMaxScalars = GDL_MAX_SCALARS;
inline constexpr int kMaxInputCopies = GDL_MAX_INPUT_COPIES;
inline constexpr int kMaxInputPointers = GDL_MAX_INPUT_POINTERS;
inline constexpr int kMaxKernelOffsets = GDL_MAX_KERNEL_OFFSETS;

// Every module also holds this kernel, taking a gdl_input_copies by value
// (gdl_abi.cuh): the runtime's graph node that copies the inputs bound from
// host memory from their pinned staging buffers into the arena, one entry
// per blockIdx.y.
inline constexpr const char* kInputCopySymbol = "gdl_input_copy";

// How the runtime computes a kernel's launch dims from the run's layout dims:
//   grid.x = max(1, ceil(element_count(work, dims) / items_per_block))
//   grid.y = grid_y; block.x = block; dynamic shared memory = shared_bytes.
struct LaunchRule {
  Shape work;
  int64_t items_per_block = 256;
  uint32_t grid_y = 1;
  uint32_t block = 256;
  uint32_t shared_bytes = 0;
};

// A 2-D tiled tensor map (CUtensorMap, for cp.async.bulk.tensor) over a
// param, which the runtime encodes when a session starts (it holds the
// params' device address) and writes into the arena's scratch.
struct TensorMap {
  uint64_t scratch_offset = 0;  // where its kTensorMapBytes go, from the arena base
  uint64_t params_offset = 0;   // the tensor's first element in the params region
  uint32_t element_bytes = 2;   // copied as raw bits of this width
  uint64_t columns = 0, rows = 0;  // the tensor's extents, innermost first
  uint64_t row_stride_bytes = 0;
  uint32_t box_columns = 0, box_rows = 0;  // one copy's box
  uint32_t swizzle_bytes = 0;   // 0, 32, 64 or 128: the box rows' swizzle in shared memory
};
inline constexpr uint64_t kTensorMapBytes = GDL_TENSOR_MAP_BYTES;  // sizeof(CUtensorMap)

inline constexpr int64_t kAnyRows = std::numeric_limits<int64_t>::max();

// A matmul step's product computed by cuBLASLt (runtime/src/library_matmul.h)
// in front of the kernel: the runtime calls it (in a graph, as a child
// graph node captured once per graph) with a [rows, K] @ b [K, N] as the
// plan places them at the run's layout dims, the rows the element count of
// the kernel's `rows`, and it writes the product [rows, N] (f32 sums
// rounded to the dtype), row-major, to `product_offset`; the kernel then
// applies the step's epilogue to it.
// Served only where every dim of the rows is bucket-served, so a graph's
// call never changes (session.cc).
struct LibraryMatmul {
  bool active = false;
  DType dtype = DType::kF32;  // of a and b: f16, bf16 or f32
  bool transpose_a = false, transpose_b = false;  // stored [K, rows] / [N, K]
  int32_t a = -1, b = -1;     // the IR values of a and b (their plan buffers)
  uint64_t b_element_offset = 0;  // a column window's first element in b's buffer
  int64_t n = 0, k = 0, lda = 0, ldb = 0;  // lda, ldb: the stored rows' lengths
  uint64_t product_offset = 0;    // from the arena base, in the scratch area
  uint64_t workspace_offset = 0, workspace_bytes = 0;  // cuBLASLt's workspace, in the scratch area
  // A norm fused in front of the matmul: kernel `prologue_kernel` (of the
  // same step, never a choice) writes the normalized rows of a, [rows, K]
  // row-major, at `normalized_offset` in the scratch area before the call,
  // which reads them as its a. -1: the call reads a itself.
  int32_t prologue_kernel = -1;
  uint64_t normalized_offset = 0;
};

// One kernel of the module, or a collective's NCCL call.
struct Kernel {
  std::string symbol;       // the extern "C" kernel name; "" for a collective
  // Its gdl_offsets (at most kMaxKernelOffsets; the rest of at[] is zero).
  // Entries that share a symbol differ here, and in their steps.
  std::vector<uint64_t> offsets;
  LaunchRule launch;
  int first_step = 0, last_step = 0;  // the plan steps it computes
  // It applies while the rows, the element count of `rows` at the run's
  // layout dims, lie in [min_rows, max_rows] (always, with the defaults).
  Shape rows;
  int64_t min_rows = 0, max_rows = kAnyRows;
  std::vector<int> scalars_used;   // indexes into the scalar list (for node updates)
  bool depends_on_dims = false;    // its launch or indexing uses a run-time dim
  // It works before it waits for its producers on more than an L2 prefetch
  // (the streamed attention's early KV copies): the runtime makes its edges
  // from the input copy nodes programmatic, so it starts beside them. Into
  // other kernels those edges stay ordinary, which measured faster for the
  // matmuls (docs/performance.md).
  bool early_start = false;
  // Its blocks wait for each other: launched cooperatively, every block
  // resident at once, it runs only on devices that hold them all (else the
  // step's next choice runs).
  bool cooperative = false;
  std::vector<TensorMap> tensor_maps;
  LibraryMatmul library;  // active: a cuBLASLt product runs before the kernel
  // A collective step (all_reduce, all_gather, reduce_scatter, laid out by
  // compiler/passes/collective_layout.h) is no kernel: the runtime calls
  // NCCL over the session's communicator (in a graph, a child graph node
  // captured once per graph), reading the collective's argument and writing
  // the collective (this IR value) where the plan places them at the run's
  // layout dims; each rank's part is contiguous. -1: a kernel.
  int32_t collective = -1;
  bool is_collective() const { return collective >= 0; }
};

struct KernelTable {
  std::vector<Kernel> kernels;
  std::vector<std::vector<int>> step_choices;  // per plan step: indexes into kernels, preferred first
};

// Whether kernel k applies at these layout dims (its rows in range).
bool kernel_applies(const Kernel& k, const std::vector<int64_t>& dims);
// Whether it applies at every binding.
inline bool applies_always(const Kernel& k) { return k.min_rows <= 0 && k.max_rows == kAnyRows; }

// One NVRTC compile of the generated code (codegen.h SourceUnit: a step's
// kernels, a chain's, the input copy): its CUBIN and PTX, and the kernels
// they define. The runtime loads each unit as a library of its own.
struct ModuleUnit {
  std::vector<std::string> symbols;
  std::vector<uint8_t> cubin;
  std::string ptx;
  bool operator==(const ModuleUnit&) const = default;
};

// The program's kernels as NVRTC made them, for one arch.
struct CompiledModule {
  std::string arch;
  std::vector<ModuleUnit> units;
  int nvrtc_major = 0, nvrtc_minor = 0;
  bool from_cache = false;  // every unit came from the cache
  double compile_ms = 0;
};

}  // namespace gdl
