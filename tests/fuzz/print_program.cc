// gdl_fuzz_print SEED [--large]: the random program of one seed, as the CPU
// and GPU random-program tests generate it (the GPU test passes --large for
// every fourth seed), to reproduce a failure or a slow compile by hand.
#include <cstdio>
#include <cstdlib>
#include <cstring>

#include "fuzz/program_gen.h"

int main(int argc, char** argv) {
  if (argc < 2 || argc > 3 || (argc == 3 && std::strcmp(argv[2], "--large") != 0)) {
    std::fprintf(stderr, "usage: gdl_fuzz_print SEED [--large]\n");
    return 2;
  }
  char* end = nullptr;
  const unsigned long long seed = std::strtoull(argv[1], &end, 10);
  if (*end != '\0') {
    std::fprintf(stderr, "gdl_fuzz_print: SEED must be a number, not '%s'\n", argv[1]);
    return 2;
  }
  gdl::fuzz::GenOptions options;
  options.large_shapes = argc == 3;
  std::fputs(gdl::fuzz::generate_program(seed, options).text().c_str(), stdout);
  return 0;
}
