// gdl/jit.h: the compiler inside the host process.
//
// compile: the pipeline on a .gdl file (pipeline.h) for the arch of the GPU
// that will run it (device 0's when there is one), then the runtime's
// Program over the artifact.
// run_reference: the program's graph checked against every op's type rule
// (a loaded artifact had only its structure checked), the bindings made from
// the tensors (run-time dims from the inputs' shapes), then the CPU
// interpreter (interp.h); run_reference_ranks the same per rank, every rank
// on its own thread (interpret_ranks).
// recompiler: the eager fallback's compiler: the program's graph with its
// dims' upper bounds raised, through the planning and code passes.
#include "gdl/jit.h"

#include <cuda_runtime_api.h>

#include "interp/interp.h"
#include "internal_error.h"
#include "passes/ir_verify.h"
#include "pipeline.h"
#include "program_impl.h"

namespace gdl::jit {
namespace {

// The arch of device 0 ("sm_90") when a GPU is usable, else "".
std::string device_zero_arch() {
  int count = 0;
  if (cudaGetDeviceCount(&count) != cudaSuccess || count == 0) {
    (void)cudaGetLastError();
    return "";
  }
  int major = 0, minor = 0;
  if (cudaDeviceGetAttribute(&major, cudaDevAttrComputeCapabilityMajor, 0) != cudaSuccess ||
      cudaDeviceGetAttribute(&minor, cudaDevAttrComputeCapabilityMinor, 0) != cudaSuccess) {
    (void)cudaGetLastError();
    return "";
  }
  return "sm_" + std::to_string(major * 10 + minor);
}

// Device 0's multiprocessors and shared memory when a GPU is usable, else
// the default target (an H100/H200).
ir::Target device_zero_target() {
  ir::Target t;
  int count = 0, sms = 0, shared = 0;
  if (cudaGetDeviceCount(&count) != cudaSuccess || count == 0 ||
      cudaDeviceGetAttribute(&sms, cudaDevAttrMultiProcessorCount, 0) != cudaSuccess ||
      cudaDeviceGetAttribute(&shared, cudaDevAttrMaxSharedMemoryPerMultiprocessor, 0) != cudaSuccess) {
    (void)cudaGetLastError();
    return t;
  }
  t.multiprocessors = sms;
  t.shared_bytes_per_sm = shared - 1024;  // the 1 KiB the driver keeps per block
  return t;
}

// The compiler just made this artifact: an inconsistency is a bug in gdl.
Expected<Program> program_of(Artifact artifact, const std::string& what) {
  Expected<std::shared_ptr<Program::Impl>> impl = rt::make_program_impl(std::move(artifact));
  if (!impl) return Status::Internal(what + " made an inconsistent program: " + impl.status().message());
  return Program::Impl::wrap(std::move(impl).value());
}

class PipelineRecompiler final : public Recompiler {
 public:
  Expected<Program> recompile(const Program& program, const std::vector<int64_t>& upper_bounds,
                              const std::string& arch) const override {
    return guarded("the eager fallback's recompiler", [&]() -> Expected<Program> {
      ir::Graph g = program.internals().graph();
      if (upper_bounds.size() != g.dims.size())
        return Status::InvalidArgument("recompile: " + std::to_string(upper_bounds.size()) + " bounds for " +
                                       std::to_string(g.dims.size()) + " run-time dims");
      for (size_t d = 0; d < g.dims.size(); ++d) {
        if (upper_bounds[d] < g.dims[d].hi)
          return Status::InvalidArgument("recompile: dim " + g.dims[d].name + "'s bound can only be raised");
        g.dims[d].hi = upper_bounds[d];
        if (g.dims[d].buckets.back() != upper_bounds[d]) g.dims[d].buckets.push_back(upper_bounds[d]);
      }
      PipelineOptions options;
      options.codegen.arch = arch;
      Expected<Artifact> artifact = build_artifact(std::move(g), options);
      if (!artifact) return artifact.status();
      return program_of(std::move(artifact).value(), "recompiling " + program.name());
    });
  }
};

}  // namespace

Expected<Program> compile(const std::string& path, const CompileSettings& settings) {
  return guarded("gdl::jit::compile", [&]() -> Expected<Program> {
    PipelineOptions options;
    options.codegen.arch = settings.arch;
    if (options.codegen.arch.empty()) options.codegen.arch = device_zero_arch();
    if (options.codegen.arch.empty()) options.codegen.arch = "sm_90";
    options.codegen.cache_dir = settings.cache_dir;
    options.const_settings = settings.consts;
    options.target = device_zero_target();
    Expected<Artifact> artifact = compile_program_file(path, options);
    if (!artifact) return artifact.status();
    return program_of(std::move(artifact).value(), "compiling " + path);
  });
}

namespace {

// The interpreter's bindings of one run from public tensors and scalars.
Expected<Bindings> reference_bindings(const Program& program, const std::map<std::string, TensorData>& tensors,
                                      const std::map<std::string, double>& scalars) {
  const ir::Graph& g = program.internals().graph();
  Bindings b;
  // Run-time dims come from the inputs' shapes (first one wins; the
  // interpreter's validation reports any disagreement), else their upper bound.
  std::vector<int64_t> dims(g.dims.size(), -1);
  for (const auto& [name, data] : tensors) {
    const TensorInfo* info = program.find_input(name);
    if (!info) info = program.find_param(name);
    if (!info) info = program.find_state(name);
    if (!info) return Status::NotFound("'" + name + "' is not an input, param or state of program " + g.program_name);
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
    if (!program.find_scalar(name))
      return Status::NotFound("'" + name + "' is not a run-time scalar of program " + g.program_name);
    b.scalars[name] = value;
  }
  return b;
}

std::map<std::string, TensorData> public_tensors(const std::map<std::string, HostTensor>& values) {
  std::map<std::string, TensorData> result;
  for (const auto& [name, t] : values) {
    TensorData d;
    d.dtype = rt::to_public(t.dtype);
    d.shape = t.shape;
    d.bytes = encode_elements(d.dtype, t.data);
    result[name] = std::move(d);
  }
  return result;
}

Status check_types(const ir::Graph& g) {
  if (std::string problem = ir::verify(g); !problem.empty())
    return Status::DataLoss("program " + g.program_name + " breaks an op's type rule: " + problem);
  return Status::Ok();
}

}  // namespace

Expected<std::map<std::string, TensorData>> run_reference(const Program& program,
                                                          const std::map<std::string, TensorData>& tensors,
                                                          const std::map<std::string, double>& scalars) {
  return guarded("gdl::jit::run_reference", [&]() -> Expected<std::map<std::string, TensorData>> {
    const ir::Graph& g = program.internals().graph();
    if (Status types = check_types(g); !types.ok()) return types;
    Expected<Bindings> b = reference_bindings(program, tensors, scalars);
    if (!b) return b.status();
    Expected<std::map<std::string, HostTensor>> out = interpret(g, *b);
    if (!out) return out.status();
    return public_tensors(*out);
  });
}

Expected<std::vector<std::map<std::string, TensorData>>> run_reference_ranks(
    const Program& program, const std::vector<std::map<std::string, TensorData>>& tensors,
    const std::vector<std::map<std::string, double>>& scalars) {
  return guarded("gdl::jit::run_reference_ranks", [&]() -> Expected<std::vector<std::map<std::string, TensorData>>> {
    const ir::Graph& g = program.internals().graph();
    if (Status types = check_types(g); !types.ok()) return types;
    if (!scalars.empty() && scalars.size() != tensors.size())
      return Status::InvalidArgument("scalars for " + std::to_string(scalars.size()) + " ranks, tensors for " +
                                     std::to_string(tensors.size()));
    std::vector<Bindings> per_rank;
    for (size_t r = 0; r < tensors.size(); ++r) {
      Expected<Bindings> b = reference_bindings(program, tensors[r], scalars.empty() ? std::map<std::string, double>{} : scalars[r]);
      if (!b) return Status(b.status().code(), "rank " + std::to_string(r) + ": " + b.status().message());
      per_rank.push_back(std::move(b).value());
    }
    Expected<std::vector<std::map<std::string, HostTensor>>> out = interpret_ranks(g, std::move(per_rank));
    if (!out) return out.status();
    std::vector<std::map<std::string, TensorData>> result;
    for (const auto& rank : *out) result.push_back(public_tensors(rank));
    return result;
  });
}

std::shared_ptr<const Recompiler> recompiler() {
  static const std::shared_ptr<const Recompiler> kRecompiler = std::make_shared<PipelineRecompiler>();
  return kRecompiler;
}

}  // namespace gdl::jit
