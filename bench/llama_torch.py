#!/usr/bin/env python3
"""PyTorch (Hugging Face transformers) timings for a Llama decoder, bf16, random weights.

  python3 bench/llama_torch.py --config 1b,8b --batches 1,8,32,64 --contexts 512,4096 \\
      --prefill 128,2048 --modes eager,graph,compile --json OUT.json [--save-dir DIR] [--quick]

Per config (1b: Llama 3.2 1B shapes, 8b: Llama 3.1 8B shapes, tiny: a 2-layer toy):

decode   one step for B sequences at position ctx-1 against a StaticCache of
         max_cache_len = ctx (its contents are whatever was allocated; the
         attention reads all ctx slots either way), for each B in --batches and
         ctx in --contexts:
           eager    the model call; CUDA events give device time, the host
                    clock around the call alone gives host time
           graph    one step captured in a torch.cuda.CUDAGraph (warm-up on a
                    side stream first), inputs copied into static tensors
                    before each replay; host time of replay() alone and of
                    copy_ + replay()
           compile  torch.compile(model.forward, mode="reduce-overhead",
                    fullgraph=True), run in a child process so that a crash
                    there keeps the other results
prefill  one forward of [1, P] ids into a fresh StaticCache of max_cache_len =
         P, for each P in --prefill (eager and compile; no graph row)

Every row: config, mode, phase, batch, context, device_us and host_us
(medians), tokens_per_s, floor_us, bytes, flops, error. The floor is the
larger of bytes / 4.26e12 B/s (the H200 device-to-device copy bandwidth
measured in this project) and flops / 989e12 (dense bf16 tensor-core peak of
an H100/H200 SXM). Bytes: the weights read once (the parameter count * 2,
the tied embedding once; an untied input embedding table is only gathered
from, so it is left out) plus the KV cache read, 2 * layers * B * kv_heads *
ctx * head_dim * 2. Flops: 2 * rows * matmul weights + attention.

--tp-load DIR (run under torchrun --nproc-per-node N, one GPU a rank): the
         decode rows (eager and graph) of the model saved in DIR by an earlier
         --save-dir run, split over the N ranks by transformers' own tensor
         parallelism (tp_plan="auto", torch.distributed with NCCL); each rank
         holds heads / N query heads, kv_heads / N of the cache. Rank 0 times
         and writes the rows (field "tp": N); every rank waits at a barrier
         before each timed run, so rank 0's events do not time another rank's
         late start. The floor divides the bytes among the N GPUs.

--save-dir DIR writes save_pretrained's files (config.json, model.safetensors)
and check.json + check_logits.f32: the prompt (16 ids drawn with seed 1234)
and the float32 logits of its last position after one prefill, so that gdl
can check its own prefill on the same weights. With one config the files go
into DIR, with several into DIR/<config>.

The JSON file is rewritten after every row, so a cut run keeps what it measured.
"""
import argparse
import datetime
import gc
import inspect
import json
import math
import os
import statistics
import subprocess
import sys
import tempfile
import time

sys.dont_write_bytecode = True  # no __pycache__ in the source tree

COPY_BANDWIDTH = 4.26e12     # B/s, H200 device-to-device copy, measured in this project
TENSOR_PEAK = 989e12         # flop/s, dense bf16, H100/H200 SXM
KV_LIMIT = 100 * 2**30       # bytes; a larger KV cache is not attempted
CHECK_SEED, CHECK_LEN = 1234, 16

LLAMA3_ROPE = {"rope_type": "llama3", "low_freq_factor": 1.0, "high_freq_factor": 4.0,
               "original_max_position_embeddings": 8192}
CONFIGS = {
    # Llama 3.2 1B
    "1b": dict(hidden=2048, layers=16, heads=32, kv_heads=8, head_dim=64, intermediate=8192, vocab=128256,
               tie=True, rope_theta=500000.0, rms_eps=1e-5, max_positions=131072,
               rope_scaling=dict(LLAMA3_ROPE, factor=32.0)),
    # Llama 3.1 8B
    "8b": dict(hidden=4096, layers=32, heads=32, kv_heads=8, head_dim=128, intermediate=14336, vocab=128256,
               tie=False, rope_theta=500000.0, rms_eps=1e-5, max_positions=131072,
               rope_scaling=dict(LLAMA3_ROPE, factor=8.0)),
    "tiny": dict(hidden=256, layers=2, heads=8, kv_heads=2, head_dim=32, intermediate=512, vocab=1000,
                 tie=False, rope_theta=10000.0, rms_eps=1e-5, max_positions=131072, rope_scaling=None),
}
MODES = ("eager", "graph", "compile")


def int_list(text, what):
    try:
        vals = [int(x) for x in text.split(",") if x.strip()]
    except ValueError:
        raise argparse.ArgumentTypeError(f"{what}: not a list of integers: {text!r}")
    if not vals or min(vals) < 1:
        raise argparse.ArgumentTypeError(f"{what}: needs positive integers: {text!r}")
    return vals


