// DLPack exchange (gdl/dlpack.h): a DLTensor checked and described in
// gdl's terms, forwarded to the Session calls; outputs and states handed
// out as DLManagedTensors over the session's memory.
#include "gdl/dlpack.h"

#include <limits>
#include <memory>

namespace gdl {
namespace {

// DLPack's kDLBool (added after the 0.6 header Debian ships).
constexpr uint8_t kDLBoolCode = 6;

Expected<ElementType> element_type_of(const DLDataType& t) {
  if (t.lanes != 1) return Status::InvalidArgument("a DLPack tensor of " + std::to_string(t.lanes) + " lanes; gdl takes 1");
  if (t.code == kDLFloat && t.bits == 32) return ElementType::kF32;
  if (t.code == kDLFloat && t.bits == 16) return ElementType::kF16;
  if (t.code == kDLBfloat && t.bits == 16) return ElementType::kBF16;
  if (t.code == kDLInt && t.bits == 32) return ElementType::kI32;
  if ((t.code == kDLBoolCode || t.code == kDLUInt) && t.bits == 8) return ElementType::kBool;
  return Status::InvalidArgument("a DLPack tensor of type code " + std::to_string(t.code) + " with " +
                                 std::to_string(t.bits) + " bits; gdl takes f32, f16, bf16, i32 and bool");
}

DLDataType dlpack_type_of(ElementType t) {
  switch (t) {
    case ElementType::kF32: return {kDLFloat, 32, 1};
    case ElementType::kF16: return {kDLFloat, 16, 1};
    case ElementType::kBF16: return {kDLBfloat, 16, 1};
    case ElementType::kI32: return {kDLInt, 32, 1};
    case ElementType::kBool: return {kDLBoolCode, 8, 1};
  }
  return {kDLFloat, 32, 1};
}

// The description and the shape and strides a DLManagedTensor points at.
struct Held {
  DLManagedTensor managed{};
  std::vector<int64_t> shape, strides;
};

void delete_held(DLManagedTensor* t) { delete static_cast<Held*>(t->manager_ctx); }

Status on_session_device(const Session& session, const DlpackTensor& t, const DLTensor& tensor) {
  // Managed memory is reachable from every device; other device memory must be the session's.
  if (t.kind == MemoryKind::kDevice && tensor.device.device_type != kDLCUDAManaged && t.device != session.device())
    return Status::InvalidArgument("the DLPack tensor is on GPU " + std::to_string(t.device) + ", the session on GPU " +
                                   std::to_string(session.device()));
  return Status::Ok();
}

}  // namespace

Expected<DlpackTensor> describe_dlpack(const DLTensor& tensor) {
  DlpackTensor t;
  Expected<ElementType> dtype = element_type_of(tensor.dtype);
  if (!dtype) return dtype.status();
  t.dtype = *dtype;
  switch (tensor.device.device_type) {
    case kDLCPU:
    case kDLCUDAHost: t.kind = MemoryKind::kHost; break;
    case kDLCUDA:
    case kDLCUDAManaged:
      t.kind = MemoryKind::kDevice;
      t.device = tensor.device.device_id;
      break;
    default:
      return Status::InvalidArgument("a DLPack tensor on device type " + std::to_string(tensor.device.device_type) +
                                     "; gdl takes CPU and CUDA memory");
  }
  if (tensor.ndim < 0 || (tensor.ndim > 0 && !tensor.shape))
    return Status::InvalidArgument("a DLPack tensor with " + std::to_string(tensor.ndim) + " axes and no shape");
  uint64_t count = 1;
  for (int a = 0; a < tensor.ndim; ++a) {
    const int64_t e = tensor.shape[a];
    if (e < 0) return Status::InvalidArgument("a DLPack tensor of extent " + std::to_string(e) + " on axis " + std::to_string(a));
    if (e > 0 && count > std::numeric_limits<uint64_t>::max() / 8 / static_cast<uint64_t>(e))
      return Status::InvalidArgument("a DLPack tensor too large to address");
    count *= static_cast<uint64_t>(e);
    t.shape.push_back(e);
  }
  if (tensor.strides && count > 0) {  // an empty tensor has no layout to check
    int64_t want = 1;
    for (int a = tensor.ndim; a-- > 0;) {
      if (tensor.shape[a] > 1 && tensor.strides[a] != want)
        return Status::InvalidArgument("a DLPack tensor that is not row-major and compact (axis " + std::to_string(a) +
                                       " has stride " + std::to_string(tensor.strides[a]) + ", row-major is " +
                                       std::to_string(want) + "): make it contiguous first");
      want *= tensor.shape[a];
    }
  }
  t.bytes = static_cast<size_t>(count) * element_size(t.dtype);
  if (!tensor.data && t.bytes > 0) return Status::InvalidArgument("a DLPack tensor with elements and no data");
  t.data = tensor.data ? static_cast<const unsigned char*>(tensor.data) + tensor.byte_offset : nullptr;
  return t;
}

Status bind_dlpack(Session& session, const std::string& input, const DLTensor& tensor) {
  Expected<DlpackTensor> t = describe_dlpack(tensor);
  if (!t) return t.status();
  if (Status here = on_session_device(session, *t, tensor); !here.ok()) return here;
  return session.bind(input, t->data, t->bytes, t->dtype, t->shape, t->kind);
}

Status set_param_dlpack(Session& session, const std::string& param, const DLTensor& tensor) {
  Expected<DlpackTensor> t = describe_dlpack(tensor);
  if (!t) return t.status();
  if (t->kind != MemoryKind::kHost)
    return Status::InvalidArgument("set_param_dlpack('" + param + "') takes host memory; the tensor is on a GPU");
  const TensorInfo* info = session.program().find_param(param);
  if (info && info->dtype != t->dtype)
    return Status::InvalidArgument("param '" + param + "' is " + element_type_name(info->dtype) + ", the tensor " +
                                   element_type_name(t->dtype));
  return session.set_param(param, t->data, t->bytes);
}

Status set_state_dlpack(Session& session, const std::string& state, const DLTensor& tensor) {
  Expected<DlpackTensor> t = describe_dlpack(tensor);
  if (!t) return t.status();
  if (Status here = on_session_device(session, *t, tensor); !here.ok()) return here;
  const TensorInfo* info = session.program().find_state(state);
  if (info && info->dtype != t->dtype)
    return Status::InvalidArgument("state '" + state + "' is " + element_type_name(info->dtype) + ", the tensor " +
                                   element_type_name(t->dtype));
  return session.set_state(state, t->data, t->bytes, t->kind);
}

DLManagedTensor* make_dlpack(void* data, ElementType dtype, const std::vector<int64_t>& shape,
                             const std::vector<int64_t>& strides, int device) {
  auto held = std::make_unique<Held>();
  held->shape = shape;
  held->strides = strides;
  DLTensor& t = held->managed.dl_tensor;
  t.data = data;
  t.device = {kDLCUDA, device};
  t.ndim = static_cast<int>(shape.size());
  t.dtype = dlpack_type_of(dtype);
  t.shape = held->shape.data();
  t.strides = held->strides.data();
  t.byte_offset = 0;
  held->managed.manager_ctx = held.get();
  held->managed.deleter = delete_held;
  return &held.release()->managed;
}

Expected<DLManagedTensor*> output_dlpack(Session& session, const std::string& output) {
  Expected<Session::TensorView> view = session.output_view(output);
  if (!view) return view.status();
  return make_dlpack(view->data, view->dtype, view->shape, view->strides, view->device);
}

Expected<DLManagedTensor*> state_dlpack(Session& session, const std::string& state) {
  const TensorInfo* info = session.program().find_state(state);
  Expected<Session::DeviceView> view = session.state_view(state);
  if (!view) return view.status();
  if (!info) return Status::Internal("state '" + state + "' has a view and no declaration");
  std::vector<int64_t> shape, strides(info->shape.size(), 1);
  for (const AxisInfo& a : info->shape) shape.push_back(a.extent);
  for (size_t a = shape.size(); a-- > 1;) strides[a - 1] = strides[a] * shape[a];
  return make_dlpack(view->data, info->dtype, shape, strides, session.device());
}

}  // namespace gdl
