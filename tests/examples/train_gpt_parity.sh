#!/usr/bin/env bash
# train_gpt under both transports: fp32 stage 0 with 3 ranks as threads (local backend) and
# stages 1 and 3 with 3 ranks as processes (zerorun, fabric) must end with the same master
# digest (bit-identical parameters), and the report must hold every step's loss.
# usage: train_gpt_parity.sh TRAIN_GPT ZERORUN
set -euo pipefail
train_gpt=$1
zerorun=$2
out=$(mktemp -d)
trap 'rm -rf "$out"' EXIT
common=(--steps 3 --layers 2 --hidden 20 --heads 2 --seq 16 --micro-batch 2 --print-every 1)
"$train_gpt" "${common[@]}" --world 3 --stage 0 --report "$out/threads_stage0.json"
for stage in 1 3; do
  "$zerorun" -n 3 --backend fabric --timeout 240 -- \
    "$train_gpt" "${common[@]}" --stage $stage --report "$out/fabric_stage$stage.json"
done
python3 - "$out" <<'PY'
import json, sys, os
out = sys.argv[1]
reports = {name: json.load(open(os.path.join(out, name))) for name in sorted(os.listdir(out))}
digests = {name: r["master_digest"] for name, r in reports.items()}
print("digests:", digests)
assert len(set(digests.values())) == 1, f"digests differ: {digests}"
for name, r in reports.items():
    assert len(r["losses"]) == 3, (name, r["losses"])
    assert len(r["peak_bytes_per_rank"]) == 3, name
    assert r["world_size"] == 3, name
assert reports["fabric_stage3.json"]["backend"] == "fabric"
assert reports["threads_stage0.json"]["backend"] == "local"
print("train_gpt parity: local stage 0 == fabric stages 1 and 3")
PY
