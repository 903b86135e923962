// generate_program (program_gen.h).
//
// 1. Declare 0-2 run-time dims (random bounds and policy) and a few inputs
//    over them (the dim as axis 0) and over small static extents.
// 2. Add statements one at a time: pick a kind (elementwise, jump op on an
//    exact value, cast, reduction, norm, matmul, data movement, gather,
//    state update, random draw, attention), pick operands of fitting type
//    from the pool, or declare a new input or param that fits. A kind that
//    finds nothing to work on is skipped.
// 3. Outputs: the last statements, preferring those nothing reads.
// Every statement records the names it reads, so a shrinker can drop it.
#include "fuzz/program_gen.h"

#include <algorithm>
#include <cmath>
#include <functional>
#include <map>
#include <optional>
#include <random>
#include <set>

namespace gdl::fuzz {

std::string GenType::text() const {
  if (shape.empty()) return dtype;  // rank 0
  std::string s = dtype + "[";
  for (size_t i = 0; i < shape.size(); ++i)
    s += (i ? ", " : "") + (shape[i].runtime.empty() ? std::to_string(shape[i].extent) : shape[i].runtime);
  return s + "]";
}

std::string GenProgram::text() const {
  std::string s = "program fuzz" + std::to_string(seed % 1000000) + ";\n";
  for (const GenRuntimeDim& d : dims)
    s += "dim " + d.name + " in [" + std::to_string(d.lo) + ", " + std::to_string(d.hi) + "] policy(" + d.policy +
         ");\n";
  for (const GenLeaf& l : leaves) s += l.kind + " " + l.name + " : " + l.type.text() + ";\n";
  std::map<std::string, const GenStatement*> by_name;
  for (const GenStatement& st : statements) by_name[st.name] = &st;
  for (const std::string& o : outputs) s += "output o_" + o + " : " + by_name.at(o)->type.text() + ";\n";
  for (const GenStatement& st : statements)
    s += (st.assigns_state ? "" : "let ") + st.name + " = " + st.expr + ";\n";
  for (const std::string& o : outputs) s += "o_" + o + " = " + o + ";\n";
  return s;
}

namespace {

bool is_float(const std::string& t) { return t == "f32" || t == "f16" || t == "bf16"; }

int64_t upper_extent(const GenDim& d, const std::vector<GenRuntimeDim>& dims) {
  if (d.runtime.empty()) return d.extent;
  for (const GenRuntimeDim& r : dims)
    if (r.name == d.runtime) return r.hi;
  return 1;
}

std::string literal(double v) {
  char buf[64];
  std::snprintf(buf, sizeof buf, "%.6g", v);
  std::string s = buf;
  if (s.find_first_of(".e") == std::string::npos) s += ".0";
  return s;
}

class Generator {
 public:
  Generator(uint64_t seed, const GenOptions& o) : rng_(seed), o_(o) { p_.seed = seed; }

  GenProgram run() {
    declare_dims();
    const int inputs = between(1, 3);
    for (int i = 0; i < inputs; ++i) new_leaf("input", random_type(pick_float_dtype(), between(1, 3), true));
    const int want = between(o_.min_statements, o_.max_statements);
    for (int tries = 0; static_cast<int>(p_.statements.size()) < want && tries < want * 20; ++tries) add_statement();
    choose_outputs();
    return p_;
  }

 private:
  struct Value {
    std::string name;
    GenType type;
    bool exact = false;
    double magnitude = 1.0;
  };

  // ------------------------------------------------------------ randomness
  int between(int lo, int hi) { return std::uniform_int_distribution<int>(lo, hi)(rng_); }
  bool chance(double p) { return std::uniform_real_distribution<double>(0, 1)(rng_) < p; }
  template <typename T> const T& one_of(const std::vector<T>& v) { return v[static_cast<size_t>(between(0, static_cast<int>(v.size()) - 1))]; }

  int64_t pick_extent() {
    static const std::vector<int64_t> small = {1, 2, 3, 4, 5, 7, 8, 16, 17, 31, 32, 33, 64, 100};
    static const std::vector<int64_t> large = {128, 130, 256, 257, 512, 1024};
    return o_.large_shapes && chance(0.2) ? one_of(large) : one_of(small);
  }
  std::string pick_float_dtype() { return one_of(std::vector<std::string>{"f32", "f32", "f16", "bf16"}); }

