// The .gdlx artifact: writer and reader.
//
// 1. serialize_artifact encodes the payload with a small little-endian
//    writer: lengths as u32 before every string and vector, doubles by
//    their bit pattern, enums as u8. Order: graph (name, target GPU, dims, nodes with
//    every field, outputs, state updates), plan (buffers with their offset terms, steps with their scratch, memory
//    summary, scratch area and chains), kernel table (kernels, then each
//    step's choices), module (arch, per unit its kernels' symbols, CUBIN and PTX, NVRTC version, cache flag,
//    compile time), CUDA source. Then it prepends the header: magic, format version,
//    payload size, FNV-1a 64 checksum of the payload.
// 2. deserialize_artifact checks the header in the order that gives the
//    most useful message: magic, version, payload size, checksum.
//    read_artifact checks all but the checksum from the file's first bytes
//    and its size, and that it is a regular file of at most 4 GiB, before
//    it reads the payload.
// 3. It then decodes the payload with a reader that never trusts a byte:
//    every read is bounds-checked (failure sticks, later reads yield 0),
//    every count is capped by the bytes left divided by the smallest
//    encoding of one element, every enum is range-checked, every value id
//    must name an earlier node, every shape has a bounded element count.
// 4. Last, the decoded artifact must pass verify_artifact. Any failure is a
//    DataLoss status; a corrupt file never reaches the runtime.
// verify_artifact: ir::verify_structure, plan::verify_plan, the ABI's
// limits (run-time dims, scalars, bounds within int32), then the kernel
// table: per kernel a symbol, a launch rule a device can take, buffer
// offsets inside the arena and the params (entries sharing a symbol with
// as many, and the same launch shape), steps in range, a rows range,
// scalars that exist, tensor maps inside the scratch area (aligned, not
// overlapping each other) and the params region, a library matmul's
// operands inside their buffers, its product, workspace
// and normalized rows (row length K) inside the scratch area, its norm
// kernel one of its step's; a collective's call the whole of its step,
// over contiguous parts of buffers; per step
// choices that name kernels covering it, ending in one that always applies
// and is not cooperative; a kernel over several steps chosen alike by each
// of them (the same choices before it); a module image when there are steps.
#include "artifact.h"

#include <fcntl.h>
#include <sys/stat.h>
#include <unistd.h>

#include <bit>
#include <cerrno>
#include <cstdio>
#include <cstring>
#include <map>
#include <set>
#include <utility>

#include <algorithm>

namespace gdl {
namespace {

constexpr uint8_t kMagic[8] = {'G', 'D', 'L', 'X', '\r', '\n', 0x1a, '\n'};
constexpr size_t kHeaderBytes = sizeof kMagic + 4 + 8 + 8;
// Artifacts hold no weights (params are bound at run time), so this bounds
// only what a hostile file can make a reader allocate.
constexpr uint64_t kMaxArtifactBytes = uint64_t{4} << 30;
// Bounds that keep every later size computation inside int64.
constexpr int64_t kMaxExtent = int64_t{1} << 32;
constexpr uint64_t kMaxElements = uint64_t{1} << 48;

uint64_t fnv1a64(std::span<const uint8_t> bytes) {
  uint64_t h = 0xcbf29ce484222325ull;
  for (uint8_t b : bytes) {
    h ^= b;
    h *= 0x100000001b3ull;
  }
  return h;
}

// ------------------------------------------------------------------ writer

class Writer {
 public:
  void u8(uint8_t v) { out_.push_back(v); }
  void u32(uint32_t v) { put(v, 4); }
  void u64(uint64_t v) { put(v, 8); }
  void i32(int32_t v) { u32(static_cast<uint32_t>(v)); }
  void i64(int64_t v) { u64(static_cast<uint64_t>(v)); }
  void f64(double v) { u64(std::bit_cast<uint64_t>(v)); }
  void boolean(bool v) { u8(v ? 1 : 0); }
  void length(size_t n) { u32(static_cast<uint32_t>(n)); }
  void str(const std::string& s) {
    length(s.size());
    out_.insert(out_.end(), s.begin(), s.end());
  }
  void bytes(const std::vector<uint8_t>& b) {
    length(b.size());
    out_.insert(out_.end(), b.begin(), b.end());
  }
  template <typename T, typename F>
  void vec(const std::vector<T>& v, F each) {
    length(v.size());
    for (const T& x : v) each(x);
  }
  std::vector<uint8_t>& out() { return out_; }

