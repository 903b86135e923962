// A session's state: device memory, stream, kernels, one instantiated graph
// per bucket, the current run-time dims and scalars, what has been bound,
// and the programs the eager fallback compiled.
#pragma once

#include <cuda_runtime_api.h>

#include <array>
#include <functional>
#include <map>
#include <optional>
#include <set>
#include <tuple>
#include <memory>
#include <vector>

#include "collectives.h"
#include "device_params.h"
#include "gdl/profile.h"
#include "gdl/gdl.h"
#include "kernels.h"
#include "library_matmul.h"
#include "nvtx_range.h"
#include "program_impl.h"

namespace gdl {

struct Session::Impl {
  Program program;
  std::shared_ptr<const Program::Impl> prog_ptr;
  const Program::Impl& prog;  // == *prog_ptr
  SessionOptions options;
  int device = 0;
  std::string device_arch;  // "sm_90"

  cudaStream_t stream = nullptr;
  unsigned char* arena = nullptr;
  std::shared_ptr<rt::DeviceParams> params;
  rt::KernelLibrary library;
  // cuBLASLt calls of the library matmul kernels (made at first use), and
  // the stream their graph nodes are captured on.
  mutable rt::LibraryMatmuls library_matmuls;
  cudaStream_t capture_stream = nullptr;
  // Collectives (collectives.h): this rank's communicator (a program with a
  // process group), the program's collective signature and every call its
  // collectives make (rt::collective_shapes), the device memory the ranks'
  // signatures are gathered in when the session starts, and the scratch,
  // sized for the largest call, that each call's first, uncaptured run
  // uses, with the calls (op, dtype, reduction, count) that had theirs.
  std::shared_ptr<Communicator> communicator;
  rt::CollectiveSignature collective_signature;
  std::vector<rt::CollectiveCall> collective_calls;
  void* signatures = nullptr;
  void* collective_warmup = nullptr;
  size_t collective_warmup_bytes = 0;
  std::set<std::tuple<int, int, int, size_t>> collectives_warmed;

  // Run-time dims: how each is served (update: node updates; else buckets),
  // and the current value of each (what the run is for).
  std::vector<bool> update_dim;
  uint32_t update_dims_mask = 0;  // the same as bits (dim d: bit d), beside step_dims
  std::vector<int64_t> dims;
  // The current run-time scalars as the kernels see them (gdl_args::scalars).
  float scalar_bits[kMaxScalars] = {};

  // Per plan step: the run-time dims its indexing, launch or kernel choice
  // uses, and the scalars it reads (bit masks): the nodes a change of either
  // must update.
  std::vector<uint32_t> step_dims, step_scalars;
  // Names of the profilers' ranges (nvtx_range.h), made once: "run PROGRAM",
  // "run_eager PROGRAM", per step "step N: OPS", per input "bind NAME".
  std::string nvtx_run, nvtx_run_eager;
  std::vector<std::string> nvtx_steps, nvtx_binds;
  bool poison_padding = false;  // gdl/testing.h poison_padding

  std::vector<int64_t> last_run_dims, last_run_layout;
  bool has_run = false;

