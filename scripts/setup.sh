#!/usr/bin/env bash
# Installs the Debian packages zerostack builds against, if any is missing.
# Run as root (CI, containers) it installs them; otherwise it prints the command to run.
set -euo pipefail

packages=(
  build-essential cmake pkg-config
  libfabric-dev libfabric-bin     # host transport (shm, tcp providers)
  liburing-dev libaio-dev         # NVMe offload
  nlohmann-json3-dev libfmt-dev libspdlog-dev libcli11-dev
  libhwy-dev libopenblas-dev
  libgtest-dev libgmock-dev libbenchmark-dev
)

missing=()
for p in "${packages[@]}"; do
  if ! dpkg-query -W -f='${Status}' "$p" 2>/dev/null | grep -q "install ok installed"; then
    missing+=("$p")
  fi
done

if [ ${#missing[@]} -eq 0 ]; then
  exit 0
fi

echo "zerostack setup: installing ${missing[*]}"
if [ "$(id -u)" -eq 0 ]; then
  export DEBIAN_FRONTEND=noninteractive
  apt-get update -qq
  apt-get install -y -qq --no-install-recommends "${missing[@]}"
elif command -v sudo >/dev/null 2>&1; then
  sudo apt-get update -qq
  sudo DEBIAN_FRONTEND=noninteractive apt-get install -y -qq --no-install-recommends "${missing[@]}"
else
  echo "zerostack setup: missing packages and not root; run:" >&2
  echo "  apt-get install ${missing[*]}" >&2
  exit 1
fi
