// What the random-program tests share besides the generator: the saved
// regression programs and the environment knobs.
#pragma once

#include <cstdint>
#include <string>
#include <utility>
#include <vector>

namespace gdl::fuzz {

// tests/fuzz/regressions/*.gdl under the source tree: (file name, text), by name.
std::vector<std::pair<std::string, std::string>> saved_regressions(const std::string& source_dir);

// The unsigned integer in environment variable `name`, or `fallback` when unset.
uint64_t env_count(const char* name, uint64_t fallback);

}  // namespace gdl::fuzz
