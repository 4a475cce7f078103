#!/usr/bin/env bash
# ctest safetensors_export_python: runs safetensors_export_main, then checks its files with the
# `safetensors` Python package from the repository's virtual environment (.venv, made by
# scripts/setup.sh). Skips (exit 77) only when python3 itself is missing; a missing venv or
# package is a failure that says how to install it.
#   safetensors_export_python.sh EXPORT_MAIN SOURCE_DIR
set -euo pipefail
main=$1
src=$2
if ! command -v python3 >/dev/null 2>&1; then
  echo "SKIP: python3 is not installed (the safetensors check needs it)"
  exit 77
fi
py="$src/.venv/bin/python"
if [ ! -x "$py" ]; then
  echo "FAIL: $src/.venv is missing: run scripts/setup.sh (it installs python3-venv, then the" \
       "PyPI packages safetensors and numpy into .venv)" >&2
  exit 1
fi
if ! "$py" -c "import safetensors, numpy" 2>/dev/null; then
  echo "FAIL: $py cannot import safetensors and numpy: run scripts/setup.sh" >&2
  exit 1
fi
out=$(mktemp -d "${TMPDIR:-/tmp}/zs-safetensors.XXXXXX")
trap 'rm -rf "$out"' EXIT
"$main" "$out"
"$py" "$src/tests/runtime/checkpoint/check_safetensors_export.py" "$out"
