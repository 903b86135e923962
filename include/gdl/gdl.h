// The gdl runtime: load a compiled program (.gdlx), create sessions on a
// GPU, bind inputs by copy, replay the program's CUDA graph, read outputs.
// It links cudart alone (library gdl_runtime); compiling in the process is
// gdl/jit.h (library gdl_jit).
//
//   auto prog = gdl::Program::load("mlp.gdlx");                 // Expected<Program>
//   auto s = gdl::Session::create(*prog, {.device = 0});        // Expected<unique_ptr<Session>>
//   (*s)->set_param("W", w.data(), w.size() * 2);               // once; persists
//   (*s)->bind("x", x.data(), x.size() * 2, gdl::ElementType::kF16, {B, H});
//   (*s)->set_scalar("alpha", 0.5);                             // node-parameter update
//   (*s)->run();                                                // graph replay (B's bucket)
//   (*s)->read("y", y.data(), y.size() * 2);                    // a copy, safe across runs
//
// Run-time dims (docs/dynamic.md): a dim such as B in [1, 64] is served by
// buckets (one graph per capacity over one arena, rows past B padded and
// masked) or by node updates (one graph whose launch dims follow B). Either
// way read() returns exactly B rows and both give the same results.
//
// Every call reports failure as a Status (gdl/status.h); no exception leaves
// this API. This header includes no compiler internals.
#pragma once

#include <cstddef>
#include <cstdint>
#include <map>
#include <memory>
#include <span>
#include <string>
#include <vector>

#include "gdl/status.h"

// The CUDA runtime's handle types, declared here so that this header needs
// no CUDA header: cudaStream_t is CUstream_st*, cudaGraph_t is CUgraph_st*.
struct CUstream_st;
struct CUgraph_st;

