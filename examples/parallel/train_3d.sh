#!/usr/bin/env bash
# 3D parallelism, by example: the same GPT and global batch trained four ways, each checked
# against one rank:
#   1. one rank                  (the reference)
#   2. TP2 x PP2 x DP2, 8 ranks as threads: tensor-parallel layers over tp, a 1F1B pipeline of
#      two stages over pp, ZeRO stage 1 over dp
#   3. the same grid with the interleaved schedule (2 virtual stages), sequence parallelism
#      and activation recompute
#   4. the grid of run 2 as 8 processes over libfabric, started by zerorun
#   5. experts: PP2 x DP2 with 4 experts per block spread over ep groups of 2, against one rank
#      holding every expert (capacity factor 8: no token is dropped)
# Every step's loss must agree with its reference within 1e-5 relative. Each run prints its
# grid, every rank's role (which tp/pp/dp position, which units) and its memory against the
# ZeRO formulas with the tp and pp factors.
#
# usage: examples/parallel/train_3d.sh [BUILD_DIR]   (default: build)
set -euo pipefail
build=${1:-build}
train_gpt="$build/bin/train_gpt"
zerorun="$build/bin/zerorun"
for bin in "$train_gpt" "$zerorun"; do
  [ -x "$bin" ] || { echo "train_3d: $bin not found; run 'make build' first" >&2; exit 2; }
done
work=$(mktemp -d)
trap 'rm -rf "$work"' EXIT
# Global batch 16 sequences: 1 rank x 2 x 8 micro-batches, or dp 2 x 2 x 4 micro-batches.
model=(--steps 12 --layers 4 --hidden 64 --heads 4 --seq 32 --print-every 4 --micro-batch 2)
config() {  # gradient_accumulation_steps
  echo "{\"train_micro_batch_size_per_gpu\": 2, \"gradient_accumulation_steps\": $1,
         \"zero_optimization\": {\"stage\": 1}, \"gradient_clipping\": 1.0,
         \"optimizer\": {\"type\": \"AdamW\", \"params\": {\"lr\": 0.002}}}" > "$work/ga$1.json"
}
config 8
config 4

echo "== 1. one rank"
"$train_gpt" "${model[@]}" --config "$work/ga8.json" --report "$work/one.json" |
  grep -E "^(step|loss)"

echo
echo "== 2. TP2 x PP2 x DP2 (1F1B), 8 ranks as threads"
"$train_gpt" "${model[@]}" --config "$work/ga4.json" --world 8 --tp 2 --pp 2 \
  --report "$work/grid.json" | grep -E "^(grid|  rank|step|  stage|per-rank|loss)"

echo
echo "== 3. TP2 x PP2 x DP2, interleaved (2 virtual stages), sequence parallel, recompute"
"$train_gpt" "${model[@]}" --config "$work/ga4.json" --world 8 --tp 2 --pp 2 \
  --schedule interleaved --virtual-stages 2 --sequence-parallel --recompute \
  --report "$work/grid_interleaved.json" | grep -E "^(grid|step|loss)"

echo
echo "== 4. TP2 x PP2 x DP2 as 8 processes over libfabric (zerorun)"
"$zerorun" -n 8 --backend fabric -- "$train_gpt" "${model[@]}" --config "$work/ga4.json" \
  --tp 2 --pp 2 --report "$work/grid_procs.json" | grep -E "^\[r0\] (grid|step|loss)"

echo
echo "== 5. experts: one rank with 4 experts per block, then PP2 x DP2 with the experts over ep 2"
experts=(--experts 4 --capacity-factor 8)
"$train_gpt" "${model[@]}" "${experts[@]}" --config "$work/ga8.json" --report "$work/one_moe.json" |
  grep -E "^(loss)"
"$train_gpt" "${model[@]}" "${experts[@]}" --config "$work/ga4.json" --world 4 --pp 2 --ep 2 \
  --report "$work/grid_moe.json" | grep -E "^(grid|  rank|step|loss)"

python3 - "$work" <<'PY'
import json, os, sys
work = sys.argv[1]
def losses(name):
    return json.load(open(os.path.join(work, name + ".json")))["losses"]
for name, ref_name in (("grid", "one"), ("grid_interleaved", "one"), ("grid_procs", "one"),
                       ("grid_moe", "one_moe")):
    ref, got = losses(ref_name), losses(name)
    assert len(got) == len(ref), (name, len(got), len(ref))
    worst = max(abs(g - r) / abs(r) for g, r in zip(got, ref))
    assert worst <= 1e-5, f"{name}: a loss differs from one rank's by {worst:.2e} relative"
    print(f"{name}: every step's loss within {worst:.1e} relative of one rank's "
          f"({ref[0]:.4f} -> {ref[-1]:.4f})")
    assert ref[-1] < ref[0] - 0.05, ("the loss did not fall", ref_name, ref[0], ref[-1])
PY
