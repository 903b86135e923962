// Named ranges on the profilers' timelines, in the "gdl" domain (NVTX v3
// from the CUDA toolkit: header-only, and without Nsight Systems or Nsight
// Compute attached a range costs the check of a pointer). The runtime marks
// run, run_eager and each of its kernels, bind and graph builds; the
// compiler each pass.
#pragma once

#include <nvtx3/nvToolsExt.h>

#include <string>

namespace gdl {

inline nvtxDomainHandle_t nvtx_domain() {
  static const nvtxDomainHandle_t domain = nvtxDomainCreateA("gdl");
  return domain;
}

// Pushes a range when made, pops it when it goes.
class NvtxRange {
 public:
  explicit NvtxRange(const char* name) {
    nvtxEventAttributes_t a{};
    a.version = NVTX_VERSION;
    a.size = NVTX_EVENT_ATTRIB_STRUCT_SIZE;
    a.messageType = NVTX_MESSAGE_TYPE_ASCII;
    a.message.ascii = name;
    nvtxDomainRangePushEx(nvtx_domain(), &a);
  }
  explicit NvtxRange(const std::string& name) : NvtxRange(name.c_str()) {}
  ~NvtxRange() { nvtxDomainRangePop(nvtx_domain()); }
  NvtxRange(const NvtxRange&) = delete;
  NvtxRange& operator=(const NvtxRange&) = delete;
};

}  // namespace gdl
