#!/usr/bin/env python3
"""PyTorch side of the gdl benchmark suite: data, reference outputs, timings.

  python3 bench/torch_bench.py --data DIR --out torch.json [--only w1,w3] [--runs 200]
  python3 bench/torch_bench.py --data DIR --out torch.json --dry-run    # no torch, no GPU

1. Data (bench/README.md describes the layout): every param and input is drawn
   from --seed (numpy when it is there, else pure Python), rounded to the
   variant's dtype and written as raw little-endian files under --data, with
   manifest.json listing them. Kept when the manifest there already has the
   same seed, sets and variants.
2. Ceilings, measured once: device-to-device copy bandwidth (bytes read plus
   written over time) and matrix-product rate (f16, bf16, f32 without TF32).
3. Per variant, on every input set: the eager output, written as f32 (the
   `torch_out` file the gdl harness compares with), and a float64 reference
   computed from the same rounded data upcast (the `ref64` file).
4. Timing, rotating over the timed sets, --runs runs after --warmup:
   eager, and a CUDA graph captured after warm-up on a side stream whose
   replay is preceded by `static_x.copy_(new_x)`, timed twice: the replay
   alone, and copy_ + replay (like a gdl run, which copies the bound inputs
   in its graph). Device time per run with
   CUDA events; before each run 256 MiB of memory traffic empties the L2
   and keeps the GPU busy while the host submits, so the events time the
   run alone: a zero_() (--flush write, which leaves the L2 full of dirty
   lines for the run to write back) or a row maximum of a [65536, 1024] f32
   tensor (--flush read, clean lines; gdl_bench's L2Flush does the same).
   Host time per run (copy_ + replay, host clock, no sync inside) and
   back-to-back loop time (N runs between two syncs, divided by N).
5. One JSON file (--out): ceilings and, per variant, median/p10/p90 of each
   mode, the correctness figures and the output files.
--refs-only stops after step 3 (the data and PyTorch's outputs, nothing
timed): what a gdl_bench A/B run of gdl's variants needs to check them.
--dry-run needs neither torch nor a GPU: it makes the data (a small subset
unless --only says otherwise), float64 references from a pure-Python model
where they are cheap, and plausible fake timings, so that gdl_bench
--cpu-check and report.py can be exercised on a machine without a GPU.
bench/sweep.py imports the data helpers, the ceilings, the L2 flush, the
event timing and the graph capture from here.
"""
import argparse
import array
import json
import math
import os
import random
import statistics
import struct
import sys
import time
import zlib

sys.dont_write_bytecode = True  # no __pycache__ in the source tree
sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import gen_workloads as wl  # noqa: E402

try:
    import numpy as np
except ImportError:  # data generation and the dry run fall back to pure Python
    np = None

FORMAT = "gdl-bench-data/1"
ELEMENT_SIZE = {"f32": 4, "f16": 2, "bf16": 2, "i32": 4, "f64": 8}
# Largest ||gdl - torch|| / ||torch|| accepted, per dtype: two implementations
# that round at different points differ by a few units of the dtype's epsilon
# times the depth of the computation; a wrong op differs by O(1).
TOLERANCE = {"f32": 1e-4, "f16": 1e-2, "bf16": 3e-2}
W3_CHECK_LENGTHS = (1, 1537, 4000)  # check-only sets of W3; timed sets use the full cache
DRY_RUN_DEFAULT = ("w1_chain", "w2_mlp_h1024_f32_b1", "w2_mlp_h1024_bf16_b8", "w3_attention")
FLUSH_BYTES = 256 << 20


# ------------------------------------------------------------------ data

def _seed_words(seed, tag):
    return [seed & 0xFFFFFFFF, zlib.crc32(tag.encode())]


def draw_f32(seed, tag, count, kind, lo=0.0, hi=1.0):
    """`count` float32 values: kind 'normal' (mean 0, std hi) or 'uniform' in [lo, hi)."""
    if np is not None:
        rng = np.random.default_rng(_seed_words(seed, tag))
        if kind == "normal":
            return rng.standard_normal(count, dtype=np.float32) * np.float32(hi)
        return (rng.random(count, dtype=np.float32) * np.float32(hi - lo) + np.float32(lo)).astype(np.float32)
    r = random.Random(f"{seed}/{tag}")
    if kind == "normal":
        return array.array("f", (r.gauss(0.0, hi) for _ in range(count)))
    return array.array("f", (r.uniform(lo, hi) for _ in range(count)))