namespace gdl {

// Element types of tensors. Same order and meaning as the language's
// f32, f16, bf16, i32, bool (bool is one byte, 0 or 1).
enum class ElementType : uint8_t { kF32, kF16, kBF16, kI32, kBool };
const char* element_type_name(ElementType t);  // "f32", ...
size_t element_size(ElementType t);            // bytes per element

// Converts between doubles and the raw bytes of an element type (f16 and
// bf16 round to nearest even, i32 truncates toward zero and saturates).
std::vector<uint8_t> encode_elements(ElementType t, std::span<const double> values);
std::vector<double> decode_elements(ElementType t, const void* data, size_t count);

// A bounded run-time dim: `dim B in [lo, hi] buckets(...) policy(...)`.
struct RuntimeDimInfo {
  std::string name;
  int64_t lo = 1, hi = 1;
  std::vector<int64_t> buckets;  // ascending, the last one is hi
  bool update_policy = false;    // policy(update) rather than policy(buckets)
  // Why padded buckets cannot serve this dim exactly (e.g. a reshape that
  // moves it across other axes, a gather from a table padded along it); such
  // a dim is always served by node updates. "" when buckets can serve it.
  std::string padding_blocker;
  // The smallest bucket that holds `value`; -1 when value is outside [lo, hi].
  int64_t bucket_for(int64_t value) const;
};

// One axis of a declared shape: a constant extent, or run-time dim `dim`
// (an index into Program::dims()).
struct AxisInfo {
  int64_t extent = 1;  // the constant extent; for a run-time dim, its upper bound
  int dim = -1;        // -1 for a constant axis
  bool is_runtime() const { return dim >= 0; }
};

// An input, param or output as declared.
struct TensorInfo {
  std::string name;
  ElementType dtype = ElementType::kF32;
  std::vector<AxisInfo> shape;
  size_t max_bytes = 0;     // bytes with every run-time dim at its upper bound
  std::string type_text;    // "f16[B, 1024]"
};

// A run-time scalar (rank 0, f32 or i32), changed by kernel node updates.
struct ScalarInfo {
  std::string name;
  ElementType dtype = ElementType::kF32;
  double default_value = 0;
};

// A host tensor in raw bytes; used by the CPU reference path.
struct TensorData {
  ElementType dtype = ElementType::kF32;
  std::vector<int64_t> shape;
  std::vector<uint8_t> bytes;  // row-major, element_size(dtype) bytes per element
};

enum class MemoryKind : uint8_t { kHost, kDevice };

// How a session serves a run-time dim (docs/dynamic.md).
//  kBuckets: one graph per bucket, all over the same arena; a run with value
//    v uses the smallest bucket >= v, values are laid out at the bucket's
//    capacity and rows past v are padding that never reaches a valid result.
//  kUpdate: one graph; its launch dims follow v through
//    cudaGraphExecKernelNodeSetParams on the nodes that depend on the dim.
//  kAsDeclared: the program's policy(...) for that dim (default buckets).
// A dim whose RuntimeDimInfo::padding_blocker is set is served by updates
// whatever is asked.
enum class DimPolicyChoice : uint8_t { kAsDeclared, kBuckets, kUpdate };

class Program;
class Checkpoint;
struct WeightMapping;
struct LoadReport;

// Compiles a program again with raised upper bounds on its run-time dims,
// for the eager fallback (SessionOptions::eager_fallback). The runtime
// cannot compile; gdl::jit::recompiler() (gdl/jit.h, library gdl_jit) gives
// one that can.
class Recompiler {
 public:
  virtual ~Recompiler() = default;
  // `program` with run-time dim d's upper bound at upper_bounds[d] (every
  // other declaration the same), compiled for `arch` ("sm_90").
  virtual Expected<Program> recompile(const Program& program, const std::vector<int64_t>& upper_bounds,
                                      const std::string& arch) const = 0;
};

// A program's process group (`group NAME ranks(N);`, docs/language.md
// "Collectives") on GPUs: each rank's sessions run on one GPU and reach the
// other ranks through this rank's communicator, an NCCL communicator. NCCL
// (libnccl.so.2, or the path in GDL_NCCL_LIBRARY) is loaded when the first
// communicator is made; without it these calls are Unavailable.
//
// One process per GPU: one process makes an id, hands it to the others
// (any way it likes: MPI, a file, a socket), and every rank joins with it.
//   CommunicatorId id = *gdl::Communicator::new_id();          // on rank 0, then sent
//   auto comm = gdl::Communicator::join(id, rank, 2, device);   // on every rank
//   auto s = gdl::Session::create(prog, {.device = device, .communicator = *comm});
// One process driving several GPUs: create_local, then one session per rank,
// made with Session::create_ranks (or each on its own thread). NCCL's rules
// hold: a communicator serves one session at a time (its calls are issued in
// one order), and a communicator must outlive every graph exported from a
// session that uses it.
struct CommunicatorId {
  char bytes[128] = {};  // NCCL's ncclUniqueId
};

class Communicator {
 public:
  // A new group's id.
  static Expected<CommunicatorId> new_id();
  // This process's rank `rank` of `ranks` on GPU `device`: every rank calls
  // it with the same id, and it returns once all of them have.
  static Expected<std::shared_ptr<Communicator>> join(const CommunicatorId& id, int rank, int ranks, int device);
  // One communicator per device of this process, rank i on devices[i] (each
  // GPU at most once).
  static Expected<std::vector<std::shared_ptr<Communicator>>> create_local(const std::vector<int>& devices);
  ~Communicator();
  Communicator(const Communicator&) = delete;
  Communicator& operator=(const Communicator&) = delete;

  int rank() const;
  int ranks() const;
  int device() const;
  // Ends this rank's membership at once: NCCL calls on it in flight stop,
  // and later runs of sessions using it fail (FailedPrecondition). For a
  // rank whose peers will not reach the collective it waits in (another
  // rank failed); the group needs new communicators after it. Callable from
  // any thread; a graph exported from such a session must not be launched
  // after it.
  void abort();

  struct Impl;
  Impl& internals() { return *impl_; }

