// gdlrun: runs a gdl program (.gdl source or .gdlx artifact) once, with inputs
// from files or drawn from a seed, on the GPU when there is one and on the CPU
// reference interpreter otherwise, and prints or writes the outputs.
//
//   gdlrun PROGRAM [--dim B=8] [--seed N] [--input NAME=FILE] [--param NAME=FILE]
//                  [--set NAME=VALUE] [--scalar NAME=VALUE] [--out DIR]
//                  [--print N] [--cpu | --gpu] [--check]
//                  [--policy buckets|update] [--fallback] [--explain] [--stats]
//   (`gdlrun --help` lists them; gdlrun_args.cc parses them with CLI11)
//
// --policy serves every run-time dim by buckets or by node updates (default:
// each dim's policy(...)); --fallback lets a dim above its bound run on the
// eager fallback. --explain prints the timeline model's prediction of an
// eager and a graph run from measured per-node times beside the measured
// runs; --stats prints the session's stats (buckets, padding, node updates,
// re-instantiations, fallbacks, arena). Both need the GPU.
//
// A program over a process group of several ranks (`group NAME ranks(N);`)
// runs every rank at once, rank r on GPU r of this machine (or, with --cpu
// or without enough GPUs, on the CPU reference), rank r drawing the inputs
// not given from seed + r (given files and fills go to every rank), and
// prints each rank's outputs (--out writes NAME.rankR.bin).
//
// FILE holds the raw little-endian elements of the tensor's dtype (f16/bf16
// as their 16-bit patterns), row-major: a regular file of exactly the
// tensor's size, checked before it is read. --set fills a tensor with one
// value (e.g. a KV length). Numbers are read whole and strictly: --dim takes
// an integer inside the dim's bounds (above them only with --fallback),
// --set and --scalar a finite number (an integer for an i32 tensor or
// scalar). Every input and param is held as doubles, at most 2^28 elements
// each (the CPU reference's limit for every value). Exit codes: 0 ok, 1 bad
// program or inputs, 2 usage or internal error, 3 --check found a GPU
// result that differs from the CPU one.
#include <cmath>
#include <cstdio>
#include <fstream>
#include <map>
#include <optional>
#include <string>
#include <vector>

#include "artifact.h"
#include "frontend/source_loader.h"
#include "gdlrun_args.h"
#include "gpu_run.h"
#include "interp/interp.h"
#include "pipeline.h"

