// A session's state: device memory, stream, kernels, the instantiated graph,
// the current run-time dims and scalars, and what has been bound.
#pragma once

#include <cuda_runtime_api.h>

#include <memory>
#include <vector>

#include "device_params.h"
#include "gdl/gdl.h"
#include "kernels.h"
#include "program_impl.h"

namespace gdl {

struct Session::Impl {
  Program program;
  std::shared_ptr<const Program::Impl> prog_ptr;
  const Program::Impl& prog;  // == *prog_ptr
  SessionOptions options;
  int device = 0;

  cudaStream_t stream = nullptr;
  unsigned char* arena = nullptr;
  std::shared_ptr<rt::DeviceParams> params;
  rt::KernelLibrary library;

  // What the kernels are given: the current run-time dims and scalars.
  std::vector<int64_t> dims;      // current value of each run-time dim
  rt::KernelArgs args;            // dims and scalars as the kernels see them
  std::vector<int64_t> last_run_dims;
  bool has_run = false;

  // Per input: a pinned staging buffer (host binds copy through it), the
  // event after its last upload (the staging buffer is reused only after it),
  // and the dims it was bound with (-1: not bound).
  struct InputSlot {
    void* staging = nullptr;
    cudaEvent_t uploaded = nullptr;
    bool upload_pending = false;
    bool bound = false;
    std::vector<int64_t> bound_dims;  // per run-time dim; -1 where the input does not use it
  };
  std::vector<InputSlot> inputs;

  // The graph, built at the first run() for the dims current then.
  cudaGraph_t graph = nullptr;
  cudaGraphExec_t exec = nullptr;
  std::vector<cudaGraphNode_t> nodes;          // one per plan step
  std::vector<rt::LaunchDims> node_launch;     // what each exec node was last given
  std::vector<int64_t> graph_dims;             // dims the exec's nodes are set for

  cudaEvent_t run_start = nullptr, run_end = nullptr;  // record_device_time only
  bool timed_run_pending = false;
  mutable SessionStats stats;
  double submit_us_total = 0, eager_submit_us_total = 0;

  Impl(Program p, std::shared_ptr<const Program::Impl> pi, const SessionOptions& o);
  ~Impl();

  Status init();
  Status bind(const std::string& name, const void* data, size_t bytes, ElementType dtype,
              const std::vector<int64_t>& shape, MemoryKind kind);
  Status set_param(const std::string& name, const void* data, size_t bytes);
  Status set_dim(const std::string& name, int64_t value);
  Status set_scalar(const std::string& name, double value);
  Status read(const std::string& name, void* host, size_t bytes);
  Status poison(uint8_t byte);

  // session_run.cc
  Status ready_to_run() const;       // inputs bound with the current dims, params set
  Status build_graph();              // create, add nodes, instantiate, upload
  Status update_node(size_t step);   // cudaGraphExecKernelNodeSetParams with current dims and args
  Status apply_dim_changes();        // update the dim-dependent nodes if dims changed
  Status run();
  Status run_eager();
  void after_run();
  Status make_current() const;
};

}  // namespace gdl
