"""Do LoRA files made elsewhere apply at the right strength in lorastudio's generation, or get a
clear refusal? (RELIABILITY "Session 30 foreign LoRA audit").

    PYTHONPATH=src python -m bench.foreign_lora_audit [FAMILY ...]     (default: every tiny family)

For each family's tiny pipeline (CPU, fp32): a random rank-4 LoRA on the family's default targets
is written in the layouts other tools write (diffusers / ai-toolkit / SimpleTuner `transformer.`
names with and without an adapter config or per-layer `.alpha`; kohya's `lora_unet_` names with
and without alpha; OneTrainer's `lora_transformer_`; ComfyUI's generic `diffusion_model.`; fp16 /
bf16; ranks 1 and 256; per-layer ranks and alphas), each file is applied with
`generate.apply_loras` at 0.7 and, where `lora convert` reads it, converted to the diffusers
layout and applied again. Each adapted linear's effective weight (module(I) - module(0), the
LoRA included) is compared with 0.7 x (alpha / rank) B @ A. One line per case: OK (relative
error <= 1e-2 in every layer), WRONG (the layers off, and by how much) or REFUSED (the message,
cut): a refusal is right for a layout the family's loaders do not read, never a silent WRONG.
No network, no GPU; a few seconds per family.
"""

from __future__ import annotations

import json
import logging
import sys
import tempfile
import warnings
from collections.abc import Callable
from pathlib import Path

import torch
from safetensors.torch import save_file

from lorastudio import families
from lorastudio.errors import ConfigError, ModelSourceError, NotFound
from lorastudio.generate import apply_loras
from lorastudio.lora.files import convert_file, denoiser_prefix
from lorastudio.tiny import TINY_FAMILIES, build_tiny_pipeline

Layers = dict[str, tuple[torch.Tensor, torch.Tensor]]  # module -> (A [r, in], B [out, r])
STRENGTH = 0.7


def random_lora(pipe, family: str, rank: int, seed: int, every_rank: bool = False) -> Layers:
    """A random LoRA on the family's default targets (rank 1..4 by layer with `every_rank`)."""
    spec = families.get(family).spec
    g = torch.Generator().manual_seed(seed)
    out: Layers = {}
    std = 0.3 if rank <= 16 else 0.02
    for i, (name, module) in enumerate(getattr(pipe, spec.denoiser).named_modules()):
        if isinstance(module, torch.nn.Linear) and any(name.endswith("." + t) for t in spec.lora_targets):
            r = 1 + i % 4 if every_rank else rank
            a = torch.randn(r, module.in_features, generator=g) * std
            out[name] = (a, torch.randn(module.out_features, r, generator=g) * std)
    return out


def _alphas(layers: Layers, alpha: float | None, per_layer: bool) -> dict[str, float | None]:
    return {n: (float(1 + i % 3) if per_layer else alpha) for i, n in enumerate(layers)}


def write(
    path: Path, layers: Layers, key: Callable[[str], str], parts: tuple[str, str], alphas, dtype, meta=None
):
    """A file of `layers` under key(module) + `.<part>.weight`, an `.alpha` where alphas[module]."""
    tensors = {}
    for name, (a, b) in layers.items():
        k = key(name)
        tensors[f"{k}.{parts[0]}.weight"] = a.to(dtype).contiguous()
        tensors[f"{k}.{parts[1]}.weight"] = b.to(dtype).contiguous()
        if alphas.get(name) is not None:
            tensors[f"{k}.alpha"] = torch.tensor(alphas[name])
    save_file(tensors, str(path), meta)
    return path


def expected(layers: Layers, alphas: dict[str, float | None], dtype) -> dict[str, torch.Tensor]:
    out = {}
    for name, (a, b) in layers.items():
        a, b = a.to(dtype).float(), b.to(dtype).float()
        alpha = alphas.get(name)
        out[name] = (1.0 if alpha is None else alpha / a.shape[0]) * (b @ a)  # [out, in]
    return out


def effective(pipe, family: str, names) -> dict[str, torch.Tensor]:
    """Each module's effective weight [out, in] as the pipeline applies it now (LoRA included)."""
    model = getattr(pipe, families.get(family).spec.denoiser)
    out = {}
    with torch.no_grad():
        for name in names:
            module = model.get_submodule(name)
            width = getattr(module, "base_layer", module).in_features
            out[name] = (module(torch.eye(width)) - module(torch.zeros(1, width))).T
    return out


def judge(pipe, family: str, path: Path, want: dict[str, torch.Tensor], base) -> str:
    try:
        apply_loras(pipe, [(path, STRENGTH)])
    except (ModelSourceError, NotFound, ConfigError) as err:
        return "REFUSED " + str(err).replace(str(path), "<file>")[:160].replace("\n", " ")
    now = effective(pipe, family, base)
    apply_loras(pipe, [])
    bad = []
    for name in base:
        delta, target = now[name] - base[name], STRENGTH * want[name]
        err = float((delta - target).abs().max() / (target.abs().max() + 1e-12))
        if err > 1e-2:
            bad.append(f"{name} {err:.2f}")
    return "OK" if not bad else f"WRONG {len(bad)}/{len(base)} layers: {', '.join(bad[:3])}"


