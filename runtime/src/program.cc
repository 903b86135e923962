// Program: an artifact checked for consistency and described for users.
//
// make_program_impl:
// 1. verify_artifact (artifact.h): the graph's structure, the plan as data,
//    the kernel ABI's limits and the kernel table against the plan. An
//    artifact read from a file passed it already; one the compiler just made
//    did not.
// 2. Build the public tables (dims with what keeps padding from serving
//    them, inputs, params, outputs, scalars) and the name -> index maps, and
//    mark inputs whose buffer a step's result overlaps (plan.h
//    inputs_clobbered_by_run) and the values kernels read through an
//    input's pointer slot (input_pointer_slots).
// resolve_dim_serving: each dim's policy from the session options, the
// program's declaration and its padding blocker; a dim that sets a
// collective's element count must be bucket-served.
// Any failure is DataLoss: the file passed its checksum, so the writer (or
// whoever made the file) is at fault, not the caller.
#include <cstring>

#include "collectives.h"
#include "cuda_util.h"
#include "internal_error.h"
#include "program_impl.h"

namespace gdl {
namespace rt {
TensorInfo describe_tensor(const ir::Node& n, const std::string& name, const ir::Graph& g) {
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


Expected<std::shared_ptr<Program::Impl>> make_program_impl(Artifact artifact) {
  if (std::string problem = verify_artifact(artifact); !problem.empty()) return Status::DataLoss("artifact " + problem);

  auto impl = std::make_shared<Program::Impl>();
  impl->artifact = std::move(artifact);
  const ir::Graph& g = impl->graph();
  for (const DimInfo& d : g.dims)
    impl->dims.push_back({d.name, d.lo, d.hi, d.buckets, d.policy == DimPolicy::kUpdate, d.padding_blocker});
  for (ir::ValueId v : g.leaves(ir::Op::kInput)) {
    impl->input_index[g.node(v).name] = impl->inputs.size();
    impl->inputs.push_back(describe_tensor(g.node(v), g.node(v).name, g));
    impl->input_values.push_back(v);
  }
  for (ir::ValueId v : g.leaves(ir::Op::kParam)) {
    impl->param_index[g.node(v).name] = impl->params.size();
    impl->params.push_back(describe_tensor(g.node(v), g.node(v).name, g));
    impl->param_values.push_back(v);
  }
  for (ir::ValueId v : g.leaves(ir::Op::kState)) {
    impl->state_index[g.node(v).name] = impl->states.size();
    impl->states.push_back(describe_tensor(g.node(v), g.node(v).name, g));
    impl->state_values.push_back(v);
  }
  for (const ir::Output& o : g.outputs) {
    impl->output_index[o.name] = impl->outputs.size();
    impl->outputs.push_back(describe_tensor(g.node(o.value), o.name, g));
    impl->output_values.push_back(o.value);
  }
  for (ir::ValueId v : g.leaves(ir::Op::kScalar)) {
    const ir::Node& n = g.node(v);
    impl->scalar_index[n.name] = impl->scalars.size();
    impl->scalars.push_back({n.name, to_public(n.type.dtype), n.attrs.value});
    impl->scalar_values.push_back(v);
  }
  impl->input_clobbered_by_run = plan::inputs_clobbered_by_run(impl->plan());
  impl->value_input_slot = plan::input_pointer_slots(impl->plan());
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
  const uint32_t collective_dims = rt::collective_dims(program.plan(), program.kernels());
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
    if (serving.update && ((collective_dims >> out.size()) & 1u))
      return Status::FailedPrecondition(
          "run-time dim " + d.name + " of program " + program.graph().program_name +
          " sets the element count of a collective, whose captured NCCL call cannot change it, so buckets must serve "
          "it; it would be served by node updates (" +
          (serving.why_update.empty() ? std::string("as asked") : serving.why_update) + ")");
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
  return guarded("Program::load", [&]() -> Expected<Program> {
    Expected<Artifact> artifact = read_artifact(path);
    if (!artifact) return artifact.status();
    Expected<std::shared_ptr<Impl>> impl = rt::make_program_impl(std::move(artifact).value());
    if (!impl) return Status(impl.status().code(), path + ": " + impl.status().message());
    return Program(std::move(impl).value());
  });
}

Expected<Program> Program::load_memory(const void* data, size_t bytes) {
  return guarded("Program::load_memory", [&]() -> Expected<Program> {
    if (data == nullptr && bytes > 0) return Status::InvalidArgument("Program::load_memory: null data with " +
                                                                     std::to_string(bytes) + " bytes");
    Expected<Artifact> artifact = deserialize_artifact(std::span<const uint8_t>(static_cast<const uint8_t*>(data), bytes));
    if (!artifact) return artifact.status();
    Expected<std::shared_ptr<Impl>> impl = rt::make_program_impl(std::move(artifact).value());
    if (!impl) return Status(impl.status().code(), "artifact in memory: " + impl.status().message());
    return Program(std::move(impl).value());
  });
}

Status Program::save(const std::string& path) const {
  return guarded("Program::save", [&] { return write_artifact(path, impl_->artifact); });
}

const std::string& Program::name() const { return impl_->graph().program_name; }
const std::vector<RuntimeDimInfo>& Program::dims() const { return impl_->dims; }
const std::vector<TensorInfo>& Program::inputs() const { return impl_->inputs; }
const std::vector<TensorInfo>& Program::params() const { return impl_->params; }
const std::vector<TensorInfo>& Program::outputs() const { return impl_->outputs; }
const std::vector<ScalarInfo>& Program::scalars() const { return impl_->scalars; }
const std::vector<TensorInfo>& Program::states() const { return impl_->states; }
int Program::group_ranks() const { return static_cast<int>(impl_->graph().group.ranks); }
const TensorInfo* Program::find_state(const std::string& n) const { return rt::find_in(impl_->states, impl_->state_index, n); }
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
  return guarded("Program::dim_serving", [&] { return rt::resolve_dim_serving(*impl_, options); });
}

int64_t RuntimeDimInfo::bucket_for(int64_t value) const {
  if (value < lo || value > hi) return -1;
  for (int64_t b : buckets)
    if (b >= value) return b;
  return hi;
}

}  // namespace gdl
