// cuBLASLt products of the matmul steps whose kernel table entry carries a
// library call (core/kernel_table.h LibraryMatmul). One handle per session;
// per kernel and row count, the call's descriptors and the algorithm
// cuBLASLt's heuristic picked for this device, made at first use and kept.
//
// Row-major [rows, K] @ [K, N] -> [rows, N] is, in cuBLAS's column-major
// terms, D^T (N x rows) = B^T (N x K) * A^T (K x rows): cuBLASLt's A is our
// b and its B our a, each as stored (a transposed operand is an op T).
// Scale and accumulation in f32 (CUBLAS_COMPUTE_32F: no TF32 for f32
// inputs), D in the inputs' dtype (the sums rounded once, as the generated
// kernels' epilogues round them first).
#pragma once

#include <cublasLt.h>
#include <cuda_runtime_api.h>

#include <map>
#include <utility>
#include <vector>

#include "gdl/status.h"
#include "kernel_table.h"
#include "plan.h"

namespace gdl::rt {

class LibraryMatmuls {
 public:
  LibraryMatmuls() = default;
  ~LibraryMatmuls();
  LibraryMatmuls(const LibraryMatmuls&) = delete;
  LibraryMatmuls& operator=(const LibraryMatmuls&) = delete;

  // Whether cuBLASLt has an algorithm for kernel `index`'s call at `rows`
  // rows on the current device (asked once per kernel and rows).
  bool usable(const plan::Plan& p, const KernelTable& t, int index, int64_t rows);
  // Enqueues the call on `stream`: a and b where the plan places them at
  // these layout dims, the product and workspace in the arena's scratch.
  Status enqueue(const plan::Plan& p, const KernelTable& t, int index, const std::vector<int64_t>& layout_dims,
                 unsigned char* arena, const unsigned char* params, cudaStream_t stream);

 private:
  struct Call {
    cublasLtMatmulDesc_t desc = nullptr;
    cublasLtMatrixLayout_t a = nullptr, b = nullptr, d = nullptr;  // cuBLASLt's: our b, our a, the product
    cublasLtMatmulAlgo_t algo{};
    bool found = false;  // the heuristic returned an algorithm
  };
  Status make_call(const plan::Plan& p, const LibraryMatmul& l, int64_t rows, Call& call);
  Call* call_for(const plan::Plan& p, const KernelTable& t, int index, int64_t rows);  // made at first use; null without a handle

  cublasLtHandle_t handle_ = nullptr;
  bool handle_failed_ = false;
  std::map<std::pair<int, int64_t>, Call> calls_;
};

}  // namespace gdl::rt
