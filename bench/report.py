#!/usr/bin/env python3
"""Merges torch_bench.py's and gdl_bench's JSON into one table.

  python3 bench/report.py --torch torch.json --gdl gdl.json [--md performance.md]
  python3 bench/report.py --self-test      # fake numbers, no files needed

1. Read both files (either may be missing or partial: its columns show '-').
2. Per variant: device time (median) of gdl graph, gdl eager, torch eager,
   torch graph (copy_ + replay, and the replay alone); gdl graph over torch
   graph with its copy_, since a gdl graph run copies its bound inputs
   itself (older torch files without it: the replay alone); the floor, the larger of
   bytes / measured copy bandwidth and flops / measured matmul rate of the
   variant's dtype (bytes and flops as the manifest counts them: weights
   read once, activations, the KV cache read once); gdl graph over the floor;
   the correctness verdict of gdl_bench's check.
3. A second table: host time of one run (bind + submit) and back-to-back loop
   time per run; a third: one-time costs per program.
4. gdl's performance targets against this run (TARGETS below): each target's
   ratio per variant, met only where every variant it names was measured,
   checked correct and inside the limit.
5. Print the tables as text; with --md, write them as markdown ready for
   docs/performance.md, with the ceilings and the method.
"""
import argparse
import json
import os
import re
import sys

# Used only when torch_bench.py could not measure them (marked 'assumed').
ASSUMED_CEILINGS = {"copy_bytes_per_s": 4.26e12,
                    "matmul_flops_per_s": {"f16": 7.8e14, "bf16": 7.8e14, "f32": 5.0e13}}


def load(path):
    if not path or not os.path.exists(path):
        return None
    try:
        with open(path) as f:
            return json.load(f)
    except ValueError as e:
        print(f"report: {path} is not valid JSON ({e})", file=sys.stderr)
        return None


def get(d, *keys):
    for k in keys:
        if not isinstance(d, dict) or d.get(k) is None:
            return None
        d = d[k]
    return d


def us(v):
    if v is None:
        return "-"
    if v >= 100:
        return f"{v:.0f}"
    if v >= 10:
        return f"{v:.1f}"
    return f"{v:.2f}"


def ratio(a, b):
    if a is None or b is None or b <= 0:
        return "-"
    return f"{a / b:.2f}x"


def floor_us(rec, ceilings):
    """(floor in us, 'mem' or 'flop'), or (None, '') when the counts are missing."""
    nbytes, flops, dtype = get(rec, "bytes"), get(rec, "flops"), get(rec, "dtype")
    if nbytes is None or flops is None:
        return None, ""
    mem = nbytes / ceilings["copy_bytes_per_s"] * 1e6
    rate = ceilings["matmul_flops_per_s"].get(dtype) or ceilings["matmul_flops_per_s"]["f32"]
    comp = flops / rate * 1e6
    return (mem, "mem") if mem >= comp else (comp, "flop")


def verdict(g):
    if g is None:
        return "not run"
    check = g.get("check")
    if check is None:
        return "error: " + (g.get("error") or "no check")[:60]
    err, tol = check.get("err_vs_torch"), check.get("tolerance")
    if not check.get("passed"):
        note = check.get("note") or (f"{err:.1e} > {tol:.0e}" if err is not None else "NaN or inf")
        return "FAIL " + note
    serial = g.get("check_no_overlap")
    if serial is not None and not serial.get("passed"):
        return "FAIL without launch overlap"
    eager = check.get("eager_err_vs_torch")
    worst = max(x for x in (err, eager) if x is not None) if (err is not None or eager is not None) else 0.0
    text = f"ok {worst:.1e} <= {tol:.0e}"
    if g.get("error"):  # checked, but the timing failed
        text += "; error: " + g["error"][:50]
    return text


def torch_graph_us(t):
    """PyTorch's graph run as gdl's is timed: copy_ of the inputs + replay."""
    return get(t, "graph_copy", "median_us") or get(t, "graph", "median_us")


