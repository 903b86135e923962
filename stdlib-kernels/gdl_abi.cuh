// The kernel ABI shared by every generated kernel (see compiler/src/codegen.h):
//
//   extern "C" __global__ void gdl_s<step>_<op>(unsigned char* arena,
//                                              const unsigned char* params,
//                                              gdl_args args);
//
// arena:  base of the per-session device arena (inputs, outputs, temporaries).
// params: base of the persistent params region (weights), read only.
// args:   passed by value; dims[i] is the current value of run-time dim i
//         (Graph::dims order), scalars[i] the current value of run-time
//         scalar i (an i32 scalar travels as its bit pattern).
#pragma once

#define GDL_MAX_RUNTIME_DIMS 8
#define GDL_MAX_SCALARS 16

struct gdl_args {
  int dims[GDL_MAX_RUNTIME_DIMS];
  float scalars[GDL_MAX_SCALARS];
};

#define GDL_DEV __device__ __forceinline__
