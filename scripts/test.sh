#!/usr/bin/env bash
# The whole test suite: setup (when needed), lint, format check, then pytest.
# Extra arguments go to pytest (e.g. scripts/test.sh -m slow, scripts/test.sh tests/unit,
# scripts/test.sh -p no:xdist to run in one process).
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
# pytest's workers (scripts/pytest_workers.sh sets `xdist` from the arguments)
. scripts/pytest_workers.sh
# Bytecode caches (__pycache__/, git-ignored) even where the environment says not to write them
# (PYTHONDONTWRITEBYTECODE=1 in our containers), src/ compiled before the workers start: without
# them each pytest worker compiled lorastudio's ~340 modules and assertion-rewrote the ~480 test
# modules at every collection (17.5 CPU s; 13.4 with src/ cached, 8.4 with both, as on a rerun)
# and every training, generation, CLI or probe child compiled lorastudio again (~0.3 s each).
unset PYTHONDONTWRITEBYTECODE
python -m compileall -q -j 0 src || true  # (a file that does not compile: pytest names it)
echo "[test] pytest ${xdist[*]:-(workers as given)}"
python -m pytest "${xdist[@]}" "$@"