def cases(
    pipe, family: str
) -> list[tuple[str, Layers, Callable[[str], str], tuple[str, str], dict, object, dict | None]]:
    """(label, layers, key of a module, part names, alphas by module, dtype, header metadata)."""
    prefix = denoiser_prefix(family)
    lora = random_lora(pipe, family, 4, 0)
    config = {f"{prefix}.r": 4, f"{prefix}.lora_alpha": 8, f"{prefix}.target_modules": sorted(lora)}
    peft, kohya = ("lora_A", "lora_B"), ("lora_down", "lora_up")
    flat = "lora_unet_{}".format
    none = _alphas(lora, None, False)
    eight = _alphas(lora, 8.0, False)
    mixed = random_lora(pipe, family, 4, 3, every_rank=True)
    return [
        ("diffusers, no alpha", lora, lambda n: f"{prefix}.{n}", peft, none, torch.float32, None),
        ("diffusers + adapter config", lora, lambda n: f"{prefix}.{n}", peft, none, torch.float32,
         {"lora_adapter_metadata": json.dumps(config)}),
        ("diffusers + per-layer .alpha", lora, lambda n: f"{prefix}.{n}", peft, eight, torch.float32, None),
        ("diffusers fp16", lora, lambda n: f"{prefix}.{n}", peft, none, torch.float16, None),
        ("diffusers bf16", lora, lambda n: f"{prefix}.{n}", peft, none, torch.bfloat16, None),
        ("diffusers rank 1", random_lora(pipe, family, 1, 1), lambda n: f"{prefix}.{n}", peft, none, torch.float32, None),
        ("diffusers rank 256", random_lora(pipe, family, 256, 2), lambda n: f"{prefix}.{n}", peft, none, torch.float32, None),
        ("kohya lora_unet_ diffusers names + alpha", lora, lambda n: flat(n.replace(".", "_")), kohya, eight, torch.float32, None),
        ("kohya lora_unet_ no alpha", lora, lambda n: flat(n.replace(".", "_")), kohya, none, torch.float32, None),
        ("kohya mixed ranks + alphas", mixed, lambda n: flat(n.replace(".", "_")), kohya, _alphas(mixed, None, True), torch.float32, None),
        ("OneTrainer lora_transformer_", lora, lambda n: "lora_transformer_" + n.replace(".", "_"), kohya, eight, torch.float32, None),
        ("ComfyUI diffusion_model. + alpha", lora, lambda n: f"diffusion_model.{n}", kohya, eight, torch.float32, None),
        ("peft save_pretrained base_model.model.", lora, lambda n: f"base_model.model.{n}", peft, none, torch.float32, None),
        ("bare peft names", lora, lambda n: n, peft, none, torch.float32, None),
    ]  # fmt: skip


def audit(family: str, folder: Path) -> list[dict[str, str]]:
    pipe = build_tiny_pipeline(family)
    rows = []
    for i, (label, layers, key, parts, alphas, dtype, meta) in enumerate(cases(pipe, family)):
        path = write(folder / f"{family}-{i}.safetensors", layers, key, parts, alphas, dtype, meta)
        want = expected(layers, alphas if "config" not in label else _alphas(layers, 8.0, False), dtype)
        base = effective(pipe, family, list(layers))
        rows.append({"family": family, "case": label, "generate": judge(pipe, family, path, want, base)})
        converted = folder / f"{family}-{i}-diffusers.safetensors"
        try:
            convert_file(path, converted, "diffusers", family, overwrite=True)
        except (ModelSourceError, ConfigError) as err:
            rows[-1]["convert"] = "REFUSED " + str(err).replace(str(path), "<file>")[:120].replace("\n", " ")
            continue
        rows[-1]["convert"] = judge(pipe, family, converted, want, base)
    return rows


def main(argv: list[str]) -> int:
    logging.disable(logging.WARNING)  # diffusers logs each refused load
    warnings.filterwarnings("ignore")
    chosen = argv or list(TINY_FAMILIES)
    wrong = 0
    with tempfile.TemporaryDirectory() as tmp:
        for family in chosen:
            for row in audit(family, Path(tmp)):
                wrong += row["generate"].startswith("WRONG") + row.get("convert", "").startswith("WRONG")
                print(
                    f"[{row['family']}] {row['case']}: generate {row['generate']}; convert {row.get('convert')}"
                )
    print(json.dumps({"families": chosen, "wrong": wrong}))
    return 1 if wrong else 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
