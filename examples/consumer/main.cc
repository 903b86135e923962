// The consumer project's host program: the artifact embedded by
// gdl_add_program(... EMBED), loaded from memory, bound, run and checked.
// Without a GPU it loads the program, prints what it holds and says why it
// stops (the CPU path CI runs); with one it runs two batch sizes and checks
// every element (y = 2 x + 1, exact in f32).
#include <cstdio>
#include <vector>

#include "gdl/embed.h"
#include "gdl/gdl.h"

GDL_EMBEDDED_PROGRAM(scale);

static int fail(const gdl::Status& st) {
  std::fprintf(stderr, "consumer: %s\n", st.ToString().c_str());
  return 1;
}

int main() {
  gdl::Expected<gdl::Program> program = gdl::Program::load_memory(gdl_program_scale, gdl_program_scale_size);
  if (!program.ok()) return fail(program.status());
  std::printf("consumer: program '%s' from %llu embedded bytes, %zu kernel node(s), input %s\n", program->name().c_str(),
              gdl_program_scale_size, program->node_count(), program->inputs().at(0).type_text.c_str());
  gdl::Expected<std::unique_ptr<gdl::Session>> session = gdl::Session::create(*program);
  if (!session.ok()) {
    std::printf("consumer: no session here (%s): loaded only\n", session.status().ToString().c_str());
    return 0;
  }
  gdl::Session& s = **session;
  std::vector<float> w(256, 2.0f);
  if (gdl::Status st = s.set_param("w", w.data(), w.size() * 4); !st.ok()) return fail(st);
  for (int64_t rows : {5, 64}) {
    std::vector<float> x(static_cast<size_t>(rows) * 256), y(x.size(), -1.0f);
    for (size_t i = 0; i < x.size(); ++i) x[i] = static_cast<float>(static_cast<int>(i % 97) - 48);
    gdl::Status st = s.bind("x", x.data(), x.size() * 4, gdl::ElementType::kF32, {rows, 256});
    if (st.ok()) st = s.run();
    if (st.ok()) st = s.read("y", y.data(), y.size() * 4);
    if (!st.ok()) return fail(st);
    for (size_t i = 0; i < y.size(); ++i)
      if (y[i] != 2.0f * x[i] + 1.0f) {
        std::fprintf(stderr, "consumer: B = %lld, y[%zu] = %g, want %g\n", static_cast<long long>(rows), i, y[i],
                     2.0f * x[i] + 1.0f);
        return 1;
      }
    std::printf("consumer: B = %lld: all %zu outputs are 2 x + 1\n", static_cast<long long>(rows), y.size());
  }
  return 0;
}