def parse_args(argv=None):
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--config", default="1b", help="comma-separated: " + ", ".join(CONFIGS))
    ap.add_argument("--batches", default="1,8,32,64")
    ap.add_argument("--contexts", default="512,4096")
    ap.add_argument("--prefill", default="128,2048", help="prompt lengths; empty string for none")
    ap.add_argument("--modes", default="eager,graph,compile")
    ap.add_argument("--json", required=True, help="output JSON file")
    ap.add_argument("--save-dir", default=None, help="save the weights and the prefill check here")
    ap.add_argument("--warmup", type=int, default=5)
    ap.add_argument("--iters", type=int, default=20)
    ap.add_argument("--quick", action="store_true", help="warmup 2, iters 5")
    ap.add_argument("--compile-budget-s", type=float, default=900.0,
                    help="no new compile measurement starts after this many seconds of compiling (per config)")
    ap.add_argument("--compile-timeout-s", type=float, default=1800.0,
                    help="the compile child process is killed after this long (per config)")
    ap.add_argument("--compile-in-process", action="store_true",
                    help="compile in this process instead of a child (a crash there ends the run)")
    ap.add_argument("--tp-load", default=None, metavar="DIR",
                    help="tensor-parallel decode of the model saved in DIR, under torchrun (see above)")
    args = ap.parse_args(argv)
    args.configs = [c.strip() for c in args.config.split(",") if c.strip()]
    for c in args.configs:
        if c not in CONFIGS:
            ap.error(f"unknown config {c!r}; known: {', '.join(CONFIGS)}")
    try:
        args.batch_list = int_list(args.batches, "--batches")
        args.context_list = int_list(args.contexts, "--contexts")
        args.prefill_list = int_list(args.prefill, "--prefill") if args.prefill.strip() else []
    except argparse.ArgumentTypeError as err:
        ap.error(str(err))
    args.mode_list = [m.strip() for m in args.modes.split(",") if m.strip()]
    for m in args.mode_list:
        if m not in MODES:
            ap.error(f"unknown mode {m!r}; known: {', '.join(MODES)}")
    if args.tp_load:
        if len(args.configs) != 1:
            ap.error("--tp-load takes one --config, the shape of the saved model")
        if "compile" in args.mode_list:
            ap.error("--tp-load measures eager and graph decode only")
        args.prefill_list = []
    if args.quick:
        args.warmup, args.iters = 2, 5
    if args.iters < 1 or args.warmup < 0:
        ap.error("--iters must be >= 1 and --warmup >= 0")
    return args


# ------------------------------------------------------------------ output

class Results:
    """Rows plus metadata, rewritten to --json after every change."""

    def __init__(self, path, meta):
        self.path = path  # None: another rank's rows, neither written nor printed
        self.doc = dict(meta, configs={}, rows=[])

    def add(self, row, quiet=False):
        self.doc["rows"].append(row)
        self.write()
        if not quiet and self.path:
            print(format_row(row), flush=True)

    def write(self):
        if not self.path:
            return
        folder = os.path.dirname(os.path.abspath(self.path))
        os.makedirs(folder, exist_ok=True)
        fd, tmp = tempfile.mkstemp(dir=folder, prefix=".llama_torch.", suffix=".json")
        with os.fdopen(fd, "w") as f:
            json.dump(self.doc, f, indent=1)
        os.replace(tmp, self.path)


TABLE_HEAD = (f"{'config':6} {'mode':8} {'phase':8} {'B':>4} {'ctx/P':>6} {'device_us':>10} {'host_us':>9} "
              f"{'tok/s':>11} {'floor_us':>9} {'x floor':>7}  error")


def format_row(r):
    def num(v, fmt):
        return format(v, fmt) if isinstance(v, (int, float)) else "-"
    ratio = r["device_us"] / r["floor_us"] if r.get("device_us") and r.get("floor_us") else None
    err = r.get("error") or ""
    return (f"{r['config']:6} {r['mode']:8} {r['phase']:8} {r['batch']:4d} {r['context']:6d} "
            f"{num(r.get('device_us'), '10.1f')} {num(r.get('host_us'), '9.1f')} {num(r.get('tokens_per_s'), '11.1f')} "
            f"{num(r.get('floor_us'), '9.1f')} {num(ratio, '7.2f')}  {err[:100]}")


def summarize(samples):
    s = sorted(samples)
    pick = lambda q: s[min(len(s) - 1, max(0, int(round(q * (len(s) - 1)))))]  # noqa: E731
    return statistics.median(s), pick(0.1), pick(0.9), sum(s) / len(s)


# ------------------------------------------------------------------ model