  void declare_dims() {
    if (!o_.runtime_dims) return;
    const int n = between(0, 2);
    for (int i = 0; i < n; ++i) {
      GenRuntimeDim d;
      d.name = i == 0 ? "B" : "T";
      d.lo = between(1, 3);
      d.hi = d.lo + between(0, 40);
      d.policy = chance(0.5) ? "buckets" : "update";
      p_.dims.push_back(d);
    }
  }

  // A type of the given rank; axis 0 may be a run-time dim.
  GenType random_type(const std::string& dtype, int rank, bool runtime_ok) {
    GenType t{dtype, {}};
    for (int i = 0; i < rank; ++i) {
      GenDim d{pick_extent(), ""};
      if (i == 0 && runtime_ok && !p_.dims.empty() && chance(0.6)) d = GenDim{1, one_of(p_.dims).name};
      t.shape.push_back(d);
    }
    // At most 2^16 elements: quarter the largest static axis (the last one
    // alone can reach 1 while the others still hold too many).
    while (elements(t) > (int64_t{1} << 16)) {
      GenDim* largest = nullptr;
      for (GenDim& d : t.shape)
        if (d.runtime.empty() && (!largest || d.extent > largest->extent)) largest = &d;
      if (!largest || largest->extent == 1) break;  // run-time dims alone: their bounds are small
      largest->extent = std::max<int64_t>(1, largest->extent / 4);
    }
    return t;
  }

  int64_t elements(const GenType& t) const {
    int64_t n = 1;
    for (const GenDim& d : t.shape) n *= upper_extent(d, p_.dims);
    return n;
  }

  // ------------------------------------------------------------ the pool
  Value new_leaf(const std::string& kind, GenType type) {
    const std::string name = std::string(kind == "input" ? "x" : kind == "param" ? "w" : "s") + std::to_string(next_++);
    p_.leaves.push_back({kind, name, type});
    Value v{name, type, true, type.dtype == "i32" ? 50.0 : 2.0};
    pool_.push_back(v);
    return v;
  }

  Value add(const std::string& expr, GenType type, std::vector<std::string> uses, bool exact, double magnitude) {
    GenStatement st;
    st.name = "v" + std::to_string(next_++);
    st.type = type;
    st.expr = expr;
    st.uses = std::move(uses);
    st.exact = exact;
    st.magnitude = magnitude;
    p_.statements.push_back(st);
    Value v{st.name, type, exact, magnitude};
    pool_.push_back(v);
    return v;
  }

  std::optional<Value> pick(const std::function<bool(const Value&)>& fits) {
    std::vector<const Value*> c;
    for (const Value& v : pool_)
      if (fits(v)) c.push_back(&v);
    if (c.empty()) return std::nullopt;
    // Prefer recent values: deeper programs.
    const int n = static_cast<int>(c.size());
    const int i = chance(0.6) ? between(std::max(0, n - 3), n - 1) : between(0, n - 1);
    return *c[static_cast<size_t>(i)];
  }

  bool has_runtime(const GenType& t) const {
    return std::any_of(t.shape.begin(), t.shape.end(), [](const GenDim& d) { return !d.runtime.empty(); });
  }

  // ------------------------------------------------------------ statements
  void add_statement() {
    switch (between(0, 15)) {
      case 0: case 1: case 2: unary(); break;
      case 3: case 4: binary(); break;
      case 5: jump(); break;
      case 6: cast(); break;
      case 7: reduce(); break;
      case 8: norm(); break;
      case 9: case 10: matmul(); break;
      case 11: movement(); break;
      case 12: gather(); break;
      case 13: if (o_.state) state_update(); break;
      case 14: if (o_.random_ops) draw(); break;
      case 15: integer(); break;
    }
  }