namespace {

constexpr int kExitOk = 0, kExitBadInput = 1, kExitUsage = 2, kExitMismatch = 3;

using gdl::gdlrun::Args;
using gdl::gdlrun::make_bindings;
using gdl::gdlrun::parse_args;

// The program's IR, from source (compiled to IR only) or from an artifact.
gdl::Expected<gdl::ir::Graph> load_graph(const std::string& path, const std::map<std::string, std::string>& consts) {
  if (path.size() > 5 && path.substr(path.size() - 5) == ".gdlx") {
    gdl::Expected<gdl::Artifact> artifact = gdl::read_artifact(path);
    if (!artifact.ok()) return artifact.status();
    if (!consts.empty()) return gdl::Status::InvalidArgument("-D sets consts of a .gdl source; " + path + " is compiled already");
    return std::move(artifact->plan.graph);
  }
  gdl::DiagnosticSink diags;
  std::string fatal;
  std::optional<gdl::SourceFile> file = gdl::load_source(path, diags, &fatal);
  if (!fatal.empty()) return gdl::Status::NotFound(fatal);
  if (!file) return gdl::Status::CompileError(diags.render(gdl::SourceFile(path, "")));
  gdl::PipelineOptions options;
  options.const_settings = consts;
  std::optional<gdl::ir::Graph> graph = gdl::compile_to_ir(*file, diags, options);
  std::fputs(diags.render(*file).c_str(), stderr);
  if (!graph) return gdl::Status::CompileError("the program was rejected (diagnostics above)");
  return std::move(*graph);
}

void print_output(const std::string& name, const gdl::HostTensor& t, int count) {
  std::string shape;
  for (size_t i = 0; i < t.shape.size(); ++i) shape += (i ? "," : "") + std::to_string(t.shape[i]);
  double lo = INFINITY, hi = -INFINITY, sum = 0;
  for (double v : t.data) { lo = std::min(lo, v); hi = std::max(hi, v); sum += v; }
  std::printf("%s : %s[%s]  min %.6g  max %.6g  mean %.6g\n  ", name.c_str(), gdl::dtype_name(t.dtype), shape.c_str(),
              lo, hi, t.data.empty() ? 0.0 : sum / static_cast<double>(t.data.size()));
  for (int i = 0; i < count && i < t.size(); ++i) std::printf("%.6g ", t.data[static_cast<size_t>(i)]);
  std::printf("%s\n", t.size() > count ? "..." : "");
}

bool write_output(const std::string& dir, const std::string& name, const gdl::HostTensor& t) {
  std::vector<unsigned char> bytes(t.data.size() * gdl::dtype_size(t.dtype));
  for (size_t i = 0; i < t.data.size(); ++i) gdl::store_element(bytes.data(), t.dtype, i, t.data[i]);
  std::ofstream out(dir + "/" + name + ".bin", std::ios::binary);
  out.write(reinterpret_cast<const char*>(bytes.data()), static_cast<std::streamsize>(bytes.size()));
  return static_cast<bool>(out);
}

double relative_error(const gdl::HostTensor& got, const gdl::HostTensor& want) {
  double num = 0, den = 0;
  for (size_t i = 0; i < want.data.size(); ++i) {
    double d = got.data[i] - want.data[i];
    num += d * d;
    den += want.data[i] * want.data[i];
  }
  if (std::isnan(num)) return INFINITY;
  return den > 0 ? std::sqrt(num / den) : std::sqrt(num);
}

// --check: each output of the GPU run against the CPU reference's, printed
// ("check NAME: ..." after `who`); false when one is outside its tolerance.
bool check_outputs(const std::map<std::string, gdl::HostTensor>& gpu, const std::map<std::string, gdl::HostTensor>& cpu,
                   const std::string& who) {
  bool ok = true;
  for (const auto& [name, ref] : cpu) {
    if (!gpu.count(name)) continue;  // a state's final value: the CPU reference returns it, the GPU run reads outputs
    const double err = relative_error(gpu.at(name), ref);
    double tol = ref.dtype == gdl::DType::kF32 ? 1e-4 : ref.dtype == gdl::DType::kBF16 ? 2e-2 : 5e-3;
    if (!gdl::is_float(ref.dtype)) tol = 0;
    std::printf("%scheck %s: relative error GPU vs CPU %.3g (tolerance %.1g) %s\n", who.c_str(), name.c_str(), err, tol,
                err <= tol ? "ok" : "MISMATCH");
    ok &= err <= tol;
  }
  return ok;
}

// A program over a process group of several ranks: every rank at once, on
// the GPUs of this machine (rank r on device r) or on the CPU reference
// (gdl::interpret_ranks), rank r drawing the inputs not given from seed +
// r; --check compares each rank's GPU outputs with the reference; its
// outputs printed, and written as NAME.rankR.bin.
int run_ranks(const Args& args, const gdl::ir::Graph& graph, const std::string& dims_text) {
  std::vector<gdl::Bindings> per_rank;
  for (int64_t r = 0; r < graph.group.ranks; ++r) {
    Args rank_args = args;
    rank_args.seed = args.seed + static_cast<uint64_t>(r);
    gdl::Expected<gdl::Bindings> b = make_bindings(graph, rank_args);
    if (!b.ok()) {
      std::fprintf(stderr, "gdlrun: error: rank %lld: %s\n", static_cast<long long>(r), b.status().message().c_str());
      return kExitBadInput;
    }
    per_rank.push_back(std::move(b).value());
  }
  // On GPUs (rank r on device r) unless --cpu; the CPU reference where that fails without --gpu, or for --check.
  std::optional<std::vector<std::map<std::string, gdl::HostTensor>>> on_gpu;
  if (args.device != Args::Device::kCpu) {
    std::string why_not;
    gdl::tools::GpuRunOptions gpu = args.gpu;
    gpu.consts = args.consts;
    on_gpu = gdl::tools::run_ranks_on_gpu(args.program, per_rank, &why_not, gpu);
    if (!on_gpu) {
      if (args.device == Args::Device::kGpu) {
        std::fprintf(stderr, "gdlrun: error: --gpu: %s\n", why_not.c_str());
        return kExitUsage;
      }
      std::fprintf(stderr, "gdlrun: no GPU run (%s); running every rank on the CPU reference interpreter\n",
                   why_not.c_str());
    }
  }
  gdl::Expected<std::vector<std::map<std::string, gdl::HostTensor>>> ranks = std::vector<std::map<std::string, gdl::HostTensor>>{};
  if (!on_gpu || args.check) {
    ranks = gdl::interpret_ranks(graph, per_rank);
    if (!ranks.ok()) {
      std::fprintf(stderr, "gdlrun: error: %s\n", ranks.status().message().c_str());
      return kExitBadInput;
    }
  }
  int status = kExitOk;
  if (on_gpu && args.check)
    for (size_t r = 0; r < ranks->size(); ++r)
      if (!check_outputs((*on_gpu)[r], (*ranks)[r], "rank " + std::to_string(r) + " ")) status = kExitMismatch;
  if (on_gpu) ranks = std::move(*on_gpu);
  const std::string where = on_gpu ? "GPUs 0-" + std::to_string(graph.group.ranks - 1) : "the CPU reference";
  std::printf("program %s on %s, %lld ranks of group %s,%s seeds %llu..%llu\n", graph.program_name.c_str(),
              where.c_str(), static_cast<long long>(graph.group.ranks), graph.group.name.c_str(),
              dims_text.empty() ? " no run-time dims," : dims_text.c_str(), static_cast<unsigned long long>(args.seed),
              static_cast<unsigned long long>(args.seed + static_cast<uint64_t>(graph.group.ranks) - 1));
  for (size_t r = 0; r < ranks->size(); ++r) {
    std::printf("rank %zu:\n", r);
    for (const gdl::ir::Output& o : graph.outputs) {
      const gdl::HostTensor& value = (*ranks)[r].at(o.name);
      print_output(o.name, value, args.print_count);
      const std::string file = o.name + ".rank" + std::to_string(r);
      if (!args.out_dir.empty() && !write_output(args.out_dir, file, value)) {
        std::fprintf(stderr, "gdlrun: error: cannot write %s/%s.bin\n", args.out_dir.c_str(), file.c_str());
        return kExitUsage;
      }
    }
  }
  if (args.gpu.explain || args.gpu.stats) std::fprintf(stderr, "gdlrun: --explain and --stats take programs of one rank\n");
  return status;
}

int run(const Args& args) {
  gdl::Expected<gdl::ir::Graph> graph = load_graph(args.program, args.consts);
  if (!graph.ok()) {
    // A source that cannot be read says so as "FILE: error: ...".
    const std::string& message = graph.status().message();
    const bool located = message.rfind(args.program + ": error: ", 0) == 0;
    std::fprintf(stderr, "gdlrun: %s%s\n", located ? "" : "error: ", message.c_str());
    return graph.status().code() == gdl::StatusCode::kCompileError ? kExitBadInput : kExitUsage;
  }
  gdl::Expected<gdl::Bindings> bindings = make_bindings(*graph, args);
  if (!bindings.ok()) {
    std::fprintf(stderr, "gdlrun: error: %s\n", bindings.status().message().c_str());
    return kExitBadInput;
  }
  std::string dims_text;
  for (size_t i = 0; i < graph->dims.size(); ++i)
    dims_text += " " + graph->dims[i].name + "=" + std::to_string(bindings->dims[i]);

  std::map<std::string, gdl::HostTensor> outputs;
  std::optional<std::map<std::string, gdl::HostTensor>> gpu_outputs;
  std::string gpu_report;  // --explain, --stats
  if (args.device != Args::Device::kCpu && graph->group.ranks <= 1) {
    std::string why_not;
    gdl::tools::GpuRunOptions gpu = args.gpu;
    gpu.consts = args.consts;
    gpu_outputs = gdl::tools::run_on_gpu(args.program, *bindings, &why_not, gpu, &gpu_report);
    if (!gpu_outputs) {
      if (args.device == Args::Device::kGpu) {
        std::fprintf(stderr, "gdlrun: error: --gpu: %s\n", why_not.c_str());
        return kExitUsage;
      }
      std::fprintf(stderr, "gdlrun: no GPU run (%s); running on the CPU reference interpreter\n", why_not.c_str());
    }
  }
  if (graph->group.ranks > 1) return run_ranks(args, *graph, dims_text);
  if (!gpu_outputs || args.check) {
    gdl::Expected<std::map<std::string, gdl::HostTensor>> cpu = gdl::interpret(*graph, *bindings);
    if (!cpu.ok()) {
      std::fprintf(stderr, "gdlrun: error: %s\n", cpu.status().message().c_str());
      return kExitBadInput;
    }
    outputs = std::move(cpu).value();
  }
  int status = kExitOk;
  if (gpu_outputs && args.check && !check_outputs(*gpu_outputs, outputs, "")) status = kExitMismatch;
  if (gpu_outputs) outputs = std::move(*gpu_outputs);
  std::printf("program %s on %s,%s seed %llu\n", graph->program_name.c_str(), gpu_outputs ? "GPU" : "CPU reference",
              dims_text.empty() ? " no run-time dims," : dims_text.c_str(), static_cast<unsigned long long>(args.seed));
  for (const gdl::ir::Output& o : graph->outputs) {
    print_output(o.name, outputs.at(o.name), args.print_count);
    if (!args.out_dir.empty() && !write_output(args.out_dir, o.name, outputs.at(o.name))) {
      std::fprintf(stderr, "gdlrun: error: cannot write %s/%s.bin\n", args.out_dir.c_str(), o.name.c_str());
      return kExitUsage;
    }
  }
  if ((args.gpu.explain || args.gpu.stats) && !gpu_outputs)
    std::fprintf(stderr, "gdlrun: --explain and --stats need the GPU run\n");
  std::fputs(gpu_report.c_str(), stdout);
  return status;
}

}  // namespace

int main(int argc, char** argv) {
  gdl::gdlrun::ParsedArgs parsed = parse_args(argc, argv);
  if (!parsed.args) return gdl::tools::report_command_line("gdlrun", parsed.outcome);
  const std::optional<Args>& args = parsed.args;
  try {
    return run(*args);
  } catch (const std::bad_alloc&) {
    std::fprintf(stderr, "gdlrun: error: out of host memory (the CPU reference holds every element as a double)\n");
    return kExitBadInput;
  } catch (const std::exception& e) {
    std::fprintf(stderr, "gdlrun: internal error: %s\n", e.what());
    return kExitUsage;
  }
}