def build(torch_res, gdl_res):
    """The rows of the three tables and the ceilings used."""
    ceilings, assumed = ASSUMED_CEILINGS, True
    if get(torch_res, "ceilings", "copy_bytes_per_s") and get(torch_res, "ceilings", "matmul_flops_per_s"):
        ceilings, assumed = torch_res["ceilings"], bool(torch_res.get("dry_run"))
    tv = get(torch_res, "variants") or {}
    gv = get(gdl_res, "variants") or {}
    names = list(tv) + [n for n in gv if n not in tv]
    main, host, once = [], [], []
    seen_programs = set()
    for name in names:
        t, g = tv.get(name), gv.get(name)
        rec = t or g
        gg, ge = get(g, "graph", "median_us"), get(g, "eager", "median_us")
        te, tg = get(t, "eager", "median_us"), torch_graph_us(t)
        fl, bound = floor_us(rec, ceilings)
        main.append([name, us(gg), us(get(g, "graph_reference", "median_us")), us(get(g, "graph_serial", "median_us")),
                     us(ge), us(te), us(tg),
                     us(get(t, "graph", "median_us")), ratio(gg, tg),
                     f"{us(fl)} ({bound})" if fl is not None else "-", ratio(gg, fl), verdict(g)])
        host.append([name, us(get(g, "host", "median_us")), us(get(g, "host_copy_probe", "median_us")),
                     us(get(g, "host_device_bind", "median_us")), us(get(g, "host_reference_bind", "median_us")),
                     us(get(g, "host_launch_probe", "median_us")),
                     us(get(t, "graph_host", "median_us")), us(get(g, "loop", "median_us")),
                     us(get(t, "graph_loop", "median_us"))])
        prog = get(g, "program")
        if prog and prog not in seen_programs:
            seen_programs.add(prog)
            mib = lambda v: "-" if v is None else f"{v / 2 ** 20:.1f}"
            once.append([prog, str(get(g, "compile", "nodes") or "-"), us(get(g, "compile", "compile_ms")),
                         us(get(g, "session", "graph_build_us")), us(get(g, "session", "instantiate_us")),
                         us(get(g, "session", "upload_us")), mib(get(g, "compile", "arena_bytes")),
                         mib(get(g, "compile", "params_bytes"))])
    return ceilings, assumed, main, host, once


# gdl's performance targets: (what, variant name pattern, quantity, limit).
# Quantities: "torch" = gdl graph / torch graph, "floor" = gdl graph / floor,
# "host" and "host_dev" = gdl bind + run in us, inputs in host or device memory.
TARGETS = [
    ("W1 at most 1/20 of PyTorch's CUDA graph", r"w1_chain$", "torch", 1 / 20),
    ("W2 H=1024 f16 at most half of PyTorch's CUDA graph", r"w2_mlp_h1024_f16_b\d+$", "torch", 0.5),
    ("W2 H=4096 f16/bf16, B <= 8, within 1.25x of the floor", r"w2_mlp_h4096_b?f16_b[18]$", "floor", 1.25),
    ("W2 f32 no slower than PyTorch's CUDA graph", r"w2_mlp_h\d+_f32_b\d+$", "torch", 1.0),
    ("W3 within 1.25x of the KV floor", r"w3_attention$", "floor", 1.25),
    ("host time (bind + run) at most 5 us, inputs in host memory", r".*", "host", 5.0),
    ("host time (bind + run) at most 5 us, inputs in device memory", r".*", "host_dev", 5.0),
]


def target_rows(torch_res, gdl_res, ceilings):
    """One row per target: its name, the worst value and where, and whether it is met."""
    tv = get(torch_res, "variants") or {}
    gv = get(gdl_res, "variants") or {}
    names = list(tv) + [n for n in gv if n not in tv]
    rows = []
    for what, pattern, quantity, limit in TARGETS:
        values = []  # (value or None, name, checked ok)
        for name in names:
            if not re.match(pattern, name):
                continue
            t, g = tv.get(name), gv.get(name)
            gg, tg = get(g, "graph", "median_us"), torch_graph_us(t)
            if quantity == "torch":
                v = gg / tg if gg is not None and tg else None
            elif quantity == "floor":
                fl, _ = floor_us(t or g, ceilings)
                v = gg / fl if gg is not None and fl else None
            else:
                v = get(g, "host" if quantity == "host" else "host_device_bind", "median_us")
            values.append((v, name, verdict(g).startswith("ok")))
        if not values:
            rows.append([what, "no variant in this run", "not measured"])
            continue
        unit = (lambda v: f"{v:.2f} us") if quantity.startswith("host") else (lambda v: f"{v:.2f}x")
        measured = [(v, n, ok) for v, n, ok in values if v is not None]
        inside = [n for v, n, ok in measured if ok and v <= limit]
        if not measured:
            rows.append([what, "not timed", "not measured"])
            continue
        worst = max(measured)
        result = f"worst {unit(worst[0])} ({worst[1]}), limit {unit(limit)}"
        if len(inside) == len(values):
            met = "yes"
        else:
            met = f"no: {len(inside)} of {len(values)} variants"
        rows.append([what, result, met])
    return rows