 private:
  void put(uint64_t v, int n) {
    for (int i = 0; i < n; ++i) out_.push_back(static_cast<uint8_t>(v >> (8 * i)));
  }
  std::vector<uint8_t> out_;
};

void write_loc(Writer& w, const SourceLoc& loc) {
  w.u32(loc.line);
  w.u32(loc.col);
}

void write_shape(Writer& w, const Shape& s) {
  w.vec(s, [&](const Dim& d) {
    w.i64(d.extent);
    w.i32(d.symbol);
  });
}

void write_graph(Writer& w, const ir::Graph& g) {
  w.str(g.program_name);
  w.str(g.group.name);
  w.i64(g.group.ranks);
  write_loc(w, g.group.loc);
  w.i64(g.target.multiprocessors);
  w.i64(g.target.shared_bytes_per_sm);
  w.vec(g.dims, [&](const DimInfo& d) {
    w.str(d.name);
    w.i64(d.lo);
    w.i64(d.hi);
    w.vec(d.buckets, [&](int64_t b) { w.i64(b); });
    w.u8(static_cast<uint8_t>(d.policy));
    w.str(d.padding_blocker);
  });
  w.vec(g.nodes, [&](const ir::Node& n) {
    w.u8(static_cast<uint8_t>(n.op));
    w.vec(n.args, [&](ir::ValueId a) { w.i32(a); });
    w.u8(static_cast<uint8_t>(n.type.dtype));
    write_shape(w, n.type.shape);
    w.f64(n.attrs.value);
    w.i32(n.attrs.axis);
    w.boolean(n.attrs.keepdims);
    w.vec(n.attrs.ints, [&](int64_t i) { w.i64(i); });
    w.str(n.name);
    write_loc(w, n.loc);
  });
  w.vec(g.outputs, [&](const ir::Output& o) {
    w.str(o.name);
    w.i32(o.value);
    write_loc(w, o.loc);
  });
  w.vec(g.state_updates, [&](const ir::StateUpdate& u) {
    w.i32(u.state);
    w.i32(u.value);
    write_loc(w, u.loc);
  });
}

void write_plan(Writer& w, const plan::Plan& p) {
  w.vec(p.buffers, [&](const plan::Buffer& b) {
    w.u8(static_cast<uint8_t>(b.region));
    w.u64(b.offset);
    w.u64(b.bytes);
    w.vec(b.terms, [&](const plan::OffsetTerm& t) {
      w.u64(t.coef);
      w.vec(t.dims, [&](int d) { w.i32(d); });
    });
  });
  auto ids = [&](const std::vector<ir::ValueId>& v) { w.vec(v, [&](ir::ValueId id) { w.i32(id); }); };
  w.vec(p.steps, [&](const plan::Step& s) {
    ids(s.values);
    w.i32(s.result);
    ids(s.reads);
    w.vec(s.deps, [&](int d) { w.i32(d); });
    w.u64(s.tickets_offset);
    w.u64(s.tickets_bytes);
    w.u64(s.scratch_offset);
    w.u64(s.scratch_bytes);
  });
  w.u64(p.arena_bytes);
  w.u64(p.params_bytes);
  w.u64(p.naive_bytes);
  w.u64(p.live_lower_bound);
  w.u64(p.scratch_bytes);
  w.vec(p.chains, [&](const plan::Chain& c) {
    w.i32(c.first);
    w.i32(c.last);
    w.i64(c.k);
    w.i64(c.row_groups);
    w.u64(c.scratch_offset);
    w.u64(c.scratch_bytes);
  });
}

void write_launch(Writer& w, const LaunchRule& rule) {
  write_shape(w, rule.work);
  w.i64(rule.items_per_block);
  w.u32(rule.grid_y);
  w.u32(rule.block);
  w.u32(rule.shared_bytes);
}

void write_kernels(Writer& w, const KernelTable& t) {
  w.vec(t.kernels, [&](const Kernel& k) {
    w.str(k.symbol);
    w.vec(k.offsets, [&](uint64_t o) { w.u64(o); });
    write_launch(w, k.launch);
    w.i32(k.first_step);
    w.i32(k.last_step);
    write_shape(w, k.rows);
    w.i64(k.min_rows);
    w.i64(k.max_rows);
    w.vec(k.scalars_used, [&](int s) { w.i32(s); });
    w.boolean(k.depends_on_dims);
    w.boolean(k.early_start);
    w.boolean(k.cooperative);
    w.vec(k.tensor_maps, [&](const TensorMap& m) {
      w.u64(m.scratch_offset);
      w.u64(m.params_offset);
      w.u32(m.element_bytes);
      w.u64(m.columns);
      w.u64(m.rows);
      w.u64(m.row_stride_bytes);
      w.u32(m.box_columns);
      w.u32(m.box_rows);
      w.u32(m.swizzle_bytes);
    });
    const LibraryMatmul& l = k.library;
    w.boolean(l.active);
    w.u8(static_cast<uint8_t>(l.dtype));
    w.boolean(l.transpose_a);
    w.boolean(l.transpose_b);
    w.i32(l.a);
    w.i32(l.b);
    w.u64(l.b_element_offset);
    w.i64(l.n);
    w.i64(l.k);
    w.i64(l.lda);
    w.i64(l.ldb);
    w.u64(l.product_offset);
    w.u64(l.workspace_offset);
    w.u64(l.workspace_bytes);
    w.i32(l.prologue_kernel);
    w.u64(l.normalized_offset);
    w.i32(k.collective);
  });
  w.vec(t.step_choices, [&](const std::vector<int>& c) { w.vec(c, [&](int k) { w.i32(k); }); });
}

void write_module(Writer& w, const CompiledModule& m) {
  w.str(m.arch);
  w.vec(m.units, [&](const ModuleUnit& u) {
    w.vec(u.symbols, [&](const std::string& symbol) { w.str(symbol); });
    w.bytes(u.cubin);
    w.str(u.ptx);
  });
  w.i32(m.nvrtc_major);
  w.i32(m.nvrtc_minor);
  w.boolean(m.from_cache);
  w.f64(m.compile_ms);
}

// ------------------------------------------------------------------ reader

// Bounds-checked decoding. The first failure is kept; afterwards every read
// returns zero and every count is zero, so decoding runs to its end safely.
class Reader {
 public:
  explicit Reader(std::span<const uint8_t> data) : data_(data) {}

  bool failed() const { return !error_.empty(); }
  const std::string& error() const { return error_; }
  size_t left() const { return data_.size() - pos_; }
  void fail(std::string why) {
    if (error_.empty()) error_ = std::move(why);
  }

  uint8_t u8() { return static_cast<uint8_t>(get(1)); }
  uint32_t u32() { return static_cast<uint32_t>(get(4)); }
  uint64_t u64() { return get(8); }
  int32_t i32() { return static_cast<int32_t>(u32()); }
  int64_t i64() { return static_cast<int64_t>(u64()); }
  double f64() { return std::bit_cast<double>(u64()); }
  bool boolean(const char* what) {
    uint8_t v = u8();
    if (v > 1) fail(std::string(what) + " is " + std::to_string(v) + ", not 0 or 1");
    return v == 1;
  }
  // An enum stored as u8 whose largest valid value is `last`.
  template <typename E>
  E enumeration(E last, const char* what) {
    uint8_t v = u8();
    if (v > static_cast<uint8_t>(last)) fail(std::string("unknown ") + what + " " + std::to_string(v));
    return failed() ? E{} : static_cast<E>(v);
  }
  // A vector length; each element takes at least `min_bytes` bytes.
  size_t count(size_t min_bytes, const char* what) {
    uint32_t n = u32();
    if (failed()) return 0;
    if (n > left() / min_bytes) {
      fail(std::string(what) + " count " + std::to_string(n) + " exceeds the bytes left");
      return 0;
    }
    return n;
  }
  std::string str(const char* what) {
    size_t n = count(1, what);
    if (failed()) return {};
    std::string s(reinterpret_cast<const char*>(data_.data() + pos_), n);
    pos_ += n;
    return s;
  }
  std::vector<uint8_t> bytes(const char* what) {
    size_t n = count(1, what);
    if (failed()) return {};
    std::vector<uint8_t> b(data_.begin() + static_cast<std::ptrdiff_t>(pos_),
                           data_.begin() + static_cast<std::ptrdiff_t>(pos_ + n));
    pos_ += n;
    return b;
  }

