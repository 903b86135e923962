// A small text file read whole (a config, an index, a mapping).
#pragma once

#include <fstream>
#include <sstream>
#include <string>

#include "gdl/status.h"

namespace gdl::rt {

// NotFound "PATH: cannot be opened" when it cannot be read.
inline Expected<std::string> read_text_file(const std::string& path) {
  std::ifstream in(path, std::ios::binary);
  if (!in) return Status::NotFound(path + ": cannot be opened");
  std::ostringstream s;
  s << in.rdbuf();
  return s.str();
}

}  // namespace gdl::rt