TARGET_HEAD = ["target", "this run", "met"]
MAIN_HEAD = ["workload", "gdl graph", "gdl graph, inputs by reference", "gdl graph, no overlap", "gdl eager", "torch eager", "torch graph",
             "torch replay only", "gdl/torch graph",
             "floor", "gdl/floor", "correct (err vs torch)"]
HOST_HEAD = ["workload", "gdl bind+run (host mem)", "memcpy of the inputs to pinned (host)",
             "gdl bind+run (dev mem)", "gdl bind_reference+run (dev mem)", "one-memset graph launch (host)", "torch copy_+replay",
             "gdl loop/run", "torch graph loop/run"]
ONCE_HEAD = ["program", "nodes", "compile ms", "graph build us", "instantiate us", "upload us",
             "arena MiB", "params MiB"]


def text_table(head, rows):
    widths = [max(len(str(r[i])) for r in [head] + rows) for i in range(len(head))]
    line = lambda r: "  ".join(str(c).ljust(w) if i == 0 else str(c).rjust(w) for i, (c, w) in enumerate(zip(r, widths)))
    return "\n".join([line(head), "  ".join("-" * w for w in widths)] + [line(r) for r in rows])


def md_table(head, rows):
    # The verdict is text too, and every column of the targets.
    text_columns = (0, len(head) - 1) if head is MAIN_HEAD else range(len(head)) if head is TARGET_HEAD else (0,)
    out = ["| " + " | ".join(head) + " |",
           "|" + "|".join("---" if i in text_columns else "---:" for i in range(len(head))) + "|"]
    out += ["| " + " | ".join(str(c) for c in r) + " |" for r in rows]
    return "\n".join(out)


def ceilings_line(ceilings, assumed):
    m = ceilings["matmul_flops_per_s"]
    text = (f"copy {ceilings['copy_bytes_per_s'] / 1e12:.2f} TB/s (bytes read + written), matmul "
            f"f16 {m.get('f16', 0) / 1e12:.0f}, bf16 {m.get('bf16', 0) / 1e12:.0f}, "
            f"f32 (no TF32) {m.get('f32', 0) / 1e12:.1f} TFLOP/s")
    return text + (" (assumed, not measured)" if assumed else " (measured by torch_bench.py)")


def markdown(torch_res, gdl_res, ceilings, assumed, main, host, once):
    dev = get(gdl_res, "device") or get(torch_res, "device") or "?"
    runs = get(gdl_res, "settings", "runs") or get(torch_res, "settings", "runs")
    cache = get(gdl_res, "settings", "compile_cache")
    compile_note = "without NVRTC cache" if cache in (None, "-") else f"with the NVRTC cache {cache}"
    flushes = {get(torch_res, "settings", "flush") or "write", get(gdl_res, "settings", "flush") or "write"}
    flush = ("256 MiB read, the L2 left clean" if flushes == {"read"} else
             "256 MiB memset, the L2 left dirty" if flushes == {"write"} else
             "DIFFERENT flushes in the two tools: " + " / ".join(sorted(flushes)) + ", not comparable")
    lines = [
        "## Benchmarks",
        "",
        f"Device: {dev}; PyTorch {get(torch_res, 'torch') or '-'} (CUDA {get(torch_res, 'cuda') or '-'}). "
        f"Ceilings: {ceilings_line(ceilings, assumed)}.",
        "",
        "Device time per run in microseconds, median of "
        f"{runs or '?'} runs after warm-up, rotating over several input sets, the L2 emptied "
        "before each run (" + flush + ", bench/README.md). gdl: the session's own CUDA events around the graph "
        "launch, which includes the graph's copy of the inputs bound from device memory "
        "(`record_device_time`); \"no overlap\": the same graph with ordinary edges "
        "instead of programmatic ones (`overlap_launches = false`); torch graph: CUDA events around "
        "`static_x.copy_(new_x)` + `graph.replay()` (\"replay only\": around the replay, the copy_ before it), "
        "which gdl/torch graph compares with; torch eager: around the eager call. "
        "The floor is the larger of bytes / copy bandwidth and flops / matmul rate (weights read "
        "once, activations in and out, the KV cache read once). Correctness: "
        "||gdl - torch|| / ||torch|| on every input set, graph and eager, checked before timing.",
        "",
        md_table(MAIN_HEAD, main),
        "",
        "Host time of one run in microseconds (median; the GPU idle at its start, no sync inside): "
        "gdl `bind` of every input + `run()`, the input in host memory (bind copies it through a "
        "pinned staging buffer) or in device memory (bind records the pointer, the run's graph copies it); "
        "beside them, a `std::memcpy` of the same inputs into pinned memory, timed after each run from host "
        "memory (the copy such a bind must make, its source warm in the caches), and the host time of "
        "`cudaGraphLaunch` of a graph of one 4-byte memset, timed after each "
        "run from device memory (how fast this host and driver launch at that moment); "
        "torch `static_x.copy_(new_x)` + "
        "`graph.replay()`. Loop: runs back to back between two synchronizes, per run "
        "(max of host and device time).",
        "",
        md_table(HOST_HEAD, host),
        "",
        f"One-time costs per program (compile {compile_note}; graph build, instantiate and "
        "upload at the first `run()`).",
        "",
        md_table(ONCE_HEAD, once),
        "",
    ]
    return "\n".join(lines)


