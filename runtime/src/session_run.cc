// Running a session: one graph per bucket, node updates, eager launches,
// and the measurements behind --explain and the dynamic bench.
//
// Session::run:
// 1. Check that every param was set and every input bound with the current
//    run-time dims (inputs that disagree on a dim cannot run together).
// 2. A dim above its upper bound (eager_fallback): session_fallback.cc.
// 3. The layout: each bucket-served dim at the capacity of the smallest
//    bucket that holds its value, each update-served dim at its value. The
//    bucket key (the capacities of the bucket-served dims) picks the graph;
//    a key's graph is built at its first use (or in Session::create): a
//    copy kernel node per 16 inputs reading their pinned staging buffers or
//    the caller's device memory (the module's gdl_input_copy; a memcpy node per input made each launch
//    slower on the host), an event record node
//    after them, a cudaGraphAddKernelNode per plan step with the arena pointer, the params
//    pointer and gdl_args (layout dims, scalars) by value, edges from the
//    steps' deps, or from the copy nodes for a step without deps
//    (ordinary from the copies unless the kernel starts before its wait,
//    Kernel::early_start; otherwise programmatic unless
//    SessionOptions::overlap_launches is
//    off: each kernel waits for its producers itself, gdl_abi.cuh; ordinary
//    into and out of a cooperative kernel's node); a kernel of several
//    steps is one node for all of them;
//    instantiate; upload. Every graph shares the one arena.
// 4. sync_nodes: the nodes that depend on a dim or scalar whose value
//    differs from what the graph's nodes were last given are updated with
//    cudaGraphExecKernelNodeSetParams (new grid and args; no
//    re-instantiation). Under buckets a dim changing inside its bucket
//    changes no node: only the valid-dims block.
// 5. Each input copy node given the entries of the inputs bound since the
//    last copy, from their staging buffers or the caller's device memory
//    (session_impl.h InputSlot), and switched off when there are none (bind
//    already copied them, or an earlier run did), each only when that set
//    or a source changed; the valid-dims block when it
//    changed (session.cc); then cudaGraphLaunch on the session stream;
//    return without waiting.
// 6. Remember the dims and layout of this run (read), count the bucket's
//    hit and the rows computed and valid, mark inputs that the run overwrote
//    as unbound.
// run_eager launches the same kernels in plan order on the same stream
// (stream order satisfies every dep) with the same layout and valid block.
// set_scalar (session.cc) syncs the graph of the last run at once; other
// buckets' graphs are synced at their next use.
// profile_nodes: eager launches with an event before and after each.
// measure_graph_update_costs: SetParams on every node, cudaGraphExecUpdate
// and cudaGraphInstantiate of the same graph, timed on the host.
#include <algorithm>
#include <cstring>

#include "collectives.h"
#include "cuda_util.h"
#include "session_impl.h"

namespace gdl {

using rt::Stopwatch;

namespace {

struct NodeParams {
  unsigned char* arena;
  const unsigned char* params;
  rt::KernelArgs args;
  rt::KernelOffsets offsets;
  void* pointers[4];
  cudaKernelNodeParams cuda{};

  NodeParams(unsigned char* a, const unsigned char* p, const rt::KernelArgs& k, const rt::StepLaunch& launch)
      : arena(a), params(p), args(k), offsets(launch.offsets), pointers{&arena, &params, &args, &offsets} {
    cuda.func = reinterpret_cast<void*>(launch.kernel);  // the runtime accepts a cudaKernel_t as the function
    cuda.gridDim = launch.dims.grid;
    cuda.blockDim = launch.dims.block;
    cuda.sharedMemBytes = launch.dims.shared_bytes;
    cuda.kernelParams = pointers;
    cuda.extra = nullptr;
  }
  NodeParams(const NodeParams&) = delete;  // pointers point into this object
};

// An input copy node's kernel parameters (gdl_input_copies by value).
struct CopyNodeParams {
  rt::InputCopies entries;
  void* pointers[1];
  cudaKernelNodeParams cuda{};

