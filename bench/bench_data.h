// The benchmark's data (bench/README.md): the manifest's variants, their
// tensor files, PyTorch's outputs and the float64 references, and the check
// of gdl's outputs against them.
#pragma once

#include <cstdint>
#include <filesystem>
#include <optional>
#include <string>
#include <vector>

#include "bench_json.h"
#include "gdl/gdl.h"

namespace gdl_bench {

using gdl::ElementType;
using gdl::Status;

// Values a tensor gets without a file (the manifest's "fill"): element i is
// a hash of (seed, i) mapped to 4096 steps of [-scale, scale), exact in f32
// for a power-of-two scale, then rounded to the dtype. bench/sweep.py
// computes the same on the GPU, so multi-GiB weights and caches need no file.
struct Fill {
  int64_t seed = 0;
  double scale = 1;
};
float fill_value(const Fill& f, uint64_t i);

struct TensorFile {
  std::string name;
  ElementType dtype = ElementType::kF32;
  std::vector<int64_t> shape;
  std::string file;
  std::optional<Fill> fill;  // instead of `file`
  size_t bytes() const {
    size_t n = gdl::element_size(dtype);
    for (int64_t e : shape) n *= static_cast<size_t>(e);
    return n;
  }
  size_t count() const { return bytes() / gdl::element_size(dtype); }
};

struct InputSet {
  std::vector<TensorFile> inputs;
  bool timed = true;
  std::string torch_out, ref64;  // relative to the data dir
};

struct Variant {
  std::string name, workload, program, gdl, dtype;
  std::vector<TensorFile> params;
  TensorFile output;
  std::vector<InputSet> sets;
  double tolerance = 0, bytes = 0, flops = 0;
};

// "f16" -> kF16; nullopt for a name that is not a dtype.
std::optional<ElementType> parse_dtype(const std::string& s);
// One tensor's entry of the manifest.
Status read_tensor_file(const Json& j, TensorFile& t);
// Every variant of DIR/manifest.json (format gdl-bench-data/1).
Status read_manifest(const std::string& path, std::vector<Variant>& out);
std::optional<std::vector<uint8_t>> read_bytes(const std::filesystem::path& path);
// A tensor's file, which must hold exactly its bytes, or its fill.
Status load_tensor(const std::filesystem::path& dir, const TensorFile& t, std::vector<uint8_t>& out);

// Torch's output (f32) or the float64 reference of one set; nullopt when absent.
std::optional<std::vector<double>> load_reference(const std::filesystem::path& dir, const std::string& file,
                                                  bool f64, size_t count);

// ||got - want|| / ||want||; +inf when `got` holds a NaN or an infinity.
double relative_error(const std::vector<double>& got, const std::vector<double>& want);


// The check of one variant: the largest relative errors over its sets.
struct CheckResult {
  int sets = 0, sets_without_reference = 0;
  double err_vs_torch = 0, err_vs_ref64 = 0, eager_err_vs_torch = 0, eager_err_vs_ref64 = 0;
  bool passed = true, eager_checked = false;
  std::string note;

  void add(const std::vector<double>& got, const std::optional<std::vector<double>>& torch,
           const std::optional<std::vector<double>>& ref64, double tolerance, bool eager) {
    eager_checked = eager_checked || eager;
    double& vs_torch = eager ? eager_err_vs_torch : err_vs_torch;
    double& vs_ref = eager ? eager_err_vs_ref64 : err_vs_ref64;
    if (torch) {
      double e = relative_error(got, *torch);
      vs_torch = std::max(vs_torch, e);
      if (!(e <= tolerance)) passed = false;
    }
    if (ref64) vs_ref = std::max(vs_ref, relative_error(got, *ref64));
  }
  std::string json(double tolerance) const {
    JsonObject o;
    o.flag("passed", passed && sets > 0).num("sets", sets).num("sets_without_reference", sets_without_reference);
    o.num("tolerance", tolerance).num("err_vs_torch", err_vs_torch).num("err_vs_ref64", err_vs_ref64);
    if (eager_checked) o.num("eager_err_vs_torch", eager_err_vs_torch).num("eager_err_vs_ref64", eager_err_vs_ref64);
    if (!note.empty()) o.str("note", note);
    return o.text();
  }
};

}  // namespace gdl_bench
