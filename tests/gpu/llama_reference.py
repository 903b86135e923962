#!/usr/bin/env python3
"""Reference data for gdl's Llama loader and decoder, from Hugging Face transformers.

  python3 tests/gpu/llama_reference.py --out DIR --dtype f32 [--tie] [--init-std 0.02] ...

Builds a small random LlamaForCausalLM (eager attention, no TF32), saves it
with save_pretrained (DIR/model: config.json + model.safetensors) and, for one
case per prompt length, writes:

  DIR/case{c}_forced_logits.f32   `steps` rows of [vocab] float32, little-endian,
                                  row-major: row 0 = logits at the last prompt
                                  position, row i = logits after consuming forced[i-1]
  DIR/case{c}_greedy_logits.f32   the same along the greedy path (row i after
                                  consuming greedy[i-1])
  DIR/reference.json              ids, margins, file names, the checks below

Checks recorded in reference.json:
  incremental_vs_full_max_rel  the forced rows computed token by token with a
                               DynamicCache against one causal forward pass
                               (max over rows of max|a-b| / max|b|); the
                               incremental rows are the reference
  greedy_argmax_agrees         whether argmax of every greedy row is the id
                               generate() chose
  fp32_matmul_rel_err          a product checked against float64 (about 1e-6
                               without TF32, 1e-3 with it)

Needs a CUDA GPU, torch, transformers, numpy.
"""
import argparse
import inspect
import json
import os
import sys

sys.dont_write_bytecode = True  # no __pycache__ in the source tree

import numpy as np  # noqa: E402
import torch  # noqa: E402

try:
    import transformers  # noqa: E402
    from transformers import DynamicCache, LlamaConfig, LlamaForCausalLM  # noqa: E402
except ImportError as err:  # the message says what to install
    sys.exit(f"llama_reference.py needs transformers: {err}")

DTYPES = {"f32": torch.float32, "bf16": torch.bfloat16}


def parse_args(argv=None):
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--out", required=True, help="output directory")
    ap.add_argument("--dtype", choices=sorted(DTYPES), default="f32")
    ap.add_argument("--layers", type=int, default=2)
    ap.add_argument("--hidden", type=int, default=256)
    ap.add_argument("--heads", type=int, default=8)
    ap.add_argument("--kv-heads", type=int, default=2)
    ap.add_argument("--head-dim", type=int, default=32)
    ap.add_argument("--intermediate", type=int, default=512)
    ap.add_argument("--vocab", type=int, default=1000)
    ap.add_argument("--max-positions", type=int, default=512)
    ap.add_argument("--rope-theta", type=float, default=10000.0)
    ap.add_argument("--rms-eps", type=float, default=1e-5)
    ap.add_argument("--tie", action="store_true", help="tie_word_embeddings")
    ap.add_argument("--init-std", type=float, default=0.02,
                    help="initializer_range; 0.2-0.5 gives peaked logits (random weights at 0.02 give nearly flat "
                         "ones); transformers 5 refuses values above 1")
    ap.add_argument("--seed", type=int, default=0)
    ap.add_argument("--prompt-lens", default="5,17,33", help="comma-separated; one case per length")
    ap.add_argument("--steps", type=int, default=64)
    args = ap.parse_args(argv)
    try:
        args.prompt_lens = [int(x) for x in args.prompt_lens.split(",") if x.strip()]
    except ValueError:
        ap.error(f"--prompt-lens: not a list of integers: {args.prompt_lens!r}")
    if not args.prompt_lens or min(args.prompt_lens) < 1:
        ap.error("--prompt-lens needs at least one length >= 1")
    if args.steps < 1:
        ap.error("--steps must be >= 1")
    if max(args.prompt_lens) + args.steps > args.max_positions:
        ap.error(f"longest prompt + steps = {max(args.prompt_lens) + args.steps} exceeds --max-positions {args.max_positions}")
    if args.heads % args.kv_heads != 0:
        ap.error("--heads must be a multiple of --kv-heads")
    if args.hidden % args.heads != 0:
        ap.error("--hidden must be a multiple of --heads (LlamaConfig checks it)")
    return args


# ------------------------------------------------------------------ model

