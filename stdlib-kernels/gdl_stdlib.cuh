// The gdl device library: everything a generated translation unit includes.
// These headers are embedded in the compiler (cmake/embed.cmake) and handed
// to NVRTC as in-memory headers; to build generated code with nvcc instead,
// add this folder to the include path. Each header includes what it uses,
// so any one of them also compiles on its own; two of them compile as plain
// host C++ as well (g++ -std=c++20), for the host code that must agree with
// the kernels: gdl_abi_types.cuh (the kernel ABI's limits and structs) and
// gdl_chain_layout.cuh (the chain's constants and layout).
#pragma once

#include "gdl_abi.cuh"
#include "gdl_types.cuh"
#include "gdl_index.cuh"
#include "gdl_ops.cuh"
#include "gdl_elementwise.cuh"
#include "gdl_reduce.cuh"
#include "gdl_select.cuh"
#include "gdl_random.cuh"
#include "gdl_split.cuh"
#include "gdl_matmul.cuh"
#include "gdl_attention.cuh"
#include "gdl_attention_group.cuh"
#include "gdl_attention_prefill.cuh"
#include "gdl_attention_backward.cuh"
#include "gdl_chain.cuh"
