// DLPack exchange on the CPU: which DLTensors describe_dlpack accepts and
// how it reads them (dtype, shape, bytes, memory kind, byte offset), what it
// refuses and why, and the DLManagedTensors make_dlpack hands out. The GPU
// round trips (binding a device tensor, viewing an output) are in
// tests/gpu/embedding_test.cc.
#include <doctest/doctest.h>

#include "gdl/dlpack.h"

namespace gdl {
namespace {

DLTensor tensor_of(void* data, DLDataType type, std::vector<int64_t>& shape, int64_t* strides = nullptr,
                   DLDevice device = {kDLCPU, 0}) {
  DLTensor t{};
  t.data = data;
  t.device = device;
  t.ndim = static_cast<int>(shape.size());
  t.dtype = type;
  t.shape = shape.data();
  t.strides = strides;
  return t;
}

TEST_CASE("dlpack: every gdl dtype, host and device memory, the byte offset, compact strides") {
  float storage[64] = {};
  std::vector<int64_t> shape{4, 8};
  struct Case {
    DLDataType type;
    ElementType want;
  };
  for (const Case& c : {Case{{kDLFloat, 32, 1}, ElementType::kF32}, Case{{kDLFloat, 16, 1}, ElementType::kF16},
                        Case{{kDLBfloat, 16, 1}, ElementType::kBF16}, Case{{kDLInt, 32, 1}, ElementType::kI32},
                        Case{{6, 8, 1}, ElementType::kBool}, Case{{kDLUInt, 8, 1}, ElementType::kBool}}) {
    Expected<DlpackTensor> t = describe_dlpack(tensor_of(storage, c.type, shape));
    REQUIRE(t.ok());
    CHECK(t->dtype == c.want);
    CHECK(t->shape == shape);
    CHECK(t->bytes == 32 * element_size(c.want));
    CHECK(t->kind == MemoryKind::kHost);
    CHECK(t->data == storage);
  }
  int64_t strides[] = {8, 1};
  DLTensor on_gpu = tensor_of(storage, {kDLFloat, 32, 1}, shape, strides, {kDLCUDA, 3});
  on_gpu.byte_offset = 16;
  Expected<DlpackTensor> g = describe_dlpack(on_gpu);
  REQUIRE(g.ok());
  CHECK(g->kind == MemoryKind::kDevice);
  CHECK(g->device == 3);
  CHECK(g->data == reinterpret_cast<unsigned char*>(storage) + 16);
  // An axis of extent 1 may have any stride (PyTorch gives such axes odd ones).
  std::vector<int64_t> row{1, 8};
  int64_t odd[] = {999, 1};
  CHECK(describe_dlpack(tensor_of(storage, {kDLFloat, 32, 1}, row, odd)).ok());
  std::vector<int64_t> scalar;
  Expected<DlpackTensor> s = describe_dlpack(tensor_of(storage, {kDLInt, 32, 1}, scalar, nullptr, {kDLCUDAHost, 0}));
  REQUIRE(s.ok());
  CHECK(s->bytes == 4);
  CHECK(s->kind == MemoryKind::kHost);
}

TEST_CASE("dlpack: refusals name what is wrong") {
  float storage[64] = {};
  std::vector<int64_t> shape{4, 8};
  auto refused = [](const DLTensor& t, const std::string& why) {
    Expected<DlpackTensor> d = describe_dlpack(t);
    REQUIRE_FALSE(d.ok());
    CHECK(d.status().code() == StatusCode::kInvalidArgument);
    INFO(d.status().message());
    CHECK(d.status().message().find(why) != std::string::npos);
  };
  refused(tensor_of(storage, {kDLFloat, 64, 1}, shape), "type code 2 with 64 bits");
  refused(tensor_of(storage, {kDLFloat, 32, 4}, shape), "4 lanes");
  refused(tensor_of(storage, {kDLComplex, 64, 1}, shape), "gdl takes f32, f16, bf16, i32 and bool");
  refused(tensor_of(storage, {kDLFloat, 32, 1}, shape, nullptr, {kDLROCM, 0}), "device type 10");
  int64_t transposed[] = {1, 4};
  refused(tensor_of(storage, {kDLFloat, 32, 1}, shape, transposed), "not row-major and compact");
  int64_t padded[] = {16, 1};
  refused(tensor_of(storage, {kDLFloat, 32, 1}, shape, padded), "axis 0 has stride 16, row-major is 8");
  std::vector<int64_t> negative{4, -1};
  refused(tensor_of(storage, {kDLFloat, 32, 1}, negative), "extent -1 on axis 1");
  refused(tensor_of(nullptr, {kDLFloat, 32, 1}, shape), "no data");
  std::vector<int64_t> huge{int64_t{1} << 40, int64_t{1} << 40};
  refused(tensor_of(storage, {kDLFloat, 32, 1}, huge), "too large");
  DLTensor no_shape = tensor_of(storage, {kDLFloat, 32, 1}, shape);
  no_shape.shape = nullptr;
  refused(no_shape, "no shape");
}

TEST_CASE("dlpack: make_dlpack describes device memory and its deleter frees only the description") {
  float storage[40] = {};
  DLManagedTensor* t = make_dlpack(storage, ElementType::kBF16, {4, 5}, {8, 1}, 2);
  REQUIRE(t != nullptr);
  CHECK(t->dl_tensor.data == storage);
  CHECK(t->dl_tensor.device.device_type == kDLCUDA);
  CHECK(t->dl_tensor.device.device_id == 2);
  CHECK(t->dl_tensor.ndim == 2);
  CHECK(t->dl_tensor.dtype.code == kDLBfloat);
  CHECK(t->dl_tensor.dtype.bits == 16);
  CHECK(t->dl_tensor.shape[1] == 5);
  CHECK(t->dl_tensor.strides[0] == 8);
  CHECK(t->dl_tensor.byte_offset == 0);
  // What it describes reads back through describe_dlpack when compact.
  DLManagedTensor* compact = make_dlpack(storage, ElementType::kBool, {2, 5}, {5, 1}, 0);
  Expected<DlpackTensor> back = describe_dlpack(compact->dl_tensor);
  REQUIRE(back.ok());
  CHECK(back->dtype == ElementType::kBool);
  CHECK(back->bytes == 10);
  t->deleter(t);  // under the sanitizers a leak or a double free would show
  compact->deleter(compact);
}

}  // namespace
}  // namespace gdl