def make_config(spec):
    """LlamaConfig across transformers 4.x (rope_theta, rope_scaling) and 5.x (rope_parameters)."""
    from transformers import LlamaConfig
    common = dict(
        hidden_size=spec["hidden"], num_hidden_layers=spec["layers"], num_attention_heads=spec["heads"],
        num_key_value_heads=spec["kv_heads"], head_dim=spec["head_dim"], intermediate_size=spec["intermediate"],
        vocab_size=spec["vocab"], max_position_embeddings=spec["max_positions"], rms_norm_eps=spec["rms_eps"],
        tie_word_embeddings=spec["tie"], attention_bias=False, mlp_bias=False, hidden_act="silu",
        initializer_range=0.02, attn_implementation="sdpa",
    )
    scaling = spec["rope_scaling"]
    if "rope_parameters" in inspect.signature(LlamaConfig.__init__).parameters:
        rope = dict(scaling) if scaling else {"rope_type": "default"}
        rope["rope_theta"] = spec["rope_theta"]
        config = LlamaConfig(rope_parameters=rope, **common)
    else:
        config = LlamaConfig(rope_theta=spec["rope_theta"], rope_scaling=dict(scaling) if scaling else None, **common)
    # Read the RoPE settings back: a silently ignored argument would time a different model.
    rp = getattr(config, "rope_parameters", None)
    if isinstance(rp, dict) and "rope_theta" in rp:
        theta, rtype = rp.get("rope_theta"), rp.get("rope_type", rp.get("type", "default"))
    else:
        rs = getattr(config, "rope_scaling", None) or {}
        theta, rtype = getattr(config, "rope_theta", None), rs.get("rope_type", rs.get("type", "default"))
    want = scaling["rope_type"] if scaling else "default"
    if theta is None or abs(float(theta) - spec["rope_theta"]) > 1e-6 * spec["rope_theta"] or rtype != want:
        raise RuntimeError(f"LlamaConfig reads back rope_theta={theta}, rope_type={rtype}; "
                           f"wanted {spec['rope_theta']}, {want}")
    return config


def build_model(config):
    """Random bf16 weights, initialised on the GPU (8B on the CPU takes minutes)."""
    import torch
    from transformers import LlamaForCausalLM
    torch.manual_seed(0)
    previous = torch.get_default_dtype()
    torch.set_default_dtype(torch.bfloat16)
    try:
        with torch.device("cuda"):
            model = LlamaForCausalLM(config)
    finally:
        torch.set_default_dtype(previous)
    with torch.no_grad():
        for p in model.parameters():  # parameters only: inv_freq stays float32
            if p.dtype != torch.bfloat16:
                p.data = p.data.to(torch.bfloat16)
    model.eval()
    if getattr(model.config, "_attn_implementation", None) != "sdpa" and hasattr(model, "set_attn_implementation"):
        model.set_attn_implementation("sdpa")
    return model


def model_facts(model, spec):
    params = sum(p.numel() for p in model.parameters())  # a tied weight is one parameter
    tied = model.lm_head.weight.data_ptr() == model.model.embed_tokens.weight.data_ptr()
    return weight_facts(model, spec, params, tied)


def checkpoint_facts(model, spec, folder):
    """model_facts from the saved checkpoint's tensor shapes: a tensor-parallel
    model's parameters hold each rank's shard, not the weights."""
    import glob
    from safetensors import safe_open
    params = 0
    files = sorted(glob.glob(os.path.join(folder, "*.safetensors")))
    if not files:
        raise RuntimeError(f"no *.safetensors in {folder}")
    for path in files:
        with safe_open(path, framework="pt") as f:
            for key in f.keys():
                params += math.prod(f.get_slice(key).get_shape())
    return weight_facts(model, spec, params, bool(getattr(model.config, "tie_word_embeddings", False)))


def weight_facts(model, spec, params, tied):
    emb = spec["vocab"] * spec["hidden"]
    # An untied input embedding is only gathered from (B rows); every other
    # weight, the LM head included, is read in full once per step.
    streamed = params if tied else params - emb
    return {"params": params, "tied": tied, "embedding_params": emb, "streamed_params": streamed,
            "weight_bytes": 2 * streamed,
            "attn_implementation": getattr(model.config, "_attn_implementation", None),
            "inv_freq_dtype": str(next((b.dtype for n, b in model.named_buffers() if n.endswith("inv_freq")), None))}


def forward_params(model):
    try:
        names = set(inspect.signature(model.forward).parameters)
    except (TypeError, ValueError):
        names = set()
    inner = getattr(model, "model", None)
    if inner is not None:
        try:
            names |= set(inspect.signature(inner.forward).parameters)
        except (TypeError, ValueError):
            pass
    return names


def save_and_check(model, spec, folder, facts):
    """save_pretrained plus the prefill check (prompt ids and last-position logits)."""
    import numpy as np
    import torch
    os.makedirs(folder, exist_ok=True)
    sig = inspect.signature(model.save_pretrained).parameters
    kwargs = {}
    if "safe_serialization" in sig:  # gone in transformers 5 (always safetensors)
        kwargs["safe_serialization"] = True
    if "max_shard_size" in sig:
        kwargs["max_shard_size"] = "100GB"  # one file, also for 8B
    t0 = time.perf_counter()
    model.save_pretrained(folder, **kwargs)
    save_s = time.perf_counter() - t0
    gen = torch.Generator().manual_seed(CHECK_SEED)
    prompt = torch.randint(0, spec["vocab"], (CHECK_LEN,), generator=gen, dtype=torch.long)
    with torch.no_grad():
        ids = prompt.view(1, -1).cuda()
        logits = model(input_ids=ids, attention_mask=torch.ones_like(ids), use_cache=False).logits[0, -1].float().cpu()
    np.ascontiguousarray(logits.numpy(), dtype="<f4").tofile(os.path.join(folder, "check_logits.f32"))
    top = torch.topk(logits, 5)
    check = {
        "prompt": prompt.tolist(),
        "batch": 1,
        "logits": "check_logits.f32",
        "logits_format": "float32 little-endian, [vocab], the last prompt position",
        "vocab": spec["vocab"],
        "dtype": "bf16",
        "attn_implementation": facts["attn_implementation"],
        "top5_ids": top.indices.tolist(),
        "top5_logits": top.values.tolist(),
        "model_files": sorted(os.listdir(folder)),
        "save_s": save_s,
    }
    with open(os.path.join(folder, "check.json"), "w") as f:
        json.dump(check, f, indent=1)
    return check


