#!/usr/bin/env bash
# Measures OpenMPI's collectives on this machine for comparison with bench_comm (see
# docs/PERFORMANCE.md). Installs openmpi-bin/libopenmpi-dev when run as root.
# Usage: scripts/bench_openmpi.sh [RANKS=2] [MIN_SECONDS=0.5]
set -euo pipefail
ranks=${1:-2}
min_seconds=${2:-0.5}
if ! command -v mpicxx >/dev/null 2>&1; then
  if [ "$(id -u)" -ne 0 ]; then echo "need openmpi-bin libopenmpi-dev (run as root to install)" >&2; exit 1; fi
  DEBIAN_FRONTEND=noninteractive apt-get install -y -qq openmpi-bin libopenmpi-dev >/dev/null
fi
out=$(mktemp -d)
trap 'rm -rf "$out"' EXIT
mpicxx -O2 -o "$out/mpi_collectives_bench" "$(dirname "$0")/openmpi/mpi_collectives_bench.cc"
echo "OpenMPI $(mpirun --version | head -1 | awk '{print $NF}'), $ranks ranks, shared memory, $(nproc) cores"
mpirun --allow-run-as-root --oversubscribe -n "$ranks" --mca btl self,vader \
  "$out/mpi_collectives_bench" "$min_seconds"
