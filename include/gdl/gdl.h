// The gdl runtime: load (or compile) a program, create sessions on a GPU,
// bind inputs by copy, replay the program's CUDA graph, read outputs.
//
//   auto prog = gdl::Program::load("mlp.gdlx");                 // Expected<Program>
//   auto s = gdl::Session::create(*prog, {.device = 0});        // Expected<unique_ptr<Session>>
//   (*s)->set_param("W", w.data(), w.size() * 2);               // once; persists
//   (*s)->bind("x", x.data(), x.size() * 2, gdl::ElementType::kF16, {B, H});
//   (*s)->set_scalar("alpha", 0.5);                             // node-parameter update
//   (*s)->run();                                                // graph replay
//   (*s)->read("y", y.data(), y.size() * 2);                    // a copy, safe across runs
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
  std::vector<int64_t> buckets;
  bool update_policy = false;  // policy(update) rather than policy(buckets)
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

struct CompileSettings {
  std::string arch;       // CUBIN target, e.g. "sm_90"; "" = device 0's arch when a GPU is usable, else sm_90
  std::string cache_dir;  // "" = $GDL_CACHE_DIR or ~/.cache/gdl; "-" = no cache
};

// A compiled program: its declarations, plan and kernels. Cheap to copy (the
// contents are shared and immutable). Sessions keep what they need alive.
class Program {
 public:
  // Reads a .gdlx artifact. Missing file: NotFound. Wrong magic, version,
  // size or checksum, or tables that do not fit together: DataLoss.
  static Expected<Program> load(const std::string& path);
  // Compiles a .gdl file (parse, check, lower, optimise, plan, codegen, NVRTC).
  // A rejected program: CompileError with the rendered diagnostics.
  static Expected<Program> compile(const std::string& path, const CompileSettings& settings = {});
  // Writes the program as a .gdlx artifact.
  Status save(const std::string& path) const;

  const std::string& name() const;
  const std::vector<RuntimeDimInfo>& dims() const;
  const std::vector<TensorInfo>& inputs() const;   // declaration order
  const std::vector<TensorInfo>& params() const;
  const std::vector<TensorInfo>& outputs() const;
  const std::vector<ScalarInfo>& scalars() const;
  // nullptr when there is no such name.
  const TensorInfo* find_input(const std::string& name) const;
  const TensorInfo* find_param(const std::string& name) const;
  const TensorInfo* find_output(const std::string& name) const;
  const ScalarInfo* find_scalar(const std::string& name) const;

  size_t node_count() const;         // kernel nodes in the graph
  uint64_t arena_bytes() const;      // per-session device memory
  uint64_t params_bytes() const;     // shared by the sessions of this program on one device
  uint64_t naive_bytes() const;      // the arena if no buffer were reused
  uint64_t live_lower_bound() const; // most bytes live at one time
  const std::string& kernel_arch() const;  // the CUBIN's arch; PTX is always there too
  const std::string& cuda_source() const;

  // Runs the program on the CPU reference interpreter. `tensors` holds every
  // input and param by name; run-time dims are read from the inputs' shapes;
  // scalars not given take their defaults. Returns every output by name.
  Expected<std::map<std::string, TensorData>> run_reference(
      const std::map<std::string, TensorData>& tensors,
      const std::map<std::string, double>& scalars = {}) const;

  struct Impl;  // defined in runtime/src; opaque to users

 private:
  friend class Session;
  explicit Program(std::shared_ptr<const Impl> impl) : impl_(std::move(impl)) {}
  std::shared_ptr<const Impl> impl_;
};

enum class MemoryKind : uint8_t { kHost, kDevice };

struct SessionOptions {
  int device = 0;
  // Records CUDA events around each run so stats() can report device time.
  bool record_device_time = false;
};