# ------------------------------------------------------------------ cache

def make_static_cache(config, batch, max_len, kv_heads, head_dim):
    """A StaticCache allocated on the GPU now, across transformers versions.

    5.x: StaticCache(config=, max_cache_len=) allocates lazily (early_initialization
    does it now); earlier: max_batch_size / batch_size, device and dtype in the constructor.
    """
    import torch
    from transformers import StaticCache
    attempts = [
        dict(config=config, max_cache_len=max_len),
        dict(config=config, max_batch_size=batch, max_cache_len=max_len, device="cuda", dtype=torch.bfloat16),
        dict(config=config, batch_size=batch, max_cache_len=max_len, device="cuda", dtype=torch.bfloat16),
    ]
    errors = []
    for kwargs in attempts:
        try:
            cache = StaticCache(**kwargs)
        except TypeError as err:
            errors.append(f"{sorted(kwargs)}: {err}")
            continue
        if hasattr(cache, "early_initialization") and not getattr(cache, "is_initialized", False):
            try:
                cache.early_initialization(batch_size=batch, num_heads=kv_heads, head_dim=head_dim,
                                           dtype=torch.bfloat16, device=torch.device("cuda"))
            except TypeError:
                cache.early_initialization(batch, kv_heads, head_dim, torch.bfloat16, torch.device("cuda"))
        shape = cache_shape(cache)
        if shape is not None and (tuple(shape[0]) != (batch, kv_heads, max_len, head_dim) or shape[1] != "cuda"):
            errors.append(f"{sorted(kwargs)}: cache tensors {shape}")
            del cache
            continue
        return cache
    raise RuntimeError("no StaticCache signature worked: " + "; ".join(errors))


def cache_shape(cache):
    """(shape, device type) of the first layer's keys, or None when not known."""
    layers = getattr(cache, "layers", None)
    if layers:
        keys = getattr(layers[0], "keys", None)
    else:
        kc = getattr(cache, "key_cache", None)
        keys = kc[0] if kc else None
    if keys is None or not hasattr(keys, "shape"):
        return None
    return tuple(keys.shape), keys.device.type


def set_cache_length(cache, length):
    """Point the cache's own write position at `length`, where it has one.

    Recent StaticLayers keep the write offset in a device tensor
    (cumulative_length) that every call advances, ignoring cache_position;
    without a reset before each call, repeated steps would walk past
    max_cache_len and index out of bounds on the device.
    """
    import torch
    found = False
    for layer in getattr(cache, "layers", None) or []:
        counter = getattr(layer, "cumulative_length", None)
        if counter is None:
            continue
        if torch.is_tensor(counter):
            counter.fill_(length)
        else:
            layer.cumulative_length = length
        found = True
    return found


# ------------------------------------------------------------------ timing

def time_calls(call, prep, warmup, iters):
    """Device time (events) and host time (around the call alone), GPU idle at each start."""
    import torch
    for i in range(warmup):
        prep(i)
        call(i)
    torch.cuda.synchronize()
    start, end = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
    dev, host = [], []
    for i in range(iters):
        prep(warmup + i)
        torch.cuda.synchronize()
        start.record()
        t0 = time.perf_counter()
        out = call(warmup + i)
        t1 = time.perf_counter()
        end.record()
        end.synchronize()
        del out
        dev.append(start.elapsed_time(end) * 1e3)
        host.append((t1 - t0) * 1e6)
    return dev, host


def time_graph(graph, copy_inputs, prep, warmup, iters):
    """Replays: device time around replay(), host time of replay() and of copy_ + replay()."""
    import torch
    for i in range(warmup):
        prep(i)
        copy_inputs(i)
        graph.replay()
    torch.cuda.synchronize()
    start, end = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
    dev, host, host_copy = [], [], []
    for i in range(iters):
        prep(warmup + i)
        torch.cuda.synchronize()
        t0 = time.perf_counter()
        copy_inputs(warmup + i)
        t1 = time.perf_counter()
        start.record()
        t2 = time.perf_counter()
        graph.replay()
        t3 = time.perf_counter()
        end.record()
        end.synchronize()
        dev.append(start.elapsed_time(end) * 1e3)
        host.append((t3 - t2) * 1e6)
        host_copy.append((t1 - t0 + t3 - t2) * 1e6)
    return dev, host, host_copy


def free_cuda():
    import torch
    gc.collect()
    try:
        torch.cuda.synchronize()
    except Exception:  # a failed capture can leave an error to report here
        pass
    torch.cuda.empty_cache()


def cudagraph_skips():
    try:
        from torch._dynamo.utils import counters
        return int(counters["inductor"]["cudagraph_skips"])
    except Exception:
        return None