  CopyNodeParams(cudaKernel_t kernel, dim3 grid, const rt::InputCopies& e) : entries(e), pointers{&entries} {
    cuda.func = reinterpret_cast<void*>(kernel);
    cuda.gridDim = grid;
    cuda.blockDim = dim3(rt::kInputCopyThreads, 1, 1);
    cuda.kernelParams = pointers;
  }
  CopyNodeParams(const CopyNodeParams&) = delete;  // pointers point into this object
};

// One eager launch, `args` the first three kernel parameters (arena,
// params, gdl_args) and the launch's offsets the fourth. A cooperative
// kernel's blocks wait for each other: it is launched cooperatively, so
// that the driver refuses rather than hangs where they cannot all be
// resident.
Status launch_eager(const rt::StepLaunch& launch, void** first_args, cudaStream_t stream, const std::string& what) {
  rt::KernelOffsets offsets = launch.offsets;
  void* args[4] = {first_args[0], first_args[1], first_args[2], &offsets};
  if (!launch.cooperative) {
    GDL_CUDA_TRY(cudaLaunchKernel(reinterpret_cast<const void*>(launch.kernel), launch.dims.grid, launch.dims.block,
                                  args, launch.dims.shared_bytes, stream),
                 "launching " + what);
    return Status::Ok();
  }
  cudaLaunchAttribute attribute{};
  attribute.id = cudaLaunchAttributeCooperative;
  attribute.val.cooperative = 1;
  cudaLaunchConfig_t config{};
  config.gridDim = launch.dims.grid;
  config.blockDim = launch.dims.block;
  config.dynamicSmemBytes = launch.dims.shared_bytes;
  config.stream = stream;
  config.attrs = &attribute;
  config.numAttrs = 1;
  GDL_CUDA_TRY(cudaLaunchKernelExC(&config, reinterpret_cast<const void*>(launch.kernel), args), "launching " + what);
  return Status::Ok();
}

// Whether two choices of kernels give a graph the same nodes: the same
// kernels of several steps (a step moving between kernels of its own is a
// node update, not another node).
bool same_nodes(const KernelTable& t, const std::vector<int>& a, const std::vector<int>& b) {
  for (size_t i = 0; i < a.size(); ++i) {
    const Kernel &x = t.kernels[static_cast<size_t>(a[i])], &y = t.kernels[static_cast<size_t>(b[i])];
    // A library matmul kernel's node comes with its cuBLASLt node.
    const bool x_multi = x.first_step != x.last_step || x.cooperative || x.library.active,
               y_multi = y.first_step != y.last_step || y.cooperative || y.library.active;
    if ((x_multi || y_multi) && a[i] != b[i]) return false;
  }
  return true;
}

double median(std::vector<double> v) {
  if (v.empty()) return 0;
  std::sort(v.begin(), v.end());
  return v[v.size() / 2];
}

// Destroys the events it holds when it goes.
struct EventSet {
  std::vector<cudaEvent_t> events;
  ~EventSet() {
    for (cudaEvent_t e : events)
      if (e) (void)cudaEventDestroy(e);
  }
};

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

size_t Session::Impl::bucket_stats_for(const std::vector<int64_t>& key) {
  auto it = bucket_stats_index.find(key);
  if (it != bucket_stats_index.end()) return it->second;
  SessionStats::BucketStats b;
  b.capacities = key;
  for (size_t d = 0; d < key.size(); ++d)
    if (key[d] >= 0) b.label += (b.label.empty() ? "" : ", ") + prog.dims[d].name + "=" + std::to_string(key[d]);
  if (b.label.empty()) b.label = prog.dims.empty() ? "no run-time dims" : "one graph (dims updated)";
  stats.buckets.push_back(std::move(b));
  bucket_stats_index.emplace(key, stats.buckets.size() - 1);
  return stats.buckets.size() - 1;
}

const void* Session::Impl::copy_source(size_t input) const {
  const InputSlot& slot = inputs[input];
  return slot.device_source ? slot.device_source : slot.staging_on_device;
}

rt::InputCopies Session::Impl::copy_entries(const GraphInstance::CopyNode& c, int64_t mask) const {
  rt::InputCopies entries;
  for (size_t e = 0; e < c.inputs.size(); ++e) {
    const size_t i = c.inputs[e];
    entries.src[e] = copy_source(i);
    entries.dst[e] = arena + prog.buffer_of(prog.input_values[i]).offset;
    entries.bytes[e] = (mask >> e) & 1 ? c.bytes[e] : 0;
  }
  return entries;
}

Status Session::Impl::add_graph_nodes(GraphInstance& g, const std::vector<int64_t>& layout_dims,
                                      const std::vector<bool>* export_copies, const void* export_valid) {
  const plan::Plan& p = prog.plan();
  const rt::KernelArgs args = kernel_args(layout_dims);
  GDL_CUDA_TRY(cudaGraphCreate(&g.graph, 0), "creating the graph");
  // The input copies (InputSlot), then an event after them; every kernel
  // without a dep waits for the copies, so every kernel runs after them.
  g.copy_nodes.clear();
  for (size_t i = 0; i < inputs.size(); ++i) {
    const bool copied = copies_in_graph(i) && (!export_copies || (*export_copies)[i]);
    const unsigned long long bytes = copied ? input_layout_bytes(i, layout_dims) : 0;
    if (bytes == 0) continue;
    if (g.copy_nodes.empty() || g.copy_nodes.back().inputs.size() == static_cast<size_t>(kMaxInputCopies))
      g.copy_nodes.emplace_back();
    GraphInstance::CopyNode& c = g.copy_nodes.back();
    c.inputs.push_back(i);
    c.bytes.push_back(bytes);
    c.grid = dim3(std::max(c.grid.x, rt::input_copy_blocks(bytes)), static_cast<unsigned>(c.inputs.size()), 1);
  }
  std::vector<cudaGraphNode_t> copies;
  for (GraphInstance::CopyNode& c : g.copy_nodes) {  // built copying every entry, enabled
    c.params_mask = c.state = (int64_t{1} << c.inputs.size()) - 1;
    rt::InputCopies entries = copy_entries(c, c.params_mask);
    std::copy(entries.src, entries.src + c.inputs.size(), c.params_src.begin());
    CopyNodeParams node(library.input_copy(), c.grid, entries);
    GDL_CUDA_TRY(cudaGraphAddKernelNode(&c.node, g.graph, nullptr, 0, &node.cuda), "adding an input copy node");
    copies.push_back(c.node);
  }
  if (export_valid) {  // an exported graph writes its own valid counts, before everything
    cudaGraphNode_t valid = nullptr;
    GDL_CUDA_TRY(cudaGraphAddMemcpyNode1D(&valid, g.graph, nullptr, 0, arena + plan::kValidDimsOffset, export_valid,
                                          sizeof(int32_t) * kMaxRuntimeDims, cudaMemcpyDeviceToDevice),
                 "adding the exported graph's valid counts");
    for (cudaGraphNode_t c : copies)
      GDL_CUDA_TRY(cudaGraphAddDependencies(g.graph, &valid, &c, nullptr, 1), "ordering the valid counts before the copies");
    if (copies.empty()) copies.push_back(valid);
  }
  if (!copies.empty() && !export_copies) {  // the session's own graphs only: its staging waits for the event
    cudaGraphNode_t recorded = nullptr;
    GDL_CUDA_TRY(cudaGraphAddEventRecordNode(&recorded, g.graph, copies.data(), copies.size(), graph_copies_done),
                 "adding the event after the input copies");
  }
  const KernelTable& table = prog.kernels();
  g.nodes.assign(p.steps.size(), nullptr);
  g.step_kernel = kernels_at(layout_dims);
  g.multi_step_nodes = 0;
  for (size_t i = 0; i < p.steps.size(); ++i) {
    const int k = g.step_kernel[i];
    const Kernel& kernel = table.kernels[static_cast<size_t>(k)];
    if (static_cast<size_t>(kernel.first_step) < i) {  // a later step of a kernel of several: its first step's node
      g.nodes[i] = g.nodes[static_cast<size_t>(kernel.first_step)];
      continue;
    }
    const std::string name = kernel_name(k);
    std::vector<cudaGraphNode_t> deps;
    bool from_cooperative = false;  // a dep's node is a cooperative kernel or a child graph (ordinary edges only)
    for (size_t s = i; s <= static_cast<size_t>(kernel.last_step); ++s)
      for (int d : p.steps[s].deps)
        if (d < static_cast<int>(i)) {
          deps.push_back(g.nodes[static_cast<size_t>(d)]);
          const Kernel& from = table.kernels[static_cast<size_t>(g.step_kernel[static_cast<size_t>(d)])];
          from_cooperative |= from.cooperative || from.is_collective();
        }
    std::sort(deps.begin(), deps.end());  // steps of one kernel share a node: one edge each
    deps.erase(std::unique(deps.begin(), deps.end()), deps.end());
    bool from_copies = deps.empty() && !copies.empty();
    if (from_copies) deps = copies;  // a kernel without a dep waits for the input copies
    if (kernel.is_collective()) {  // its NCCL call, captured
      Expected<cudaGraphNode_t> call = add_collective_node(g.graph, k, deps, layout_dims);
      if (!call) return call.status();
      g.nodes[i] = *call;
      continue;
    }
    Expected<rt::StepLaunch> launch = library.launch(table, k, layout_dims);
    if (!launch) return launch.status();
    if (kernel.library.active) {  // its cuBLASLt call first, and the kernel after it
      Expected<cudaGraphNode_t> call = add_library_matmul_node(g.graph, k, deps, layout_dims);
      if (!call) return call.status();
      deps.assign(1, *call);
      from_copies = false;
      from_cooperative = true;  // a child graph node takes ordinary edges only
    }
    NodeParams node(arena, params->base(), args, *launch);
    // Edges into and out of a cooperative kernel's node stay ordinary: a
    // launch whose blocks must all be resident is not started beside the
    // kernel before it, and such a kernel never lets its dependents launch
    // early anyway (gdl_chain.cuh). Edges from the copy nodes are
    // programmatic only into a kernel that starts work before its wait
    // (Kernel::early_start; the copy kernel lets it launch at once).
    // (An exported graph's first kernels may wait on its memcpy node: ordinary edges from its copies.)
    const bool programmatic = options.overlap_launches && !deps.empty() && !kernel.cooperative && !from_cooperative &&
                              (!from_copies || (kernel.early_start && !export_copies));
    GDL_CUDA_TRY(cudaGraphAddKernelNode(&g.nodes[i], g.graph, programmatic ? nullptr : deps.data(),
                                        programmatic ? 0 : deps.size(), &node.cuda),
                 "adding the graph node of " + name);
    if (kernel.first_step != kernel.last_step) g.multi_step_nodes += 1;
    if (kernel.cooperative) {
      cudaLaunchAttributeValue cooperative{};
      cooperative.cooperative = 1;
      GDL_CUDA_TRY(cudaGraphKernelNodeSetAttribute(g.nodes[i], cudaLaunchAttributeCooperative, &cooperative),
                   "making the node of " + name + " cooperative");
    }
    if (deps.empty()) continue;
    if (programmatic) {
      // Every node is a kernel that waits for its producers itself (gdl_abi.cuh).
      cudaGraphEdgeData edge{};
      edge.from_port = cudaGraphKernelNodePortProgrammatic;
      edge.type = cudaGraphDependencyTypeProgrammatic;
      const std::vector<cudaGraphEdgeData> edges(deps.size(), edge);
      const std::vector<cudaGraphNode_t> to(deps.size(), g.nodes[i]);
      GDL_CUDA_TRY(cudaGraphAddDependencies(g.graph, deps.data(), to.data(), edges.data(), deps.size()),
                   "adding the programmatic edges of " + name);
    }
  }
  return Status::Ok();
}

Status Session::Impl::build_graph(GraphInstance& g, const std::vector<int64_t>& layout_dims) {
  NvtxRange range("build graph " + prog.graph().program_name);
  Stopwatch build_time;
  GDL_RETURN_IF_ERROR(add_graph_nodes(g, layout_dims));
  double build_us = build_time.elapsed_us();

  Stopwatch instantiate_time;
  GDL_CUDA_TRY(rt::graph_instantiate(&g.exec, g.graph), "instantiating the graph");
  double instantiate_us = instantiate_time.elapsed_us();
  if (++times_instantiated[g.key] > 1) stats.reinstantiations += 1;
  Stopwatch upload_time;
  GDL_CUDA_TRY(cudaGraphUpload(g.exec, stream), "uploading the graph");
  double upload_us = upload_time.elapsed_us();

  g.applied_layout = g.built_layout = layout_dims;
  std::copy(std::begin(scalar_bits), std::end(scalar_bits), g.applied_scalars.begin());
  g.applied_inputs = g.built_inputs = input_pointers;
  g.built_scalars = g.applied_scalars;
  stats.graph_build_us += build_us;
  stats.instantiate_us += instantiate_us;
  stats.upload_us += upload_us;
  stats.graphs_built += 1;
  g.stats_index = bucket_stats_for(g.key);
  SessionStats::BucketStats& b = stats.buckets[g.stats_index];
  b.built = true;
  b.build_us = build_us;
  b.instantiate_us = instantiate_us;
  b.upload_us = upload_us;
  return Status::Ok();
}

Expected<Session::Impl::GraphInstance*> Session::Impl::graph_for(const std::vector<int64_t>& key,
                                                                 const std::vector<int64_t>& layout_dims) {
  auto it = graphs.find(key);
  if (it != graphs.end()) {
    // A dim served by node updates may move a kernel of several steps in or
    // out of use, which changes the graph's nodes: build it again. (A step
    // moving between two kernels of its own is a node update.)
    const bool updates = std::find(update_dim.begin(), update_dim.end(), true) != update_dim.end();
    if (!updates || same_nodes(prog.kernels(), it->second->step_kernel, kernels_at(layout_dims))) return it->second.get();
    (void)cudaGraphExecDestroy(it->second->exec);
    (void)cudaGraphDestroy(it->second->graph);
    if (last_graph == it->second.get()) last_graph = nullptr;
    graphs.erase(it);
  }
  // The nodes take the input pointers as they are now, and some are not
  // updated by sync_nodes later (a cuBLASLt step's norm kernel): this
  // binding's, not an in-place reference an earlier run left there.
  prepare_references(references_bound() ? kernels_at(layout_dims) : std::vector<int>{}, /*count=*/false);
  auto g = std::make_unique<GraphInstance>();
  g->key = key;
  Status built = build_graph(*g, layout_dims);
  if (!built.ok()) {  // start over at the next use rather than keep half a graph
    if (g->exec) (void)cudaGraphExecDestroy(g->exec);
    if (g->graph) (void)cudaGraphDestroy(g->graph);
    return built;
  }
  GraphInstance* raw = g.get();
  graphs.emplace(key, std::move(g));
  return raw;
}

// The graph run() would launch now, built afresh (graph_for's graphs stay
// the session's), with its own valid-dims block written by a memcpy node at
// each launch and a copy node for every input bound from device memory that
// the kernels do not read in place; the other pending binds copied into the
// arena, and the stream synchronized, before it returns.
Expected<cudaGraph_t> Session::Impl::export_graph() {
  GDL_RETURN_IF_ERROR(ready_to_run());
  if (above_bounds())
    return Status::FailedPrecondition("a run-time dim is above its upper bound: such a run takes the eager fallback, "
                                      "which has no graph to export");
  const std::vector<int64_t> layout_dims = layout(dims);
  prepare_references(kernels_at(layout_dims), /*count=*/false);  // by reference: read in place, or copied
  // 1. What each launch copies, decided before anything changes.
  std::vector<const void*> launch_source(inputs.size(), nullptr);
  for (size_t i = 0; i < inputs.size(); ++i) {
    const InputSlot& in = inputs[i];
    const int slot = input_slot(i);
    const bool in_place = in.reference && slot >= 0 && input_pointers[static_cast<size_t>(slot)] == in.reference;
    const void* device_memory = in.reference ? in.reference : in.device_data;  // device binds not yet run
    const std::string& name = prog.inputs[i].name;
    if (device_memory && !in_place) {
      if (!in.device_copyable)
        return Status::FailedPrecondition(
            "input '" + name + "' was bound from device memory, which an exported graph copies at each launch, but the "
            "graph cannot copy it (its rows are padded to a bucket's, a dim of it is served by node updates, or the "
            "memory is on another device or not 16-byte aligned); bind it at a bucket's capacity, or from the host");
      launch_source[i] = device_memory;
    } else if (!device_memory && prog.input_clobbered_by_run[i]) {
      // A run reuses such an input's buffer: a second launch would read what the first left there.
      return Status::FailedPrecondition("input '" + name + "' is overwritten by a run (its buffer is reused after its "
                                        "last read): bind it from device memory before export_graph, so that every "
                                        "launch copies it");
    }
  }
  // 2. The valid counts of this run, from memory of the export's own.
  const void* valid_source = nullptr;
  if (!prog.dims.empty()) {
    std::array<int32_t, kMaxRuntimeDims> valid{};
    for (size_t d = 0; d < dims.size(); ++d) valid[d] = static_cast<int32_t>(dims[d]);
    void* kept = nullptr;
    GDL_CUDA_TRY(rt::device_malloc(&kept, sizeof valid), "allocating the exported graph's valid counts");
    export_buffers.push_back(kept);
    GDL_CUDA_TRY(cudaMemcpy(kept, valid.data(), sizeof valid, cudaMemcpyHostToDevice),
                 "writing the exported graph's valid counts");
    valid_source = kept;
  }
  // 3. The graph, its copy nodes reading those sources; the slots as they were if it fails.
  std::vector<InputSlot> before = inputs;
  std::vector<bool> copied_each_launch(inputs.size());
  for (size_t i = 0; i < inputs.size(); ++i)
    if (launch_source[i]) {
      inputs[i].copy_pending = true;
      inputs[i].device_source = launch_source[i];
      copied_each_launch[i] = true;
    }
  GraphInstance g;
  Status built = add_graph_nodes(g, layout_dims, &copied_each_launch, valid_source);
  if (!built.ok()) {
    if (g.graph) (void)cudaGraphDestroy(g.graph);
    inputs = std::move(before);
    return built;
  }
  // 4. Pending binds into the arena (the device ones also, harmlessly), done before it returns.
  built = flush_staged_inputs();
  if (built.ok()) built = write_valid_block();
  if (built.ok() && cudaStreamSynchronize(stream) != cudaSuccess)
    built = Status::Internal(std::string("waiting for the copies before the export: ") +
                             cudaGetErrorString(cudaGetLastError()));
  if (!built.ok()) {
    (void)cudaGraphDestroy(g.graph);
    return built;
  }
  stream_idle();
  // The exported graph is the session's last run for output_view. Its
  // launches write the valid counts and the inputs it copies (or a run
  // overwrites) into the arena: the session writes its counts before each of
  // its own runs from now on, and those inputs must be bound again first.
  has_run = true;
  last_run_dims = dims;
  last_run_layout = layout_dims;
  last_run_fallback = false;
  graphs_exported = true;
  for (size_t i = 0; i < inputs.size(); ++i) {
    inputs[i].device_data = nullptr;
    if ((prog.input_clobbered_by_run[i] || copied_each_launch[i]) && !inputs[i].reference) inputs[i].bound = false;
  }
  return g.graph;
}

std::vector<int> Session::Impl::kernels_at(const std::vector<int64_t>& layout_dims) const {
  std::vector<int> chosen(prog.plan().steps.size());
  for (size_t i = 0; i < chosen.size(); ++i) chosen[i] = kernel_at(i, layout_dims, options.multi_step_kernels);
  return chosen;
}

int Session::Impl::kernel_at(size_t step, const std::vector<int64_t>& layout_dims, bool multi_step) const {
  const KernelTable& table = prog.kernels();
  const plan::Plan& p = prog.plan();
  const auto library_ok = [&](int c) {
    if (step_dims[step] & update_dims_mask) return false;  // a captured call would go stale
    const Kernel& k = table.kernels[static_cast<size_t>(c)];
    return library_matmuls.usable(p, table, c, element_count(k.rows, layout_dims));
  };
  return library.choose(table, step, layout_dims, multi_step, library_ok);
}

Expected<cudaGraphNode_t> Session::Impl::add_library_matmul_node(cudaGraph_t graph, int k,
                                                                 const std::vector<cudaGraphNode_t>& deps,
                                                                 const std::vector<int64_t>& layout_dims) {
  const std::string name = kernel_name(k);
  const Kernel& kernel = prog.kernels().kernels[static_cast<size_t>(k)];
  std::vector<cudaGraphNode_t> after = deps;
  if (kernel.library.prologue_kernel >= 0) {  // the norm kernel writes the call's a first
    Expected<rt::StepLaunch> norm = library.launch(prog.kernels(), kernel.library.prologue_kernel, layout_dims);
    if (!norm) return norm.status();
    NodeParams params_of_norm(arena, params->base(), kernel_args(layout_dims), *norm);
    cudaGraphNode_t norm_node = nullptr;
    GDL_CUDA_TRY(cudaGraphAddKernelNode(&norm_node, graph, deps.data(), deps.size(), &params_of_norm.cuda),
                 "adding the norm node of " + name);
    after.assign(1, norm_node);
  }
  // cuBLASLt's first call of a kernel may load it, which a capture must not
  // do (the call reads whatever its operands hold: the scratch is rewritten
  // before it is read in every run).
  GDL_RETURN_IF_ERROR(library_matmuls.enqueue(prog.plan(), prog.kernels(), k, layout_dims, arena, params->base(), stream));
  return add_captured_node(graph, after, "the cuBLASLt call of " + name, [&](cudaStream_t s) {
    return library_matmuls.enqueue(prog.plan(), prog.kernels(), k, layout_dims, arena, params->base(), s);
  });
}

Expected<cudaGraphNode_t> Session::Impl::add_captured_node(cudaGraph_t graph, const std::vector<cudaGraphNode_t>& after,
                                                           const std::string& what,
                                                           const std::function<Status(cudaStream_t)>& enqueue,
                                                           bool move_into_parent) {
  if (!capture_stream)
    GDL_CUDA_TRY(cudaStreamCreateWithFlags(&capture_stream, cudaStreamNonBlocking), "creating the capture stream");
  GDL_CUDA_TRY(cudaStreamBeginCapture(capture_stream, cudaStreamCaptureModeThreadLocal), "capturing " + what);
  Status called = enqueue(capture_stream);
  cudaGraph_t captured = nullptr;
  const cudaError_t ended = cudaStreamEndCapture(capture_stream, &captured);
  if (!called.ok() && captured) (void)cudaGraphDestroy(captured);
  GDL_RETURN_IF_ERROR(called);
  GDL_CUDA_TRY(ended, "capturing " + what);
  cudaGraphNode_t node = nullptr;
  if (move_into_parent) {
    // The captured graph itself goes into the node, with whatever the library attached to it (NCCL keeps its
    // resources for the captured call alive through references the captured graph owns).
    cudaGraphNodeParams moved{};
    moved.type = cudaGraphNodeTypeGraph;
    moved.graph.graph = captured;
    moved.graph.ownership = cudaGraphChildGraphOwnershipMove;
    if (cudaGraphAddNode(&node, graph, after.data(), nullptr, after.size(), &moved) == cudaSuccess) return node;
    (void)cudaGetLastError();  // a driver without moves: the clone below
  }
  const cudaError_t added = cudaGraphAddChildGraphNode(&node, graph, after.data(), after.size(), captured);
  (void)cudaGraphDestroy(captured);  // the node holds a copy
  GDL_CUDA_TRY(added, "adding the node of " + what);
  return node;
}

Status Session::Impl::enqueue_collective_call(const rt::CollectiveCall& call, cudaStream_t s) {
  Communicator::Impl& c = communicator->internals();
  std::shared_lock<std::shared_mutex> lock(c.use);
  if (c.aborted.load()) return aborted_communicator();
  return rt::enqueue_collective(*c.api, c.comm, call, s);
}

// Launches graph `exec` on the stream; with a communicator, not after an
// abort and never while one is freeing it (Communicator::Impl::use).
Status Session::Impl::launch_graph(cudaGraphExec_t exec) {
  std::shared_lock<std::shared_mutex> lock;
  if (communicator) {
    lock = std::shared_lock<std::shared_mutex>(communicator->internals().use);
    if (communicator->internals().aborted.load()) return aborted_communicator();
  }
  GDL_CUDA_TRY(cudaGraphLaunch(exec, stream), "launching the graph");
  return Status::Ok();
}

Status Session::Impl::aborted_communicator() {
  return Status::FailedPrecondition("the session's communicator was aborted (Communicator::abort)");
}

Status Session::Impl::enqueue_collective_step(int k, const std::vector<int64_t>& layout_dims, cudaStream_t s) {
  return enqueue_collective_call(
      rt::collective_call(prog.plan(), prog.kernels().kernels[static_cast<size_t>(k)], layout_dims, arena, params->base()),
      s);
}

Expected<cudaGraphNode_t> Session::Impl::add_collective_node(cudaGraph_t graph, int k,
                                                             const std::vector<cudaGraphNode_t>& deps,
                                                             const std::vector<int64_t>& layout_dims) {
  const rt::CollectiveCall call =
      rt::collective_call(prog.plan(), prog.kernels().kernels[static_cast<size_t>(k)], layout_dims, arena, params->base());
  GDL_RETURN_IF_ERROR(warm_up_collective(call));  // a no-op: Session::create made every call's first
  return add_captured_node(
      graph, deps, "the NCCL call of " + kernel_name(k), [&](cudaStream_t s) { return enqueue_collective_call(call, s); },
      /*move_into_parent=*/true);
}

Status Session::Impl::warm_up_collective(const rt::CollectiveCall& shape) {
  if (!collectives_warmed.insert({static_cast<int>(shape.op), static_cast<int>(shape.dtype), static_cast<int>(shape.reduce),
                                  shape.count})
           .second)
    return Status::Ok();
  // use_communicator sized the scratch for every call a bucket makes, and no other call is made.
  if (shape.send_bytes + shape.receive_bytes > collective_warmup_bytes)
    return Status::Internal("a collective call of " + std::to_string(shape.send_bytes + shape.receive_bytes) +
                            " bytes that rt::collective_shapes did not list");
  rt::CollectiveCall first = shape;
  first.send = collective_warmup;
  first.receive = static_cast<unsigned char*>(collective_warmup) + shape.send_bytes;
  return enqueue_collective_call(first, stream);
}

Status Session::Impl::launch_step_eager(int k, const rt::StepLaunch& launch, void** args,
                                        const std::vector<int64_t>& layout_dims, cudaStream_t s) {
  NvtxRange range(nvtx_steps.at(static_cast<size_t>(prog.kernels().kernels[static_cast<size_t>(k)].first_step)));
  if (prog.kernels().kernels[static_cast<size_t>(k)].is_collective()) return enqueue_collective_step(k, layout_dims, s);
  const LibraryMatmul& l = prog.kernels().kernels[static_cast<size_t>(k)].library;
  if (l.active) {  // the norm kernel (if any), then cuBLASLt's product, then the kernel
    if (l.prologue_kernel >= 0) {
      Expected<rt::StepLaunch> norm = library.launch(prog.kernels(), l.prologue_kernel, layout_dims);
      if (!norm) return norm.status();
      GDL_RETURN_IF_ERROR(launch_eager(*norm, args, s, "the norm of " + kernel_name(k)));
    }
    GDL_RETURN_IF_ERROR(library_matmuls.enqueue(prog.plan(), prog.kernels(), k, layout_dims, arena, params->base(), s));
  }
  return launch_eager(launch, args, s, kernel_name(k));
}

std::string Session::Impl::kernel_name(int kernel) const {
  const Kernel& k = prog.kernels().kernels.at(static_cast<size_t>(kernel));
  const std::string steps = k.first_step == k.last_step
                                ? "step " + std::to_string(k.first_step)
                                : "steps " + std::to_string(k.first_step) + "-" + std::to_string(k.last_step);
  if (k.is_collective()) return steps + " (NCCL " + ir::op_name(prog.graph().node(k.collective).op) + ")";
  return steps + " (kernel '" + k.symbol + "')";
}

Status Session::Impl::build_every_bucket() {
  if (prog.plan().steps.empty()) return Status::Ok();
  // Every combination of the bucket-served dims' buckets; update-served dims at their current value.
  std::vector<int64_t> values = dims;
  std::vector<size_t> pick(dims.size(), 0);
  while (true) {
    for (size_t d = 0; d < dims.size(); ++d)
      if (!update_dim[d]) values[d] = prog.dims[d].buckets[pick[d]];
    Expected<GraphInstance*> g = graph_for(bucket_key(values), layout(values));
    if (!g) return g.status();
    size_t d = 0;
    for (; d < dims.size(); ++d) {
      if (update_dim[d]) continue;
      if (++pick[d] < prog.dims[d].buckets.size()) break;
      pick[d] = 0;
    }
    if (d == dims.size()) break;
  }
  return Status::Ok();
}

Status Session::Impl::update_node(GraphInstance& g, size_t node_step, const std::vector<int64_t>& layout_dims) {
  Stopwatch update_time;
  const int k = kernel_at(node_step, layout_dims, options.multi_step_kernels);
  Expected<rt::StepLaunch> launch = library.launch(prog.kernels(), k, layout_dims);
  if (!launch) return launch.status();
  NodeParams node(arena, params->base(), kernel_args(layout_dims), *launch);
  GDL_CUDA_TRY(cudaGraphExecKernelNodeSetParams(g.exec, g.nodes[node_step], &node.cuda),
               "updating the graph node of " + kernel_name(k));
  g.step_kernel[node_step] = k;
  stats.node_updates += 1;
  stats.node_update_us += update_time.elapsed_us();
  return Status::Ok();
}

Status Session::Impl::sync_nodes(GraphInstance& g, const std::vector<int64_t>& layout_dims) {
  uint32_t changed_dims = 0, changed_scalars = 0, changed_inputs = 0;
  for (size_t d = 0; d < layout_dims.size(); ++d)
    if (g.applied_layout[d] != layout_dims[d]) changed_dims |= 1u << d;
  for (size_t s = 0; s < prog.scalars.size(); ++s)
    if (std::memcmp(&g.applied_scalars[s], &scalar_bits[s], sizeof(float)) != 0) changed_scalars |= 1u << s;
  for (size_t i = 0; i < input_pointers.size(); ++i)
    if (g.applied_inputs[i] != input_pointers[i]) changed_inputs |= 1u << i;
  if (changed_dims == 0 && changed_scalars == 0 && changed_inputs == 0) return Status::Ok();
  // A step's change updates the node that computes it: its own, or the
  // node of the first step of its kernel (once for all the kernel's steps).
  std::vector<bool> node_changed(step_dims.size(), false);
  for (size_t step = 0; step < step_dims.size(); ++step)
    if ((step_dims[step] & changed_dims) || (step_scalars[step] & changed_scalars) || (step_inputs[step] & changed_inputs))
      node_changed[static_cast<size_t>(prog.kernels().kernels[static_cast<size_t>(g.step_kernel[step])].first_step)] = true;
  // A collective's node never changes: its dims are bucket-served and its inputs read in the arena.
  for (size_t step = 0; step < node_changed.size(); ++step)
    if (node_changed[step] && !prog.kernels().kernels[static_cast<size_t>(g.step_kernel[step])].is_collective())
      GDL_RETURN_IF_ERROR(update_node(g, step, layout_dims));
  g.applied_layout = layout_dims;
  std::copy(std::begin(scalar_bits), std::end(scalar_bits), g.applied_scalars.begin());
  g.applied_inputs = input_pointers;
  return Status::Ok();
}

void Session::Impl::count_run(const std::vector<int64_t>& layout_dims) {
  for (size_t d = 0; d < dims.size(); ++d) {
    stats.dims[d].rows_computed += static_cast<uint64_t>(layout_dims[d]);
    stats.dims[d].rows_valid += static_cast<uint64_t>(dims[d]);
  }
  stats.buckets[bucket_stats_for(bucket_key(dims))].hits += 1;
}

void Session::Impl::after_run(const std::vector<int64_t>& layout_dims, bool fallback) {
  has_run = true;
  last_run_dims = dims;
  last_run_layout = layout_dims;
  last_run_fallback = fallback;
  for (InputSlot& in : inputs) in.device_data = nullptr;  // a run consumed the device binds before it
  if (fallback) return;  // the fallback ran in an arena of its own: the inputs are intact
  for (size_t i = 0; i < inputs.size(); ++i)  // a reference is copied again by the next run
    if (prog.input_clobbered_by_run[i] && !inputs[i].reference) inputs[i].bound = false;
}

Status Session::Impl::run() {
  GDL_RETURN_IF_ERROR(ready_to_run());
  if (above_bounds()) return run_fallback();  // counted in fallback_runs, not as a graph or eager run
  const std::vector<int64_t> layout_dims = layout(dims);
  if (prog.plan().steps.empty()) {
    after_run(layout_dims, false);
    stats.runs += 1;
    return Status::Ok();
  }
  Expected<GraphInstance*> found = graph_for(bucket_key(dims), layout_dims);
  if (!found) return found.status();
  GraphInstance& g = **found;
  Stopwatch submit;
  prepare_references(g.step_kernel, /*count=*/true);
  GDL_RETURN_IF_ERROR(sync_nodes(g, layout_dims));
  bool copies = false;  // the inputs bound since the last copy are copied, the others not
  for (GraphInstance::CopyNode& c : g.copy_nodes) {
    int64_t wanted = 0;
    bool moved = false;  // a wanted entry reads another source than the node's params say
    for (size_t e = 0; e < c.inputs.size(); ++e)
      if (inputs[c.inputs[e]].copy_pending) {
        wanted |= int64_t{1} << e;
        moved |= copy_source(c.inputs[e]) != c.params_src[e];
      }
    copies |= wanted != 0;
    if (wanted == c.state && !moved) continue;  // the usual case: the same inputs bound as last time
    if (wanted != 0 && (wanted != c.params_mask || moved || c.state < 0)) {
      rt::InputCopies entries = copy_entries(c, wanted);
      CopyNodeParams node(library.input_copy(), c.grid, entries);
      GDL_CUDA_TRY(cudaGraphExecKernelNodeSetParams(g.exec, c.node, &node.cuda), "updating an input copy node");
      c.params_mask = wanted;
      std::copy(entries.src, entries.src + c.inputs.size(), c.params_src.begin());
    }
    if ((wanted != 0) != (c.state > 0) || c.state < 0)
      GDL_CUDA_TRY(cudaGraphNodeSetEnabled(g.exec, c.node, wanted != 0 ? 1 : 0), "switching an input copy node");
    c.state = wanted;
  }
  GDL_RETURN_IF_ERROR(write_valid_block());
  if (options.record_device_time) GDL_CUDA_TRY(cudaEventRecord(run_start, stream), "recording the run start");
  GDL_RETURN_IF_ERROR(launch_graph(g.exec));
  if (copies) graph_copies_pending = true;
  for (InputSlot& slot : inputs) slot.clear_pending();  // queued: later work on the stream sees the copies
  if (options.record_device_time) {
    GDL_CUDA_TRY(cudaEventRecord(run_end, stream), "recording the run end");
    timed_run_pending = true;
  }
  stats.last_submit_us = submit.elapsed_us();
  submit_us_total += stats.last_submit_us;
  stats.runs += 1;
  stats.mean_submit_us = submit_us_total / static_cast<double>(stats.runs);
  stats.multi_step_launches += g.multi_step_nodes;
  last_graph = &g;
  count_run(layout_dims);
  after_run(layout_dims, false);
  return Status::Ok();
}

Status Session::Impl::run_eager() {
  GDL_RETURN_IF_ERROR(ready_to_run());
  if (above_bounds()) return run_fallback();  // counted in fallback_runs, not as a graph or eager run
  const size_t steps = prog.plan().steps.size();
  const std::vector<int64_t> layout_dims = layout(dims);
  Stopwatch submit;
  GDL_RETURN_IF_ERROR(write_valid_block());
  const std::vector<int> chosen = kernels_at(layout_dims);
  prepare_references(chosen, /*count=*/true);
  // Timed from before the input copies, as a graph run's time includes its copy nodes.
  if (options.record_device_time) GDL_CUDA_TRY(cudaEventRecord(run_start, stream), "recording the run start");
  GDL_RETURN_IF_ERROR(flush_staged_inputs());
  unsigned char* arena_arg = arena;
  const unsigned char* params_arg = params->base();
  rt::KernelArgs args = kernel_args(layout_dims);
  void* pointers[3] = {&arena_arg, &params_arg, &args};
  for (size_t i = 0; i < steps; ++i) {
    const Kernel& kernel = prog.kernels().kernels[static_cast<size_t>(chosen[i])];
    if (static_cast<size_t>(kernel.first_step) < i) continue;  // a later step of a kernel of several: it ran at the first
    Expected<rt::StepLaunch> launch = library.launch(prog.kernels(), chosen[i], layout_dims);
    if (!launch) return launch.status();
    GDL_RETURN_IF_ERROR(launch_step_eager(chosen[i], *launch, pointers, layout_dims, stream));
    if (kernel.first_step != kernel.last_step) stats.multi_step_launches += 1;
  }
  if (options.record_device_time) {
    GDL_CUDA_TRY(cudaEventRecord(run_end, stream), "recording the run end");
    timed_run_pending = true;
  }
  stats.last_eager_submit_us = submit.elapsed_us();
  eager_submit_us_total += stats.last_eager_submit_us;
  stats.eager_runs += 1;
  stats.mean_eager_submit_us = eager_submit_us_total / static_cast<double>(stats.eager_runs);
  if (steps > 0) count_run(layout_dims);
  after_run(layout_dims, false);
  return Status::Ok();
}

Expected<std::vector<NodeTime>> Session::Impl::profile_nodes(int repeats) {
  GDL_RETURN_IF_ERROR(ready_to_run());
  if (above_bounds())
    return Status::FailedPrecondition("profile_nodes: a run-time dim is above its upper bound; profile inside the bounds");
  repeats = std::max(repeats, 1);
  const size_t n = prog.plan().steps.size();
  const std::vector<int64_t> layout_dims = layout(dims);
  std::vector<rt::StepLaunch> launches;
  std::vector<int> kernels;  // every step its own kernel
  for (size_t i = 0; i < n; ++i) {
    kernels.push_back(kernel_at(i, layout_dims, /*multi_step=*/false));  // a library matmul's call timed with its kernel
    Expected<rt::StepLaunch> launch = library.launch(prog.kernels(), kernels.back(), layout_dims);
    if (!launch) return launch.status();
    launches.push_back(*launch);
  }
  prepare_references(kernels, /*count=*/false);
  GDL_RETURN_IF_ERROR(flush_staged_inputs());
  EventSet events;
  events.events.assign(2 * n, nullptr);
  for (cudaEvent_t& e : events.events) GDL_CUDA_TRY(rt::event_create(&e), "creating an event");
  GDL_RETURN_IF_ERROR(write_valid_block());
  unsigned char* arena_arg = arena;
  const unsigned char* params_arg = params->base();
  rt::KernelArgs args = kernel_args(layout_dims);
  void* pointers[3] = {&arena_arg, &params_arg, &args};
  std::vector<std::vector<double>> submit(n), device(n);
  for (int r = 0; r < repeats; ++r) {
    for (size_t i = 0; i < n; ++i) {
      GDL_CUDA_TRY(cudaEventRecord(events.events[2 * i], stream), "recording an event");
      Stopwatch launch_time;
      GDL_RETURN_IF_ERROR(launch_step_eager(kernels[i], launches[i], pointers, layout_dims, stream));
      submit[i].push_back(launch_time.elapsed_us());
      GDL_CUDA_TRY(cudaEventRecord(events.events[2 * i + 1], stream), "recording an event");
    }
    GDL_CUDA_TRY(cudaStreamSynchronize(stream), "waiting for the profiled launches");
    for (size_t i = 0; i < n; ++i) {
      float ms = 0;
      GDL_CUDA_TRY(cudaEventElapsedTime(&ms, events.events[2 * i], events.events[2 * i + 1]), "reading an event");
      device[i].push_back(ms * 1000.0);
    }
  }
  after_run(layout_dims, false);
  std::vector<NodeTime> out;
  for (size_t i = 0; i < n; ++i) {
    const Kernel& k = prog.kernels().kernels[static_cast<size_t>(kernels[i])];
    const std::string what = k.is_collective() ? std::string("nccl ") + ir::op_name(prog.graph().node(k.collective).op) : k.symbol;
    out.push_back({what, median(submit[i]), median(device[i]), prog.plan().steps[i].deps});
  }
  return out;
}

Expected<GraphUpdateCosts> Session::Impl::measure_graph_update_costs(int repeats) {
  if (above_bounds())
    return Status::FailedPrecondition("measure_graph_update_costs: a run-time dim is above its upper bound");
  repeats = std::max(repeats, 1);
  GraphUpdateCosts costs;
  costs.nodes = prog.plan().steps.size();
  if (costs.nodes == 0) return costs;
  Expected<GraphInstance*> found = graph_for(bucket_key(dims), layout(dims));
  if (!found) return found.status();
  GraphInstance& g = **found;
  GDL_CUDA_TRY(cudaStreamSynchronize(stream), "waiting for the session stream");

  // 1. Each node given what it already holds.
  rt::KernelArgs args = kernel_args(g.applied_layout);
  std::memcpy(args.scalars, g.applied_scalars.data(), sizeof args.scalars);
  std::vector<std::pair<cudaGraphNode_t, rt::StepLaunch>> launches;  // per node: a multi-step kernel's steps share one
  for (size_t i = 0; i < costs.nodes; ++i) {
    const int k = g.step_kernel[i];
    const Kernel& kernel = prog.kernels().kernels[static_cast<size_t>(k)];
    if (static_cast<size_t>(kernel.first_step) < i || kernel.is_collective()) continue;  // no kernel node of its own
    Expected<rt::StepLaunch> launch = library.launch(prog.kernels(), k, g.applied_layout);
    if (!launch) return launch.status();
    launches.emplace_back(g.nodes[i], *launch);
  }
  costs.nodes = launches.size();
  if (costs.nodes == 0) return costs;  // every node is a collective's
  Stopwatch set_params_time;
  for (int r = 0; r < repeats; ++r)
    for (const auto& [graph_node, launch] : launches) {
      NodeParams node(arena, params->base(), args, launch);
      GDL_CUDA_TRY(cudaGraphExecKernelNodeSetParams(g.exec, graph_node, &node.cuda), "updating a graph node");
    }
  costs.set_params_us_per_node = set_params_time.elapsed_us() / (static_cast<double>(repeats) * costs.nodes);

  // 2. The whole exec from the same graph: its nodes then hold what the graph was built with.
  Stopwatch update_time;
  for (int r = 0; r < repeats; ++r) {
    cudaGraphExecUpdateResultInfo info{};
    GDL_CUDA_TRY(cudaGraphExecUpdate(g.exec, g.graph, &info), "updating the graph exec from its graph");
  }
  costs.exec_update_us = update_time.elapsed_us() / repeats;
  g.applied_layout = g.built_layout;
  g.applied_scalars = g.built_scalars;
  g.applied_inputs = g.built_inputs;
  for (GraphInstance::CopyNode& c : g.copy_nodes) c.state = -1;  // set again at the next run

  // 3. A second exec of the same graph, destroyed at once (not timed).
  double instantiate_total = 0;
  for (int r = 0; r < repeats; ++r) {
    cudaGraphExec_t copy = nullptr;
    Stopwatch instantiate_time;
    GDL_CUDA_TRY(rt::graph_instantiate(&copy, g.graph), "instantiating the graph again");
    instantiate_total += instantiate_time.elapsed_us();
    (void)cudaGraphExecDestroy(copy);
  }
  costs.reinstantiate_us = instantiate_total / repeats;
  return costs;
}

}  // namespace gdl