  void unary() {
    auto x = pick([](const Value& v) { return is_float(v.type.dtype); });
    if (!x) return;
    struct U { const char* f; bool keeps_exact; int bound; };  // bound: 0 keeps |x|, 1 gives at most 1, 2 see below
    static const std::vector<U> ops = {{"relu", true, 0}, {"abs", true, 0}, {"-", true, 0}, {"tanh", false, 1},
                                       {"sigmoid", false, 1}, {"gelu", false, 0}, {"silu", false, 0}, {"sin", false, 1},
                                       {"cos", false, 1}, {"erf", false, 1}, {"exp", false, 2}, {"log", false, 2},
                                       {"sqrt", false, 2}, {"rsqrt", false, 2}};
    const U& u = one_of(ops);
    const std::string f = u.f;
    std::string expr;
    double m = x->magnitude;
    if (f == "-") expr = "-" + x->name;
    else if (f == "exp") {
      if (x->magnitude > 4) return;
      expr = "exp(" + x->name + ")", m = std::exp(x->magnitude);
    } else if (f == "log" || f == "sqrt" || f == "rsqrt") {
      expr = f + "(abs(" + x->name + ") + 1.0)";  // away from 0: no -inf, no NaN
      m = f == "log" ? std::log(m + 1) : f == "sqrt" ? std::sqrt(m + 1) : 1.0;
    } else {
      expr = f + "(" + x->name + ")";
      if (u.bound == 1) m = 1.0;
    }
    add(expr, x->type, {x->name}, u.keeps_exact && x->exact, m);
  }

  // A second operand for `a`: a value of the same dtype whose shape
  // broadcasts to a's (the same, or a's last axis only), or a new input.
  Value operand_like(const Value& a) {
    if (a.type.shape.empty()) {
      auto b = pick([&](const Value& v) { return v.name != a.name && v.type == a.type; });
      return b ? *b : new_leaf("input", a.type);
    }
    GenType last{a.type.dtype, {a.type.shape.back()}};
    auto b = pick([&](const Value& v) { return v.name != a.name && (v.type == a.type || v.type == last); });
    if (b) return *b;
    const GenType t = chance(0.3) || !last.shape.back().runtime.empty() ? a.type : last;
    return new_leaf(chance(0.5) && !has_runtime(t) ? "param" : "input", t);  // a param has no run-time dim
  }

  void binary() {
    auto a = pick([](const Value& v) { return is_float(v.type.dtype); });
    if (!a) return;
    const Value b = operand_like(*a);
    const bool both = a->exact && b.exact;
    const bool f32 = a->type.dtype == "f32";
    switch (between(0, 5)) {
      case 0: add(a->name + " + " + b.name, a->type, {a->name, b.name}, both && f32, a->magnitude + b.magnitude); break;
      case 1: add(a->name + " - " + b.name, a->type, {a->name, b.name}, both && f32, a->magnitude + b.magnitude); break;
      case 2:
        if (a->magnitude * b.magnitude > 1000) return;
        add(a->name + " * " + b.name, a->type, {a->name, b.name}, both, a->magnitude * b.magnitude);
        break;
      case 3:
        add(a->name + " / (abs(" + b.name + ") + 1.0)", a->type, {a->name, b.name}, false, a->magnitude);
        break;
      case 4:
        add("max(" + a->name + ", " + b.name + ")", a->type, {a->name, b.name}, both, std::max(a->magnitude, b.magnitude));
        break;
      default: {  // where over an exact comparison
        auto c = pick([&](const Value& v) { return v.exact && v.type == a->type; });
        if (!c) c = b.exact ? std::optional<Value>(b) : std::nullopt;
        if (!c) return;
        add("where(" + c->name + " > 0.5, " + a->name + ", " + b.name + ")", a->type, {c->name, a->name, b.name}, both,
            std::max(a->magnitude, b.magnitude));
      }
    }
  }

  // Ops whose result jumps: only over exact values.
  void jump() {
    auto x = pick([](const Value& v) { return v.exact && is_float(v.type.dtype) && v.magnitude < 1000; });
    if (!x) return;
    switch (between(0, 5)) {
      case 0: add("floor(" + x->name + " * 4.0)", x->type, {x->name}, true, x->magnitude * 4 + 1); break;
      case 1: add("ceil(" + x->name + ")", x->type, {x->name}, true, x->magnitude + 1); break;
      case 2: add("round(" + x->name + " * 2.0)", x->type, {x->name}, true, x->magnitude * 2 + 1); break;
      case 3: add("sign(" + x->name + ")", x->type, {x->name}, true, 1); break;
      case 4: add("clamp(" + x->name + ", -0.5, 0.5)", x->type, {x->name}, true, 0.5); break;
      default: {
        GenType t = x->type;
        t.dtype = "i32";
        add("cast(" + x->name + " * 8.0, i32)", t, {x->name}, true, x->magnitude * 8 + 1);
      }
    }
  }