# ------------------------------------------------------------------ measurements

class Bench:
    def __init__(self, name, spec, model, facts, args, results, world=1):
        import torch
        self.torch = torch
        self.world = world  # tensor-parallel ranks (--tp-load); 1 otherwise
        self.kv_heads = spec["kv_heads"] // world  # this rank's share of the cache
        self.name, self.spec, self.model, self.facts = name, spec, model, facts
        self.args, self.results = args, results
        params = forward_params(model)
        self.pass_cache_position = "cache_position" in params
        self.keep_arg = next((a for a in ("logits_to_keep", "num_logits_to_keep") if a in params), None)
        self.compiled = None
        self.compile_spent = 0.0

    # ---- figures
    def kv_bytes(self, batch, length):
        s = self.spec
        return 2 * s["layers"] * batch * s["kv_heads"] * length * s["head_dim"] * 2

    def decode_cost(self, batch, ctx):
        s, f = self.spec, self.facts
        attn = 4 * s["layers"] * batch * ctx * s["heads"] * s["head_dim"]
        return f["weight_bytes"] + self.kv_bytes(batch, ctx), 2 * batch * f["streamed_params"] + attn

    def prefill_cost(self, plen, logits_rows):
        s, f = self.spec, self.facts
        emb = f["embedding_params"]
        attn = 4 * s["layers"] * (plen * plen / 2) * s["heads"] * s["head_dim"]
        flops = 2 * plen * (f["streamed_params"] - emb) + 2 * logits_rows * emb + attn
        return f["weight_bytes"] + self.kv_bytes(1, plen), flops

    def row(self, mode, phase, batch, context, nbytes, flops):
        mem_us = nbytes / (COPY_BANDWIDTH * self.world) * 1e6  # each GPU reads its share
        cmp_us = flops / (TENSOR_PEAK * self.world) * 1e6
        return {"config": self.name, "mode": mode, "phase": phase, "batch": batch, "context": context, "tp": self.world,
                "device_us": None, "host_us": None, "tokens_per_s": None,
                "floor_us": max(mem_us, cmp_us), "floor_memory_us": mem_us, "floor_compute_us": cmp_us,
                "bytes": nbytes, "flops": flops, "error": None}

    def fits(self, batch, length):
        need = self.kv_bytes(batch, length) // self.world
        reason = None
        free, _ = self.torch.cuda.mem_get_info()
        if need > KV_LIMIT:
            reason = f"skipped: KV cache {need / 2**30:.1f} GiB > {KV_LIMIT / 2**30:.0f} GiB"
        elif need + (2 << 30) > free:
            reason = f"skipped: KV cache {need / 2**30:.1f} GiB does not fit in {free / 2**30:.1f} GiB free"
        if self.world > 1:  # every rank skips or none does (a lone rank would wait in its all-reduces)
            flag = self.torch.tensor([1 if reason else 0], device="cuda")
            self.torch.distributed.all_reduce(flag, op=self.torch.distributed.ReduceOp.MAX)
            if flag.item() and not reason:
                reason = "skipped: the KV cache does not fit on another rank"
        return reason

    def ranks_ready(self):
        """Every rank at this point, its GPU idle: a timed run starts on all together."""
        self.torch.cuda.synchronize()
        if self.world > 1:
            self.torch.distributed.barrier()
            self.torch.cuda.synchronize()

    def kwargs(self, ids, cache, pos, cpos, prefill):
        kw = {"input_ids": ids, "past_key_values": cache, "position_ids": pos, "use_cache": True}
        if self.pass_cache_position:
            kw["cache_position"] = cpos
        if prefill and self.keep_arg:
            kw[self.keep_arg] = 1  # last position only, as generate() asks for in its prefill
        return kw

    # ---- decode
    def decode(self, mode, batch, ctx):
        torch = self.torch
        nbytes, flops = self.decode_cost(batch, ctx)
        row = self.row(mode, "decode", batch, ctx, nbytes, flops)
        row["kv_bytes"] = self.kv_bytes(batch, ctx)
        skip = self.fits(batch, ctx)
        if skip:
            row["error"] = skip
            return row
        if mode == "compile" and self.compile_spent > self.args.compile_budget_s:
            row["error"] = f"skipped: compile budget of {self.args.compile_budget_s:.0f} s spent"
            return row
        cache = graph = None
        try:
            cache = make_static_cache(self.model.config, batch, ctx, self.kv_heads, self.spec["head_dim"])
            counted = set_cache_length(cache, ctx - 1)
            row["cache_counter"] = counted
            if not counted and not self.pass_cache_position:
                row["note"] = "cache write position not controlled (no cache_position argument, no counter found)"
            pool = torch.randint(0, self.spec["vocab"], (8, batch, 1), device="cuda")
            pos = torch.full((batch, 1), ctx - 1, dtype=torch.long, device="cuda")
            cpos = torch.tensor([ctx - 1], dtype=torch.long, device="cuda")
            def prep(i):
                set_cache_length(cache, ctx - 1)
                self.ranks_ready()

            with torch.no_grad():
                if mode == "eager":
                    call = lambda i: self.model(**self.kwargs(pool[i % 8], cache, pos, cpos, False)).logits  # noqa: E731
                    dev, host = time_calls(call, prep, self.args.warmup, self.args.iters)
                elif mode == "graph":
                    graph, dev, host, host_copy = self._graph_decode(cache, pool, pos, cpos, prep)
                    row["host_copy_us"] = statistics.median(host_copy)
                else:
                    dev, host = self._compiled_calls(row, lambda i: self.kwargs(pool[i % 8], cache, pos, cpos, False),
                                                     prep)
            self._fill(row, dev, host, batch)
        except Exception as err:
            row["error"] = f"{type(err).__name__}: {err}"
        finally:
            del cache, graph
            if mode == "compile":
                self.reset_compiled()
            free_cuda()
        return row

    def _graph_decode(self, cache, pool, pos, cpos, prep):
        torch = self.torch
        static_ids = pool[0].clone()
        static_pos = pos.clone()
        static_cpos = cpos.clone()

        def step():
            return self.model(**self.kwargs(static_ids, cache, static_pos, static_cpos, False)).logits

        side = torch.cuda.Stream()
        side.wait_stream(torch.cuda.current_stream())
        with torch.cuda.stream(side):
            for i in range(3):  # allocations and lazy set-up happen here, not in the capture
                prep(i)
                step()
        torch.cuda.current_stream().wait_stream(side)
        torch.cuda.synchronize()
        prep(0)
        graph = torch.cuda.CUDAGraph()
        with torch.cuda.graph(graph):
            static_logits = step()
        del static_logits

        def copy_inputs(i):
            static_ids.copy_(pool[i % 8])
            static_pos.copy_(pos)
            static_cpos.copy_(cpos)

        dev, host, host_copy = time_graph(graph, copy_inputs, prep, self.args.warmup, self.args.iters)
        return graph, dev, host, host_copy

    def _compiled_calls(self, row, make_kwargs, prep):
        """First call (compile), two more (cudagraph trees record on the second), then timed calls."""
        torch = self.torch
        if self.compiled is None:
            self.compiled = torch.compile(self.model.forward, mode="reduce-overhead", fullgraph=True)
        mark = getattr(getattr(torch, "compiler", None), "cudagraph_mark_step_begin", None)
        skips0 = cudagraph_skips()

        def call(i):
            if mark is not None:
                mark()
            return self.compiled(**make_kwargs(i)).logits

        t0 = time.perf_counter()
        try:
            prep(0)
            call(0)
            torch.cuda.synchronize()
        finally:
            spent = time.perf_counter() - t0
            self.compile_spent += spent
            row["compile_s"] = spent
        skips1 = cudagraph_skips()
        if skips0 is not None and skips1 is not None:
            row["cudagraph_skips"] = skips1 - skips0
        warm = min(max(self.args.warmup, 2), 3)  # capped: enough for cudagraph trees to record and replay
        return time_calls(call, prep, warm, self.args.iters)

    def reset_compiled(self):
        """Drop the compiled code and its CUDA graphs: they hold the cache of the
        shape just measured, and the next shape compiles anew anyway (new cache
        object, new sizes)."""
        self.compiled = None
        try:
            import torch._dynamo
            torch._dynamo.reset()
        except Exception as err:
            print(f"note: torch._dynamo.reset failed: {err}", file=sys.stderr)
        try:
            from torch._inductor import cudagraph_trees
            cudagraph_trees.reset_cudagraph_trees()
        except Exception:  # not in every torch; dynamo's reset covers it in most
            pass

    # ---- prefill
    def prefill(self, mode, plen):
        torch = self.torch
        rows_kept = 1 if self.keep_arg else plen
        nbytes, flops = self.prefill_cost(plen, rows_kept)
        row = self.row(mode, "prefill", 1, plen, nbytes, flops)
        row["logits_rows"] = rows_kept
        skip = self.fits(1, plen)
        if skip:
            row["error"] = skip
            return row
        if mode == "compile" and self.compile_spent > self.args.compile_budget_s:
            row["error"] = f"skipped: compile budget of {self.args.compile_budget_s:.0f} s spent"
            return row
        cache = None
        try:
            cache = make_static_cache(self.model.config, 1, plen, self.kv_heads, self.spec["head_dim"])
            pool = torch.randint(0, self.spec["vocab"], (4, 1, plen), device="cuda")
            pos = torch.arange(plen, device="cuda").view(1, plen)
            cpos = torch.arange(plen, device="cuda")
            prep = lambda i: set_cache_length(cache, 0)  # noqa: E731
            with torch.no_grad():
                if mode == "eager":
                    call = lambda i: self.model(**self.kwargs(pool[i % 4], cache, pos, cpos, True)).logits  # noqa: E731
                    dev, host = time_calls(call, prep, self.args.warmup, self.args.iters)
                else:
                    dev, host = self._compiled_calls(row, lambda i: self.kwargs(pool[i % 4], cache, pos, cpos, True),
                                                     prep)
            self._fill(row, dev, host, plen)
        except Exception as err:
            row["error"] = f"{type(err).__name__}: {err}"
        finally:
            del cache
            if mode == "compile":
                self.reset_compiled()
            free_cuda()
        return row

    @staticmethod
    def _fill(row, dev, host, tokens):
        med, p10, p90, _ = summarize(dev)
        hmed, _, _, hmean = summarize(host)
        row.update(device_us=med, device_p10_us=p10, device_p90_us=p90, host_us=hmed, host_mean_us=hmean,
                   tokens_per_s=tokens / (med * 1e-6), iters=len(dev))