def report(torch_res, gdl_res, md_path=None, out=sys.stdout):
    if torch_res is None and gdl_res is None:
        print("report: neither result file could be read", file=sys.stderr)
        return 2
    ceilings, assumed, main, host, once = build(torch_res, gdl_res)
    print("ceilings: " + ceilings_line(ceilings, assumed), file=out)
    print("\ndevice time per run, us (median)\n" + text_table(MAIN_HEAD, main), file=out)
    print("\nhost time per run, us (median)\n" + text_table(HOST_HEAD, host), file=out)
    print("\none-time costs\n" + text_table(ONCE_HEAD, once), file=out)
    targets = target_rows(torch_res, gdl_res, ceilings)
    print("\ntargets (met: every variant measured, checked correct and inside the limit)\n" +
          text_table(TARGET_HEAD, targets), file=out)
    if md_path:
        with open(md_path, "w") as f:
            f.write(markdown(torch_res, gdl_res, ceilings, assumed, main, host, once))
            f.write("\nThe targets in this run (met: every variant measured, checked correct and "
                    "inside the limit; `bench/report.py`, TARGETS).\n\n" + md_table(TARGET_HEAD, targets) + "\n")
        print(f"\nwrote {md_path}", file=out)
    failed = [r[0] for r in main if not r[-1].startswith("ok")]
    if failed:
        print(f"\nnot ok: {', '.join(failed)}", file=out)
    return 0


