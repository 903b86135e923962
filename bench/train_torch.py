#!/usr/bin/env python3
"""PyTorch's side of the training benchmark (bench/train.sh): the model of
examples/train_lm.gdl (a Llama-architecture language model, f32 weights,
bf16 matmuls and attention, next-token cross-entropy, AdamW), one training
step at a time.

  python3 bench/train_torch.py --config small --data DIR --json OUT.json [--steps 50] [--warmup 10]

1. Draws the initial weights (normal, std 0.02; norms 1) and one batch of
   tokens from a seeded generator and writes them under DIR as raw files
   (f32, i32; the rope tables bf16), with DIR/manifest.json naming the
   config (the consts gdl compiles train_lm.gdl with), every file and the
   step's scalars.
2. Runs one step from those weights with torch.optim.AdamW (fused) and
   writes what it left: the loss, and per weight its new value and Adam's
   two moments (the first is 0.1 times the gradient), for gdl to compare.
3. Times steps, each with its own batch of tokens copied in: eager (the
   model, backward, AdamW fused) and the same captured in one CUDA graph
   (AdamW capturable), replayed. A step's time is the wall clock over
   --steps steps after --warmup, synchronized at both ends, divided by the
   number of steps.
"""
import argparse
import json
import math
import os
import time

import torch
import torch.nn.functional as F

CONFIGS = {
    # examples/train_lm.gdl's own sizes: a step of small kernels, where
    # launch overhead is most of the time.
    "small": dict(L=2, H=128, NH=4, KVH=2, HD=32, F=352, V=512, S=64, B=2),
    # A 62M-parameter model over 4096 tokens a step: matmul-bound.
    "base": dict(L=4, H=1024, NH=16, KVH=4, HD=64, F=2816, V=8192, S=512, B=8),
}
EPS = 1e-5
BETAS = (0.9, 0.95)
ADAM_EPS = 1e-8
DECAY = 0.1
LR = 1e-3
WEIGHTS = ["embed", "attn_norm", "wqkv", "wo", "mlp_norm", "w_gate_up", "w_down", "final_norm", "lm_head"]


def weight_shapes(c):
    L, H, NH, KVH, HD, Fm, V = c["L"], c["H"], c["NH"], c["KVH"], c["HD"], c["F"], c["V"]
    return {
        "embed": [V, H], "attn_norm": [L, H], "wqkv": [L, H, (NH + 2 * KVH) * HD], "wo": [L, NH * HD, H],
        "mlp_norm": [L, H], "w_gate_up": [L, H, 2 * Fm], "w_down": [L, Fm, H], "final_norm": [H], "lm_head": [H, V],
    }


def rope(x, cos, sin):
    half = x.shape[-1] // 2
    x1, x2 = x[..., :half], x[..., half:]
    return torch.cat((x1 * cos - x2 * sin, x2 * cos + x1 * sin), dim=-1)