# ------------------------------------------------------------------ driver

def run_modes(name, spec, model, facts, args, results, modes):
    bench = Bench(name, spec, model, facts, args, results)
    for mode in modes:
        for batch in args.batch_list:
            for ctx in args.context_list:
                results.add(bench.decode(mode, batch, ctx))
        if mode in ("eager", "compile"):
            for plen in args.prefill_list:
                results.add(bench.prefill(mode, plen))
    bench.compiled = None


def run_compile_child(name, args, results):
    """The compile rows from a child process: a crash in the compiler keeps the parent's rows."""
    fd, child_json = tempfile.mkstemp(prefix="llama_torch_compile.", suffix=".json")
    os.close(fd)
    cmd = [sys.executable, os.path.abspath(__file__), "--config", name, "--batches", args.batches,
           "--contexts", args.contexts, "--prefill", args.prefill, "--modes", "compile", "--json", child_json,
           "--warmup", str(args.warmup), "--iters", str(args.iters), "--compile-in-process",
           "--compile-budget-s", str(args.compile_budget_s)]
    print(f"[{name}] compile mode in a child process", flush=True)
    error = None
    try:
        rc = subprocess.run(cmd, timeout=args.compile_timeout_s).returncode
        if rc != 0:
            error = f"compile child exited with code {rc}; see the log"
    except subprocess.TimeoutExpired:
        error = f"compile child killed after {args.compile_timeout_s:.0f} s"
    done = set()
    try:
        with open(child_json) as f:
            child = json.load(f)
        for row in child.get("rows", []):
            results.add(row, quiet=True)  # the child printed it already
            done.add((row["phase"], row["batch"], row["context"]))
        child_error = child.get("configs", {}).get(name, {}).get("error")
        if child_error:
            error = error or f"compile child: {child_error}"
    except (OSError, ValueError) as err:
        error = error or f"compile child wrote no results: {err}"
    finally:
        try:
            os.remove(child_json)
        except OSError:
            pass
    # Say which measurements the child never reached.
    expected = [("decode", b, c) for b in args.batch_list for c in args.context_list]
    expected += [("prefill", 1, p) for p in args.prefill_list]
    for phase, batch, ctx in expected:
        if (phase, batch, ctx) not in done:
            results.add({"config": name, "mode": "compile", "phase": phase, "batch": batch, "context": ctx,
                         "device_us": None, "host_us": None, "tokens_per_s": None, "floor_us": None,
                         "error": error or "not measured by the compile child"})


