// KernelSharing (kernel_sharing.h): a kernel's offsets out of its code, and
// its code compared with the kernels before it.
#include "codegen/kernel_sharing.h"

#include <algorithm>
#include <cctype>
#include <string_view>

namespace gdl {
namespace {

bool identifier_char(char c) { return std::isalnum(static_cast<unsigned char>(c)) || c == '_'; }

bool all_digits(std::string_view s) {
  if (s.empty()) return false;
  for (char c : s)
    if (!std::isdigit(static_cast<unsigned char>(c))) return false;
  return true;
}

// Step 1: each `arena + N` or `params + N`, also as the first term of
// `arena + (N + ...)`, with N a decimal `ull` literal, becomes
// `offsets.at[i]` while there is room; the offsets go into `offsets`.
std::string take_offsets(const std::string& text, std::vector<uint64_t>& offsets) {
  std::string out;
  out.reserve(text.size());
  size_t i = 0;
  while (i < text.size()) {
    size_t base_length = 0;
    for (std::string_view base : {std::string_view("arena + "), std::string_view("params + ")})
      if (text.compare(i, base.size(), base) == 0 && (i == 0 || !identifier_char(text[i - 1]))) base_length = base.size();
    if (base_length == 0 || offsets.size() >= static_cast<size_t>(kMaxKernelOffsets)) {
      out += text[i++];
      continue;
    }
    size_t at = i + base_length;
    if (at < text.size() && text[at] == '(') ++at;
    size_t end = at;
    while (end < text.size() && std::isdigit(static_cast<unsigned char>(text[end]))) ++end;
    if (end == at || text.compare(end, 3, "ull") != 0 || (end + 3 < text.size() && identifier_char(text[end + 3]))) {
      out += text[i++];
      continue;
    }
    out.append(text, i, at - i);
    out += "offsets.at[" + std::to_string(offsets.size()) + "]";
    offsets.push_back(std::stoull(text.substr(at, end - at)));
    i = end + 3;
  }
  return out;
}

// The locals the emitters name after an IR value: a prefix and the value's id.
bool value_local(std::string_view name) {
  for (std::string_view prefix : {"v", "r", "in", "st", "inner", "base", "valid", "ids"})
    if (name.size() > prefix.size() && name.substr(0, prefix.size()) == prefix && all_digits(name.substr(prefix.size())))
      return true;
  return false;
}

// Step 2's comparison form: the code without comments, with `symbol` as
// `KERNEL` and the value-named locals numbered by first appearance. String
// literals are kept as they are.
std::string comparison_form(const std::string& text, const std::string& symbol) {
  std::string out;
  out.reserve(text.size());
  std::map<std::string, std::string> renamed;
  size_t i = 0;
  while (i < text.size()) {
    const char c = text[i];
    if (c == '/' && i + 1 < text.size() && text[i + 1] == '/') {
      while (i < text.size() && text[i] != '\n') ++i;
      continue;
    }
    if (c == '"') {
      const size_t start = i++;
      while (i < text.size() && text[i] != '"') i += text[i] == '\\' ? 2 : 1;
      i = std::min(i + 1, text.size());
      out.append(text, start, i - start);
      continue;
    }
    if (!identifier_char(c) || (i > 0 && identifier_char(text[i - 1]))) {
      out += text[i++];
      continue;
    }
    size_t end = i;
    while (end < text.size() && identifier_char(text[end])) ++end;
    const std::string name = text.substr(i, end - i);
    // A member or a namespace's name (`in4.s`, `gdl::op::add`) is no local.
    const bool qualified = (i >= 1 && text[i - 1] == '.') || (i >= 2 && text.compare(i - 2, 2, "::") == 0) ||
                           (i >= 2 && text.compare(i - 2, 2, "->") == 0);
    if (name == symbol) {
      out += "KERNEL";
    } else if (!qualified && value_local(name)) {
      auto [it, added] = renamed.emplace(name, "");
      if (added) it->second = "@" + std::to_string(renamed.size());
      out += it->second;
    } else {
      out += name;
    }
    i = end;
  }
  return out;
}

}  // namespace

std::string KernelSharing::add(const std::string& text, Kernel& kernel) {
  kernel.offsets.clear();
  std::string code = take_offsets(text, kernel.offsets);
  const LaunchRule& r = kernel.launch;
  std::string key = std::to_string(r.block) + " " + std::to_string(r.grid_y) + " " + std::to_string(r.shared_bytes) +
                    "\n" + comparison_form(code, kernel.symbol);
  auto [it, added] = symbol_of_.emplace(std::move(key), kernel.symbol);
  if (added) return code;
  kernel.symbol = it->second;
  shared_ += 1;
  return "";
}

}  // namespace gdl