def self_test():
    """Renders fake results, including a failed check, a missing variant and an error."""
    stat = lambda m: {"median_us": m, "p10_us": m * 0.9, "p90_us": m * 1.2, "runs": 200}
    torch_res = {"torch": "0.0-fake", "cuda": "0", "device": "fake", "dry_run": True,
                 "ceilings": {"copy_bytes_per_s": 4.3e12, "matmul_flops_per_s": {"f16": 7.9e14, "bf16": 7.9e14, "f32": 5.1e13}},
                 "variants": {
                     "w1_chain": {"dtype": "f32", "bytes": 65536, "flops": 819200, "eager": stat(1956), "graph": stat(226),
                                  "graph_copy": stat(230), "graph_host": stat(9.5), "graph_loop": stat(230)},
                     "w2_mlp_h4096_f16_b1": {"dtype": "f16", "bytes": 268_500_000, "flops": 268_435_456,
                                             "eager": stat(345), "graph": stat(200), "graph_host": stat(8), "graph_loop": stat(205)},
                     "w3_attention": {"dtype": "f16", "bytes": 67_125_252, "flops": 67_108_864, "eager": stat(60),
                                      "graph": stat(37.5), "graph_host": stat(12), "graph_loop": stat(39)}}}
    check = lambda ok, e: {"passed": ok, "sets": 8, "tolerance": 1e-2, "err_vs_torch": e, "eager_err_vs_torch": e / 2}
    sess = {"graph_build_us": 109, "instantiate_us": 270, "upload_us": 20}
    comp = {"compile_ms": 900, "nodes": 3, "arena_bytes": 1 << 20, "params_bytes": 1 << 28}
    gdl_res = {"device": "fake", "settings": {"runs": 200}, "variants": {
        "w1_chain": {"program": "w1_chain", "dtype": "f32", "bytes": 65536, "flops": 819200, "check": check(True, 1e-7),
                     "graph": stat(3.1), "eager": stat(4.5), "host": stat(5), "host_device_bind": stat(4),
                     "loop": stat(5.5), "compile": comp, "session": sess},
        "w2_mlp_h4096_f16_b1": {"program": "w2_mlp_h4096_f16", "dtype": "f16", "bytes": 268_500_000,
                                "flops": 268_435_456, "check": check(False, 0.5), "graph": stat(70), "eager": stat(80),
                                "compile": comp, "session": sess},
        "w2_mlp_h4096_f16_b8": {"program": "w2_mlp_h4096_f16", "error": "Internal: fake failure"}}}
    import io
    buf = io.StringIO()
    md = os.path.join(os.environ.get("TMPDIR", "/tmp"), f"gdl_report_self_test_{os.getpid()}.md")
    rc = report(torch_res, gdl_res, md, out=buf)
    text = buf.getvalue()
    with open(md) as f:
        md_text = f.read()
    os.remove(md)
    problems = []
    expect = [("w1_chain", "0.01x"), ("w1_chain", "ok 1.0e-07"), ("w2_mlp_h4096_f16_b1", "FAIL 5.0e-01 > 1e-02"),
              ("w2_mlp_h4096_f16_b1", "0.35x"), ("w2_mlp_h4096_f16_b8", "error: Internal: fake failure"),
              ("w3_attention", "not run")]
    for row, needle in expect:
        line = next((l for l in text.splitlines() if l.startswith(row + " ")), "")
        if needle not in line:
            problems.append(f"row {row!r} lacks {needle!r}: {line!r}")
    # torch graph is copy_ + replay where measured (w1: 230 us, replay 226), else the replay (w3: 37.5).
    main_rows = {r[0]: r for r in build(torch_res, gdl_res)[2]}
    if main_rows["w1_chain"][6:8] != ["230", "226"] or main_rows["w3_attention"][6:8] != ["37.5", "37.5"]:
        problems.append(f"torch graph columns: {main_rows['w1_chain'][6:8]}, {main_rows['w3_attention'][6:8]}")
    # W2 H=4096 f16 B=1: 268.5 MB over 4.3 TB/s = 62.4 us, memory-bound.
    if "62.4 (mem)" not in text:
        problems.append("the W2 floor is not 62.4 us (mem)")
    if md_text.count("\n| w1_chain |") != 3 or "## Benchmarks" not in md_text:  # main, host, one-time
        problems.append("markdown tables incomplete")
    # Targets: W1 3.1 / 226 us is inside 1/20; W2 H=4096 f16 B=1 failed its
    # check and B=8 has no time; W3 was not run by gdl.
    expect_targets = [("W1 at most", "yes"), ("W2 H=4096 f16/bf16", "no: 0 of 2 variants"),
                      ("W3 within", "not measured")]
    for start, needle in expect_targets:
        line = next((l for l in text.splitlines() if l.startswith(start)), "")
        if not line.rstrip().endswith(needle):
            problems.append(f"target {start!r} does not end with {needle!r}: {line!r}")
    if "| W1 at most 1/20 of PyTorch's CUDA graph |" not in md_text:
        problems.append("markdown targets table missing")
    print(text)
    if rc != 0 or problems:
        print("self-test FAILED:\n  " + "\n  ".join(problems))
        return 1
    print("self-test passed")
    return 0


def main():
    parser = argparse.ArgumentParser(description="Merge the torch and gdl benchmark results into one table.")
    parser.add_argument("--torch", help="torch_bench.py's JSON")
    parser.add_argument("--gdl", help="gdl_bench's JSON")
    parser.add_argument("--md", help="write docs/performance.md-ready markdown here")
    parser.add_argument("--self-test", action="store_true", help="render fake results and check the output")
    args = parser.parse_args()
    if args.self_test:
        return self_test()
    return report(load(args.torch), load(args.gdl), args.md)


if __name__ == "__main__":
    sys.exit(main())