  // Per input: a pinned staging buffer (host binds copy through it), the
  // event after its last upload (the staging buffer is reused only after it),
  // the dims it was bound with (-1 where it does not use one), and for a
  // bind above a dim's bound (eager fallback) its contents kept on the host.
  // A bind of an input whose layout no update-served dim changes, and that
  // needs no padding, copies nothing itself (`copy_pending`): a host bind
  // fills the staging buffer, a device bind (a 16-byte aligned pointer on
  // the session's device) only records the pointer, and the copy into the
  // arena is a kernel node of the next run's graph (the module's input copy
  // kernel, reading the staging buffer over the bus or the caller's device
  // memory), enabled for exactly those inputs, so bind + run is one launch;
  // runs without a new bind leave the node off. run_eager, the fallback and
  // profile_nodes copy such inputs themselves first (flush_staged_inputs).
  struct InputSlot {
    void* staging = nullptr;
    const void* staging_on_device = nullptr;  // the staging buffer's address in the device's view
    cudaEvent_t uploaded = nullptr;
    bool upload_pending = false;
    bool copy_pending = false;
    const void* device_source = nullptr;  // copy_pending from the caller's device memory; null: from staging
    size_t staged_bytes = 0;              // the bytes copy_pending moves
    void clear_pending() {                // copied (or superseded by a new bind)
      copy_pending = false;
      device_source = nullptr;
    }
    bool bound = false;
    // bind_reference: the caller's memory every run reads (in place through
    // gdl_args::inputs where `in_place`, else copied by the graph's copy node).
    const void* reference = nullptr;
    bool reference_in_place = false;
    // The last bind from device memory (bind with kDevice, or by reference),
    // and whether a graph's copy node can copy it (export_graph copies it at
    // every launch): unpadded, on this device, 16-byte aligned.
    const void* device_data = nullptr;
    bool device_copyable = false;
    std::vector<int64_t> bound_dims;
    std::vector<uint8_t> fallback_bytes;  // non-empty: the contents are here, not in the arena
  };
  std::vector<InputSlot> inputs;
  std::vector<void*> export_buffers;  // device memory the exported graphs read (valid counts), freed with the session
  // Where the kernels read each input this run (gdl_args::inputs), set by
  // prepare_references; per step, the input slots its kernels read.
  std::array<const unsigned char*, kMaxInputPointers> input_pointers{};
  std::array<const unsigned char*, kMaxInputPointers> arena_input_pointers{};  // every slot at its arena buffer
  std::vector<uint32_t> step_inputs;
  // Input i's pointer slot in gdl_args::inputs, or -1 (plan.h input_pointer_slots).
  int input_slot(size_t input) const { return prog.value_input_slot.at(static_cast<size_t>(prog.input_values[input])); }

  // The valid-dims block (plan::kValidDimsOffset): what was last copied
  // there (-1: nothing yet), and a ring of pinned staging slots, each reused
  // only after the copy from it has run.
  std::array<int32_t, kMaxRuntimeDims> valid_on_device;
  static constexpr int kValidRing = 8;
  int32_t* valid_staging = nullptr;  // kValidRing blocks of kMaxRuntimeDims ints
  std::array<cudaEvent_t, kValidRing> valid_copied{};
  std::array<bool, kValidRing> valid_copy_pending{};
  int valid_next = 0;

  // One instantiated graph per bucket combination, keyed by the capacity of
  // every bucket-served dim (-1 for dims served by updates). What its nodes
  // were last given for the dims and scalars is `applied_*` (a node holds
  // the current values of every dim and scalar it uses); `built_*` is what
  // the cudaGraph_t's nodes hold (cudaGraphExecUpdate restores that).
  struct GraphInstance {
    std::vector<int64_t> key;
    cudaGraph_t graph = nullptr;
    cudaGraphExec_t exec = nullptr;
    std::vector<cudaGraphNode_t> nodes;  // one per plan step (a multi-step kernel's steps share its node)
    std::vector<int> step_kernel;        // per plan step: the kernel that computes it (kernels_at)
    uint64_t multi_step_nodes = 0;       // kernels of several steps among the nodes
    // The input copy nodes: one kernel node per kMaxInputCopies inputs that
    // the graph copies (InputSlot). A node's params copy the inputs of
    // `params_mask` (bit e: entry e); `state` is the mask it runs this time,
    // 0 when it is disabled, -1 when not known (set again at the next run).
    struct CopyNode {
      cudaGraphNode_t node = nullptr;
      std::vector<size_t> inputs;        // entry e copies inputs[e]
      std::vector<unsigned long long> bytes;  // entry e's bytes at this graph's layout
      dim3 grid;
      int64_t params_mask = 0, state = -1;
      std::array<const void*, kMaxInputCopies> params_src{};  // entry e's source in the node's params
    };
    std::vector<CopyNode> copy_nodes;
    std::vector<int64_t> applied_layout, built_layout;
    std::array<float, kMaxScalars> applied_scalars{}, built_scalars{};
    // What its nodes' gdl_args::inputs hold, and what the cudaGraph_t's hold.
    std::array<const unsigned char*, kMaxInputPointers> applied_inputs{}, built_inputs{};
    size_t stats_index = 0;  // into stats.buckets
  };
  std::map<std::vector<int64_t>, std::unique_ptr<GraphInstance>> graphs;
  GraphInstance* last_graph = nullptr;  // the graph of the last run()
  std::map<std::vector<int64_t>, size_t> bucket_stats_index;
  std::map<std::vector<int64_t>, int> times_instantiated;

