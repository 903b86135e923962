// libFuzzer target: the readers of model files (gdl/weights.h, gdl/llama.h)
// on arbitrary bytes. The bytes are written as a .safetensors file and
// opened with Checkpoint::open; an accepted checkpoint has every tensor's
// bytes read (a range outside the mapped file faults) and a mapping
// assembled against a param that its tensors may or may not fit. The same
// bytes go to WeightMapping::parse and LlamaConfig::parse. Findings: a
// sanitizer report, a crash, an uncaught exception, an accepted file whose
// tensors disagree with their own sizes.
#include <unistd.h>

#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <string>

#include "gdl/llama.h"
#include "gdl/weights.h"

namespace {

[[noreturn]] void fail(const std::string& what) {
  std::fprintf(stderr, "%s\n", what.c_str());
  std::abort();
}

const std::string& scratch_file() {
  static const std::string path =
      (std::filesystem::temp_directory_path() / ("gdl_weights_fuzz_" + std::to_string(::getpid()) + ".safetensors")).string();
  return path;
}

}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  const std::string text(reinterpret_cast<const char*>(data), size);
  (void)gdl::WeightMapping::parse(text);
  (void)gdl::LlamaConfig::parse(text);
  {
    std::ofstream out(scratch_file(), std::ios::binary | std::ios::trunc);
    out.write(text.data(), static_cast<std::streamsize>(text.size()));
  }
  gdl::Expected<gdl::Checkpoint> checkpoint = gdl::Checkpoint::open(scratch_file());
  if (!checkpoint) return 0;
  uint64_t total = 0, sum = 0;
  for (const std::string& name : checkpoint->names()) {
    const gdl::CheckpointTensor* t = checkpoint->find(name);
    if (!t) fail("a listed tensor is not found: " + name);
    if (t->bytes > size) fail("tensor " + name + " is larger than the file");
    for (uint64_t i = 0; i < t->bytes; ++i) sum += t->data[i];  // every byte readable
    total += t->bytes;
  }
  if (total != checkpoint->total_bytes()) fail("total_bytes disagrees with the tensors");
  // Every tensor as a source of a 2 x 3 f32 param, and all of them by rows.
  gdl::TensorInfo param;
  param.name = "p";
  param.dtype = gdl::ElementType::kF32;
  param.shape = {{2, -1}, {3, -1}};
  param.max_bytes = 24;
  param.type_text = "f32[2, 3]";
  std::string all = "p";
  for (const std::string& name : checkpoint->names()) {
    if (name.find_first_of(" \t\n\r#|") != std::string::npos || name.empty()) continue;
    all += " " + name;
    gdl::Expected<gdl::WeightMapping> one = gdl::WeightMapping::parse("p " + name + "\n");
    if (one) (void)gdl::assemble_params(*checkpoint, *one, {param});
  }
  gdl::Expected<gdl::WeightMapping> every = gdl::WeightMapping::parse(all + "\n");
  if (every && every->rules.size() == 1) {
    gdl::Expected<std::map<std::string, gdl::TensorData>> p = gdl::assemble_params(*checkpoint, *every, {param});
    if (p && p->at("p").bytes.size() != 24) fail("an assembled param of the wrong size");
  }
  return sum == 0xdeadbeef ? 1 : 0;  // keeps the reads
}