 private:
  explicit Communicator(std::unique_ptr<Impl> impl);
  std::unique_ptr<Impl> impl_;
};

struct SessionOptions {
  int device = 0;
  // Records CUDA events around each run so stats() can report device time.
  bool record_device_time = false;
  // The policy of every run-time dim, and overrides for single dims by name
  // (an unknown name: Session::create fails with NotFound).
  DimPolicyChoice dim_policy = DimPolicyChoice::kAsDeclared;
  std::map<std::string, DimPolicyChoice> dim_policies = {};
  // Build, instantiate and upload the graph of every bucket (every
  // combination of the buckets of bucket-served dims) in Session::create;
  // otherwise each is built at its first run.
  bool build_buckets_at_create = false;
  // A run-time dim above its upper bound: with a recompiler here
  // (gdl::jit::recompiler()), bind accepts it and the run goes to the eager
  // path instead (the program re-planned and compiled with the bound raised
  // to the next power of two >= the value, cached per bound; a temporary
  // arena; kernels launched one by one; outputs copied out; counted in
  // SessionStats::fallback_runs). Without one (nullptr), such a bind is
  // OutOfRange. A value below the lower bound is always OutOfRange (slices
  // rely on it).
  std::shared_ptr<const Recompiler> eager_fallback = nullptr;
  // Graph edges between kernels are programmatic (programmatic dependent
  // launch, sm_90): a kernel launches while the kernels before it finish,
  // waits for them inside (griddepcontrol.wait) and meanwhile pulls its
  // weights into L2. Off: ordinary edges, each kernel launched after the
  // previous one completed. The results are the same either way.
  bool overlap_launches = true;
  // Kernels that compute several plan steps in one launch (gdlc
  // --emit=plan lists them) run in place of the steps' own kernels where
  // the rows allow and the device holds all of their blocks at once. Off:
  // every step's own kernel runs. The results agree to rounding.
  bool multi_step_kernels = true;
  // The stream (a cudaStream_t on `device`) that every call of the session
  // is ordered on: copies, runs, state calls. The caller's stream lets a
  // session's work follow and precede the caller's own work, and several
  // sessions share one stream without host syncs (one session's output_view
  // bound as the next one's input). The session never destroys it; it must
  // outlive the session. nullptr: the session creates a stream of its own.
  CUstream_st* stream = nullptr;
  // This rank's communicator (on `device`, of as many ranks as the
  // program's group), for a program with a process group of more than one
  // rank; a group of one rank makes its own when none is given, and a
  // program without a group ignores it. Session::create compares the
  // collectives of every rank's program over it (their order, ops, dtypes
  // and shapes) and fails with FailedPrecondition on every rank where they
  // differ, rather than letting the runs wait for each other; it returns
  // once every rank has created its session. Every rank must then run the
  // same sequence of runs with the same run-time dims.
  std::shared_ptr<Communicator> communicator = nullptr;
};

// How Session::create would serve each run-time dim of a program.
struct DimServing {
  std::string name;
  bool update = false;        // node updates (else buckets)
  std::string why_update;     // set when buckets were asked for but cannot serve the dim
  std::vector<int64_t> buckets;
};

// A compiled program: its declarations, plan and kernels. Cheap to copy (the
// contents are shared and immutable). Sessions keep what they need alive.
class Program {
 public:
  // Reads a .gdlx artifact. Missing file: NotFound. Wrong magic, version,
  // size or checksum, or tables that do not fit together: DataLoss.
  static Expected<Program> load(const std::string& path);
  // The same from an artifact's bytes in memory (one embedded in the host
  // binary by gdl_add_program(... EMBED), docs/packaging.md); the bytes are
  // copied, the caller's may go once it returns. Corrupt bytes: DataLoss.
  static Expected<Program> load_memory(const void* data, size_t bytes);
  // Writes the program as a .gdlx artifact.
  Status save(const std::string& path) const;

  const std::string& name() const;
  const std::vector<RuntimeDimInfo>& dims() const;
  const std::vector<TensorInfo>& inputs() const;   // declaration order
  const std::vector<TensorInfo>& params() const;
  const std::vector<TensorInfo>& outputs() const;
  const std::vector<ScalarInfo>& scalars() const;
  const std::vector<TensorInfo>& states() const;   // session-owned tensors kept from run to run
  // The ranks of its process group (`group NAME ranks(N);`): N, or 0 for a
  // program without one (SessionOptions::communicator).
  int group_ranks() const;
  // nullptr when there is no such name.
  const TensorInfo* find_input(const std::string& name) const;
  const TensorInfo* find_param(const std::string& name) const;
  const TensorInfo* find_output(const std::string& name) const;
  const ScalarInfo* find_scalar(const std::string& name) const;
  const TensorInfo* find_state(const std::string& name) const;

