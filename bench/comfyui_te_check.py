"""Does ComfyUI's own loader map every text-encoder key of lorastudio's kohya files onto the right
CLIP / T5 weight, with the right change?

    python -m bench.comfyui_te_check --comfyui /path/to/ComfyUI [--pythonpath DIR] [CASE ...]

CASES (each a file holding denoiser AND text-encoder layers, in the kohya layout ComfyUI reads):
- "sdxl-trained": lorastudio's own SDXL run with train_text_encoder (3 CPU steps, rank 4, alpha 8:
  alpha != rank, so a lost alpha shows); the expected change of every adapted layer, U-Net,
  CLIP-L and CLIP-G alike, is peft's own merge minus the base (comfyui_check.trained_change), taken
  from the adapters in memory, not from the file.
- "sdxl-convert": OneTrainer's SDXL file (U-Net + CLIP-L + CLIP-G with its text_projection, each
  layer at alpha = 2 x rank: tests/unit/lora/te_files.py) through `lora convert --to kohya`.
- "flux-convert": OneTrainer's FLUX.1 file (transformer + CLIP-L + T5's every Linear) through
  `lora convert --to kohya`.
- "flux-te-only": the FLUX.1 file's CLIP-L and T5 layers alone (no denoiser part) through
  `lora convert --to kohya --family flux`.
- "chroma-convert": OneTrainer's Chroma file (transformer + its one encoder, T5, under OneTrainer's
  `lora_te_`) through `lora convert --to kohya` (T5 written as `lora_te1_`).
For the converted files the expected change is the source file's own (2 x up @ down per layer),
computed from the builder's tensors, never from the converted file (which folds that alpha / rank
into lora_up and records alpha = rank; the trained file keeps alpha 8 at rank 4 in every encoder
layer, so ComfyUI's alpha / rank scale is checked there).

comfyui_side.py then runs ComfyUI's `load_lora_for_models(model, clip, lora, 1.0, 1.0)` (the
LoraLoader node's call: model_lora_keys_unet + model_lora_keys_clip + convert_lora + load_lora +
add_patches on both) and `patch_weight_to_device` on every patched weight of the denoiser and of
the text encoders (comfyui_side.text_encoders: ComfyUI's names clip_l / clip_g / t5xxl
.transformer.<HF name>, each changed weight checked to be a name of ComfyUI's own CLIPTextModel /
T5 module built from the tiny config). Every patched weight must equal the expected change (fp32:
within 1e-4 of the layer's largest change), no key may be left unloaded, and nothing else may
change.

Result (ComfyUI v0.19.3, upstream 30860264): every case loads every key (sdxl-trained: U-Net,
CLIP-L, CLIP-G, 136 + 16 weights patched; sdxl-convert: CLIP-G's `lora_te2_text_projection` too;
flux-convert: T5's `lora_te2_encoder_block_N_...` as ComfyUI's "OneTrainer Flux" entry maps it;
chroma-convert: T5 as `lora_te1_...`, ComfyUI's name for a model whose CLIP is T5 alone;
flux-te-only: CLIP-L and T5 with no denoiser part), every
patched weight the expected change within fp32 rounding (worst measured 1.5e-8 of the layer's
largest change); lorastudio's writer needed no change. The counter-example: OneTrainer's own
Chroma file (`lora_te_` + T5's name, its wrapper's prefix) leaves every T5 key unloaded in ComfyUI
(`onetrainer_case`); `lora convert --to kohya` of it loads.
"""

from __future__ import annotations

import argparse
import json
import os
import tempfile
from pathlib import Path
from typing import Any

import torch
from safetensors.torch import load_file, save_file

from bench.comfyui_check import ALPHA, RANK, run_side, trained_change, write_given
from lorastudio.lora.text_encoder_names import ENCODERS, file_module

# family -> {component: the name ComfyUI's text-encoder model gives that encoder}
COMFY_ENCODERS = {
    "sdxl": {"text_encoder": "clip_l", "text_encoder_2": "clip_g"},
    "flux": {"text_encoder": "clip_l", "text_encoder_2": "t5xxl"},
    "chroma": {"text_encoder": "t5xxl"},  # ComfyUI's Chroma CLIP: T5 alone (pixart_t5's "t5xxl")
}
TE_CASES = ("sdxl-trained", "sdxl-convert", "flux-convert", "chroma-convert", "flux-te-only")