def encode(values, dtype):
    """float32 values (numpy array or array('f')) as raw little-endian bytes of `dtype`."""
    if np is not None:
        v = np.asarray(values, dtype=np.float32)
        if dtype == "f32":
            return v.astype("<f4").tobytes()
        if dtype == "f16":
            return v.astype("<f2").tobytes()
        if dtype == "bf16":  # round to nearest even on the upper 16 bits (finite values)
            u = v.view(np.uint32)
            return ((u + np.uint32(0x7FFF) + ((u >> 16) & np.uint32(1))) >> 16).astype("<u2").tobytes()
        raise ValueError(dtype)
    f32 = array.array("f", values)
    if sys.byteorder != "little":
        f32.byteswap()
    if dtype == "f32":
        return f32.tobytes()
    if dtype == "f16":
        out = bytearray()
        for i in range(0, len(f32), 1 << 16):
            chunk = f32[i:i + (1 << 16)]
            out += struct.pack(f"<{len(chunk)}e", *chunk)
        return bytes(out)
    if dtype == "bf16":
        bits = array.array("I", f32.tobytes())
        half = array.array("H", (((u + 0x7FFF + ((u >> 16) & 1)) >> 16) & 0xFFFF for u in bits))
        return half.tobytes()
    raise ValueError(dtype)


def decode(data, dtype):
    """Raw little-endian bytes of `dtype` as a list of Python floats (ints for i32)."""
    n = len(data) // ELEMENT_SIZE[dtype]
    if dtype == "f32":
        return list(struct.unpack(f"<{n}f", data))
    if dtype == "f16":
        return list(struct.unpack(f"<{n}e", data))
    if dtype == "bf16":
        halves = struct.unpack(f"<{n}H", data)
        return list(struct.unpack(f"<{n}f", struct.pack(f"<{n}I", *(h << 16 for h in halves))))
    if dtype == "i32":
        return list(struct.unpack(f"<{n}i", data))
    if dtype == "f64":
        return list(struct.unpack(f"<{n}d", data))
    raise ValueError(dtype)


def count(shape):
    n = 1
    for e in shape:
        n *= e
    return n


def select(only):
    """The variants to run: all, or those whose name contains one of the comma-separated words."""
    if not only:
        return list(wl.VARIANTS)
    words = [w for w in only.split(",") if w]
    return [v for v in wl.VARIANTS if any(w in v["name"] for w in words)]


def tensor(name, dtype, shape, file):
    return {"name": name, "dtype": dtype, "shape": list(shape), "file": file}


def variant_layout(v, sets):
    """The manifest entry of one variant: files, shapes, sets, tolerance, bytes and flops."""
    name, dtype = v["name"], v["dtype"]
    entry = {k: v[k] for k in ("name", "workload", "program", "gdl", "dtype", "dims")}
    entry["tolerance"] = TOLERANCE[dtype]
    ref = lambda k: {"torch_out": f"ref/{name}/set{k}.torch.f32.bin", "ref64": f"ref/{name}/set{k}.ref64.f64.bin"}
    if v["workload"] == "w1":
        n = wl.W1_N
        entry["model"] = {"N": n, "steps": wl.W1_STEPS}
        entry["params"] = [tensor(p, "f32", [n], f"params/{v['program']}/{p}.bin") for p in ("a", "b")]
        entry["output"] = tensor("y", "f32", [n], None)
        entry["sets"] = [dict(inputs=[tensor("x", "f32", [n], f"inputs/{name}/set{k}.x.bin")], timed=True, **ref(k))
                         for k in range(sets)]
        entry["bytes"] = 4 * n * 4              # x, a, b read, y written
        entry["flops"] = 2 * n * wl.W1_STEPS
    elif v["workload"] == "w2":
        h, layers, b = v["H"], v["L"], v["B"]
        es = ELEMENT_SIZE[dtype]
        entry["model"] = {"H": h, "L": layers, "B": b, "eps": wl.W2_EPS}
        entry["params"] = [tensor("W", dtype, [layers, h, h], f"params/{v['program']}/W.bin"),
                           tensor("bias", dtype, [layers, h], f"params/{v['program']}/bias.bin")]
        entry["output"] = tensor("y", dtype, [b, h], None)
        entry["sets"] = [dict(inputs=[tensor("x", dtype, [b, h], f"inputs/{name}/set{k}.x.bin")], timed=True, **ref(k))
                         for k in range(sets)]
        entry["bytes"] = es * (layers * h * h + layers * h + 2 * b * h)  # weights once, x read, y written
        entry["flops"] = 2 * b * h * h * layers
    else:
        nh, d, t = wl.W3_NH, wl.W3_D, wl.W3_T
        entry["model"] = {"NH": nh, "D": d, "T": t, "scale": 1.0 / math.sqrt(d)}
        entry["params"] = [tensor(p, "f16", [nh, t, d], f"params/{v['program']}/{p}.bin") for p in ("k_cache", "v_cache")]
        entry["output"] = tensor("o", "f16", [nh, d], None)
        lengths = [t] * sets + list(W3_CHECK_LENGTHS)
        entry["sets"] = [dict(inputs=[tensor("q", "f16", [nh, d], f"inputs/{name}/set{k}.q.bin"),
                                      tensor("kv_len", "i32", [], f"inputs/{name}/set{k}.kv_len.bin")],
                              timed=k < sets, kv_len=length, **ref(k))
                         for k, length in enumerate(lengths)]
        entry["bytes"] = 2 * (2 * nh * t * d + 2 * nh * d) + 4  # K and V once at the timed length, q, o, kv_len
        entry["flops"] = 4 * nh * t * d
    return entry


