// Every program in examples/*.gdl, run by graph, by eager launch and by the
// CPU reference, at the upper and the lower bound of its run-time dims.
#include <algorithm>
#include <cmath>
#include <filesystem>

#include "gpu_test_util.h"

using namespace gdl;
using namespace gdl::gpu_test;

// Weight matrices scaled like 1/sqrt(fan-in), as trained weights are, so that
// activations stay O(1) through the layers instead of growing with H.
static ValueRange example_range(const TensorInfo& t) {
  ValueRange r;
  bool float_type = t.dtype == ElementType::kF32 || t.dtype == ElementType::kF16 || t.dtype == ElementType::kBF16;
  if (float_type && t.shape.size() >= 2) {
    r.hi = 1.0 / std::sqrt(static_cast<double>(t.shape[t.shape.size() - 2].extent));
    r.lo = r.hi / 10;
  }
  if (t.dtype == ElementType::kI32 && t.shape.empty()) {  // a device scalar such as a KV length
    r.int_lo = 1;
    r.int_hi = 4096;
  }
  return r;
}

TEST_CASE("examples: graph, eager and CPU reference agree") {
  std::filesystem::path dir = std::filesystem::path(source_dir()) / "examples";
  std::vector<std::filesystem::path> files;
  for (const auto& entry : std::filesystem::directory_iterator(dir))
    if (entry.path().extension() == ".gdl") files.push_back(entry.path());
  std::sort(files.begin(), files.end());
  INFO("examples in " << dir.string());
  REQUIRE(!files.empty());
  for (const std::filesystem::path& file : files) {
    INFO("example " << file.filename().string());
    Expected<Program> program = jit::compile(file.string());
    INFO(program.status().message());
    REQUIRE(program.ok());
    std::vector<int64_t> hi = upper_dims(*program), lo;
    for (const RuntimeDimInfo& d : program->dims()) lo.push_back(d.lo);
    // Params get the scaled range, and so do device scalars; other inputs
    // (a KV cache too) keep the default.
    RangeFor range = [&](const TensorInfo& t) {
      bool device_scalar = t.dtype == ElementType::kI32 && t.shape.empty();
      ValueRange r = program->find_param(t.name) || device_scalar ? example_range(t) : ValueRange{};
      // Adam's second moments (states named v_*, train_lm.gdl) are never
      // negative in a run: sqrt reads them.
      if (program->find_state(t.name) && t.name.rfind("v_", 0) == 0) r.positive = true;
      return r;
    };
    CHECK(check_program(*program, seed_for(file.filename().string() + "/hi"), hi, range));
    if (lo != hi) CHECK(check_program(*program, seed_for(file.filename().string() + "/lo"), lo, range));
    MESSAGE(file.filename().string() << ": " << program->node_count() << " nodes, arena " << program->arena_bytes()
                                     << " B (naive " << program->naive_bytes() << ", lower bound "
                                     << program->live_lower_bound() << "), params " << program->params_bytes() << " B");
  }
}