  void cast() {
    auto x = pick([](const Value& v) { return v.type.dtype != "bool"; });
    if (!x) return;
    std::vector<std::string> to = {"f32", "f16", "bf16"};
    to.erase(std::remove(to.begin(), to.end(), x->type.dtype), to.end());
    GenType t = x->type;
    t.dtype = one_of(to);
    if (x->magnitude > 60000) return;
    // A value the executors compute within its dtype's tolerance keeps that
    // tolerance: it is never cast to a more precise float (bf16 < f16 < f32).
    const auto precision = [](const std::string& d) { return d == "f32" ? 3 : d == "f16" ? 2 : d == "bf16" ? 1 : 0; };
    if (!x->exact && precision(t.dtype) > precision(x->type.dtype)) return;
    // Narrowing rounds once on every executor; i32 -> float is exact for small ints.
    add("cast(" + x->name + ", " + t.dtype + ")", t, {x->name}, x->exact, x->magnitude);
  }

  void integer() {
    auto x = pick([](const Value& v) { return v.type.dtype == "i32"; });
    if (!x) {
      new_leaf("input", random_type("i32", between(1, 2), true));
      return;
    }
    static const std::vector<std::string> ops = {"+ 3", "* 5", "// 3", "% 7", "& 12", "| 1", "^ 5", "<< 2", ">> 1"};
    add("(" + x->name + " " + one_of(ops) + ")", x->type, {x->name}, true, x->magnitude * 8 + 8);
  }

  // The axis of a value that may be reduced or sliced: any; returns -1 for rank 0.
  int pick_axis(const GenType& t) { return t.shape.empty() ? -1 : between(0, static_cast<int>(t.shape.size()) - 1); }

  void reduce() {
    auto x = pick([](const Value& v) { return v.type.dtype != "bool" && !v.type.shape.empty(); });
    if (!x) return;
    const int axis = pick_axis(x->type);
    const bool keep = chance(0.3);
    GenType t = x->type;
    if (keep) t.shape[static_cast<size_t>(axis)] = GenDim{1, ""};
    else t.shape.erase(t.shape.begin() + axis);
    const std::string args = "(" + x->name + ", axis = " + std::to_string(axis) + (keep ? ", keepdims = true)" : ")");
    const int64_t n = upper_extent(x->type.shape[static_cast<size_t>(axis)], p_.dims);
    const bool floaty = is_float(x->type.dtype);
    switch (between(0, 4)) {
      case 0:
        if (!floaty) return;
        add("sum" + args, t, {x->name}, false, x->magnitude * static_cast<double>(n));
        break;
      case 1:
        if (!floaty) return;
        add("mean" + args, t, {x->name}, false, x->magnitude);
        break;
      case 2: add("max" + args, t, {x->name}, x->exact, x->magnitude); break;
      case 3: add("min" + args, t, {x->name}, x->exact, x->magnitude); break;
      default: {
        if (!x->exact) return;
        GenType it = t;
        it.dtype = "i32";
        add("argmax" + args, it, {x->name}, true, static_cast<double>(n));
      }
    }
  }

  void norm() {
    auto x = pick([](const Value& v) { return is_float(v.type.dtype) && !v.type.shape.empty(); });
    if (!x) return;
    const int last = static_cast<int>(x->type.shape.size()) - 1;
    switch (between(0, 3)) {
      case 0: add("softmax(" + x->name + ", axis = " + std::to_string(last) + ")", x->type, {x->name}, false, 1.0); break;
      case 1: {
        const double n = static_cast<double>(upper_extent(x->type.shape.back(), p_.dims));
        if (x->magnitude * n > 1e4) return;
        add("cumsum(" + x->name + ", axis = " + std::to_string(last) + ")", x->type, {x->name}, false, x->magnitude * n);
        break;
      }
      default: {
        const double m = std::sqrt(static_cast<double>(upper_extent(x->type.shape.back(), p_.dims))) * 2 + 1;
        if (!x->type.shape.back().runtime.empty() || chance(0.5)) {
          add(std::string(chance(0.5) ? "layernorm(" : "rmsnorm(") + x->name + ")", x->type, {x->name}, false, m);
        } else {
          const Value w = new_leaf("param", GenType{x->type.dtype, {x->type.shape.back()}});
          add("rmsnorm(" + x->name + ", weight = " + w.name + ", eps = 1e-5)", x->type, {x->name, w.name}, false, m * 2);
        }
      }
    }
  }

