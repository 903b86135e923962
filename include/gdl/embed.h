// An artifact embedded into the binary by the CMake function
// gdl_add_program(<target> <file.gdl> EMBED NAME <name>) (docs/packaging.md):
//
//   #include "gdl/embed.h"
//   GDL_EMBEDDED_PROGRAM(mlp);   // at namespace scope
//   ...
//   gdl::Expected<gdl::Program> p = gdl::Program::load_memory(gdl_program_mlp, gdl_program_mlp_size);
#pragma once

#define GDL_EMBEDDED_PROGRAM(name)                    \
  extern "C" const unsigned char gdl_program_##name[]; \
  extern "C" const unsigned long long gdl_program_##name##_size