  size_t node_count() const;         // kernel nodes in the graph (plan steps; a multi-step kernel runs several as one)
  uint64_t arena_bytes() const;      // per-session device memory
  uint64_t params_bytes() const;     // shared by the sessions of this program on one device
  uint64_t naive_bytes() const;      // the arena if no buffer were reused
  uint64_t live_lower_bound() const; // most bytes live at one time
  const std::string& kernel_arch() const;  // the CUBIN's arch; PTX is always there too
  const std::string& cuda_source() const;

  // The policy each run-time dim gets in a session created with `options`
  // (NotFound for an unknown dim name in options.dim_policies).
  Expected<std::vector<DimServing>> dim_serving(const SessionOptions& options = {}) const;

  // gdl's own libraries (gdl_jit, the session) reach the program through
  // this; Impl is opaque to users.
  struct Impl;
  const Impl& internals() const { return *impl_; }

 private:
  friend class Session;
  explicit Program(std::shared_ptr<const Impl> impl) : impl_(std::move(impl)) {}
  std::shared_ptr<const Impl> impl_;
};


struct SessionStats {
  size_t node_count = 0;
  uint64_t arena_bytes = 0;
  uint64_t params_bytes = 0;
  // One-time graph costs (host wall time), summed over every graph built
  // (one per bucket; each paid at its first run or in Session::create).
  double graph_build_us = 0;       // cudaGraphCreate + every cudaGraphAddKernelNode
  double instantiate_us = 0;       // cudaGraphInstantiate
  double upload_us = 0;            // cudaGraphUpload (enqueue; the upload itself is ordered on the stream)
  uint64_t graphs_built = 0;
  // Instantiations of a graph that was built before. Buckets and node
  // updates never re-instantiate; one path does: under the update policy, a
  // run whose rows move a multi-step kernel in or out of use rebuilds its
  // graph (docs/dynamic.md).
  uint64_t reinstantiations = 0;
  double library_load_us = 0;      // cudaLibraryLoadData + cudaLibraryGetKernel
  std::string module_image;        // what was loaded: "cubin sm_90", or "ptx (...)" when the arch differs
  // Host time of one run(): pending node updates + cudaGraphLaunch.
  double last_submit_us = 0, mean_submit_us = 0;
  // Host time of one run_eager(): one cudaLaunchKernel per node.
  double last_eager_submit_us = 0, mean_eager_submit_us = 0;
  // Device time of the last run() or run_eager() (record_device_time only;
  // else -1), from the input copies that bind left to the run (see bind) to
  // the last kernel's end.
  double last_device_us = -1;
  // Input copies bound: count, bytes, and bind's host time (staging copy, plus
  // the enqueue where bind copies itself).
  uint64_t input_copies = 0;
  // bind_reference calls, and the inputs bound so that runs copied them from
  // the caller's memory instead of reading them in place (one per input
  // per run: an address not 256-byte aligned, an input a run writes into,
  // or a step reading it through a cuBLASLt call).
  uint64_t reference_binds = 0;
  uint64_t reference_copies = 0;
  uint64_t input_copy_bytes = 0;
  double input_copy_us = 0;
  // Kernel node parameter updates (set_scalar, run-time dim changes).
  uint64_t node_updates = 0;
  double node_update_us = 0;
  uint64_t runs = 0;
  uint64_t eager_runs = 0;
  // Kernels of several steps launched (graph and eager runs), and the
  // kernels this device cannot run, with why (a cooperative kernel whose
  // blocks do not all fit at once, a kernel for a band of rows that needs
  // more shared memory than the device has): the steps' other kernels serve
  // them. A step's last kernel, which serves every row count, must run:
  // otherwise Session::create is FailedPrecondition.
  uint64_t multi_step_launches = 0;
  std::vector<std::string> kernel_refusals;
  // Set when the program's kernel choices aim at a GPU with another count of
  // multiprocessors than this one (gdlc --multiprocessors, gdl::jit::compile
  // takes device 0's): correct, but the splits may not fill this GPU.
  std::string target_note;

