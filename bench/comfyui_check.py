"""Does ComfyUI's own LoRA loader load lorastudio's default files at the trained strength?

    python -m bench.comfyui_check --comfyui /path/to/ComfyUI [--pythonpath DIR] [FAMILY ...]

For each family: trains a tiny LoRA for 3 steps on the CPU with the family's default
`lora_format` (rank 4, alpha 8: alpha != rank, so a lost alpha shows), takes the weight change
the trained adapter makes ((alpha / rank) * B @ A per layer, from the adapter in memory, not
from the file), and hands the file, the tiny denoiser's weights and that change to
bench/comfyui_side.py, which runs ComfyUI's code (its docstring says which functions and the one
small stub) in a separate process: nothing of lorastudio is imported there, and ComfyUI's
modules never share a process with diffusers. Prints one line per family and a JSON summary.

ComfyUI is not on PyPI: give a checkout (`fetch` of Comfy-Org/ComfyUI or a fork that merges it;
checked with v0.19.3, upstream commit 3086026401180c9216bcb6ace442a4e3587d2c66). Its
dependencies beyond this venv (einops, scipy, torchsde, trampoline, comfy-aimdo) go in a folder
given by --pythonpath (`pip install --no-deps --target DIR ...`). Krea 2 is not a ComfyUI
v0.19.3 model, so it is reported as not checked there.
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
from safetensors.torch import load_file, save_file

from lorastudio import families
from lorastudio.config import TrainConfig
from lorastudio.errors import ConfigError
from lorastudio.lora import names_flux2
from lorastudio.settings import Settings
from lorastudio.training.loop import train

SIDE = Path(__file__).with_name("comfyui_side.py")
# family -> (ComfyUI model_base class, how ComfyUI names the weights: see comfyui_side.py)
COMFY_MODEL = {
    "sdxl": ("SDXL", "unet"),
    "flux": ("Flux", "mmdit"),
    "flux-kontext": ("Flux", "mmdit"),
    "chroma": ("Chroma", "mmdit"),
    "z-image": ("Lumina2", "mmdit"),
    "qwen-image": ("QwenImage", "identity"),
    "flux2": ("Flux2", "given"),
    "flux2-klein": ("Flux2", "given"),
}
NOT_IN_COMFYUI = {"krea2": "ComfyUI v0.19.3 has no Krea 2 model (comfy/ldm has no krea2)"}
RANK, ALPHA = 4, 8.0


def train_default(
    family: str, work: Path, lora_format: str | None = None
) -> tuple[Path, Path, dict[str, torch.Tensor]]:
    """(LoRA file, tiny model folder, {diffusers weight name: trained change}) of a 3-step run
    with `lora_format` (None: the family's default)."""
    from lorastudio.tiny import make_sample_dataset, save_tiny_model, tiny_model_dir
    from lorastudio.tiny.paired import make_paired_dataset

    spec = families.get(family).spec
    model = save_tiny_model(family, tiny_model_dir(family, work / "models"))
    if spec.control_images[0]:
        data = make_paired_dataset(work / "paired")
    else:
        data = make_sample_dataset(work / "data" / "shapes")
    raw: dict[str, Any] = {
        "family": family,
        "base_model": str(model),
        "data_dir": str(data),
        "resolution": max(32, 2 * spec.resolution_multiple),
        "steps": 3,
        "learning_rate": 5e-2,
        "lora_rank": RANK,
        "lora_alpha": ALPHA,
        "batch_size": 2,
        "output_name": f"comfy-{family}-{lora_format or 'default'}",
        "seed": 0,
        **({"lora_format": lora_format} if lora_format else {}),
        **({"max_sequence_length": 16} if "max_sequence_length" in spec.supports else {}),
    }
    settings = Settings(home=work / "home" / f"{family}-{lora_format or 'default'}")
    result = train(
        TrainConfig.model_validate(raw), [].append, settings=settings, device="cpu", return_denoiser=True
    )
    change: dict[str, torch.Tensor] = {}
    for name, module in result.denoiser.named_modules():
        if hasattr(module, "lora_A") and "default" in getattr(module, "lora_A", {}):
            a = module.lora_A["default"].weight.flatten(1)  # [r, in]
            b = module.lora_B["default"].weight.flatten(1)  # [out, r]
            weight = module.get_base_layer().weight
            change[f"{name}.weight"] = (module.scaling["default"] * (b @ a)).reshape(weight.shape).detach()
    return result.lora_path, model, change


def sdxl_unet_config(model: Path) -> dict[str, Any]:
    """ComfyUI's unet_config fields that name an SGM U-Net's weights, for the tiny diffusers U-Net
    (comfyui_side.py checks them against what ComfyUI's detect_unet_config reads)."""
    cfg = json.loads((model / "unet" / "config.json").read_text())
    per, layers = cfg["layers_per_block"], cfg["transformer_layers_per_block"]
    attn = [t.startswith("CrossAttn") for t in cfg["down_block_types"]]
    depth = [n if a else 0 for n, a in zip(layers, attn, strict=True)]
    return {
        "model_channels": cfg["block_out_channels"][0],
        "channel_mult": [c // cfg["block_out_channels"][0] for c in cfg["block_out_channels"]],
        "num_res_blocks": [per] * len(depth),
        "transformer_depth": [d for d in depth for _ in range(per)],
        "transformer_depth_output": [d for d in depth for _ in range(per + 1)],
        "transformer_depth_middle": layers[-1],
    }


def flux2_native(weights: dict[str, torch.Tensor]) -> dict[str, torch.Tensor]:
    """FLUX.2 weights in BFL names (lorastudio's names_flux2: ComfyUI has no diffusers FLUX.2
    conversion), fused q/k/v parts stacked in row order."""
    parts: dict[str, dict[int, torch.Tensor]] = {}
    for key, value in weights.items():
        if not key.endswith(".weight"):
            continue
        try:
            bfl, part = names_flux2.to_original(key.removesuffix(".weight"))
        except ConfigError:  # a module with no BFL name is not one a LoRA patches
            continue
        parts.setdefault(bfl + ".weight", {})[0 if part is None else part] = value
    return {k: torch.cat([p[i] for i in sorted(p)], dim=0) for k, p in parts.items()}


def write_case(family: str, work: Path, lora_format: str | None = None) -> Path:
    """Train, then write the case folder comfyui_side.py reads."""
    lora, model, change = train_default(family, work, lora_format)
    spec = families.get(family).spec
    base: dict[str, torch.Tensor] = {}
    for f in sorted((model / spec.denoiser).glob("*.safetensors")):
        base.update(load_file(str(f)))
    cls, kind = COMFY_MODEL[family]
    case: dict[str, Any] = {"family": family, "model_class": cls, "native": kind, "lora": str(lora)}
    if kind == "unet":
        case["unet_config"] = sdxl_unet_config(model)
    if kind == "given":
        full = {k: change.get(k, torch.zeros_like(v)) for k, v in base.items()}
        base, change = flux2_native(base), flux2_native(full)
        case["unet_config"] = {
            "depth": len({k.split(".")[1] for k in base if k.startswith("double_blocks.")}),
            "depth_single_blocks": len({k.split(".")[1] for k in base if k.startswith("single_blocks.")}),
            "hidden_size": base["img_in.weight"].shape[0] if "img_in.weight" in base else 0,
        }
    folder = work / "cases" / f"{family}-{lora_format or 'default'}"
    folder.mkdir(parents=True, exist_ok=True)
    save_file({k: v.contiguous() for k, v in base.items()}, str(folder / "base.safetensors"))
    save_file({k: v.contiguous() for k, v in change.items()}, str(folder / "expected.safetensors"))
    (folder / "case.json").write_text(json.dumps(case, indent=1))
    return folder


def check_family(
    family: str, comfyui: Path, work: Path, pythonpath: str | None, lora_format: str | None = None
) -> dict[str, Any]:
    """Train, write and run one family's case; returns comfyui_side.py's result."""
    if family in NOT_IN_COMFYUI:
        return {"family": family, "ok": None, "skipped": NOT_IN_COMFYUI[family]}
    folder = write_case(family, work, lora_format)
    env = {k: v for k, v in os.environ.items() if k != "PYTHONPATH"}
    if pythonpath:
        env["PYTHONPATH"] = pythonpath
    run = subprocess.run(
        [sys.executable, str(SIDE), "--comfyui", str(comfyui), str(folder)],
        capture_output=True,
        text=True,
        env=env,
        timeout=600,
    )
    lines = [line for line in run.stdout.splitlines() if line.startswith("{")]
    if run.returncode != 0 or not lines:
        return {"family": family, "ok": False, "error": (run.stderr or run.stdout)[-2000:]}
    return json.loads(lines[-1])


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--comfyui", type=Path, default=os.environ.get("LORASTUDIO_COMFYUI"), required=False)
    parser.add_argument("--pythonpath", default=os.environ.get("LORASTUDIO_COMFYUI_DEPS"))
    parser.add_argument("--work", type=Path, default=None, help="folder for models, runs and cases")
    parser.add_argument("--lora-format", default=None, help="kohya or diffusers (default: each family's)")
    parser.add_argument("families", nargs="*", default=[*COMFY_MODEL, *NOT_IN_COMFYUI])
    args = parser.parse_args()
    if args.comfyui is None or not (args.comfyui / "comfy" / "lora.py").is_file():
        raise SystemExit("give a ComfyUI checkout: --comfyui PATH (or LORASTUDIO_COMFYUI)")
    work = args.work or Path(tempfile.mkdtemp(prefix="comfyui-check-"))
    results = []
    for family in args.families:
        result = check_family(family, args.comfyui, work, args.pythonpath, args.lora_format)
        results.append(result)
        print(
            f"{family:13} ok={result.get('ok')} keys={result.get('lora_keys')} "
            f"patched={result.get('patched_weights')}/{result.get('expected_weights')} "
            f"worst={result.get('worst_relative_error', float('nan')):.2e} "
            f"not_loaded={len(result.get('not_loaded', []))} "
            f"{result.get('skipped') or result.get('error', '')[-300:] or '; '.join(result.get('errors', [])[:2])}",
            flush=True,
        )
    print(json.dumps(results))


if __name__ == "__main__":
    main()
