#!/usr/bin/env python3
"""The training benchmark's table (bench/train.sh): per config, PyTorch's
eager and CUDA-graph step times beside gdl's graph and eager ones, and gdl's
graph time as a ratio of PyTorch's graph.

  python3 bench/train_report.py OUT
"""
import glob
import json
import os
import sys


def rows_of(path):
    try:
        with open(path) as f:
            return json.load(f)
    except (OSError, ValueError):
        return []


def main():
    out = sys.argv[1]
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


if __name__ == "__main__":
    main()