  // Run-time dims: how each is served, and rows computed against rows valid
  // over every run (graph and eager, not fallbacks). rows_computed -
  // rows_valid is the padding waste of buckets (zero under updates).
  struct DimStats {
    std::string name;
    bool update = false;
    std::string why_update;  // buckets were asked for but cannot serve this dim
    uint64_t rows_computed = 0, rows_valid = 0;
  };
  std::vector<DimStats> dims;
  // One entry per bucket combination used or built ("B=8"; dims served by
  // updates are not part of it), in order of first use.
  struct BucketStats {
    std::string label;
    std::vector<int64_t> capacities;  // per run-time dim; -1 for dims served by updates
    uint64_t hits = 0;                // runs (graph and eager) that used it
    bool built = false;               // its graph is instantiated
    double build_us = 0, instantiate_us = 0, upload_us = 0;
  };
  std::vector<BucketStats> buckets;
  // Writes of the valid-dims block (only when a dim's value changed).
  uint64_t valid_block_writes = 0;
  // Runs on the eager fallback path (a dim above its upper bound; run() and
  // run_eager() alike, counted here only, not in runs / eager_runs), and
  // their total host time (re-plan and compile when not cached, copies,
  // launches, the wait).
  uint64_t fallback_runs = 0;
  double fallback_us = 0;
};

// A readable multi-line report of the stats (gdlrun --stats, the examples).
std::string format_stats(const SessionStats& stats);

// One execution context on one GPU: its own stream, its own arena (inputs,
// outputs, intermediates at fixed addresses), the program's graph, and a
// params region shared with every other session of the same Program on the
// same device. A Session is used by one thread at a time; different sessions
// may run concurrently without affecting each other (except that set_param
// changes the shared params).
class Session {
 public:
  // No usable GPU or driver: Unavailable. A bad device index: InvalidArgument.
  static Expected<std::unique_ptr<Session>> create(const Program& program, const SessionOptions& options = {});
  // The sessions of every rank of a group in one process (options[r] with
  // rank r's communicator and device, Communicator::create_local), made
  // together: one thread cannot make them one by one, since each waits for
  // the others' collectives. Either every session is made or none. Their
  // graph runs (run()) may then be driven from one thread, every rank's run
  // launched before any is read; eager runs (run_eager) wait inside NCCL for
  // the other ranks, so each rank's needs a thread of its own.
  static Expected<std::vector<std::unique_ptr<Session>>> create_ranks(const Program& program,
                                                                      const std::vector<SessionOptions>& options);
  ~Session();
  Session(const Session&) = delete;
  Session& operator=(const Session&) = delete;

  // Copies a param's contents (`bytes` must equal its size) into the shared
  // params region; returns once the copy is done. Persists across runs and is
  // seen by every session of this program on this device. Do not call while
  // another session of the program is running.
  Status set_param(const std::string& name, const void* data, size_t bytes);

  // Fills the params `mapping` names from a safetensors checkpoint
  // (gdl/weights.h): every rule is checked (the param exists, each source
  // tensor is there with the param's dtype and fitting rows) before
  // anything is copied, so a mapping or checkpoint that does not fit
  // changes nothing. The copies go from the mapped files through pinned
  // staging; returns once they are done. A CUDA failure during the copies
  // (the device out of memory for staging, a lost device) leaves the params
  // it reached partly written: load again. Params no rule names are left for
  // set_param (report->params_unset). `path`: what Checkpoint::open takes.
  Status load_params(const Checkpoint& checkpoint, const WeightMapping& mapping, LoadReport* report = nullptr);
  Status load_params(const std::string& path, const WeightMapping& mapping, LoadReport* report = nullptr);

