#!/usr/bin/env bash
# Installs the Debian packages zerostack builds against, if any is missing.
# Run as root (CI, containers) it installs them; otherwise it prints the command to run.
#   scripts/setup.sh         the native build's packages, then the Python virtual environment
#                            .venv at the repository root (PyPI safetensors and numpy, for the
#                            safetensors export test; python3-venv comes from Debian)
#   scripts/setup.sh --arm   the aarch64 cross build's (make test-arm): Debian's arm64
#                            architecture is added to dpkg, then the cross compiler, qemu-user
#                            and the :arm64 libraries the optimizer kernels and their tests use
#   scripts/setup.sh --openmpi   OpenMPI (openmpi-bin, libopenmpi-dev): only the comparison point
#                            of bench_comm (scripts/bench_openmpi.sh runs this itself), so not
#                            part of the build's set
set -euo pipefail

arm=0
openmpi=0
case "${1:-}" in
  "") ;;
  --arm) arm=1 ;;
  --openmpi) openmpi=1 ;;
  *) echo "zerostack setup: unknown option '$1' (expected none, --arm or --openmpi)" >&2; exit 2 ;;
esac

packages=(
  build-essential cmake pkg-config
  libfabric-dev libfabric-bin     # host transport (shm, tcp providers)
  liburing-dev libaio-dev         # NVMe offload
  nlohmann-json3-dev libfmt-dev libspdlog-dev libcli11-dev
  libhwy-dev libopenblas-dev
  libgtest-dev libgmock-dev libbenchmark-dev
  python3-venv                    # .venv for tests/runtime/checkpoint's Python check
)
# Thrust (runtime/parallel/expert) comes from the CUDA toolkit's CCCL where a toolkit is (nvcc on
# PATH or in /usr/local/cuda); without one, Debian's headers serve the CPU path. Never both: a
# host file could then pick up Debian's older Thrust (../shared/PLATFORM.md).
if ! command -v nvcc >/dev/null 2>&1 && [ ! -x /usr/local/cuda/bin/nvcc ]; then
  packages+=(libthrust-dev)
fi
if [ "$arm" -eq 1 ]; then
  packages=(cmake make g++-aarch64-linux-gnu qemu-user
            libhwy-dev:arm64 libfmt-dev:arm64 libgtest-dev:arm64)
fi
if [ "$openmpi" -eq 1 ]; then
  packages=(openmpi-bin libopenmpi-dev)
fi

# PyPI's safetensors and numpy in .venv (gitignored), for the ctest safetensors_export_python.
# Quiet when they are there already.
setup_python_venv() {
  [ "$arm" -eq 0 ] && [ "$openmpi" -eq 0 ] || return 0
  local venv
  venv="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)/.venv"
  if [ -x "$venv/bin/python" ] && "$venv/bin/python" -c "import safetensors, numpy" 2>/dev/null; then
    return 0
  fi
  echo "zerostack setup: installing safetensors and numpy into $venv"
  [ -x "$venv/bin/python" ] || python3 -m venv "$venv"
  "$venv/bin/python" -m pip install --quiet --disable-pip-version-check safetensors numpy
}

missing=()
for p in "${packages[@]}"; do
  if ! dpkg-query -W -f='${Status}' "$p" 2>/dev/null | grep -q "install ok installed"; then
    missing+=("$p")
  fi
done

if [ ${#missing[@]} -eq 0 ]; then
  setup_python_venv
  exit 0
fi

if [ "$(id -u)" -eq 0 ]; then
  as_root=()
elif command -v sudo >/dev/null 2>&1; then
  as_root=(sudo)
else
  echo "zerostack setup: missing packages and not root; run as root:" >&2
  if [ "$arm" -eq 1 ]; then
    echo "  dpkg --add-architecture arm64 && apt-get update" >&2
  fi
  echo "  apt-get install ${missing[*]}" >&2
  if [ "$arm" -eq 1 ]; then
    echo "(or leave the aarch64 tests out: make test SKIP_ARM=1)" >&2
  fi
  exit 1
fi

echo "zerostack setup: installing ${missing[*]}"
added_arm=0
if [ "$arm" -eq 1 ] && ! dpkg --print-foreign-architectures | grep -qx arm64; then
  "${as_root[@]}" dpkg --add-architecture arm64
  added_arm=1
fi
if ! "${as_root[@]}" apt-get update -qq; then
  if [ "$added_arm" -eq 1 ]; then
    # Sources without arm64 packages (Ubuntu's archive, for one) fail the update: leave apt as
    # it was.
    "${as_root[@]}" dpkg --remove-architecture arm64
    echo "zerostack setup: apt sources have no arm64 packages; make test SKIP_ARM=1 leaves the aarch64 tests out" >&2
  fi
  exit 1
fi
"${as_root[@]}" env DEBIAN_FRONTEND=noninteractive \
  apt-get install -y -qq --no-install-recommends "${missing[@]}"
setup_python_venv
