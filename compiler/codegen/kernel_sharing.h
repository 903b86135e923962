// Kernel sharing: kernels that differ only in where their buffers lie are
// one kernel of the module. A model's layers are the same steps on other
// weights and other arena buffers, so without it the 1B Llama decoder sent
// 704 kernels to NVRTC where 65 differ.
//
// The emitters address every buffer as `arena + OFFSETull` or
// `params + OFFSETull` (StepEmitter::address, the scratch pointers).
// KernelSharing::add, for each kernel in emission order:
// 1. Takes the first kMaxKernelOffsets such offsets out of the text: each
//    becomes `offsets.at[i]` (the kernel's gdl_offsets argument) and goes
//    into Kernel::offsets; any further ones stay in the code.
// 2. Compares the text with the kernels added before it, up to names: the
//    comments, the kernel's own symbol and the locals named after IR values
//    (`v12`, `r12`, `in12`, ...) do not count. Its launch rule's block,
//    grid.y and shared memory must match too (the runtime sets one shared
//    memory limit per kernel).
// 3. A kernel equal to an earlier one takes that kernel's symbol, and its
//    text is dropped; any other is returned to go into its unit.
// Two kernels are shared only when their code is the same up to the names
// of locals and the offsets, so a kernel table entry runs exactly its own
// code on its own buffers.
#pragma once

#include <map>
#include <string>

#include "kernel_table.h"

namespace gdl {

class KernelSharing {
 public:
  // `text` is one kernel's code as emitted (its comment lines and its
  // definition), `kernel` its table entry with symbol and launch rule set.
  // Sets kernel.offsets; where an earlier kernel has the same code, sets
  // kernel.symbol to that kernel's and returns "", else returns the text
  // with its offsets taken out.
  std::string add(const std::string& text, Kernel& kernel);

  int shared() const { return shared_; }  // kernels that took an earlier one's code

 private:
  std::map<std::string, std::string> symbol_of_;  // the comparison form of a kernel -> its symbol
  int shared_ = 0;
};

}  // namespace gdl
