"""A generated document (tests/config_fuzz.py) trained for its steps on the CPU as a user runs it,
`lorastudio train DOC.json --device cpu` (in process), and the fuzz audit's invariants on what it
did (`train_doc`): it completed with finite losses and a LoRA file that loads back (lorastudio's
own reader, the generation pipeline's `apply_loras`, and diffusers' own `load_lora_weights` for a
file in a layout diffusers reads), or it was refused before any model load naming why."""

from __future__ import annotations

import json
import math
import re
import traceback
from pathlib import Path

from config_fuzz import Doc
from lorastudio import families

_LOSS = re.compile(r"step \d+/\d+ loss (\S+)")
_LORA = re.compile(r"^LoRA\s+(\S+)$", re.M)
# the tiny FLUX.1-layout models' single blocks are narrower than FLUX.1-dev's, which diffusers'
# kohya FLUX reader assumes (tests/unit/lora/test_files.FLUX_DOUBLE_ONLY): its refusal is the tiny
# model's, not the file's
TINY_KOHYA_READER = "diffusers' load_lora_weights would not load this file as trained (its reader failed"


# ComfyUI reads no peft DoRA magnitudes in the diffusers layout (documented: DoRA for ComfyUI is
# lora_format = "kohya"; tests/unit/training/test_cli.py shows the warning)
DORA_COMFYUI = "ComfyUI would not load this file as trained"
# an SDXL LyCORIS file's `lycoris_` layers (DoRA's, or layers kohya's SGM names do not cover), which
# A1111 does not match: RELIABILITY's Known problems (session 39 portable3)
A1111_LYCORIS = "A1111 matches no lycoris_ layer"


def train_doc(doc: Doc, folder: Path) -> list[str]:
    """The invariants one training of `doc` broke (empty: all held)."""
    from typer.testing import CliRunner

    from lorastudio.cli.app import _register, app

    if not app.registered_commands:
        _register()
    path = folder / f"train-{doc.seed}.json"
    path.write_text(json.dumps(doc.data))
    result = CliRunner().invoke(app, ["train", str(path), "--device", "cpu"])
    out = result.output
    if result.exception is not None and not isinstance(result.exception, SystemExit):
        trace = "".join(traceback.format_exception(result.exception))[-4000:]
        return [f"{doc.label()}: crashed (exit {result.exit_code}): {out[-1500:]}\n{trace}"]
    if result.exit_code == 2:
        if "loading " in out or "step 1/" in out:
            return [f"{doc.label()}: refused after its models loaded: {out[-2000:]}"]
        if "error:" not in out:
            return [f"{doc.label()}: refused without saying why: {out[-2000:]}"]
        return []
    if result.exit_code != 0:
        return [f"{doc.label()}: exit {result.exit_code}: {out[-3000:]}"]
    broken = []
    losses = [float(x) for x in _LOSS.findall(out)]
    if not losses or not all(math.isfinite(x) for x in losses):
        broken.append(f"{doc.label()}: losses {losses}")
    lora = _LORA.search(out)
    if lora is None:
        return [*broken, f"{doc.label()}: no LoRA written: {out[-2000:]}"]
    kohya_flux = doc.data.get("lora_format") == "kohya" and families.get(doc.family).spec.name != "sdxl"
    dora_diffusers = doc.data.get("adapter") == "dora" and doc.data.get("lora_format") != "kohya"
    for line in out.splitlines():
        if "would not load this file as trained" not in line:
            continue
        if kohya_flux and TINY_KOHYA_READER in line or dora_diffusers and DORA_COMFYUI in line:
            continue
        if A1111_LYCORIS in line:
            continue
        broken.append(f"{doc.label()}: {line}")
    return broken + _loads_back(doc, Path(lora.group(1)))


def _loads_back(doc: Doc, lora: Path) -> list[str]:
    """The file read by lorastudio's reader, applied by the generation pipeline (apply_loras:
    diffusers' load_lora_weights for the layouts it reads, the LyCORIS patcher for the others, with
    the check that every layer landed), and for a diffusers-layout LoRA by load_lora_weights itself
    on a fresh pipeline."""
    import torch

    from lorastudio.generate.lycoris_patch import is_lycoris_file
    from lorastudio.generate.pipeline import apply_loras, load_pipeline
    from lorastudio.lora.file_read import read_lora_file

    try:
        tensors, _ = read_lora_file(lora)
        assert tensors, "no tensors"
        pipe = load_pipeline(doc.data["base_model"], doc.family, dtype=torch.float32, device="cpu")
        kohya_flux = doc.data.get("lora_format") == "kohya" and doc.family != "sdxl"
        if not kohya_flux or is_lycoris_file(lora):  # (the tiny FLUX.1 layouts: TINY_KOHYA_READER)
            apply_loras(pipe, [(lora, 1.0)])
            apply_loras(pipe, [])
        if doc.data.get("lora_format", "diffusers") == "diffusers" and not is_lycoris_file(lora):
            pipe.load_lora_weights(str(lora), adapter_name="fuzz")
    except Exception:  # noqa: BLE001 - the audit reports any failure to load as a broken invariant
        return [f"{doc.label()}: {lora.name} does not load back: {traceback.format_exc()[-3000:]}"]
    return []
