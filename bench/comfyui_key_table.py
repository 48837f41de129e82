"""ComfyUI's own key map of each family's tiny model, written as the table the default suite
checks lorastudio's key rules and writers against (tests/data/comfyui_key_map.json.gz, read by
tests/unit/lora/test_comfyui_key_table.py). Run through `python -m bench.comfyui_check
--comfyui PATH --key-table OUT --commit SHA [FAMILY ...]`."""

from __future__ import annotations

import gzip
import json
from pathlib import Path
from typing import Any

from bench.comfyui_check import run_side, write_given


def key_table(
    names: list[str], comfyui: Path, work: Path, pythonpath: str | None, commit: str
) -> dict[str, Any]:
    """ComfyUI's own key map (comfyui_side.key_map: `comfy.lora.model_lora_keys_unet`) of each
    family's tiny model, no training: the table tests/data/comfyui_key_map.json keeps, so that
    the default suite checks lorastudio's restated rules and its writers' names against it
    (tests/unit/lora/test_comfyui_key_table.py). `commit`: the ComfyUI commit the checkout is."""
    from lorastudio.tiny import save_tiny_model, tiny_model_dir

    table: dict[str, Any] = {"comfyui_commit": commit, "families": {}}
    for family in names:
        model = save_tiny_model(family, tiny_model_dir(family, work / "models"))
        folder = write_given(family, work / "keymap" / family, "keymap", None, model, {})
        result = run_side(folder, comfyui, pythonpath, family, "keymap", ["--key-map"])
        if "keys" not in result:
            raise SystemExit(f"{family}: no key map from ComfyUI: {result}")
        table["families"][family] = result["keys"]
    return table


def write_key_table(
    out: Path, names: list[str], comfyui: Path, work: Path, pythonpath: str | None, commit: str
) -> None:
    """`key_table` of `names` written to `out` (gzipped where it ends in .gz: ~570 kB -> ~25 kB)."""
    table = key_table(names, comfyui, work, pythonpath, commit)
    text = json.dumps(table, indent=0, sort_keys=True) + "\n"
    if out.suffix == ".gz":
        out.write_bytes(gzip.compress(text.encode(), mtime=0))
    else:
        out.write_text(text, encoding="utf-8")
    print(f"{out}: {sum(len(k) for k in table['families'].values())} keys")
