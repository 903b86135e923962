// The Python module `gdl` (pybind11): load or compile a program, make a
// session, bind and read NumPy arrays and PyTorch (or any DLPack) tensors,
// run. Device tensors go through DLPack without a host copy; outputs and
// states come back as DLPack views of the session's memory
// (torch.from_dlpack). Every failing gdl call raises gdl.Error, whose
// message is the Status (docs/packaging.md, "Python").
#include <pybind11/numpy.h>
#include <pybind11/pybind11.h>
#include <pybind11/stl.h>

#include <algorithm>
#include <cstring>
#include <map>
#include <memory>
#include <mutex>
#include <string>
#include <vector>

#include "gdl/dlpack.h"
#include "gdl/gdl.h"
#include "gdl/jit.h"
#include "gdl/version.h"

namespace py = pybind11;

namespace {

// DLPack's device types that gdl accepts (dlpack.h), as the ints that
// __dlpack_device__ tuples hold.
constexpr int kDlpackCuda = kDLCUDA;
constexpr int kDlpackCudaManaged = kDLCUDAManaged;

struct Error : std::runtime_error {
  using std::runtime_error::runtime_error;
};

void check(const gdl::Status& status) {
  if (!status.ok()) throw Error(status.ToString());
}

template <typename T>
T take(gdl::Expected<T> expected) {
  check(expected.status());
  return std::move(expected).value();
}

// A tensor taken from Python, as a DLTensor, with what keeps its memory
// alive: a DLManagedTensor out of a "dltensor" capsule (renamed
// "used_dltensor" as the protocol asks; its deleter runs when this is
// destroyed), or a NumPy array described through the buffer protocol (which
// takes read-only arrays too, that NumPy's __dlpack__ refuses).
class ConsumedTensor {
 public:
  explicit ConsumedTensor(DLManagedTensor* managed) : managed_(managed), tensor_(managed->dl_tensor) {}
  explicit ConsumedTensor(py::array array) : array_(std::move(array)) {
    tensor_.data = const_cast<void*>(array_.data());
    tensor_.device = {kDLCPU, 0};
    tensor_.ndim = static_cast<int32_t>(array_.ndim());
    tensor_.dtype = dlpack_dtype(array_.dtype());
    for (py::ssize_t a = 0; a < array_.ndim(); ++a) {
      shape_.push_back(array_.shape(a));
      strides_.push_back(array_.strides(a) / static_cast<int64_t>(array_.itemsize()));
      if (array_.strides(a) % static_cast<int64_t>(array_.itemsize()) != 0) strides_.back() = -1;  // refused as not compact
    }
    tensor_.shape = shape_.data();
    tensor_.strides = strides_.data();
  }
  ConsumedTensor(const ConsumedTensor&) = delete;
  ConsumedTensor& operator=(const ConsumedTensor&) = delete;
  ~ConsumedTensor() {
    if (managed_ && managed_->deleter) managed_->deleter(managed_);
  }
  const DLTensor& tensor() const { return tensor_; }

 private:
  // NumPy's dtypes as DLPack's codes; those gdl does not take get a code
  // that describe_dlpack names in its refusal.
  static DLDataType dlpack_dtype(const py::dtype& dtype) {
    const uint8_t bits = static_cast<uint8_t>(dtype.itemsize() * 8);
    switch (dtype.kind()) {
      case 'f': return {kDLFloat, bits, 1};
      case 'i': return {kDLInt, bits, 1};
      case 'u': return {kDLUInt, bits, 1};
      case 'b': return {kDLUInt, 8, 1};  // gdl/dlpack.h takes u8 as bool (its bytes are 0 or 1)
      default: return {kDLOpaqueHandle, bits, 1};
    }
  }

