// The tensor maps of the chain kernels (codegen.h ChainKernel): the chain's
// producer thread copies its weights slot by slot with
// cp.async.bulk.tensor, which reads each step's [K, K] weight through a
// CUtensorMap. A map holds the weight's device address, so the runtime
// encodes the maps once the params region and the arena exist and writes
// them into the arena's scratch, where the kernel reads them.
#pragma once

#include <cuda_runtime_api.h>

#include "program_impl.h"

namespace gdl::rt {

// Encodes every chain kernel's maps over the params at `params` and copies
// them to `arena` + ChainKernel::tensor_maps_offset on `stream`; returns
// once they are there. Nothing to do for a program without chains.
Status write_chain_tensor_maps(const Program::Impl& program, unsigned char* arena, const unsigned char* params,
                               cudaStream_t stream);

}  // namespace gdl::rt