  // Copies an input's contents into its fixed device buffer. Name, dtype,
  // shape (constant axes equal, run-time dims inside their bounds) and
  // `bytes` (== element count * element size) are checked before anything is
  // copied; a failed bind changes nothing. A host source is copied into a
  // staging buffer before bind returns, so the caller may change or free it
  // at once; from there the next run's graph copies it into the device
  // buffer (a copy kernel node, so bind + run is one launch), or bind itself when
  // the input needs padding or follows an update-served dim; a bind waits
  // until no queued copy still reads that staging buffer. A device source
  // is read on the session's stream by the next run (the same copy node,
  // from the caller's memory: bind then costs only a pointer check), or by
  // a copy bind enqueues itself (padding, an update-served dim, a pointer
  // not 16-byte aligned or on another device). Either way it must stay
  // allocated and unchanged until the next run() or run_eager() is done:
  // work the caller puts on the legacy default stream after that run waits
  // for it; on other streams, call synchronize() first. A run copies what
  // was bound since the run before, so later runs without a bind keep the
  // contents. The copy is ordered after every run already submitted, so it never
  // overwrites an input that an earlier run still reads. A bind that changes
  // a run-time dim's value sets it for the next run; every input that uses
  // that dim must then be bound with the same value before run(). Under
  // buckets the rows go into the buffer laid out at the bucket's capacity (a
  // strided copy when the dim is not the leading axis). A dim outside its
  // bounds is OutOfRange; above the upper bound with eager_fallback the
  // contents are kept on the host for the fallback run instead.
  Status bind(const std::string& name, const void* data, size_t bytes, ElementType dtype,
              const std::vector<int64_t>& shape, MemoryKind kind = MemoryKind::kHost);

  // Binds an input to the caller's device memory by reference: no copy at
  // bind, and every later run reads the input from `data` itself (the
  // kernels' pointer to it is patched in the graph's nodes when it changes)
  // until the input is bound again. The caller promises that the memory
  // stays allocated, holds the input, and is not written while a run that
  // reads it may be running (work on the session's stream after run() is
  // ordered after it; other streams must wait for it). Writing it between
  // runs changes what the next run reads; a run that is done keeps its
  // results. Name, dtype, shape and bytes are checked as by bind. Where the
  // kernels cannot read it in place (an address not 256-byte aligned, an
  // input the program writes into, a step that reads it through a cuBLASLt
  // call at this run's rows) the run copies it from `data` first, with the
  // same lifetime rules (SessionStats::reference_copies counts these).
  // InvalidArgument for memory that is not device memory (as bind);
  // FailedPrecondition for device memory of another device, for rows that
  // run in a larger bucket (its padding would be read past the memory), and
  // where neither way works; OutOfRange above a dim's bound. An input the
  // program writes into stays bound from run to run (each run copies it).
  Status bind_reference(const std::string& name, const void* data, size_t bytes, ElementType dtype,
                        const std::vector<int64_t>& shape);

  // Sets a run-time dim that no input fixes (an input's bind sets it too).
  Status set_dim(const std::string& name, int64_t value);

  // Sets a run-time scalar for the following runs (an i32 scalar takes the
  // value truncated toward zero). Only the graph nodes that read it are
  // updated: at once in the graph of the last run, at their next use in the
  // other buckets' graphs. A run already submitted keeps the old value.
  Status set_scalar(const std::string& name, double value);

  // Replays a graph on the session's stream and returns without waiting:
  // under buckets the graph of the smallest bucket holding each dim's value
  // (built, instantiated and uploaded at its first use unless
  // build_buckets_at_create), under updates the one graph, whose nodes that
  // depend on a changed dim are updated first. The valid counts are copied to
  // the device first when they changed. FailedPrecondition if an input (or a
  // param) was not bound, or inputs disagree on a run-time dim. A dim above
  // its bound (eager_fallback) runs on the fallback path and waits.
  Status run();
  // Launches the same kernels one by one, without a graph.
  Status run_eager();

  // States (`state cache : f16[S, D];`): device tensors each session owns,
  // zero when the session is created, whose value a run reads at its start
  // and leaves for the next run (graph and eager alike). These calls are
  // ordered on the session's stream: after every run already submitted,
  // before every later one. `bytes` must equal the state's size.
  // set_state copies `data` in and returns once it is there (a device
  // source is read on the stream); read_state waits for the last run and
  // copies the state out; reset_state zeroes one state, or every state for
  // "". state_view gives the state's device memory, fixed for the
  // session's life: a caller's kernel may read or write it on the session's
  // stream between runs.
  Status set_state(const std::string& name, const void* data, size_t bytes, MemoryKind kind = MemoryKind::kHost);
  Status read_state(const std::string& name, void* host, size_t bytes);
  Status reset_state(const std::string& name = "");
  struct DeviceView {
    void* data = nullptr;
    size_t bytes = 0;
  };
  Expected<DeviceView> state_view(const std::string& name);
  // A program with rand/randn keeps its generator in the state `rng.state`
  // (i32[4]: seed, then the 64-bit count of counters drawn), which every
  // run advances on the device. seed_rng restarts the stream: the runs
  // after it draw the same numbers as the runs after any other seed_rng
  // with that seed (a new session starts at seed 0). NotFound when the
  // program draws no random numbers.
  Status seed_rng(uint64_t seed);