struct SessionStats {
  size_t node_count = 0;
  uint64_t arena_bytes = 0;
  uint64_t params_bytes = 0;
  // One-time graph costs (host wall time), paid at the first run().
  double graph_build_us = 0;       // cudaGraphCreate + every cudaGraphAddKernelNode
  double instantiate_us = 0;       // cudaGraphInstantiate
  double upload_us = 0;            // cudaGraphUpload (enqueue; the upload itself is ordered on the stream)
  double library_load_us = 0;      // cudaLibraryLoadData + cudaLibraryGetKernel
  std::string module_image;        // what was loaded: "cubin sm_90", or "ptx (...)" when the arch differs
  // Host time of one run(): pending node updates + cudaGraphLaunch.
  double last_submit_us = 0, mean_submit_us = 0;
  // Host time of one run_eager(): one cudaLaunchKernel per node.
  double last_eager_submit_us = 0, mean_eager_submit_us = 0;
  // Device time of the last run() or run_eager() (record_device_time only; else -1).
  double last_device_us = -1;
  // Input copies done by bind(): count, bytes, and host time (staging copy + enqueue).
  uint64_t input_copies = 0;
  uint64_t input_copy_bytes = 0;
  double input_copy_us = 0;
  // Kernel node parameter updates (set_scalar, run-time dim changes).
  uint64_t node_updates = 0;
  double node_update_us = 0;
  uint64_t runs = 0;
  uint64_t eager_runs = 0;
};

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
  ~Session();
  Session(const Session&) = delete;
  Session& operator=(const Session&) = delete;

  // Copies a param's contents (`bytes` must equal its size) into the shared
  // params region; returns once the copy is done. Persists across runs and is
  // seen by every session of this program on this device. Do not call while
  // another session of the program is running.
  Status set_param(const std::string& name, const void* data, size_t bytes);

  // Copies an input's contents into its fixed device buffer. Name, dtype,
  // shape (constant axes equal, run-time dims inside their bounds) and
  // `bytes` (== element count * element size) are checked before anything is
  // copied; a failed bind changes nothing. A host source is copied into a
  // staging buffer before bind returns, so the caller may change or free it
  // at once. A device source is copied on the session's stream: it must stay
  // unchanged until the copy runs (work the caller puts on the legacy default
  // stream waits for it; on other streams, call synchronize() first).
  // The copy is ordered after every run already submitted, so it never
  // overwrites an input that an earlier run still reads. A bind that changes
  // a run-time dim's value sets it for the next run; every input that uses
  // that dim must then be bound with the same value before run().
  Status bind(const std::string& name, const void* data, size_t bytes, ElementType dtype,
              const std::vector<int64_t>& shape, MemoryKind kind = MemoryKind::kHost);

  // Sets a run-time dim that no input fixes (an input's bind sets it too).
  Status set_dim(const std::string& name, int64_t value);

  // Sets a run-time scalar for the following runs (an i32 scalar takes the
  // value truncated toward zero). Only the graph nodes that read it are updated.
  Status set_scalar(const std::string& name, double value);

  // Replays the graph on the session's stream and returns without waiting.
  // The graph is built, instantiated and uploaded at the first run() with the
  // run-time dims bound then; later dim changes update the launch dims of the
  // nodes that depend on them. FailedPrecondition if an input (or a param) was
  // not bound, or inputs disagree on a run-time dim.
  Status run();
  // Launches the same kernels one by one, without a graph.
  Status run_eager();

  // Waits for the last run, then copies output `name` into `host` (`bytes` must
  // equal the output's size for the current run-time dims). Output buffers are
  // overwritten by the next run: read() returns a copy that stays valid.
  Status read(const std::string& name, void* host, size_t bytes);
  // The concrete shape of an output (or input) for the current run-time dims.
  Expected<std::vector<int64_t>> shape_of(const std::string& name) const;
  // Waits for everything submitted on the session's stream.
  Status synchronize();

  // Stats are exact once the stream is idle; last_device_us waits for the last run.
  SessionStats stats() const;
  const Program& program() const;
  int device() const;

  // Test hook: fills every arena byte that does not belong to an input with
  // `byte` (ordered on the stream), so that elements a run fails to write show up.
  Status poison_arena_for_testing(uint8_t byte = 0xFF);

  struct Impl;

 private:
  explicit Session(std::unique_ptr<Impl> impl);
  std::unique_ptr<Impl> impl_;
};

}  // namespace gdl