def make_config(args):
    """LlamaConfig across transformers 4.x (rope_theta) and 5.x (rope_parameters)."""
    common = dict(
        hidden_size=args.hidden,
        num_hidden_layers=args.layers,
        num_attention_heads=args.heads,
        num_key_value_heads=args.kv_heads,
        head_dim=args.head_dim,
        intermediate_size=args.intermediate,
        vocab_size=args.vocab,
        max_position_embeddings=args.max_positions,
        rms_norm_eps=float(args.rms_eps),
        tie_word_embeddings=bool(args.tie),
        initializer_range=float(args.init_std),
        attention_bias=False,
        mlp_bias=False,
        hidden_act="silu",
        # no EOS: generate() must run every step, and a min_new_tokens
        # processor would otherwise mask the EOS logit
        eos_token_id=None,
        attn_implementation="eager",
    )
    params = inspect.signature(LlamaConfig.__init__).parameters
    if "rope_parameters" in params:
        config = LlamaConfig(rope_parameters={"rope_type": "default", "rope_theta": float(args.rope_theta)}, **common)
    else:
        config = LlamaConfig(rope_theta=float(args.rope_theta), **common)
    theta = config_rope_theta(config)
    if theta is None or abs(theta - args.rope_theta) > 1e-6 * args.rope_theta:
        raise RuntimeError(f"LlamaConfig did not take rope_theta={args.rope_theta} (reads back {theta})")
    return config


def config_rope_theta(config):
    rp = getattr(config, "rope_parameters", None)
    if isinstance(rp, dict) and "rope_theta" in rp:
        return float(rp["rope_theta"])
    theta = getattr(config, "rope_theta", None)
    return None if theta is None else float(theta)


def build_model(args, config, dtype):
    torch.manual_seed(args.seed)
    model = LlamaForCausalLM(config)  # float32 on the CPU: the same weights on every machine
    # Random init leaves every RMSNorm weight at 1, which would hide a loader
    # that drops or swaps the norms; give each a distinct value.
    gen = torch.Generator().manual_seed(args.seed + 7919)
    norms = 0
    with torch.no_grad():
        for name, module in model.named_modules():
            if type(module).__name__.endswith("RMSNorm") and isinstance(getattr(module, "weight", None), torch.nn.Parameter):
                w = module.weight
                w.copy_(1.0 + 0.1 * torch.randn(w.shape, generator=gen, dtype=torch.float32))
                norms += 1
    expected = 2 * args.layers + 1
    if norms != expected:
        raise RuntimeError(f"found {norms} RMSNorm modules, expected {expected}")
    # Cast the parameters only: the rotary inv_freq buffers stay float32, as
    # from_pretrained(dtype=bfloat16) leaves them (a bf16 inv_freq would put
    # visible errors into the angles).
    with torch.no_grad():
        for p in model.parameters():
            p.data = p.data.to(dtype)
    model = model.cuda().eval()
    if getattr(model.config, "_attn_implementation", None) != "eager" and hasattr(model, "set_attn_implementation"):
        model.set_attn_implementation("eager")
    if args.tie and model.lm_head.weight.data_ptr() != model.model.embed_tokens.weight.data_ptr():
        raise RuntimeError("--tie: lm_head.weight is not the embedding after the cast")
    gc = getattr(model, "generation_config", None)
    if gc is not None:
        gc.eos_token_id = None
        gc.pad_token_id = 0
    return model


def save_model(model, path):
    """save_pretrained as one safetensors file (5.x dropped safe_serialization)."""
    params = inspect.signature(model.save_pretrained).parameters
    kwargs = {}
    if "safe_serialization" in params:
        kwargs["safe_serialization"] = True
    if "max_shard_size" in params:
        kwargs["max_shard_size"] = "100GB"
    model.save_pretrained(path, **kwargs)
    files = sorted(os.listdir(path))
    if "model.safetensors" not in files:
        raise RuntimeError(f"save_pretrained wrote no model.safetensors in {path}: {files}")
    tensors = {}
    try:
        from safetensors import safe_open
        with safe_open(os.path.join(path, "model.safetensors"), framework="pt") as f:
            for key in f.keys():
                t = f.get_slice(key)
                tensors[key] = {"shape": list(t.get_shape()), "dtype": str(t.get_dtype())}
    except Exception as err:  # the listing is informative only
        tensors = {"error": repr(err)}
    return files, tensors


# ------------------------------------------------------------------ runs

@torch.no_grad()
def full_logits(model, prompt, feed):
    """One causal forward over prompt + feed; rows from the last prompt position on."""
    ids = torch.cat([prompt, feed]).view(1, -1).cuda()
    out = model(input_ids=ids, attention_mask=torch.ones_like(ids), use_cache=False)
    return out.logits[0, prompt.numel() - 1:].float().cpu()