  DLManagedTensor* managed_ = nullptr;
  py::array array_;
  DLTensor tensor_{};
  std::vector<int64_t> shape_, strides_;
};

bool is_device_tensor(const py::object& object) {
  if (!py::hasattr(object, "__dlpack_device__")) return false;
  const auto device = object.attr("__dlpack_device__")().cast<std::pair<int, int>>();
  return device.first == kDlpackCuda || device.first == kDlpackCudaManaged;
}

// Takes a NumPy array, or any object with __dlpack__ (a PyTorch tensor, ...).
// A device tensor is asked for on `stream`, so that its producer orders the
// work that writes it before whatever the session does on that stream next.
std::unique_ptr<ConsumedTensor> consume_dlpack(const py::object& object, uintptr_t stream) {
  if (py::isinstance<py::array>(object)) return std::make_unique<ConsumedTensor>(py::reinterpret_borrow<py::array>(object));
  if (!py::hasattr(object, "__dlpack__"))
    throw py::type_error("gdl takes NumPy arrays and DLPack tensors: a " +
                         py::str(py::type::of(object)).cast<std::string>() + " has no __dlpack__");
  py::object capsule = is_device_tensor(object) ? object.attr("__dlpack__")(py::arg("stream") = stream)
                                                : object.attr("__dlpack__")();
  PyObject* raw = capsule.ptr();
  auto* tensor = static_cast<DLManagedTensor*>(PyCapsule_GetPointer(raw, "dltensor"));
  if (!tensor) throw py::error_already_set();
  PyCapsule_SetName(raw, "used_dltensor");
  return std::make_unique<ConsumedTensor>(tensor);
}

// NumPy dtypes of gdl's element types. NumPy has no bfloat16: bf16 comes
// back as float32 (every bf16 value is exactly a float32).
py::dtype numpy_dtype(gdl::ElementType t) {
  switch (t) {
    case gdl::ElementType::kF32:
    case gdl::ElementType::kBF16: return py::dtype::of<float>();
    case gdl::ElementType::kF16: return py::dtype("float16");
    case gdl::ElementType::kI32: return py::dtype::of<int32_t>();
    case gdl::ElementType::kBool: return py::dtype::of<bool>();
  }
  check(gdl::Status(gdl::StatusCode::kInternal, "an element type without a NumPy dtype"));
  return {};
}

// Raw bytes of `dtype` as a NumPy array of `shape` (bf16 widened to float32).
py::array to_numpy(gdl::ElementType dtype, const std::vector<int64_t>& shape, const uint8_t* bytes, size_t count) {
  py::array out(numpy_dtype(dtype), std::vector<py::ssize_t>(shape.begin(), shape.end()));
  if (dtype == gdl::ElementType::kBF16) {
    const std::vector<double> values = gdl::decode_elements(dtype, bytes, count);
    std::copy(values.begin(), values.end(), static_cast<float*>(out.mutable_data()));
  } else {
    std::memcpy(out.mutable_data(), bytes, count * gdl::element_size(dtype));
  }
  return out;
}

int64_t element_count(const std::vector<int64_t>& shape) {
  int64_t n = 1;
  for (int64_t e : shape) n *= e;
  return n;
}

// A host copy of a DLPack tensor, for the CPU reference.
gdl::TensorData host_tensor(const std::string& name, const py::object& object) {
  const std::unique_ptr<ConsumedTensor> consumed = consume_dlpack(object, 0);
  const gdl::DlpackTensor described = take(gdl::describe_dlpack(consumed->tensor()));
  if (described.kind != gdl::MemoryKind::kHost)
    check(gdl::Status(gdl::StatusCode::kInvalidArgument, "'" + name + "' is on a GPU; the CPU reference takes host arrays"));
  const auto* data = static_cast<const uint8_t*>(described.data);
  return {described.dtype, described.shape, std::vector<uint8_t>(data, data + described.bytes)};
}

py::list describe(const std::vector<gdl::TensorInfo>& tensors, const std::vector<gdl::RuntimeDimInfo>& dims) {
  py::list out;
  for (const gdl::TensorInfo& t : tensors) {
    py::list shape;
    for (const gdl::AxisInfo& axis : t.shape)
      shape.append(axis.is_runtime() ? py::object(py::str(dims[axis.dim].name)) : py::object(py::int_(axis.extent)));
    py::dict entry;
    entry["name"] = t.name;
    entry["dtype"] = gdl::element_type_name(t.dtype);
    entry["shape"] = shape;
    entry["type"] = t.type_text;
    out.append(entry);
  }
  return out;
}

gdl::DimPolicyChoice dim_policy(const std::string& text) {
  if (text == "declared") return gdl::DimPolicyChoice::kAsDeclared;
  if (text == "buckets") return gdl::DimPolicyChoice::kBuckets;
  if (text == "update") return gdl::DimPolicyChoice::kUpdate;
  throw py::value_error("dim_policy is 'declared', 'buckets' or 'update', not '" + text + "'");
}

// A Session and the Python objects whose memory it may still read: tensors
// bound from device memory (copied by the next run) and by reference (read
// by every run until bound again). A Session takes one thread at a time,
// and Python threads may share this object: every call on it holds `calls_`,
// taken with the GIL released (so that a thread waiting for it never holds
// the GIL that the thread inside may need back).
class PySession {
 public:
  PySession(const gdl::Program& program, gdl::SessionOptions options, py::object stream_owner)
      : session_(take(gdl::Session::create(program, options))), stream_owner_(std::move(stream_owner)) {}
  ~PySession() {
    // The held tensors are released after every run that reads them is done.
    (void)locked([&] { return session_->synchronize(); });
  }

