#include "bench_json.h"

#include <cctype>
#include <cstdio>
#include <cstdlib>
#include <cstring>

namespace gdl_bench {
namespace {

class JsonReader {
 public:
  explicit JsonReader(const std::string& text) : s_(text) {}

  // The whole text as one value; on failure, `error` says where and why.
  std::optional<Json> parse(std::string& error) {
    Json v;
    if (!value(v, 0) || (skip(), pos_ != s_.size())) {
      error = error_.empty() ? "trailing characters" : error_;
      error += " at byte " + std::to_string(pos_);
      return std::nullopt;
    }
    return v;
  }

 private:
  void skip() {
    while (pos_ < s_.size() && std::isspace(static_cast<unsigned char>(s_[pos_]))) ++pos_;
  }
  bool fail(const char* why) {
    if (error_.empty()) error_ = why;
    return false;
  }
  bool literal(const char* word) {
    size_t n = std::strlen(word);
    if (s_.compare(pos_, n, word) != 0) return fail("unknown literal");
    pos_ += n;
    return true;
  }
  bool string(std::string& out) {
    ++pos_;  // the opening quote
    while (pos_ < s_.size() && s_[pos_] != '"') {
      char c = s_[pos_++];
      if (c != '\\') {
        out += c;
        continue;
      }
      if (pos_ >= s_.size()) return fail("unterminated escape");
      char e = s_[pos_++];
      switch (e) {
        case 'n': out += '\n'; break;
        case 't': out += '\t'; break;
        case 'r': out += '\r'; break;
        case 'b': out += '\b'; break;
        case 'f': out += '\f'; break;
        case 'u': {  // the manifest is ASCII; keep other code points as '?'
          if (pos_ + 4 > s_.size()) return fail("short \\u escape");
          unsigned code = static_cast<unsigned>(std::strtoul(s_.substr(pos_, 4).c_str(), nullptr, 16));
          out += code < 0x80 ? static_cast<char>(code) : '?';
          pos_ += 4;
          break;
        }
        default: out += e;
      }
    }
    if (pos_ >= s_.size()) return fail("unterminated string");
    ++pos_;
    return true;
  }
  bool value(Json& v, int depth) {
    if (depth > 64) return fail("nesting too deep");
    skip();
    if (pos_ >= s_.size()) return fail("unexpected end");
    char c = s_[pos_];
    if (c == '{') {
      v.kind = Json::Kind::kObject;
      ++pos_;
      skip();
      if (pos_ < s_.size() && s_[pos_] == '}') return ++pos_, true;
      for (;;) {
        skip();
        if (pos_ >= s_.size() || s_[pos_] != '"') return fail("expected a key");
        std::string key;
        if (!string(key)) return false;
        skip();
        if (pos_ >= s_.size() || s_[pos_] != ':') return fail("expected ':'");
        ++pos_;
        v.members.push_back({std::move(key), Json{}});
        if (!value(v.members.back().value, depth + 1)) return false;
        skip();
        if (pos_ < s_.size() && s_[pos_] == ',') { ++pos_; continue; }
        if (pos_ < s_.size() && s_[pos_] == '}') return ++pos_, true;
        return fail("expected ',' or '}'");
      }
    }
    if (c == '[') {
      v.kind = Json::Kind::kArray;
      ++pos_;
      skip();
      if (pos_ < s_.size() && s_[pos_] == ']') return ++pos_, true;
      for (;;) {
        v.items.emplace_back();
        if (!value(v.items.back(), depth + 1)) return false;
        skip();
        if (pos_ < s_.size() && s_[pos_] == ',') { ++pos_; continue; }
        if (pos_ < s_.size() && s_[pos_] == ']') return ++pos_, true;
        return fail("expected ',' or ']'");
      }
    }
    if (c == '"') {
      v.kind = Json::Kind::kString;
      return string(v.text);
    }
    if (c == 't' || c == 'f') {
      v.kind = Json::Kind::kBool;
      v.boolean = c == 't';
      return literal(v.boolean ? "true" : "false");
    }
    if (c == 'n') return literal("null");
    const char* begin = s_.c_str() + pos_;
    char* end = nullptr;
    v.number = std::strtod(begin, &end);
    if (end == begin) return fail("unexpected character");
    v.kind = Json::Kind::kNumber;
    pos_ += static_cast<size_t>(end - begin);
    return true;
  }

  const std::string& s_;
  size_t pos_ = 0;
  std::string error_;
};

}  // namespace

std::optional<Json> parse_json(const std::string& text, std::string& error) { return JsonReader(text).parse(error); }

std::string quote(const std::string& s) {
  std::string out = "\"";
  for (char c : s) {
    if (c == '"' || c == '\\') out += '\\', out += c;
    else if (c == '\n') out += "\\n";
    else if (static_cast<unsigned char>(c) < 0x20) out += ' ';
    else out += c;
  }
  return out + "\"";
}

std::string number(double v) {  // JSON has no inf or NaN: those become null
  if (!std::isfinite(v)) return "null";
  char buf[40];
  if (v == std::floor(v) && std::fabs(v) < 9.0e15) std::snprintf(buf, sizeof buf, "%.0f", v);  // counts, bytes
  else std::snprintf(buf, sizeof buf, "%.9g", v);
  return buf;
}

}  // namespace gdl_bench