 private:
  uint64_t get(size_t n) {
    if (failed()) return 0;
    if (left() < n) {
      fail("it ends inside a field");
      return 0;
    }
    uint64_t v = 0;
    for (size_t i = 0; i < n; ++i) v |= static_cast<uint64_t>(data_[pos_ + i]) << (8 * i);
    pos_ += n;
    return v;
  }

  std::span<const uint8_t> data_;
  size_t pos_ = 0;
  std::string error_;
};

SourceLoc read_loc(Reader& r) {
  SourceLoc loc;
  loc.line = r.u32();
  loc.col = r.u32();
  return loc;
}

// A shape whose dims name declared run-time dims and whose largest element
// count stays far inside int64.
Shape read_shape(Reader& r, const std::vector<DimInfo>& dims, const std::string& where) {
  Shape s(r.count(12, "shape rank"));
  if (s.size() > static_cast<size_t>(kMaxRank)) r.fail(where + ": rank " + std::to_string(s.size()) + " exceeds " + std::to_string(kMaxRank));
  uint64_t elements = 1;
  for (Dim& d : s) {
    if (r.failed()) break;
    d.extent = r.i64();
    d.symbol = r.i32();
    if (d.symbol < -1 || d.symbol >= static_cast<int>(dims.size()))
      r.fail(where + ": run-time dim #" + std::to_string(d.symbol) + " is not declared");
    if (d.extent < 0 || d.extent > kMaxExtent) r.fail(where + ": extent " + std::to_string(d.extent) + " is out of range");
    if (r.failed()) break;
    auto extent = static_cast<uint64_t>(d.is_runtime() ? dims[static_cast<size_t>(d.symbol)].hi : d.extent);
    if (extent == 0) continue;
    if (elements > kMaxElements / extent) r.fail(where + ": the shape holds too many elements");
    elements *= extent;
  }
  return s;
}

ir::Graph read_graph(Reader& r) {
  ir::Graph g;
  g.program_name = r.str("program name");
  g.group.name = r.str("group name");
  g.group.ranks = r.i64();
  g.group.loc = read_loc(r);
  if (g.group.ranks < 0 || g.group.ranks > ir::kMaxGroupRanks) r.fail("the process group's size is out of range");
  g.target.multiprocessors = r.i64();
  g.target.shared_bytes_per_sm = r.i64();
  if (g.target.multiprocessors < 1 || g.target.multiprocessors > 4096 || g.target.shared_bytes_per_sm < 16 * 1024 ||
      g.target.shared_bytes_per_sm > (int64_t{16} << 20))
    r.fail("the target GPU's multiprocessors or shared memory are out of range");
  g.dims.resize(r.count(22, "dim"));
  for (DimInfo& d : g.dims) {
    if (r.failed()) break;
    d.name = r.str("dim name");
    d.lo = r.i64();
    d.hi = r.i64();
    if (d.lo < 0 || d.hi < d.lo || d.hi > kMaxExtent) r.fail("dim " + d.name + " has bounds out of range");
    d.buckets.resize(r.count(8, "bucket"));
    for (int64_t& b : d.buckets) b = r.i64();
    d.policy = r.enumeration(DimPolicy::kUpdate, "dim policy");
    d.padding_blocker = r.str("padding blocker");
  }
  g.nodes.resize(r.count(39, "node"));
  for (size_t i = 0; i < g.nodes.size() && !r.failed(); ++i) {
    ir::Node& n = g.nodes[i];
    std::string where = "node %" + std::to_string(i);
    n.op = r.enumeration(static_cast<ir::Op>(ir::kOpCount - 1), "op");
    n.args.resize(r.count(4, "argument"));
    for (ir::ValueId& a : n.args) {
      a = r.i32();
      if (!r.failed() && (a < 0 || static_cast<size_t>(a) >= i))
        r.fail(where + " reads %" + std::to_string(a) + ", which does not precede it");
    }
    n.type.dtype = r.enumeration(DType::kBool, "dtype");
    n.type.shape = read_shape(r, g.dims, where);
    n.attrs.value = r.f64();
    n.attrs.axis = r.i32();
    n.attrs.keepdims = r.boolean("keepdims");
    n.attrs.ints.resize(r.count(8, "int attribute"));
    for (int64_t& v : n.attrs.ints) v = r.i64();
    n.name = r.str("node name");
    n.loc = read_loc(r);
  }
  g.outputs.resize(r.count(16, "output"));
  for (ir::Output& o : g.outputs) {
    if (r.failed()) break;
    o.name = r.str("output name");
    o.value = r.i32();
    if (!r.failed() && (o.value < 0 || static_cast<size_t>(o.value) >= g.nodes.size()))
      r.fail("output '" + o.name + "' names %" + std::to_string(o.value) + ", which does not exist");
    o.loc = read_loc(r);
  }
  g.state_updates.resize(r.count(16, "state update"));
  for (ir::StateUpdate& u : g.state_updates) {
    if (r.failed()) break;
    u.state = r.i32();
    u.value = r.i32();
    u.loc = read_loc(r);
  }
  return g;
}

std::vector<ir::ValueId> read_ids(Reader& r, size_t value_count, const std::string& where) {
  std::vector<ir::ValueId> ids(r.count(4, "value id"));
  for (ir::ValueId& id : ids) {
    id = r.i32();
    if (!r.failed() && (id < 0 || static_cast<size_t>(id) >= value_count))
      r.fail(where + " names %" + std::to_string(id) + ", which does not exist");
  }
  return ids;
}

void read_plan(Reader& r, plan::Plan& p) {
  size_t values = p.graph.nodes.size();
  p.buffers.resize(r.count(21, "buffer"));
  if (!r.failed() && p.buffers.size() != values)
    r.fail(std::to_string(p.buffers.size()) + " buffers for " + std::to_string(values) + " values");
  for (plan::Buffer& b : p.buffers) {
    if (r.failed()) break;
    b.region = r.enumeration(plan::Region::kNone, "region");
    b.offset = r.u64();
    b.bytes = r.u64();
    // Offset terms: each names run-time dims (verify_plan proves the rest:
    // no overflow at the upper bounds, the view where its elements are).
    b.terms.resize(r.count(12, "offset term"));
    for (plan::OffsetTerm& t : b.terms) {
      t.coef = r.u64();
      t.dims.resize(r.count(4, "offset term dim"));
      for (int& d : t.dims) {
        d = r.i32();
        if (!r.failed() && (d < 0 || static_cast<size_t>(d) >= p.graph.dims.size()))
          r.fail("an offset term names run-time dim " + std::to_string(d) + ", which does not exist");
      }
    }
  }
  p.steps.resize(r.count(48, "step"));
  for (size_t s = 0; s < p.steps.size() && !r.failed(); ++s) {
    plan::Step& st = p.steps[s];
    std::string where = "step " + std::to_string(s);
    st.values = read_ids(r, values, where);
    st.result = r.i32();
    if (!r.failed() && (st.result < 0 || static_cast<size_t>(st.result) >= values))
      r.fail(where + " writes %" + std::to_string(st.result) + ", which does not exist");
    st.reads = read_ids(r, values, where);
    st.deps.resize(r.count(4, "dep"));
    for (int& d : st.deps) {
      d = r.i32();
      if (!r.failed() && (d < 0 || static_cast<size_t>(d) >= s)) r.fail(where + " waits for a step that is not earlier");
    }
    st.tickets_offset = r.u64();
    st.tickets_bytes = r.u64();
    st.scratch_offset = r.u64();
    st.scratch_bytes = r.u64();
  }
  p.arena_bytes = r.u64();
  p.params_bytes = r.u64();
  p.naive_bytes = r.u64();
  p.live_lower_bound = r.u64();
  p.scratch_bytes = r.u64();
  p.chains.resize(r.count(40, "chain"));
  for (plan::Chain& c : p.chains) {  // verify_plan judges them
    c.first = r.i32();
    c.last = r.i32();
    c.k = r.i64();
    c.row_groups = r.i64();
    c.scratch_offset = r.u64();
    c.scratch_bytes = r.u64();
  }
}

LaunchRule read_launch(Reader& r, const ir::Graph& g, const std::string& where) {
  LaunchRule rule;
  rule.work = read_shape(r, g.dims, where);
  rule.items_per_block = r.i64();
  rule.grid_y = r.u32();
  rule.block = r.u32();
  rule.shared_bytes = r.u32();
  if (!r.failed() && (rule.items_per_block < 1 || rule.grid_y < 1 || rule.block < 1 || rule.block > 1024))
    r.fail(where + " has an impossible launch rule");
  return rule;
}

// Counts and ranges only; verify_artifact judges the values.
KernelTable read_kernels(Reader& r, const ir::Graph& g) {
  KernelTable t;
  t.kernels.resize(r.count(71, "kernel"));
  for (size_t i = 0; i < t.kernels.size() && !r.failed(); ++i) {
    Kernel& k = t.kernels[i];
    const std::string where = "kernel " + std::to_string(i);
    k.symbol = r.str("kernel symbol");
    k.offsets.resize(r.count(8, "kernel offset"));
    for (uint64_t& o : k.offsets) o = r.u64();
    k.launch = read_launch(r, g, where);
    k.first_step = r.i32();
    k.last_step = r.i32();
    k.rows = read_shape(r, g.dims, where + "'s rows");
    k.min_rows = r.i64();
    k.max_rows = r.i64();
    k.scalars_used.resize(r.count(4, "scalar index"));
    for (int& s : k.scalars_used) s = r.i32();
    k.depends_on_dims = r.boolean("depends_on_dims");
    k.early_start = r.boolean("early_start");
    k.cooperative = r.boolean("cooperative");
    k.tensor_maps.resize(r.count(64, "tensor map"));
    for (TensorMap& m : k.tensor_maps) {
      m.scratch_offset = r.u64();
      m.params_offset = r.u64();
      m.element_bytes = r.u32();
      m.columns = r.u64();
      m.rows = r.u64();
      m.row_stride_bytes = r.u64();
      m.box_columns = r.u32();
      m.box_rows = r.u32();
      m.swizzle_bytes = r.u32();
    }
    LibraryMatmul& l = k.library;
    l.active = r.boolean("library matmul");
    l.dtype = r.enumeration(DType::kBool, "library matmul dtype");
    l.transpose_a = r.boolean("transpose_a");
    l.transpose_b = r.boolean("transpose_b");
    l.a = r.i32();
    l.b = r.i32();
    l.b_element_offset = r.u64();
    l.n = r.i64();
    l.k = r.i64();
    l.lda = r.i64();
    l.ldb = r.i64();
    l.product_offset = r.u64();
    l.workspace_offset = r.u64();
    l.workspace_bytes = r.u64();
    l.prologue_kernel = r.i32();
    l.normalized_offset = r.u64();
    k.collective = r.i32();
  }
  t.step_choices.resize(r.count(4, "step's choices"));
  for (std::vector<int>& c : t.step_choices) {
    if (r.failed()) break;
    c.resize(r.count(4, "choice"));
    for (int& k : c) k = r.i32();
  }
  return t;
}

CompiledModule read_module(Reader& r) {
  CompiledModule m;
  m.arch = r.str("arch");
  m.units.resize(r.count(12, "module unit"));
  for (ModuleUnit& u : m.units) {
    if (r.failed()) break;
    u.symbols.resize(r.count(4, "unit symbol"));
    for (std::string& symbol : u.symbols) symbol = r.str("symbol");
    u.cubin = r.bytes("cubin");
    u.ptx = r.str("ptx");
  }
  m.nvrtc_major = r.i32();
  m.nvrtc_minor = r.i32();
  m.from_cache = r.boolean("from_cache");
  m.compile_ms = r.f64();
  return m;
}

// A kernel's cuBLASLt product (kernel_table.h LibraryMatmul): a float
// dtype; a and b buffers that hold every element the call reads at the
// largest rows; the product and workspace inside the scratch area.
std::string verify_library_matmul(const plan::Plan& p, const KernelTable& t, const Kernel& k) {
  const LibraryMatmul& l = k.library;
  const ir::Graph& g = p.graph;
  if (l.dtype != DType::kF16 && l.dtype != DType::kBF16 && l.dtype != DType::kF32)
    return "has a library matmul of a dtype cuBLASLt does not take here";
  if (k.first_step != k.last_step) return "has a library matmul over several steps";
  const int64_t rows = max_element_count(k.rows, g.dims);
  const bool sizes_ok = k.rows.size() >= 1 && rows >= 1 && l.n >= 1 && l.k >= 1 && l.n <= INT32_MAX &&
                        l.k <= INT32_MAX && rows <= INT32_MAX && l.lda >= (l.transpose_a ? rows : l.k) &&
                        l.ldb >= (l.transpose_b ? l.k : l.n) && l.lda <= INT32_MAX && l.ldb <= INT32_MAX;
  if (!sizes_ok) return "has a library matmul of impossible sizes";
  const uint64_t esize = dtype_size(l.dtype);
  const auto holds = [&](int32_t v, uint64_t first, int64_t lines, int64_t line_length, int64_t ld) {
    if (v < 0 || static_cast<size_t>(v) >= p.buffers.size() || static_cast<size_t>(v) >= g.nodes.size()) return false;
    const plan::Buffer& b = p.buffers[static_cast<size_t>(v)];
    if (b.region != plan::Region::kArena && b.region != plan::Region::kParams) return false;
    if (dtype_size(g.node(v).type.dtype) != esize) return false;
    const uint64_t span = (static_cast<uint64_t>(lines) - 1) * static_cast<uint64_t>(ld) + static_cast<uint64_t>(line_length);
    return first <= b.bytes / esize && span <= b.bytes / esize - first;
  };
  if (!holds(l.a, 0, l.transpose_a ? l.k : rows, l.transpose_a ? rows : l.k, l.lda) ||
      !holds(l.b, l.b_element_offset, l.transpose_b ? l.n : l.k, l.transpose_b ? l.k : l.n, l.ldb))
    return "has a library matmul that reads outside its operands";
  const uint64_t begin = p.arena_bytes, end = p.arena_bytes + p.scratch_bytes;
  const auto inside = [&](uint64_t offset, uint64_t bytes) {
    return offset % plan::kAlignment == 0 && offset >= begin && offset <= end && bytes <= end - offset;
  };
  if (!inside(l.product_offset, static_cast<uint64_t>(rows) * static_cast<uint64_t>(l.n) * esize) ||
      !inside(l.workspace_offset, l.workspace_bytes))
    return "puts a library matmul's product or workspace outside the scratch area";
  if (l.prologue_kernel >= 0) {
    if (static_cast<size_t>(l.prologue_kernel) >= t.kernels.size() ||
        t.kernels[static_cast<size_t>(l.prologue_kernel)].first_step != k.first_step ||
        t.kernels[static_cast<size_t>(l.prologue_kernel)].last_step != k.first_step ||
        t.kernels[static_cast<size_t>(l.prologue_kernel)].library.active ||
        t.kernels[static_cast<size_t>(l.prologue_kernel)].cooperative || l.transpose_a || l.lda != l.k)
      return "has a library matmul whose norm prologue is not a kernel of its step";
    if (!inside(l.normalized_offset, static_cast<uint64_t>(rows) * static_cast<uint64_t>(l.k) * esize))
      return "puts a library matmul's normalized rows outside the scratch area";
  } else if (l.prologue_kernel != -1) {
    return "has a library matmul with a malformed norm prologue";
  }
  return "";
}

// A collective's NCCL call (kernel_table.h Kernel::collective): the result
// of its one step, a collective over contiguous parts whose argument and
// result have buffers of their own; nothing of a kernel about it.
std::string verify_collective_call(const plan::Plan& p, const Kernel& k) {
  const ir::Graph& g = p.graph;
  if (k.collective < 0 || static_cast<size_t>(k.collective) >= g.nodes.size()) return "names a value that does not exist";
  const ir::Node& n = g.node(k.collective);
  if (n.op != ir::Op::kAllReduce && n.op != ir::Op::kAllGather && n.op != ir::Op::kReduceScatter)
    return "names a value that is no collective";
  if (k.first_step < 0 || k.first_step != k.last_step || static_cast<size_t>(k.first_step) >= p.steps.size() ||
      p.steps[static_cast<size_t>(k.first_step)].result != k.collective ||
      p.steps[static_cast<size_t>(k.first_step)].values.size() != 1)
    return "is not the whole of its step";
  const LaunchRule none;
  if (!k.symbol.empty() || !k.offsets.empty() || k.cooperative || k.early_start || !k.tensor_maps.empty() || k.library.active ||
      k.library.prologue_kernel != -1 || !applies_always(k) || !k.rows.empty() || !k.scalars_used.empty() ||
      !(k.launch.work == none.work) || k.launch.items_per_block != none.items_per_block ||
      k.launch.grid_y != none.grid_y || k.launch.block != none.block || k.launch.shared_bytes != none.shared_bytes)
    return "has the fields of a kernel";
  if (n.type.dtype == DType::kBool) return "moves bool values, which NCCL has no type for";
  const auto stored = [&](ir::ValueId v, bool arena_only) {
    const plan::Region r = p.buffers[static_cast<size_t>(v)].region;
    return r == plan::Region::kArena || (!arena_only && r == plan::Region::kParams);
  };
  if (n.args.size() != 1 || !stored(n.args[0], false) || !stored(k.collective, true))
    return "has an argument or result without a buffer";
  if (g.group.ranks < 1) return "runs in a program without a process group";
  // The call moves the argument's element count (all_gather: per rank; reduce_scatter: ranks times the result's).
  const TensorType& x = g.node(n.args[0]).type;
  const auto axis = static_cast<size_t>(n.attrs.axis), rank = static_cast<size_t>(x.rank());
  bool fits = x.dtype == n.type.dtype && x.rank() == n.type.rank() && (n.op == ir::Op::kAllReduce || axis < rank);
  for (size_t i = 0; fits && i < rank; ++i) {
    const Dim &a = x.shape[i], &b = n.type.shape[i];
    if (n.op == ir::Op::kAllReduce || i != axis) {
      fits = a == b;
    } else {
      const Dim& part = n.op == ir::Op::kAllGather ? a : b;
      const Dim& whole = n.op == ir::Op::kAllGather ? b : a;
      fits = !a.is_runtime() && !b.is_runtime() && part.extent * g.group.ranks == whole.extent;
    }
    if (fits && n.op != ir::Op::kAllReduce && i < axis) fits = !a.is_runtime() && a.extent == 1;
  }
  return fits ? "" : "moves parts that do not fit its argument and result (or are not contiguous)";
}

uint64_t read_le(const uint8_t* p, int n) {
  uint64_t v = 0;
  for (int i = 0; i < n; ++i) v |= static_cast<uint64_t>(p[i]) << (8 * i);
  return v;
}

}  // namespace

// The units of the module: each with code and kernels, every symbol defined
// once, every kernel of the table (and the input copy) in some unit.
std::string verify_module(const Artifact& a) {
  if (a.plan.steps.empty() && a.kernels.kernels.empty()) return "";
  std::set<std::string> defined;
  for (size_t u = 0; u < a.module.units.size(); ++u) {
    const ModuleUnit& unit = a.module.units[u];
    if (unit.cubin.empty() && unit.ptx.empty()) return "module unit " + std::to_string(u) + " has neither CUBIN nor PTX";
    if (unit.symbols.empty()) return "module unit " + std::to_string(u) + " defines no kernel";
    for (const std::string& symbol : unit.symbols)
      if (!defined.insert(symbol).second) return "kernel '" + symbol + "' is in two module units";
  }
  if (!defined.count(kInputCopySymbol)) return "no module unit defines the input copy kernel";
  for (const Kernel& k : a.kernels.kernels)
    if (!k.is_collective() && !defined.count(k.symbol)) return "no module unit defines kernel '" + k.symbol + "'";
  return "";
}

std::string verify_artifact(const Artifact& a) {
  const plan::Plan& p = a.plan;
  const ir::Graph& g = p.graph;
  if (std::string problem = ir::verify_structure(g); !problem.empty()) return "holds an invalid graph: " + problem;
  if (std::string problem = plan::verify_plan(p); !problem.empty()) return "holds an unsound plan: " + problem;

  // The kernel ABI: gdl_args holds kMaxRuntimeDims ints and kMaxScalars values.
  if (g.dims.size() > static_cast<size_t>(kMaxRuntimeDims))
    return "has " + std::to_string(g.dims.size()) + " run-time dims; the kernel ABI holds " +
           std::to_string(kMaxRuntimeDims);
  for (const DimInfo& d : g.dims)
    if (d.hi > INT32_MAX) return "dim " + d.name + " has an upper bound above 2^31-1";
  const size_t scalar_count = g.leaves(ir::Op::kScalar).size();
  if (scalar_count > static_cast<size_t>(kMaxScalars))
    return "has " + std::to_string(scalar_count) + " run-time scalars; the kernel ABI holds " +
           std::to_string(kMaxScalars);

  // The kernel table.
  const KernelTable& t = a.kernels;
  const size_t steps = p.steps.size();
  const uint64_t scratch_begin = p.arena_bytes, scratch_end = p.arena_bytes + p.scratch_bytes;
  std::vector<std::pair<uint64_t, uint64_t>> maps;  // every tensor map's bytes
  std::map<std::string, size_t> first_of_symbol;  // a symbol's first kernel
  const uint64_t regions_end = std::max(scratch_end, p.params_bytes);  // a kernel's offsets lie below it
  for (size_t i = 0; i < t.kernels.size(); ++i) {
    const Kernel& k = t.kernels[i];
    const std::string where = "kernel " + std::to_string(i) + " ('" + k.symbol + "')";
    if (k.is_collective()) {
      if (std::string problem = verify_collective_call(p, k); !problem.empty())
        return "kernel " + std::to_string(i) + " (a collective) " + problem;
      continue;
    }
    if (k.symbol.empty()) return "kernel " + std::to_string(i) + " has no symbol";
    const LaunchRule& r = k.launch;
    if (r.block < 1 || r.block > 1024 || r.grid_y < 1 || r.grid_y > 65535 || r.items_per_block < 1)
      return where + " has an impossible launch rule";
    if (k.offsets.size() > static_cast<size_t>(kMaxKernelOffsets)) return where + " has too many buffer offsets";
    for (uint64_t o : k.offsets)
      if (o > regions_end) return where + " has a buffer offset past the arena and the params";
    // Entries that run one kernel of the module (kernel_sharing.h) agree on
    // what the kernel's code fixes: its offsets' count and its launch shape.
    if (auto [first, added] = first_of_symbol.emplace(k.symbol, i); !added) {
      const Kernel& o = t.kernels[first->second];
      if (o.offsets.size() != k.offsets.size() || o.launch.block != r.block || o.launch.grid_y != r.grid_y ||
          o.launch.shared_bytes != r.shared_bytes || o.cooperative != k.cooperative)
        return where + " shares its kernel with kernel " + std::to_string(first->second) + " but not its launch";
    }
    if (k.first_step < 0 || k.last_step < k.first_step || static_cast<size_t>(k.last_step) >= steps)
      return where + " computes steps that the plan does not have";
    if (k.min_rows < 0 || k.max_rows < k.min_rows) return where + " has an empty rows range";
    for (int s : k.scalars_used)
      if (s < 0 || static_cast<size_t>(s) >= scalar_count) return where + " uses a scalar that does not exist";
    for (const TensorMap& m : k.tensor_maps) {
      const bool swizzle_ok = m.swizzle_bytes == 0 || m.swizzle_bytes == 32 || m.swizzle_bytes == 64 || m.swizzle_bytes == 128;
      const bool shape_ok = (m.element_bytes == 1 || m.element_bytes == 2 || m.element_bytes == 4) && m.columns > 0 &&
                            m.rows > 0 && m.columns <= (uint64_t{1} << 32) && m.rows <= (uint64_t{1} << 32) &&
                            m.row_stride_bytes >= m.columns * m.element_bytes && m.row_stride_bytes % 16 == 0 &&
                            m.box_columns >= 1 && m.box_columns <= 256 && m.box_rows >= 1 && m.box_rows <= 256 &&
                            m.box_columns <= m.columns && m.box_rows <= m.rows;
      if (!swizzle_ok || !shape_ok) return where + " has a malformed tensor map";
      if (m.scratch_offset % 64 != 0 || m.scratch_offset < scratch_begin || m.scratch_offset > scratch_end ||
          kTensorMapBytes > scratch_end - m.scratch_offset)
        return where + " puts a tensor map outside the scratch area";
      const uint64_t tensor_bytes = (m.rows - 1) * m.row_stride_bytes + m.columns * m.element_bytes;
      if (m.params_offset % 16 != 0 || m.params_offset > p.params_bytes || tensor_bytes > p.params_bytes - m.params_offset)
        return where + " maps a tensor outside the params region";
      maps.push_back({m.scratch_offset, m.scratch_offset + kTensorMapBytes});
    }
    if (k.library.active) {
      if (std::string problem = verify_library_matmul(p, t, k); !problem.empty()) return where + " " + problem;
    } else if (k.library.prologue_kernel != -1) {  // the runtime reads the prologue of active ones only; keep it so
      return where + " has library matmul fields but no library matmul";
    }
  }
  std::sort(maps.begin(), maps.end());
  for (size_t i = 1; i < maps.size(); ++i)
    if (maps[i].first < maps[i - 1].second) return "has two tensor maps in the same bytes";
  for (size_t i = 0; i < t.kernels.size(); ++i) {
    const Kernel& k = t.kernels[i];
    for (int s = k.first_step; s < k.last_step + 1 && k.first_step != k.last_step; ++s) {
      const std::vector<int>* c = static_cast<size_t>(s) < t.step_choices.size() ? &t.step_choices[static_cast<size_t>(s)] : nullptr;
      if (!c || std::find(c->begin(), c->end(), static_cast<int>(i)) == c->end())
        return "kernel '" + k.symbol + "' computes step " + std::to_string(s) + ", which never chooses it";
    }
  }
  if (t.step_choices.size() != steps)
    return "has kernel choices for " + std::to_string(t.step_choices.size()) + " steps, the plan " + std::to_string(steps);
  for (size_t s = 0; s < steps; ++s) {
    const std::vector<int>& choices = t.step_choices[s];
    const std::string where = "step " + std::to_string(s);
    if (choices.empty()) return where + " has no kernel";
    for (int c : choices) {
      if (c < 0 || static_cast<size_t>(c) >= t.kernels.size()) return where + " chooses a kernel that does not exist";
      const Kernel& k = t.kernels[static_cast<size_t>(c)];
      if (static_cast<size_t>(k.first_step) > s || static_cast<size_t>(k.last_step) < s)
        return where + " chooses kernel '" + k.symbol + "', which does not compute it";
    }
    const Kernel& last = t.kernels[static_cast<size_t>(choices.back())];
    if (!applies_always(last) || last.cooperative || last.library.active || last.first_step != last.last_step)
      return where + "'s last kernel choice ('" + last.symbol + "') does not run it at every binding on every device";
    // A kernel of several steps is a node for all of them: every one of
    // them must reach it through the same choices.
    for (size_t i = 0; i < choices.size(); ++i) {
      const Kernel& k = t.kernels[static_cast<size_t>(choices[i])];
      if (k.first_step == k.last_step || static_cast<size_t>(k.first_step) == s) continue;
      const std::vector<int>& first = t.step_choices[static_cast<size_t>(k.first_step)];
      if (first.size() <= i || !std::equal(choices.begin(), choices.begin() + static_cast<std::ptrdiff_t>(i) + 1,
                                           first.begin()))
        return where + " reaches kernel '" + k.symbol + "' through other choices than its first step";
    }
  }
  return verify_module(a);
}

std::vector<uint8_t> serialize_artifact(const Artifact& a) {
  Writer payload;
  write_graph(payload, a.plan.graph);
  write_plan(payload, a.plan);
  write_kernels(payload, a.kernels);
  write_module(payload, a.module);
  payload.str(a.cuda_source);

  Writer file;
  for (uint8_t b : kMagic) file.u8(b);
  file.u32(kArtifactVersion);
  file.u64(payload.out().size());
  file.u64(fnv1a64(payload.out()));
  std::vector<uint8_t>& out = file.out();
  out.insert(out.end(), payload.out().begin(), payload.out().end());
  return std::move(out);
}

namespace {

// The header's checks, from its first min(file_size, kHeaderBytes) bytes and
// the whole file's size, so a reader can refuse a file before reading it.
Status check_header(std::span<const uint8_t> head, uint64_t file_size) {
  if (file_size == 0) return Status::DataLoss("artifact is truncated: the file is empty");
  size_t magic_seen = std::min(head.size(), sizeof kMagic);
  if (std::memcmp(head.data(), kMagic, magic_seen) != 0) return Status::DataLoss("not a gdl artifact (bad magic)");
  if (file_size < kHeaderBytes)
    return Status::DataLoss("artifact is truncated: " + std::to_string(file_size) + " bytes, the header alone is " +
                            std::to_string(kHeaderBytes));
  auto version = static_cast<uint32_t>(read_le(head.data() + 8, 4));
  if (version != kArtifactVersion)
    return Status::DataLoss("artifact format version " + std::to_string(version) + ", this gdl reads version " +
                            std::to_string(kArtifactVersion) + ": recompile the program with this gdlc");
  uint64_t payload_size = read_le(head.data() + 12, 8);
  uint64_t payload_have = file_size - kHeaderBytes;
  if (payload_have < payload_size)
    return Status::DataLoss("artifact is truncated: " + std::to_string(payload_have) + " of " +
                            std::to_string(payload_size) + " payload bytes");
  if (payload_have > payload_size)
    return Status::DataLoss("artifact has " + std::to_string(payload_have - payload_size) +
                            " bytes after its payload: the file is corrupt");
  return Status::Ok();
}

}  // namespace

Expected<Artifact> deserialize_artifact(std::span<const uint8_t> bytes) {
  // 2. Header.
  if (Status header = check_header(bytes.first(std::min(bytes.size(), kHeaderBytes)), bytes.size()); !header.ok())
    return header;
  uint64_t checksum = read_le(bytes.data() + 20, 8);
  std::span<const uint8_t> payload = bytes.subspan(kHeaderBytes);
  if (fnv1a64(payload) != checksum) return Status::DataLoss("artifact checksum mismatch: the file is corrupt");

  // 3. Payload.
  Reader r(payload);
  Artifact a;
  a.plan.graph = read_graph(r);
  read_plan(r, a.plan);
  a.kernels = read_kernels(r, a.plan.graph);
  a.module = read_module(r);
  a.cuda_source = r.str("cuda source");
  if (!r.failed() && r.left() != 0) r.fail(std::to_string(r.left()) + " bytes are left over");
  if (r.failed()) return Status::DataLoss("artifact payload is malformed: " + r.error());

  // 4. Meaning.
  if (std::string problem = verify_artifact(a); !problem.empty()) return Status::DataLoss("artifact " + problem);
  return a;
}

namespace {

// Closes a file descriptor when it goes out of scope.
struct FileDescriptor {
  int fd = -1;
  ~FileDescriptor() {
    if (fd >= 0) ::close(fd);
  }
};

// Reads exactly `size` bytes at the file's current offset.
bool read_exactly(int fd, uint8_t* out, size_t size) {
  while (size > 0) {
    ssize_t got = ::read(fd, out, std::min<size_t>(size, size_t{1} << 30));
    if (got < 0 && errno == EINTR) continue;
    if (got <= 0) return false;
    out += got;
    size -= static_cast<size_t>(got);
  }
  return true;
}

}  // namespace

Status write_artifact(const std::string& path, const Artifact& a) {
  // Write beside the target and rename, so a reader never sees half a file.
  // The rename would replace whatever the path names, so a device (/dev/null),
  // a directory or a symbolic link there is refused rather than replaced.
  const std::string temp = path + ".tmp";
  for (const std::string* p : {&path, &temp}) {
    struct stat info;
    if (::lstat(p->c_str(), &info) == 0 && !S_ISREG(info.st_mode))
      return Status::InvalidArgument("cannot write artifact '" + path + "': '" + *p +
                                     "' exists and is not a regular file (a device, directory or link)");
  }
  std::vector<uint8_t> bytes = serialize_artifact(a);
  std::FILE* f = nullptr;
  if (int fd = ::open(temp.c_str(), O_WRONLY | O_CREAT | O_TRUNC | O_NOFOLLOW | O_CLOEXEC, 0666); fd >= 0) {
    f = ::fdopen(fd, "wb");
    if (!f) ::close(fd);
  }
  if (!f) return Status::InvalidArgument("cannot write artifact '" + path + "': " + std::strerror(errno));
  bool written = std::fwrite(bytes.data(), 1, bytes.size(), f) == bytes.size();
  bool closed = std::fclose(f) == 0;
  if (!written || !closed) {
    int err = errno;
    std::remove(temp.c_str());
    return Status::InvalidArgument("cannot write artifact '" + path + "': " + std::strerror(err));
  }
  if (std::rename(temp.c_str(), path.c_str()) != 0) {
    int err = errno;
    std::remove(temp.c_str());
    return Status::InvalidArgument("cannot write artifact '" + path + "': " + std::strerror(err));
  }
  return Status::Ok();
}

Expected<Artifact> read_artifact(const std::string& path) {
  FileDescriptor file{::open(path.c_str(), O_RDONLY | O_CLOEXEC)};
  if (file.fd < 0) {
    int err = errno;
    std::string why = "cannot open artifact '" + path + "': " + std::strerror(err);
    return err == ENOENT ? Status::NotFound(why) : Status::InvalidArgument(why);
  }
  // The size and the header before the rest, so a device (/dev/zero), a
  // directory or a large file that is no artifact is never read whole.
  struct stat info;
  if (::fstat(file.fd, &info) != 0)
    return Status::InvalidArgument("cannot read artifact '" + path + "': " + std::strerror(errno));
  if (!S_ISREG(info.st_mode)) return Status::InvalidArgument("'" + path + "' is not a regular file, so not an artifact");
  const auto size = static_cast<uint64_t>(info.st_size);
  std::vector<uint8_t> bytes(std::min<uint64_t>(size, kHeaderBytes));
  if (!read_exactly(file.fd, bytes.data(), bytes.size()))
    return Status::InvalidArgument("cannot read artifact '" + path + "'");
  if (Status header = check_header(bytes, size); !header.ok())
    return Status(header.code(), "'" + path + "': " + header.message());
  if (size > kMaxArtifactBytes)
    return Status::InvalidArgument("'" + path + "' holds " + std::to_string(size) + " bytes; an artifact holds at most " +
                                   std::to_string(kMaxArtifactBytes >> 30) + " GiB");
  bytes.resize(size);
  if (!read_exactly(file.fd, bytes.data() + kHeaderBytes, size - kHeaderBytes))
    return Status::InvalidArgument("cannot read artifact '" + path + "'");
  Expected<Artifact> a = deserialize_artifact(bytes);
  if (!a.ok()) return Status(a.status().code(), "'" + path + "': " + a.status().message());
  return a;
}

}  // namespace gdl
