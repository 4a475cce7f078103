#!/usr/bin/env bash
# Offload tuning, by example: the same GPT (4 layers, hidden 256, 3.2M parameters, bf16, AdamW,
# ZeRO stage 2 over 2 ranks) on a budgeted device of 24 MiB per rank, three ways:
#   1. no offload    its optimizer states do not fit: out of device memory, naming what is there
#   2. cpu offload   master weights and Adam states in host memory, stepped by the CPU kernels
#   3. nvme offload  the same states in a swap file, stepped 262144 elements at a time through 4
#                    buffers, reads and writes pipelined (examples/offload/configs/*.json)
# Each run that trains prints its peak memory per tier, the bytes it moved between device, host
# and NVMe, and where the step's time went; runs 2 and 3 end with the same master digest (bits).
# A Chrome trace of run 3 (open it in ui.perfetto.dev) shows disk reads overlapping the steps.
#
# usage: examples/offload/tune_offload.sh [BUILD_DIR] [NVME_DIR]   (default: build, a temp dir)
set -euo pipefail
here=$(cd "$(dirname "$0")" && pwd)
build=${1:-build}
train_gpt="$build/bin/train_gpt"
[ -x "$train_gpt" ] || { echo "tune_offload: $train_gpt not found; run 'make build' first" >&2; exit 2; }
work=$(mktemp -d)
trap 'rm -rf "$work"' EXIT
nvme_dir=${2:-$work/nvme}
mkdir -p "$nvme_dir"
common=(--world 2 --steps 4 --layers 4 --hidden 256 --heads 4 --seq 64 --print-every 2
        --device budgeted-cpu:24M)

echo "== 1. no offload on a 24 MiB device (expected: out of device memory)"
if "$train_gpt" "${common[@]}" --config "$here/configs/no_offload.json" > "$work/none.log" 2>&1; then
  echo "tune_offload: the run without offload fit in 24 MiB; the example needs a model that does not" >&2
  exit 1
fi
grep -o "OUT_OF_MEMORY.*" "$work/none.log" | head -1
grep -q "out of device memory" "$work/none.log"

echo
echo "== 2. offload_optimizer.device = cpu"
"$train_gpt" "${common[@]}" --config "$here/configs/cpu_offload.json" \
  --report "$work/cpu.json" | tee "$work/cpu.log" | grep -E "^(offload|step|peak|time|loss)"

echo
echo "== 3. offload_optimizer.device = nvme (files under $nvme_dir)"
"$train_gpt" "${common[@]}" --config "$here/configs/nvme_offload.json" --nvme-path "$nvme_dir" \
  --report "$work/nvme.json" --trace "$work/trace.json" | tee "$work/nvme.log" |
  grep -E "^(offload|step|peak|time|loss|trace)"

python3 - "$work" <<'PY'
import json, os, sys
work = sys.argv[1]
cpu, nvme = (json.load(open(os.path.join(work, f))) for f in ("cpu.json", "nvme.json"))
assert cpu["master_digest"] == nvme["master_digest"], (cpu["master_digest"], nvme["master_digest"])
budget = 24 << 20
for name, r in (("cpu", cpu), ("nvme", nvme)):
    for rank, peaks in enumerate(r["peak_bytes_per_rank"]):
        assert peaks["device"]["total"] <= budget, (name, rank, peaks["device"])
assert nvme["offload"]["nvme_read_bytes"] > 0 and nvme["offload"]["nvme_prefetch_hits"] > 0
trace = json.load(open(os.path.join(work, "trace.rank0.json")))
tracks = {e["args"]["name"] for e in trace["traceEvents"] if e.get("name") == "thread_name"}
assert {"compute", "optimizer", "nvme read", "nvme write"} <= tracks, tracks
print("\ntune_offload: both offloaded runs fit the 24 MiB device and end with master digest",
      cpu["master_digest"])
PY
test -z "$(ls -A "$nvme_dir")" || { echo "tune_offload: swap files left in $nvme_dir" >&2; exit 1; }