def write_file(root, rel, data):
    path = os.path.join(root, rel)
    os.makedirs(os.path.dirname(path), exist_ok=True)
    with open(path, "wb") as f:
        f.write(data)


def make_data(root, seed, sets, variants):
    """Writes every param and input file of `variants` and returns the manifest."""
    layouts = [variant_layout(v, sets) for v in variants]
    written = set()
    for v, entry in zip(variants, layouts):
        for p in entry["params"]:
            if p["file"] in written:
                continue
            n = count(p["shape"])
            if v["workload"] == "w1":  # |a| <= 1 keeps 100 steps bounded; a near 1 keeps x in the result
                values = draw_f32(seed, "w1/a", n, "uniform", 0.95, 1.0) if p["name"] == "a" else \
                    draw_f32(seed, "w1/b", n, "uniform", -0.1, 0.1)
            elif v["workload"] == "w2":  # one draw per H, rounded to each dtype; W ~ N(0, 1/H)
                h = v["H"]
                values = draw_f32(seed, f"w2/h{h}/W", n, "normal", hi=1.0 / math.sqrt(h)) if p["name"] == "W" else \
                    draw_f32(seed, f"w2/h{h}/bias", n, "normal", hi=0.1)
            else:
                values = draw_f32(seed, f"w3/{p['name']}", n, "normal", hi=1.0)
            write_file(root, p["file"], encode(values, p["dtype"]))
            written.add(p["file"])
            del values
        for k, s in enumerate(entry["sets"]):
            for t in s["inputs"]:
                if t["dtype"] == "i32":  # kv_len
                    write_file(root, t["file"], struct.pack("<i", s["kv_len"]))
                    continue
                # Inputs depend on the shape and the set, not the dtype: the same
                # numbers, rounded, feed every dtype of one H and B.
                tag = f"{v['workload']}/{t['name']}/{'x'.join(map(str, t['shape']))}/set{k}"
                write_file(root, t["file"], encode(draw_f32(seed, tag, count(t["shape"]), "normal", hi=1.0), t["dtype"]))
    return {"format": FORMAT, "seed": seed, "sets": sets, "generator": "numpy" if np is not None else "python",
            "little_endian": True, "variants": layouts}


def data_is_current(root, seed, sets, variants):
    path = os.path.join(root, "manifest.json")
    try:
        with open(path) as f:
            old = json.load(f)
    except (OSError, ValueError):
        return None
    if old.get("format") != FORMAT or old.get("seed") != seed or old.get("sets") != sets:
        return None
    if [e["name"] for e in old["variants"]] != [v["name"] for v in variants]:
        return None
    for e in old["variants"]:
        for t in e["params"] + [t for s in e["sets"] for t in s["inputs"]]:
            p = os.path.join(root, t["file"])
            if not os.path.exists(p) or os.path.getsize(p) != count(t["shape"]) * ELEMENT_SIZE[t["dtype"]]:
                return None
    return old


def prepare_data(root, seed, sets, variants, log):
    manifest = data_is_current(root, seed, sets, variants)
    if manifest is not None:
        log(f"data: reusing {root}/manifest.json")
        return manifest
    t0 = time.time()
    manifest = make_data(root, seed, sets, variants)
    with open(os.path.join(root, "manifest.json"), "w") as f:
        json.dump(manifest, f, indent=1)
    log(f"data: wrote {len(variants)} variants to {root} with {manifest['generator']} in {time.time() - t0:.1f} s")
    return manifest


