// Program: an artifact checked for consistency and described for users.
//
// make_program_impl:
// 1. Check the graph alone: ir::verify, every shape's run-time symbols inside
//    the dim list, dims and scalars within the kernel ABI's limits, dim
//    bounds that fit an int (gdl_args holds ints), scalars f32 or i32.
// 2. Check the plan against the graph: one buffer per value, every buffer
//    inside its region, every input / param / output buffer large enough for
//    its value at the dims' upper bounds, no arena buffer over the valid-dims
//    block of a program with run-time dims, steps' values and deps in range.
// 3. Check the kernel table against the plan: one kernel per step (and
//    maybe a large kernel, codegen.h LargeKernel), a symbol,
//    a launch rule with sane block / grid_y / items_per_block, scalar indexes
//    in range; and a module image (CUBIN or PTX) to load.
// 4. Build the public tables (dims with what keeps padding from serving
//    them, inputs, params, outputs, scalars) and the name -> index maps, and
//    mark inputs whose buffer a step's result overlaps.
// resolve_dim_serving: each dim's policy from the session options, the
// program's declaration and its padding blocker.
// Any failure is DataLoss: the file passed its checksum, so the writer (or
// whoever made the file) is at fault, not the caller.
#include <cstring>

#include "buckets.h"
#include "cuda_util.h"
#include "interp.h"
#include "program_impl.h"

