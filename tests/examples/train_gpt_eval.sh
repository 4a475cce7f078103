#!/usr/bin/env bash
# train_gpt --eval-every: a held-out loss (the corpus' validation split, forward only) every N
# steps, with 2 ranks as threads at stages 0 and 3 (stage 3 with the parameter shards on NVMe,
# which its evaluation passes read too):
# - training is bit-identical to the run without evaluation (same master digest, same losses);
# - the held-out losses are the same at both stages, one per N steps, and fall as it trains;
# - on a TP2 x PP2 x DP2 grid (8 threads, the same global batch) the held-out losses are the
#   data-parallel run's (within 1e-5 relative: the grid sums in another order), and training is
#   bit-identical to the grid run without evaluation;
# - --save-dir writes model.16bit.safetensors beside the checkpoint iff the stage 3 config sets
#   stage3_gather_16bit_weights_on_model_save.
# usage: train_gpt_eval.sh TRAIN_GPT
set -euo pipefail
train_gpt=$1
out=$(mktemp -d)
trap 'rm -rf "$out"' EXIT
mkdir "$out/nvme"
cat > "$out/nvme.json" <<JSON
{"zero_optimization": {"stage": 3, "stage3_param_persistence_threshold": 0,
  "offload_param": {"device": "nvme", "nvme_path": "$out/nvme", "buffer_count": 2}}}
JSON
cat > "$out/z3.json" <<JSON
{"zero_optimization": {"stage": 3, "stage3_param_persistence_threshold": 0}}
JSON
common=(--steps 12 --layers 2 --hidden 24 --heads 2 --seq 16 --micro-batch 2 --world 2
        --print-every 4)
"$train_gpt" "${common[@]}" --config "$out/z3.json" --report "$out/plain3.json"
"$train_gpt" "${common[@]}" --config "$out/z3.json" --eval-every 4 --eval-batches 3 --report "$out/eval3.json"
"$train_gpt" "${common[@]}" --stage 0 --eval-every 4 --eval-batches 3 --report "$out/eval0.json"
"$train_gpt" "${common[@]}" --config "$out/nvme.json" --eval-every 4 --eval-batches 3 \
  --report "$out/eval3nvme.json"
# --save-dir with stage3_gather_16bit_weights_on_model_save: the step directory also holds the
# consolidated 16-bit weights (runtime/checkpoint/safetensors_export.h).
cat > "$out/save16.json" <<JSON
{"zero_optimization": {"stage": 3, "stage3_gather_16bit_weights_on_model_save": true}}
JSON
"$train_gpt" --steps 2 --layers 1 --hidden 16 --heads 2 --seq 8 --world 2 \
  --config "$out/save16.json" --save-dir "$out/ckpt16" >/dev/null
"$train_gpt" --steps 2 --layers 1 --hidden 16 --heads 2 --seq 8 --world 2 --stage 3 \
  --save-dir "$out/ckpt" >/dev/null
test -s "$out/ckpt16/step-00000002/model.16bit.safetensors" ||
  { echo "no model.16bit.safetensors:"; ls -lR "$out/ckpt16"; exit 1; }
test ! -e "$out/ckpt/step-00000002/model.16bit.safetensors" ||
  { echo "model.16bit.safetensors written without the key"; exit 1; }
grid=(--steps 12 --layers 2 --hidden 24 --heads 2 --seq 16 --micro-batch 2 --world 8 --tp 2
      --pp 2 --print-every 4 --config "$out/z3.json")
"$train_gpt" "${grid[@]}" --report "$out/gridplain.json"
"$train_gpt" "${grid[@]}" --eval-every 4 --eval-batches 3 --report "$out/grideval.json"
python3 - "$out" <<'PY'
import json, sys, os
out = sys.argv[1]
r = {n: json.load(open(os.path.join(out, n + ".json")))
     for n in ("plain3", "eval3", "eval0", "eval3nvme", "gridplain", "grideval")}
digests = {n: x["master_digest"] for n, x in r.items() if not n.startswith("grid")}
assert len(set(digests.values())) == 1, f"digests differ: {digests}"
assert r["eval3"]["losses"] == r["plain3"]["losses"], "evaluation changed the training losses"
assert r["plain3"]["eval"] == [], r["plain3"]["eval"]
e3, e0, en = r["eval3"]["eval"], r["eval0"]["eval"], r["eval3nvme"]["eval"]
assert [e["step"] for e in e3] == [3, 7, 11], e3
assert e3 == e0 == en, f"held-out losses differ between stages: {e3} {e0} {en}"
assert e3[-1]["loss"] < e3[0]["loss"], f"the held-out loss did not fall: {e3}"
# The training trace is untouched: the same gathers with and without evaluation.
for key in ("gathers", "prefetch_hits", "demand_gathers", "trace_invalidations"):
    assert r["eval3"]["gather"][key] == r["plain3"]["gather"][key], key
assert r["plain3"]["gather"]["prefetch_hits"] > 0, r["plain3"]["gather"]
assert r["eval3"]["gather"]["eval_passes"] == 3 and r["eval3"]["gather"]["eval_gathers"] > 0
g = r["grideval"]["eval"]
assert r["grideval"]["master_digest"] == r["gridplain"]["master_digest"], "grid evaluation moved the bits"
assert r["grideval"]["losses"] == r["gridplain"]["losses"], "grid evaluation changed the losses"
assert [e["step"] for e in g] == [3, 7, 11], g
for a, b in zip(g, e3):
    assert abs(a["loss"] - b["loss"]) <= 1e-5 * abs(b["loss"]), f"grid {g} vs data-parallel {e3}"
print("train_gpt eval: held-out losses", [round(e["loss"], 4) for e in e3],
      "equal at stages 0 and 3 (also with nvme parameters) and on a TP2 x PP2 x DP2 grid",
      [round(e["loss"], 4) for e in g], "; training unchanged")
PY
