"""Does lorastudio's generate apply a LoRA file of ComfyUI's own trainer node as ComfyUI does?

    python -m bench.comfyui_trainer_check --comfyui /path/to/ComfyUI [--pythonpath DIR]
        [--strength 0.5] [FAMILY ...]

The reverse of bench/comfyui_check.py. Per family (COMFY_MODEL there): bench/comfyui_trainer_side.py
writes, in ComfyUI's process, a file named as comfy_extras/nodes_train.py names its files for the
tiny denoiser's layers in ComfyUI's names (LoRA pairs with a trained `.alpha` for every weight of
2+ dims, a conv's kernel flattened into lora_down; `.diff` for every 1-D weight, `.diff_b` for every
bias; bf16); lorastudio's `generate.apply_loras` applies it to the tiny pipeline at `strength`, and
the change of every denoiser parameter (diffusers names) is what comfyui_side.py's `run_case` then
checks ComfyUI's own `load_lora_for_models` + `patch_weight_to_device` against: every key loaded
by ComfyUI, every weight ComfyUI patches changed by lorastudio by the same amount (fp32 tolerance:
both compute from the same bf16 values), and nothing else changed by either. Needs a ComfyUI
checkout and its dependencies as comfyui_check.py says; no training runs.
"""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
import tempfile
from pathlib import Path
from typing import Any

import torch
from safetensors.torch import save_file

from bench.comfyui_check import COMFY_MODEL, file_kinds, run_side, write_given

SIDE = Path(__file__).with_name("comfyui_trainer_side.py")


def _side_env(pythonpath: str | None) -> dict[str, str]:
    env = {k: v for k, v in os.environ.items() if k != "PYTHONPATH"}
    if pythonpath:
        env["PYTHONPATH"] = pythonpath
    return env


def applied_change(family: str, model: Path, lora: Path, strength: float) -> dict[str, torch.Tensor]:
    """{diffusers parameter name: change} of the tiny denoiser's parameters that generation's
    apply_loras makes with `lora` at `strength` (only those it changes)."""
    from lorastudio import families
    from lorastudio.generate import apply_loras, load_pipeline

    pipe = load_pipeline(str(model), family, device="cpu", dtype=torch.float32)
    denoiser = getattr(pipe, families.get(family).spec.denoiser)
    before = {k: v.detach().clone() for k, v in denoiser.state_dict().items()}
    apply_loras(pipe, [(lora, strength)])
    after = denoiser.state_dict()
    return {k: after[k].float() - v.float() for k, v in before.items() if not torch.equal(after[k], v)}


def check_trainer_file(
    family: str, comfyui: Path, work: Path, pythonpath: str | None, strength: float = 1.0
) -> dict[str, Any]:
    """ComfyUI's trainer-node file for `family`'s tiny model, applied by lorastudio, checked by
    ComfyUI's loader (module docstring); returns comfyui_side.py's result (or an "error")."""
    from lorastudio.tiny import save_tiny_model, tiny_model_dir

    model = save_tiny_model(family, tiny_model_dir(family, work / "models"))
    folder = work / "cases" / f"{family}-trainer-{strength:g}"
    placeholder = work / "empty.safetensors"
    save_file({}, str(placeholder))
    write_given(family, folder, "trainer", placeholder, model, {})  # base weights + case.json
    lora = folder / "comfyui-trainer.safetensors"
    run = subprocess.run(
        [sys.executable, str(SIDE), "--comfyui", str(comfyui), str(folder), str(lora)],
        capture_output=True,
        text=True,
        env=_side_env(pythonpath),
        timeout=600,
    )
    lines = [line for line in run.stdout.splitlines() if line.startswith("{")]
    if run.returncode != 0 or not lines:
        return {"family": family, "ok": False, "error": (run.stderr or run.stdout)[-2000:]}
    if "skipped" in json.loads(lines[-1]):
        return {"family": family, "ok": None, **json.loads(lines[-1])}
    try:
        change = applied_change(family, model, lora, strength)
    except Exception as err:  # noqa: BLE001 - reported, as the ComfyUI side's failures are
        return {"family": family, "ok": False, "error": f"lorastudio: {type(err).__name__}: {err}"}
    write_given(family, folder, "trainer", lora, model, change)
    case = json.loads((folder / "case.json").read_text())
    case |= {"strength": strength, "file_keys": file_kinds(lora)}
    (folder / "case.json").write_text(json.dumps(case, indent=1))
    return run_side(folder, comfyui, pythonpath, family, "trainer") | {"strength": strength}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--comfyui", type=Path, default=os.environ.get("LORASTUDIO_COMFYUI"))
    parser.add_argument("--pythonpath", default=os.environ.get("LORASTUDIO_COMFYUI_DEPS"))
    parser.add_argument("--work", type=Path, default=None, help="folder for models and cases")
    parser.add_argument("--strength", type=float, default=1.0)
    parser.add_argument("families", nargs="*", default=list(COMFY_MODEL))
    args = parser.parse_args()
    if args.comfyui is None or not (args.comfyui / "comfy" / "lora.py").is_file():
        raise SystemExit("give a ComfyUI checkout: --comfyui PATH (or LORASTUDIO_COMFYUI)")
    work = args.work or Path(tempfile.mkdtemp(prefix="comfyui-trainer-"))
    results = []
    for family in args.families:
        result = check_trainer_file(family, args.comfyui, work, args.pythonpath, args.strength)
        results.append(result)
        print(
            f"{family:16} ok={result.get('ok')} keys={result.get('lora_keys')} "
            f"patched={result.get('patched_weights')}/{result.get('expected_weights')} "
            f"worst={result.get('worst_relative_error', float('nan')):.2e} "
            f"not_loaded={len(result.get('not_loaded', []))} "
            f"{result.get('skipped') or result.get('error', '')[-600:] or '; '.join(result.get('errors', [])[:3])}",
            flush=True,
        )
    print(json.dumps(results))


if __name__ == "__main__":
    main()
