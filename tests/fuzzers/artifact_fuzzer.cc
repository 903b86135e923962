// libFuzzer target: the .gdlx reader (core/artifact.h) on arbitrary bytes.
//
// The header's checksum field is set to the checksum of the payload before
// the bytes are read: random changes would almost never pass the checksum,
// and the reader behind it (the payload decoder and verify_artifact, which
// must stand a hostile file whose checksum is right) would go unfuzzed. The
// magic, version and size fields are read as given.
//
// An artifact the reader accepts must survive a round trip: written again,
// it reads back, and writing that gives the same bytes. Findings: a
// sanitizer report, a crash, an uncaught exception, a failed round trip.
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <span>
#include <vector>

#include "artifact.h"

namespace {

// The header (core/artifact.cc): magic (8 bytes), format version (u32),
// payload size (u64), FNV-1a 64 checksum of the payload (u64, little-endian).
constexpr size_t kChecksumOffset = 8 + 4 + 8;
constexpr size_t kHeaderBytes = kChecksumOffset + 8;

void set_checksum(std::vector<uint8_t>& file) {
  uint64_t h = 0xcbf29ce484222325ull;  // FNV-1a 64: offset basis, then xor and multiply by the prime
  for (size_t i = kHeaderBytes; i < file.size(); ++i) h = (h ^ file[i]) * 0x100000001b3ull;
  for (size_t i = 0; i < 8; ++i) file[kChecksumOffset + i] = static_cast<uint8_t>(h >> (8 * i));
}

[[noreturn]] void fail(const char* what, const gdl::Status& status) {
  std::fprintf(stderr, "%s: %s\n", what, status.ToString().c_str());
  std::abort();
}

}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  std::vector<uint8_t> file(data, data + size);
  if (file.size() >= kHeaderBytes) set_checksum(file);
  gdl::Expected<gdl::Artifact> artifact = gdl::deserialize_artifact(file);
  if (!artifact.ok()) return 0;

  const std::vector<uint8_t> written = gdl::serialize_artifact(*artifact);
  gdl::Expected<gdl::Artifact> again = gdl::deserialize_artifact(written);
  if (!again.ok()) fail("an accepted artifact, written again, does not read back", again.status());
  if (gdl::serialize_artifact(*again) != written) {
    std::fprintf(stderr, "an accepted artifact does not write the same bytes after a round trip\n");
    std::abort();
  }
  return 0;
}