def row_failed(row):
    """An error other than a skip."""
    return bool(row.get("error")) and not str(row["error"]).startswith("skipped")


def config_failed(results, name, info, err, who):
    """A config's run ended by an exception: recorded in the JSON and said on stderr."""
    info["error"] = f"{type(err).__name__}: {err}"
    results.doc["configs"][name] = info
    results.write()
    print(f"{who} failed: {info['error']}", file=sys.stderr, flush=True)


def start_distributed():
    """torch.distributed over NCCL for torchrun's ranks, each on GPU LOCAL_RANK."""
    import torch
    import torch.distributed as dist
    local = int(os.environ.get("LOCAL_RANK", "0"))
    torch.cuda.set_device(local)
    # A rank that fails leaves the others in a collective: the timeout ends them.
    dist.init_process_group("nccl", device_id=torch.device("cuda", local), timeout=datetime.timedelta(seconds=300))
    return dist.get_rank(), dist.get_world_size()


def load_tensor_parallel(folder, spec):
    """The saved model, each rank holding its shards (transformers' tp_plan="auto")."""
    import torch
    from transformers import LlamaForCausalLM
    model = LlamaForCausalLM.from_pretrained(folder, tp_plan="auto", dtype=torch.bfloat16, attn_implementation="sdpa")
    if any(p.device.type != "cuda" for p in model.parameters()):  # one rank: transformers splits nothing, loads on the CPU
        model.to(torch.device("cuda", torch.cuda.current_device()))
    model.eval()
    c = model.config
    got = (c.hidden_size, c.num_hidden_layers, c.num_attention_heads, c.num_key_value_heads, c.intermediate_size)
    want = (spec["hidden"], spec["layers"], spec["heads"], spec["kv_heads"], spec["intermediate"])
    if got != want:
        raise RuntimeError(f"{folder} holds (hidden, layers, heads, kv_heads, intermediate) {got}, the config {want}")
    return model


