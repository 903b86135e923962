// The eager fallback (SessionOptions::eager_fallback): a run whose run-time
// dims are above their upper bounds. The session's arena was planned for the
// bounds, so the run gets a plan, kernels and an arena of its own.
//
// Session::Impl::run_fallback:
// 1. The raised bounds: each dim above its bound goes to the next power of
//    two >= its value, the others keep theirs. One program per set of bounds,
//    cached in the session: the session's Recompiler (SessionOptions::
//    eager_fallback, gdl/jit.h) compiles the program with those bounds for
//    this device's arch; its kernels are loaded.
// 2. Params: the session's shared region when the new plan lays the params
//    out alike (a param whose shape holds a raised dim cannot run: its data
//    stops at the old bound); otherwise a temporary region filled by device
//    copies from the shared one.
// 3. A temporary arena: the valid-dims block (the values), then every input
//    packed at the run's dims: from the host copy kept by bind (an input
//    above the bound) or from the session's arena, where it lies in its
//    bucket's padded layout (device copies by strided_copy_pieces).
// 4. Every step's own kernel launched in plan order on the session stream,
//    gdl_args holding the values themselves (a packed layout, like the
//    update policy).
// 5. Wait, copy every output to the host (read() serves those copies), free
//    the temporaries. The time of all of it goes to stats.fallback_us.
#include <cstring>

#include "arena_scratch.h"
#include "cuda_util.h"
#include "session_impl.h"
#include "strided_copy.h"
#include "tensor_maps.h"

