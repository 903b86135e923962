#!/usr/bin/env python3
"""The training benchmark's table (bench/train.sh): per config, PyTorch's
eager and CUDA-graph step times beside gdl's graph and eager ones, and gdl's
graph time as a ratio of PyTorch's graph.

  python3 bench/train_report.py OUT
  python3 bench/train_report.py --self-test    # the table from fake results
"""
import glob
import io
import json
import os
import sys
import tempfile
from contextlib import redirect_stdout


def rows_of(path):
    try:
        with open(path) as f:
            return json.load(f)
    except (OSError, ValueError):
        return []


def table(out):
    configs = sorted({os.path.basename(p).split("_", 1)[1][:-5] for p in glob.glob(os.path.join(out, "*_*.json"))})
    print("| config | params | tokens/step | device | torch eager us | torch graph us | gdl graph us | gdl eager us "
          "| gdl graph / torch graph | gdl check (loss, worst moment error) |")
    print("|---|---|---|---|---|---|---|---|---|---|")
    for config in configs:
        torch_rows = {r["mode"]: r for r in rows_of(os.path.join(out, f"torch_{config}.json"))}
        gdl_rows = {r["mode"]: r for r in rows_of(os.path.join(out, f"gdl_{config}.json"))}
        t = torch_rows.get("graph") or torch_rows.get("eager") or {}
        g = gdl_rows.get("graph", {})

        def us(rows, mode):
            v = rows.get(mode, {}).get("step_us")
            return f"{v:.0f}" if v else "-"

        ratio = "-"
        if g.get("step_us") and torch_rows.get("graph", {}).get("step_us"):
            ratio = f"{g['step_us'] / torch_rows['graph']['step_us']:.2f}x"
        check = "-"
        if g:
            check = ("passed" if g.get("checked") else "FAILED") + \
                f" ({g.get('loss_error', float('nan')):.1e}, {g.get('worst_moment_error', float('nan')):.1e})"
        print(f"| {config} | {t.get('params', '-')} | {t.get('tokens_per_step', '-')} | {t.get('device', '-')} "
              f"| {us(torch_rows, 'eager')} | {us(torch_rows, 'graph')} | {us(gdl_rows, 'graph')} "
              f"| {us(gdl_rows, 'eager')} | {ratio} | {check} |")


def self_test():
    """Fake results: a checked config with both tools, one whose gdl check
    failed (no times), one that PyTorch alone ran."""
    torch_row = lambda mode, us: {"mode": mode, "step_us": us, "params": 1000, "tokens_per_step": 64, "device": "GPU"}
    results = {
        "torch_a.json": [torch_row("eager", 900.0), torch_row("graph", 400.0)],
        "gdl_a.json": [{"mode": "graph", "step_us": 200.0, "checked": True, "loss_error": 1e-5,
                        "worst_moment_error": 2e-3}, {"mode": "eager", "step_us": 700.0, "checked": True}],
        "torch_b.json": [torch_row("graph", 100.0)],
        "gdl_b.json": [{"mode": "graph", "checked": False, "loss_error": 0.5, "worst_moment_error": 1.0}],
        "torch_c.json": [torch_row("graph", 50.0)],
    }
    with tempfile.TemporaryDirectory() as out:
        for name, rows in results.items():
            with open(os.path.join(out, name), "w") as f:
                json.dump(rows, f)
        text = io.StringIO()
        with redirect_stdout(text):
            table(out)
    rows = {line.split("|")[1].strip(): [c.strip() for c in line.split("|")[1:-1]]
            for line in text.getvalue().splitlines()[2:]}
    assert sorted(rows) == ["a", "b", "c"], rows
    assert rows["a"][4:9] == ["900", "400", "200", "700", "0.50x"], rows["a"]
    assert rows["a"][9].startswith("passed"), rows["a"]
    assert rows["b"][6] == "-" and rows["b"][8] == "-" and rows["b"][9].startswith("FAILED"), rows["b"]
    assert rows["c"][6] == "-" and rows["c"][9] == "-", rows["c"]
    print("train_report self-test ok")


def main():
    if sys.argv[1:] == ["--self-test"]:
        self_test()
    else:
        table(sys.argv[1])


if __name__ == "__main__":
    main()