def read_tensor(root, t):
    with open(os.path.join(root, t["file"]), "rb") as f:
        data = f.read()
    want = count(t["shape"]) * ELEMENT_SIZE[t["dtype"]]
    if len(data) != want:
        raise ValueError(f"{t['file']}: {len(data)} bytes, expected {want}")
    return data


def summary(times_us):
    s = sorted(times_us)
    q = lambda p: s[min(len(s) - 1, max(0, int(round(p * (len(s) - 1)))))]
    return {"median_us": statistics.median(s), "p10_us": q(0.10), "p90_us": q(0.90), "runs": len(s)}


# ------------------------------------------------- pure-Python model (dry run)

def py_layernorm(row, eps):
    n = len(row)
    mean = sum(row) / n
    var = sum((v - mean) ** 2 for v in row) / n
    inv = 1.0 / math.sqrt(var + eps)
    return [(v - mean) * inv for v in row]


def py_gelu(v):
    return 0.5 * v * (1.0 + math.erf(v / math.sqrt(2.0)))


def py_reference(entry, params, inputs):
    """float64 output of one set, from the rounded data; None when it would take too long."""
    m = entry["model"]
    if entry["workload"] == "w1":
        x, a, b = inputs["x"], params["a"], params["b"]
        for _ in range(m["steps"]):
            x = [xi * ai + bi for xi, ai, bi in zip(x, a, b)]
        return x
    if entry["workload"] == "w2":
        h, layers, batch = m["H"], m["L"], m["B"]
        if batch * h * h * layers > 80_000_000:
            return None
        w, bias, x = params["W"], params["bias"], inputs["x"]
        rows = [x[r * h:(r + 1) * h] for r in range(batch)]
        for l in range(layers):
            for r, row in enumerate(rows):
                ln = py_layernorm(row, m["eps"])
                acc = list(bias[l * h:(l + 1) * h])
                for k, lk in enumerate(ln):
                    base = (l * h + k) * h
                    acc = [s + lk * wv for s, wv in zip(acc, w[base:base + h])]
                rows[r] = [xv + py_gelu(av) for xv, av in zip(row, acc)]
        return [v for row in rows for v in row]
    nh, d, t = m["NH"], m["D"], m["T"]
    n = inputs["kv_len"][0]
    q, kc, vc = inputs["q"], params["k_cache"], params["v_cache"]
    out = []
    for head in range(nh):
        rows = [(head * t + pos) * d for pos in range(n)]
        out.extend(py_attend(q[head * d:(head + 1) * d], [kc[r:r + d] for r in rows], [vc[r:r + d] for r in rows],
                             m["scale"]))
    return out


def py_attend(q, keys, values, scale):
    """One query's attention in float64: softmax(q . key * scale) over the rows, times the value rows."""
    scores = [sum(a * b for a, b in zip(q, k)) * scale for k in keys]
    top = max(scores)
    weights = [math.exp(s - top) for s in scores]
    total = sum(weights)
    acc = [0.0] * len(q)
    for wgt, v in zip(weights, values):
        acc = [a + wgt * x for a, x in zip(acc, v)]
    return [a / total for a in acc]


def save_results(args, results):
    """Writes results, with the data directory and the seed, to args.out (whole or not at all)."""
    results["data"] = os.path.abspath(args.data)
    results["seed"] = args.seed
    with open(args.out + ".tmp", "w") as f:
        json.dump(results, f, indent=1)
    os.replace(args.out + ".tmp", args.out)


def round_to(values, dtype):
    return decode(encode(array.array("f", values), dtype), dtype)