namespace gdl {

using rt::Stopwatch;

namespace {

int64_t next_power_of_two(int64_t v) {
  int64_t p = 1;
  while (p < v) p *= 2;
  return p;
}

std::vector<int64_t> extents(const TensorInfo& info, const std::vector<int64_t>& values) {
  std::vector<int64_t> out;
  for (const AxisInfo& a : info.shape) out.push_back(a.is_runtime() ? values[static_cast<size_t>(a.dim)] : a.extent);
  return out;
}

size_t count_of(const std::vector<int64_t>& shape) {
  size_t n = 1;
  for (int64_t e : shape) n *= static_cast<size_t>(e);
  return n;
}

// Device memory freed (after the stream is idle) when it goes.
struct Temporary {
  cudaStream_t stream;
  unsigned char* bytes = nullptr;
  explicit Temporary(cudaStream_t s) : stream(s) {}
  ~Temporary() {
    if (!bytes) return;
    (void)cudaStreamSynchronize(stream);
    (void)rt::device_free(bytes);
  }
};

}  // namespace

Status Session::Impl::run_fallback() {
  for (InputSlot& in : inputs)  // bound by reference: into the arena first, with the others
    if (in.reference) {
      in.copy_pending = true;
      in.device_source = in.reference;
    }
  GDL_RETURN_IF_ERROR(flush_staged_inputs());  // the fallback reads in-range inputs from the arena
  Stopwatch total;
  // 1. The program for the raised bounds.
  std::vector<int64_t> bounds;
  for (size_t d = 0; d < dims.size(); ++d)
    bounds.push_back(dims[d] > prog.dims[d].hi ? next_power_of_two(dims[d]) : prog.dims[d].hi);
  for (const TensorInfo& p : prog.params)
    for (const AxisInfo& a : p.shape)
      if (a.is_runtime() && bounds[static_cast<size_t>(a.dim)] != prog.dims[static_cast<size_t>(a.dim)].hi)
        return Status::FailedPrecondition("param '" + p.name + "' has run-time dim " + prog.dims[static_cast<size_t>(a.dim)].name +
                                          ": its data stops at the upper bound, so values above it cannot run");
  std::unique_ptr<FallbackProgram>& cached = fallbacks[bounds];
  if (!cached) {
    Expected<Program> recompiled = options.eager_fallback->recompile(program, bounds, device_arch);
    if (!recompiled) {
      fallbacks.erase(bounds);
      return Status(recompiled.status().code(), "eager fallback: " + recompiled.status().message());
    }
    auto made = std::make_unique<FallbackProgram>(std::move(recompiled).value());
    Status loaded = made->library.load(*made->impl, device);
    if (!loaded.ok()) {
      fallbacks.erase(bounds);
      return loaded;
    }
    cached = std::move(made);
  }
  const Program::Impl& fp = *cached->impl;

  // 2. Params.
  const unsigned char* params_base = params->base();
  Temporary temp_params(stream);
  bool same_params = fp.plan().params_bytes == prog.plan().params_bytes;
  for (size_t i = 0; i < prog.params.size() && same_params; ++i)
    same_params = fp.buffer_of(fp.param_values[i]).offset == prog.buffer_of(prog.param_values[i]).offset;
  if (!same_params) {
    GDL_CUDA_TRY(rt::device_malloc(reinterpret_cast<void**>(&temp_params.bytes), std::max<uint64_t>(fp.plan().params_bytes, 1)),
                 "allocating the fallback's params region");
    for (size_t i = 0; i < prog.params.size(); ++i) {
      const plan::Buffer &from = prog.buffer_of(prog.param_values[i]), &to = fp.buffer_of(fp.param_values[i]);
      if (from.region != plan::Region::kParams || to.region != plan::Region::kParams) continue;
      GDL_CUDA_TRY(cudaMemcpyAsync(temp_params.bytes + to.offset, params->base() + from.offset, std::min(from.bytes, to.bytes),
                                   cudaMemcpyDeviceToDevice, stream),
                   "copying param '" + prog.params[i].name + "' for the fallback");
    }
    params_base = temp_params.bytes;
  }

  // 3. The arena, the valid dims and the inputs.
  Temporary temp_arena(stream);
  GDL_CUDA_TRY(rt::device_malloc(reinterpret_cast<void**>(&temp_arena.bytes), rt::arena_allocation_bytes(fp.plan())),
               "allocating the fallback's arena (" + std::to_string(fp.plan().arena_bytes) + " bytes)");
  GDL_RETURN_IF_ERROR(rt::zero_arena(temp_arena.bytes, fp.plan(), stream));
  GDL_RETURN_IF_ERROR(rt::write_tensor_maps(fp, temp_arena.bytes, params_base, stream));
  if (!dims.empty()) {
    fallback_valid.fill(0);
    for (size_t d = 0; d < dims.size(); ++d) fallback_valid[d] = static_cast<int32_t>(dims[d]);
    GDL_CUDA_TRY(cudaMemcpyAsync(temp_arena.bytes + plan::kValidDimsOffset, fallback_valid.data(),
                                 sizeof(int32_t) * kMaxRuntimeDims, cudaMemcpyHostToDevice, stream),
                 "copying the valid dims of the fallback");
  }
  const std::vector<int64_t> main_layout = layout(dims);
  for (size_t i = 0; i < inputs.size(); ++i) {
    const plan::Buffer& to = fp.buffer_of(fp.input_values[i]);
    if (to.region == plan::Region::kNone) continue;
    const TensorInfo& info = prog.inputs[i];
    const std::vector<int64_t> shape = extents(info, dims);
    const size_t unit = element_size(info.dtype);
    unsigned char* target = temp_arena.bytes + to.offset;
    if (!inputs[i].fallback_bytes.empty()) {
      GDL_CUDA_TRY(cudaMemcpyAsync(target, inputs[i].fallback_bytes.data(), inputs[i].fallback_bytes.size(),
                                   cudaMemcpyHostToDevice, stream),
                   "copying input '" + info.name + "' for the fallback");
      continue;
    }
    const unsigned char* source = arena + prog.buffer_of(prog.input_values[i]).offset;
    for (const rt::CopyPiece& p : rt::strided_copy_pieces(shape, extents(info, main_layout), shape, unit))
      GDL_CUDA_TRY(cudaMemcpy2DAsync(target + p.dst, p.dst_pitch, source + p.src, p.src_pitch, p.width, p.height,
                                     cudaMemcpyDeviceToDevice, stream),
                   "copying input '" + info.name + "' for the fallback");
  }

  // 4. The kernels.
  unsigned char* arena_arg = temp_arena.bytes;
  const unsigned char* params_arg = params_base;
  rt::KernelArgs args = kernel_args(dims);
  for (size_t i = 0; i < fp.input_values.size() && i < static_cast<size_t>(kMaxInputPointers); ++i)
    args.inputs[i] = temp_arena.bytes + fp.buffer_of(fp.input_values[i]).offset;  // its kernels read its own arena
  rt::KernelOffsets offsets;
  void* pointers[4] = {&arena_arg, &params_arg, &args, &offsets};
  for (size_t i = 0; i < fp.plan().steps.size(); ++i) {
    const int k = cached->library.choose(fp.kernels(), i, dims, /*multi_step=*/false);
    Expected<rt::StepLaunch> launch = cached->library.launch(fp.kernels(), k, dims);
    if (!launch) return launch.status();
    offsets = launch->offsets;
    GDL_CUDA_TRY(cudaLaunchKernel(reinterpret_cast<const void*>(launch->kernel), launch->dims.grid, launch->dims.block,
                                  pointers, launch->dims.shared_bytes, stream),
                 "launching fallback step " + std::to_string(i) + " ('" + fp.kernels().kernels[static_cast<size_t>(k)].symbol + "')");
  }

  // 5. The outputs, copied out before the arena goes.
  fallback_outputs.assign(prog.outputs.size(), {});
  for (size_t o = 0; o < prog.outputs.size(); ++o) {
    const TensorInfo& info = prog.outputs[o];
    const plan::Buffer& from = fp.buffer_of(fp.output_values[o]);
    fallback_outputs[o].resize(count_of(extents(info, dims)) * element_size(info.dtype));
    const unsigned char* base = from.region == plan::Region::kParams ? params_base : temp_arena.bytes;
    GDL_CUDA_TRY(cudaMemcpyAsync(fallback_outputs[o].data(), base + plan::offset_at(from, dims), fallback_outputs[o].size(),
                                 cudaMemcpyDeviceToHost, stream),
                 "copying output '" + info.name + "' of the fallback");
  }
  GDL_CUDA_TRY(cudaStreamSynchronize(stream), "waiting for the fallback run");
  after_run(dims, true);
  stats.fallback_runs += 1;
  stats.fallback_us += total.elapsed_us();
  return Status::Ok();
}

}  // namespace gdl
