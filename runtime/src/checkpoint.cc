// Safetensors checkpoints: each file is an 8-byte little-endian header
// length, a JSON header naming every tensor's dtype, shape and byte range,
// then the tensors' bytes. Files are memory-mapped read-only; nothing is
// copied until a param is loaded.
#include <fcntl.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <unistd.h>

#include <algorithm>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <nlohmann/json.hpp>
#include <set>
#include <sstream>

#include "gdl/weights.h"
#include "text_file.h"

namespace gdl {
namespace {

using json = nlohmann::json;
namespace fs = std::filesystem;

// The header may not be larger than this: safetensors itself caps it at 100 MB.
constexpr uint64_t kMaxHeaderBytes = 100ull << 20;
constexpr int kMaxRank = 8;

struct DtypeInfo {
  const char* name;
  int bytes;
};
constexpr DtypeInfo kDtypes[] = {{"F64", 8},  {"F32", 4}, {"F16", 2},     {"BF16", 2},    {"I64", 8},
                                 {"I32", 4},  {"I16", 2}, {"I8", 1},      {"U8", 1},      {"BOOL", 1},
                                 {"U16", 2},  {"U32", 4}, {"U64", 8},     {"F8_E4M3", 1}, {"F8_E5M2", 1}};

int dtype_bytes(const std::string& name) {
  for (const DtypeInfo& d : kDtypes)
    if (name == d.name) return d.bytes;
  return 0;
}

// One mapped file.
struct MappedFile {
  std::string path;
  const uint8_t* base = nullptr;
  uint64_t size = 0;
  ~MappedFile() {
    if (base && size) ::munmap(const_cast<uint8_t*>(base), size);
  }
};

Expected<std::shared_ptr<MappedFile>> map_file(const std::string& path) {
  const int fd = ::open(path.c_str(), O_RDONLY | O_CLOEXEC);
  if (fd < 0) return Status::NotFound(path + ": " + std::strerror(errno));
  struct stat info {};
  if (::fstat(fd, &info) != 0 || !S_ISREG(info.st_mode)) {
    ::close(fd);
    return Status::InvalidArgument(path + ": not a regular file");
  }
  auto file = std::make_shared<MappedFile>();
  file->path = path;
  file->size = static_cast<uint64_t>(info.st_size);
  if (file->size > 0) {
    void* p = ::mmap(nullptr, file->size, PROT_READ, MAP_SHARED, fd, 0);
    if (p == MAP_FAILED) {
      ::close(fd);
      return Status::ResourceExhausted(path + ": mmap failed: " + std::strerror(errno));
    }
    file->base = static_cast<const uint8_t*>(p);
  }
  ::close(fd);
  return file;
}

Status corrupt(const std::string& path, const std::string& what) {
  return Status::DataLoss(path + ": not a valid safetensors file: " + what);
}

// Reads one file's header into `out` (tensors keyed by name).
Status read_header(const std::shared_ptr<MappedFile>& file, std::map<std::string, CheckpointTensor>& out) {
  const std::string& path = file->path;
  if (file->size < 8) return corrupt(path, "shorter than its 8-byte header length (" + std::to_string(file->size) + " bytes)");
  uint64_t header_bytes = 0;
  for (int i = 7; i >= 0; --i) header_bytes = header_bytes << 8 | file->base[i];
  if (header_bytes > kMaxHeaderBytes || header_bytes > file->size - 8)
    return corrupt(path, "header length " + std::to_string(header_bytes) + " does not fit the file of " +
                             std::to_string(file->size) + " bytes");
  const char* text = reinterpret_cast<const char*>(file->base + 8);
  // nlohmann keeps the last of two equal keys; a tensor named twice is refused instead.
  std::set<std::string> top_keys;
  std::string twice;
  json::parser_callback_t note_keys = [&](int depth, json::parse_event_t event, json& parsed) {
    if (event == json::parse_event_t::key && depth == 1 && !top_keys.insert(parsed.get<std::string>()).second)
      twice = parsed.get<std::string>();
    return true;
  };
  json header = json::parse(text, text + header_bytes, note_keys, /*allow_exceptions=*/false);
  if (header.is_discarded() || !header.is_object()) return corrupt(path, "the header is not a JSON object");
  if (!twice.empty()) return corrupt(path, "tensor '" + twice + "' is named twice in the header");
  const uint64_t data_begin = 8 + header_bytes;
  const uint64_t data_bytes = file->size - data_begin;
  std::vector<std::pair<uint64_t, uint64_t>> ranges;
  for (auto it = header.begin(); it != header.end(); ++it) {
    if (it.key() == "__metadata__") continue;
    const std::string& name = it.key();
    const json& t = it.value();
    auto bad = [&](const std::string& what) { return corrupt(path, "tensor '" + name + "': " + what); };
    if (!t.is_object() || !t.contains("dtype") || !t.contains("shape") || !t.contains("data_offsets"))
      return bad("needs dtype, shape and data_offsets");
    const json& dt = t["dtype"];
    const json& shape = t["shape"];
    const json& offsets = t["data_offsets"];
    if (!dt.is_string()) return bad("dtype is not a string");
    CheckpointTensor tensor;
    tensor.name = name;
    tensor.dtype = dt.get<std::string>();
    tensor.file = path;
    const int elem = dtype_bytes(tensor.dtype);
    if (elem == 0) return bad("unknown dtype '" + tensor.dtype + "'");
    if (!shape.is_array() || shape.size() > kMaxRank) return bad("shape is not an array of at most 8 extents");
    unsigned __int128 count = 1;
    for (const json& e : shape) {
      if (!e.is_number_unsigned()) return bad("an extent is not a non-negative integer");
      const uint64_t x = e.get<uint64_t>();
      if (x > (uint64_t{1} << 48)) return bad("an extent is larger than 2^48");
      tensor.shape.push_back(static_cast<int64_t>(x));
      count *= x;
      if (count > (unsigned __int128)(uint64_t{1} << 48)) return bad("more than 2^48 elements");
    }
    if (!offsets.is_array() || offsets.size() != 2 || !offsets[0].is_number_unsigned() ||
        !offsets[1].is_number_unsigned())
      return bad("data_offsets is not [begin, end]");
    const uint64_t begin = offsets[0].get<uint64_t>(), end = offsets[1].get<uint64_t>();
    if (begin > end || end > data_bytes)
      return bad("data_offsets [" + std::to_string(begin) + ", " + std::to_string(end) + "] outside the " +
                 std::to_string(data_bytes) + " data bytes (a truncated file?)");
    const uint64_t want = static_cast<uint64_t>(count) * static_cast<uint64_t>(elem);
    if (end - begin != want)
      return bad("holds " + std::to_string(end - begin) + " bytes, but " + tensor.dtype + " of its shape is " +
                 std::to_string(want));
    tensor.data = file->base + data_begin + begin;
    tensor.bytes = want;
    if (want > 0) ranges.emplace_back(begin, end);
    out.emplace(name, std::move(tensor));
  }
  std::sort(ranges.begin(), ranges.end());
  for (size_t i = 1; i < ranges.size(); ++i)
    if (ranges[i].first < ranges[i - 1].second) return corrupt(path, "two tensors' data ranges overlap");
  return Status::Ok();
}

}  // namespace

struct Checkpoint::Impl {
  std::vector<std::shared_ptr<MappedFile>> mapped;
  std::vector<std::string> files;
  std::map<std::string, CheckpointTensor> tensors;
};

bool CheckpointTensor::element_type(ElementType* out) const {
  if (dtype == "F32") *out = ElementType::kF32;
  else if (dtype == "F16") *out = ElementType::kF16;
  else if (dtype == "BF16") *out = ElementType::kBF16;
  else if (dtype == "I32") *out = ElementType::kI32;
  else if (dtype == "BOOL") *out = ElementType::kBool;
  else return false;
  return true;
}

int64_t CheckpointTensor::element_count() const {
  int64_t n = 1;
  for (int64_t e : shape) n *= e;
  return n;
}

Expected<Checkpoint> Checkpoint::open(const std::string& path) {
  std::error_code ec;
  std::vector<std::string> shards;
  fs::path index;
  if (fs::is_directory(path, ec)) {
    if (fs::exists(fs::path(path) / "model.safetensors.index.json", ec)) index = fs::path(path) / "model.safetensors.index.json";
    else if (fs::exists(fs::path(path) / "model.safetensors", ec)) shards.push_back((fs::path(path) / "model.safetensors").string());
    else return Status::NotFound(path + ": holds neither model.safetensors.index.json nor model.safetensors");
  } else if (path.size() >= 5 && path.substr(path.size() - 5) == ".json") {
    index = path;
  } else {
    shards.push_back(path);
  }
  // The weight_map of an index names each tensor's shard; the shards are
  // checked to hold exactly the tensors the index gives them.
  std::map<std::string, std::string> index_map;
  if (!index.empty()) {
    Expected<std::string> text = rt::read_text_file(index.string());
    if (!text) return text.status();
    json j = json::parse(*text, nullptr, false);
    if (j.is_discarded() || !j.is_object() || !j.contains("weight_map") || !j["weight_map"].is_object())
      return Status::DataLoss(index.string() + ": not a safetensors index (a JSON object with a weight_map)");
    std::set<std::string> seen;
    for (auto it = j["weight_map"].begin(); it != j["weight_map"].end(); ++it) {
      if (!it.value().is_string()) return Status::DataLoss(index.string() + ": weight_map['" + it.key() + "'] is not a file name");
      const std::string shard = it.value().get<std::string>();
      if (shard.empty() || shard.find('/') != std::string::npos || shard == "." || shard == "..")
        return Status::DataLoss(index.string() + ": shard '" + shard + "' is not a file name in the index's directory");
      const std::string shard_path = (index.parent_path() / shard).string();
      index_map[it.key()] = shard_path;
      if (seen.insert(shard_path).second) shards.push_back(shard_path);
    }
  }
  auto impl = std::make_shared<Impl>();
  for (const std::string& shard : shards) {
    Expected<std::shared_ptr<MappedFile>> file = map_file(shard);
    if (!file) return file.status();
    std::map<std::string, CheckpointTensor> tensors;
    if (Status s = read_header(*file, tensors); !s.ok()) return s;
    for (auto& [name, t] : tensors) {
      if (!index_map.empty()) {
        auto it = index_map.find(name);
        if (it == index_map.end() || it->second != shard)
          return Status::DataLoss(shard + ": holds tensor '" + name + "', which the index " +
                                  (it == index_map.end() ? "does not name" : "puts in " + it->second));
      }
      if (impl->tensors.count(name)) return Status::DataLoss(shard + ": tensor '" + name + "' is in two shards");
      impl->tensors.emplace(name, std::move(t));
    }
    impl->mapped.push_back(std::move(*file));
    impl->files.push_back(shard);
  }
  for (const auto& [name, shard] : index_map)
    if (!impl->tensors.count(name))
      return Status::DataLoss(shard + ": the index puts tensor '" + name + "' here, but the file does not hold it");
  return Checkpoint(std::move(impl));
}

const CheckpointTensor* Checkpoint::find(const std::string& name) const {
  auto it = impl_->tensors.find(name);
  return it == impl_->tensors.end() ? nullptr : &it->second;
}

std::vector<std::string> Checkpoint::names() const {
  std::vector<std::string> out;
  for (const auto& [name, t] : impl_->tensors) out.push_back(name);
  return out;
}

size_t Checkpoint::size() const { return impl_->tensors.size(); }

uint64_t Checkpoint::total_bytes() const {
  uint64_t n = 0;
  for (const auto& [name, t] : impl_->tensors) n += t.bytes;
  return n;
}

const std::vector<std::string>& Checkpoint::files() const { return impl_->files; }

}  // namespace gdl