  void bind(const std::string& name, const py::object& tensor) {
    std::unique_ptr<ConsumedTensor> consumed = consume_dlpack(tensor, stream_handle());
    const gdl::DlpackTensor d = take(gdl::describe_dlpack(consumed->tensor()));
    check(locked([&] { return gdl::bind_dlpack(*session_, name, consumed->tensor()); }));
    // Host memory is copied before bind returns; device memory by the next run.
    hold(name, d.kind == gdl::MemoryKind::kDevice ? std::move(consumed) : nullptr);
  }

  void bind_reference(const std::string& name, const py::object& tensor) {
    std::unique_ptr<ConsumedTensor> consumed = consume_dlpack(tensor, stream_handle());
    const gdl::DlpackTensor d = take(gdl::describe_dlpack(consumed->tensor()));
    check(locked([&] { return session_->bind_reference(name, d.data, d.bytes, d.dtype, d.shape); }));
    hold(name, std::move(consumed));
  }

  void set_param(const std::string& name, const py::object& tensor) {
    const std::unique_ptr<ConsumedTensor> consumed = consume_dlpack(tensor, stream_handle());
    check(locked([&] { return gdl::set_param_dlpack(*session_, name, consumed->tensor()); }));
  }

  void set_state(const std::string& name, const py::object& tensor) {
    const std::unique_ptr<ConsumedTensor> consumed = consume_dlpack(tensor, stream_handle());
    // set_state returns once the state holds it.
    check(locked([&] { return gdl::set_state_dlpack(*session_, name, consumed->tensor()); }));
  }

  void run() { check(locked([&] { return session_->run(); })); }
  void run_eager() { check(locked([&] { return session_->run_eager(); })); }
  void synchronize() { wait(); }

  py::array read(const std::string& name) {
    const gdl::TensorInfo* info = session_->program().find_output(name);
    if (!info) check(gdl::Status(gdl::StatusCode::kNotFound, "'" + name + "' is not an output"));
    std::vector<int64_t> shape;
    std::vector<uint8_t> bytes;
    wait();
    check(locked([&] {
      gdl::Expected<std::vector<int64_t>> valid = session_->shape_of(name);
      if (!valid.ok()) return valid.status();
      shape = *valid;
      bytes.resize(static_cast<size_t>(element_count(shape)) * gdl::element_size(info->dtype));
      return session_->read(name, bytes.data(), bytes.size());
    }));
    return to_numpy(info->dtype, shape, bytes.data(), static_cast<size_t>(element_count(shape)));
  }

  py::array read_state(const std::string& name) {
    const gdl::TensorInfo* info = session_->program().find_state(name);
    if (!info) check(gdl::Status(gdl::StatusCode::kNotFound, "'" + name + "' is not a state"));
    std::vector<int64_t> shape;
    for (const gdl::AxisInfo& axis : info->shape) shape.push_back(axis.extent);
    const size_t count = static_cast<size_t>(element_count(shape));
    std::vector<uint8_t> bytes(count * gdl::element_size(info->dtype));
    wait();
    check(locked([&] { return session_->read_state(name, bytes.data(), bytes.size()); }));
    return to_numpy(info->dtype, shape, bytes.data(), count);
  }

  // Runs `call` on the session with the GIL released and `calls_` held.
  template <typename Call>
  auto locked(Call call) -> decltype(call()) {
    py::gil_scoped_release release;
    std::lock_guard<std::mutex> lock(calls_);
    return call();
  }

  const gdl::Program& program() const { return session_->program(); }
  int device() const { return session_->device(); }
  gdl::Session& session() { return *session_; }
  uintptr_t stream_handle() const { return reinterpret_cast<uintptr_t>(session_->stream()); }

 private:
  void hold(const std::string& name, std::unique_ptr<ConsumedTensor> consumed) {
    // The tensor bound before under this name may still be read by a run in
    // flight: it is retired, and released at the next wait for the stream
    // (or here, once too many wait).
    auto it = held_.find(name);
    if (it != held_.end() && it->second) retired_.push_back(std::move(it->second));
    held_[name] = std::move(consumed);
    if (retired_.size() > kMaxRetired) wait();
  }

