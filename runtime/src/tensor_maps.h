// The kernels' tensor maps (kernel_table.h TensorMap): a kernel that copies
// a param with cp.async.bulk.tensor reads it through a CUtensorMap, which
// holds the param's device address. So the runtime encodes the maps once the
// params region and the arena exist and writes them into the arena's
// scratch, where the kernels read them.
#pragma once

#include <cuda_runtime_api.h>

#include "program_impl.h"

namespace gdl::rt {

// Encodes every tensor map of the program's kernels over the params at
// `params` and copies them to `arena` + TensorMap::scratch_offset on
// `stream`; returns once they are there. Nothing to do without maps.
Status write_tensor_maps(const Program::Impl& program, unsigned char* arena, const unsigned char* params,
                         cudaStream_t stream);

}  // namespace gdl::rt
