// Session: device memory, binding by copy, params, scalars, the valid-dims
// block and reading outputs.
//
// Session::create:
// 1. Find a usable GPU (none: Unavailable with CUDA's reason), make the
//    device current, create the session's stream.
// 2. One cudaMalloc for the arena (plan.arena_bytes) and the kernels'
//    scratch behind it, zeroed once (arena_scratch.h); the params region is
//    shared with the program's other sessions on the device; the kernels'
//    tensor maps of the params into the scratch (tensor_maps.h).
// 3. Load the kernel module and find every kernel (kernels.h); the kernels
//    this device cannot run go into the stats.
// 4. A pinned staging buffer and an upload event per input; a ring of
//    pinned slots for the valid-dims block.
// 5. Each run-time dim's policy (Program::dim_serving); dims start at their
//    upper bounds, scalars at their defaults; per step, the dims and scalars
//    its kernel node depends on.
// 6. With build_buckets_at_create, every bucket's graph (session_run.cc);
//    otherwise each is built at its first run.
//
// bind: validate everything (name, role, dtype, shape, bounds, byte count)
// before touching any state; then copy the caller's host bytes into the
// staging buffer (after the previous upload from it has finished), and
// leave the copy into the arena to the next run's graph (session_impl.h
// InputSlot: a device source is only recorded), or, for padded inputs and
// inputs an update-served dim lays out, enqueue it on the stream at once, so
// it is ordered after every run already submitted.
// Under buckets the buffer is laid out at the bucket's capacity: the valid
// rows go in by strided copies (strided_copy.h; one piece when the dim
// leads). A bind above a dim's bound (eager_fallback) keeps the
// contents on the host for the fallback run.
// read: the valid rows of the last run's layout, by the same pieces reversed.
// write_valid_block: before a run, when the dims differ from what the block
// holds, copy them from a pinned ring slot on the stream.
#include <algorithm>
#include <cstdint>
#include <cstring>

#include "arena_scratch.h"
#include "cuda_util.h"
#include "gdl/testing.h"
#include "session_impl.h"
#include "strided_copy.h"
#include "tensor_maps.h"

