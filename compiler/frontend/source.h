// A .gdl source file held in memory, and positions inside it.
#pragma once

#include <cstdint>
#include <string>
#include <string_view>
#include <vector>

#include "source_loc.h"

namespace gdl {

class SourceFile {
 public:
  SourceFile(std::string path, std::string text);

  const std::string& path() const { return path_; }
  const std::string& text() const { return text_; }
  // The text of a 1-based line, without its newline; empty if out of range.
  std::string_view line(uint32_t line) const;
  uint32_t line_count() const { return static_cast<uint32_t>(line_starts_.size()); }

 private:
  std::string path_;
  std::string text_;
  std::vector<size_t> line_starts_;
};

// Limits that turn hostile input into a diagnostic instead of a crash.
inline constexpr size_t kMaxSourceBytes = 4u << 20;   // 4 MiB
inline constexpr int kMaxNestingDepth = 64;           // blocks and expressions

}  // namespace gdl
