#!/usr/bin/env bash
# Exports musubi-tuner's training source (kohya-ss/musubi-tuner, pinned commit below) and the
# wheels it needs beyond the GPU machine's image into the ignored folder .peer/ that the lead
# carries to the device (`carry: [".peer"]`). Run from the repository root:
#   bash bench/peer/fetch_musubi.sh           # source + device wheels (~4 MB)
#   bash bench/peer/fetch_musubi.sh --local   # also the wheels this CPU host lacks (einops,
#                                             # opencv-python-headless, 64 MB: never carried),
#                                             # installed with the device wheels into .peerlocal/site
# The mirror is the `fetch` tool's copy (github:kohya-ss/musubi-tuner); MUSUBI_GIT overrides it.
# Nothing of musubi is copied into src/ or bench/: .peer/ and .peerlocal/ are ignored (.gitignore).
set -euo pipefail
COMMIT=30c658c4f4b0bf05038b3346eff9670259b10fc7   # musubi-tuner main, 2026-06-24 (PR #982)
GIT_DIR_MUSUBI=${MUSUBI_GIT:-/work/.mirror/kohya-ss+musubi-tuner/repo}
PIP=${PIP:-/work/main/.venv/bin/pip}
ROOT=$(git rev-parse --show-toplevel)
PEER=$ROOT/.peer

rm -rf "$PEER/musubi.tmp" && mkdir -p "$PEER/musubi.tmp" "$PEER/wheels"
# Only the package: src/musubi_tuner (its docs, GUI assets and top-level launchers stay behind).
git --git-dir="$GIT_DIR_MUSUBI" archive "$COMMIT" src/musubi_tuner | tar x -C "$PEER/musubi.tmp"
echo "$COMMIT" >"$PEER/musubi.tmp/COMMIT"
rm -rf "$PEER/musubi" && mv "$PEER/musubi.tmp" "$PEER/musubi"

# What qwen_image_train_network imports that the device image (KINDS.md's list) lacks: toml
# (dataset config), voluptuous (its schema). `av` (video decoding, dataset/media_utils.py) is
# imported but never reached with cached latents: musubi_run.py stands in an empty module for it
# when absent instead of carrying a 30 MB wheel. Versions: musubi's pyproject.toml pins.
"$PIP" download -q --no-deps -d "$PEER/wheels" toml==0.10.2 voluptuous==0.15.2

if [ "${1:-}" = "--local" ]; then
  LOCAL=$ROOT/.peerlocal
  mkdir -p "$LOCAL/wheels"
  "$PIP" download -q --no-deps -d "$LOCAL/wheels" einops==0.7.0 opencv-python-headless
  rm -rf "$LOCAL/site"
  "$PIP" install -q --no-deps --no-compile --target "$LOCAL/site" "$PEER"/wheels/*.whl "$LOCAL"/wheels/*.whl
fi
du -sh "$PEER/musubi" "$PEER/wheels"
