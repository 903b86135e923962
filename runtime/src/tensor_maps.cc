// write_tensor_maps (tensor_maps.h). The encoder is the driver's
// cuTensorMapEncodeTiled, reached through the runtime's entry-point query,
// so that the runtime needs no link to libcuda.
#include "tensor_maps.h"

#include <cuda.h>
#include <cudaTypedefs.h>

#include <mutex>
#include <string>
#include <vector>

#include "cuda_util.h"

namespace gdl::rt {
namespace {

static_assert(sizeof(CUtensorMap) == kTensorMapBytes, "the plan's tensor map size");

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
    return Status::Unavailable("the driver has no cuTensorMapEncodeTiled (a kernel's tensor copies need it)");
  return encode;
}

CUtensorMapSwizzle swizzle_of(uint32_t bytes) {
  switch (bytes) {
    case 32: return CU_TENSOR_MAP_SWIZZLE_32B;
    case 64: return CU_TENSOR_MAP_SWIZZLE_64B;
    case 128: return CU_TENSOR_MAP_SWIZZLE_128B;
    default: return CU_TENSOR_MAP_SWIZZLE_NONE;
  }
}

CUtensorMapDataType data_type_of(uint32_t element_bytes) {
  switch (element_bytes) {
    case 1: return CU_TENSOR_MAP_DATA_TYPE_UINT8;
    case 4: return CU_TENSOR_MAP_DATA_TYPE_UINT32;
    default: return CU_TENSOR_MAP_DATA_TYPE_UINT16;
  }
}

}  // namespace

Status write_tensor_maps(const Program::Impl& program, unsigned char* arena, const unsigned char* params,
                         cudaStream_t stream) {
  std::vector<std::pair<const TensorMap*, const Kernel*>> specs;
  for (const Kernel& k : program.kernels().kernels)
    for (const TensorMap& m : k.tensor_maps) specs.emplace_back(&m, &k);
  if (specs.empty()) return Status::Ok();
  Expected<PFN_cuTensorMapEncodeTiled_v12000> encode = tensor_map_encoder();
  if (!encode) return encode.status();
  std::vector<CUtensorMap> maps(specs.size());  // pageable: waited for below
  for (size_t i = 0; i < specs.size(); ++i) {
    const TensorMap& m = *specs[i].first;
    const cuuint64_t dims[2] = {m.columns, m.rows};
    const cuuint64_t row_stride[1] = {m.row_stride_bytes};
    const cuuint32_t box[2] = {m.box_columns, m.box_rows};
    const cuuint32_t element_strides[2] = {1, 1};
    // The elements' bits move unchanged: an unsigned type of their width.
    const CUresult r = (*encode)(&maps[i], data_type_of(m.element_bytes), 2,
                                 const_cast<unsigned char*>(params + m.params_offset), dims, row_stride, box,
                                 element_strides, CU_TENSOR_MAP_INTERLEAVE_NONE, swizzle_of(m.swizzle_bytes),
                                 CU_TENSOR_MAP_L2_PROMOTION_L2_256B, CU_TENSOR_MAP_FLOAT_OOB_FILL_NONE);
    if (r != CUDA_SUCCESS)
      return Status::Internal("encoding a tensor map of kernel '" + specs[i].second->symbol + "': CUresult " +
                              std::to_string(r));
    GDL_CUDA_TRY(cudaMemcpyAsync(arena + m.scratch_offset, &maps[i], sizeof(CUtensorMap), cudaMemcpyHostToDevice, stream),
                 "copying a tensor map of kernel '" + specs[i].second->symbol + "'");
  }
  GDL_CUDA_TRY(cudaStreamSynchronize(stream), "waiting for the kernels' tensor maps");
  return Status::Ok();
}

}  // namespace gdl::rt
