#include "bench_data.h"

#include <algorithm>
#include <cmath>
#include <cstring>
#include <fstream>
#include <limits>
#include <sstream>
#include <thread>

namespace gdl_bench {

std::optional<ElementType> parse_dtype(const std::string& s) {
  if (s == "f32") return ElementType::kF32;
  if (s == "f16") return ElementType::kF16;
  if (s == "bf16") return ElementType::kBF16;
  if (s == "i32") return ElementType::kI32;
  if (s == "bool") return ElementType::kBool;
  return std::nullopt;
}

Status read_tensor_file(const Json& j, TensorFile& t) {
  t.name = j["name"].text;
  std::optional<ElementType> dtype = parse_dtype(j["dtype"].text);
  if (t.name.empty() || !dtype) return Status::DataLoss("manifest: a tensor without name or known dtype");
  t.dtype = *dtype;
  for (const Json& e : j["shape"].items) t.shape.push_back(e.as_int());
  t.file = j["file"].text;
  const Json& fill = j["fill"];
  if (fill.kind == Json::Kind::kObject) {
    t.fill = Fill{fill["seed"].as_int(), fill["scale"].number};
    const int exponent = std::ilogb(t.fill->scale);
    if (t.fill->seed < 0 || t.fill->seed >= (1 << 20) || !(t.fill->scale > 0) || std::ldexp(1.0, exponent) != t.fill->scale)
      return Status::DataLoss("manifest: tensor '" + t.name + "' has a fill without a seed in [0, 2^20) and a power-of-two scale");
    if (t.count() > (uint64_t(1) << 32)) return Status::DataLoss("manifest: tensor '" + t.name + "' is too large to fill");
  }
  return Status::Ok();
}

Status read_manifest(const std::string& path, std::vector<Variant>& out) {
  std::ifstream in(path, std::ios::binary);
  if (!in) return Status::NotFound("cannot open " + path + " (run bench/torch_bench.py --data DIR first)");
  std::stringstream buffer;
  buffer << in.rdbuf();
  std::string text = buffer.str(), error;
  std::optional<Json> root = parse_json(text, error);
  if (!root) return Status::DataLoss(path + ": " + error);
  if ((*root)["format"].text != "gdl-bench-data/1")
    return Status::DataLoss(path + ": format '" + (*root)["format"].text + "', expected gdl-bench-data/1");
  for (const Json& jv : (*root)["variants"].items) {
    Variant v;
    v.name = jv["name"].text;
    v.workload = jv["workload"].text;
    v.program = jv["program"].text;
    v.gdl = jv["gdl"].text;
    v.dtype = jv["dtype"].text;
    v.tolerance = jv["tolerance"].number;
    v.bytes = jv["bytes"].number;
    v.flops = jv["flops"].number;
    for (const Json& p : jv["params"].items) {
      v.params.emplace_back();
      if (Status s = read_tensor_file(p, v.params.back()); !s.ok()) return s;
    }
    if (Status s = read_tensor_file(jv["output"], v.output); !s.ok()) return s;
    for (const Json& js : jv["sets"].items) {
      InputSet set;
      for (const Json& t : js["inputs"].items) {
        set.inputs.emplace_back();
        if (Status s = read_tensor_file(t, set.inputs.back()); !s.ok()) return s;
      }
      set.timed = js["timed"].kind != Json::Kind::kBool || js["timed"].boolean;
      set.torch_out = js["torch_out"].text;
      set.ref64 = js["ref64"].text;
      v.sets.push_back(std::move(set));
    }
    if (v.name.empty() || v.gdl.empty() || v.sets.empty()) return Status::DataLoss(path + ": an incomplete variant");
    out.push_back(std::move(v));
  }
  return Status::Ok();
}

std::optional<std::vector<uint8_t>> read_bytes(const std::filesystem::path& path) {
  std::ifstream in(path, std::ios::binary);
  if (!in) return std::nullopt;
  return std::vector<uint8_t>(std::istreambuf_iterator<char>(in), std::istreambuf_iterator<char>());
}

float fill_value(const Fill& f, uint64_t i) {
  uint64_t u = (i + static_cast<uint64_t>(f.seed) * 0x9E3779B9u) & 0xFFFFFFFFu;
  u = ((u ^ (u >> 16)) * 0x045D9F3Bu) & 0xFFFFFFFFu;
  u = ((u ^ (u >> 16)) * 0x045D9F3Bu) & 0xFFFFFFFFu;
  u ^= u >> 16;
  return static_cast<float>(static_cast<int64_t>(u >> 20) - 2048) * static_cast<float>(f.scale / 2048.0);
}

namespace {

// The fill of `t` as its dtype's bytes, in chunks over the host's threads
// (an 8 GiB cache is 2^32 values).
std::vector<uint8_t> fill_tensor(const TensorFile& t) {
  const size_t count = t.count(), esize = gdl::element_size(t.dtype);
  std::vector<uint8_t> out(count * esize);
  const size_t threads = std::clamp<size_t>(std::thread::hardware_concurrency(), 1, 32);
  const size_t share = (count + threads - 1) / threads;
  std::vector<std::thread> workers;
  for (size_t w = 0; w < threads; ++w)
    workers.emplace_back([&, w] {
      std::vector<double> values;
      for (size_t begin = w * share; begin < std::min(count, (w + 1) * share); begin += values.size()) {
        values.resize(std::min<size_t>(1 << 16, std::min(count, (w + 1) * share) - begin));
        for (size_t i = 0; i < values.size(); ++i) values[i] = fill_value(*t.fill, begin + i);
        const std::vector<uint8_t> bytes = gdl::encode_elements(t.dtype, values);
        std::memcpy(out.data() + begin * esize, bytes.data(), bytes.size());
      }
    });
  for (std::thread& w : workers) w.join();
  return out;
}

}  // namespace

Status load_tensor(const std::filesystem::path& dir, const TensorFile& t, std::vector<uint8_t>& out) {
  if (t.fill) {
    out = fill_tensor(t);
    return Status::Ok();
  }
  if (t.file.empty()) return Status::DataLoss("tensor '" + t.name + "' has neither a file nor a fill");
  std::optional<std::vector<uint8_t>> data = read_bytes(dir / t.file);
  if (!data) return Status::NotFound("cannot read " + (dir / t.file).string());
  if (data->size() != t.bytes())
    return Status::DataLoss((dir / t.file).string() + " holds " + std::to_string(data->size()) + " bytes, expected " +
                            std::to_string(t.bytes()));
  out = std::move(*data);
  return Status::Ok();
}

// Torch's output (f32) or the float64 reference of one set; nullopt when absent.
std::optional<std::vector<double>> load_reference(const std::filesystem::path& dir, const std::string& file,
                                                  bool f64, size_t count) {
  if (file.empty()) return std::nullopt;
  std::optional<std::vector<uint8_t>> data = read_bytes(dir / file);
  if (!data || data->size() != count * (f64 ? 8 : 4)) return std::nullopt;
  if (f64) {
    std::vector<double> out(count);
    std::memcpy(out.data(), data->data(), data->size());
    return out;
  }
  return gdl::decode_elements(ElementType::kF32, data->data(), count);
}

// ||got - want|| / ||want||; +inf when `got` holds a NaN or an infinity.
double relative_error(const std::vector<double>& got, const std::vector<double>& want) {
  if (got.size() != want.size()) return std::numeric_limits<double>::infinity();
  double diff = 0, norm = 0;
  for (size_t i = 0; i < got.size(); ++i) {
    if (!std::isfinite(got[i])) return std::numeric_limits<double>::infinity();
    diff += (got[i] - want[i]) * (got[i] - want[i]);
    norm += want[i] * want[i];
  }
  return norm > 0 ? std::sqrt(diff / norm) : std::sqrt(diff);
}


}  // namespace gdl_bench
