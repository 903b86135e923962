// Weight mappings (gdl/weights.h): the text form, and the pieces each rule
// makes of checkpoint tensors.
#include <chrono>
#include <cstring>
#include <fstream>
#include <set>
#include <sstream>

#include "text_file.h"
#include "weight_pieces.h"

namespace gdl {
namespace {

std::string replace_layer(const std::string& pattern, int64_t layer) {
  std::string out;
  for (size_t i = 0; i < pattern.size();) {
    if (pattern.compare(i, 3, "{l}") == 0) {
      out += std::to_string(layer);
      i += 3;
    } else {
      out += pattern[i++];
    }
  }
  return out;
}

std::vector<std::string> split(const std::string& s, char sep) {
  std::vector<std::string> parts;
  size_t start = 0;
  for (size_t bar; (bar = s.find(sep, start)) != std::string::npos; start = bar + 1) parts.push_back(s.substr(start, bar - start));
  parts.push_back(s.substr(start));
  return parts;
}

std::string shape_text(const std::vector<int64_t>& shape) {
  std::string s = "[";
  for (size_t i = 0; i < shape.size(); ++i) s += (i ? ", " : "") + std::to_string(shape[i]);
  return s + "]";
}

}  // namespace

Expected<WeightMapping> WeightMapping::parse(const std::string& text) {
  WeightMapping mapping;
  std::set<std::string> named;
  std::istringstream lines(text);
  std::string line;
  for (int number = 1; std::getline(lines, line); ++number) {
    if (size_t hash = line.find('#'); hash != std::string::npos) line.resize(hash);
    std::istringstream words(line);
    std::string first;
    if (!(words >> first)) continue;
    auto bad = [&](const std::string& what) {
      return Status::InvalidArgument("weight mapping line " + std::to_string(number) + ": " + what);
    };
    WeightRule rule;
    if (first.size() > 3 && first.compare(first.size() - 3, 3, "[l]") == 0) {
      rule.per_layer = true;
      first.resize(first.size() - 3);
    }
    if (first.empty() || first.find_first_of("[]{}|") != std::string::npos)
      return bad("'" + first + "' is not a param name (PARAM or PARAM[l])");
    rule.param = first;
    for (std::string source; words >> source;) {
      std::vector<std::string> alternatives = split(source, '|');
      for (const std::string& a : alternatives) {
        if (a.empty()) return bad("an empty tensor name in '" + source + "'");
        if (!rule.per_layer && a.find("{l}") != std::string::npos)
          return bad("'" + a + "' names the layer {l}, but the rule is not per layer (write " + rule.param + "[l])");
      }
      rule.sources.push_back(std::move(alternatives));
    }
    if (rule.sources.empty()) return bad("param '" + rule.param + "' has no source tensor");
    if (!named.insert(rule.param).second) return bad("param '" + rule.param + "' has a rule already");
    mapping.rules.push_back(std::move(rule));
  }
  return mapping;
}

Expected<WeightMapping> WeightMapping::read(const std::string& path) {
  Expected<std::string> text = rt::read_text_file(path);
  if (!text) return Status(text.status().code(), "weight mapping " + text.status().message());
  Expected<WeightMapping> m = parse(*text);
  if (!m) return Status(m.status().code(), path + ": " + m.status().message());
  return m;
}

std::string WeightMapping::text() const {
  std::string out;
  for (const WeightRule& r : rules) {
    out += r.param + (r.per_layer ? "[l]" : "");
    for (const auto& alternatives : r.sources) {
      out += ' ';
      for (size_t i = 0; i < alternatives.size(); ++i) out += (i ? "|" : "") + alternatives[i];
    }
    out += '\n';
  }
  return out;
}

namespace rt {

Expected<std::vector<WeightPiece>> weight_pieces(const Checkpoint& checkpoint, const WeightRule& rule,
                                                 const TensorInfo& param) {
  std::vector<int64_t> shape;
  for (const AxisInfo& a : param.shape) {
    if (a.is_runtime()) return Status::InvalidArgument("param '" + param.name + "' has a run-time dim");
    shape.push_back(a.extent);
  }
  auto bad = [&](const std::string& what) { return Status::InvalidArgument("param '" + param.name + "' (" + param.type_text + "): " + what); };
  if (rule.per_layer && shape.empty()) return bad("a per-layer rule needs a param with a layer axis");
  const int64_t layers = rule.per_layer ? shape[0] : 1;
  // The part each layer fills: the param without its layer axis.
  const std::vector<int64_t> slice(shape.begin() + (rule.per_layer ? 1 : 0), shape.end());
  const uint64_t elem = element_size(param.dtype);
  int64_t slice_elems = 1;
  for (int64_t e : slice) slice_elems *= e;
  const int64_t row_elems = slice.empty() ? 1 : slice_elems / std::max<int64_t>(1, slice[0]);
  std::vector<WeightPiece> pieces;
  for (int64_t l = 0; l < layers; ++l) {
    int64_t rows = 0;  // filled along the slice's first axis so far
    for (const std::vector<std::string>& alternatives : rule.sources) {
      const CheckpointTensor* t = nullptr;
      std::string tried;
      for (const std::string& a : alternatives) {
        const std::string name = rule.per_layer ? replace_layer(a, l) : a;
        tried += (tried.empty() ? "" : " or ") + ("'" + name + "'");
        if ((t = checkpoint.find(name))) break;
      }
      if (!t) return Status::NotFound("param '" + param.name + "': the checkpoint has no tensor " + tried);
      ElementType dt;
      if (!t->element_type(&dt) || dt != param.dtype)
        return bad("tensor '" + t->name + "' is " + t->dtype + ", the param is " + element_type_name(param.dtype) +
                   " (convert the checkpoint, or declare the param " + (t->element_type(&dt) ? element_type_name(dt) : "in a supported dtype") + ")");
      // The source fills whole rows of the slice: same trailing extents
      // (a rank-1 slice takes any length), stacked along the first.
      const bool rows_fit = slice.empty() ? t->element_count() == 1
                                          : (t->shape.size() == slice.size() &&
                                             std::equal(slice.begin() + 1, slice.end(), t->shape.begin() + 1));
      if (!rows_fit)
        return bad("tensor '" + t->name + "' of shape " + shape_text(t->shape) + " does not fit rows of " +
                   shape_text(slice));
      const int64_t t_rows = slice.empty() ? 1 : t->shape[0];
      if (rows + t_rows > (slice.empty() ? 1 : slice[0]))
        return bad("its sources hold more rows than the param's " + std::to_string(slice.empty() ? 1 : slice[0]) +
                   " (at tensor '" + t->name + "')");
      pieces.push_back({t->data, static_cast<uint64_t>(l * slice_elems + rows * row_elems) * elem, t->bytes});
      rows += t_rows;
    }
    if (rows != (slice.empty() ? 1 : slice[0]))
      return bad("its sources hold " + std::to_string(rows) + " rows, the param " +
                 std::to_string(slice.empty() ? 1 : slice[0]) + (rule.per_layer ? " per layer" : ""));
  }
  return pieces;
}

}  // namespace rt

Expected<std::map<std::string, TensorData>> assemble_params(const Checkpoint& checkpoint, const WeightMapping& mapping,
                                                            const std::vector<TensorInfo>& params, LoadReport* report) {
  const auto start = std::chrono::steady_clock::now();
  LoadReport r;
  std::map<std::string, TensorData> out;
  for (const WeightRule& rule : mapping.rules) {
    const TensorInfo* param = nullptr;
    for (const TensorInfo& p : params)
      if (p.name == rule.param) param = &p;
    if (!param) return Status::NotFound("weight mapping: the program has no param '" + rule.param + "'");
    Expected<std::vector<rt::WeightPiece>> pieces = rt::weight_pieces(checkpoint, rule, *param);
    if (!pieces) return pieces.status();
    TensorData t;
    t.dtype = param->dtype;
    for (const AxisInfo& a : param->shape) t.shape.push_back(a.extent);
    t.bytes.resize(param->max_bytes);
    for (const rt::WeightPiece& p : *pieces) std::memcpy(t.bytes.data() + p.dst_offset, p.src, p.bytes);
    r.bytes += t.bytes.size();
    r.params_loaded.push_back(rule.param);
    out.emplace(rule.param, std::move(t));
  }
  for (const TensorInfo& p : params)
    if (!out.count(p.name)) r.params_unset.push_back(p.name);
  r.seconds = std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
  if (report) *report = std::move(r);
  return out;
}

}  // namespace gdl
