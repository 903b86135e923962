// saved_regressions, env_count (corpus.h).
#include "fuzz/corpus.h"

#include <algorithm>
#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <sstream>

namespace gdl::fuzz {

std::vector<std::pair<std::string, std::string>> saved_regressions(const std::string& source_dir) {
  std::vector<std::pair<std::string, std::string>> out;
  const std::filesystem::path dir = std::filesystem::path(source_dir) / "tests" / "fuzz" / "regressions";
  for (const auto& entry : std::filesystem::directory_iterator(dir)) {
    if (entry.path().extension() != ".gdl") continue;
    std::ifstream in(entry.path());
    std::stringstream text;
    text << in.rdbuf();
    out.emplace_back(entry.path().filename().string(), text.str());
  }
  std::sort(out.begin(), out.end());
  return out;
}

uint64_t env_count(const char* name, uint64_t fallback) {
  const char* v = std::getenv(name);
  return v && *v ? std::strtoull(v, nullptr, 10) : fallback;
}

}  // namespace gdl::fuzz