def _named(component_changes: dict[str, dict[str, torch.Tensor]], family: str) -> dict[str, torch.Tensor]:
    """{"<component>.<file module>.weight": change} (names in the files' spelling)."""
    out = {}
    for component, changes in component_changes.items():
        cls = ENCODERS[family][component]
        for name, change in changes.items():
            out[f"{component}.{file_module(name, cls)}"] = change
    return out


def encoder_base(model: Path, family: str) -> dict[str, torch.Tensor]:
    """{"<component>.<HF name, files' spelling>": weight} of the tiny model's text encoders."""
    out = {}
    for component, cls in ENCODERS[family].items():
        for f in sorted((model / component).glob("*.safetensors")):
            out |= {f"{component}.{file_module(k, cls)}": v for k, v in load_file(str(f)).items()}
    return out


def write_te_case(
    family: str,
    folder: Path,
    case: str,
    lora: Path,
    model: Path,
    change: dict[str, torch.Tensor],
    te_change: dict[str, torch.Tensor],
) -> Path:
    """comfyui_check.write_given's case folder plus the text encoders' (te_base / te_expected
    .safetensors, case.json's "clip": {component: {"kind", "config"}})."""
    write_given(family, folder, case, lora, model, change)
    base = encoder_base(model, family)
    unknown = sorted(set(te_change) - set(base))
    if unknown:
        raise ValueError(f"changed text-encoder weights the model does not have: {unknown[:3]}")
    save_file({k: v.contiguous() for k, v in base.items()}, str(folder / "te_base.safetensors"))
    save_file(
        {k: v.contiguous().float() for k, v in te_change.items()}, str(folder / "te_expected.safetensors")
    )
    case_json = json.loads((folder / "case.json").read_text())
    case_json["clip"] = {
        component: {"kind": kind, "config": json.loads((model / component / "config.json").read_text())}
        for component, kind in COMFY_ENCODERS[family].items()
    }
    case_json["te_keys"] = sorted({k.split(".")[0] for k in load_file(str(lora)) if k.startswith("lora_te")})
    (folder / "case.json").write_text(json.dumps(case_json, indent=1))
    return folder


def trained_case(work: Path) -> tuple[Path, Path, dict[str, torch.Tensor], dict[str, torch.Tensor]]:
    """(file, tiny model, U-Net change, text encoders' change) of a 3-step SDXL run with
    train_text_encoder, in the kohya layout."""
    from lorastudio.config import TrainConfig
    from lorastudio.settings import Settings
    from lorastudio.tiny import make_sample_dataset, save_tiny_model, tiny_model_dir
    from lorastudio.training.loop import train

    model = save_tiny_model("sdxl", tiny_model_dir("sdxl", work / "models"))
    raw: dict[str, Any] = {
        "family": "sdxl",
        "base_model": str(model),
        "data_dir": str(make_sample_dataset(work / "data" / "shapes")),
        "resolution": 64,
        "steps": 3,
        "learning_rate": 5e-2,
        "lora_rank": RANK,
        "lora_alpha": ALPHA,
        "batch_size": 2,
        "output_name": "comfy-sdxl-te",
        "seed": 0,
        "lora_format": "kohya",
        "train_text_encoder": True,
    }
    result = train(
        TrainConfig.model_validate(raw),
        [].append,
        settings=Settings(home=work / "home"),
        device="cpu",
        return_denoiser=True,
    )
    te = {name: trained_change(module) for name, module in result.text_encoders.modules.items()}
    return result.lora_path, model, trained_change(result.denoiser), _named(te, "sdxl")


