// Running a session: the explicit CUDA graph, node updates, eager launches.
//
// Session::run:
// 1. Check that every param was set and every input bound with the current
//    run-time dims (inputs that disagree on a dim cannot run together).
// 2. First run: build the graph node by node (cudaGraphAddKernelNode with
//    the arena pointer, the params pointer and gdl_args by value; edges from
//    the plan steps' deps), instantiate it and upload it, once.
//    Later runs: if a run-time dim changed since the nodes were set, update
//    the nodes whose launch or indexing depends on dims
//    (cudaGraphExecKernelNodeSetParams: new grid and args, no re-instantiation).
// 3. cudaGraphLaunch on the session stream; return without waiting.
// 4. Remember the dims of this run (for read), and mark inputs that the run
//    overwrote as unbound.
// run_eager launches the same kernels in plan order on the same stream
// (stream order satisfies every dep), with launch dims for the current dims.
// set_scalar (session.cc) updates only the nodes whose kernel reads the scalar.
#include "cuda_util.h"
#include "session_impl.h"

namespace gdl {

using rt::Stopwatch;

namespace {

bool depends_on_dims(const KernelInfo& k) {
  if (k.depends_on_dims) return true;
  for (const Dim& d : k.launch.work)
    if (d.is_runtime()) return true;
  return false;
}

struct NodeParams {
  unsigned char* arena;
  const unsigned char* params;
  rt::KernelArgs args;
  void* pointers[3];
  cudaKernelNodeParams cuda{};