@torch.no_grad()
def incremental_logits(model, prompt, feed):
    """Prefill the prompt, then one token at a time through a DynamicCache.

    Returns len(feed) + 1 rows: the last prompt position, then one per fed token.
    """
    cache = DynamicCache()
    ids = prompt.view(1, -1).cuda()
    out = model(input_ids=ids, attention_mask=torch.ones_like(ids), past_key_values=cache, use_cache=True)
    rows = [out.logits[0, -1].float().cpu()]
    cache = out.past_key_values if out.past_key_values is not None else cache
    seen = ids.shape[1]
    for tok in feed.tolist():
        step = torch.tensor([[tok]], device="cuda")
        seen += 1
        mask = torch.ones((1, seen), dtype=torch.long, device="cuda")
        out = model(input_ids=step, attention_mask=mask, past_key_values=cache, use_cache=True)
        cache = out.past_key_values if out.past_key_values is not None else cache
        rows.append(out.logits[0, -1].float().cpu())
    return torch.stack(rows)


@torch.no_grad()
def generate_greedy(model, prompt, steps):
    ids = prompt.view(1, -1).cuda()
    out = model.generate(
        ids,
        attention_mask=torch.ones_like(ids),  # explicit: id 0 is also the pad id, and may be in the prompt
        max_new_tokens=steps,
        min_new_tokens=steps,
        do_sample=False,
        eos_token_id=None,
        pad_token_id=0,
    )
    if hasattr(out, "sequences"):
        out = out.sequences
    gen = out[0, prompt.numel():].cpu()
    if gen.numel() != steps:
        raise RuntimeError(f"generate returned {gen.numel()} new tokens, expected {steps}")
    return gen


@torch.no_grad()
def own_greedy(model, prompt, steps):
    """Greedy decoding by argmax over incremental rows, for when generate() fails."""
    cache = DynamicCache()
    ids = prompt.view(1, -1).cuda()
    out = model(input_ids=ids, attention_mask=torch.ones_like(ids), past_key_values=cache, use_cache=True)
    cache = out.past_key_values if out.past_key_values is not None else cache
    toks = [int(out.logits[0, -1].float().argmax())]
    seen = ids.shape[1]
    while len(toks) < steps:
        seen += 1
        out = model(input_ids=torch.tensor([[toks[-1]]], device="cuda"),
                    attention_mask=torch.ones((1, seen), dtype=torch.long, device="cuda"),
                    past_key_values=cache, use_cache=True)
        cache = out.past_key_values if out.past_key_values is not None else cache
        toks.append(int(out.logits[0, -1].float().argmax()))
    return torch.tensor(toks, dtype=torch.long)


def margins(rows):
    top = torch.topk(rows, 2, dim=-1).values
    return (top[:, 0] - top[:, 1]).tolist()


def max_rel_diff(a, b):
    """Max over rows of max|a - b| / max|b|."""
    num = (a - b).abs().amax(dim=-1)
    den = b.abs().amax(dim=-1).clamp_min(1e-30)
    return float((num / den).max())


def write_f32(path, rows):
    arr = np.ascontiguousarray(rows.float().numpy(), dtype="<f4")
    arr.tofile(path)
    return arr.size


def fp32_matmul_check():
    """TF32 off must be visible in a product: ~1e-6 relative error, not ~1e-3."""
    g = torch.Generator(device="cuda").manual_seed(1)
    a = torch.randn(512, 512, device="cuda", generator=g)
    b = torch.randn(512, 512, device="cuda", generator=g)
    ref = a.double() @ b.double()
    return float(((a @ b).double() - ref).norm() / ref.norm())


def disable_tf32():
    torch.set_float32_matmul_precision("highest")
    # The legacy flags, as asked; newer torch also has fp32_precision, which
    # set_float32_matmul_precision already covers for matmuls.
    for setter in (lambda: setattr(torch.backends.cuda.matmul, "allow_tf32", False),
                   lambda: setattr(torch.backends.cudnn, "allow_tf32", False)):
        try:
            setter()
        except Exception as err:  # a torch that refuses mixing the two APIs
            print(f"note: could not set a legacy TF32 flag: {err}", file=sys.stderr)


# ------------------------------------------------------------------ main

