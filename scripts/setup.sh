#!/usr/bin/env bash
# One idempotent setup for lorastudio: creates .venv in the checkout, installs torch first,
# then the package with its dev extras (and, once web/ has a package.json, builds the UI).
# Safe to run again: each step is skipped when its inputs have not changed.
set -euo pipefail
cd "$(dirname "$0")/.."
ROOT=$(pwd)
VENV="$ROOT/.venv"
PY=${PYTHON:-python3}
TORCH_CPU_PIN="torch==2.13.0"
STAMP="$VENV/.lorastudio-setup"

say() { printf '\033[1m[setup]\033[0m %s\n' "$*"; }

if [ ! -x "$VENV/bin/python" ]; then
  say "creating virtualenv at .venv"
  "$PY" -m venv "$VENV"
  "$VENV/bin/python" -m pip install --quiet --upgrade pip
fi
PIP=("$VENV/bin/python" -m pip install --quiet --disable-pip-version-check)

# 1. torch first, so nothing later pulls a multi-GB CUDA build as a dependency.
# The installed version from its metadata (importlib.metadata: ~0.05 s), not `import torch` (~2.5
# CPU s, paid twice here before; .ci/run's demo and tests each run this setup).
if torch_version=$("$VENV/bin/python" -c "from importlib.metadata import version; print(version('torch'))" 2>/dev/null); then
  say "keeping torch $torch_version"
elif command -v nvidia-smi >/dev/null 2>&1 && nvidia-smi -L >/dev/null 2>&1; then
  say "CUDA GPU found: installing torch (CUDA build)"
  "${PIP[@]}" torch
else
  say "no CUDA GPU: installing the CPU-friendly $TORCH_CPU_PIN"
  "${PIP[@]}" "$TORCH_CPU_PIN"
fi

# 2. the package with dev extras (skipped when pyproject.toml is unchanged since last time).
want=$(sha256sum pyproject.toml | cut -d' ' -f1)
have=$(cat "$STAMP" 2>/dev/null || true)
if [ "$want" != "$have" ] || ! "$VENV/bin/python" -c "import lorastudio" 2>/dev/null; then
  say "installing lorastudio (editable) with dev extras"
  "${PIP[@]}" -e ".[dev]"
  echo "$want" > "$STAMP"
else
  say "lorastudio already installed"
fi

# 3. the web UI (only once web/package.json exists).
if [ -f web/package.json ]; then
  bash scripts/build_web.sh
fi

# 4. Chromium for the browser tests (Debian's package; Playwright drives it, never downloads one).
if ! command -v chromium >/dev/null 2>&1; then
  if [ "$(id -u)" = 0 ] && command -v apt-get >/dev/null 2>&1; then
    say "installing Debian's chromium for the browser tests"
    apt-get update -qq && DEBIAN_FRONTEND=noninteractive apt-get install -y -qq chromium >/dev/null
  else
    say "note: no chromium found; the browser tests will be skipped (apt-get install chromium)"
  fi
fi
say "ready: $VENV/bin/lorastudio"