  // a @ w with a new weight (plain, transposed, or a column window of a
  // wider one), or transpose(a) @ b over a run-time K; scaled back to a's
  // magnitude (an epilogue).
  void matmul() {
    auto a = pick([](const Value& v) { return is_float(v.type.dtype) && v.type.shape.size() >= 2 && v.type.shape.size() <= 3; });
    if (!a) return;
    const GenDim& k = a->type.shape.back();
    const int64_t kx = upper_extent(k, p_.dims);
    int64_t n = pick_extent();
    GenType out = a->type;
    out.shape.back() = GenDim{n, ""};
    if (elements(out) > (int64_t{1} << 16) || !k.runtime.empty()) return;
    const std::string scale = literal(1.0 / (static_cast<double>(kx) * 2.0));
    const double m = a->magnitude;
    switch (between(0, 3)) {
      case 0: {
        const Value w = new_leaf("param", GenType{a->type.dtype, {k, GenDim{n, ""}}});
        add("(" + a->name + " @ " + w.name + ") * " + scale, out, {a->name, w.name}, false, m);
        break;
      }
      case 1: {
        const Value w = new_leaf("param", GenType{a->type.dtype, {GenDim{n, ""}, k}});
        add("(" + a->name + " @ transpose(" + w.name + ")) * " + scale, out, {a->name, w.name}, false, m);
        break;
      }
      case 2: {  // a column window of a fused projection
        const int64_t wide = n * 3 + between(0, 5);
        const Value w = new_leaf("param", GenType{a->type.dtype, {k, GenDim{wide, ""}}});
        const int64_t c0 = between(0, static_cast<int>(wide - n));
        add("(" + a->name + " @ " + w.name + ")[" + std::string(a->type.shape.size() == 3 ? ":, " : "") + ":, " +
                std::to_string(c0) + ":" + std::to_string(c0 + n) + "] * " + scale,
            out, {a->name, w.name}, false, m);
        break;
      }
      default: {  // transpose(a) @ b: K is a's axis 0 (maybe a run-time dim)
        if (a->type.shape.size() != 2) return;
        GenType bt{a->type.dtype, {a->type.shape[0], GenDim{n, ""}}};
        auto b = pick([&](const Value& v) { return v.type == bt; });
        const Value bv = b ? *b : new_leaf("input", bt);
        GenType o{a->type.dtype, {a->type.shape[1], GenDim{n, ""}}};
        const double k0 = static_cast<double>(upper_extent(a->type.shape[0], p_.dims));
        add("(transpose(" + a->name + ") @ " + bv.name + ") * " + literal(1.0 / (k0 * 2.0)), o, {a->name, bv.name},
            false, m * bv.magnitude);
      }
    }
  }

  void movement() {
    auto x = pick([](const Value& v) { return !v.type.shape.empty(); });
    if (!x) return;
    const size_t r = x->type.shape.size();
    switch (between(0, 3)) {
      case 0: {  // transpose
        if (r < 2) return;
        std::vector<int> perm(r);
        for (size_t i = 0; i < r; ++i) perm[i] = static_cast<int>(i);
        std::shuffle(perm.begin(), perm.end(), rng_);
        GenType t = x->type;
        std::string p = "[";
        for (size_t i = 0; i < r; ++i) {
          t.shape[i] = x->type.shape[static_cast<size_t>(perm[i])];
          p += (i ? ", " : "") + std::to_string(perm[i]);
        }
        add("transpose(" + x->name + ", perm = " + p + "])", t, {x->name}, x->exact, x->magnitude);
        break;
      }
      case 1: {  // slice a static axis
        const int axis = pick_axis(x->type);
        const GenDim& d = x->type.shape[static_cast<size_t>(axis)];
        if (!d.runtime.empty() || d.extent < 2) return;
        const int64_t b = between(0, static_cast<int>(d.extent - 1));
        const int64_t e = between(static_cast<int>(b + 1), static_cast<int>(d.extent));
        std::string sub;
        for (size_t i = 0; i < r; ++i)
          sub += (i ? ", " : "") + (static_cast<int>(i) == axis ? std::to_string(b) + ":" + std::to_string(e) : ":");
        GenType t = x->type;
        t.shape[static_cast<size_t>(axis)] = GenDim{e - b, ""};
        add(x->name + "[" + sub + "]", t, {x->name}, x->exact, x->magnitude);
        break;
      }
      case 2: {  // concat with another of the same type along a static axis
        const int axis = pick_axis(x->type);
        if (!x->type.shape[static_cast<size_t>(axis)].runtime.empty()) return;
        auto y = pick([&](const Value& v) { return v.type == x->type; });
        if (!y) return;
        GenType t = x->type;
        t.shape[static_cast<size_t>(axis)].extent *= 2;
        if (elements(t) > (int64_t{1} << 16)) return;
        add("concat(" + x->name + ", " + y->name + ", axis = " + std::to_string(axis) + ")", t, {x->name, y->name},
            x->exact && y->exact, std::max(x->magnitude, y->magnitude));
        break;
      }
      default: {  // reshape: merge the last two static axes, or split the last one
        GenType t = x->type;
        const GenDim& last = t.shape.back();
        if (!last.runtime.empty()) return;
        if (r >= 2 && t.shape[r - 2].runtime.empty() && chance(0.5)) {
          t.shape[r - 2].extent *= last.extent;
          t.shape.pop_back();
        } else if (last.extent % 2 == 0 && r < 5) {
          t.shape.back().extent /= 2;
          t.shape.push_back(GenDim{2, ""});
        } else {
          return;
        }
        std::string s = "[";
        for (size_t i = 0; i < t.shape.size(); ++i)
          s += (i ? ", " : "") + (t.shape[i].runtime.empty() ? std::to_string(t.shape[i].extent) : t.shape[i].runtime);
        add("reshape(" + x->name + ", " + s + "])", t, {x->name}, x->exact, x->magnitude);
      }
    }
  }

