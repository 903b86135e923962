// The smallest host program: load an artifact written by `gdlc`, bind an
// input by copy, replay the graph twice with two different inputs, read the
// outputs. README.md shows this file.
//   build/gdlc examples/chain.gdl -o chain.gdlx && build/examples/hello_host chain.gdlx
#include <cstdio>
#include <vector>

#include <cstring>

#include "gdl/gdl.h"
#include "gdl/version.h"

static int fail(const gdl::Status& st) {
  std::fprintf(stderr, "%s\n", st.ToString().c_str());
  return 1;
}

int main(int argc, char** argv) {
  const char* usage = "usage: hello_host PROGRAM.gdlx   (a program with one f32 input and one f32 output)\n";
  if (argc == 2 && (!std::strcmp(argv[1], "--help") || !std::strcmp(argv[1], "-h"))) return std::fputs(usage, stdout), 0;
  if (argc == 2 && !std::strcmp(argv[1], "--version")) return std::puts("hello_host " GDL_VERSION_STRING), 0;
  if (argc != 2) return std::fputs(usage, stderr), 2;
  gdl::Expected<gdl::Program> program = gdl::Program::load(argv[1]);
  if (!program.ok()) return fail(program.status());
  const gdl::TensorInfo& in = program->inputs().at(0);
  const gdl::TensorInfo& out = program->outputs().at(0);
  size_t n_in = in.max_bytes / 4, n_out = out.max_bytes / 4;
  std::printf("%s: %zu kernel nodes, arena %llu bytes, input %s %s, output %s %s\n", program->name().c_str(),
              program->node_count(), static_cast<unsigned long long>(program->arena_bytes()), in.name.c_str(),
              in.type_text.c_str(), out.name.c_str(), out.type_text.c_str());

  gdl::Expected<std::unique_ptr<gdl::Session>> session = gdl::Session::create(*program);
  if (!session.ok()) {  // e.g. no GPU here: say so and stop
    std::fprintf(stderr, "no session: %s\n", session.status().ToString().c_str());
    return 0;
  }
  gdl::Session& s = **session;
  for (const gdl::TensorInfo& p : program->params()) {  // weights: bound once, persist
    std::vector<float> w(p.max_bytes / 4, 1.0f);  // chain.gdl: y = x + 100
    if (gdl::Status st = s.set_param(p.name, w.data(), p.max_bytes); !st.ok()) return fail(st);
  }
  std::vector<int64_t> shape;
  for (const gdl::AxisInfo& a : in.shape) shape.push_back(a.extent);
  for (float value : {1.0f, 2.0f}) {
    std::vector<float> x(n_in, value), y(n_out);
    gdl::Status st = s.bind(in.name, x.data(), x.size() * 4, gdl::ElementType::kF32, shape);  // copied now
    if (st.ok()) st = s.run();                                     // graph replay
    if (st.ok()) st = s.read(out.name, y.data(), y.size() * 4);    // a copy; the buffer is reused by the next run
    if (!st.ok()) return fail(st);
    std::printf("x = %g everywhere -> %s[0] = %g\n", value, out.name.c_str(), y[0]);
  }
  return 0;
}
