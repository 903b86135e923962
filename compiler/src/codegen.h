// CUDA C++ generation from a plan, and its compilation with NVRTC.
//
// Kernel ABI (every generated kernel, so the runtime treats them alike):
//   extern "C" __global__ void NAME(unsigned char* arena,
//                                   const unsigned char* params,
//                                   gdl_args args);
//   struct gdl_args { int dims[kMaxRuntimeDims]; float scalars[kMaxScalars]; };
// dims holds the layout extent of each run-time dim (Graph::dims order):
// every index, stride and launch dim uses it. Under the buckets policy it is
// the capacity of the run's bucket, under the update policy the value itself.
// scalars holds the current value of each run-time scalar (Graph leaves of op
// kScalar, in order; an i32 scalar travels as its bit pattern).
// The valid counts: a program with run-time dims holds int32
// valid[kMaxRuntimeDims] in the arena at plan::kValidDimsOffset (256 bytes
// reserved by the planner), the value of each run-time dim for this run
// (valid <= dims), written by the runtime before a run whenever it changed.
// Only kernels that combine elements along a run-time axis read it (sum,
// mean, max and softmax over that axis, layernorm/rmsnorm over it, attention
// positions when T is run-time) and ignore the positions past it; everything
// else computes the padding like any other position (docs/dynamic.md).
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include "gdl/status.h"
#include "plan.h"

namespace gdl {

inline constexpr int kMaxRuntimeDims = 8;
inline constexpr int kMaxScalars = 16;

// How the runtime computes a step's launch dims from the current run-time dims:
//   grid.x = max(1, ceil(element_count(work, dims) / items_per_block))
//   grid.y = grid_y; block.x = block; dynamic shared memory = shared_bytes.
struct LaunchRule {
  Shape work;
  int64_t items_per_block = 256;
  uint32_t grid_y = 1;
  uint32_t block = 256;
  uint32_t shared_bytes = 0;
};

// A matmul step whose row count is known only at run time and may fall on
// either side of kMatmulRowsLimit (kernel_choice.h) has two kernels, each
// compiled alone so that neither's code, registers or shared memory shape
// the other's: `symbol` (the rows kernel) runs while the rows, the element
// count of `rows` at the run's dims, are at most rows_limit, and `large`
// (the tiled kernel) above. Every other step has one kernel and no large.
struct LargeKernel {
  std::string symbol;              // "" when the step has one kernel
  LaunchRule launch;
  Shape rows;                      // the matmul's rows: its result's shape without the last axis
  int64_t rows_limit = 0;
};

struct KernelInfo {
  std::string symbol;              // the extern "C" kernel name
  LaunchRule launch;
  std::vector<int> scalars_used;   // indexes into the scalar list (for node updates)
  bool depends_on_dims = false;    // launch or indexing uses a run-time dim
  // It works before it waits for its producers on more than an L2 prefetch
  // (the streamed attention's early KV copies): the runtime makes its edges
  // from the input copy nodes programmatic, so it starts beside them. Into
  // other kernels those edges stay ordinary, which measured faster for the
  // matmuls (docs/performance.md).
  bool early_start = false;
  LargeKernel large;
};

// Whether a run at these dims (Graph::dims order) launches the step's large
// kernel.
bool uses_large_kernel(const KernelInfo& k, const std::vector<int64_t>& dims);

// A kernel of a plan::Chain (chain.h, gdl_chain.cuh): launched
// cooperatively with a grid of `blocks` x `groups` blocks of `threads`,
// every block resident at once (the runtime checks that they fit on the
// device, else it keeps the steps' kernels), in place of steps [first, last]
// while the rows, the element count of `rows` at the run's dims, lie in
// [min_rows, max_rows]. A chain has one kernel for up to kChainMaxRows rows
// (groups = 1) and, with row groups, a second one for more.
struct ChainKernel {
  std::string symbol;
  int chain = 0;            // index in plan::Plan::chains
  int first = 0, last = 0;  // that chain's steps
  Shape rows;
  int64_t min_rows = 0, max_rows = 0;
  uint32_t blocks = 0, groups = 1, threads = 0, shared_bytes = 0;
  // Its tensor maps (chain_tensor_maps_offset: one per step, in the arena's
  // scratch), which the runtime writes from the steps' weights (b, params
  // offsets) when a session starts: [K, K] 2-byte elements, a box of K /
  // blocks columns and gdl::chain::kSlotRows rows.
  uint64_t tensor_maps_offset = 0;
  std::vector<uint64_t> weight_offsets;
};

// Whether a run at these dims launches this chain kernel.
bool uses_chain(const ChainKernel& c, const std::vector<int64_t>& dims);

// Every module also holds this kernel, taking a gdl_input_copies by value
// (gdl_abi.cuh): the runtime's graph node that copies the inputs bound from
// host memory from their pinned staging buffers into the arena, one entry
// per blockIdx.y.
inline constexpr const char* kInputCopySymbol = "gdl_input_copy";

struct GeneratedCode {
  std::string source;              // one CUDA C++ translation unit
  std::vector<KernelInfo> kernels; // one per plan step, same order (a step's large kernel in it)
  std::vector<ChainKernel> chains; // per plan chain in order: its kernel, then its row groups' if any
};

// `arch` is the CUBIN target ("sm_90"): below sm_90 the kernels that need
// its bulk copies (the streamed attention) give way to portable ones.
GeneratedCode generate_cuda(const plan::Plan& p, const std::string& arch = "sm_90");

// The compute capability in an arch name: "sm_90" and "sm_90a" -> 90; 0 when
// it is not an sm_ name.
int sm_number(const std::string& arch);

struct CompileOptions {
  std::string arch = "sm_90";      // CUBIN target; PTX is always kept too
  std::string cache_dir;           // "" = $GDL_CACHE_DIR or ~/.cache/gdl; "-" = no cache
  std::string cuda_include_dir;    // "" = $CUDA_HOME/include or /usr/local/cuda/include
};

struct CompiledModule {
  std::string arch;
  std::vector<uint8_t> cubin;
  std::string ptx;
  int nvrtc_major = 0, nvrtc_minor = 0;
  bool from_cache = false;
  double compile_ms = 0;
};

// Compiles with NVRTC (CUBIN for options.arch and PTX), through the on-disk
// cache keyed by a hash of source, options and NVRTC version. A failure
// carries NVRTC's program log in the Status message.
Expected<CompiledModule> compile_cuda(const std::string& source, const CompileOptions& options);

}  // namespace gdl
