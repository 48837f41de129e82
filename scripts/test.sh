#!/usr/bin/env bash
# The whole test suite: setup (when needed), lint, format check, then pytest.
# Extra arguments go to pytest (e.g. scripts/test.sh -m slow, scripts/test.sh tests/unit).
set -euo pipefail
cd "$(dirname "$0")/.."
bash scripts/setup.sh
. .venv/bin/activate
echo "[test] ruff check"
ruff check src tests bench web/scripts
echo "[test] ruff format --check"
ruff format --check src tests bench web/scripts
echo "[test] web component tests (vitest)"
npm --prefix web test
echo "[test] pytest"
python -m pytest "$@"
