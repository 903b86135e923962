// write_chain_tensor_maps (chain_tensor_maps.h). The encoder is the driver's
// cuTensorMapEncodeTiled, reached through the runtime's entry-point query,
// so that the runtime needs no link to libcuda.
#include "chain_tensor_maps.h"

#include <cuda.h>
#include <cudaTypedefs.h>

#include <mutex>
#include <string>
#include <vector>

#include "chain.h"
#include "cuda_util.h"

namespace gdl::rt {
namespace {

static_assert(sizeof(CUtensorMap) == kChainTensorMapBytes, "the plan's tensor map size");

Expected<PFN_cuTensorMapEncodeTiled_v12000> tensor_map_encoder() {
  static std::once_flag once;
  static PFN_cuTensorMapEncodeTiled_v12000 encode = nullptr;
  static cudaError_t error = cudaSuccess;
  static cudaDriverEntryPointQueryResult found = cudaDriverEntryPointSymbolNotFound;
  std::call_once(once, [] {
    error = cudaGetDriverEntryPointByVersion("cuTensorMapEncodeTiled", reinterpret_cast<void**>(&encode), 12000,
                                             cudaEnableDefault, &found);
  });
  if (error != cudaSuccess) return cuda_error(error, "finding the driver's cuTensorMapEncodeTiled");
  if (found != cudaDriverEntryPointSuccess || encode == nullptr)
    return Status::Unavailable("the driver has no cuTensorMapEncodeTiled (a chain kernel's weight copies need it)");
  return encode;
}

// The swizzle that lays a box's rows of `row_bytes` out as gdl::chain::tile_at
// does: 16-byte pieces exchanged by the row's address bits, so that the
// eight rows an ldmatrix phase reads fall in distinct banks.
CUtensorMapSwizzle swizzle_for(uint64_t row_bytes) {
  switch (row_bytes) {
    case 32: return CU_TENSOR_MAP_SWIZZLE_32B;
    case 64: return CU_TENSOR_MAP_SWIZZLE_64B;
    case 128: return CU_TENSOR_MAP_SWIZZLE_128B;
    default: return CU_TENSOR_MAP_SWIZZLE_NONE;  // 16-byte rows: eight of them are one phase's 128 bytes already
  }
}

}  // namespace

Status write_chain_tensor_maps(const Program::Impl& program, unsigned char* arena, const unsigned char* params,
                               cudaStream_t stream) {
  const Artifact& a = program.artifact;
  if (a.chains.empty()) return Status::Ok();
  Expected<PFN_cuTensorMapEncodeTiled_v12000> encode = tensor_map_encoder();
  if (!encode) return encode.status();
  std::vector<std::vector<CUtensorMap>> maps;
  for (const ChainKernel& c : a.chains) {
    const uint64_t k = static_cast<uint64_t>(a.plan.chains.at(static_cast<size_t>(c.chain)).k);
    const uint64_t cols = k / c.blocks;
    const cuuint64_t dims[2] = {k, k};  // columns, rows
    const cuuint64_t row_stride[1] = {k * 2};
    const cuuint32_t box[2] = {static_cast<cuuint32_t>(cols), static_cast<cuuint32_t>(kChainKMultiple)};
    const cuuint32_t element_strides[2] = {1, 1};
    std::vector<CUtensorMap>& mine = maps.emplace_back(c.weight_offsets.size());
    for (size_t s = 0; s < c.weight_offsets.size(); ++s) {
      // The elements are 2-byte f16 or bf16: the copy moves their bits.
      const CUresult r = (*encode)(&mine[s], CU_TENSOR_MAP_DATA_TYPE_UINT16, 2,
                                   const_cast<unsigned char*>(params + c.weight_offsets[s]), dims, row_stride, box,
                                   element_strides, CU_TENSOR_MAP_INTERLEAVE_NONE, swizzle_for(cols * 2),
                                   CU_TENSOR_MAP_L2_PROMOTION_L2_256B, CU_TENSOR_MAP_FLOAT_OOB_FILL_NONE);
      if (r != CUDA_SUCCESS)
        return Status::Internal("encoding the tensor map of step " + std::to_string(c.first + static_cast<int>(s)) +
                                "'s weight for chain kernel '" + c.symbol + "': CUresult " + std::to_string(r));
    }
    GDL_CUDA_TRY(cudaMemcpyAsync(arena + c.tensor_maps_offset, mine.data(), mine.size() * sizeof(CUtensorMap),
                                 cudaMemcpyHostToDevice, stream),
                 "copying the tensor maps of chain kernel '" + c.symbol + "'");
  }
  GDL_CUDA_TRY(cudaStreamSynchronize(stream), "waiting for the chain kernels' tensor maps");  // `maps` is pageable host memory
  return Status::Ok();
}

}  // namespace gdl::rt
