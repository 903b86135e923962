// Reads a .gdl file into a SourceFile and checks that its bytes can be
// compiled at all: not empty, at most kMaxSourceBytes, UTF-8, no NUL.
#pragma once

#include <optional>
#include <string>

#include "frontend/diagnostics.h"
#include "frontend/source.h"

namespace gdl {

// Reads and validates the file at path. When the file cannot be read, writes
// one line "PATH: error: cannot read file: REASON" to *fatal (if given) and
// returns nullopt. When its bytes are rejected, reports an error to diags (at
// the offending line:col) and returns nullopt; render those with a
// SourceFile(path, "") since no text came back.
std::optional<SourceFile> load_source(const std::string& path, DiagnosticSink& diags, std::string* fatal);

// In-memory source for tests and tools; no validation.
SourceFile source_from_string(std::string name, std::string text);

// The byte checks load_source makes, on text already in memory: reports the
// first problem to diags and returns false, or returns true.
bool validate_source_text(const SourceFile& file, DiagnosticSink& diags);

// The 1-based line:col (col in bytes) of a byte offset into text.
SourceLoc location_of_offset(const std::string& text, size_t offset);

}  // namespace gdl