  // Waits for the stream, then releases the tensors retired before the wait
  // began (another thread may retire more meanwhile, read by runs after it).
  void wait() {
    std::vector<std::unique_ptr<ConsumedTensor>> done = std::move(retired_);
    retired_.clear();
    check(locked([&] { return session_->synchronize(); }));
  }

  static constexpr size_t kMaxRetired = 64;
  std::unique_ptr<gdl::Session> session_;
  py::object stream_owner_;  // the caller's stream object, kept alive as long as the session uses it
  std::mutex calls_;
  std::map<std::string, std::unique_ptr<ConsumedTensor>> held_;
  std::vector<std::unique_ptr<ConsumedTensor>> retired_;
};

// What a view capsule's DLManagedTensor owns: gdl's description of the
// memory, and a reference to the Python session, whose memory it is.
struct ViewContext {
  DLManagedTensor* inner;
  PyObject* session;
};

void delete_view(DLManagedTensor* self) {
  auto* context = static_cast<ViewContext*>(self->manager_ctx);
  context->inner->deleter(context->inner);
  // A consumer may free its tensor from any thread, or after the
  // interpreter is gone (then the session's reference is left).
  if (Py_IsInitialized()) {
    py::gil_scoped_acquire acquire;
    Py_DECREF(context->session);
  }
  delete context;
  delete self;
}

void delete_unused_capsule(PyObject* capsule) {
  if (PyCapsule_IsValid(capsule, "dltensor")) {
    auto* tensor = static_cast<DLManagedTensor*>(PyCapsule_GetPointer(capsule, "dltensor"));
    tensor->deleter(tensor);
  }
}

// An output or a state of a session as a DLPack producer: torch.from_dlpack
// (or any consumer) makes a tensor over the session's memory, no copy.
class DeviceView {
 public:
  DeviceView(py::object session, std::string name, bool state)
      : session_(std::move(session)), name_(std::move(name)), state_(state) {}

  // The view of output (or state) `name` of the Python session `session`.
  static DeviceView of(py::object session, const std::string& name, bool state) {
    const gdl::Program& program = session.cast<PySession&>().program();
    if (!(state ? program.find_state(name) : program.find_output(name)))
      check(gdl::Status(gdl::StatusCode::kNotFound, "'" + name + "' is not " + (state ? "a state" : "an output")));
    return DeviceView(std::move(session), name, state);
  }

  py::tuple dlpack_device() const {
    PySession& s = session_.cast<PySession&>();
    return py::make_tuple(kDlpackCuda, s.device());
  }

  // The DLPack protocol's producer call. stream: the consumer's stream
  // (an integer: -1 asks for no synchronization). A consumer on another
  // stream sees the session's work once it is done: without events here,
  // the host waits for it. A view is all gdl hands out: copy=True, or
  // another device, is a BufferError.
  py::capsule dlpack(const py::object& stream, const py::object& max_version, const py::object& dl_device,
                     const py::object& copy) {
    (void)max_version;  // the legacy capsule is what DLPack 0.6 makes; consumers take it at any max_version
    PySession& s = session_.cast<PySession&>();
    if (!copy.is_none() && copy.cast<bool>())
      throw py::buffer_error("gdl hands out views of the session's memory: copy=True is not supported");
    if (!dl_device.is_none() && dl_device.cast<std::pair<int, int>>() != std::make_pair(kDlpackCuda, s.device()))
      throw py::buffer_error("gdl's outputs are on CUDA device " + std::to_string(s.device()));
    const int64_t consumer = stream.is_none() ? 1 : stream.cast<int64_t>();  // None: the legacy default stream
    if (consumer != -1 && static_cast<uintptr_t>(consumer) != s.stream_handle()) s.synchronize();
    DLManagedTensor* inner = take(s.locked([&] {
      return state_ ? gdl::state_dlpack(s.session(), name_) : gdl::output_dlpack(s.session(), name_);
    }));
    auto* context = new ViewContext{inner, session_.ptr()};
    auto* outer = new DLManagedTensor{inner->dl_tensor, context, delete_view};
    Py_INCREF(session_.ptr());
    try {
      return py::capsule(outer, "dltensor", &delete_unused_capsule);
    } catch (...) {
      delete_view(outer);
      throw;
    }
  }

 private:
  py::object session_;
  std::string name_;
  bool state_;
};

}  // namespace

