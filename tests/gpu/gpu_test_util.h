// Helpers for the GPU tests: compile programs from text, make random
// non-zero tensors, run a session and compare with the CPU reference.
#pragma once

#include <doctest/doctest.h>

#include <cmath>
#include <cstdint>
#include <functional>
#include <map>
#include <memory>
#include <random>
#include <string>
#include <vector>

#include "gdl/gdl.h"
#include "gdl/jit.h"
#include "gdl/profile.h"
#include "gdl/testing.h"

namespace gdl::gpu_test {

// Where examples/ lives: $GDL_SOURCE_DIR (set by scripts/gpu-check.sh, since
// the GPU machine holds the repo at another path), else the build's source dir.
std::string source_dir();

// Writes `text` to a temporary .gdl file and compiles it; REQUIREs success.
Program compile_text(const std::string& text);
// Same, but returns the status (for cases the checker may reject).
Expected<Program> try_compile_text(const std::string& text);

// How random values are drawn for one tensor.
struct ValueRange {
  double lo = 0.1, hi = 1.0;   // magnitude for floats (sign random unless positive)
  bool positive = false;
  int64_t int_lo = -50, int_hi = 50;  // i32: uniform in [int_lo, int_hi], never 0 unless int_lo == 0
};
using RangeFor = std::function<ValueRange(const TensorInfo&)>;
// The i32 tensor `name` holds exactly `value`; every other tensor a default ValueRange.
RangeFor int_tensor_is(const std::string& name, int64_t value);

// A seed that differs per test and per call site.
uint64_t seed_for(const std::string& what);

// Random non-zero contents for a declared tensor with the given run-time dims.
TensorData random_tensor(const TensorInfo& info, const std::vector<int64_t>& dims, std::mt19937_64& rng,
                         const ValueRange& range);

// Every input, param and state of `program` filled at random (dims: value per run-time dim).
std::map<std::string, TensorData> random_bindings(const Program& program, const std::vector<int64_t>& dims,
                                                  std::mt19937_64& rng, const RangeFor& range = {});

// `poison_padding`: gdl::testing::poison_padding, so padding that leaks shows as NaN.
std::unique_ptr<Session> make_session(const Program& program, const SessionOptions& options = {},
                                      bool poison_padding = false);

// How many steps take cuBLASLt's product at these dims (a library matmul
// kernel first among their choices, its rows above its line), from the
// program's kernel table (defined in kernels_test.cc).
size_t library_steps_at(const Program& program, const std::vector<int64_t>& dims);

// set_param for params, set_state for states, bind for inputs (REQUIREs success).
void bind_all(Session& s, const std::map<std::string, TensorData>& tensors);
void bind_inputs(Session& s, const std::map<std::string, TensorData>& tensors);

// Poisons the arena, runs (graph or eager), reads every output.
std::map<std::string, TensorData> run_and_read(Session& s, bool eager);
std::map<std::string, TensorData> read_outputs(Session& s);
// The same, returning the first error instead of failing the test case.
Status try_bind_all(Session& s, const std::map<std::string, TensorData>& tensors);
Expected<std::map<std::string, TensorData>> try_run_and_read(Session& s, bool eager);
Expected<std::map<std::string, TensorData>> try_read_outputs(Session& s);

// What the process holds: device memory in use on the current device (all
// processes: cudaMemGetInfo), host resident memory (/proc/self/statm), and
// exactly what gdl holds of each (testing::live_allocations), which other
// processes on the GPU cannot disturb.
struct MemoryUse {
  int64_t device_bytes = 0, host_bytes = 0;
  testing::LiveAllocations gdl;
};
MemoryUse memory_use();

std::map<std::string, TensorData> reference(const Program& program, const std::map<std::string, TensorData>& tensors,
                                            const std::map<std::string, double>& scalars = {});

// ||got - want|| / max(||want||, norm_floor) (floats; NaN anywhere gives
// +inf), or the number of differing elements (i32, bool). A floor measures
// an output whose terms cancel to near zero against their own magnitude.
double relative_error(const TensorData& got, const TensorData& want, double norm_floor = 0);
double tolerance(ElementType t);  // f32 1e-5, f16 2e-3, bf16 1e-2, i32/bool 0

// CHECKs every output of `got` against `want` within the dtype's tolerance;
// returns true when all matched.
bool expect_match(const std::map<std::string, TensorData>& got, const std::map<std::string, TensorData>& want,
                  const std::string& what);

// The whole round trip for one program: random bindings, graph run, eager
// run and CPU reference, all compared. Returns true when everything matched.
// `adjust` may edit the random bindings before they are bound.
using Adjust = std::function<void(std::map<std::string, TensorData>&)>;
bool check_program(const Program& program, uint64_t seed, const std::vector<int64_t>& dims,
                   const RangeFor& range = {}, const std::map<std::string, double>& scalars = {},
                   const Adjust& adjust = {});

// Without asserting (threads, shrinking): "" when every output of `want` is
// in `got` within the dtype's tolerance, else the first that is not, its
// error and its largest difference. `unit_floor`: an output is measured
// against elements of magnitude 1 at least (relative_error's norm_floor).
std::string first_mismatch(const std::map<std::string, TensorData>& got, const std::map<std::string, TensorData>& want,
                           bool unit_floor = false);

std::vector<int64_t> upper_dims(const Program& program);

// Every `key` in `text` replaced by `value`; with_dtype: "{T}" by a dtype name.
inline std::string substitute(std::string text, const std::string& key, const std::string& value) {
  for (size_t at = text.find(key); at != std::string::npos; at = text.find(key, at + value.size()))
    text.replace(at, key.size(), value);
  return text;
}
inline std::string with_dtype(const std::string& text, const std::string& t) { return substitute(text, "{T}", t); }

// A state's value as the session holds it (REQUIREs success).
TensorData read_state(Session& s, const TensorInfo& info);

// Edits run `run`'s random inputs before they are bound (positions, tables).
using EditRun = std::function<void(int run, std::map<std::string, TensorData>& inputs)>;

// Runs `runs` times (odd runs eager) from random states, binding fresh
// inputs each time, and checks outputs and states against the CPU
// reference chained through the states. `batches`: the one run-time dim's
// value per run, in turn (empty: the program has none).
void check_runs(const Program& program, const std::string& what, int runs, const std::vector<int64_t>& batches,
                const RangeFor& range, const EditRun& edit = {});

// Set by main when GDL_GPU_TESTS_CPU_ONLY=1 and there is no GPU: check_program
// then only compiles and runs the CPU reference (a dry run of the ops and
// examples tests that checks their programs before GPU time is spent).
extern bool cpu_only;

}  // namespace gdl::gpu_test

#define GDL_REQUIRE_OK(expr)                                   \
  do {                                                         \
    ::gdl::Status gdl_s_ = (expr);                             \
    INFO(#expr << " -> " << gdl_s_.message());                 \
    REQUIRE(gdl_s_.ok());                                      \
  } while (0)
