// Load any compiled program and run it once, with the runtime alone (no
// compiler in the process): every param and input is filled from a fixed
// pattern of its declared dtype, every run-time dim is taken at its upper
// bound, and each output's first values and element count are printed.
//   build/gdlc examples/mlp.gdl -o mlp.gdlx && build/examples/load_and_run mlp.gdlx
#include <cstdio>
#include <cstring>
#include <vector>

#include "gdl/gdl.h"
#include "gdl/version.h"

namespace {

// n elements of dtype t: small values that every dtype holds, not all equal.
std::vector<uint8_t> pattern(gdl::ElementType t, size_t n) {
  std::vector<double> values(n);
  for (size_t i = 0; i < n; ++i) values[i] = t == gdl::ElementType::kBool ? double(i % 2) : double(i % 7) * 0.125 - 0.25;
  if (t == gdl::ElementType::kI32)
    for (size_t i = 0; i < n; ++i) values[i] = double((i + 1) % 5);  // a rank-0 length or index is 1, not 0
  return gdl::encode_elements(t, values);
}

std::vector<int64_t> upper_bound_shape(const gdl::TensorInfo& info) {
  std::vector<int64_t> shape;
  for (const gdl::AxisInfo& a : info.shape) shape.push_back(a.extent);  // a run-time dim's extent is its upper bound
  return shape;
}

}  // namespace

int main(int argc, char** argv) {
  const char* usage = "usage: load_and_run PROGRAM.gdlx   (every param and input from a fixed pattern, dims at their upper bounds)\n";
  if (argc == 2 && (!std::strcmp(argv[1], "--help") || !std::strcmp(argv[1], "-h"))) return std::fputs(usage, stdout), 0;
  if (argc == 2 && !std::strcmp(argv[1], "--version")) return std::puts("load_and_run " GDL_VERSION_STRING), 0;
  if (argc != 2) return std::fputs(usage, stderr), 2;
  gdl::Expected<gdl::Program> program = gdl::Program::load(argv[1]);
  GDL_EXIT_ON_ERROR(program.status(), 1);
  std::printf("%s: %zu kernel nodes, arena %llu bytes, params %llu bytes\n", program->name().c_str(),
              program->node_count(), static_cast<unsigned long long>(program->arena_bytes()),
              static_cast<unsigned long long>(program->params_bytes()));
  gdl::Expected<std::unique_ptr<gdl::Session>> session = gdl::Session::create(*program);
  if (!session.ok()) {  // e.g. no GPU here: say so and stop
    std::fprintf(stderr, "no session: %s\n", session.status().ToString().c_str());
    return 0;
  }
  gdl::Session& s = **session;
  for (const gdl::TensorInfo& p : program->params()) {
    std::vector<uint8_t> bytes = pattern(p.dtype, p.max_bytes / gdl::element_size(p.dtype));
    GDL_EXIT_ON_ERROR(s.set_param(p.name, bytes.data(), bytes.size()), 1);
  }
  for (const gdl::TensorInfo& in : program->inputs()) {
    std::vector<uint8_t> bytes = pattern(in.dtype, in.max_bytes / gdl::element_size(in.dtype));
    GDL_EXIT_ON_ERROR(s.bind(in.name, bytes.data(), bytes.size(), in.dtype, upper_bound_shape(in)), 1);
  }
  GDL_EXIT_ON_ERROR(s.run(), 1);
  for (const gdl::TensorInfo& out : program->outputs()) {
    std::vector<uint8_t> bytes(out.max_bytes);
    GDL_EXIT_ON_ERROR(s.read(out.name, bytes.data(), bytes.size()), 1);
    const size_t count = bytes.size() / gdl::element_size(out.dtype);
    std::vector<double> values = gdl::decode_elements(out.dtype, bytes.data(), count < 4 ? count : 4);
    std::printf("%s %s: %zu elements, first", out.name.c_str(), out.type_text.c_str(), count);
    for (double v : values) std::printf(" %g", v);
    std::printf("\n");
  }
  return 0;
}