  // gather rows of a table by i32 ids (outside the table: zeros), or one_hot.
  void gather() {
    auto ids = pick([](const Value& v) { return v.type.dtype == "i32" && v.type.shape.size() <= 2; });
    if (!ids) return;
    if (chance(0.3)) {
      const int64_t n = between(2, 9);
      GenType t = ids->type;
      t.dtype = "f32";
      t.shape.push_back(GenDim{n, ""});
      add("one_hot(" + ids->name + ", " + std::to_string(n) + ")", t, {ids->name}, true, 1);
      return;
    }
    GenType table{pick_float_dtype(), {GenDim{between(3, 60), ""}, GenDim{pick_extent(), ""}}};
    const Value tab = new_leaf("param", table);
    GenType t = ids->type;
    t.dtype = table.dtype;
    t.shape.push_back(table.shape[1]);
    if (elements(t) > (int64_t{1} << 16)) return;
    add("gather(" + tab.name + ", " + ids->name + ")", t, {tab.name, ids->name}, true, tab.magnitude);
  }

  // A state updated in place by scatter at distinct rows, or given a new value.
  void state_update() {
    const int64_t rows = between(2, 12), cols = pick_extent();
    const std::string dtype = pick_float_dtype();
    const Value s = new_leaf("state", GenType{dtype, {GenDim{rows, ""}, GenDim{cols, ""}}});
    const int64_t q = between(1, static_cast<int>(rows));
    GenType vt{dtype, {GenDim{q, ""}, GenDim{cols, ""}}};
    auto v = pick([&](const Value& x) { return x.type == vt; });
    const Value vals = v ? *v : new_leaf("input", vt);
    // Distinct positions: (arange(q) * 1 + shift) % rows, shift from the seed.
    const int64_t shift = between(0, static_cast<int>(rows - 1));
    GenStatement st;
    st.name = s.name;
    st.type = s.type;
    st.assigns_state = true;
    st.uses = {s.name, vals.name};
    st.expr = chance(0.7) ? "scatter(" + s.name + ", (arange(" + std::to_string(q) + ") + " + std::to_string(shift) +
                                ") % " + std::to_string(rows) + ", " + vals.name + ", axis = 0)"
                          : s.name + " * 0.5";
    st.exact = true;
    st.magnitude = std::max(s.magnitude, vals.magnitude);
    p_.statements.push_back(st);
    // Reading the state after the update sees the new value (a later read in program order).
    auto& back = pool_;
    for (Value& x : back)
      if (x.name == s.name) x.magnitude = st.magnitude;
  }

