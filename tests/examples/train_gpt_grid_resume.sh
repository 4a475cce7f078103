#!/usr/bin/env bash
# train_gpt --save-dir / --resume on a grid ([Note: grid checkpoints] in
# runtime/checkpoint/checkpoint.h): TP2 x PP2 x DP2 for 4 steps straight must end with the same
# master digest and last loss as 2 steps, saved, then resumed at the same grid; the same
# checkpoint resumed at TP2 x DP2 and as a plain data-parallel run (DP2, nn::Gpt) must end
# close; the same resume as 8 processes under zerorun over fabric must equal the straight run;
# zero-ckpt verifies it and consolidates it to full, unpadded tensors.
# usage: train_gpt_grid_resume.sh TRAIN_GPT ZERO_CKPT ZERORUN
set -euo pipefail
train_gpt=$1
zero_ckpt=$2
zerorun=$3
out=$(mktemp -d)
trap 'rm -rf "$out"' EXIT
# Global batch 8 sequences at every grid: dp 2 x micro-batch 2 x 2 micro-batches.
echo '{"train_micro_batch_size_per_gpu": 2, "gradient_accumulation_steps": 2,
       "zero_optimization": {"stage": 1}, "gradient_clipping": 1.0,
       "optimizer": {"type": "AdamW", "params": {"lr": 0.002}}}' > "$out/ga2.json"
common=(--layers 2 --hidden 32 --heads 4 --seq 16 --micro-batch 2 --print-every 1
        --config "$out/ga2.json")
grid=(--world 8 --tp 2 --pp 2)
"$train_gpt" "${common[@]}" "${grid[@]}" --steps 4 --report "$out/straight.json" >/dev/null
"$train_gpt" "${common[@]}" "${grid[@]}" --steps 2 --save-dir "$out/ckpt" >/dev/null
"$train_gpt" "${common[@]}" "${grid[@]}" --steps 4 --resume "$out/ckpt" \
  --report "$out/resumed.json" | grep "resumed from"
"$zerorun" -n 8 --backend fabric --timeout 240 -- "$train_gpt" "${common[@]}" --tp 2 --pp 2 \
  --steps 4 --resume "$out/ckpt" --report "$out/resumed_fabric.json" >/dev/null
"$train_gpt" "${common[@]}" --world 4 --tp 2 --steps 4 --resume "$out/ckpt" \
  --report "$out/resumed_tp2.json" >/dev/null
"$train_gpt" "${common[@]}" --world 2 --steps 4 --resume "$out/ckpt" \
  --report "$out/resumed_plain.json" >/dev/null
"$zero_ckpt" verify "$out/ckpt"
"$zero_ckpt" inspect "$out/ckpt" > "$out/inspect.txt"
grep -q '^grid: .*"tp":2' "$out/inspect.txt"
grep -q 'tp 1/2 rows slice' "$out/inspect.txt"  # a piece in its tp slice's frame
"$zero_ckpt" consolidate "$out/ckpt" "$out/model.safetensors"
python3 - "$out" <<'PY'
import json, math, os, struct, sys
out = sys.argv[1]
data = open(os.path.join(out, "model.safetensors"), "rb").read()
n = struct.unpack("<Q", data[:8])[0]
tensors = {k: v for k, v in json.loads(data[8:8 + n]).items() if k != "__metadata__"}
wte = tensors["embed.wte.weight"]["shape"]
qkv = tensors["block.0.attn.qkv.weight"]["shape"]
assert wte[1] == 32 and qkv == [96, 32], (wte, qkv)  # full shapes, not tp slices
r = {k: json.load(open(os.path.join(out, k + ".json")))
     for k in ["straight", "resumed", "resumed_fabric", "resumed_tp2", "resumed_plain"]}
print({k: (v["master_digest"], v["losses"]) for k, v in r.items()})
for k in ["resumed", "resumed_fabric"]:
    assert r[k]["master_digest"] == r["straight"]["master_digest"], k
    assert r[k]["losses"][-1] == r["straight"]["losses"][-1], k
assert r["resumed_fabric"]["backend"] == "fabric"
for k in ["resumed_tp2", "resumed_plain"]:
    assert len(r[k]["losses"]) == 2, (k, r[k]["losses"])
    assert math.isclose(r[k]["losses"][-1], r["straight"]["losses"][-1], rel_tol=1e-4), k
print("train_gpt grid resume: same grid bit for bit (threads and fabric), TP2 x DP2 and DP2 close")
PY