def dry_run(args, manifest, log):
    """References from the pure-Python model where cheap, and fake timings."""
    root = args.data
    out = {"tool": "torch", "dry_run": True, "device": "none (dry run)", "torch": None,
           "settings": {"runs": args.runs, "warmup": args.warmup, "flush_bytes": FLUSH_BYTES, "flush": args.flush},
           "ceilings": {"copy_bytes_per_s": 4.26e12,
                        "matmul_flops_per_s": {"f16": 7.8e14, "bf16": 7.8e14, "f32": 5.0e13}},
           "variants": {}}
    fake = random.Random(args.seed)
    cache = {}
    for entry in manifest["variants"]:
        if entry["program"] not in cache:
            cache = {entry["program"]: {p["name"]: decode(read_tensor(root, p), p["dtype"]) for p in entry["params"]}}
        params = cache[entry["program"]]
        rec = {"workload": entry["workload"], "dtype": entry["dtype"], "bytes": entry["bytes"], "flops": entry["flops"],
               "outputs": [], "error": None}
        written = 0
        for k, s in enumerate(entry["sets"]):
            if s["timed"] and k > 0:
                continue  # set 0 and the check-only sets: enough to exercise the comparison
            inputs = {t["name"]: decode(read_tensor(root, t), t["dtype"]) for t in s["inputs"]}
            ref = py_reference(entry, params, inputs)
            if ref is None:
                continue
            write_file(root, s["ref64"], struct.pack(f"<{len(ref)}d", *ref))
            fake_torch = round_to(ref, entry["dtype"])  # what torch would give, to the dtype's rounding
            write_file(root, s["torch_out"], struct.pack(f"<{len(fake_torch)}f", *fake_torch))
            rec["outputs"].append({"set": k, "file": s["torch_out"], "head": fake_torch[:4]})
            written += 1
        floor_us = max(entry["bytes"] / out["ceilings"]["copy_bytes_per_s"],
                       entry["flops"] / out["ceilings"]["matmul_flops_per_s"][entry["dtype"]]) * 1e6
        for mode, factor in (("eager", 40), ("graph", 8), ("graph_copy", 8.5), ("graph_host", 0.5),
                             ("graph_loop", 9)):
            med = (floor_us + 2.0) * factor * fake.uniform(0.8, 1.2)
            rec[mode] = {"median_us": med, "p10_us": med * 0.95, "p90_us": med * 1.1, "runs": args.runs}
        rec["check"] = {"sets": written, "err_vs_ref64": 0.0, "graph_vs_eager": 0.0}
        out["variants"][entry["name"]] = rec
        log(f"{entry['name']}: {written} reference sets (pure Python)")
    return out


# ----------------------------------------------------------------- torch

def full_fp32(torch):
    """Turns TF32 off for matmuls and cuDNN; returns how. PyTorch 2.9 replaced
    allow_tf32 with fp32_precision, and mixing the two APIs is an error.
    run_torch checks the outcome on a product (fp32_matmul_error)."""
    done = []
    if hasattr(torch.backends, "fp32_precision"):
        for path in ("", "cuda.matmul", "cudnn", "cudnn.conv"):
            try:
                target = torch.backends
                for part in filter(None, path.split(".")):
                    target = getattr(target, part)
                target.fp32_precision = "ieee"
                done.append(path or "backends")
            except (AttributeError, RuntimeError, ValueError, TypeError):
                pass
    if done:
        return "fp32_precision=ieee on " + ", ".join(done)
    torch.backends.cuda.matmul.allow_tf32 = False
    torch.backends.cudnn.allow_tf32 = False
    return "allow_tf32=False"


def torch_dtypes():
    import torch
    return {"f32": torch.float32, "f16": torch.float16, "bf16": torch.bfloat16, "i32": torch.int32}


