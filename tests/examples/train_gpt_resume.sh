#!/usr/bin/env bash
# train_gpt --save-dir / --resume: 4 steps straight must end with the same master digest and
# the same last loss as 2 steps, saved, then resumed to --steps 4 (the total), as threads (stage 3
# saved, resumed at stage 1) and as processes under zerorun over fabric (stage 2 saved, resumed
# at stage 0); a resume at another world size (3 ranks) must run and end close.
# usage: train_gpt_resume.sh TRAIN_GPT ZERORUN [ZERO_CKPT]
set -euo pipefail
train_gpt=$1
zerorun=$2
zero_ckpt=${3:-}
out=$(mktemp -d)
trap 'rm -rf "$out"' EXIT
common=(--layers 2 --hidden 20 --heads 2 --seq 16 --micro-batch 3 --print-every 1)
# Threads: 2 ranks.
"$train_gpt" "${common[@]}" --world 2 --stage 3 --steps 4 --report "$out/straight.json"
"$train_gpt" "${common[@]}" --world 2 --stage 3 --steps 2 --save-dir "$out/ckpt_threads"
"$train_gpt" "${common[@]}" --world 2 --stage 1 --steps 4 --resume "$out/ckpt_threads" \
  --report "$out/resumed_threads.json"
# Processes over fabric: 2 ranks, saving every step; the resume reads `latest` (step 2).
"$zerorun" -n 2 --backend fabric --timeout 240 -- \
  "$train_gpt" "${common[@]}" --stage 2 --steps 2 --save-dir "$out/ckpt_fabric" --save-every 1
test -d "$out/ckpt_fabric/step-00000001" && test -d "$out/ckpt_fabric/step-00000002"
"$zerorun" -n 2 --backend fabric --timeout 240 -- \
  "$train_gpt" "${common[@]}" --stage 0 --steps 4 --resume "$out/ckpt_fabric" \
  --report "$out/resumed_fabric.json"
# Another world size: the global batch must stay the same (3 ranks x 2 sequences = 2 x 3).
"$train_gpt" --layers 2 --hidden 20 --heads 2 --seq 16 --micro-batch 2 --print-every 1 \
  --world 3 --stage 2 --steps 4 --resume "$out/ckpt_threads/step-00000002" \
  --report "$out/resumed_world3.json"
if [ -n "$zero_ckpt" ]; then
  "$zero_ckpt" verify "$out/ckpt_fabric"
  "$zero_ckpt" inspect "$out/ckpt_threads" | grep -q "world 2"
  "$zero_ckpt" consolidate "$out/ckpt_threads" "$out/model.safetensors" --dtype bf16
  python3 - "$out/model.safetensors" <<'PY'
import json, struct, sys
data = open(sys.argv[1], "rb").read()
n = struct.unpack("<Q", data[:8])[0]
header = json.loads(data[8:8 + n])
tensors = {k: v for k, v in header.items() if k != "__metadata__"}
assert "embed.wte.weight" in tensors, sorted(tensors)
assert all(v["dtype"] == "BF16" for v in tensors.values())
end = max(v["data_offsets"][1] for v in tensors.values())
assert 8 + n + end == len(data), (n, end, len(data))
print(f"consolidated: {len(tensors)} BF16 tensors")
PY
  # A corrupt rank file: verify fails and names it.
  cp -r "$out/ckpt_threads/step-00000002" "$out/bad"
  printf '\x00\x01' | dd of="$out/bad/rank-00001.zsd" bs=1 seek=100 conv=notrunc status=none
  if "$zero_ckpt" verify "$out/bad" 2> "$out/verify.err"; then
    echo "verify passed a corrupt file"; exit 1
  fi
  grep -q "rank-00001.zsd" "$out/verify.err"
fi
python3 - "$out" <<'PY'
import json, sys, os, math
out = sys.argv[1]
r = {n: json.load(open(os.path.join(out, n + ".json")))
     for n in ["straight", "resumed_threads", "resumed_fabric", "resumed_world3"]}
print({n: (v["master_digest"], v["losses"]) for n, v in r.items()})
for n in ["resumed_threads", "resumed_fabric"]:
    assert r[n]["master_digest"] == r["straight"]["master_digest"], n
    assert len(r[n]["losses"]) == 2, (n, r[n]["losses"])
    assert r[n]["losses"][-1] == r["straight"]["losses"][-1], n
assert r["resumed_fabric"]["backend"] == "fabric"
w3 = r["resumed_world3"]["losses"][-1]
assert math.isclose(w3, r["straight"]["losses"][-1], rel_tol=1e-3), w3
print("train_gpt resume: straight == saved + resumed (threads and fabric), world 3 close")
PY