  // Waits for the last run, then copies output `name` into `host` (`bytes` must
  // equal the output's size for the last run's dims: only the valid rows,
  // never padding). Output buffers are overwritten by the next run: read()
  // returns a copy that stays valid.
  Status read(const std::string& name, void* host, size_t bytes);
  // The concrete shape of an output (or input) for the current run-time dims.
  Expected<std::vector<int64_t>> shape_of(const std::string& name) const;

  // An output where the last run leaves it on the device, for a caller that
  // consumes it on the GPU without a copy: `data` points into the session's
  // arena, `shape` is the last run's (only the valid rows), `strides` in
  // elements (row-major over the buffer's layout, which under buckets is the
  // bucket's capacity: a padded axis that is not the leading one makes the
  // rows strided). The contents are there once the last run is done: work
  // on the session's stream after it sees them; other streams must wait
  // (an event, or synchronize()). Valid until the next run(), run_eager()
  // or set_state on the session, which may overwrite it. FailedPrecondition
  // before any run, or when the last run took the eager fallback (its
  // outputs are on the host: read() them).
  struct TensorView {
    void* data = nullptr;
    ElementType dtype = ElementType::kF32;
    std::vector<int64_t> shape;    // elements per axis
    std::vector<int64_t> strides;  // elements between neighbours along each axis
    int device = 0;
  };
  Expected<TensorView> output_view(const std::string& name);

  // One run as a CUDA graph (a cudaGraph_t the caller owns and destroys with
  // cudaGraphDestroy), for the caller's own graph: cudaGraphAddChildGraphNode
  // clones it into theirs, between their nodes. It is the graph run() would
  // launch now: the current run-time dims and scalars, the kernels chosen
  // for them, and its own copy of the dims' values (later set_scalar,
  // set_dim and binds do not change it). Inputs: one bound by reference, or
  // bound from device memory since the last run, is read from that memory
  // at every launch (copied by the graph, or read in place), so the
  // caller's earlier nodes may write it there, and that memory must then
  // live as long as the graph may be launched; every other input is read
  // from the session's arena as it is when export_graph returns (pending
  // host binds are copied there first; export_graph waits for that). The
  // graph shares the session's arena: outputs land there (output_view
  // describes them until the session's next run), states are read and
  // written in place, and the session's later binds from the host change
  // what it reads. The session must outlive every graph made from it and
  // must not run while such a graph may be running; the inputs the graph
  // copies or a run overwrites must be bound again before the session's
  // next run (bind_reference ones stay bound).
  // FailedPrecondition where run() would refuse (an input or param not set,
  // a dim above its bound); for an input bound from device memory that a
  // graph cannot copy (rows padded to a bucket's, a dim served by node
  // updates, memory on another device or not 16-byte aligned); and for an
  // input a run overwrites that was bound from the host (a second launch
  // would read what the first left there).
  Expected<CUgraph_st*> export_graph();
  // Waits for everything submitted on the session's stream.
  Status synchronize();

  // Stats are exact once the stream is idle; last_device_us waits for the last run.
  SessionStats stats() const;
  const Program& program() const;
  int device() const;
  CUstream_st* stream() const;  // the session's stream (SessionOptions::stream or its own)

  // gdl's own measurement and test tools (gdl/profile.h, gdl/testing.h)
  // reach the session through this; Impl is opaque to users.
  struct Impl;
  Impl& internals() { return *impl_; }

 private:
  explicit Session(std::unique_ptr<Impl> impl);
  std::unique_ptr<Impl> impl_;
};

}  // namespace gdl