def converted_case(
    family: str, work: Path, encoders_only: bool = False
) -> tuple[Path, Path, dict[str, torch.Tensor], dict[str, torch.Tensor]]:
    """(OneTrainer's file converted by `lora convert --to kohya`, tiny model, denoiser change,
    text encoders' change), the changes from the builder's own tensors."""
    from tests.unit.lora.te_files import chroma_files, flux_files, sdxl_files

    from lorastudio.generate import load_pipeline
    from lorastudio.lora.files import convert_file
    from lorastudio.tiny import save_tiny_model, tiny_model_dir

    model = save_tiny_model(family, tiny_model_dir(family, work / "models"))
    pipe = load_pipeline(str(model), family, device="cpu")
    if family == "sdxl":
        theirs, ours = sdxl_files(pipe)
        t5: dict[str, torch.Tensor] = {}
    else:
        theirs, ours, t5 = flux_files(pipe) if family == "flux" else chroma_files(pipe)
    src, dst = work / f"onetrainer-{family}.safetensors", work / f"kohya-{family}.safetensors"
    if encoders_only:  # the text encoders' layers alone
        theirs = {k: v for k, v in theirs.items() if k.startswith("lora_te")}
    save_file(theirs, str(src))
    convert_file(src, dst, "kohya", family)
    changes: dict[str, dict[str, torch.Tensor]] = {}
    for key, a in ours.items():  # diffusers layout, alpha / rank in lora_B: the change is B @ A
        if key.endswith(".lora_A.weight"):
            head, _, module = key.removesuffix(".lora_A.weight").partition(".")
            b = ours[key.replace(".lora_A.", ".lora_B.")]
            changes.setdefault(head, {})[f"{module}.weight"] = b @ a  # [out, in]
    t5_component = "text_encoder" if family == "chroma" else "text_encoder_2"
    changes.setdefault(t5_component, {}).update({f"{m}.weight": d for m, d in t5.items()})
    denoiser = changes.pop("unet" if family == "sdxl" else "transformer")
    if encoders_only:
        denoiser = {}
    return dst, model, denoiser, _named(changes, family)


def onetrainer_case(comfyui: Path, work: Path, pythonpath: str | None) -> dict[str, Any]:
    """comfyui_side.py's result on OneTrainer's own Chroma file (unconverted: T5 as `lora_te_`)."""
    _, model, change, te_change = converted_case("chroma", work)
    src = work / "onetrainer-chroma.safetensors"
    folder = write_te_case(
        "chroma", work / "cases" / "onetrainer", "onetrainer", src, model, change, te_change
    )
    return run_side(folder, comfyui, pythonpath, "chroma", "onetrainer")


def check_te_case(case: str, comfyui: Path, work: Path, pythonpath: str | None) -> dict[str, Any]:
    """Build, write and run one of TE_CASES; returns comfyui_side.py's result."""
    family = case.split("-")[0]
    lora, model, change, te_change = (
        trained_case(work)
        if case == "sdxl-trained"
        else converted_case(family, work, encoders_only=case.endswith("te-only"))
    )
    folder = write_te_case(family, work / "cases" / case, case, lora, model, change, te_change)
    return run_side(folder, comfyui, pythonpath, family, case)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--comfyui", type=Path, default=os.environ.get("LORASTUDIO_COMFYUI"))
    parser.add_argument("--pythonpath", default=os.environ.get("LORASTUDIO_COMFYUI_DEPS"))
    parser.add_argument("--work", type=Path, default=None)
    parser.add_argument("cases", nargs="*", help=f"any of {', '.join(TE_CASES)} (default: all)")
    args = parser.parse_args()
    unknown = sorted(set(args.cases) - set(TE_CASES))
    if unknown:
        raise SystemExit(f"unknown cases {unknown}: give any of {', '.join(TE_CASES)}")
    if args.comfyui is None or not (args.comfyui / "comfy" / "lora.py").is_file():
        raise SystemExit("give a ComfyUI checkout: --comfyui PATH (or LORASTUDIO_COMFYUI)")
    results = []
    for case in args.cases or TE_CASES:
        work = (args.work or Path(tempfile.mkdtemp(prefix="comfyui-te-"))) / case
        result = check_te_case(case, args.comfyui, work, args.pythonpath)
        results.append(result)
        print(
            f"{case:13} ok={result.get('ok')} keys={result.get('lora_keys')} "
            f"denoiser={result.get('patched_weights')}/{result.get('expected_weights')} "
            f"text_encoders={result.get('patched_text_encoder_weights')}/{result.get('expected_text_encoder_weights')} "
            f"worst={result.get('worst_relative_error', float('nan')):.2e} "
            f"not_loaded={len(result.get('not_loaded', []))} "
            f"{result.get('error', '')[-600:] or '; '.join(result.get('errors', [])[:3])}",
            flush=True,
        )
    print(json.dumps(results))


if __name__ == "__main__":
    main()
