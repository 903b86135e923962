// The kernel ABI shared by every generated kernel (see compiler/src/codegen.h):
//
//   extern "C" __global__ void gdl_s<step>_<op>(unsigned char* arena,
//                                              const unsigned char* params,
//                                              gdl_args args);
//
// arena:  base of the per-session device arena (inputs, outputs, temporaries).
// params: base of the persistent params region (weights), read only.
// args:   passed by value; dims[i] is the layout extent of run-time dim i
//         (Graph::dims order): the capacity of the run's bucket under the
//         buckets policy, the value itself under the update policy;
//         scalars[i] the current value of run-time scalar i (an i32 scalar
//         travels as its bit pattern).
// The valid counts: a program with run-time dims reserves a block at a
// fixed arena offset (plan::kValidDimsOffset) holding int valid[8], the
// value of each run-time dim for this run (valid[i] <= dims[i]), written by
// the runtime before a run whenever it changed. Kernels that combine
// elements along a run-time axis read it (gdl::valid_dim) and ignore
// positions past it; every other kernel computes the padding too.
#pragma once

#define GDL_MAX_RUNTIME_DIMS 8
#define GDL_MAX_SCALARS 16

struct gdl_args {
  int dims[GDL_MAX_RUNTIME_DIMS];
  float scalars[GDL_MAX_SCALARS];
};

#define GDL_DEV __device__ __forceinline__

namespace gdl {

// The valid count of run-time dim d for this run, from the block at
// `block_offset` in the arena.
GDL_DEV int valid_dim(const unsigned char* arena, unsigned long long block_offset, int d) {
  return reinterpret_cast<const int*>(arena + block_offset)[d];
}

}  // namespace gdl
