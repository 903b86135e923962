// The benchmark's JSON: the manifest bench/torch_bench.py writes (read
// here), and the results gdl_bench writes. A small reader and writer, so the
// harness needs nothing beyond the C++ standard library.
#pragma once

#include <cmath>
#include <cstdint>
#include <optional>
#include <string>
#include <utility>
#include <vector>

namespace gdl_bench {

// A parsed JSON value. Members keep their order; a missing key reads as null.
struct Json {
  enum class Kind { kNull, kBool, kNumber, kString, kArray, kObject } kind = Kind::kNull;
  bool boolean = false;
  double number = 0;
  std::string text;
  std::vector<Json> items;
  // Not std::pair<std::string, Json>: clang with libstdc++ instantiates that
  // pair while Json is still incomplete and rejects it. A vector of a type
  // defined later is fine.
  struct Member;
  std::vector<Member> members;

  const Json& operator[](const std::string& key) const;
  bool is_null() const { return kind == Kind::kNull; }
  int64_t as_int() const { return static_cast<int64_t>(std::llround(number)); }
};

struct Json::Member {
  std::string key;
  Json value;
};

inline const Json& Json::operator[](const std::string& key) const {
  static const Json null;
  for (const Member& m : members)
    if (m.key == key) return m.value;
  return null;
}

// The whole text as one value; on failure, `error` says where and why.
std::optional<Json> parse_json(const std::string& text, std::string& error);

// JSON text of a string and of a number (inf and NaN become null).
std::string quote(const std::string& s);
std::string number(double v);

// An object written member by member; values are JSON text.
class JsonObject {
 public:
  JsonObject& add(const std::string& key, const std::string& json) {
    body_ += (body_.empty() ? "" : ", ") + quote(key) + ": " + json;
    return *this;
  }
  JsonObject& num(const std::string& key, double v) { return add(key, number(v)); }
  JsonObject& str(const std::string& key, const std::string& v) { return add(key, quote(v)); }
  JsonObject& flag(const std::string& key, bool v) { return add(key, v ? "true" : "false"); }
  std::string text() const { return "{" + body_ + "}"; }

 private:
  std::string body_;
};

}  // namespace gdl_bench
