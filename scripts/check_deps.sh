#!/usr/bin/env bash
# Installs lorastudio in a venv of its own under /tmp with every dependency at its declared floor
# (`floors`) or at the newest the package index has within pyproject's bounds (`newest`), then runs
# a fast subset of the default suite there (model families, LoRA files and converters, the config,
# one tiny training run per family, generation, the API's schemas, the hub client's failures, --help,
# a config's dump (pydantic's exclude_if) and a download raced by a delete (starlette's FileResponse)).
# Not part of scripts/test.sh: each venv is minutes of installs and needs the index.
#
#   bash scripts/check_deps.sh floors|newest [PYTEST ARGS...]
#
# PYTEST ARGS naming a test path replace the default subset (e.g. tests/unit/test_config.py -x);
# options alone are added to it (e.g. --durations=20). The venv is $CHECK_DEPS_VENV (default
# /tmp/depf-MODE); it is reused while pyproject.toml is unchanged, made anew otherwise (CHECK_DEPS_FRESH=1 makes it anew regardless). torch is pinned first, as
# scripts/setup.sh does (torch==2.13.0, the CPU wheel), in both modes.
#
# floors: a constraints file pins each of pyproject's dependencies to the lowest release on the
#   index that its specifier allows (scripts/check_deps.py floors: `>=0.20` -> the first 0.20.x);
#   what they pull in, and the test tools (the dev extra less playwright and ruff), are resolved
#   by pip as usual. pip refusing the set (ResolutionImpossible) means a declared floor cannot be
#   installed with another one's: raise it.
# newest: a plain install in a fresh venv (what a user gets today), pyproject's upper bounds kept;
#   the versions installed and the newest the index has beyond a bound are printed.
set -euo pipefail
cd "$(dirname "$0")/.."
ROOT=$(pwd)
MODE=${1:-}
case "$MODE" in
  floors | newest) shift ;;
  *)
    echo "usage: bash scripts/check_deps.sh floors|newest [PYTEST ARGS...]" >&2
    exit 2
    ;;
esac
PY=${PYTHON:-python3}
TORCH_PIN="torch==2.13.0" # scripts/setup.sh's TORCH_CPU_PIN
VENV=${CHECK_DEPS_VENV:-/tmp/depf-$MODE}
STAMP="$VENV/.check-deps"
say() { printf '\033[1m[check_deps %s]\033[0m %s\n' "$MODE" "$*"; }

want="$MODE $(sha256sum pyproject.toml | cut -d' ' -f1)"
if [ "${CHECK_DEPS_FRESH:-0}" = 1 ] || [ "$(cat "$STAMP" 2>/dev/null || true)" != "$want" ]; then
  say "making $VENV"
  if [ -e "$VENV" ] && [ ! -f "$VENV/pyvenv.cfg" ]; then # never remove a folder that is not a venv
    echo "check_deps: $VENV exists and is not a venv; remove it or set CHECK_DEPS_VENV" >&2
    exit 2
  fi
  rm -rf "$VENV"
  "$PY" -m venv "$VENV"
  PIP=("$VENV/bin/python" -m pip install --quiet --disable-pip-version-check)
  "${PIP[@]}" --upgrade pip
  say "installing $TORCH_PIN first (as scripts/setup.sh does)"
  "${PIP[@]}" "$TORCH_PIN"
  CONSTRAINTS="$VENV/constraints.txt"
  echo "$TORCH_PIN" >"$CONSTRAINTS"
  if [ "$MODE" = floors ]; then
    "$VENV/bin/python" scripts/check_deps.py floors >>"$CONSTRAINTS"
    say "constraints: $(grep -v '^torch=' "$CONSTRAINTS" | tr '\n' ' ')"
  fi
  mapfile -t REQS < <("$VENV/bin/python" scripts/check_deps.py runtime)
  mapfile -t DEV < <("$VENV/bin/python" scripts/check_deps.py dev)
  say "installing lorastudio (editable), its ${#REQS[@]} requirements and the test tools (${DEV[*]})"
  "${PIP[@]}" -c "$CONSTRAINTS" -e "$ROOT" "${REQS[@]}" "${DEV[@]}"
  "$VENV/bin/python" -m pip check
  echo "$want" >"$STAMP"
else
  say "reusing $VENV (pyproject.toml unchanged)"
fi

# The versions installed; (newest) beside the index's newest, where a bound holds one back.
"$VENV/bin/python" -c 'import torch; print("[check_deps] torch", torch.__version__)'
if [ "$MODE" = newest ]; then
  "$VENV/bin/python" scripts/check_deps.py newest | sed 's/^/[check_deps newest] /'
else
  "$VENV/bin/python" -m pip freeze --exclude-editable | tr '\n' ' ' | sed 's/^/[check_deps floors] /'
  echo
fi

# The default subset unless an argument names a test path (options alone, like -x or
# --durations=20, are added to it).
names_a_path=0
for arg in "$@"; do
  if [ -e "${arg%%::*}" ]; then names_a_path=1; fi
done
if [ "$names_a_path" = 0 ]; then
  set -- "$@" \
    tests/families/test_contract.py tests/families/test_latent_round_trip.py \
    tests/unit/lora/test_files.py tests/unit/lora/test_convert.py tests/unit/lora/test_diffusers_loader.py \
    tests/unit/lora/test_foreign_files.py tests/unit/test_config.py tests/unit/test_settings_env.py \
    tests/unit/test_tiny.py tests/unit/generate/test_generate.py tests/unit/training/test_quantize.py \
    tests/unit/test_tiny_tokenizers.py tests/unit/data/test_data_images.py tests/unit/data/test_data_colour.py \
    tests/unit/data/test_data_png_stream.py tests/unit/data/test_data_thumbnails.py \
    tests/api/test_api_contract.py tests/api/test_api_attacks_http.py tests/unit/test_cli_json.py \
    tests/unit/test_packaging.py tests/unit/basemodels/test_endpoint_credentials.py \
    tests/unit/basemodels/test_basemodels_fetch_failures.py tests/unit/lora/test_hub_push.py \
    tests/unit/training/test_cli_tables.py tests/unit/test_config_rollback.py \
    tests/api/test_api_attacks_gallery_races.py
fi
# pytest's workers (scripts/pytest_workers.sh sets `xdist` from the arguments)
. "$ROOT/scripts/pytest_workers.sh"
say "pytest ${xdist[*]:-} $*"
unset PYTHONDONTWRITEBYTECODE
cd "$ROOT"
PYTHONPATH="$ROOT/src:$ROOT" exec "$VENV/bin/python" -m pytest -p no:cacheprovider "${xdist[@]}" "$@"
