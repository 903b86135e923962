// The command line of every gdl tool: CLI11 (Debian's libcli11-dev) with
// --help and --version, values typed and checked by validators whose
// messages name the bad text, and one way to report the outcome:
// `TOOL: error: ...` and the usage hint on stderr with the tool's usage
// exit code, or help and version on stdout with 0.
#pragma once

#include <CLI/CLI.hpp>

#include <charconv>
#include <cmath>
#include <cstdio>
#include <limits>
#include <map>
#include <optional>
#include <sstream>
#include <string>
#include <type_traits>

#include "gdl/version.h"

namespace gdl::tools {

// "gdlc 0.1.0 (CUDA 13.0)": what --version prints.
inline std::string version_text(const std::string& tool) {
  return tool + " " GDL_VERSION_STRING " (CUDA " GDL_CUDA_TOOLKIT_VERSION ")";
}

// The whole text as a number: "8x", "1e3" (for an integer), "", values out
// of T's range, inf and nan are refused.
template <typename T>
std::optional<T> parse_number(const std::string& text) {
  T value{};
  const char* end = text.data() + text.size();
  auto [stop, ec] = std::from_chars(text.data(), end, value);
  if (ec != std::errc() || stop != end) return std::nullopt;
  if constexpr (std::is_floating_point_v<T>)
    if (!std::isfinite(value)) return std::nullopt;
  return value;
}

// A validator that accepts the text of a T (parse_number) in [lo, hi] and
// names the text it refuses: "'1e3' is not an integer".
template <typename T>
CLI::Validator strict_number(const std::string& what, T lo = std::numeric_limits<T>::lowest(),
                             T hi = std::numeric_limits<T>::max()) {
  return CLI::Validator(
      [what, lo, hi](std::string& text) -> std::string {
        std::optional<T> value = parse_number<T>(text);
        return value && *value >= lo && *value <= hi ? std::string() : "'" + text + "' is not " + what;
      },
      "");  // --help shows the option's type name alone
}

// NAME=VALUE into (name, value); false when there is no '=' or no name.
inline bool split_assignment(const std::string& text, std::string* name, std::string* value) {
  const size_t eq = text.find('=');
  if (eq == std::string::npos || eq == 0) return false;
  *name = text.substr(0, eq);
  *value = text.substr(eq + 1);
  return true;
}

// A repeatable `FLAG NAME=VALUE` option filling `into`, each VALUE a T
// (strict_number: `what` names it in refusals) or the text itself (T =
// std::string); the refusal names the flag and the whole assignment.
template <typename T>
CLI::Option* add_assignments(CLI::App& app, const std::string& flag, std::map<std::string, T>& into,
                             const std::string& help, const std::string& type_name, const std::string& what = "") {
  return app
      .add_option_function<std::vector<std::string>>(
          flag,
          [&into, flag, what](const std::vector<std::string>& items) {
            for (const std::string& item : items) {
              std::string name, value;
              if (!split_assignment(item, &name, &value) || value.empty())
                throw CLI::ValidationError(flag + " expects NAME=VALUE, got '" + item + "'");
              if constexpr (std::is_same_v<T, std::string>) {
                into[name] = value;
              } else {
                std::optional<T> number = parse_number<T>(value);
                if (!number) throw CLI::ValidationError(flag + " " + item + ": '" + value + "' is not " + what);
                into[name] = *number;
              }
            }
          },
          help)
      ->type_name(type_name)
      ->allow_extra_args(false)
      ->take_all();
}

// How parsing ended: go on, or exit with `exit_code` after printing
// `text` (help or version on stdout; a usage error on stderr).
struct CommandLineOutcome {
  bool go_on = true;
  int exit_code = 0;
  bool is_error = false;
  std::string text;
};

// Parses argv into `app`'s options; prints nothing (a fuzzer calls it).
inline CommandLineOutcome parse_command_line(CLI::App& app, int argc, const char* const* argv, int usage_code) {
  try {
    app.parse(argc, argv);
    return {};
  } catch (const CLI::CallForHelp&) {
    return {false, 0, false, app.help()};
  } catch (const CLI::CallForAllHelp&) {
    return {false, 0, false, app.help("", CLI::AppFormatMode::All)};
  } catch (const CLI::CallForVersion& e) {
    return {false, 0, false, std::string(e.what()) + "\n"};
  } catch (const CLI::ParseError& e) {
    return {false, usage_code, true, e.what()};
  } catch (const std::exception& e) {  // a tool never dies on its argv
    return {false, usage_code, true, std::string("the command line could not be read: ") + e.what()};
  }
}

// Prints a finished outcome as the tools do: help and version on stdout, an
// error as `TOOL: error: ...` and a pointer to --help on stderr. Returns
// the exit code.
inline int report_command_line(const std::string& tool, const CommandLineOutcome& outcome) {
  if (outcome.is_error)
    std::fprintf(stderr, "%s: error: %s\n(%s --help lists the options)\n", tool.c_str(), outcome.text.c_str(),
                 tool.c_str());
  else
    std::fputs(outcome.text.c_str(), stdout);
  return outcome.exit_code;
}

// An app named `tool` with --help and --version; an option given twice
// keeps its last value (as the tools did before CLI11).
inline void add_standard_flags(CLI::App& app, const std::string& tool) {
  app.set_version_flag("--version", version_text(tool));
  app.get_formatter()->column_width(30);
  app.option_defaults()->multi_option_policy(CLI::MultiOptionPolicy::TakeLast);
}

// A list option (`--only a,b`, repeatable) that takes exactly one word per
// use: CLI11's vector options otherwise swallow the words after them
// (`gdlc --dump-after=ir prog.gdl` would take prog.gdl as a pass).
inline CLI::Option* one_word_each(CLI::Option* option) {
  return option->allow_extra_args(false)->multi_option_policy(CLI::MultiOptionPolicy::TakeAll);
}

}  // namespace gdl::tools
