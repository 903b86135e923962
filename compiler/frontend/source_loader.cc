// Loading and byte-level validation of .gdl sources.
//
// 1. Read the file with POSIX calls, at most kMaxSourceBytes + 1 bytes, so a
//    huge file is never read whole; a read failure is fatal (one line).
// 2. Validate the bytes in one scan: empty, too large, NUL, then UTF-8
//    (no overlongs, no surrogates, nothing above U+10FFFF); the first problem
//    is reported at its line:col.
#include "frontend/source_loader.h"

#include <fcntl.h>
#include <sys/stat.h>
#include <unistd.h>

#include <cerrno>
#include <cstdio>
#include <cstring>

namespace gdl {

namespace {

// Length of the valid UTF-8 sequence starting at text[i], or 0 if invalid.
size_t utf8_sequence_length(const std::string& text, size_t i) {
  auto byte = [&](size_t k) -> unsigned { return k < text.size() ? static_cast<unsigned char>(text[k]) : 0u; };
  auto continuation = [&](size_t k) { return (byte(k) & 0xC0u) == 0x80u; };
  unsigned lead = byte(i);
  if (lead < 0x80) return 1;
  if (lead >= 0xC2 && lead <= 0xDF) return continuation(i + 1) ? 2 : 0;
  if (lead >= 0xE0 && lead <= 0xEF) {
    unsigned second = byte(i + 1);
    if (lead == 0xE0 && second < 0xA0) return 0;   // overlong
    if (lead == 0xED && second >= 0xA0) return 0;  // UTF-16 surrogate
    return continuation(i + 1) && continuation(i + 2) ? 3 : 0;
  }
  if (lead >= 0xF0 && lead <= 0xF4) {
    unsigned second = byte(i + 1);
    if (lead == 0xF0 && second < 0x90) return 0;   // overlong
    if (lead == 0xF4 && second >= 0x90) return 0;  // above U+10FFFF
    return continuation(i + 1) && continuation(i + 2) && continuation(i + 3) ? 4 : 0;
  }
  return 0;
}

}  // namespace

SourceLoc location_of_offset(const std::string& text, size_t offset) {
  SourceLoc loc{1, 1};
  for (size_t i = 0; i < offset && i < text.size(); ++i) {
    if (text[i] == '\n') {
      ++loc.line;
      loc.col = 1;
    } else {
      ++loc.col;
    }
  }
  return loc;
}

SourceFile source_from_string(std::string name, std::string text) {
  return SourceFile(std::move(name), std::move(text));
}

bool validate_source_text(const SourceFile& file, DiagnosticSink& diags) {
  const std::string& text = file.text();
  if (text.empty()) {
    diags.error({1, 1}, "empty file: a program starts with `program NAME;`");
    return false;
  }
  if (text.size() > kMaxSourceBytes) {
    diags.error(location_of_offset(text, kMaxSourceBytes),
                "source file is larger than " + std::to_string(kMaxSourceBytes >> 20) + " MiB",
                "split the program, or keep large data out of the source");
    return false;
  }
  for (size_t i = 0; i < text.size();) {
    if (text[i] == '\0') {
      diags.error(location_of_offset(text, i), "NUL byte in source", "a .gdl file is UTF-8 text");
      return false;
    }
    size_t length = utf8_sequence_length(text, i);
    if (length == 0) {
      char byte[8];
      std::snprintf(byte, sizeof byte, "0x%02X", static_cast<unsigned char>(text[i]));
      diags.error(location_of_offset(text, i), std::string("invalid UTF-8 byte ") + byte,
                  "save the file as UTF-8");
      return false;
    }
    i += length;
  }
  return true;
}

std::optional<SourceFile> load_source(const std::string& path, DiagnosticSink& diags, std::string* fatal) {
  auto fail = [&](const char* reason) {
    if (fatal) *fatal = path + ": error: cannot read file: " + reason;
    return std::nullopt;
  };
  int fd = ::open(path.c_str(), O_RDONLY | O_CLOEXEC);
  if (fd < 0) return fail(std::strerror(errno));
  struct stat info;
  if (::fstat(fd, &info) == 0 && S_ISDIR(info.st_mode)) {
    ::close(fd);
    return fail(std::strerror(EISDIR));
  }
  // One byte past the limit is enough to know the file is too large.
  std::string text;
  char buffer[1 << 16];
  while (text.size() <= kMaxSourceBytes) {
    ssize_t got = ::read(fd, buffer, sizeof buffer);
    if (got < 0) {
      if (errno == EINTR) continue;
      int saved = errno;
      ::close(fd);
      return fail(std::strerror(saved));
    }
    if (got == 0) break;
    text.append(buffer, static_cast<size_t>(got));
  }
  ::close(fd);
  SourceFile file(path, std::move(text));
  if (!validate_source_text(file, diags)) return std::nullopt;
  return file;
}

}  // namespace gdl
