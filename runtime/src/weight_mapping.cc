// Weight mappings (gdl/weights.h): the text form, and the pieces each rule
// makes of checkpoint tensors.
#include <chrono>
#include <cstring>
#include <fstream>
#include <optional>
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

// A source's part: `NAME[a:b]` (rows a..b-1 of axis 0) or `NAME[:,a:b]`
// (a..b-1 of axis 1), or the whole tensor.
struct SourcePart {
  std::string name;
  int axis = -1;  // -1: the whole tensor
  int64_t begin = 0, end = 0;
};

// The source split into its name and part; nullopt for a malformed subscript.
std::optional<SourcePart> parse_source(const std::string& source) {
  SourcePart part;
  const size_t open = source.find('[');
  if (open == std::string::npos) {
    part.name = source;
    return part;
  }
  if (source.back() != ']' || open == 0) return std::nullopt;
  part.name = source.substr(0, open);
  std::string range = source.substr(open + 1, source.size() - open - 2);
  part.axis = 0;
  if (range.rfind(":,", 0) == 0) {
    part.axis = 1;
    range = range.substr(2);
  }
  const size_t colon = range.find(':');
  if (colon == std::string::npos || colon == 0 || colon + 1 == range.size()) return std::nullopt;
  const std::string a = range.substr(0, colon), b = range.substr(colon + 1);
  if (a.find_first_not_of("0123456789") != std::string::npos || b.find_first_not_of("0123456789") != std::string::npos ||
      a.size() > 15 || b.size() > 15)
    return std::nullopt;
  part.begin = std::stoll(a);
  part.end = std::stoll(b);
  if (part.end <= part.begin) return std::nullopt;
  return part;
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
        if (!parse_source(a))
          return bad("'" + a + "': a part is NAME[a:b] (rows a to b-1) or NAME[:,a:b] (columns), with a < b");
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
      SourcePart part;
      std::string tried;
      for (const std::string& a : alternatives) {
        const std::optional<SourcePart> parsed = parse_source(a);  // a rule built in code skipped parse's check
        if (!parsed) return bad("'" + a + "': a part is NAME[a:b] (rows a to b-1) or NAME[:,a:b] (columns), with a < b");
        part = *parsed;
        part.name = rule.per_layer ? replace_layer(part.name, l) : part.name;
        tried += (tried.empty() ? "" : " or ") + ("'" + part.name + "'");
        if ((t = checkpoint.find(part.name))) break;
      }
      if (!t) return Status::NotFound("param '" + param.name + "': the checkpoint has no tensor " + tried);
      ElementType dt;
      if (!t->element_type(&dt) || dt != param.dtype)
        return bad("tensor '" + t->name + "' is " + t->dtype + ", the param is " + element_type_name(param.dtype) +
                   " (convert the checkpoint, or declare the param " + (t->element_type(&dt) ? element_type_name(dt) : "in a supported dtype") + ")");
      // The part taken: the whole tensor, or a range of its axis 0 or 1.
      std::vector<int64_t> taken = t->shape;
      if (part.axis >= 0) {
        if (static_cast<size_t>(part.axis) >= taken.size() || part.end > taken[static_cast<size_t>(part.axis)])
          return bad("tensor '" + t->name + "' of shape " + shape_text(t->shape) + " has no part [" +
                     (part.axis == 1 ? ":," : "") + std::to_string(part.begin) + ":" + std::to_string(part.end) + "]");
        taken[static_cast<size_t>(part.axis)] = part.end - part.begin;
      }
      const std::string what = "tensor '" + t->name + "'" + (part.axis >= 0 ? " (its part " + shape_text(taken) + ")" : "");
      // It fills whole rows of the slice: same trailing extents (a rank-1
      // slice takes any length), stacked along the first.
      int64_t taken_elems = 1;
      for (int64_t e : taken) taken_elems *= e;
      const bool rows_fit = slice.empty() ? taken_elems == 1
                                          : (taken.size() == slice.size() &&
                                             std::equal(slice.begin() + 1, slice.end(), taken.begin() + 1));
      if (!rows_fit) return bad(what + " of shape " + shape_text(t->shape) + " does not fit rows of " + shape_text(slice));
      const int64_t t_rows = slice.empty() ? 1 : taken[0];
      if (rows + t_rows > (slice.empty() ? 1 : slice[0]))
        return bad("its sources hold more rows than the param's " + std::to_string(slice.empty() ? 1 : slice[0]) +
                   " (at " + what + ")");
      const uint64_t dst = static_cast<uint64_t>(l * slice_elems + rows * row_elems) * elem;
      if (part.axis < 0) {
        pieces.push_back({t->data, dst, t->bytes});
      } else {
        // Per index of the axes before the part's, one contiguous run of it (a column part: one per row).
        int64_t outer = 1, inner = 1;
        for (int a = 0; a < part.axis; ++a) outer *= t->shape[static_cast<size_t>(a)];
        for (size_t a = static_cast<size_t>(part.axis) + 1; a < t->shape.size(); ++a) inner *= t->shape[a];
        const uint64_t run = static_cast<uint64_t>((part.end - part.begin) * inner) * elem;
        for (int64_t o = 0; o < outer; ++o)
          pieces.push_back({t->data + static_cast<uint64_t>((o * t->shape[static_cast<size_t>(part.axis)] + part.begin) * inner) * elem,
                            dst + static_cast<uint64_t>(o) * run, run});
      }
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