def loss_of(W, tokens, cos, sin, c, dt):
    """The forward of train_lm.gdl: f32 weights cast to dt where read."""
    L, H, NH, KVH, HD, Fm, S, B = c["L"], c["H"], c["NH"], c["KVH"], c["HD"], c["F"], c["S"], c["B"]
    inputs = tokens[:, :S].reshape(-1).long()
    targets = tokens[:, 1:].reshape(-1).long()
    cs, sn = cos.view(1, S, 1, HD // 2), sin.view(1, S, 1, HD // 2)
    h = W["embed"][inputs].to(dt)
    for l in range(L):
        n = F.rms_norm(h, (H,), W["attn_norm"][l].to(dt), EPS)
        qkv = n @ W["wqkv"][l].to(dt)
        q = rope(qkv[:, : NH * HD].view(B, S, NH, HD), cs, sn)
        k = rope(qkv[:, NH * HD : (NH + KVH) * HD].view(B, S, KVH, HD), cs, sn)
        v = qkv[:, (NH + KVH) * HD :].view(B, S, KVH, HD)
        o = F.scaled_dot_product_attention(q.transpose(1, 2), k.transpose(1, 2), v.transpose(1, 2), is_causal=True,
                                           enable_gqa=True)
        h = h + o.transpose(1, 2).reshape(B * S, NH * HD) @ W["wo"][l].to(dt)
        m = F.rms_norm(h, (H,), W["mlp_norm"][l].to(dt), EPS)
        gate_up = m @ W["w_gate_up"][l].to(dt)
        h = h + (F.silu(gate_up[:, :Fm]) * gate_up[:, Fm:]) @ W["w_down"][l].to(dt)
    logits = (F.rms_norm(h, (H,), W["final_norm"].to(dt), EPS) @ W["lm_head"].to(dt)).float()
    return F.cross_entropy(logits, targets)


def initial_weights(c, gen, dev):
    W = {}
    for name, shape in weight_shapes(c).items():
        if name.endswith("norm"):
            W[name] = torch.ones(shape, device=dev)
        else:
            W[name] = (torch.randn(shape, generator=gen, device=dev) * 0.02)
    return W


def rope_tables(c, dev, dt):
    HD, S = c["HD"], c["S"]
    inv = 1.0 / (10000.0 ** (torch.arange(0, HD // 2, device=dev, dtype=torch.float64) * 2 / HD))
    angles = torch.arange(S, device=dev, dtype=torch.float64)[:, None] * inv[None, :]
    return angles.cos().to(dt), angles.sin().to(dt)


def write(root, rel, t):
    t = t.detach().contiguous().cpu()
    if t.dtype == torch.bfloat16:
        t = t.view(torch.int16)
    with open(os.path.join(root, rel), "wb") as f:
        f.write(t.numpy().tobytes())
    return rel


def make_optimizer(W, capturable):
    return torch.optim.AdamW(list(W.values()), lr=LR, betas=BETAS, eps=ADAM_EPS, weight_decay=DECAY, fused=True,
                             capturable=capturable)


def step_fn(W, opt, tokens, cos, sin, c, dt):
    def step():
        opt.zero_grad(set_to_none=False)
        loss = loss_of(W, tokens, cos, sin, c, dt)
        loss.backward()
        opt.step()
        return loss
    return step


def time_steps(run, batches, static_tokens, steps, warmup):
    for i in range(warmup):
        static_tokens.copy_(batches[i % len(batches)])
        run()
    torch.cuda.synchronize()
    start = time.perf_counter()
    for i in range(steps):
        static_tokens.copy_(batches[i % len(batches)])
        run()
    torch.cuda.synchronize()
    return (time.perf_counter() - start) / steps * 1e6


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--config", default="small", choices=sorted(CONFIGS))
    ap.add_argument("--data", required=True)
    ap.add_argument("--json", required=True)
    ap.add_argument("--steps", type=int, default=50)
    ap.add_argument("--warmup", type=int, default=10)
    args = ap.parse_args()
    c = CONFIGS[args.config]
    dev, dt = "cuda", torch.bfloat16
    torch.backends.cuda.matmul.allow_tf32 = False
    os.makedirs(args.data, exist_ok=True)
    gen = torch.Generator(device=dev)
    gen.manual_seed(1234)
    W = initial_weights(c, gen, dev)
    cos, sin = rope_tables(c, dev, dt)
    batches = [torch.randint(0, c["V"], (c["B"], c["S"] + 1), generator=gen, device=dev, dtype=torch.int32)
               for _ in range(4)]
    manifest = {"config": args.config, "consts": dict(c, DT="bf16"), "weights": {}, "scalars": {}, "after": {}}
    for name, w in W.items():
        manifest["weights"][name] = {"shape": list(w.shape), "file": write(args.data, f"w0_{name}.f32", w)}
    manifest["rope_cos"] = write(args.data, "rope_cos.bf16", cos)
    manifest["rope_sin"] = write(args.data, "rope_sin.bf16", sin)
    manifest["tokens"] = [write(args.data, f"tokens{i}.i32", b) for i, b in enumerate(batches)]
    # Step 1's scalars for gdl: lr and Adam's bias corrections 1 / (1 - beta^1).
    manifest["scalars"] = {"lr": LR, "c1": 1 / (1 - BETAS[0]), "c2": 1 / (1 - BETAS[1])}

    # One step from the initial weights: what gdl must reproduce.
    P = {k: v.clone().requires_grad_(True) for k, v in W.items()}
    opt = make_optimizer(P, capturable=False)
    static_tokens = batches[0].clone()
    loss = step_fn(P, opt, static_tokens, cos, sin, c, dt)()
    manifest["loss"] = loss.item()
    for name, p in P.items():
        state = opt.state[p]
        manifest["after"][name] = {
            "w": write(args.data, f"w1_{name}.f32", p),
            "m": write(args.data, f"m1_{name}.f32", state["exp_avg"]),
            "v": write(args.data, f"v1_{name}.f32", state["exp_avg_sq"]),
        }
    with open(os.path.join(args.data, "manifest.json"), "w") as f:
        json.dump(manifest, f, indent=1)

    rows = []
    tokens_per_step = c["B"] * c["S"]
    params = sum(math.prod(s) for s in weight_shapes(c).values())
    # Eager.
    P = {k: v.clone().requires_grad_(True) for k, v in W.items()}
    opt = make_optimizer(P, capturable=False)
    run = step_fn(P, opt, static_tokens, cos, sin, c, dt)
    rows.append({"mode": "eager", "step_us": time_steps(run, batches, static_tokens, args.steps, args.warmup)})
    # The whole step in one CUDA graph (warm-up on a side stream first, as torch.cuda.graphs asks).
    P = {k: v.clone().requires_grad_(True) for k, v in W.items()}
    opt = make_optimizer(P, capturable=True)
    run = step_fn(P, opt, static_tokens, cos, sin, c, dt)
    side = torch.cuda.Stream()
    side.wait_stream(torch.cuda.current_stream())
    with torch.cuda.stream(side):
        for _ in range(3):
            run()
    torch.cuda.current_stream().wait_stream(side)
    graph = torch.cuda.CUDAGraph()
    opt.zero_grad(set_to_none=False)
    with torch.cuda.graph(graph):
        run()
    rows.append({"mode": "graph", "step_us": time_steps(graph.replay, batches, static_tokens, args.steps, args.warmup)})
    for r in rows:
        r.update(config=args.config, tool="torch", tokens_per_step=tokens_per_step, params=params,
                 device=torch.cuda.get_device_name(), torch=torch.__version__)
        print(f"torch {args.config} {r['mode']}: {r['step_us']:.1f} us/step")
    with open(args.json, "w") as f:
        json.dump(rows, f, indent=1)


if __name__ == "__main__":
    main()
