// LibraryMatmuls (library_matmul.h): cuBLASLt calls for the library matmul
// kernels. The heuristic is told the operands' alignment as the plan
// guarantees it at every binding (plan::buffer_alignment), so the algorithm
// it picks holds for every run of the kernel.
#include "library_matmul.h"

#include <string>

#include "cuda_util.h"

namespace gdl::rt {
namespace {

const char* cublas_name(cublasStatus_t s) { return cublasLtGetStatusName(s); }

Status cublas_error(cublasStatus_t s, const std::string& what) {
  return Status::Internal(what + ": " + cublas_name(s) + " (" + cublasLtGetStatusString(s) + ")");
}

#define GDL_CUBLAS_TRY(expr, what)                                \
  do {                                                            \
    const cublasStatus_t gdl_cublas_status_ = (expr);             \
    if (gdl_cublas_status_ != CUBLAS_STATUS_SUCCESS)              \
      return cublas_error(gdl_cublas_status_, what);              \
  } while (0)

cudaDataType_t cuda_type(DType t) {
  return t == DType::kF16 ? CUDA_R_16F : t == DType::kBF16 ? CUDA_R_16BF : CUDA_R_32F;
}

// The largest power of two, at most 256, that divides `bytes`.
uint32_t alignment_of(uint64_t bytes, uint64_t at_most) {
  uint64_t a = 1;
  while (a < at_most && bytes % (a * 2) == 0) a *= 2;
  return static_cast<uint32_t>(a);
}

}  // namespace

LibraryMatmuls::~LibraryMatmuls() {
  for (auto& [key, c] : calls_) {
    if (c.a) (void)cublasLtMatrixLayoutDestroy(c.a);
    if (c.b) (void)cublasLtMatrixLayoutDestroy(c.b);
    if (c.d) (void)cublasLtMatrixLayoutDestroy(c.d);
    if (c.desc) (void)cublasLtMatmulDescDestroy(c.desc);
  }
  if (handle_) (void)cublasLtDestroy(handle_);
}

Status LibraryMatmuls::make_call(const plan::Plan& p, const LibraryMatmul& l, int64_t rows, Call& c) {
  const cudaDataType_t t = cuda_type(l.dtype);
  GDL_CUBLAS_TRY(cublasLtMatmulDescCreate(&c.desc, CUBLAS_COMPUTE_32F, CUDA_R_32F), "creating a cuBLASLt matmul");
  const cublasOperation_t op_a = l.transpose_b ? CUBLAS_OP_T : CUBLAS_OP_N;  // cuBLASLt's A is our b
  const cublasOperation_t op_b = l.transpose_a ? CUBLAS_OP_T : CUBLAS_OP_N;
  GDL_CUBLAS_TRY(cublasLtMatmulDescSetAttribute(c.desc, CUBLASLT_MATMUL_DESC_TRANSA, &op_a, sizeof op_a),
                 "setting cuBLASLt's op of b");
  GDL_CUBLAS_TRY(cublasLtMatmulDescSetAttribute(c.desc, CUBLASLT_MATMUL_DESC_TRANSB, &op_b, sizeof op_b),
                 "setting cuBLASLt's op of a");
  // Column-major shapes as stored: b is N x K (ld ldb), or K x N when transposed; a is K x rows, or rows x K.
  const uint64_t n = static_cast<uint64_t>(l.n), k = static_cast<uint64_t>(l.k), m = static_cast<uint64_t>(rows);
  GDL_CUBLAS_TRY(cublasLtMatrixLayoutCreate(&c.a, t, l.transpose_b ? k : n, l.transpose_b ? n : k, l.ldb),
                 "describing b for cuBLASLt");
  GDL_CUBLAS_TRY(cublasLtMatrixLayoutCreate(&c.b, t, l.transpose_a ? m : k, l.transpose_a ? k : m, l.lda),
                 "describing a for cuBLASLt");
  GDL_CUBLAS_TRY(cublasLtMatrixLayoutCreate(&c.d, t, n, m, static_cast<int64_t>(n)),
                 "describing the product for cuBLASLt");

  cublasLtMatmulPreference_t pref = nullptr;
  GDL_CUBLAS_TRY(cublasLtMatmulPreferenceCreate(&pref), "creating a cuBLASLt preference");
  const uint64_t esize = dtype_size(l.dtype);
  const uint32_t align_a = alignment_of(plan::buffer_alignment(p.buffers.at(static_cast<size_t>(l.b))), 256);
  const uint32_t align_b_offset = alignment_of(l.b_element_offset * esize, 256);
  const uint32_t align_lt_a = align_a < align_b_offset ? align_a : align_b_offset;  // our b, at its window
  const uint32_t align_lt_b =  // our a: the normalized rows in the scratch, or a's buffer
      l.prologue_kernel >= 0 ? 256 : alignment_of(plan::buffer_alignment(p.buffers.at(static_cast<size_t>(l.a))), 256);
  const uint32_t align_d = 256;
  const uint64_t workspace = l.workspace_bytes;
  cublasStatus_t s = cublasLtMatmulPreferenceSetAttribute(pref, CUBLASLT_MATMUL_PREF_MAX_WORKSPACE_BYTES, &workspace,
                                                          sizeof workspace);
  if (s == CUBLAS_STATUS_SUCCESS)
    s = cublasLtMatmulPreferenceSetAttribute(pref, CUBLASLT_MATMUL_PREF_MIN_ALIGNMENT_A_BYTES, &align_lt_a, sizeof align_lt_a);
  if (s == CUBLAS_STATUS_SUCCESS)
    s = cublasLtMatmulPreferenceSetAttribute(pref, CUBLASLT_MATMUL_PREF_MIN_ALIGNMENT_B_BYTES, &align_lt_b, sizeof align_lt_b);
  if (s == CUBLAS_STATUS_SUCCESS)
    s = cublasLtMatmulPreferenceSetAttribute(pref, CUBLASLT_MATMUL_PREF_MIN_ALIGNMENT_C_BYTES, &align_d, sizeof align_d);
  if (s == CUBLAS_STATUS_SUCCESS)
    s = cublasLtMatmulPreferenceSetAttribute(pref, CUBLASLT_MATMUL_PREF_MIN_ALIGNMENT_D_BYTES, &align_d, sizeof align_d);
  cublasLtMatmulHeuristicResult_t result{};
  int found = 0;
  if (s == CUBLAS_STATUS_SUCCESS)
    s = cublasLtMatmulAlgoGetHeuristic(handle_, c.desc, c.a, c.b, c.d, c.d, pref, 1, &result, &found);
  (void)cublasLtMatmulPreferenceDestroy(pref);
  // No algorithm is an answer (the generated kernels run instead), not an error.
  if (s == CUBLAS_STATUS_NOT_SUPPORTED) return Status::Ok();
  GDL_CUBLAS_TRY(s, "asking cuBLASLt for an algorithm");
  c.found = found > 0 && result.state == CUBLAS_STATUS_SUCCESS;
  c.algo = result.algo;
  return Status::Ok();
}

LibraryMatmuls::Call* LibraryMatmuls::call_for(const plan::Plan& p, const KernelTable& t, int index, int64_t rows) {
  auto key = std::make_pair(index, rows);
  auto it = calls_.find(key);
  if (it != calls_.end()) return &it->second;
  if (!handle_ && !handle_failed_) handle_failed_ = cublasLtCreate(&handle_) != CUBLAS_STATUS_SUCCESS;
  if (!handle_) return nullptr;
  Call& c = calls_[key];
  if (!make_call(p, t.kernels.at(static_cast<size_t>(index)).library, rows, c).ok()) c.found = false;
  return &c;
}

bool LibraryMatmuls::usable(const plan::Plan& p, const KernelTable& t, int index, int64_t rows) {
  const Call* c = call_for(p, t, index, rows);
  return c && c->found;
}

Status LibraryMatmuls::enqueue(const plan::Plan& p, const KernelTable& t, int index,
                               const std::vector<int64_t>& layout_dims, unsigned char* arena,
                               const unsigned char* params, cudaStream_t stream) {
  const Kernel& k = t.kernels.at(static_cast<size_t>(index));
  const LibraryMatmul& l = k.library;
  const int64_t rows = element_count(k.rows, layout_dims);
  Call* c = call_for(p, t, index, rows);
  if (!c || !c->found)
    return Status::Internal("kernel '" + k.symbol + "': cuBLASLt has no algorithm for its product at " +
                            std::to_string(rows) + " rows");
  const auto address = [&](int32_t v) {
    const plan::Buffer& b = p.buffers.at(static_cast<size_t>(v));
    return (b.region == plan::Region::kParams ? params : arena) + plan::offset_at(b, layout_dims);
  };
  const void* a = l.prologue_kernel >= 0 ? arena + l.normalized_offset : address(l.a);
  const void* b = address(l.b) + l.b_element_offset * dtype_size(l.dtype);
  void* product = arena + l.product_offset;
  void* workspace = arena + l.workspace_offset;
  const float one = 1.0f, zero = 0.0f;
  GDL_CUBLAS_TRY(cublasLtMatmul(handle_, c->desc, &one, b, c->a, a, c->b, &zero, product, c->d, product, c->d, &c->algo,
                                workspace, l.workspace_bytes, stream),
                 "calling cuBLASLt for kernel '" + k.symbol + "'");
  return Status::Ok();
}

}  // namespace gdl::rt
