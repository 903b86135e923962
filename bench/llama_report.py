#!/usr/bin/env python3
"""One table from bench/llama.sh's results: gdl beside PyTorch for each row.

usage: bench/llama_report.py OUT CONFIG
Reads OUT/torch_CONFIG.json (bench/llama_torch.py) and OUT/gdl_CONFIG.json
(llama_generate --bench) and prints a markdown table: per-step device time
of gdl and of PyTorch eager, CUDA graph and torch.compile, gdl's ratio to
the graph and to the floor, gdl's host time per step and its tokens/s.
"""
import json
import sys


def main():
    out, config = sys.argv[1], sys.argv[2]
    with open(f"{out}/torch_{config}.json") as f:
        torch_rows = json.load(f)["rows"]
    with open(f"{out}/gdl_{config}.json") as f:
        gdl = json.load(f)
    torch_at = {}
    floor_at = {}
    for r in torch_rows:
        key = (r["phase"], r["batch"], r["context"])
        torch_at[(r["mode"],) + key] = r.get("device_us")
        if r.get("floor_us"):
            floor_at[key] = r["floor_us"]

    def fmt(v, spec="{:.0f}"):
        return spec.format(v) if v else "-"

    print(f"| {config} | batch | context | gdl us | eager us | graph us | compile us | gdl / graph | floor us | gdl / floor | gdl host us | gdl tok/s |")
    print("|---|---|---|---|---|---|---|---|---|---|---|---|")
    for r in gdl["rows"]:
        key = (r["phase"], r["batch"], r["context"])
        g = r["device_us"]
        graph = torch_at.get(("graph",) + key)
        floor = floor_at.get(key)
        tokens = r["batch"] if r["phase"] == "decode" else r["context"]
        print(f"| {r['phase']} | {r['batch']} | {r['context']} | {g:.0f} | {fmt(torch_at.get(('eager',) + key))} | "
              f"{fmt(graph)} | {fmt(torch_at.get(('compile',) + key))} | {fmt(g / graph if graph else None, '{:.2f}')} | "
              f"{fmt(floor)} | {fmt(g / floor if floor else None, '{:.2f}')} | {r['host_us']:.1f} | {tokens / g * 1e6:.0f} |")
    print(f"\ngdl compile of the decoder on this machine: {gdl['compile_s']:.1f} s")


if __name__ == "__main__":
    main()
