#!/usr/bin/env bash
# gpu_check.sh: the GPU half of the suite in one call, for a session that is lent a GPU for a
# few minutes (docs/PERFORMANCE.md, "CUDA kernels"). Builds only the CUDA tests and benchmark,
# runs each with a time limit, and writes every output and a summary to OUT_DIR.
#
#   scripts/gpu_check.sh [OUT_DIR]        (default: $OUT if set, else build-gpu/gpu_check)
#
# Environment: BUILD (default build-gpu), JOBS (default nproc), TEST_TIMEOUT seconds per test
# binary (default 120), BENCH_TIMEOUT (default 240). Exit status: 0 when every test binary
# passed (a binary that skips because no GPU is visible counts as a failure here: this script
# exists to run on one), 1 otherwise. Without nvidia-smi / a device it stops early and says so.
set -uo pipefail

cd "$(dirname "$0")/.."
BUILD=${BUILD:-build-gpu}
JOBS=${JOBS:-$(nproc)}
TEST_TIMEOUT=${TEST_TIMEOUT:-120}
BENCH_TIMEOUT=${BENCH_TIMEOUT:-240}
OUT_DIR=${1:-${OUT:-$BUILD/gpu_check}}
mkdir -p "$OUT_DIR"
SUMMARY="$OUT_DIR/summary.txt"
: > "$SUMMARY"
say() { echo "$*" | tee -a "$SUMMARY"; }

TESTS=(cuda_device_test kernels_cuda_test kernels_cuda_optimizer_test nccl_backend_test)
BENCH=bench_optimizers_cuda

say "gpu_check: $(date -u +%FT%TZ) on $(hostname)"
if command -v nvidia-smi > /dev/null; then
  nvidia-smi --query-gpu=name,memory.total,driver_version --format=csv,noheader | tee -a "$SUMMARY"
else
  say "gpu_check: nvidia-smi not found; this machine has no usable GPU driver. Nothing to check."
  exit 1
fi

say "== configure + build ($BUILD, -j$JOBS) =="
start=$(date +%s)
if ! cmake -S . -B "$BUILD" -DCMAKE_BUILD_TYPE=RelWithDebInfo -DZS_WITH_CUDA=ON \
      -DZS_BUILD_BENCH=ON > "$OUT_DIR/configure.log" 2>&1; then
  say "configure FAILED (see configure.log)"; tail -20 "$OUT_DIR/configure.log"; exit 1
fi
if ! cmake --build "$BUILD" -j "$JOBS" --target "${TESTS[@]}" "$BENCH" \
      > "$OUT_DIR/build.log" 2>&1; then
  say "build FAILED (see build.log)"; grep -m 20 -E "error" "$OUT_DIR/build.log"; exit 1
fi
say "built in $(( $(date +%s) - start )) s"

failed=0
for t in "${TESTS[@]}"; do
  start=$(date +%s)
  timeout "$TEST_TIMEOUT" "$BUILD/bin/$t" > "$OUT_DIR/$t.log" 2>&1
  rc=$?
  skipped=$(grep -oE '^\[  SKIPPED \] [0-9]+' "$OUT_DIR/$t.log" | grep -oE '[0-9]+$')
  skipped=${skipped:-0}
  passed=$(grep -oE '^\[  PASSED  \] [0-9]+' "$OUT_DIR/$t.log" | grep -oE '[0-9]+$')
  status=ok
  if [ "$rc" -ne 0 ]; then status="FAILED (rc $rc)"; failed=1;
  elif [ "$skipped" -gt 0 ]; then status="SKIPPED $skipped (no device visible?)"; failed=1; fi
  say "$t: $status, ${passed:-0} passed, $(( $(date +%s) - start )) s"
  [ "$rc" -ne 0 ] && grep -m 10 -B2 -A8 "Failure" "$OUT_DIR/$t.log"
done

start=$(date +%s)
timeout "$BENCH_TIMEOUT" "$BUILD/bin/$BENCH" --benchmark_repetitions=3 \
    --benchmark_report_aggregates_only=true > "$OUT_DIR/$BENCH.txt" 2>&1
say "$BENCH: rc $?, $(( $(date +%s) - start )) s (medians below)"
grep -E "median|skipped" "$OUT_DIR/$BENCH.txt" | tee -a "$SUMMARY"
exit "$failed"
