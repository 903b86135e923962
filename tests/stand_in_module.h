// A module for artifacts the CPU tests build without NVRTC: one unit that
// names every kernel of the table and the input copy, with a stand-in PTX
// text that is never loaded (no GPU). verify_artifact accepts it.
#pragma once

#include <set>
#include <string>

#include "kernel_table.h"

namespace gdl {

inline CompiledModule stand_in_module(const KernelTable& table, const std::string& ptx = "// not real PTX: never loaded\n") {
  CompiledModule m;
  m.arch = "sm_90";
  ModuleUnit unit;
  std::set<std::string> seen;
  for (const Kernel& k : table.kernels)
    if (!k.is_collective() && seen.insert(k.symbol).second) unit.symbols.push_back(k.symbol);
  unit.symbols.push_back(kInputCopySymbol);
  unit.ptx = ptx;
  m.units.push_back(std::move(unit));
  return m;
}

}  // namespace gdl