  // The eager fallback: one program per raised set of bounds, and the
  // outputs of a fallback run (read() serves them).
  struct FallbackProgram {
    explicit FallbackProgram(Program p) : program(std::move(p)), impl(&program.internals()) {}
    Program program;
    const Program::Impl* impl;
    rt::KernelLibrary library;
  };
  std::map<std::vector<int64_t>, std::unique_ptr<FallbackProgram>> fallbacks;
  bool last_run_fallback = false;
  std::vector<std::vector<uint8_t>> fallback_outputs;  // per output, packed at last_run_dims
  std::array<int32_t, kMaxRuntimeDims> fallback_valid{};  // host source of the fallback's valid block

  // Recorded by every graph after its input copy nodes: a staging buffer
  // that a launched graph copies from is rewritten only after it.
  cudaEvent_t graph_copies_done = nullptr;
  bool graph_copies_pending = false;

  cudaEvent_t run_start = nullptr, run_end = nullptr;  // record_device_time only
  bool timed_run_pending = false;
  mutable SessionStats stats;
  double submit_us_total = 0, eager_submit_us_total = 0;

  Impl(Program p, std::shared_ptr<const Program::Impl> pi, const SessionOptions& o);
  ~Impl();

  // session.cc
  // `join_group`: the program's collectives compared with every rank's
  // (Session::create_ranks does it for its sessions together instead).
  Status init(bool join_group = true);
  // The communicator of a program with a process group (SessionOptions::
  // communicator, or its own for a group of one rank) and the memory of the
  // signature exchange.
  Status use_communicator();
  // Every rank's collective signature gathered over the communicator (the
  // communicator's first call, uncaptured), then compared with this rank's
  // once the stream is done: FailedPrecondition naming the ranks whose
  // programs differ.
  Status enqueue_signature_exchange();
  Status compare_signatures();
  // The first call of a collective's size and type, uncaptured, on scratch
  // memory (NCCL connects what a size needs at its first call, which a
  // capture must not hold, and which waits for the other ranks); nothing
  // when that call had its first already. Session::create makes every one
  // of collective_calls.
  Status warm_up_collective(const rt::CollectiveCall& shape);
  Status bind(const std::string& name, const void* data, size_t bytes, ElementType dtype,
              const std::vector<int64_t>& shape, MemoryKind kind, bool by_reference = false);
  // Per input bound by reference: read in place this run unless a step that
  // reads it takes a cuBLASLt call at these kernels (the captured call holds
  // the arena address), else copied from the caller's memory by the copy
  // node; sets input_pointers for every input.
  // `count`: add the copies to SessionStats::reference_copies (once per run).
  void prepare_references(const std::vector<int>& step_kernel, bool count);
  bool references_bound() const {
    for (const InputSlot& in : inputs)
      if (in.reference) return true;
    return false;
  }
  // Set once a graph was exported: its launches write the valid counts too.
  bool graphs_exported = false;
  Status set_param(const std::string& name, const void* data, size_t bytes);
  Status set_dim(const std::string& name, int64_t value);
  Status set_scalar(const std::string& name, double value);
  Status read(const std::string& name, void* host, size_t bytes);
  Expected<TensorView> output_view(const std::string& name) const;
  Status poison(uint8_t byte);
  bool above_bounds() const;                 // some dim above its upper bound (eager fallback)
  int64_t layout_extent(size_t dim, int64_t value) const;  // the bucket's capacity, or the value
  std::vector<int64_t> layout(const std::vector<int64_t>& values) const;
  std::vector<int64_t> bucket_key(const std::vector<int64_t>& values) const;
  // Per plan step at these layout dims: the kernel that computes it
  // (KernelLibrary::choose). A kernel of several steps runs at its first
  // step; its later steps share that node.
  std::vector<int> kernels_at(const std::vector<int64_t>& layout_dims) const;
  // The kernel of one step at these layout dims (kernels of several steps
  // only with multi_step). A library matmul kernel
  // is taken only where no update-served dim moves its call (its rows, its
  // operands' places) and cuBLASLt has an algorithm for it.
  int kernel_at(size_t step, const std::vector<int64_t>& layout_dims, bool multi_step) const;
  // Kernel k's cuBLASLt product on `s` (a library matmul kernel), then the kernel itself.
  Status launch_step_eager(int k, const rt::StepLaunch& launch, void** args, const std::vector<int64_t>& layout_dims,
                           cudaStream_t s);
  // A collective step's NCCL call on `s`, over this rank's communicator.
  Status enqueue_collective_step(int k, const std::vector<int64_t>& layout_dims, cudaStream_t s);
  Status enqueue_collective_call(const rt::CollectiveCall& call, cudaStream_t s);
  Status launch_graph(cudaGraphExec_t exec);
  static Status aborted_communicator();
  // A child graph node holding kernel k's NCCL call, captured (after its
  // first call of that size, warm_up_collective).
  Expected<cudaGraphNode_t> add_collective_node(cudaGraph_t graph, int k, const std::vector<cudaGraphNode_t>& deps,
                                                const std::vector<int64_t>& layout_dims);
  // A child graph node after `after` holding what `enqueue` puts on a
  // stream, captured on the capture stream (a cuBLASLt or NCCL call): a
  // clone of the captured graph, or with `move_into_parent` (where the
  // driver can) the captured graph itself.
  Expected<cudaGraphNode_t> add_captured_node(cudaGraph_t graph, const std::vector<cudaGraphNode_t>& after,
                                              const std::string& what,
                                              const std::function<Status(cudaStream_t)>& enqueue,
                                              bool move_into_parent = false);
  // A graph node holding kernel k's cuBLASLt call, captured once (after an
  // uncaptured call on the session stream), after `deps`.
  Expected<cudaGraphNode_t> add_library_matmul_node(cudaGraph_t graph, int k, const std::vector<cudaGraphNode_t>& deps,
                                                    const std::vector<int64_t>& layout_dims);
  // "step 3 (kernel 'gdl_s3_matmul')" or "steps 2-9 (kernel 'gdl_chain0')".
  std::string kernel_name(int kernel) const;
  Status write_valid_block();                // copies the current dims when they changed
  bool copies_in_graph(size_t input) const;  // no update-served dim in its shape
  size_t input_layout_bytes(size_t input, const std::vector<int64_t>& layout_dims) const;
  // The kernel parameters of copy node `c` copying the entries of `mask`.
  rt::InputCopies copy_entries(const GraphInstance::CopyNode& c, int64_t mask) const;
  const void* copy_source(size_t input) const;  // where the graph's copy of the input reads (device view)
  Status wait_staging_free(InputSlot& slot);  // no queued copy still reads the slot's staging buffer
  Status flush_staged_inputs();              // copies the copy_pending inputs now (paths without the graph)
  Expected<plan::Buffer> state_buffer(const std::string& name, std::optional<size_t> bytes = std::nullopt) const;  // NotFound / InvalidArgument
  Status zero_states(const std::string& name);  // on the stream; "" = every state
  void stream_idle();                        // after a stream synchronize: no copy is pending
  rt::KernelArgs kernel_args(const std::vector<int64_t>& layout_dims) const;

