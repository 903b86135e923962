// DLPack exchange (dlpack/dlpack.h, Debian's libdlpack-dev): bind inputs,
// params and states from any framework's DLTensor (PyTorch, JAX, CuPy,
// NumPy), and hand outputs and states out as DLManagedTensors that view the
// session's device memory without a copy.
//
//   DLManagedTensor* t = torch::toDLPack(x);                  // a CUDA tensor
//   gdl::bind_dlpack(*session, "x", t->dl_tensor);             // no host copy: read by the next run
//   session->run();
//   DLManagedTensor* y = *gdl::output_dlpack(*session, "y");   // torch::fromDLPack(y): a view
//
// Accepted tensors: f32, f16, bf16, i32 and bool (DLPack's kDLBool, code 6,
// or kDLUInt of 8 bits, whose bytes must then be 0 or 1), one lane, row-major and compact (strides null or
// equal to the row-major ones; axes of extent 1 may have any stride), on the
// CPU (kDLCPU, kDLCUDAHost) or on the session's GPU (kDLCUDA, kDLCUDAManaged).
// Anything else is InvalidArgument before anything is copied. What each
// call then does, and how long the caller's memory must live, is the
// Session call it forwards to (gdl/gdl.h): bind reads device memory at the
// next run (keep it unchanged until that run is done), host memory before it
// returns.
#pragma once

#include <dlpack/dlpack.h>

#include <cstddef>
#include <cstdint>
#include <string>
#include <vector>

#include "gdl/gdl.h"

namespace gdl {

// What a DLTensor holds, in gdl's terms: checked as described above.
struct DlpackTensor {
  const void* data = nullptr;  // data + byte_offset
  ElementType dtype = ElementType::kF32;
  std::vector<int64_t> shape;
  size_t bytes = 0;
  MemoryKind kind = MemoryKind::kHost;
  int device = -1;  // the GPU of a device tensor
};
Expected<DlpackTensor> describe_dlpack(const DLTensor& tensor);

// Session::bind / set_param / set_state from a DLTensor (a device tensor
// must be on the session's GPU; set_param takes host memory only).
Status bind_dlpack(Session& session, const std::string& input, const DLTensor& tensor);
Status set_param_dlpack(Session& session, const std::string& param, const DLTensor& tensor);
Status set_state_dlpack(Session& session, const std::string& state, const DLTensor& tensor);

// A DLManagedTensor viewing an output (Session::output_view: valid until
// the next run, run_eager or set_state) or a state (Session::state_view:
// fixed for the session's life, its contents changed by every run). The
// caller calls its deleter once done; the deleter frees the description,
// never the session's memory, and the session must outlive the view.
Expected<DLManagedTensor*> output_dlpack(Session& session, const std::string& output);
Expected<DLManagedTensor*> state_dlpack(Session& session, const std::string& state);

// The same description for any device memory of gdl's (what the two above
// make): a DLManagedTensor of `view`'s shape and strides on `device`.
DLManagedTensor* make_dlpack(void* data, ElementType dtype, const std::vector<int64_t>& shape,
                             const std::vector<int64_t>& strides, int device);

}  // namespace gdl
