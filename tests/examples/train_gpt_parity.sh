#!/usr/bin/env bash
# train_gpt under both transports: fp32 stage 0 with 3 ranks as threads (local backend) and
# stages 1 and 3 with 3 ranks as processes (zerorun, fabric), in memory and with offload (stage 2
# with the optimizer in host memory, stage 3 with it and the parameter shards on NVMe),
# must end with the same master digest (bit-identical parameters), and the report must hold
# every step's loss.
# usage: train_gpt_parity.sh TRAIN_GPT ZERORUN
set -euo pipefail
train_gpt=$1
zerorun=$2
out=$(mktemp -d)
trap 'rm -rf "$out"' EXIT  # widened below
common=(--steps 3 --layers 2 --hidden 20 --heads 2 --seq 16 --micro-batch 2 --print-every 1)
"$train_gpt" "${common[@]}" --world 3 --stage 0 --report "$out/threads_stage0.json"
for stage in 1 3; do
  "$zerorun" -n 3 --backend fabric --timeout 240 -- \
    "$train_gpt" "${common[@]}" --stage $stage --report "$out/fabric_stage$stage.json"
done
configs=$(mktemp -d)
trap 'rm -rf "$out" "$configs"' EXIT
mkdir "$configs/nvme"
cat > "$configs/cpu.json" <<JSON
{"zero_optimization": {"stage": 2, "offload_optimizer": {"device": "cpu", "pin_memory": true}}}
JSON
cat > "$configs/nvme.json" <<JSON
{"zero_optimization": {"stage": 3, "sub_group_size": 65536,
  "offload_optimizer": {"device": "nvme", "nvme_path": "$configs/nvme", "buffer_count": 3,
                        "pipeline_read": true, "pipeline_write": true},
  "offload_param": {"device": "nvme", "nvme_path": "$configs/nvme", "buffer_count": 3}}}
JSON
"$zerorun" -n 3 --backend fabric --timeout 240 -- \
  "$train_gpt" "${common[@]}" --config "$configs/cpu.json" \
  --report "$out/fabric_stage2_offload_cpu.json"
"$zerorun" -n 3 --backend fabric --timeout 240 -- \
  "$train_gpt" "${common[@]}" --config "$configs/nvme.json" \
  --report "$out/fabric_stage3_offload_nvme.json"
test -z "$(ls -A "$configs/nvme")" || { echo "swap files left behind"; ls -l "$configs/nvme"; exit 1; }
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
assert reports["fabric_stage2_offload_cpu.json"]["offload"]["optimizer_tier"] == "pinned_host"
nvme = reports["fabric_stage3_offload_nvme.json"]["offload"]
assert nvme["optimizer_tier"] == "nvme" and nvme["parameter_tier"] == "nvme", nvme
assert nvme["nvme_read_bytes"] > 0 and nvme["nvme_written_bytes"] > 0, nvme
print("train_gpt parity: local stage 0 == fabric stages 1 and 3, in memory and offloaded")
PY
