#!/usr/bin/env python3
"""Per-kernel device time of a command's launches, measured by Nsight Compute.

  python3 bench/kernel_split.py [--runs N] [--csv FILE] -- COMMAND ...

Runs COMMAND under `ncu` with one metric, gpu__time_duration.sum, which
ncu measures for each kernel alone, with the caches flushed before it (its
default cache control), and a CUDA graph's kernel nodes profiled one by one.
Prints, per kernel name, how often it ran, its median and minimum time, and
with --runs N its launches and time per run (N: the runs of the profiled
work, so that "per run" divides every launch of the name by N).

What a split tells apart that a graph's time does not: the time of each
kernel of a step (a norm kernel, a library product, an epilogue kernel), and,
against the graph's own time per run, how much of that is neither (launch
gaps between nodes, dependency waits). ncu serializes the kernels, so kernels
that overlap in a graph add up here.

Example, one sweep row of PyTorch and of gdl (gdl_bench --sweep runs the
graph 2 + 2 x (warmup + runs) times: the check of each input set, the
timed runs, the host-time runs):

  python3 bench/kernel_split.py --runs 3 --nvtx "torch graph" -- python3 bench/sweep.py prepare \\
      --data /tmp/d --out /tmp/t.json --only "block_h4096_f16_m64$" --runs 3 --warmup 1
  python3 bench/kernel_split.py --runs 10 --nvtx "gdl@run block_h4096_f16" -- .device/build-release/bench/gdl_bench \\
      --data /tmp/d --out /tmp/g.json --repo . --sweep --runs 3 --warmup 1
"""
import argparse
import csv
import io
import os
import shutil
import statistics
import subprocess
import sys
import tempfile

METRIC = "gpu__time_duration.sum"


def parse(text):
    """Kernel name -> list of durations in us, from ncu's --csv --print-units base output."""
    start = text.find('"ID"')
    if start < 0:
        return {}
    times = {}
    for row in csv.DictReader(io.StringIO(text[start:])):
        if row.get("Metric Name") != METRIC:
            continue
        try:
            ns = float(row["Metric Value"].replace(",", ""))
        except (KeyError, ValueError):
            continue
        times.setdefault(row["Kernel Name"], []).append(ns / 1000.0)
    return times


def table(times, runs):
    lines = []
    order = sorted(times.items(), key=lambda kv: -sum(kv[1]))
    head = f"{'launches':>8} {'median us':>10} {'min us':>8}"
    if runs:
        head += f" {'per run':>8} {'us/run':>8}"
    lines.append(head + "  kernel")
    total = 0.0
    for name, ts in order:
        line = f"{len(ts):>8} {statistics.median(ts):>10.2f} {min(ts):>8.2f}"
        if runs:
            line += f" {len(ts) / runs:>8.2f} {sum(ts) / runs:>8.2f}"
            total += sum(ts) / runs
        short = name if len(name) <= 100 else name[:97] + "..."
        lines.append(f"{line}  {short}")
    if runs:
        lines.append(f"sum of kernel time per run: {total:.2f} us")
    return "\n".join(lines)


def self_test():
    text = ('==PROF== noise\n"ID","Kernel Name","Metric Name","Metric Unit","Metric Value"\n'
            '"0","k_a","gpu__time_duration.sum","ns","2,000"\n'
            '"1","k_b","gpu__time_duration.sum","ns","500"\n'
            '"2","k_a","gpu__time_duration.sum","ns","4000"\n'
            '"3","k_a","other","ns","9"\n')
    times = parse(text)
    assert times == {"k_a": [2.0, 4.0], "k_b": [0.5]}, times
    out = table(times, 2)
    assert "sum of kernel time per run: 3.25 us" in out, out
    assert out.splitlines()[1].endswith("k_a"), out
    print("kernel_split self-test ok")


def main():
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--runs", type=int, default=0, help="runs of the command's work, to print time per run")
    p.add_argument("--csv", help="keep ncu's CSV here")
    p.add_argument("--nvtx", help="profile only the kernels launched inside NVTX ranges of this name "
                                  "(gdl's Session::run: \"gdl@run PROGRAM\", domain gdl; bench/sweep.py's timed replays: "
                                  "\"torch graph\")")
    p.add_argument("--ncu", default=shutil.which("ncu") or "/usr/local/cuda/bin/ncu")
    p.add_argument("--self-test", action="store_true")
    p.add_argument("command", nargs=argparse.REMAINDER)
    args = p.parse_args()
    if args.self_test:
        return self_test()
    command = args.command[1:] if args.command[:1] == ["--"] else args.command
    if not command:
        p.error("no command")
    with tempfile.TemporaryDirectory() as tmp:
        log = args.csv or os.path.join(tmp, "ncu.csv")
        ncu = [args.ncu, "--csv", "--print-units", "base", "--metrics", METRIC, "--log-file", log]
        if args.nvtx:
            ncu += ["--nvtx", "--nvtx-include", args.nvtx + "/"]
        done = subprocess.run(ncu + command)
        text = open(log).read() if os.path.exists(log) else ""
    times = parse(text)
    if not times:
        print(f"kernel_split: ncu reported no kernel (exit status {done.returncode})", file=sys.stderr)
        return 1
    print(table(times, args.runs))
    return done.returncode


if __name__ == "__main__":
    sys.exit(main())
