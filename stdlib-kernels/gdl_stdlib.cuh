// The gdl device library: everything a generated translation unit includes.
// These headers are embedded in the compiler (cmake/embed.cmake) and handed
// to NVRTC as in-memory headers; to build generated code with nvcc instead,
// add this folder to the include path.
#pragma once

#include "gdl_abi.cuh"
#include "gdl_types.cuh"
#include "gdl_index.cuh"
#include "gdl_ops.cuh"
#include "gdl_elementwise.cuh"
#include "gdl_reduce.cuh"
#include "gdl_split.cuh"
#include "gdl_matmul.cuh"
#include "gdl_attention.cuh"
#include "gdl_chain.cuh"