def main(argv=None):
    args = parse_args(argv)
    if not torch.cuda.is_available():
        sys.exit("llama_reference.py needs a CUDA GPU")
    dtype = DTYPES[args.dtype]
    disable_tf32()
    os.makedirs(args.out, exist_ok=True)

    config = make_config(args)
    model = build_model(args, config, dtype)
    model_dir = os.path.join(args.out, "model")
    model_files, model_tensors = save_model(model, model_dir)
    tf32_err = fp32_matmul_check()
    attn_impl = getattr(model.config, "_attn_implementation", None)
    print(f"transformers {transformers.__version__}, torch {torch.__version__}, {torch.cuda.get_device_name()}")
    print(f"model: {sum(p.numel() for p in model.parameters())} parameters, dtype {args.dtype}, attention {attn_impl}, "
          f"fp32 matmul rel err {tf32_err:.2e}; saved to {model_dir}: {', '.join(model_files)}")

    model_f32 = None
    if dtype != torch.float32:
        import copy
        model_f32 = copy.deepcopy(model).float()
    cases = []
    all_margins = []
    for c, plen in enumerate(args.prompt_lens):
        gen = torch.Generator().manual_seed(args.seed + c)
        prompt = torch.randint(0, args.vocab, (plen,), generator=gen, dtype=torch.long)
        forced = torch.randint(0, args.vocab, (args.steps,), generator=gen, dtype=torch.long)

        inc = incremental_logits(model, prompt, forced[: args.steps - 1])
        full = full_logits(model, prompt, forced[: args.steps - 1])
        if inc.shape != (args.steps, args.vocab) or full.shape != inc.shape:
            raise RuntimeError(f"case {c}: logits shapes {tuple(inc.shape)} / {tuple(full.shape)}, "
                               f"expected ({args.steps}, {args.vocab})")
        inc_vs_full = max_rel_diff(full, inc)
        forced_file = f"case{c}_forced_logits.f32"
        write_f32(os.path.join(args.out, forced_file), inc)
        forced_margins = margins(inc)
        # Below f32, the same weights in f32 give the logits both bf16
        # implementations approximate: how far transformers' own bf16 rows
        # are from them says what agreement between two bf16 paths can be.
        truth_file, truth_rel = None, None
        if model_f32 is not None:
            truth = incremental_logits(model_f32, prompt, forced[: args.steps - 1])
            truth_file = f"case{c}_forced_logits_f32.f32"
            write_f32(os.path.join(args.out, truth_file), truth)
            truth_rel = max_rel_diff(inc, truth)

        greedy_source = "generate"
        try:
            greedy = generate_greedy(model, prompt, args.steps)
        except Exception as err:  # keep the reference usable; say where the ids came from
            print(f"case {c}: generate() failed ({err!r}); greedy ids from an argmax loop", file=sys.stderr)
            greedy_source = f"argmax loop (generate failed: {err!r})"
            greedy = own_greedy(model, prompt, args.steps)
        grows = incremental_logits(model, prompt, greedy[: args.steps - 1])
        greedy_file = f"case{c}_greedy_logits.f32"
        write_f32(os.path.join(args.out, greedy_file), grows)
        greedy_margins = margins(grows)
        argmax = grows.argmax(dim=-1)
        disagree = [i for i in range(args.steps) if int(argmax[i]) != int(greedy[i])]

        all_margins += forced_margins + greedy_margins
        cases.append({
            "prompt": prompt.tolist(),
            "forced": forced.tolist(),
            "forced_logits": forced_file,
            "forced_logits_f32": truth_file,
            "forced_vs_f32_max_rel": truth_rel,
            "greedy": greedy.tolist(),
            "greedy_logits": greedy_file,
            "greedy_margins": greedy_margins,
            "min_greedy_margin": min(greedy_margins),
            "forced_margins": forced_margins,
            "incremental_vs_full_max_rel": inc_vs_full,
            "greedy_source": greedy_source,
            "greedy_argmax_agrees": not disagree,
            "greedy_argmax_disagrees_at": disagree,
        })
        print(f"case {c}: prompt {plen:4d}, min greedy margin {min(greedy_margins):.4g}, "
              f"mean margin {sum(forced_margins + greedy_margins) / (2 * args.steps):.4g}, "
              f"incremental vs full {inc_vs_full:.3g}"
              + ("" if truth_rel is None else f", {args.dtype} vs the same weights in f32 {truth_rel:.3g}")
              + ("" if not disagree else f", argmax differs from generate at steps {disagree}"))

    config_out = {k: v for k, v in vars(args).items() if k != "out"}
    ref = {
        "dtype": args.dtype,
        "config": config_out,
        "cases": cases,
        "model_dir": "model",
        "model_files": model_files,
        "model_tensors": model_tensors,
        "logits_format": "float32 little-endian, row-major [steps, vocab]",
        "attn_implementation": attn_impl,
        "inv_freq_dtype": str(next((b.dtype for n, b in model.named_buffers() if n.endswith("inv_freq")), None)),
        "fp32_matmul_rel_err": tf32_err,
        "versions": {"torch": torch.__version__, "transformers": transformers.__version__,
                     "device": torch.cuda.get_device_name()},
    }
    with open(os.path.join(args.out, "reference.json"), "w") as f:
        json.dump(ref, f, indent=1)
    mean_margin = sum(all_margins) / len(all_margins)
    print(f"mean top1-top2 margin {mean_margin:.4g} over {len(all_margins)} rows "
          f"(larger --init-std, e.g. 0.2-0.5, gives more peaked logits)")
    print(f"wrote {os.path.join(args.out, 'reference.json')}")


if __name__ == "__main__":
    main()
