// The consumer project's in-process compiler (gdl::jit): scale.gdl compiled
// from its source by gdl::jit::compile, then run on the CPU reference and
// checked (y = 2 x + 1). Runs on any machine.
#include <cstdio>
#include <cstring>
#include <vector>

#include "gdl/jit.h"

int main(int argc, char** argv) {
  if (argc != 2) {
    std::fprintf(stderr, "usage: consumer_jit scale.gdl\n");
    return 2;
  }
  gdl::Expected<gdl::Program> program = gdl::jit::compile(argv[1]);
  if (!program.ok()) {
    std::fprintf(stderr, "consumer_jit: %s\n", program.status().ToString().c_str());
    return 1;
  }
  const int64_t rows = 3;
  std::vector<float> x(rows * 256), w(256, 2.0f);
  for (size_t i = 0; i < x.size(); ++i) x[i] = static_cast<float>(static_cast<int>(i % 31) - 15);
  const auto tensor = [](const std::vector<float>& v, std::vector<int64_t> shape) {
    gdl::TensorData t{gdl::ElementType::kF32, std::move(shape), std::vector<uint8_t>(v.size() * 4)};
    std::memcpy(t.bytes.data(), v.data(), t.bytes.size());
    return t;
  };
  gdl::Expected<std::map<std::string, gdl::TensorData>> out =
      gdl::jit::run_reference(*program, {{"x", tensor(x, {rows, 256})}, {"w", tensor(w, {256})}});
  if (!out.ok()) {
    std::fprintf(stderr, "consumer_jit: %s\n", out.status().ToString().c_str());
    return 1;
  }
  std::vector<float> y(x.size());
  std::memcpy(y.data(), out->at("y").bytes.data(), y.size() * 4);
  for (size_t i = 0; i < y.size(); ++i)
    if (y[i] != 2.0f * x[i] + 1.0f) {
      std::fprintf(stderr, "consumer_jit: y[%zu] = %g, want %g\n", i, y[i], 2.0f * x[i] + 1.0f);
      return 1;
    }
  std::printf("consumer_jit: compiled '%s' in the process; the CPU reference gives 2 x + 1 for all %zu outputs\n",
              program->name().c_str(), y.size());
  return 0;
}
