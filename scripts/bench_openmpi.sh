#!/usr/bin/env bash
# Measures OpenMPI's collectives on this machine for comparison with bench_comm's ranks as
# processes (see docs/PERFORMANCE.md, "Collectives: bench_comm"): same sizes, same busbw
# conventions, same timing loop (scripts/openmpi/mpi_collectives_bench.cc). OpenMPI comes from
# scripts/setup.sh --openmpi, run here when mpicxx is missing.
# Usage: scripts/bench_openmpi.sh [RANKS=2] [MIN_SECONDS=0.5] [SIZES_MIB=1,4,16,128] [REPS=3]
# Shared memory only: pml ob1 with the vader BTL (CMA single copy above its eager limit), as
# OpenMPI picks by itself on a host without UCX hardware; ZS_MPIRUN_ARGS adds mpirun options.
# ZS_MPI_BENCH=path reuses a built binary instead of compiling one.
set -euo pipefail
ranks=${1:-2}
min_seconds=${2:-0.5}
sizes=${3:-1,4,16,128}
reps=${4:-3}
if ! command -v mpicxx >/dev/null 2>&1; then
  "$(dirname "$0")/setup.sh" --openmpi
fi
bench=${ZS_MPI_BENCH:-}
if [ -z "$bench" ]; then
  out=$(mktemp -d)
  trap 'rm -rf "$out"' EXIT
  bench="$out/mpi_collectives_bench"
  mpicxx -O2 -std=c++17 -o "$bench" "$(dirname "$0")/openmpi/mpi_collectives_bench.cc"
fi
echo "OpenMPI $(mpirun --version | head -1 | awk '{print $NF}'), $ranks ranks, shared memory (ob1/vader), $(nproc) cores"
# shellcheck disable=SC2086
mpirun --allow-run-as-root --oversubscribe -n "$ranks" --mca pml ob1 --mca btl self,vader \
  ${ZS_MPIRUN_ARGS:-} "$bench" "$min_seconds" "$sizes" "$reps"
