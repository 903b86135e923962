// The kernel ABI shared by every generated kernel (see core/kernel_table.h):
//
//   extern "C" __global__ void gdl_s<step>_<op>(unsigned char* arena,
//                                              const unsigned char* params,
//                                              gdl_args args,
//                                              gdl_offsets offsets);
//
// arena:  base of the per-session device arena (inputs, outputs, temporaries).
// params: base of the persistent params region (weights), read only.
// args:   passed by value; dims[i] is the layout extent of run-time dim i
//         (Graph::dims order): the capacity of the run's bucket under the
//         buckets policy, the value itself under the update policy;
//         scalars[i] the current value of run-time scalar i (an i32 scalar
//         travels as its bit pattern).
// offsets: passed by value; the byte offsets from arena or params of the
//         buffers this launch reads and writes (at[i] for the kernel's i-th
//         address), so that kernels equal but for where their buffers lie
//         (one per layer of a model) are one kernel in the module
//         (compiler/codegen/kernel_sharing.h).
// The valid counts: a program with run-time dims reserves a block at a
// fixed arena offset (plan::kValidDimsOffset) holding int valid[8], the
// value of each run-time dim for this run (valid[i] <= dims[i]), written by
// the runtime before a run whenever it changed. Kernels that combine
// elements along a run-time axis read it (gdl::valid_dim) and ignore
// positions past it; every other kernel computes the padding too.
//
// This header is the ABI's limits and structs alone, with no device code:
// it compiles as plain host C++ too (g++ -std=c++20), so the host code that
// fills these structs can include the definitions the kernels are compiled
// with. gdl_abi.cuh includes it and adds the device side.
#pragma once

#define GDL_MAX_RUNTIME_DIMS 8
#define GDL_MAX_SCALARS 16
#define GDL_MAX_INPUT_POINTERS 16

// inputs[j]: where the kernels read input j (declaration order) this run:
// its arena buffer, or the caller's memory for an input bound by reference
// (Session::bind_reference). Only inputs that no step writes into and
// whose index is below GDL_MAX_INPUT_POINTERS are read through it.
struct gdl_args {
  int dims[GDL_MAX_RUNTIME_DIMS];
  float scalars[GDL_MAX_SCALARS];
  const unsigned char* inputs[GDL_MAX_INPUT_POINTERS];
};

// The runtime's input copy node (gdl_input_copy, generated into every
// module): entry y copies bytes[y] bytes from src[y] (an input's pinned
// staging buffer, read over the bus, or the caller's device memory) to
// dst[y] (its arena buffer); bytes 0 skips the entry (an input with no bind
// since the last run).
#define GDL_MAX_INPUT_COPIES 16
struct gdl_input_copies {
  const unsigned char* src[GDL_MAX_INPUT_COPIES];
  unsigned char* dst[GDL_MAX_INPUT_COPIES];
  unsigned long long bytes[GDL_MAX_INPUT_COPIES];
};

// A tensor map (CUtensorMap) that a kernel copies through, which the
// runtime encodes when a session starts and writes into the arena's
// scratch: its size, and its alignment there.
#define GDL_TENSOR_MAP_BYTES 128

// The kernel's buffer offsets: at most GDL_MAX_KERNEL_OFFSETS addresses of
// a kernel are taken from here; any further ones stay in its code.
#define GDL_MAX_KERNEL_OFFSETS 16
struct gdl_offsets {
  unsigned long long at[GDL_MAX_KERNEL_OFFSETS];
};

// Passed by value as kernel parameters: the host writes them byte for byte.
static_assert(sizeof(gdl_args) == 4 * (GDL_MAX_RUNTIME_DIMS + GDL_MAX_SCALARS) + 8 * GDL_MAX_INPUT_POINTERS,
              "gdl_args has no padding");
static_assert(sizeof(gdl_offsets) == 8 * GDL_MAX_KERNEL_OFFSETS, "gdl_offsets has no padding");
static_assert(sizeof(gdl_input_copies) == 24 * GDL_MAX_INPUT_COPIES, "gdl_input_copies has no padding");
