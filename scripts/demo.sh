#!/usr/bin/env bash
# The demo: setup (when needed), then train a short LoRA on the embedded tiny model and
# generate with it. Extra arguments go to `lorastudio demo` (e.g. --family sdxl).
set -euo pipefail
cd "$(dirname "$0")/.."
bash scripts/setup.sh
exec .venv/bin/lorastudio demo "$@"