  void draw() {
    GenType t = random_type(pick_float_dtype(), between(1, 2), true);
    std::string shape = "[";
    for (size_t i = 0; i < t.shape.size(); ++i)
      shape += (i ? ", " : "") + (t.shape[i].runtime.empty() ? std::to_string(t.shape[i].extent) : t.shape[i].runtime);
    shape += "]";
    if (chance(0.5)) {
      add("rand(" + shape + ", dtype = " + t.dtype + ")", t, {}, true, 1.0);  // bit for bit on every executor
    } else {
      auto x = pick([](const Value& v) { return is_float(v.type.dtype); });
      if (x && chance(0.5)) add("dropout(" + x->name + ", 0.25)", x->type, {x->name}, false, x->magnitude * 1.34);
      else add("randn(" + shape + ", dtype = " + t.dtype + ")", t, {}, false, 6.0);
    }
  }

  void choose_outputs() {
    std::set<std::string> used;
    for (const GenStatement& st : p_.statements)
      for (const std::string& u : st.uses) used.insert(u);
    std::vector<std::string> candidates;
    for (auto it = p_.statements.rbegin(); it != p_.statements.rend(); ++it)
      if (!it->assigns_state && (!used.count(it->name) || chance(0.2))) candidates.push_back(it->name);
    const int n = std::min<int>(o_.max_outputs, static_cast<int>(candidates.size()));
    for (int i = 0; i < n; ++i) p_.outputs.push_back(candidates[static_cast<size_t>(i)]);
    if (p_.outputs.empty()) {  // nothing computed: the first input doubled
      const GenLeaf& x = p_.leaves.front();
      add(x.name + " + " + x.name, x.type, {x.name}, x.type.dtype == "f32", 4.0);
      p_.outputs.push_back(p_.statements.back().name);
    }
  }

  std::mt19937_64 rng_;
  GenOptions o_;
  GenProgram p_;
  std::vector<Value> pool_;
  int next_ = 0;
};

}  // namespace

GenProgram generate_program(uint64_t seed, const GenOptions& options) { return Generator(seed, options).run(); }

GenProgram without_statement(const GenProgram& p, size_t i) {
  GenProgram out = p;
  out.statements.clear();
  out.outputs.clear();
  std::map<std::string, std::string> renamed;  // a dropped name -> the value that stands in for it
  std::set<std::string> gone;
  const GenStatement& dropped = p.statements.at(i);
  // A stand-in of the same type: a leaf or an earlier statement.
  auto stand_in = [&](const GenStatement& s) -> std::string {
    for (size_t j = 0; j < i; ++j)
      if (p.statements[j].type == s.type && !p.statements[j].assigns_state && p.statements[j].name != s.name)
        return p.statements[j].name;
    for (const GenLeaf& l : p.leaves)
      if (l.type == s.type && l.name != s.name) return l.name;
    return "";
  };
  if (!dropped.assigns_state) {
    const std::string s = stand_in(dropped);
    if (s.empty()) gone.insert(dropped.name);
    else renamed[dropped.name] = s;
  }
  auto replace_word = [](std::string text, const std::string& from, const std::string& to) {
    size_t at = 0;
    while ((at = text.find(from, at)) != std::string::npos) {
      const bool left = at == 0 || !(std::isalnum(static_cast<unsigned char>(text[at - 1])) || text[at - 1] == '_');
      const size_t end = at + from.size();
      const bool right = end >= text.size() || !(std::isalnum(static_cast<unsigned char>(text[end])) || text[end] == '_');
      if (left && right) {
        text.replace(at, from.size(), to);
        at += to.size();
      } else {
        at = end;
      }
    }
    return text;
  };
  for (size_t j = 0; j < p.statements.size(); ++j) {
    if (j == i) continue;
    GenStatement st = p.statements[j];
    if (std::any_of(st.uses.begin(), st.uses.end(), [&](const std::string& u) { return gone.count(u) > 0; })) {
      if (!st.assigns_state) gone.insert(st.name);
      continue;
    }
    for (std::string& u : st.uses)
      if (auto it = renamed.find(u); it != renamed.end()) {
        st.expr = replace_word(st.expr, u, it->second);
        u = it->second;
      }
    out.statements.push_back(st);
  }
  for (const std::string& o : p.outputs) {
    if (gone.count(o)) continue;
    if (o == dropped.name) continue;
    out.outputs.push_back(o);
  }
  // Leaves nothing reads any more go too.
  std::set<std::string> read;
  for (const GenStatement& st : out.statements)
    for (const std::string& u : st.uses) read.insert(u);
  std::vector<GenLeaf> leaves;
  for (const GenLeaf& l : p.leaves)
    if (read.count(l.name)) leaves.push_back(l);
  out.leaves = leaves;
  return out;
}

}  // namespace gdl::fuzz