namespace gdl {
namespace rt {
namespace {

Status check_graph(const ir::Graph& g) {
  if (std::string problem = ir::verify(g); !problem.empty()) return Status::DataLoss("artifact graph: " + problem);
  if (g.dims.size() > static_cast<size_t>(kMaxRuntimeDims))
    return Status::DataLoss("artifact has " + std::to_string(g.dims.size()) + " run-time dims; the kernel ABI holds " +
                            std::to_string(kMaxRuntimeDims));
  for (const DimInfo& d : g.dims)
    if (d.lo < 1 || d.lo > d.hi || d.hi > INT32_MAX)
      return Status::DataLoss("artifact dim " + d.name + " has bounds [" + std::to_string(d.lo) + ", " +
                              std::to_string(d.hi) + "]");
  for (const ir::Node& n : g.nodes) {
    if (n.type.rank() > kMaxRank) return Status::DataLoss("artifact value '" + n.name + "' has rank > 4");
    for (const Dim& d : n.type.shape)
      if (d.is_runtime() ? d.symbol >= static_cast<int>(g.dims.size()) : d.extent < 0)
        return Status::DataLoss("artifact value '" + n.name + "' has a malformed shape");
  }
  std::vector<ir::ValueId> scalars = g.leaves(ir::Op::kScalar);
  if (scalars.size() > static_cast<size_t>(kMaxScalars))
    return Status::DataLoss("artifact has " + std::to_string(scalars.size()) + " run-time scalars; the kernel ABI holds " +
                            std::to_string(kMaxScalars));
  for (ir::ValueId s : scalars) {
    const ir::Node& n = g.node(s);
    if (n.type.rank() != 0 || (n.type.dtype != DType::kF32 && n.type.dtype != DType::kI32))
      return Status::DataLoss("artifact scalar '" + n.name + "' is not a rank-0 f32 or i32");
  }
  for (const ir::Output& o : g.outputs)
    if (o.value < 0 || static_cast<size_t>(o.value) >= g.nodes.size())
      return Status::DataLoss("artifact output '" + o.name + "' names no value");
  return Status::Ok();
}

Status check_plan_tables(const plan::Plan& p) {
  const ir::Graph& g = p.graph;
  if (p.buffers.size() != g.nodes.size())
    return Status::DataLoss("artifact plan has " + std::to_string(p.buffers.size()) + " buffers for " +
                            std::to_string(g.nodes.size()) + " values");
  for (size_t v = 0; v < p.buffers.size(); ++v) {
    const plan::Buffer& b = p.buffers[v];
    if (b.region == plan::Region::kNone) continue;
    uint64_t limit = b.region == plan::Region::kArena ? p.arena_bytes : p.params_bytes;
    if (b.region != plan::Region::kArena && b.region != plan::Region::kParams)
      return Status::DataLoss("artifact buffer of value " + std::to_string(v) + " has an unknown region");
    if (b.offset > limit || b.bytes > limit - b.offset)
      return Status::DataLoss("artifact buffer of value " + std::to_string(v) + " lies outside its region");
    const ir::Node& n = g.nodes[v];
    bool bound_or_read = n.op == ir::Op::kInput || n.op == ir::Op::kParam;
    for (const ir::Output& o : g.outputs) bound_or_read |= o.value == static_cast<ir::ValueId>(v);
    if (bound_or_read && b.bytes < static_cast<uint64_t>(max_element_count(n.type.shape, g.dims)) * dtype_size(n.type.dtype))
      return Status::DataLoss("artifact buffer of '" + n.name + "' is smaller than its value");
  }
  for (const ir::Output& o : g.outputs)
    if (p.buffers[static_cast<size_t>(o.value)].region == plan::Region::kNone)
      return Status::DataLoss("artifact output '" + o.name + "' has no buffer");
  if (!g.dims.empty()) {
    const uint64_t block_end = plan::kValidDimsOffset + plan::kValidDimsBytes;
    bool overlapped = p.arena_bytes < block_end;
    for (const plan::Buffer& b : p.buffers)
      overlapped |= b.region == plan::Region::kArena && b.bytes > 0 && b.offset < block_end &&
                    plan::kValidDimsOffset < b.offset + b.bytes;
    if (overlapped)
      return Status::DataLoss("artifact plan has no valid-dims block for its run-time dims (made by an older gdlc?): "
                              "recompile the program");
  }
  for (size_t i = 0; i < p.steps.size(); ++i) {
    const plan::Step& s = p.steps[i];
    if (s.result < 0 || static_cast<size_t>(s.result) >= g.nodes.size())
      return Status::DataLoss("artifact step " + std::to_string(i) + " writes no value");
    for (int d : s.deps)
      if (d < 0 || static_cast<size_t>(d) >= i)
        return Status::DataLoss("artifact step " + std::to_string(i) + " depends on a step that is not earlier");
  }
  return Status::Ok();
}

Status check_kernels(const Artifact& a) {
  const plan::Plan& p = a.plan;
  if (a.kernels.size() != p.steps.size())
    return Status::DataLoss("artifact has " + std::to_string(a.kernels.size()) + " kernels for " +
                            std::to_string(p.steps.size()) + " steps");
  size_t scalar_count = p.graph.leaves(ir::Op::kScalar).size();
  auto malformed_shape = [&](const Shape& shape) {
    for (const Dim& d : shape)
      if (d.is_runtime() ? d.symbol >= static_cast<int>(p.graph.dims.size()) : d.extent < 0) return true;
    return false;
  };
  auto malformed_rule = [&](const LaunchRule& r) {
    return r.block < 1 || r.block > 1024 || r.grid_y < 1 || r.grid_y > 65535 || r.items_per_block < 1 ||
           malformed_shape(r.work);
  };
  for (size_t i = 0; i < a.kernels.size(); ++i) {
    const KernelInfo& k = a.kernels[i];
    std::string where = "artifact kernel " + std::to_string(i) + " ('" + k.symbol + "')";
    if (k.symbol.empty()) return Status::DataLoss("artifact kernel " + std::to_string(i) + " has no symbol");
    if (malformed_rule(k.launch)) return Status::DataLoss(where + " has a malformed launch rule");
    if (!k.large.symbol.empty() &&
        (malformed_rule(k.large.launch) || malformed_shape(k.large.rows) || k.large.rows_limit < 1))
      return Status::DataLoss(where + " has a malformed large kernel ('" + k.large.symbol + "')");
    for (int s : k.scalars_used)
      if (s < 0 || static_cast<size_t>(s) >= scalar_count) return Status::DataLoss(where + " uses a scalar that does not exist");
  }
  if (!p.steps.empty() && a.module.cubin.empty() && a.module.ptx.empty())
    return Status::DataLoss("artifact has neither CUBIN nor PTX");
  return Status::Ok();
}

TensorInfo describe(const ir::Node& n, const std::string& name, const ir::Graph& g) {
  TensorInfo t;
  t.name = name;
  t.dtype = to_public(n.type.dtype);
  for (const Dim& d : n.type.shape)
    t.shape.push_back(d.is_runtime() ? AxisInfo{g.dims[static_cast<size_t>(d.symbol)].hi, d.symbol}
                                     : AxisInfo{d.extent, -1});
  t.max_bytes = static_cast<size_t>(max_element_count(n.type.shape, g.dims)) * dtype_size(n.type.dtype);
  t.type_text = type_to_string(n.type, g.dims);
  return t;
}

bool overlaps(const plan::Buffer& a, const plan::Buffer& b) {
  return a.region == b.region && a.region != plan::Region::kNone && a.bytes > 0 && b.bytes > 0 &&
         a.offset < b.offset + b.bytes && b.offset < a.offset + a.bytes;
}

}  // namespace

Expected<std::shared_ptr<Program::Impl>> make_program_impl(Artifact artifact) {
  GDL_RETURN_IF_ERROR(check_graph(artifact.plan.graph));
  GDL_RETURN_IF_ERROR(check_plan_tables(artifact.plan));
  GDL_RETURN_IF_ERROR(check_kernels(artifact));

  auto impl = std::make_shared<Program::Impl>();
  impl->artifact = std::move(artifact);
  const ir::Graph& g = impl->graph();
  std::vector<std::string> blockers = padding_blockers(g);
  for (size_t i = 0; i < g.dims.size(); ++i) {
    const DimInfo& d = g.dims[i];
    impl->dims.push_back({d.name, d.lo, d.hi, d.buckets, d.policy == DimPolicy::kUpdate, blockers[i]});
  }
  for (ir::ValueId v : g.leaves(ir::Op::kInput)) {
    impl->input_index[g.node(v).name] = impl->inputs.size();
    impl->inputs.push_back(describe(g.node(v), g.node(v).name, g));
    impl->input_values.push_back(v);
  }
  for (ir::ValueId v : g.leaves(ir::Op::kParam)) {
    impl->param_index[g.node(v).name] = impl->params.size();
    impl->params.push_back(describe(g.node(v), g.node(v).name, g));
    impl->param_values.push_back(v);
  }
  for (const ir::Output& o : g.outputs) {
    impl->output_index[o.name] = impl->outputs.size();
    impl->outputs.push_back(describe(g.node(o.value), o.name, g));
    impl->output_values.push_back(o.value);
  }
  for (ir::ValueId v : g.leaves(ir::Op::kScalar)) {
    const ir::Node& n = g.node(v);
    impl->scalar_index[n.name] = impl->scalars.size();
    impl->scalars.push_back({n.name, to_public(n.type.dtype), n.attrs.value});
    impl->scalar_values.push_back(v);
  }
  for (ir::ValueId in : impl->input_values) {
    bool clobbered = false;
    for (const plan::Step& s : impl->plan().steps) clobbered |= overlaps(impl->buffer_of(in), impl->buffer_of(s.result));
    impl->input_clobbered_by_run.push_back(clobbered);
  }
  return impl;
}

Expected<std::vector<DimServing>> resolve_dim_serving(const Program::Impl& program, const SessionOptions& options) {
  for (const auto& [name, choice] : options.dim_policies) {
    bool known = false;
    for (const RuntimeDimInfo& d : program.dims) known |= d.name == name;
    if (!known)
      return Status::NotFound("SessionOptions::dim_policies names '" + name + "', but program " +
                              program.graph().program_name + " has no run-time dim of that name");
  }
  std::vector<DimServing> out;
  for (const RuntimeDimInfo& d : program.dims) {
    DimPolicyChoice choice = options.dim_policy;
    if (auto it = options.dim_policies.find(d.name); it != options.dim_policies.end()) choice = it->second;
    bool update = choice == DimPolicyChoice::kUpdate || (choice == DimPolicyChoice::kAsDeclared && d.update_policy);
    DimServing serving{d.name, update, "", d.buckets};
    if (!update && !d.padding_blocker.empty()) {
      serving.update = true;
      serving.why_update = d.padding_blocker;
    }
    out.push_back(std::move(serving));
  }
  return out;
}

namespace {

template <typename T>
const T* find_in(const std::vector<T>& items, const std::map<std::string, size_t>& index, const std::string& name) {
  auto it = index.find(name);
  return it == index.end() ? nullptr : &items[it->second];
}

}  // namespace
}  // namespace rt

Expected<Program> Program::load(const std::string& path) {
  return rt::guarded("Program::load", [&]() -> Expected<Program> {
    Expected<Artifact> artifact = read_artifact(path);
    if (!artifact) return artifact.status();
    Expected<std::shared_ptr<Impl>> impl = rt::make_program_impl(std::move(artifact).value());
    if (!impl) return Status(impl.status().code(), path + ": " + impl.status().message());
    return Program(std::move(impl).value());
  });
}

Status Program::save(const std::string& path) const {
  return rt::guarded("Program::save", [&] { return write_artifact(path, impl_->artifact); });
}

const std::string& Program::name() const { return impl_->graph().program_name; }
const std::vector<RuntimeDimInfo>& Program::dims() const { return impl_->dims; }
const std::vector<TensorInfo>& Program::inputs() const { return impl_->inputs; }
const std::vector<TensorInfo>& Program::params() const { return impl_->params; }
const std::vector<TensorInfo>& Program::outputs() const { return impl_->outputs; }
const std::vector<ScalarInfo>& Program::scalars() const { return impl_->scalars; }
const TensorInfo* Program::find_input(const std::string& n) const { return rt::find_in(impl_->inputs, impl_->input_index, n); }
const TensorInfo* Program::find_param(const std::string& n) const { return rt::find_in(impl_->params, impl_->param_index, n); }
const TensorInfo* Program::find_output(const std::string& n) const {
  return rt::find_in(impl_->outputs, impl_->output_index, n);
}
const ScalarInfo* Program::find_scalar(const std::string& n) const {
  return rt::find_in(impl_->scalars, impl_->scalar_index, n);
}
size_t Program::node_count() const { return impl_->plan().steps.size(); }
uint64_t Program::arena_bytes() const { return impl_->plan().arena_bytes; }
uint64_t Program::params_bytes() const { return impl_->plan().params_bytes; }
uint64_t Program::naive_bytes() const { return impl_->plan().naive_bytes; }
uint64_t Program::live_lower_bound() const { return impl_->plan().live_lower_bound; }
const std::string& Program::kernel_arch() const { return impl_->artifact.module.arch; }
const std::string& Program::cuda_source() const { return impl_->artifact.cuda_source; }

Expected<std::vector<DimServing>> Program::dim_serving(const SessionOptions& options) const {
  return rt::guarded("Program::dim_serving", [&] { return rt::resolve_dim_serving(*impl_, options); });
}

int64_t RuntimeDimInfo::bucket_for(int64_t value) const {
  if (value < lo || value > hi) return -1;
  for (int64_t b : buckets)
    if (b >= value) return b;
  return hi;
}

Expected<std::map<std::string, TensorData>> Program::run_reference(const std::map<std::string, TensorData>& tensors,
                                                                   const std::map<std::string, double>& scalars) const {
  return rt::guarded("Program::run_reference", [&]() -> Expected<std::map<std::string, TensorData>> {
    const ir::Graph& g = impl_->graph();
    Bindings b;
    // Run-time dims come from the inputs' shapes (first one wins; the
    // interpreter's validation reports any disagreement), else their upper bound.
    std::vector<int64_t> dims(g.dims.size(), -1);
    for (const auto& [name, data] : tensors) {
      const TensorInfo* info = find_input(name);
      if (!info) info = find_param(name);
      if (!info) return Status::NotFound("'" + name + "' is not an input or param of program " + g.program_name);
      if (data.shape.size() != info->shape.size()) continue;  // validate_bindings names the mismatch
      for (size_t a = 0; a < info->shape.size(); ++a)
        if (info->shape[a].is_runtime() && dims[static_cast<size_t>(info->shape[a].dim)] < 0)
          dims[static_cast<size_t>(info->shape[a].dim)] = data.shape[a];
    }
    for (size_t d = 0; d < dims.size(); ++d)
      if (dims[d] < 0) dims[d] = g.dims[d].hi;
    b.dims = dims;
    for (const auto& [name, data] : tensors) {
      int64_t count = 1;
      for (int64_t e : data.shape) count *= e;
      if (count < 0 || data.bytes.size() != static_cast<size_t>(count) * element_size(data.dtype))
        return Status::InvalidArgument("'" + name + "' holds " + std::to_string(data.bytes.size()) +
                                       " bytes, its shape and dtype need " +
                                       std::to_string(count * static_cast<int64_t>(element_size(data.dtype))));
      HostTensor t;
      t.dtype = rt::to_internal(data.dtype);
      t.shape = data.shape;
      t.data = decode_elements(data.dtype, data.bytes.data(), static_cast<size_t>(count));
      b.tensors[name] = std::move(t);
    }
    for (const auto& [name, value] : scalars) {
      if (!find_scalar(name)) return Status::NotFound("'" + name + "' is not a run-time scalar of program " + g.program_name);
      b.scalars[name] = value;
    }
    Expected<std::map<std::string, HostTensor>> out = interpret(g, b);
    if (!out) return out.status();
    std::map<std::string, TensorData> result;
    for (const auto& [name, t] : *out) {
      TensorData d;
      d.dtype = rt::to_public(t.dtype);
      d.shape = t.shape;
      d.bytes = encode_elements(d.dtype, t.data);
      result[name] = std::move(d);
    }
    return result;
  });
}

}  // namespace gdl