  NodeParams(unsigned char* a, const unsigned char* p, const rt::KernelArgs& k, cudaKernel_t kernel,
             const rt::LaunchDims& launch)
      : arena(a), params(p), args(k), pointers{&arena, &params, &args} {
    cuda.func = reinterpret_cast<void*>(kernel);  // the runtime accepts a cudaKernel_t as the function
    cuda.gridDim = launch.grid;
    cuda.blockDim = launch.block;
    cuda.sharedMemBytes = launch.shared_bytes;
    cuda.kernelParams = pointers;
    cuda.extra = nullptr;
  }
  NodeParams(const NodeParams&) = delete;  // pointers point into this object
};

std::string step_name(const Program::Impl& p, size_t step) {
  return "step " + std::to_string(step) + " (kernel '" + p.artifact.kernels[step].symbol + "')";
}

}  // namespace

Status Session::Impl::ready_to_run() const {
  if (!params->all_set())
    return Status::FailedPrecondition("param '" + prog.params[static_cast<size_t>(params->first_unset())].name +
                                      "' was never set: call set_param before running");
  for (size_t i = 0; i < inputs.size(); ++i) {
    const InputSlot& in = inputs[i];
    const std::string& name = prog.inputs[i].name;
    if (!in.bound) return Status::FailedPrecondition("input '" + name + "' is not bound: call bind before running");
    for (size_t d = 0; d < dims.size(); ++d)
      if (in.bound_dims[d] >= 0 && in.bound_dims[d] != dims[d])
        return Status::FailedPrecondition("input '" + name + "' was bound with " + prog.dims[d].name + " = " +
                                          std::to_string(in.bound_dims[d]) + ", but a later bind set " + prog.dims[d].name +
                                          " = " + std::to_string(dims[d]) + ": bind '" + name + "' again");
  }
  return Status::Ok();
}

Status Session::Impl::build_graph() {
  const plan::Plan& p = prog.plan();
  const std::vector<cudaKernel_t>& kernels = library.kernels();
  Stopwatch build_time;
  GDL_CUDA_TRY(cudaGraphCreate(&graph, 0), "creating the graph");
  nodes.assign(p.steps.size(), nullptr);
  node_launch.assign(p.steps.size(), {});
  for (size_t i = 0; i < p.steps.size(); ++i) {
    Expected<rt::LaunchDims> launch = rt::launch_dims(prog.artifact.kernels[i].launch, dims);
    if (!launch) return launch.status();
    std::vector<cudaGraphNode_t> deps;
    for (int d : p.steps[i].deps) deps.push_back(nodes[static_cast<size_t>(d)]);
    NodeParams node(arena, params->base(), args, kernels[i], *launch);
    GDL_CUDA_TRY(cudaGraphAddKernelNode(&nodes[i], graph, deps.data(), deps.size(), &node.cuda),
                 "adding the graph node of " + step_name(prog, i));
    node_launch[i] = *launch;
  }
  stats.graph_build_us = build_time.elapsed_us();

  Stopwatch instantiate_time;
  GDL_CUDA_TRY(cudaGraphInstantiate(&exec, graph, 0), "instantiating the graph");
  stats.instantiate_us = instantiate_time.elapsed_us();
  Stopwatch upload_time;
  GDL_CUDA_TRY(cudaGraphUpload(exec, stream), "uploading the graph");
  stats.upload_us = upload_time.elapsed_us();
  graph_dims = dims;
  return Status::Ok();
}

Status Session::Impl::update_node(size_t step) {
  Stopwatch update_time;
  Expected<rt::LaunchDims> launch = rt::launch_dims(prog.artifact.kernels[step].launch, dims);
  if (!launch) return launch.status();
  NodeParams node(arena, params->base(), args, library.kernels()[step], *launch);
  GDL_CUDA_TRY(cudaGraphExecKernelNodeSetParams(exec, nodes[step], &node.cuda),
               "updating the graph node of " + step_name(prog, step));
  node_launch[step] = *launch;
  stats.node_updates += 1;
  stats.node_update_us += update_time.elapsed_us();
  return Status::Ok();
}

Status Session::Impl::apply_dim_changes() {
  if (graph_dims == dims) return Status::Ok();
  const std::vector<KernelInfo>& kernels = prog.artifact.kernels;
  for (size_t step = 0; step < kernels.size(); ++step)
    if (depends_on_dims(kernels[step])) GDL_RETURN_IF_ERROR(update_node(step));
  graph_dims = dims;
  return Status::Ok();
}

void Session::Impl::after_run() {
  has_run = true;
  last_run_dims = dims;
  for (size_t i = 0; i < inputs.size(); ++i)
    if (prog.input_clobbered_by_run[i]) inputs[i].bound = false;
}

Status Session::Impl::run() {
  GDL_RETURN_IF_ERROR(ready_to_run());
  if (prog.plan().steps.empty()) {
    after_run();
    stats.runs += 1;
    return Status::Ok();
  }
  if (!exec) {
    Status built = build_graph();
    if (!built.ok()) {  // start over at the next run rather than keep half a graph
      if (exec) (void)cudaGraphExecDestroy(exec);
      if (graph) (void)cudaGraphDestroy(graph);
      exec = nullptr;
      graph = nullptr;
      return built;
    }
  }
  Stopwatch submit;
  GDL_RETURN_IF_ERROR(apply_dim_changes());
  if (options.record_device_time) GDL_CUDA_TRY(cudaEventRecord(run_start, stream), "recording the run start");
  GDL_CUDA_TRY(cudaGraphLaunch(exec, stream), "launching the graph");
  if (options.record_device_time) {
    GDL_CUDA_TRY(cudaEventRecord(run_end, stream), "recording the run end");
    timed_run_pending = true;
  }
  stats.last_submit_us = submit.elapsed_us();
  submit_us_total += stats.last_submit_us;
  stats.runs += 1;
  stats.mean_submit_us = submit_us_total / static_cast<double>(stats.runs);
  after_run();
  return Status::Ok();
}

Status Session::Impl::run_eager() {
  GDL_RETURN_IF_ERROR(ready_to_run());
  const std::vector<cudaKernel_t>& kernels = library.kernels();
  Stopwatch submit;
  if (options.record_device_time) GDL_CUDA_TRY(cudaEventRecord(run_start, stream), "recording the run start");
  unsigned char* arena_arg = arena;
  const unsigned char* params_arg = params->base();
  rt::KernelArgs kernel_args = args;
  void* pointers[3] = {&arena_arg, &params_arg, &kernel_args};
  for (size_t i = 0; i < kernels.size(); ++i) {
    Expected<rt::LaunchDims> launch = rt::launch_dims(prog.artifact.kernels[i].launch, dims);
    if (!launch) return launch.status();
    GDL_CUDA_TRY(cudaLaunchKernel(reinterpret_cast<const void*>(kernels[i]), launch->grid, launch->block, pointers,
                                  launch->shared_bytes, stream),
                 "launching " + step_name(prog, i));
  }
  if (options.record_device_time) {
    GDL_CUDA_TRY(cudaEventRecord(run_end, stream), "recording the run end");
    timed_run_pending = true;
  }
  stats.last_eager_submit_us = submit.elapsed_us();
  eager_submit_us_total += stats.last_eager_submit_us;
  stats.eager_runs += 1;
  stats.mean_eager_submit_us = eager_submit_us_total / static_cast<double>(stats.eager_runs);
  after_run();
  return Status::Ok();
}

}  // namespace gdl