def l2_flush(mode, dev):
    """A callable that empties the L2 before a timed run (step 4): a zero_()
    of FLUSH_BYTES (mode 'write') or a row maximum over them ('read'). The
    callable holds the buffer."""
    import torch
    if mode == "write":
        flush = torch.empty(FLUSH_BYTES // 4, dtype=torch.int32, device=dev)
        return flush.zero_
    flush = torch.rand(FLUSH_BYTES // 4 // 1024, 1024, device=dev)
    return lambda: flush.amax(dim=1)


def time_events(empty_l2, runs, before, body):
    """Device time of body(i), us, for i in range(runs): CUDA events around
    it, before(i) and the L2 flush outside them."""
    import torch
    starts = [torch.cuda.Event(enable_timing=True) for _ in range(runs)]
    ends = [torch.cuda.Event(enable_timing=True) for _ in range(runs)]
    for i in range(runs):
        empty_l2()  # and keeps the GPU busy while the host submits
        before(i)
        starts[i].record()
        body(i)
        ends[i].record()
    torch.cuda.synchronize()
    return [s.elapsed_time(e) * 1000.0 for s, e in zip(starts, ends)]


def relative_error(got, want):
    """||got - want|| / ||want|| in float64; inf when got holds a NaN or an infinity."""
    import torch
    got, want = got.double(), want.double()
    if not torch.isfinite(got).all():
        return float("inf")
    return float(torch.linalg.vector_norm(got - want) / torch.linalg.vector_norm(want))


def measure_ceilings(dev, event_times, fp32_mode, log):
    """Step 2: device-to-device copy bandwidth (bytes read + written over
    time) and the 8192^3 matmul rate per dtype; returns (ceilings, the error
    of an f32 product, which shows whether TF32 is off)."""
    import torch
    dtypes = torch_dtypes()
    src = torch.randn(1 << 28, device=dev)  # 1 GiB
    dst = torch.empty_like(src)
    for _ in range(3):
        dst.copy_(src)
    t = statistics.median(event_times(10, lambda i: None, lambda i: dst.copy_(src)))
    copy_bw = 2 * src.numel() * 4 / (t * 1e-6)
    src = dst = None  # frees 2 GiB
    rates = {}
    n = 8192
    for name in ("f16", "bf16", "f32"):
        a = torch.randn(n, n, device=dev).to(dtypes[name])
        b = torch.randn(n, n, device=dev).to(dtypes[name])
        for _ in range(3):
            a @ b
        t = statistics.median(event_times(10 if name != "f32" else 5, lambda i: None, lambda i: a @ b))
        rates[name] = 2 * n ** 3 / (t * 1e-6)
    # f32 must be full fp32: a TF32 product of random 1024 x 1024 matrices is off by ~1e-3, fp32 by ~1e-6.
    a = torch.randn(1024, 1024, device=dev)
    b = torch.randn(1024, 1024, device=dev)
    f32_err = relative_error(a @ b, a.double() @ b.double())
    if f32_err > 1e-5:
        log(f"WARNING: an f32 matmul is off by {f32_err:.1e}: TF32 seems to be on despite {fp32_mode}")
    a = b = None
    ceilings = {"copy_bytes_per_s": copy_bw, "matmul_flops_per_s": rates}
    log(f"ceilings: copy {copy_bw / 1e12:.2f} TB/s (read + write), matmul f16 {rates['f16'] / 1e12:.0f}, "
        f"bf16 {rates['bf16'] / 1e12:.0f}, f32 {rates['f32'] / 1e12:.1f} TFLOP/s")
    torch.cuda.empty_cache()
    return ceilings, f32_err


def capture_graph(fn, static):
    """A CUDA graph of fn(static) captured after warm-up on a side stream;
    returns (graph, its output tensor)."""
    import torch
    side = torch.cuda.Stream()
    side.wait_stream(torch.cuda.current_stream())
    with torch.cuda.stream(side):
        for _ in range(3):
            fn(static)
    torch.cuda.current_stream().wait_stream(side)
    graph = torch.cuda.CUDAGraph()
    with torch.cuda.graph(graph):
        static_out = fn(static)
    return graph, static_out


def w2_model(x, W, bias, layers, h, eps):
    """W2 in PyTorch: `layers` of x + gelu(layernorm(x) @ W[l] + bias[l])."""
    import torch
    import torch.nn.functional as F
    for l in range(layers):
        y = F.layer_norm(x, (h,), eps=eps)
        x = x + F.gelu(torch.addmm(bias[l], y, W[l]))  # addmm: what nn.Linear does
    return x


def run_torch(args, manifest, log, save_partial):
    import torch
    import torch.nn.functional as F

    fp32_mode = full_fp32(torch)
    dev = torch.device("cuda")
    root = args.data
    dtypes = torch_dtypes()
    props = torch.cuda.get_device_properties(dev)
    out = {"tool": "torch", "dry_run": False, "torch": torch.__version__, "cuda": torch.version.cuda,
           "device": props.name, "sm_count": props.multi_processor_count,
           "settings": {"runs": args.runs, "warmup": args.warmup, "flush_bytes": FLUSH_BYTES, "flush": args.flush, "fp32": fp32_mode,
                        "loop_runs": args.loop_runs},
           "variants": {}}

    def load(t):
        data = bytearray(read_tensor(root, t))
        cpu = torch.frombuffer(data, dtype=dtypes[t["dtype"]]) if data else torch.empty(0, dtype=dtypes[t["dtype"]])
        return cpu.reshape(t["shape"]).to(dev)

    def save(rel, t, dtype):
        write_file(root, rel, t.detach().to(dtype).contiguous().cpu().numpy().astype("<" + ("f4" if dtype == torch.float32 else "f8")).tobytes())

    rel_err = relative_error
    # Ceilings -------------------------------------------------------------
    empty_l2 = l2_flush(args.flush, dev)

    def event_times(runs, before, body):
        return time_events(empty_l2, runs, before, body)

    ceilings, f32_err = measure_ceilings(dev, event_times, fp32_mode, log)
    out["fp32_matmul_error"] = f32_err
    out["ceilings"] = ceilings

    # Models ---------------------------------------------------------------
    def w1(x, a, b, steps):
        for _ in range(steps):
            x = x * a + b
        return x

    w2 = w2_model

    def w3(q, k, v, kv_len, positions):
        # [batch 1, heads, 1 query, D] against [1, heads, T, D]; the mask reads
        # the run-time length on the device, so the captured graph stays valid.
        nh, d = q.shape
        mask = (positions < kv_len).view(1, 1, 1, -1)
        o = F.scaled_dot_product_attention(q.view(1, nh, 1, d), k.unsqueeze(0), v.unsqueeze(0), attn_mask=mask)
        return o.view(nh, d)

    def w3_ref64(q, k, v, length, scale):
        s = torch.einsum("hd,htd->ht", q, k[:, :length]) * scale
        return torch.einsum("ht,htd->hd", torch.softmax(s, dim=-1), v[:, :length])

    program_cache = {}
    start = time.time()
    for entry in manifest["variants"]:
        name = entry["name"]
        rec = {"workload": entry["workload"], "dtype": entry["dtype"], "bytes": entry["bytes"], "flops": entry["flops"],
               "outputs": [], "error": None}
        out["variants"][name] = rec
        if args.time_budget_s and time.time() - start > args.time_budget_s:
            rec["error"] = f"skipped: the time budget of {args.time_budget_s:g} s is spent"
            log(f"{name}: {rec['error']}")
            continue
        save_partial(out)
        try:
            if entry["program"] not in program_cache:
                program_cache.clear()
                torch.cuda.empty_cache()
                params = {p["name"]: load(p) for p in entry["params"]}
                program_cache[entry["program"]] = (params, {k: v.double() for k, v in params.items()})
            params, params64 = program_cache[entry["program"]]
            m = entry["model"]
            sets = [{t["name"]: load(t) for t in s["inputs"]} for s in entry["sets"]]
            if entry["workload"] == "w1":
                fn = lambda ins: w1(ins["x"], params["a"], params["b"], m["steps"])
                ref64 = lambda ins, s: w1(ins["x"].double(), params64["a"], params64["b"], m["steps"])
            elif entry["workload"] == "w2":
                fn = lambda ins: w2(ins["x"], params["W"], params["bias"], m["L"], m["H"], m["eps"])
                ref64 = lambda ins, s: w2(ins["x"].double(), params64["W"], params64["bias"], m["L"], m["H"], m["eps"])
            else:
                positions = torch.arange(m["T"], device=dev, dtype=torch.int32)
                fn = lambda ins: w3(ins["q"], params["k_cache"], params["v_cache"], ins["kv_len"], positions)
                ref64 = lambda ins, s: w3_ref64(ins["q"].double(), params64["k_cache"], params64["v_cache"],
                                                s["kv_len"], m["scale"])

            # Outputs and references on every set.
            err64 = 0.0
            eager_out = []
            with torch.no_grad():
                for k, (s, ins) in enumerate(zip(entry["sets"], sets)):
                    y = fn(ins)
                    r = ref64(ins, s)
                    save(s["torch_out"], y, torch.float32)
                    save(s["ref64"], r, torch.float64)
                    err64 = max(err64, rel_err(y, r))
                    eager_out.append(y.clone())
                    rec["outputs"].append({"set": k, "file": s["torch_out"], "head": y.flatten()[:4].float().tolist()})
            if args.refs_only:  # the outputs gdl_bench checks against, no timing
                rec["check"] = {"sets": len(sets), "err_vs_ref64": err64}
                log(f"{name}: references of {len(sets)} sets, err vs f64 {err64:.2e}")
                continue
            timed = [ins for s, ins in zip(entry["sets"], sets) if s["timed"]]
            nt = len(timed)

            with torch.no_grad():
                # Eager.
                for i in range(args.warmup):
                    fn(timed[i % nt])
                rec["eager"] = summary(event_times(args.runs, lambda i: None, lambda i: fn(timed[i % nt])))

                # CUDA graph: static inputs, warm-up on a side stream, capture, replay.
                static = {k: v.clone() for k, v in timed[0].items()}
                graph, static_out = capture_graph(fn, static)

                def copy_in(i):
                    for k, v in timed[i % nt].items():
                        static[k].copy_(v)

                graph_vs_eager = 0.0
                for k, ins in enumerate(sets):
                    for key, v in ins.items():
                        static[key].copy_(v)
                    graph.replay()
                    graph_vs_eager = max(graph_vs_eager, rel_err(static_out, eager_out[k]))
                for i in range(args.warmup):
                    copy_in(i)
                    graph.replay()
                rec["graph"] = summary(event_times(args.runs, copy_in, lambda i: graph.replay()))

                # The same with the copy_ inside the events: a gdl graph run
                # times its own input copies (the copy node a bind fills).
                def copy_and_replay(i):
                    copy_in(i)
                    graph.replay()

                rec["graph_copy"] = summary(event_times(args.runs, lambda i: None, copy_and_replay))

                # Host time per run: copy_ + replay on the host clock, no sync inside.
                host = []
                for i in range(args.warmup + args.runs):
                    torch.cuda.synchronize()
                    t0 = time.perf_counter_ns()
                    copy_in(i)
                    graph.replay()
                    t1 = time.perf_counter_ns()
                    if i >= args.warmup:
                        host.append((t1 - t0) / 1000.0)
                rec["graph_host"] = summary(host)

                # Back-to-back loop: N runs between two syncs, per run.
                loops = []
                for _ in range(3):
                    torch.cuda.synchronize()
                    t0 = time.perf_counter_ns()
                    for i in range(args.loop_runs):
                        copy_in(i)
                        graph.replay()
                    torch.cuda.synchronize()
                    loops.append((time.perf_counter_ns() - t0) / 1000.0 / args.loop_runs)
                rec["graph_loop"] = {"median_us": statistics.median(loops), "p10_us": min(loops), "p90_us": max(loops),
                                     "runs": 3 * args.loop_runs}
                graph = static = static_out = None  # the graph's memory pool goes with it
            rec["check"] = {"sets": len(sets), "err_vs_ref64": err64, "graph_vs_eager": graph_vs_eager}
            log(f"{name}: eager {rec['eager']['median_us']:.1f} us, graph {rec['graph']['median_us']:.1f} us, "
                f"host {rec['graph_host']['median_us']:.1f} us, err vs f64 {err64:.2e}")
        except Exception as e:  # one broken variant must not hide the others
            rec["error"] = f"{type(e).__name__}: {e}"
            log(f"{name}: ERROR {rec['error']}")
        save_partial(out)
    return out


def main():
    parser = argparse.ArgumentParser(description="PyTorch side of the gdl benchmarks (see the module docstring).")
    parser.add_argument("--data", required=True, help="exchange directory (manifest.json and raw files)")
    parser.add_argument("--out", required=True, help="JSON results")
    parser.add_argument("--seed", type=int, default=2024)
    parser.add_argument("--sets", type=int, default=8, help="timed input sets per variant, rotated")
    parser.add_argument("--runs", type=int, default=200, help="timed runs per mode (at least 200 for the report)")
    parser.add_argument("--warmup", type=int, default=20)
    parser.add_argument("--loop-runs", type=int, default=200, help="runs per back-to-back loop (3 loops)")
    parser.add_argument("--flush", choices=("write", "read"), default="read",
                        help="how the L2 is emptied before each timed run (step 4)")
    parser.add_argument("--only", default="", help="comma-separated substrings of variant names")
    parser.add_argument("--time-budget-s", type=float, default=0, help="> 0: variants not started by then are skipped")
    parser.add_argument("--gen-only", action="store_true", help="write the data and stop")
    parser.add_argument("--refs-only", action="store_true",
                        help="write the data and PyTorch's outputs (what gdl_bench checks against), time nothing")
    parser.add_argument("--dry-run", action="store_true", help="no torch, no GPU: data, pure-Python references, fake times")
    args = parser.parse_args()

    log = lambda msg: print(f"[torch_bench] {msg}", flush=True)
    only = args.only or (",".join(DRY_RUN_DEFAULT) if args.dry_run else "")
    variants = select(only)
    if args.dry_run and not args.only:
        variants = [v for v in variants if v["name"] in DRY_RUN_DEFAULT]
    if not variants:
        log(f"no variant matches --only {only!r}")
        return 2
    os.makedirs(args.data, exist_ok=True)
    manifest = prepare_data(args.data, args.seed, args.sets, variants, log)
    if args.gen_only:
        return 0
    os.makedirs(os.path.dirname(os.path.abspath(args.out)), exist_ok=True)

    def save(results):  # also called after every variant, so a run cut short keeps what it measured
        save_results(args, results)

    results = dry_run(args, manifest, log) if args.dry_run else run_torch(args, manifest, log, save)
    save(results)
    log(f"wrote {args.out}")
    return 1 if any(r.get("error") for r in results["variants"].values()) else 0


if __name__ == "__main__":
    sys.exit(main())
