#!/usr/bin/env bash
# train_gpt against what users hand it (issue 27): each case must end with a clear error or a
# run, never a crash, a hang or a silent wrong result.
# - sizes that cannot fit this host (--micro-batch 2^20, --seq 65536; also with --experts) are
#   refused before any allocation, exit 2, naming the bytes they need (they died of
#   std::bad_alloc before);
# - a diverging run (Lion at lr 1e30, fp32) stops with an error naming the step, exit 1 (it
#   exited 0 without a word before);
# - the Hugging Face integration's "auto" template trains, printing what each "auto" became,
#   and steps_per_print drives the progress lines when --print-every is not given;
# - a DeepSpeed config of a feature not built is refused as not implemented, naming it;
# - /dev/zero as the corpus is refused;
# - a --report in a missing directory is refused before training, naming the directory (it
#   failed after all the training before, without a reason); a report is written whole.
# usage: train_gpt_inputs.sh TRAIN_GPT CONFIG_DIR
set -euo pipefail
train_gpt=$1
configs=$2
out=$(mktemp -d)
trap 'rm -rf "$out"' EXIT
fail() { echo "FAIL: $*"; exit 1; }
expect() {  # expect CODE PATTERN -- command...
  local code=$1 pattern=$2; shift 3
  set +e
  timeout 120 "$@" > "$out/log" 2>&1
  local got=$?
  set -e
  [[ $got == "$code" ]] || { cat "$out/log"; fail "$* exited $got, expected $code"; }
  grep -q -- "$pattern" "$out/log" || { cat "$out/log"; fail "$*: no '$pattern' in the output"; }
}
expect 2 "OUT_OF_MEMORY: this run needs about .* per rank" -- "$train_gpt" --micro-batch 1048576 --steps 1
expect 2 "activations for micro-batches of 1 x 65536 tokens" -- "$train_gpt" --seq 65536 --steps 1
# Experts are planned too (the expert engine and the MoE layers' activations).
expect 2 "OUT_OF_MEMORY: this run needs about .* per rank" -- \
  "$train_gpt" --experts 4 --top-k 1 --micro-batch 1048576 --steps 1
cat > "$out/lion.json" <<JSON
{"train_micro_batch_size_per_gpu": 4, "optimizer": {"type": "Lion", "params": {"lr": 1e30}}}
JSON
expect 1 "optimizer step .*: the global gradient norm is .*nan.*diverged" -- \
  "$train_gpt" --config "$out/lion.json" --steps 5 --layers 1 --hidden 16 --heads 2 --seq 16
expect 0 '"auto" optimizer.params.lr = 0.001 (from lr)' -- \
  "$train_gpt" --config "$configs/hf_zero2_auto.json" --world 2 --steps 4 --layers 1 \
  --hidden 16 --heads 2 --seq 16 --lr 1e-3 --precision bf16
grep -q '"auto" train_batch_size = 2 (from micro_batch x accumulation_steps x dp_world_size)' \
  "$out/log" || fail "the auto list lacks train_batch_size"
# steps_per_print 2000: only step 0 and the last step print a progress line.
[[ $(grep -c '^step ' "$out/log") == 2 ]] || { cat "$out/log"; fail "steps_per_print not followed"; }
expect 2 "activation_checkpointing: not implemented" -- \
  "$train_gpt" --config "$configs/megatron_deepspeed_checkpointing.json" --steps 1
expect 2 "'/dev/zero' is not a regular file" -- "$train_gpt" --corpus /dev/zero --steps 1
expect 2 "--report: NOT_FOUND: $out/missing/r.json: the directory $out/missing does not exist" \
  -- "$train_gpt" --report "$out/missing/r.json" --steps 1000000
grep -q '^step ' "$out/log" && { cat "$out/log"; fail "--report was checked after training"; }
expect 0 "report written to $out/r.json" -- "$train_gpt" --report "$out/r.json" --steps 2 \
  --layers 1 --hidden 16 --heads 2 --seq 16
[[ $(tail -n 1 "$out/r.json") == "}" ]] || fail "the report is cut short"
ls "$out" | grep -q 'r.json.tmp' && fail "a temporary report file was left"
echo "train_gpt_inputs: all cases behaved"
