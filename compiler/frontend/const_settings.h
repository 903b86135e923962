// Compile-time settings of a program's consts (`gdlc -D H=2048`), and dtype
// consts (`const DT = bf16;`) resolved to the dtype they name, so one source
// serves every model size and precision.
#pragma once

#include <map>
#include <string>

#include "frontend/ast.h"
#include "frontend/diagnostics.h"

namespace gdl {

// Replaces the value of each const named in `settings` by the setting (an
// integer, a float, true or false, or a dtype name; the text as written
// after `NAME=`), then substitutes every dtype const: its name in types,
// type arguments and other consts becomes the dtype, and the const itself
// leaves the module. A setting for a name the program does not declare as a
// const is an error at the program's first line; a value of none of those
// forms, at the const's value. A let, loop variable or fn parameter named
// like a dtype const is an error (the name stands for the dtype everywhere).
void apply_const_settings(ast::Module& module, const std::map<std::string, std::string>& settings,
                          DiagnosticSink& diags);

}  // namespace gdl