PYBIND11_MODULE(gdl, m) {
  m.doc() = "gdl: compile static dataflow programs to CUDA graphs and run them (docs/packaging.md, \"Python\")";
  m.attr("__version__") = GDL_VERSION_STRING;
  py::register_exception<Error>(m, "Error", PyExc_RuntimeError);

  py::class_<gdl::Program>(m, "Program", "A compiled program (.gdlx): its declarations and kernels.")
      .def_static(
          "load", [](const std::string& path) { return take(gdl::Program::load(path)); }, py::arg("path"),
          "Reads a .gdlx artifact written by gdlc.")
      .def_static(
          "load_bytes",
          [](const py::bytes& data) {
            const std::string bytes = data;
            return take(gdl::Program::load_memory(bytes.data(), bytes.size()));
          },
          py::arg("data"), "Reads a .gdlx artifact from memory.")
      .def("save", [](const gdl::Program& p, const std::string& path) { check(p.save(path)); }, py::arg("path"))
      .def_property_readonly("name", &gdl::Program::name)
      .def_property_readonly("inputs", [](const gdl::Program& p) { return describe(p.inputs(), p.dims()); })
      .def_property_readonly("params", [](const gdl::Program& p) { return describe(p.params(), p.dims()); })
      .def_property_readonly("outputs", [](const gdl::Program& p) { return describe(p.outputs(), p.dims()); })
      .def_property_readonly("states", [](const gdl::Program& p) { return describe(p.states(), p.dims()); })
      .def_property_readonly("dims",
                             [](const gdl::Program& p) {
                               py::list out;
                               for (const gdl::RuntimeDimInfo& d : p.dims()) {
                                 py::dict entry;
                                 entry["name"] = d.name;
                                 entry["lo"] = d.lo;
                                 entry["hi"] = d.hi;
                                 entry["buckets"] = d.buckets;
                                 out.append(entry);
                               }
                               return out;
                             })
      .def_property_readonly("scalars",
                             [](const gdl::Program& p) {
                               py::dict out;
                               for (const gdl::ScalarInfo& s : p.scalars()) out[py::str(s.name)] = s.default_value;
                               return out;
                             })
      .def_property_readonly("node_count", &gdl::Program::node_count)
      .def_property_readonly("arena_bytes", &gdl::Program::arena_bytes)
      .def_property_readonly("kernel_arch", &gdl::Program::kernel_arch)
      .def("__repr__", [](const gdl::Program& p) {
        return "<gdl.Program '" + p.name() + "', " + std::to_string(p.node_count()) + " kernel nodes>";
      });

  m.def(
      "compile",
      [](const std::string& path, const std::string& arch, const std::string& cache_dir, const py::dict& consts) {
        gdl::jit::CompileSettings settings{arch, cache_dir, {}};
        for (const auto& [key, value] : consts) {
          // True/False as the language spells them; numbers and dtypes as str() gives them.
          const bool is_bool = py::isinstance<py::bool_>(value);
          settings.consts[py::str(key)] = is_bool ? (value.cast<bool>() ? "true" : "false") : std::string(py::str(value));
        }
        py::gil_scoped_release release;
        return take(gdl::jit::compile(path, settings));
      },
      py::arg("path"), py::arg("arch") = "", py::arg("cache_dir") = "",
      py::arg("consts") = py::dict(),
      "Compiles a .gdl file in the process (gdlc's pipeline). consts: values by name, as gdlc -D.");

  m.def(
      "run_reference",
      [](const gdl::Program& program, const py::dict& tensors, const std::map<std::string, double>& scalars) {
        std::map<std::string, gdl::TensorData> in;
        for (const auto& [key, value] : tensors) {
          const std::string name = py::str(key);
          in.emplace(name, host_tensor(name, py::reinterpret_borrow<py::object>(value)));
        }
        std::map<std::string, gdl::TensorData> out;
        {
          py::gil_scoped_release release;
          out = take(gdl::jit::run_reference(program, in, scalars));
        }
        py::dict result;
        for (const auto& [name, t] : out)
          result[py::str(name)] = to_numpy(t.dtype, t.shape, t.bytes.data(), static_cast<size_t>(element_count(t.shape)));
        return result;
      },
      py::arg("program"), py::arg("tensors"), py::arg("scalars") = std::map<std::string, double>{},
      "Runs the program on the CPU reference interpreter: every input, param and state by name "
      "(host arrays); returns every output and state after the run.");

  py::class_<DeviceView>(m, "DeviceView",
                         "An output or state in the session's GPU memory, for torch.from_dlpack. An output's "
                         "view is valid until the session's next run.")
      .def("__dlpack__", &DeviceView::dlpack, py::kw_only(), py::arg("stream") = py::none(),
           py::arg("max_version") = py::none(), py::arg("dl_device") = py::none(), py::arg("copy") = py::none())
      .def("__dlpack_device__", &DeviceView::dlpack_device);

  py::class_<PySession>(m, "Session",
                        "One execution context on one GPU: its stream, its arena, the program's graph.")
      .def(py::init([](const gdl::Program& program, int device, const py::object& stream, bool record_device_time,
                       const std::string& policy, bool overlap_launches, bool multi_step_kernels,
                       bool eager_fallback) {
             gdl::SessionOptions options;
             options.device = device;
             // A stream object (torch.cuda.Stream, or anything with cuda_stream) is kept alive by the session.
             const py::object handle = py::hasattr(stream, "cuda_stream") ? stream.attr("cuda_stream") : stream;
             options.stream = reinterpret_cast<CUstream_st*>(handle.is_none() ? 0 : handle.cast<uintptr_t>());
             options.record_device_time = record_device_time;
             options.dim_policy = dim_policy(policy);
             options.overlap_launches = overlap_launches;
             options.multi_step_kernels = multi_step_kernels;
             if (eager_fallback) options.eager_fallback = gdl::jit::recompiler();
             return std::make_unique<PySession>(program, options, stream);
           }),
           py::arg("program"), py::arg("device") = 0, py::arg("stream") = py::none(),
           py::arg("record_device_time") = false, py::arg("dim_policy") = "declared", py::arg("overlap_launches") = true,
           py::arg("multi_step_kernels") = true, py::arg("eager_fallback") = false,
           "stream: the caller's CUDA stream, a torch.cuda.Stream (kept alive by the session) or a cudaStream_t "
           "as an integer (the caller keeps it alive); None = a stream of the session's own.")
      .def("bind", &PySession::bind, py::arg("name"), py::arg("tensor"),
           "Binds an input by copy from any DLPack array or tensor: host memory is copied now, device "
           "memory by the next run (the tensor is kept alive until then).")
      .def("bind_reference", &PySession::bind_reference, py::arg("name"), py::arg("tensor"),
           "Binds an input to a GPU tensor without a copy: every run reads it in place until it is bound "
           "again (the tensor is kept alive until then). Do not write it while a run may read it.")
      .def("set_param", &PySession::set_param, py::arg("name"), py::arg("tensor"))
      .def("set_state", &PySession::set_state, py::arg("name"), py::arg("tensor"))
      .def("reset_state", [](PySession& s, const std::string& name) { check(s.locked([&] { return s.session().reset_state(name); })); },
           py::arg("name") = "")
      .def("set_dim", [](PySession& s, const std::string& name, int64_t value) {
             check(s.locked([&] { return s.session().set_dim(name, value); }));
           },
           py::arg("name"), py::arg("value"))
      .def("set_scalar",
           [](PySession& s, const std::string& name, double value) {
             check(s.locked([&] { return s.session().set_scalar(name, value); }));
           },
           py::arg("name"), py::arg("value"))
      .def("seed_rng", [](PySession& s, uint64_t seed) { check(s.locked([&] { return s.session().seed_rng(seed); })); }, py::arg("seed"))
      .def("run", &PySession::run, "Replays the graph on the session's stream and returns without waiting.")
      .def("run_eager", &PySession::run_eager)
      .def("synchronize", &PySession::synchronize)
      .def("read", &PySession::read, py::arg("name"),
           "Waits for the last run and returns a copy of an output as a NumPy array (bf16 as float32).")
      .def("read_state", &PySession::read_state, py::arg("name"))
      .def("shape_of", [](PySession& s, const std::string& name) { return take(s.locked([&] { return s.session().shape_of(name); })); },
           py::arg("name"))
      .def(
          "output", [](py::object self, const std::string& name) { return DeviceView::of(self, name, false); },
          py::arg("name"), "The output in GPU memory for torch.from_dlpack: valid until the next run.")
      .def(
          "state", [](py::object self, const std::string& name) { return DeviceView::of(self, name, true); },
          py::arg("name"), "The state in GPU memory for torch.from_dlpack: fixed for the session's life.")
      .def_property_readonly("stream", &PySession::stream_handle, "The session's cudaStream_t as an integer.")
      .def_property_readonly("device", &PySession::device)
      .def("stats", [](PySession& s) { return gdl::format_stats(s.locked([&] { return s.session().stats(); })); },
           "The session's counters as text (gdlrun --stats).");
}
