#!/usr/bin/env bash
# The Llama benchmark on the GPU machine, one command per model shape:
#   bash bench/llama.sh OUT [1b|8b] [TORCH_MODES]
# PyTorch first (bench/llama_torch.py: transformers eager, a static KV cache
# in a CUDA graph, torch.compile reduce-overhead; it saves its random bf16
# weights with save_pretrained and a prefill check), then gdl on the same
# weights (examples/llama/llama_generate --check: its prefill logits
# against PyTorch's; --bench: decode at B = 1, 8, 32, 64 over contexts 512
# and 4096, prefill of 128 and 2048 tokens), then one table
# (bench/llama_report.py) with the floor of every row. GDL_LLAMA_TP=N also
# times the tensor-parallel decode over GPUs 0..N-1, gdl's (llama_tp.gdl)
# and PyTorch's (transformers' tp_plan="auto" under torchrun, eager and
# graph), and adds their table beside TP=1.
set -uo pipefail
OUT=${1:-llama-bench-out}
config=${2:-1b}
modes=${3:-eager,graph,compile}
BIN=${GDL_LLAMA_BIN:-.device/build-release/examples/llama_generate}
models=${LLAMA_MODELS:-/tmp/gdl-llama-bench}
mkdir -p "$OUT" "$models"
python3 bench/llama_torch.py --config "$config" --modes "$modes" --save-dir "$models/$config" \
  --json "$OUT/torch_$config.json" ${TORCH_ARGS:-} >"$OUT/torch_$config.log" 2>&1
echo "torch rc=$?"
"$BIN" --model "$models/$config" --check "$models/$config" --max-tokens 2048 --max-seqs 64 --max-context 4096 \
  --bench "decode:1,8,32,64@512,4096;prefill:128,2048" --json "$OUT/gdl_$config.json" \
  >"$OUT/gdl_$config.log" 2>&1
echo "gdl rc=$?"
# GDL_LLAMA_TP=N: the decode rows over GPUs 0..N-1, gdl's llama_tp.gdl (one
# process) and PyTorch's (N processes), on the weights saved above.
tp=${GDL_LLAMA_TP:-1}
if [ "$tp" -gt 1 ]; then
  export NCCL_NVLS_ENABLE=0  # the device machines' rule: no NVLink multicast
  "$BIN" --model "$models/$config" --tp "$tp" --check "$models/$config" --max-tokens 2048 \
    --max-seqs 64 --max-context 4096 --bench "decode:1,8,32,64@512,4096" \
    --json "$OUT/gdl_tp${tp}_$config.json" >"$OUT/gdl_tp${tp}_$config.log" 2>&1
  echo "gdl tp=$tp rc=$?"
  python3 -m torch.distributed.run --standalone --nproc-per-node "$tp" bench/llama_torch.py --config "$config" \
    --tp-load "$models/$config" --modes eager,graph --json "$OUT/torch_tp${tp}_$config.json" ${TORCH_ARGS:-} \
    >"$OUT/torch_tp${tp}_$config.log" 2>&1
  echo "torch tp=$tp rc=$?"
fi
python3 bench/llama_report.py "$OUT" "$config" "$tp" | tee "$OUT/table_$config.md"
