// Session::load_params: checkpoint tensors into the params region, through
// two pinned staging buffers so that reading the mapped file (page faults,
// disk) overlaps the copies to the device; pieces that land next to each
// other share one copy.
#include <chrono>
#include <cstring>

#include "cuda_util.h"
#include "gdl/weights.h"
#include "session_impl.h"
#include "weight_pieces.h"

namespace gdl {
namespace {

constexpr uint64_t kStagingBytes = uint64_t{32} << 20;

struct Copy {
  const uint8_t* src;
  unsigned char* dst;
  uint64_t bytes;
};

}  // namespace

Status Session::load_params(const Checkpoint& checkpoint, const WeightMapping& mapping, LoadReport* report) {
  return guarded("Session::load_params", [&]() -> Status {
    Session::Impl& s = *impl_;
    GDL_RETURN_IF_ERROR(s.make_current());
    const auto start = std::chrono::steady_clock::now();
    LoadReport r;
    // 1. Every rule checked and turned into copies before any is made.
    std::vector<Copy> copies;
    std::vector<size_t> loaded;
    for (const WeightRule& rule : mapping.rules) {
      auto it = s.prog.param_index.find(rule.param);
      if (it == s.prog.param_index.end())
        return Status::NotFound("weight mapping: the program has no param '" + rule.param + "'");
      const TensorInfo& info = s.prog.params[it->second];
      Expected<std::vector<rt::WeightPiece>> pieces = rt::weight_pieces(checkpoint, rule, info);
      if (!pieces) return pieces.status();
      const plan::Buffer& buffer = s.prog.buffer_of(s.prog.param_values[it->second]);
      // A param no step reads has no memory (the compiler dropped it).
      if (buffer.region == plan::Region::kParams)
        for (const rt::WeightPiece& p : *pieces) copies.push_back({p.src, s.params->base() + buffer.offset + p.dst_offset, p.bytes});
      loaded.push_back(it->second);
      r.params_loaded.push_back(rule.param);
    }
    // 2. The copies, in chunks through alternating pinned buffers.
    void* staging[2] = {nullptr, nullptr};
    cudaEvent_t done[2] = {nullptr, nullptr};
    auto release = [&] {
      for (int i = 0; i < 2; ++i) {
        if (done[i]) (void)cudaEventDestroy(done[i]);
        if (staging[i]) (void)rt::host_free(staging[i]);
      }
    };
    Status status = [&]() -> Status {
      for (int i = 0; i < 2; ++i) {
        GDL_CUDA_TRY(rt::host_malloc(&staging[i], kStagingBytes), "allocating the weights' staging buffer");
        GDL_CUDA_TRY(cudaEventCreateWithFlags(&done[i], cudaEventDisableTiming), "creating a staging event");
      }
      // Pieces whose destinations follow each other share a staging buffer
      // and one copy (a column part of a weight is one piece per row).
      int slot = 0;
      unsigned char* filled_to = nullptr;  // the device bytes the staged ones go to: [filled_to - fill, filled_to)
      uint64_t fill = 0;
      auto flush = [&]() -> Status {
        if (fill == 0) return Status::Ok();
        GDL_CUDA_TRY(cudaMemcpyAsync(filled_to - fill, staging[slot], fill, cudaMemcpyHostToDevice, s.stream),
                     "copying weights to the device");
        GDL_CUDA_TRY(cudaEventRecord(done[slot], s.stream), "recording a staging event");
        r.bytes += fill;
        fill = 0;
        slot ^= 1;
        GDL_CUDA_TRY(cudaEventSynchronize(done[slot]), "waiting for a staging buffer");
        return Status::Ok();
      };
      for (const Copy& c : copies)
        for (uint64_t at = 0; at < c.bytes;) {
          if (fill > 0 && (c.dst + at != filled_to || fill == kStagingBytes)) GDL_RETURN_IF_ERROR(flush());
          const uint64_t n = std::min(kStagingBytes - fill, c.bytes - at);
          std::memcpy(static_cast<unsigned char*>(staging[slot]) + fill, c.src + at, n);
          fill += n;
          at += n;
          filled_to = c.dst + at;
        }
      GDL_RETURN_IF_ERROR(flush());
      GDL_CUDA_TRY(cudaStreamSynchronize(s.stream), "copying weights to the device");
      return Status::Ok();
    }();
    if (!status.ok()) (void)cudaStreamSynchronize(s.stream);  // no copy still reads a staging buffer
    release();
    GDL_RETURN_IF_ERROR(status);
    for (size_t p : loaded) s.params->mark_set(p);
    for (const TensorInfo& p : s.prog.params)
      if (std::find(r.params_loaded.begin(), r.params_loaded.end(), p.name) == r.params_loaded.end())
        r.params_unset.push_back(p.name);
    r.seconds = std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
    if (report) *report = std::move(r);
    return Status::Ok();
  });
}

Status Session::load_params(const std::string& path, const WeightMapping& mapping, LoadReport* report) {
  Expected<Checkpoint> checkpoint = Checkpoint::open(path);
  if (!checkpoint) return checkpoint.status();
  return load_params(*checkpoint, mapping, report);
}

}  // namespace gdl