namespace gdl {

using rt::Stopwatch;

Session::Impl::Impl(Program p, std::shared_ptr<const Program::Impl> pi, const SessionOptions& o)
    : program(std::move(p)), prog_ptr(std::move(pi)), prog(*prog_ptr), options(o), device(o.device) {}

Session::Impl::~Impl() {
  if (cudaSetDevice(device) != cudaSuccess) return;
  if (stream) (void)cudaStreamSynchronize(stream);
  for (auto& [key, g] : graphs) {
    if (g->exec) (void)cudaGraphExecDestroy(g->exec);
    if (g->graph) (void)cudaGraphDestroy(g->graph);
  }
  for (InputSlot& in : inputs) {
    if (in.uploaded) (void)cudaEventDestroy(in.uploaded);
    if (in.staging) (void)rt::host_free(in.staging);
  }
  if (graph_copies_done) (void)cudaEventDestroy(graph_copies_done);
  for (cudaEvent_t e : valid_copied)
    if (e) (void)cudaEventDestroy(e);
  if (valid_staging) (void)rt::host_free(valid_staging);
  if (run_start) (void)cudaEventDestroy(run_start);
  if (run_end) (void)cudaEventDestroy(run_end);
  if (arena) (void)rt::device_free(arena);
  for (void* b : export_buffers) (void)rt::device_free(b);
  if (signatures) (void)rt::device_free(signatures);
  if (collective_warmup) (void)rt::device_free(collective_warmup);
  if (stream && !options.stream) (void)cudaStreamDestroy(stream);  // a caller's stream is theirs
  if (capture_stream) (void)cudaStreamDestroy(capture_stream);
  (void)cudaGetLastError();
  // library and params release themselves (params only with the last session).
}

Status Session::Impl::make_current() const {
  GDL_CUDA_TRY(cudaSetDevice(device), "making device " + std::to_string(device) + " current");
  return Status::Ok();
}

static float scalar_as_bits(DType dtype, double value) {
  if (dtype != DType::kI32) return static_cast<float>(value);
  int32_t i = static_cast<int32_t>(round_to_dtype(value, DType::kI32));
  float f;
  std::memcpy(&f, &i, sizeof f);  // an i32 scalar travels as its bit pattern
  return f;
}

// The run-time dims and scalars that each step's kernel node depends on:
// every run-time dim in the shapes it computes or reads and in the offsets
// of their buffers, in the work shapes and rows of its kernels, every
// scalar they read.
static void step_dependencies(const Program::Impl& prog, std::vector<uint32_t>& dims_out,
                              std::vector<uint32_t>& scalars_out) {
  const plan::Plan& p = prog.plan();
  const ir::Graph& g = p.graph;
  auto add_shape = [](uint32_t& mask, const Shape& s) {
    for (const Dim& d : s)
      if (d.is_runtime()) mask |= 1u << d.symbol;
  };
  for (size_t i = 0; i < p.steps.size(); ++i) {
    uint32_t dims_mask = 0, scalars_mask = 0;
    auto add_offset = [&](ir::ValueId v) {  // a view behind a run-time axis moves with its dims
      for (const plan::OffsetTerm& t : p.buffers.at(static_cast<size_t>(v)).terms)
        for (int d : t.dims) dims_mask |= 1u << d;
    };
    for (ir::ValueId v : p.steps[i].values) {
      add_shape(dims_mask, g.node(v).type.shape);
      add_offset(v);
      for (ir::ValueId a : g.node(v).args) {
        add_shape(dims_mask, g.node(a).type.shape);
        add_offset(a);
      }
    }
    bool depends_on_dims = false;
    for (int c : prog.kernels().step_choices[i]) {
      const Kernel& k = prog.kernels().kernels[static_cast<size_t>(c)];
      add_shape(dims_mask, k.launch.work);
      add_shape(dims_mask, k.rows);
      depends_on_dims |= k.depends_on_dims;
      for (int s : k.scalars_used) scalars_mask |= 1u << s;
    }
    if (depends_on_dims && dims_mask == 0) dims_mask = ~0u;  // says it depends on some dim, not which: every one
    dims_out.push_back(dims_mask);
    scalars_out.push_back(scalars_mask);
  }
}

Status Session::Impl::init(bool join_group) {
  GDL_RETURN_IF_ERROR(rt::check_device_index(device));
  GDL_RETURN_IF_ERROR(make_current());
  Expected<std::vector<DimServing>> serving = rt::resolve_dim_serving(prog, options);
  if (!serving) return serving.status();
  if (options.eager_fallback && !prog.states.empty())
    return Status::InvalidArgument("program " + prog.graph().program_name +
                                   " has state, which the eager fallback does not carry between its arena and the "
                                   "session's; create the session without SessionOptions::eager_fallback");
  if (options.eager_fallback && prog.graph().group.ranks > 0)
    return Status::InvalidArgument("program " + prog.graph().program_name +
                                   " has a process group, whose ranks would have to take the eager fallback together; "
                                   "create the session without SessionOptions::eager_fallback");
  int major = 0, minor = 0;
  GDL_CUDA_TRY(cudaDeviceGetAttribute(&major, cudaDevAttrComputeCapabilityMajor, device), "reading the compute capability");
  GDL_CUDA_TRY(cudaDeviceGetAttribute(&minor, cudaDevAttrComputeCapabilityMinor, device), "reading the compute capability");
  device_arch = "sm_" + std::to_string(major * 10 + minor);
  if (options.stream) {
    int stream_device = -1;
    GDL_CUDA_TRY(cudaStreamGetDevice(options.stream, &stream_device), "asking the device of SessionOptions::stream");
    if (stream_device != device)
      return Status::InvalidArgument("SessionOptions::stream is a stream of device " + std::to_string(stream_device) +
                                     ", the session's device is " + std::to_string(device));
    stream = options.stream;
  } else {
    GDL_CUDA_TRY(rt::stream_create(&stream), "creating the session stream");
  }

  uint64_t arena_bytes = rt::arena_allocation_bytes(prog.plan());  // the arena and the kernels' scratch behind it
  GDL_CUDA_TRY(rt::device_malloc(reinterpret_cast<void**>(&arena), arena_bytes),
               "allocating the arena (" + std::to_string(arena_bytes) + " bytes)");
  GDL_RETURN_IF_ERROR(rt::zero_arena(arena, prog.plan(), stream));
  GDL_RETURN_IF_ERROR(zero_states(""));  // a state is zero until the host or a run writes it
  Expected<std::shared_ptr<rt::DeviceParams>> shared = rt::acquire_device_params(prog, device);
  if (!shared) return shared.status();
  params = std::move(shared).value();
  GDL_RETURN_IF_ERROR(rt::write_tensor_maps(prog, arena, params->base(), stream));  // they name the params' addresses

  Stopwatch load_time;
  GDL_RETURN_IF_ERROR(library.load(prog, device));
  stats.library_load_us = load_time.elapsed_us();
  stats.module_image = library.image();
  stats.kernel_refusals = library.refusals();
  GDL_RETURN_IF_ERROR(use_communicator());
  if (communicator && join_group) {
    GDL_RETURN_IF_ERROR(enqueue_signature_exchange());
    GDL_RETURN_IF_ERROR(compare_signatures());
    for (const rt::CollectiveCall& shape : collective_calls) GDL_RETURN_IF_ERROR(warm_up_collective(shape));
  }
  // Kernel choices made for another GPU run correctly here, maybe slower.
  int sms = 0;
  GDL_CUDA_TRY(cudaDeviceGetAttribute(&sms, cudaDevAttrMultiProcessorCount, device), "reading the multiprocessor count");
  const ir::Target& target = prog.graph().target;
  if (sms != target.multiprocessors)
    stats.target_note = "compiled for a GPU of " + std::to_string(target.multiprocessors) + " multiprocessors; device " +
                        std::to_string(device) + " has " + std::to_string(sms) +
                        ": splits may not fill it (compile with gdl::jit::compile on this device, or gdlc --multiprocessors=" +
                        std::to_string(sms) + ")";

  inputs.resize(prog.inputs.size());
  for (size_t i = 0; i < inputs.size(); ++i) {
    inputs[i].bound_dims.assign(prog.dims.size(), -1);
    if (prog.buffer_of(prog.input_values[i]).region == plan::Region::kNone) continue;
    GDL_CUDA_TRY(rt::host_malloc(&inputs[i].staging, std::max<size_t>(prog.inputs[i].max_bytes, 1)),
                 "allocating the staging buffer of input '" + prog.inputs[i].name + "'");
    void* on_device = nullptr;  // pinned memory is mapped: the input copy kernel reads it there
    GDL_CUDA_TRY(cudaHostGetDevicePointer(&on_device, inputs[i].staging, 0),
                 "mapping the staging buffer of input '" + prog.inputs[i].name + "'");
    inputs[i].staging_on_device = on_device;
    GDL_CUDA_TRY(rt::event_create(&inputs[i].uploaded, cudaEventDisableTiming), "creating an event");
  }
  GDL_CUDA_TRY(rt::event_create(&graph_copies_done, cudaEventDisableTiming), "creating an event");
  if (options.record_device_time) {
    GDL_CUDA_TRY(rt::event_create(&run_start), "creating an event");
    GDL_CUDA_TRY(rt::event_create(&run_end), "creating an event");
  }
  valid_on_device.fill(-1);
  if (!prog.dims.empty()) {
    GDL_CUDA_TRY(rt::host_malloc(reinterpret_cast<void**>(&valid_staging), sizeof(int32_t) * kMaxRuntimeDims * kValidRing),
                 "allocating the staging of the valid-dims block");
    for (cudaEvent_t& e : valid_copied)
      GDL_CUDA_TRY(rt::event_create(&e, cudaEventDisableTiming), "creating an event");
  }

  for (const DimServing& d : *serving) {
    if (d.update) update_dims_mask |= 1u << update_dim.size();
    update_dim.push_back(d.update);
    stats.dims.push_back({d.name, d.update, d.why_update, 0, 0});
  }
  for (const RuntimeDimInfo& d : prog.dims) dims.push_back(d.hi);
  for (size_t s = 0; s < prog.scalars.size(); ++s)
    scalar_bits[s] = scalar_as_bits(rt::to_internal(prog.scalars[s].dtype), prog.scalars[s].default_value);
  step_dependencies(prog, step_dims, step_scalars);
  for (const plan::Step& s : prog.plan().steps) {
    uint32_t mask = 0;
    for (ir::ValueId r : s.reads)
      if (const int slot = prog.value_input_slot.at(static_cast<size_t>(r)); slot >= 0) mask |= 1u << slot;
    step_inputs.push_back(mask);
  }
  for (size_t i = 0; i < inputs.size(); ++i)
    if (const int slot = input_slot(i); slot >= 0)
      arena_input_pointers[static_cast<size_t>(slot)] = arena + prog.buffer_of(prog.input_values[i]).offset;
  input_pointers = arena_input_pointers;
  nvtx_run = "run " + prog.graph().program_name;
  nvtx_run_eager = "run_eager " + prog.graph().program_name;
  for (size_t s = 0; s < prog.plan().steps.size(); ++s)
    nvtx_steps.push_back("step " + std::to_string(s) + ": " + plan::step_ops(prog.plan(), prog.plan().steps[s]));
  for (const TensorInfo& in : prog.inputs) nvtx_binds.push_back("bind " + in.name);
  stats.node_count = prog.plan().steps.size();
  stats.arena_bytes = prog.plan().arena_bytes;
  stats.params_bytes = prog.plan().params_bytes;
  // With a group made by create_ranks, its graphs are built once every rank has made its first calls.
  if (options.build_buckets_at_create && (join_group || !communicator)) GDL_RETURN_IF_ERROR(build_every_bucket());
  return Status::Ok();
}

Status Session::Impl::use_communicator() {
  const ir::ProcessGroup& group = prog.graph().group;
  if (group.ranks == 0) return Status::Ok();  // no collectives: a communicator given is not used
  const std::string program = "program " + prog.graph().program_name + " runs over a group of " +
                              std::to_string(group.ranks) + " rank(s) (group " + group.name + ")";
  if (options.communicator) {
    communicator = options.communicator;
    if (communicator->ranks() != group.ranks)
      return Status::InvalidArgument(program + ", SessionOptions::communicator is one of " +
                                     std::to_string(communicator->ranks()) + " ranks");
    if (communicator->device() != device)
      return Status::InvalidArgument("SessionOptions::communicator is rank " + std::to_string(communicator->rank()) +
                                     " on device " + std::to_string(communicator->device()) + ", the session's device is " +
                                     std::to_string(device));
  } else if (group.ranks == 1) {
    Expected<std::vector<std::shared_ptr<Communicator>>> own = Communicator::create_local({device});
    if (!own) return own.status();
    communicator = std::move((*own)[0]);
    GDL_RETURN_IF_ERROR(make_current());
  } else {
    return Status::InvalidArgument(program + ": pass this rank's communicator in SessionOptions::communicator "
                                   "(gdl::Communicator::join, one process per GPU; create_local, one process for all)");
  }
  collective_signature = rt::collective_signature(prog.plan(), prog.kernels());
  collective_calls = rt::collective_shapes(prog.plan(), prog.kernels());
  const size_t bytes = sizeof(rt::CollectiveSignature) * static_cast<size_t>(group.ranks + 1);
  GDL_CUDA_TRY(rt::device_malloc(&signatures, bytes), "allocating the collective signatures");
  for (const rt::CollectiveCall& shape : collective_calls)
    collective_warmup_bytes = std::max(collective_warmup_bytes, shape.send_bytes + shape.receive_bytes);
  if (collective_warmup_bytes > 0)
    GDL_CUDA_TRY(rt::device_malloc(&collective_warmup, collective_warmup_bytes), "allocating the collectives' scratch");
  return Status::Ok();
}

Status Session::Impl::enqueue_signature_exchange() {
  const rt::CollectiveSignature& mine = collective_signature;
  auto* all = static_cast<unsigned char*>(signatures);
  unsigned char* own = all + sizeof mine * static_cast<size_t>(communicator->ranks());
  GDL_CUDA_TRY(cudaMemcpyAsync(own, &mine, sizeof mine, cudaMemcpyHostToDevice, stream), "writing the collective signature");
  rt::CollectiveCall gather;
  gather.op = ir::Op::kAllGather;
  gather.dtype = ncclUint64;
  gather.count = sizeof mine / sizeof(uint64_t);
  gather.send = own;
  gather.receive = all;
  return enqueue_collective_call(gather, stream);
}

Status Session::Impl::compare_signatures() {
  const rt::CollectiveSignature& mine = collective_signature;
  std::vector<rt::CollectiveSignature> all(static_cast<size_t>(communicator->ranks()));
  GDL_CUDA_TRY(cudaMemcpyAsync(all.data(), signatures, sizeof mine * all.size(), cudaMemcpyDeviceToHost, stream),
               "reading the ranks' collective signatures");
  GDL_CUDA_TRY(cudaStreamSynchronize(stream), "waiting for the ranks' collective signatures");
  std::string differ;
  for (size_t r = 0; r < all.size(); ++r)
    if (all[r].hash != mine.hash || all[r].calls != mine.calls || all[r].ranks != mine.ranks)
      differ += (differ.empty() ? "" : ", ") + std::to_string(r) + " (" + std::to_string(all[r].calls) + " collectives)";
  if (differ.empty()) return Status::Ok();
  return Status::FailedPrecondition(
      "rank " + std::to_string(communicator->rank()) + " runs program " + prog.graph().program_name + " with " +
      std::to_string(mine.calls) + " collectives, and the collectives of rank(s) " + differ +
      " differ in order, op, dtype or shape: every rank of a group must run the same program's collectives");
}

bool Session::Impl::above_bounds() const {
  for (size_t d = 0; d < dims.size(); ++d)
    if (dims[d] > prog.dims[d].hi) return true;
  return false;
}

int64_t Session::Impl::layout_extent(size_t dim, int64_t value) const {
  if (update_dim[dim] || value > prog.dims[dim].hi) return value;
  int64_t bucket = prog.dims[dim].bucket_for(value);
  return bucket < 0 ? value : bucket;
}

std::vector<int64_t> Session::Impl::layout(const std::vector<int64_t>& values) const {
  std::vector<int64_t> out(values.size());
  for (size_t d = 0; d < values.size(); ++d) out[d] = layout_extent(d, values[d]);
  return out;
}

std::vector<int64_t> Session::Impl::bucket_key(const std::vector<int64_t>& values) const {
  std::vector<int64_t> key(values.size());
  for (size_t d = 0; d < values.size(); ++d) key[d] = update_dim[d] ? -1 : layout_extent(d, values[d]);
  return key;
}

rt::KernelArgs Session::Impl::kernel_args(const std::vector<int64_t>& layout_dims) const {
  rt::KernelArgs a;
  for (size_t d = 0; d < layout_dims.size(); ++d) a.dims[d] = static_cast<int32_t>(layout_dims[d]);
  std::memcpy(a.scalars, scalar_bits, sizeof a.scalars);
  std::copy(input_pointers.begin(), input_pointers.end(), a.inputs);
  return a;
}

Status Session::Impl::write_valid_block() {
  if (prog.dims.empty()) return Status::Ok();
  std::array<int32_t, kMaxRuntimeDims> wanted{};
  for (size_t d = 0; d < dims.size(); ++d) wanted[d] = static_cast<int32_t>(dims[d]);
  if (wanted == valid_on_device && !graphs_exported) return Status::Ok();  // an exported graph may have written others
  int slot = valid_next;
  valid_next = (valid_next + 1) % kValidRing;
  if (valid_copy_pending[slot]) {
    GDL_CUDA_TRY(cudaEventSynchronize(valid_copied[slot]), "waiting for an earlier copy of the valid dims");
    valid_copy_pending[slot] = false;
  }
  int32_t* staging = valid_staging + slot * kMaxRuntimeDims;
  std::memcpy(staging, wanted.data(), sizeof(int32_t) * kMaxRuntimeDims);
  GDL_CUDA_TRY(cudaMemcpyAsync(arena + plan::kValidDimsOffset, staging, sizeof(int32_t) * kMaxRuntimeDims,
                               cudaMemcpyHostToDevice, stream),
               "copying the valid dims to the device");
  GDL_CUDA_TRY(cudaEventRecord(valid_copied[slot], stream), "recording the copy of the valid dims");
  valid_copy_pending[slot] = true;
  valid_on_device = wanted;
  stats.valid_block_writes += 1;
  return Status::Ok();
}

namespace {

std::string shape_text(const std::vector<int64_t>& shape) {
  std::string s = "[";
  for (size_t i = 0; i < shape.size(); ++i) s += (i ? ", " : "") + std::to_string(shape[i]);
  return s + "]";
}

// Checks a concrete shape against a declared one; on success `dims_out`
// holds the value each run-time dim takes (-1 where the shape does not use
// it). `above_hi_ok`: a value above a dim's upper bound is accepted (eager fallback).
Status match_shape(const TensorInfo& info, const std::vector<RuntimeDimInfo>& dims, const std::vector<int64_t>& shape,
                   std::vector<int64_t>& dims_out, bool above_hi_ok) {
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
    if (shape[a] < d.lo || (shape[a] > d.hi && !(above_hi_ok && shape[a] <= INT32_MAX)))
      return Status::OutOfRange(what() + " (dim " + d.name + " = " + std::to_string(shape[a]) + " is outside [" +
                                std::to_string(d.lo) + ", " + std::to_string(d.hi) + "]" +
                                (shape[a] > d.hi ? "; SessionOptions::eager_fallback (gdl::jit::recompiler()) runs such values eagerly" : "") +
                                ")");
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
  if (p.state_index.count(name)) return "a state";
  return "";
}

Status wrong_role(const Program::Impl& p, const std::string& name, const char* wanted, const char* instead) {
  std::string role = role_of(p, name);
  if (role.empty()) return Status::NotFound("program " + p.graph().program_name + " has no " + wanted + " '" + name + "'");
  return Status::InvalidArgument("'" + name + "' is " + role + ", not " + wanted + instead);
}

}  // namespace

// Copies `pieces` (strided_copy.h, in bytes) from `src` to `dst` on the stream:
// cudaMemcpy2DAsync per piece, or row by row where a pitch exceeds what
// cudaMemcpy2D takes.
static Status copy_pieces(unsigned char* dst, const unsigned char* src, const std::vector<rt::CopyPiece>& pieces,
                          cudaMemcpyKind kind, cudaStream_t stream, const std::string& what) {
  constexpr uint64_t kMaxPitch = uint64_t{1} << 30;
  for (const rt::CopyPiece& p : pieces) {
    if (p.height == 1 || (p.src_pitch < kMaxPitch && p.dst_pitch < kMaxPitch)) {
      GDL_CUDA_TRY(cudaMemcpy2DAsync(dst + p.dst, p.dst_pitch, src + p.src, p.src_pitch, p.width, p.height, kind, stream),
                   what);
      continue;
    }
    for (uint64_t row = 0; row < p.height; ++row)
      GDL_CUDA_TRY(cudaMemcpyAsync(dst + p.dst + row * p.dst_pitch, src + p.src + row * p.src_pitch, p.width, kind, stream),
                   what);
  }
  return Status::Ok();
}

// The extents of a declared shape for dims `values` (constant axes as declared).
static std::vector<int64_t> extents(const TensorInfo& info, const std::vector<int64_t>& values) {
  std::vector<int64_t> out;
  for (const AxisInfo& a : info.shape) out.push_back(a.is_runtime() ? values[static_cast<size_t>(a.dim)] : a.extent);
  return out;
}

Status Session::Impl::bind(const std::string& name, const void* data, size_t bytes, ElementType dtype,
                           const std::vector<int64_t>& shape, MemoryKind kind, bool by_reference) {
  auto it = prog.input_index.find(name);
  if (it == prog.input_index.end()) {
    std::string hint = prog.param_index.count(name) ? " (use set_param)" : prog.scalar_index.count(name) ? " (use set_scalar)" : "";
    return wrong_role(prog, name, "input", hint.c_str());
  }
  size_t index = it->second;
  NvtxRange range(nvtx_binds.at(index));
  const TensorInfo& info = prog.inputs[index];
  if (dtype != info.dtype)
    return Status::InvalidArgument("input '" + name + "' is " + info.type_text + ", got " + element_type_name(dtype) + " data");
  std::vector<int64_t> shape_dims;
  GDL_RETURN_IF_ERROR(match_shape(info, prog.dims, shape, shape_dims, options.eager_fallback != nullptr));
  size_t count = 1;
  for (int64_t e : shape) count *= static_cast<size_t>(e);
  size_t expected = count * element_size(dtype);
  if (bytes != expected)
    return Status::InvalidArgument("input '" + name + "' with shape " + shape_text(shape) + " is " + std::to_string(expected) +
                                   " bytes, got " + std::to_string(bytes));
  if (!data && bytes > 0) return Status::InvalidArgument("input '" + name + "': data is null");
  const plan::Buffer& buffer = prog.buffer_of(prog.input_values[index]);
  bool on_this_device = false;  // the graph's copy kernel may read it
  if (kind == MemoryKind::kDevice) {
    cudaPointerAttributes attributes{};
    GDL_CUDA_TRY(cudaPointerGetAttributes(&attributes, data), "checking the device pointer bound to '" + name + "'");
    if (attributes.type != cudaMemoryTypeDevice && attributes.type != cudaMemoryTypeManaged)
      return Status::InvalidArgument("input '" + name + "' was bound as device memory, but the pointer is not device memory");
    on_this_device = attributes.device == device;
  }
  bool above_bound = false;
  std::vector<int64_t> values = dims;  // the dims with this bind's values
  for (size_t d = 0; d < shape_dims.size(); ++d)
    if (shape_dims[d] >= 0) {
      values[d] = shape_dims[d];
      above_bound |= shape_dims[d] > prog.dims[d].hi;
    }

  bool in_place = false;  // by reference: read where it is, else copied by each run's copy node
  if (by_reference) {
    const std::string why = "input '" + name + "' cannot be bound by reference: ";
    if (kind != MemoryKind::kDevice || !on_this_device)
      return Status::FailedPrecondition(why + "the memory is not on the session's device " + std::to_string(device));
    if (above_bound)
      return Status::OutOfRange(why + "a run-time dim is above its upper bound (the eager fallback copies its inputs)");
    if (extents(info, layout(values)) != shape)
      return Status::FailedPrecondition(why + "its rows run in a larger bucket, whose padding rows would be read past "
                                        "the caller's memory; bind it by copy, or at a bucket's capacity");
    in_place = input_slot(index) >= 0 && reinterpret_cast<uintptr_t>(data) % plan::kAlignment == 0;
    if (!in_place && !(copies_in_graph(index) && reinterpret_cast<uintptr_t>(data) % 16 == 0))
      return Status::FailedPrecondition(why + "the kernels cannot read it in place (" +
                                        (input_slot(index) < 0 ? "a run writes into its buffer, or it is input " +
                                                                      std::to_string(index) + " of more than " +
                                                                      std::to_string(kMaxInputPointers)
                                                                : std::string("its address is not 256-byte aligned")) +
                                        ") and the graph cannot copy it each run (a dim served by node updates, or "
                                        "an address not 16-byte aligned); bind it by copy");
  }

  // Everything is valid: from here on the bind takes effect.
  InputSlot& slot = inputs[index];
  slot.fallback_bytes.clear();
  slot.clear_pending();
  slot.reference = nullptr;
  slot.device_data = kind == MemoryKind::kDevice && !above_bound ? data : nullptr;
  slot.device_copyable = on_this_device && copies_in_graph(index) && extents(info, layout(values)) == shape &&
                         reinterpret_cast<uintptr_t>(data) % 16 == 0;
  if (by_reference) {
    slot.reference = data;
    slot.reference_in_place = in_place;
    slot.staged_bytes = bytes;
    stats.reference_binds += 1;
  } else if (above_bound) {
    // The arena slot is too small: keep the contents for the fallback run.
    slot.fallback_bytes.resize(bytes);
    if (kind == MemoryKind::kHost) {
      std::memcpy(slot.fallback_bytes.data(), data, bytes);
    } else {
      GDL_CUDA_TRY(cudaMemcpyAsync(slot.fallback_bytes.data(), data, bytes, cudaMemcpyDefault, stream),
                   "copying input '" + name + "' from device memory");
      GDL_CUDA_TRY(cudaStreamSynchronize(stream), "copying input '" + name + "' from device memory");
    }
  } else if (buffer.region != plan::Region::kNone && bytes > 0) {
    Stopwatch copy_time;
    unsigned char* target = arena + buffer.offset;
    const std::vector<int64_t> padded = extents(info, layout(values));
    const bool is_padded = padded != shape;
    const size_t unit = element_size(dtype);
    const void* source = data;
    const bool graph_copies = !is_padded && copies_in_graph(index);
    if (kind == MemoryKind::kHost) {
      GDL_RETURN_IF_ERROR(wait_staging_free(slot));
      std::memcpy(slot.staging, data, bytes);
      source = slot.staging;
      // The run's graph copies it from the staging buffer (InputSlot).
      slot.copy_pending = graph_copies;
      slot.staged_bytes = bytes;
    } else if (graph_copies && on_this_device && reinterpret_cast<uintptr_t>(data) % 16 == 0) {
      // The run's graph copies it from the caller's memory (the copy kernel
      // moves 16-byte vectors; another device's memory is copied here).
      slot.copy_pending = true;
      slot.device_source = data;
      slot.staged_bytes = bytes;
    }
    if (!slot.copy_pending) {
      if (is_padded && poison_padding) {
        size_t padded_count = 1;
        for (int64_t e : padded) padded_count *= static_cast<size_t>(e);
        GDL_CUDA_TRY(cudaMemsetAsync(target, 0xFF, padded_count * unit, stream), "poisoning the padding of '" + name + "'");
      }
      if (!is_padded) {
        GDL_CUDA_TRY(cudaMemcpyAsync(target, source, bytes, cudaMemcpyDefault, stream), "copying input '" + name + "' to the device");
      } else {
        GDL_RETURN_IF_ERROR(copy_pieces(target, static_cast<const unsigned char*>(source),
                                        rt::strided_copy_pieces(shape, shape, padded, unit), cudaMemcpyDefault, stream,
                                        "copying input '" + name + "' into its padded buffer"));
      }
      if (kind == MemoryKind::kHost) {  // the staging buffer is free again once this copy is done
        GDL_CUDA_TRY(cudaEventRecord(slot.uploaded, stream), "recording the upload of '" + name + "'");
        slot.upload_pending = true;  // the event also covers any earlier upload from the staging buffer
      }
    }
    stats.input_copies += 1;
    stats.input_copy_bytes += bytes;
    stats.input_copy_us += copy_time.elapsed_us();
  }
  slot.bound = true;
  slot.bound_dims = shape_dims;
  dims = values;
  return Status::Ok();
}

void Session::Impl::prepare_references(const std::vector<int>& step_kernel, bool count) {
  if (!references_bound()) {  // the usual run: every slot at its arena buffer, no scan of the steps
    input_pointers = arena_input_pointers;
    return;
  }
  uint32_t through_library = 0;  // input slots a chosen cuBLASLt or NCCL call reads
  for (size_t s = 0; s < step_kernel.size() && s < step_inputs.size(); ++s)
    if (const Kernel& k = prog.kernels().kernels[static_cast<size_t>(step_kernel[s])]; k.library.active || k.is_collective())
      through_library |= step_inputs[s];  // a captured call holds the arena's address
  input_pointers.fill(nullptr);
  for (size_t i = 0; i < inputs.size(); ++i) {
    const int slot = input_slot(i);
    InputSlot& in = inputs[i];
    const bool library_reads = slot >= 0 && ((through_library >> slot) & 1u);
    const bool in_place = in.reference && in.reference_in_place && !library_reads;
    if (slot >= 0)
      input_pointers[static_cast<size_t>(slot)] =
          in_place ? static_cast<const unsigned char*>(in.reference) : arena + prog.buffer_of(prog.input_values[i]).offset;
    if (in.reference && !in_place) {  // the run's copy node reads it from the caller's memory
      in.copy_pending = true;
      in.device_source = in.reference;
      if (count) stats.reference_copies += 1;
    }
  }
}

bool Session::Impl::copies_in_graph(size_t input) const {
  for (const AxisInfo& a : prog.inputs[input].shape)
    if (a.is_runtime() && update_dim[static_cast<size_t>(a.dim)]) return false;
  return inputs[input].staging != nullptr;
}

size_t Session::Impl::input_layout_bytes(size_t input, const std::vector<int64_t>& layout_dims) const {
  size_t count = 1;
  for (int64_t e : extents(prog.inputs[input], layout_dims)) count *= static_cast<size_t>(e);
  return count * element_size(prog.inputs[input].dtype);
}

Status Session::Impl::wait_staging_free(InputSlot& slot) {
  if (slot.upload_pending) {
    GDL_CUDA_TRY(cudaEventSynchronize(slot.uploaded), "waiting for the previous upload of an input");
    slot.upload_pending = false;
  }
  if (graph_copies_pending) {
    GDL_CUDA_TRY(cudaEventSynchronize(graph_copies_done), "waiting for the input copies of the last graph run");
    graph_copies_pending = false;
  }
  return Status::Ok();
}

Status Session::Impl::flush_staged_inputs() {
  for (size_t i = 0; i < inputs.size(); ++i) {
    InputSlot& slot = inputs[i];
    if (!slot.copy_pending) continue;
    const bool from_staging = slot.device_source == nullptr;
    GDL_CUDA_TRY(cudaMemcpyAsync(arena + prog.buffer_of(prog.input_values[i]).offset,
                                 from_staging ? slot.staging : slot.device_source, slot.staged_bytes,
                                 from_staging ? cudaMemcpyHostToDevice : cudaMemcpyDeviceToDevice, stream),
                 "copying input '" + prog.inputs[i].name + "' to the device");
    if (from_staging) {
      GDL_CUDA_TRY(cudaEventRecord(slot.uploaded, stream), "recording the upload of '" + prog.inputs[i].name + "'");
      slot.upload_pending = true;
    }
    slot.clear_pending();
  }
  return Status::Ok();
}

void Session::Impl::stream_idle() {
  for (InputSlot& slot : inputs) slot.upload_pending = false;
  graph_copies_pending = false;
  valid_copy_pending.fill(false);
}

Status Session::Impl::set_dim(const std::string& name, int64_t value) {
  for (size_t d = 0; d < prog.dims.size(); ++d) {
    if (prog.dims[d].name != name) continue;
    bool above_ok = options.eager_fallback != nullptr && value <= INT32_MAX;
    if (value < prog.dims[d].lo || (value > prog.dims[d].hi && !above_ok))
      return Status::OutOfRange("dim " + name + " = " + std::to_string(value) + " is outside [" +
                                std::to_string(prog.dims[d].lo) + ", " + std::to_string(prog.dims[d].hi) + "]");
    dims[d] = value;
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
  scalar_bits[it->second] = scalar_as_bits(rt::to_internal(prog.scalars[it->second].dtype), value);
  // The graph of the last run takes the new value now; the other buckets'
  // graphs at their next use (sync_nodes compares what their nodes hold).
  if (last_graph) GDL_RETURN_IF_ERROR(sync_nodes(*last_graph, last_graph->applied_layout));
  return Status::Ok();
}

Status Session::Impl::read(const std::string& name, void* host, size_t bytes) {
  auto it = prog.output_index.find(name);
  if (it == prog.output_index.end()) return wrong_role(prog, name, "output", "");
  if (!has_run) return Status::FailedPrecondition("read('" + name + "') before any run: call run() or run_eager() first");
  const TensorInfo& info = prog.outputs[it->second];
  ir::ValueId value = prog.output_values[it->second];
  const std::vector<int64_t> shape = extents(info, last_run_dims);
  size_t expected = static_cast<size_t>(element_count(prog.graph().node(value).type.shape, last_run_dims)) *
                    element_size(info.dtype);
  if (bytes != expected)
    return Status::InvalidArgument("output '" + name + "' of the last run is " + std::to_string(expected) + " bytes, got " +
                                   std::to_string(bytes));
  if (!host && bytes > 0) return Status::InvalidArgument("read('" + name + "'): destination is null");
  if (last_run_fallback) {
    GDL_CUDA_TRY(cudaStreamSynchronize(stream), "waiting for the session stream");
    const std::vector<uint8_t>& kept = fallback_outputs.at(it->second);
    if (kept.size() != bytes) return Status::Internal("the fallback run kept " + std::to_string(kept.size()) + " bytes of '" + name + "'");
    std::memcpy(host, kept.data(), bytes);
    return Status::Ok();
  }
  const plan::Buffer& buffer = prog.buffer_of(value);
  // An output may be a view behind a run-time axis: its place moves with the run's layout.
  const unsigned char* source =
      (buffer.region == plan::Region::kParams ? params->base() : arena) + plan::offset_at(buffer, last_run_layout);
  const std::vector<int64_t> padded = extents(info, last_run_layout);
  if (padded == shape) {
    GDL_CUDA_TRY(cudaMemcpyAsync(host, source, bytes, cudaMemcpyDeviceToHost, stream), "copying output '" + name + "' out");
  } else {
    GDL_RETURN_IF_ERROR(copy_pieces(static_cast<unsigned char*>(host), source,
                                    rt::strided_copy_pieces(shape, padded, shape, element_size(info.dtype)),
                                    cudaMemcpyDeviceToHost, stream, "copying the valid rows of output '" + name + "' out"));
  }
  GDL_CUDA_TRY(cudaStreamSynchronize(stream), "waiting for the run and the copy of output '" + name + "'");
  return Status::Ok();
}

Expected<Session::TensorView> Session::Impl::output_view(const std::string& name) const {
  auto it = prog.output_index.find(name);
  if (it == prog.output_index.end()) return wrong_role(prog, name, "output", "");
  if (!has_run) return Status::FailedPrecondition("output_view('" + name + "') before any run: call run() or run_eager() first");
  if (last_run_fallback)
    return Status::FailedPrecondition("the last run took the eager fallback, whose outputs are on the host: read('" + name +
                                      "') them");
  const TensorInfo& info = prog.outputs[it->second];
  const plan::Buffer& buffer = prog.buffer_of(prog.output_values[it->second]);
  TensorView view;
  view.dtype = info.dtype;
  view.device = device;
  view.shape = extents(info, last_run_dims);
  const std::vector<int64_t> layout_extents = extents(info, last_run_layout);
  view.strides.assign(view.shape.size(), 1);
  for (size_t a = view.shape.size(); a-- > 1;) view.strides[a - 1] = view.strides[a] * layout_extents[a];
  view.data = (buffer.region == plan::Region::kParams ? params->base() : arena) + plan::offset_at(buffer, last_run_layout);
  return view;
}

// The state slot `name` names, or why not; with `bytes`, also checked to be its size.
Expected<plan::Buffer> Session::Impl::state_buffer(const std::string& name, std::optional<size_t> bytes) const {
  auto it = prog.state_index.find(name);
  if (it == prog.state_index.end()) return wrong_role(prog, name, "state", "");
  const plan::Buffer& b = prog.buffer_of(prog.state_values[it->second]);
  if (bytes && *bytes != b.bytes)
    return Status::InvalidArgument("state '" + name + "' is " + std::to_string(b.bytes) + " bytes, got " +
                                   std::to_string(*bytes));
  return b;
}

Status Session::Impl::zero_states(const std::string& name) {
  for (size_t i = 0; i < prog.states.size(); ++i) {
    if (!name.empty() && prog.states[i].name != name) continue;
    const plan::Buffer& b = prog.buffer_of(prog.state_values[i]);
    GDL_CUDA_TRY(cudaMemsetAsync(arena + b.offset, 0, b.bytes, stream), "zeroing state '" + prog.states[i].name + "'");
  }
  return Status::Ok();
}

Status Session::Impl::poison(uint8_t byte) {
  // Arena bytes outside every input and state slot and the valid-dims block, as [begin, end) gaps.
  std::vector<std::pair<uint64_t, uint64_t>> kept;
  for (const std::vector<ir::ValueId>* kept_values : {&prog.input_values, &prog.state_values})
    for (ir::ValueId v : *kept_values) {
      const plan::Buffer& b = prog.buffer_of(v);
      if (b.region == plan::Region::kArena && b.bytes > 0) kept.push_back({b.offset, b.offset + b.bytes});
    }
  if (!prog.dims.empty()) kept.push_back({plan::kValidDimsOffset, plan::kValidDimsOffset + plan::kValidDimsBytes});
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
  return guarded("Session::create", [&]() -> Expected<std::unique_ptr<Session>> {
    auto impl = std::make_unique<Impl>(program, program.impl_, options);
    GDL_RETURN_IF_ERROR(impl->init());
    return std::unique_ptr<Session>(new Session(std::move(impl)));
  });
}

Expected<std::vector<std::unique_ptr<Session>>> Session::create_ranks(const Program& program,
                                                                    const std::vector<SessionOptions>& options) {
  return guarded("Session::create_ranks", [&]() -> Expected<std::vector<std::unique_ptr<Session>>> {
    const int64_t ranks = program.impl_->graph().group.ranks;
    if (ranks > 1 && static_cast<int64_t>(options.size()) != ranks)
      return Status::InvalidArgument("Session::create_ranks: program " + program.name() + " runs over " +
                                     std::to_string(ranks) + " ranks, got options for " + std::to_string(options.size()));
    std::vector<bool> seen(options.size(), false);
    for (const SessionOptions& o : options)
      if (o.communicator && o.communicator->rank() < static_cast<int>(seen.size())) {
        if (seen[static_cast<size_t>(o.communicator->rank())])
          return Status::InvalidArgument("Session::create_ranks: two options name rank " +
                                         std::to_string(o.communicator->rank()) + "'s communicator");
        seen[static_cast<size_t>(o.communicator->rank())] = true;
      }
    std::vector<std::unique_ptr<Impl>> impls;
    for (const SessionOptions& o : options) {
      if (!o.communicator && program.impl_->graph().group.ranks > 1)
        return Status::InvalidArgument("Session::create_ranks: options[" + std::to_string(impls.size()) +
                                       "] has no communicator (Communicator::create_local makes one per device)");
      impls.push_back(std::make_unique<Impl>(program, program.impl_, o));
      GDL_RETURN_IF_ERROR(impls.back()->init(/*join_group=*/false));
    }
    // One thread drives every rank: each rank's part of one exchange goes to NCCL in one group.
    if (!impls.empty() && impls[0]->communicator) {
      const rt::NcclApi& api = *impls[0]->communicator->internals().api;
      const auto in_one_group = [&](const std::function<Status(Impl&)>& each) -> Status {
        if (ncclResult_t r = api.group_start(); r != ncclSuccess) return rt::nccl_error(api, r, "starting an NCCL group");
        Status enqueued = Status::Ok();
        for (auto& impl : impls) {
          if (enqueued.ok()) enqueued = impl->make_current();
          if (enqueued.ok()) enqueued = each(*impl);
        }
        const ncclResult_t ended = api.group_end();
        GDL_RETURN_IF_ERROR(enqueued);
        if (ended != ncclSuccess) return rt::nccl_error(api, ended, "ending an NCCL group");
        return Status::Ok();
      };
      GDL_RETURN_IF_ERROR(in_one_group([](Impl& impl) { return impl.enqueue_signature_exchange(); }));
      for (auto& impl : impls) {
        GDL_RETURN_IF_ERROR(impl->make_current());
        GDL_RETURN_IF_ERROR(impl->compare_signatures());
      }
      // Each collective size's first call, one a group: it connects then, as it will run alone.
      for (size_t c = 0; c < impls[0]->collective_calls.size(); ++c)
        GDL_RETURN_IF_ERROR(in_one_group([c](Impl& impl) { return impl.warm_up_collective(impl.collective_calls[c]); }));
      for (auto& impl : impls)
        if (impl->options.build_buckets_at_create) {
          GDL_RETURN_IF_ERROR(impl->make_current());
          GDL_RETURN_IF_ERROR(impl->build_every_bucket());
        }
    }
    std::vector<std::unique_ptr<Session>> sessions;
    for (auto& impl : impls) sessions.push_back(std::unique_ptr<Session>(new Session(std::move(impl))));
    return sessions;
  });
}

Status Session::set_param(const std::string& name, const void* data, size_t bytes) {
  return guarded("Session::set_param", [&] {
    GDL_RETURN_IF_ERROR(impl_->make_current());
    return impl_->set_param(name, data, bytes);
  });
}

Status Session::bind(const std::string& name, const void* data, size_t bytes, ElementType dtype,
                     const std::vector<int64_t>& shape, MemoryKind kind) {
  return guarded("Session::bind", [&] {
    GDL_RETURN_IF_ERROR(impl_->make_current());
    return impl_->bind(name, data, bytes, dtype, shape, kind);
  });
}

Status Session::bind_reference(const std::string& name, const void* data, size_t bytes, ElementType dtype,
                               const std::vector<int64_t>& shape) {
  return guarded("Session::bind_reference", [&] {
    GDL_RETURN_IF_ERROR(impl_->make_current());
    return impl_->bind(name, data, bytes, dtype, shape, MemoryKind::kDevice, /*by_reference=*/true);
  });
}

Status Session::set_dim(const std::string& name, int64_t value) {
  return guarded("Session::set_dim", [&] { return impl_->set_dim(name, value); });
}

Status Session::set_scalar(const std::string& name, double value) {
  return guarded("Session::set_scalar", [&] {
    GDL_RETURN_IF_ERROR(impl_->make_current());
    return impl_->set_scalar(name, value);
  });
}

Status Session::run() {
  return guarded("Session::run", [&] {
    NvtxRange range(impl_->nvtx_run);
    GDL_RETURN_IF_ERROR(impl_->make_current());
    return impl_->run();
  });
}

Status Session::run_eager() {
  return guarded("Session::run_eager", [&] {
    NvtxRange range(impl_->nvtx_run_eager);
    GDL_RETURN_IF_ERROR(impl_->make_current());
    return impl_->run_eager();
  });
}

Status Session::read(const std::string& name, void* host, size_t bytes) {
  return guarded("Session::read", [&] {
    GDL_RETURN_IF_ERROR(impl_->make_current());
    return impl_->read(name, host, bytes);
  });
}

Status Session::set_state(const std::string& name, const void* data, size_t bytes, MemoryKind kind) {
  return guarded("Session::set_state", [&] {
    Expected<plan::Buffer> b = impl_->state_buffer(name, bytes);
    if (!b) return b.status();
    if (!data && bytes > 0) return Status::InvalidArgument("set_state('" + name + "'): source is null");
    GDL_RETURN_IF_ERROR(impl_->make_current());
    const cudaMemcpyKind direction = kind == MemoryKind::kHost ? cudaMemcpyHostToDevice : cudaMemcpyDeviceToDevice;
    GDL_CUDA_TRY(cudaMemcpyAsync(impl_->arena + b->offset, data, bytes, direction, impl_->stream),
                 "copying state '" + name + "' in");
    GDL_CUDA_TRY(cudaStreamSynchronize(impl_->stream), "waiting for the copy of state '" + name + "'");
    impl_->stream_idle();
    return Status::Ok();
  });
}

Status Session::read_state(const std::string& name, void* host, size_t bytes) {
  return guarded("Session::read_state", [&] {
    Expected<plan::Buffer> b = impl_->state_buffer(name, bytes);
    if (!b) return b.status();
    if (!host && bytes > 0) return Status::InvalidArgument("read_state('" + name + "'): destination is null");
    GDL_RETURN_IF_ERROR(impl_->make_current());
    GDL_CUDA_TRY(cudaMemcpyAsync(host, impl_->arena + b->offset, bytes, cudaMemcpyDeviceToHost, impl_->stream),
                 "copying state '" + name + "' out");
    GDL_CUDA_TRY(cudaStreamSynchronize(impl_->stream), "waiting for the copy of state '" + name + "'");
    impl_->stream_idle();
    return Status::Ok();
  });
}

Status Session::reset_state(const std::string& name) {
  return guarded("Session::reset_state", [&] {
    if (!name.empty()) {
      Expected<plan::Buffer> b = impl_->state_buffer(name);
      if (!b) return b.status();
    }
    GDL_RETURN_IF_ERROR(impl_->make_current());
    return impl_->zero_states(name);
  });
}

Expected<Session::DeviceView> Session::state_view(const std::string& name) {
  return guarded("Session::state_view", [&]() -> Expected<DeviceView> {
    Expected<plan::Buffer> b = impl_->state_buffer(name);
    if (!b) return b.status();
    return DeviceView{impl_->arena + b->offset, static_cast<size_t>(b->bytes)};
  });
}

Status Session::seed_rng(uint64_t seed) {
  if (!impl_->prog.state_index.count("rng.state"))
    return Status::NotFound("program " + impl_->prog.graph().program_name + " draws no random numbers (no rand or randn)");
  const int32_t words[4] = {static_cast<int32_t>(static_cast<uint32_t>(seed)), static_cast<int32_t>(static_cast<uint32_t>(seed >> 32)),
                            0, 0};
  return set_state("rng.state", words, sizeof(words));
}

Expected<std::vector<int64_t>> Session::shape_of(const std::string& name) const {
  return guarded("Session::shape_of", [&]() -> Expected<std::vector<int64_t>> {
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
  return guarded("Session::synchronize", [&] {
    GDL_RETURN_IF_ERROR(impl_->make_current());
    GDL_CUDA_TRY(cudaStreamSynchronize(impl_->stream), "waiting for the session stream");
    impl_->stream_idle();
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
CUstream_st* Session::stream() const { return impl_->stream; }

Expected<Session::TensorView> Session::output_view(const std::string& name) {
  return guarded("Session::output_view", [&] { return impl_->output_view(name); });
}

Expected<CUgraph_st*> Session::export_graph() {
  return guarded("Session::export_graph", [&]() -> Expected<CUgraph_st*> {
    GDL_RETURN_IF_ERROR(impl_->make_current());
    return impl_->export_graph();
  });
}

Status testing::poison_arena(Session& session, uint8_t byte) {
  return guarded("testing::poison_arena", [&] {
    GDL_RETURN_IF_ERROR(session.internals().make_current());
    return session.internals().poison(byte);
  });
}

Status testing::poison_padding(Session& session, bool on) {
  session.internals().poison_padding = on;
  return Status::Ok();
}

}  // namespace gdl
