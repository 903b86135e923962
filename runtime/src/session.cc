// Session: device memory, binding by copy, params, scalars and reading outputs.
//
// Session::create:
// 1. Find a usable GPU (none: Unavailable with CUDA's reason), make the
//    device current, create the session's stream.
// 2. One cudaMalloc for the arena (plan.arena_bytes); the params region is
//    shared with the program's other sessions on the device.
// 3. Load the kernel module and find every step's kernel.
// 4. A pinned staging buffer and an upload event per input.
// 5. Run-time dims start at their upper bounds, scalars at their defaults.
// The graph itself is built by the first run() (session_run.cc).
//
// bind: validate everything (name, role, dtype, shape, bounds, byte count)
// before touching any state; then copy the caller's bytes into the staging
// buffer (after the previous upload from it has finished) and enqueue the
// upload on the stream, so it is ordered after every run already submitted.
#include <algorithm>
#include <cstring>

#include "cuda_util.h"
#include "session_impl.h"

namespace gdl {

using rt::Stopwatch;

Session::Impl::Impl(Program p, std::shared_ptr<const Program::Impl> pi, const SessionOptions& o)
    : program(std::move(p)), prog_ptr(std::move(pi)), prog(*prog_ptr), options(o), device(o.device) {}

Session::Impl::~Impl() {
  if (cudaSetDevice(device) != cudaSuccess) return;
  if (stream) (void)cudaStreamSynchronize(stream);
  if (exec) (void)cudaGraphExecDestroy(exec);
  if (graph) (void)cudaGraphDestroy(graph);
  for (InputSlot& in : inputs) {
    if (in.uploaded) (void)cudaEventDestroy(in.uploaded);
    if (in.staging) (void)cudaFreeHost(in.staging);
  }
  if (run_start) (void)cudaEventDestroy(run_start);
  if (run_end) (void)cudaEventDestroy(run_end);
  if (arena) (void)cudaFree(arena);
  if (stream) (void)cudaStreamDestroy(stream);
  (void)cudaGetLastError();
  // library and params release themselves (params only with the last session).
}

Status Session::Impl::make_current() const {
  GDL_CUDA_TRY(cudaSetDevice(device), "making device " + std::to_string(device) + " current");
  return Status::Ok();
}

static float scalar_bits(DType dtype, double value) {
  if (dtype != DType::kI32) return static_cast<float>(value);
  int32_t i = static_cast<int32_t>(round_to_dtype(value, DType::kI32));
  float f;
  std::memcpy(&f, &i, sizeof f);  // an i32 scalar travels as its bit pattern
  return f;
}

Status Session::Impl::init() {
  int count = 0;
  GDL_CUDA_TRY(cudaGetDeviceCount(&count), "counting CUDA devices");
  if (count == 0) return Status::Unavailable("no usable GPU: the CUDA runtime found no device");
  if (device < 0 || device >= count)
    return Status::InvalidArgument("device " + std::to_string(device) + " does not exist; there are " +
                                   std::to_string(count) + " devices");
  GDL_RETURN_IF_ERROR(make_current());
  GDL_CUDA_TRY(cudaStreamCreate(&stream), "creating the session stream");

  uint64_t arena_bytes = std::max<uint64_t>(prog.plan().arena_bytes, plan::kAlignment);
  GDL_CUDA_TRY(cudaMalloc(reinterpret_cast<void**>(&arena), arena_bytes),
               "allocating the arena (" + std::to_string(arena_bytes) + " bytes)");
  Expected<std::shared_ptr<rt::DeviceParams>> shared = rt::acquire_device_params(prog, device);
  if (!shared) return shared.status();
  params = std::move(shared).value();

  Stopwatch load_time;
  GDL_RETURN_IF_ERROR(library.load(prog, device));
  stats.library_load_us = load_time.elapsed_us();
  stats.module_image = library.image();

  inputs.resize(prog.inputs.size());
  for (size_t i = 0; i < inputs.size(); ++i) {
    inputs[i].bound_dims.assign(prog.dims.size(), -1);
    if (prog.buffer_of(prog.input_values[i]).region == plan::Region::kNone) continue;
    GDL_CUDA_TRY(cudaMallocHost(&inputs[i].staging, std::max<size_t>(prog.inputs[i].max_bytes, 1)),
                 "allocating the staging buffer of input '" + prog.inputs[i].name + "'");
    GDL_CUDA_TRY(cudaEventCreateWithFlags(&inputs[i].uploaded, cudaEventDisableTiming), "creating an event");
  }
  if (options.record_device_time) {
    GDL_CUDA_TRY(cudaEventCreate(&run_start), "creating an event");
    GDL_CUDA_TRY(cudaEventCreate(&run_end), "creating an event");
  }

  for (const RuntimeDimInfo& d : prog.dims) dims.push_back(d.hi);
  for (size_t d = 0; d < dims.size(); ++d) args.dims[d] = static_cast<int32_t>(dims[d]);
  for (size_t s = 0; s < prog.scalars.size(); ++s)
    args.scalars[s] = scalar_bits(rt::to_internal(prog.scalars[s].dtype), prog.scalars[s].default_value);
  stats.node_count = prog.plan().steps.size();
  stats.arena_bytes = prog.plan().arena_bytes;
  stats.params_bytes = prog.plan().params_bytes;
  return Status::Ok();
}

namespace {

std::string shape_text(const std::vector<int64_t>& shape) {
  std::string s = "[";
  for (size_t i = 0; i < shape.size(); ++i) s += (i ? ", " : "") + std::to_string(shape[i]);
  return s + "]";
}

// Checks a concrete shape against a declared one; on success `dims_out`
// holds the value each run-time dim takes (-1 where the shape does not use it).
Status match_shape(const TensorInfo& info, const std::vector<RuntimeDimInfo>& dims, const std::vector<int64_t>& shape,
                   std::vector<int64_t>& dims_out) {
  // Built only on failure: bind is on the per-request path.
  auto what = [&] { return "'" + info.name + "' is " + info.type_text + ", got shape " + shape_text(shape); };
  if (shape.size() != info.shape.size()) return Status::InvalidArgument(what() + " (rank differs)");
  dims_out.assign(dims.size(), -1);
  for (size_t a = 0; a < shape.size(); ++a) {
    const AxisInfo& axis = info.shape[a];
    if (!axis.is_runtime()) {
      if (shape[a] != axis.extent)
        return Status::InvalidArgument(what() + " (axis " + std::to_string(a) + " must be " + std::to_string(axis.extent) + ")");
      continue;
    }
    const RuntimeDimInfo& d = dims[static_cast<size_t>(axis.dim)];
    if (shape[a] < d.lo || shape[a] > d.hi)
      return Status::OutOfRange(what() + " (dim " + d.name + " = " + std::to_string(shape[a]) + " is outside [" +
                                std::to_string(d.lo) + ", " + std::to_string(d.hi) + "])");
    int64_t& value = dims_out[static_cast<size_t>(axis.dim)];
    if (value >= 0 && value != shape[a])
      return Status::InvalidArgument(what() + " (dim " + d.name + " takes two different values)");
    value = shape[a];
  }
  return Status::Ok();
}

std::string role_of(const Program::Impl& p, const std::string& name) {
  if (p.input_index.count(name)) return "an input";
  if (p.param_index.count(name)) return "a param";
  if (p.output_index.count(name)) return "an output";
  if (p.scalar_index.count(name)) return "a run-time scalar";
  return "";
}

Status wrong_role(const Program::Impl& p, const std::string& name, const char* wanted, const char* instead) {
  std::string role = role_of(p, name);
  if (role.empty()) return Status::NotFound("program " + p.graph().program_name + " has no " + wanted + " '" + name + "'");
  return Status::InvalidArgument("'" + name + "' is " + role + ", not " + wanted + instead);
}

}  // namespace

Status Session::Impl::bind(const std::string& name, const void* data, size_t bytes, ElementType dtype,
                           const std::vector<int64_t>& shape, MemoryKind kind) {
  auto it = prog.input_index.find(name);
  if (it == prog.input_index.end()) {
    std::string hint = prog.param_index.count(name) ? " (use set_param)" : prog.scalar_index.count(name) ? " (use set_scalar)" : "";
    return wrong_role(prog, name, "input", hint.c_str());
  }
  size_t index = it->second;
  const TensorInfo& info = prog.inputs[index];
  if (dtype != info.dtype)
    return Status::InvalidArgument("input '" + name + "' is " + info.type_text + ", got " + element_type_name(dtype) + " data");
  std::vector<int64_t> shape_dims;
  GDL_RETURN_IF_ERROR(match_shape(info, prog.dims, shape, shape_dims));
  size_t count = 1;
  for (int64_t e : shape) count *= static_cast<size_t>(e);
  size_t expected = count * element_size(dtype);
  if (bytes != expected)
    return Status::InvalidArgument("input '" + name + "' with shape " + shape_text(shape) + " is " + std::to_string(expected) +
                                   " bytes, got " + std::to_string(bytes));
  if (!data && bytes > 0) return Status::InvalidArgument("input '" + name + "': data is null");
  const plan::Buffer& buffer = prog.buffer_of(prog.input_values[index]);
  if (kind == MemoryKind::kDevice) {
    cudaPointerAttributes attributes{};
    GDL_CUDA_TRY(cudaPointerGetAttributes(&attributes, data), "checking the device pointer bound to '" + name + "'");
    if (attributes.type != cudaMemoryTypeDevice && attributes.type != cudaMemoryTypeManaged)
      return Status::InvalidArgument("input '" + name + "' was bound as device memory, but the pointer is not device memory");
  }

  // Everything is valid: from here on the bind takes effect.
  InputSlot& slot = inputs[index];
  if (buffer.region != plan::Region::kNone && bytes > 0) {
    Stopwatch copy_time;
    unsigned char* target = arena + buffer.offset;
    if (kind == MemoryKind::kHost) {
      if (slot.upload_pending) {
        GDL_CUDA_TRY(cudaEventSynchronize(slot.uploaded), "waiting for the previous upload of '" + name + "'");
        slot.upload_pending = false;
      }
      std::memcpy(slot.staging, data, bytes);
      GDL_CUDA_TRY(cudaMemcpyAsync(target, slot.staging, bytes, cudaMemcpyHostToDevice, stream),
                   "copying input '" + name + "' to the device");
    } else {
      GDL_CUDA_TRY(cudaMemcpyAsync(target, data, bytes, cudaMemcpyDefault, stream),
                   "copying input '" + name + "' from device memory");
    }
    GDL_CUDA_TRY(cudaEventRecord(slot.uploaded, stream), "recording the upload of '" + name + "'");
    slot.upload_pending = true;  // the event also covers any earlier upload from the staging buffer
    stats.input_copies += 1;
    stats.input_copy_bytes += bytes;
    stats.input_copy_us += copy_time.elapsed_us();
  }
  slot.bound = true;
  slot.bound_dims = shape_dims;
  for (size_t d = 0; d < shape_dims.size(); ++d)
    if (shape_dims[d] >= 0) {
      dims[d] = shape_dims[d];
      args.dims[d] = static_cast<int32_t>(shape_dims[d]);
    }
  return Status::Ok();
}

Status Session::Impl::set_dim(const std::string& name, int64_t value) {
  for (size_t d = 0; d < prog.dims.size(); ++d) {
    if (prog.dims[d].name != name) continue;
    if (value < prog.dims[d].lo || value > prog.dims[d].hi)
      return Status::OutOfRange("dim " + name + " = " + std::to_string(value) + " is outside [" +
                                std::to_string(prog.dims[d].lo) + ", " + std::to_string(prog.dims[d].hi) + "]");
    dims[d] = value;
    args.dims[d] = static_cast<int32_t>(value);
    return Status::Ok();
  }
  return Status::NotFound("program " + prog.graph().program_name + " has no run-time dim '" + name + "'");
}

Status Session::Impl::set_param(const std::string& name, const void* data, size_t bytes) {
  auto it = prog.param_index.find(name);
  if (it == prog.param_index.end())
    return wrong_role(prog, name, "param", prog.input_index.count(name) ? " (use bind)" : "");
  const TensorInfo& info = prog.params[it->second];
  if (bytes != info.max_bytes)
    return Status::InvalidArgument("param '" + name + "' is " + info.type_text + " = " + std::to_string(info.max_bytes) +
                                   " bytes, got " + std::to_string(bytes));
  if (!data && bytes > 0) return Status::InvalidArgument("param '" + name + "': data is null");
  const plan::Buffer& buffer = prog.buffer_of(prog.param_values[it->second]);
  if (buffer.region == plan::Region::kParams && bytes > 0) {
    Stopwatch copy_time;
    GDL_CUDA_TRY(cudaMemcpyAsync(params->base() + buffer.offset, data, bytes, cudaMemcpyHostToDevice, stream),
                 "copying param '" + name + "' to the device");
    GDL_CUDA_TRY(cudaStreamSynchronize(stream), "copying param '" + name + "' to the device");
  }
  params->mark_set(it->second);
  return Status::Ok();
}

Status Session::Impl::set_scalar(const std::string& name, double value) {
  auto it = prog.scalar_index.find(name);
  if (it == prog.scalar_index.end()) return wrong_role(prog, name, "run-time scalar", "");
  int index = static_cast<int>(it->second);
  args.scalars[index] = scalar_bits(rt::to_internal(prog.scalars[it->second].dtype), value);
  if (!exec) return Status::Ok();  // the graph will be built with the new value
  const std::vector<KernelInfo>& kernels = prog.artifact.kernels;
  for (size_t step = 0; step < kernels.size(); ++step)
    for (int used : kernels[step].scalars_used)
      if (used == index) {
        GDL_RETURN_IF_ERROR(update_node(step));
        break;
      }
  return Status::Ok();
}

Status Session::Impl::read(const std::string& name, void* host, size_t bytes) {
  auto it = prog.output_index.find(name);
  if (it == prog.output_index.end()) return wrong_role(prog, name, "output", "");
  if (!has_run) return Status::FailedPrecondition("read('" + name + "') before any run: call run() or run_eager() first");
  const TensorInfo& info = prog.outputs[it->second];
  ir::ValueId value = prog.output_values[it->second];
  size_t expected = static_cast<size_t>(element_count(prog.graph().node(value).type.shape, last_run_dims)) *
                    element_size(info.dtype);
  if (bytes != expected)
    return Status::InvalidArgument("output '" + name + "' of the last run is " + std::to_string(expected) + " bytes, got " +
                                   std::to_string(bytes));
  if (!host && bytes > 0) return Status::InvalidArgument("read('" + name + "'): destination is null");
  const plan::Buffer& buffer = prog.buffer_of(value);
  const unsigned char* source = (buffer.region == plan::Region::kParams ? params->base() : arena) + buffer.offset;
  GDL_CUDA_TRY(cudaMemcpyAsync(host, source, bytes, cudaMemcpyDeviceToHost, stream), "copying output '" + name + "' out");
  GDL_CUDA_TRY(cudaStreamSynchronize(stream), "waiting for the run and the copy of output '" + name + "'");
  return Status::Ok();
}

Status Session::Impl::poison(uint8_t byte) {
  // Arena bytes outside every input slot, as [begin, end) gaps.
  std::vector<std::pair<uint64_t, uint64_t>> kept;
  for (ir::ValueId v : prog.input_values) {
    const plan::Buffer& b = prog.buffer_of(v);
    if (b.region == plan::Region::kArena && b.bytes > 0) kept.push_back({b.offset, b.offset + b.bytes});
  }
  std::sort(kept.begin(), kept.end());
  uint64_t cursor = 0, end = prog.plan().arena_bytes;
  kept.push_back({end, end});
  for (auto [begin, stop] : kept) {
    if (begin > cursor)
      GDL_CUDA_TRY(cudaMemsetAsync(arena + cursor, byte, std::min(begin, end) - cursor, stream), "poisoning the arena");
    cursor = std::max(cursor, stop);
  }
  return Status::Ok();
}

// ----------------------------------------------------------------- Session

Session::Session(std::unique_ptr<Impl> impl) : impl_(std::move(impl)) {}
Session::~Session() = default;

Expected<std::unique_ptr<Session>> Session::create(const Program& program, const SessionOptions& options) {
  return rt::guarded("Session::create", [&]() -> Expected<std::unique_ptr<Session>> {
    auto impl = std::make_unique<Impl>(program, program.impl_, options);
    GDL_RETURN_IF_ERROR(impl->init());
    return std::unique_ptr<Session>(new Session(std::move(impl)));
  });
}

Status Session::set_param(const std::string& name, const void* data, size_t bytes) {
  return rt::guarded("Session::set_param", [&] {
    GDL_RETURN_IF_ERROR(impl_->make_current());
    return impl_->set_param(name, data, bytes);
  });
}

Status Session::bind(const std::string& name, const void* data, size_t bytes, ElementType dtype,
                     const std::vector<int64_t>& shape, MemoryKind kind) {
  return rt::guarded("Session::bind", [&] {
    GDL_RETURN_IF_ERROR(impl_->make_current());
    return impl_->bind(name, data, bytes, dtype, shape, kind);
  });
}

Status Session::set_dim(const std::string& name, int64_t value) {
  return rt::guarded("Session::set_dim", [&] { return impl_->set_dim(name, value); });
}

Status Session::set_scalar(const std::string& name, double value) {
  return rt::guarded("Session::set_scalar", [&] {
    GDL_RETURN_IF_ERROR(impl_->make_current());
    return impl_->set_scalar(name, value);
  });
}

Status Session::run() {
  return rt::guarded("Session::run", [&] {
    GDL_RETURN_IF_ERROR(impl_->make_current());
    return impl_->run();
  });
}

Status Session::run_eager() {
  return rt::guarded("Session::run_eager", [&] {
    GDL_RETURN_IF_ERROR(impl_->make_current());
    return impl_->run_eager();
  });
}

Status Session::read(const std::string& name, void* host, size_t bytes) {
  return rt::guarded("Session::read", [&] {
    GDL_RETURN_IF_ERROR(impl_->make_current());
    return impl_->read(name, host, bytes);
  });
}

Expected<std::vector<int64_t>> Session::shape_of(const std::string& name) const {
  return rt::guarded("Session::shape_of", [&]() -> Expected<std::vector<int64_t>> {
    const Program::Impl& p = impl_->prog;
    ir::ValueId value = ir::kNoValue;
    const std::vector<int64_t>* dims = &impl_->dims;
    if (auto it = p.input_index.find(name); it != p.input_index.end()) value = p.input_values[it->second];
    if (auto it = p.output_index.find(name); it != p.output_index.end()) {
      value = p.output_values[it->second];
      if (impl_->has_run) dims = &impl_->last_run_dims;
    }
    if (value == ir::kNoValue) return wrong_role(p, name, "input or output", "");
    return concrete_shape(p.graph().node(value).type.shape, *dims);
  });
}

Status Session::synchronize() {
  return rt::guarded("Session::synchronize", [&] {
    GDL_RETURN_IF_ERROR(impl_->make_current());
    GDL_CUDA_TRY(cudaStreamSynchronize(impl_->stream), "waiting for the session stream");
    return Status::Ok();
  });
}

SessionStats Session::stats() const {
  Impl& s = *impl_;
  if (s.options.record_device_time && s.timed_run_pending && s.make_current().ok() &&
      cudaEventSynchronize(s.run_end) == cudaSuccess) {
    float ms = 0;
    if (cudaEventElapsedTime(&ms, s.run_start, s.run_end) == cudaSuccess) s.stats.last_device_us = ms * 1000.0;
  }
  (void)cudaGetLastError();
  return s.stats;
}

const Program& Session::program() const { return impl_->program; }
int Session::device() const { return impl_->device; }

Status Session::poison_arena_for_testing(uint8_t byte) {
  return rt::guarded("Session::poison_arena_for_testing", [&] {
    GDL_RETURN_IF_ERROR(impl_->make_current());
    return impl_->poison(byte);
  });
}

}  // namespace gdl