  // session_run.cc
  Status ready_to_run() const;       // inputs bound with the current dims, params set
  Expected<GraphInstance*> graph_for(const std::vector<int64_t>& key, const std::vector<int64_t>& layout_dims);
  Status build_graph(GraphInstance& g, const std::vector<int64_t>& layout_dims);
  // The nodes of a graph at these layout dims into g.graph (build_graph's
  // first half). An exported graph (export_graph) gets copy nodes only for
  // the entries of `export_copies` (per input: copy it at every launch) and
  // no event after them; `export_valid` (programs with run-time dims) is
  // device memory holding the valid counts that a memcpy node writes first.
  Status add_graph_nodes(GraphInstance& g, const std::vector<int64_t>& layout_dims,
                         const std::vector<bool>* export_copies = nullptr, const void* export_valid = nullptr);
  Expected<cudaGraph_t> export_graph();
  Status build_every_bucket();
  Status update_node(GraphInstance& g, size_t node_step, const std::vector<int64_t>& layout_dims);
  Status sync_nodes(GraphInstance& g, const std::vector<int64_t>& layout_dims);  // node updates for changed dims/scalars
  void count_run(const std::vector<int64_t>& layout_dims);
  size_t bucket_stats_for(const std::vector<int64_t>& key);
  Status run();
  Status run_eager();
  void after_run(const std::vector<int64_t>& layout_dims, bool fallback);
  Status make_current() const;
  Expected<std::vector<NodeTime>> profile_nodes(int repeats);
  Expected<GraphUpdateCosts> measure_graph_update_costs(int repeats);

  // session_fallback.cc
  Status run_fallback();
};

}  // namespace gdl
