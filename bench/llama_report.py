#!/usr/bin/env python3
"""One table from bench/llama.sh's results: gdl beside PyTorch for each row.

usage: bench/llama_report.py OUT CONFIG [TP]
Reads OUT/torch_CONFIG.json (bench/llama_torch.py) and OUT/gdl_CONFIG.json
(llama_generate --bench) and prints a markdown table: per-step device time
of gdl and of PyTorch eager, CUDA graph and torch.compile, gdl's ratio to
the graph and to the floor, gdl's host time per step and its tokens/s.
With TP > 1, a second table from OUT/gdl_tpTP_CONFIG.json and
OUT/torch_tpTP_CONFIG.json: the decode rows over TP GPUs beside one GPU.
"""
import json
import os
import sys


def fmt(v, spec="{:.0f}"):
    return spec.format(v) if v else "-"


def ratio(a, b):
    return fmt(a / b if a and b else None, "{:.2f}")


def torch_times(path):
    """{(mode, phase, batch, context): device_us} and {(phase, batch, context): floor_us}."""
    with open(path) as f:
        rows = json.load(f)["rows"]
    times, floors = {}, {}
    for r in rows:
        key = (r["phase"], r["batch"], r["context"])
        times[(r["mode"],) + key] = r.get("device_us")
        if r.get("floor_us"):
            floors[key] = r["floor_us"]
    return times, floors


def gdl_times(path):
    with open(path) as f:
        return {(r["phase"], r["batch"], r["context"]): r["device_us"] for r in json.load(f)["rows"]}


def tensor_parallel_table(out, config, tp, gdl_one, torch_one):
    gdl_path, torch_path = f"{out}/gdl_tp{tp}_{config}.json", f"{out}/torch_tp{tp}_{config}.json"
    gdl_tp = gdl_times(gdl_path) if os.path.exists(gdl_path) else {}
    torch_tp, floor_tp = torch_times(torch_path) if os.path.exists(torch_path) else ({}, {})
    print(f"\nDecode over {tp} GPUs (TP={tp}) beside one (TP=1); device us per step, rank 0's events.\n")
    print(f"| {config} | batch | context | gdl TP=1 | gdl TP={tp} | gdl TP={tp} / TP=1 | torch graph TP=1 | "
          f"torch graph TP={tp} | torch eager TP={tp} | gdl / torch graph, TP={tp} | floor TP={tp} | gdl / floor |")
    print("|---|---|---|---|---|---|---|---|---|---|---|---|")
    for key in sorted(k for k in set(gdl_one) | set(gdl_tp) if k[0] == "decode"):
        g1, gt = gdl_one.get(key), gdl_tp.get(key)
        t1, tt = torch_one.get(("graph",) + key), torch_tp.get(("graph",) + key)
        floor = floor_tp.get(key)
        print(f"| decode | {key[1]} | {key[2]} | {fmt(g1)} | {fmt(gt)} | {ratio(gt, g1)} | {fmt(t1)} | {fmt(tt)} | "
              f"{fmt(torch_tp.get(('eager',) + key))} | {ratio(gt, tt)} | {fmt(floor)} | {ratio(gt, floor)} |")


def main():
    out, config = sys.argv[1], sys.argv[2]
    tp = int(sys.argv[3]) if len(sys.argv) > 3 else 1
    torch_at, floor_at = torch_times(f"{out}/torch_{config}.json")
    with open(f"{out}/gdl_{config}.json") as f:
        gdl = json.load(f)

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
    if tp > 1:
        tensor_parallel_table(out, config, tp, gdl_times(f"{out}/gdl_{config}.json"), torch_at)


if __name__ == "__main__":
    main()