def run_tensor_parallel(args, meta):
    import torch
    import torch.distributed as dist
    rank, world = start_distributed()
    name = args.configs[0]
    spec = CONFIGS[name]
    if spec["heads"] % world or spec["kv_heads"] % world:
        sys.exit(f"{name}: {spec['heads']} heads and {spec['kv_heads']} kv heads do not split over {world} ranks")
    meta = dict(meta, tp=world, device=torch.cuda.get_device_name())
    results = Results(args.json if rank == 0 else None, meta)
    results.write()
    info = {"spec": spec, "tp": world, "load_dir": os.path.abspath(args.tp_load)}
    try:
        t0 = time.perf_counter()
        model = load_tensor_parallel(args.tp_load, spec)
        facts = checkpoint_facts(model, spec, args.tp_load)
        info.update(facts, load_s=time.perf_counter() - t0)
        results.doc["configs"][name] = info
        if rank == 0:
            print(f"[{name}] tensor-parallel over {world} ranks, loaded in {info['load_s']:.1f} s", flush=True)
            print(TABLE_HEAD, flush=True)
        bench = Bench(name, spec, model, facts, args, results, world=world)
        for mode in args.mode_list:
            for batch in args.batch_list:
                for ctx in args.context_list:
                    row = bench.decode(mode, batch, ctx)
                    results.add(row)
                    # A rank that failed a row would meet the others' collectives out of order: all stop.
                    flag = torch.tensor([1 if row_failed(row) else 0], device="cuda")
                    dist.all_reduce(flag, op=dist.ReduceOp.MAX)
                    if flag.item():
                        raise RuntimeError(f"a rank failed decode {mode} B={batch} ctx={ctx}; every rank stops")
    except Exception as err:
        config_failed(results, name, info, err, f"[{name}] rank {rank}")
    finally:
        dist.destroy_process_group()
    rows = results.doc["rows"]
    failed = sum(1 for r in rows if row_failed(r))
    if rank == 0:
        print(f"\n{len(rows)} rows, {failed} failed; wrote {args.json}")
    if failed or "error" in info:
        sys.exit(1)


def configure_dynamo():
    import torch
    try:
        import torch._dynamo
        # Every (B, ctx) and every new cache object is a new guard set; the
        # default limit of 8 would fall back to eager part way through.
        for attr in ("cache_size_limit", "recompile_limit"):
            if hasattr(torch._dynamo.config, attr):
                setattr(torch._dynamo.config, attr, 256)
    except Exception as err:
        print(f"note: dynamo limits not raised: {err}", file=sys.stderr)


def main(argv=None):
    args = parse_args(argv)
    import torch
    import transformers
    if not torch.cuda.is_available():
        sys.exit("llama_torch.py needs a CUDA GPU")
    meta = {
        "tool": "bench/llama_torch.py",
        "args": {k: v for k, v in vars(args).items()},
        "versions": {"torch": torch.__version__, "transformers": transformers.__version__,
                     "python": sys.version.split()[0]},
        "device": torch.cuda.get_device_name(),
        "ceilings": {"copy_bandwidth_Bps": COPY_BANDWIDTH, "bf16_peak_flops": TENSOR_PEAK, "kv_limit_bytes": KV_LIMIT},
    }
    if args.tp_load:
        run_tensor_parallel(args, meta)
        return
    results = Results(args.json, meta)
    results.write()
    in_process_compile = "compile" in args.mode_list and args.compile_in_process
    if in_process_compile:
        configure_dynamo()
    print(TABLE_HEAD, flush=True)
    for name in args.configs:
        spec = CONFIGS[name]
        model = None
        info = {"spec": spec}
        try:
            config = make_config(spec)
            t0 = time.perf_counter()
            model = build_model(config)
            torch.cuda.synchronize()
            facts = model_facts(model, spec)
            info.update(facts, build_s=time.perf_counter() - t0,
                        passes_cache_position="cache_position" in forward_params(model))
            print(f"[{name}] {facts['params'] / 1e9:.3f} B parameters, tied={facts['tied']}, "
                  f"attention {facts['attn_implementation']}, built in {info['build_s']:.1f} s", flush=True)
            if args.save_dir:
                folder = args.save_dir if len(args.configs) == 1 else os.path.join(args.save_dir, name)
                try:
                    check = save_and_check(model, spec, folder, facts)
                    info["save_dir"] = os.path.abspath(folder)
                    info["check"] = {k: check[k] for k in ("prompt", "top5_ids", "top5_logits", "save_s")}
                    print(f"[{name}] saved to {folder} in {check['save_s']:.1f} s; check top-1 id {check['top5_ids'][0]}",
                          flush=True)
                except Exception as err:
                    info["save_error"] = f"{type(err).__name__}: {err}"
                    print(f"[{name}] save/check failed: {info['save_error']}", file=sys.stderr, flush=True)
            results.doc["configs"][name] = info
            results.write()
            here = [m for m in MODES if m in args.mode_list and (m != "compile" or in_process_compile)]
            run_modes(name, spec, model, facts, args, results, here)
        except Exception as err:
            config_failed(results, name, info, err, f"[{name}]")
        finally:
            del model
            free_cuda()
        if "compile" in args.mode_list and not in_process_compile and "error" not in info:
            run_compile_child(name, args, results)

    rows = results.doc["rows"]
    print("\n" + TABLE_HEAD)
    for r in rows:
        print(format_row(r))
    failed = sum(1 for r in rows if row_failed(r))
    print(f"\n{len(rows)} rows, {failed} failed; wrote {args.json}")


if __name__ == "__main__":
    main()
