// Collectives on the GPU (collectives.h): NCCL through dlopen, the public
// gdl::Communicator, and the call each collective step makes.
#include "collectives.h"

#include <dlfcn.h>

#include <algorithm>
#include <cstdlib>
#include <cstring>
#include <mutex>
#include <set>
#include <tuple>

#include "cuda_util.h"

namespace gdl::rt {
namespace {

Expected<NcclApi> open_nccl() {
  const char* configured = std::getenv("GDL_NCCL_LIBRARY");
  const std::string path = configured && *configured ? configured : "libnccl.so.2";
  void* library = dlopen(path.c_str(), RTLD_NOW | RTLD_LOCAL);
  if (!library) {
    const char* why = dlerror();
    return Status::Unavailable("NCCL could not be loaded from " + path + " (" + (why ? why : "no reason given") +
                               "): a program with collectives needs libnccl.so.2 on the library path, or its path "
                               "in GDL_NCCL_LIBRARY");
  }
  NcclApi api;
  std::string missing;
#define GDL_NCCL_FIND(member, symbol)                                              \
  api.member = reinterpret_cast<decltype(api.member)>(dlsym(library, #symbol)); \
  if (!api.member && missing.empty()) missing = #symbol;
  GDL_NCCL_ENTRY_POINTS(GDL_NCCL_FIND)
#undef GDL_NCCL_FIND
  if (!missing.empty()) {
    dlclose(library);
    return Status::Unavailable("the NCCL library at " + path + " has no " + missing + ": it is older than gdl needs");
  }
  return api;  // the library stays open for the process's life
}

ncclDataType_t nccl_type(DType t) {
  switch (t) {
    case DType::kF16: return ncclFloat16;
    case DType::kBF16: return ncclBfloat16;
    case DType::kI32: return ncclInt32;
    default: return ncclFloat32;
  }
}

ncclRedOp_t nccl_reduce(const ir::Node& n) {
  const auto code = static_cast<ir::CollectiveReduce>(n.attrs.ints.empty() ? 0 : n.attrs.ints[0]);
  switch (code) {
    case ir::CollectiveReduce::kProd: return ncclProd;
    case ir::CollectiveReduce::kMax: return ncclMax;
    case ir::CollectiveReduce::kMin: return ncclMin;
    case ir::CollectiveReduce::kAvg: return ncclAvg;
    default: return ncclSum;
  }
}

uint64_t fnv1a(const std::string& text) {
  uint64_t h = 1469598103934665603ull;
  for (unsigned char c : text) h = (h ^ c) * 1099511628211ull;
  return h;
}

}  // namespace

Expected<const NcclApi*> nccl() {
  static const Expected<NcclApi> loaded = open_nccl();
  if (!loaded) return loaded.status();
  return &*loaded;
}

Status nccl_error(const NcclApi& api, ncclResult_t r, const std::string& what) {
  const std::string text = what + ": NCCL error " + std::to_string(static_cast<int>(r)) + " (" + api.get_error_string(r) + ")";
  if (r == ncclSystemError || r == ncclRemoteError) return Status::Unavailable(text);
  return Status::Internal(text);
}

namespace {

// The call at these layout dims, without its addresses.
CollectiveCall call_shape(const plan::Plan& p, const Kernel& k, const std::vector<int64_t>& layout_dims) {
  const ir::Node& n = p.graph.node(k.collective);
  const ir::ValueId x = n.args.at(0);
  CollectiveCall call;
  call.op = n.op;
  call.dtype = nccl_type(n.type.dtype);
  call.reduce = nccl_reduce(n);
  const auto sent = static_cast<size_t>(element_count(p.graph.node(x).type.shape, layout_dims));
  const auto received = static_cast<size_t>(element_count(n.type.shape, layout_dims));
  call.count = n.op == ir::Op::kReduceScatter ? received : sent;
  call.send_bytes = sent * dtype_size(n.type.dtype);
  call.receive_bytes = received * dtype_size(n.type.dtype);
  return call;
}

}  // namespace

CollectiveCall collective_call(const plan::Plan& p, const Kernel& k, const std::vector<int64_t>& layout_dims,
                               unsigned char* arena, const unsigned char* params) {
  auto address = [&](ir::ValueId v) {
    const plan::Buffer& b = p.buffers.at(static_cast<size_t>(v));
    return (b.region == plan::Region::kParams ? const_cast<unsigned char*>(params) : arena) + plan::offset_at(b, layout_dims);
  };
  CollectiveCall call = call_shape(p, k, layout_dims);
  call.send = address(p.graph.node(k.collective).args.at(0));
  call.receive = address(k.collective);
  return call;
}

std::vector<CollectiveCall> collective_shapes(const plan::Plan& p, const KernelTable& t) {
  const ir::Graph& g = p.graph;
  std::vector<CollectiveCall> shapes;
  std::set<std::tuple<int, int, int, size_t>> seen;
  for (const std::vector<int>& choices : t.step_choices) {
    const Kernel& k = t.kernels.at(static_cast<size_t>(choices.back()));
    if (!k.is_collective()) continue;
    std::vector<size_t> dims;  // the dims its shapes use: every combination of their buckets
    const ir::Node& n = g.node(k.collective);
    for (const Shape* s : {&n.type.shape, &g.node(n.args.at(0)).type.shape})
      for (const Dim& d : *s)
        if (d.is_runtime() && std::find(dims.begin(), dims.end(), static_cast<size_t>(d.symbol)) == dims.end())
          dims.push_back(static_cast<size_t>(d.symbol));
    std::vector<int64_t> layout;
    for (const DimInfo& d : g.dims) layout.push_back(d.hi);
    std::vector<size_t> pick(dims.size(), 0);
    while (true) {
      for (size_t i = 0; i < dims.size(); ++i) layout[dims[i]] = g.dims[dims[i]].buckets.at(pick[i]);
      const CollectiveCall call = call_shape(p, k, layout);
      if (seen.insert({static_cast<int>(call.op), static_cast<int>(call.dtype), static_cast<int>(call.reduce), call.count})
              .second)
        shapes.push_back(call);
      size_t i = 0;
      for (; i < dims.size(); ++i) {
        if (++pick[i] < g.dims[dims[i]].buckets.size()) break;
        pick[i] = 0;
      }
      if (i == dims.size()) break;
    }
  }
  return shapes;
}

Status enqueue_collective(const NcclApi& api, ncclComm_t comm, const CollectiveCall& c, cudaStream_t stream) {
  ncclResult_t r = ncclSuccess;
  if (c.op == ir::Op::kAllReduce) r = api.all_reduce(c.send, c.receive, c.count, c.dtype, c.reduce, comm, stream);
  else if (c.op == ir::Op::kAllGather) r = api.all_gather(c.send, c.receive, c.count, c.dtype, comm, stream);
  else r = api.reduce_scatter(c.send, c.receive, c.count, c.dtype, c.reduce, comm, stream);
  if (r != ncclSuccess) return nccl_error(api, r, std::string("calling NCCL's ") + ir::op_name(c.op));
  return Status::Ok();
}

CollectiveSignature collective_signature(const plan::Plan& p, const KernelTable& t) {
  const ir::Graph& g = p.graph;
  std::string text = "ranks " + std::to_string(g.group.ranks);
  CollectiveSignature s;
  s.ranks = static_cast<uint64_t>(g.group.ranks);
  for (const std::vector<int>& choices : t.step_choices) {
    const Kernel& k = t.kernels.at(static_cast<size_t>(choices.back()));
    if (!k.is_collective()) continue;
    const ir::Node& n = g.node(k.collective);
    const TensorType& x = g.node(n.args.at(0)).type;
    text += "; " + std::string(ir::op_name(n.op)) + " " + std::to_string(n.attrs.ints.empty() ? 0 : n.attrs.ints[0]) + " " +
            dtype_name(x.dtype);
    for (const Dim& d : x.shape) {  // a run-time dim by its bounds and buckets, not its name
      if (!d.is_runtime()) {
        text += " " + std::to_string(d.extent);
        continue;
      }
      const DimInfo& info = g.dims.at(static_cast<size_t>(d.symbol));
      text += " [" + std::to_string(info.lo) + "," + std::to_string(info.hi) + ":";
      for (int64_t b : info.buckets) text += " " + std::to_string(b);
      text += "]";
    }
    s.calls += 1;
  }
  s.hash = fnv1a(text);
  return s;
}

uint32_t collective_dims(const plan::Plan& p, const KernelTable& t) {
  uint32_t mask = 0;
  for (const Kernel& k : t.kernels) {
    if (!k.is_collective()) continue;
    const ir::Node& n = p.graph.node(k.collective);
    for (const Shape* s : {&n.type.shape, &p.graph.node(n.args.at(0)).type.shape})
      for (const Dim& d : *s)
        if (d.is_runtime()) mask |= 1u << d.symbol;
    for (ir::ValueId v : {k.collective, n.args.at(0)})  // a view behind a run-time axis moves with it
      for (const plan::OffsetTerm& t : p.buffers.at(static_cast<size_t>(v)).terms)
        for (int d : t.dims) mask |= 1u << d;
  }
  return mask;
}

}  // namespace gdl::rt

namespace gdl {

Communicator::Impl::~Impl() {
  if (comm && !aborted.load()) (void)api->comm_destroy(comm);  // an aborted one is freed already
}

Communicator::Communicator(std::unique_ptr<Impl> impl) : impl_(std::move(impl)) {}
Communicator::~Communicator() = default;
int Communicator::rank() const { return impl_->rank; }
int Communicator::ranks() const { return impl_->ranks; }
int Communicator::device() const { return impl_->device; }
void Communicator::abort() {
  std::unique_lock<std::shared_mutex> lock(impl_->use);
  if (impl_->aborted.exchange(true)) return;
  if (impl_->comm) (void)impl_->api->comm_abort(impl_->comm);
}

Expected<CommunicatorId> Communicator::new_id() {
  return guarded("Communicator::new_id", [&]() -> Expected<CommunicatorId> {
    Expected<const rt::NcclApi*> api = rt::nccl();
    if (!api) return api.status();
    ncclUniqueId id;
    if (ncclResult_t r = (*api)->get_unique_id(&id); r != ncclSuccess)
      return rt::nccl_error(**api, r, "making a communicator id");
    CommunicatorId out;
    static_assert(sizeof out.bytes == sizeof id.internal, "an NCCL unique id");
    std::memcpy(out.bytes, id.internal, sizeof out.bytes);
    return out;
  });
}

namespace {

// The device index checked, made current for NCCL's calls.
Status use_device(int device) {
  GDL_RETURN_IF_ERROR(rt::check_device_index(device));
  GDL_CUDA_TRY(cudaSetDevice(device), "making device " + std::to_string(device) + " current");
  return Status::Ok();
}

}  // namespace

Expected<std::shared_ptr<Communicator>> Communicator::join(const CommunicatorId& id, int rank, int ranks, int device) {
  return guarded("Communicator::join", [&]() -> Expected<std::shared_ptr<Communicator>> {
    if (ranks < 1 || ranks > static_cast<int>(ir::kMaxGroupRanks) || rank < 0 || rank >= ranks)
      return Status::InvalidArgument("rank " + std::to_string(rank) + " of " + std::to_string(ranks) +
                                     ": a group has 1 to " + std::to_string(ir::kMaxGroupRanks) +
                                     " ranks, numbered from 0");
    Expected<const rt::NcclApi*> api = rt::nccl();
    if (!api) return api.status();
    GDL_RETURN_IF_ERROR(use_device(device));
    auto impl = std::make_unique<Impl>();
    impl->api = *api;
    impl->rank = rank;
    impl->ranks = ranks;
    impl->device = device;
    ncclUniqueId nccl_id;
    std::memcpy(nccl_id.internal, id.bytes, sizeof id.bytes);
    if (ncclResult_t r = impl->api->comm_init_rank(&impl->comm, ranks, nccl_id, rank); r != ncclSuccess) {
      impl->comm = nullptr;
      return rt::nccl_error(**api, r, "joining the group as rank " + std::to_string(rank) + " of " + std::to_string(ranks));
    }
    return std::shared_ptr<Communicator>(new Communicator(std::move(impl)));
  });
}

Expected<std::vector<std::shared_ptr<Communicator>>> Communicator::create_local(const std::vector<int>& devices) {
  return guarded("Communicator::create_local", [&]() -> Expected<std::vector<std::shared_ptr<Communicator>>> {
    if (devices.empty() || devices.size() > static_cast<size_t>(ir::kMaxGroupRanks))
      return Status::InvalidArgument("create_local takes 1 to " + std::to_string(ir::kMaxGroupRanks) + " devices, got " +
                                     std::to_string(devices.size()));
    for (size_t i = 0; i < devices.size(); ++i) {
      GDL_RETURN_IF_ERROR(use_device(devices[i]));
      for (size_t j = 0; j < i; ++j)
        if (devices[j] == devices[i])
          return Status::InvalidArgument("device " + std::to_string(devices[i]) +
                                         " is named twice: NCCL runs one rank of a group per GPU");
    }
    Expected<const rt::NcclApi*> api = rt::nccl();
    if (!api) return api.status();
    std::vector<ncclComm_t> comms(devices.size(), nullptr);
    if (ncclResult_t r = (*api)->comm_init_all(comms.data(), static_cast<int>(devices.size()), devices.data());
        r != ncclSuccess)
      return rt::nccl_error(**api, r, "making the communicators of " + std::to_string(devices.size()) + " devices");
    std::vector<std::shared_ptr<Communicator>> out;
    for (size_t i = 0; i < devices.size(); ++i) {
      auto impl = std::make_unique<Impl>();
      impl->api = *api;
      impl->comm = comms[i];
      impl->rank = static_cast<int>(i);
      impl->ranks = static_cast<int>(devices.size());
      impl->device = devices[i];
      out.push_back(std::shared_ptr<Communicator>(new Communicator(std::move(impl))));
    }
    return out;
  });
}

}  // namespace gdl
