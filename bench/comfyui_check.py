"""Does ComfyUI's own LoRA loader load lorastudio's files, of every adapter kind, at the trained strength?

    python -m bench.comfyui_check --comfyui /path/to/ComfyUI [--pythonpath DIR]
        [--case lora|lora-kohya|dora|loha|lokr|lokr-full|lokr-lowrank-w2|lokr-lowrank-w1|dora-bf16|lokr-bf16|conv-dora|... ...] [FAMILY ...]

For each family x case (CASES: LoRA in the default and the kohya layout, the other adapter kinds,
LoKr with full and low-rank factors, bf16 / fp16 files; SDXL's conv layers with each kind): trains a
tiny adapter for 3 steps on the CPU (rank 4, alpha 8: alpha != rank, so a lost alpha shows), takes the exact weight change the trained adapter makes from the adapter in memory,
not from the file (peft's own merge of each adapted layer minus its base weight: for DoRA the
merged weight minus the base), and hands the file, the tiny denoiser's weights and that change to
bench/comfyui_side.py, which runs ComfyUI's code (its docstring says which functions and the one
small stub) in a separate process: nothing of lorastudio is imported there, and ComfyUI's
modules never share a process with diffusers. Every patched weight must equal the trained one
within the case's tolerance (TOLERANCE: relative to the largest change of the layer) and no key
may be left unloaded. Prints one line per case and a JSON summary. Files with text-encoder layers
(CLIP-L, CLIP-G, T5) go through ComfyUI's CLIP loading too in bench/comfyui_te_check.py
(write_given + run_side here, comfyui_side.text_encoders there).

ComfyUI is not on PyPI: give a checkout (`fetch` of Comfy-Org/ComfyUI or a fork that merges it;
checked with v0.19.3, upstream commit 3086026401180c9216bcb6ace442a4e3587d2c66, e.g. from the
YellowRoseCx/ComfyUI snapshot: the files of that commit, two missing tokenizer blobs aside). Its
dependencies beyond this venv (einops, scipy, torchsde, trampoline, comfy-aimdo) go in a folder
given by --pythonpath (`pip install --no-deps --target DIR ...`). Krea 2 is not a ComfyUI
v0.19.3 model, so it is reported as skipped there; it was checked with ComfyUI v0.33.0 (upstream
commit 2f35f4a08176d993cded35dac3332be4f7287f41, the files of that commit; its dependencies
beyond these: comfy-kitchen, and torchaudio is stubbed like torchvision): every case above
and the diffusers layout loaded, every patched weight the trained change (fp32 files: exactly).
Session 25 ran every family and case again with upstream de6b062f (2026-08-20, v0.33.0 + 34
commits, the newest snapshot to be had; deps pinned as its requirements.txt: comfy-kitchen
0.2.31, comfy-aimdo 0.4.13): all held. The reverse direction (ComfyUI's trainer node's files in
lorastudio's generation) is bench/comfyui_trainer_check.py.

Session 38 (no fork newer than that snapshot to be had; its comfy/ is upstream de6b062f's
exactly): ComfyUI ran in a venv of its own (LORASTUDIO_COMFYUI_PYTHON=<venv>/bin/python: torch
2.13.0 CPU, then numpy einops safetensors scipy torchsde trampoline psutil pyyaml Pillow tqdm
transformers tokenizers sentencepiece comfy-kitchen==0.2.31 comfy-aimdo==0.4.13; no --pythonpath
then), the tree exported from the snapshot (its three missing blobs, two tokenizer files and the
SageAttention submodule, left out). `--key-table tests/data/comfyui_key_map.json.gz --commit
<commit>` writes ComfyUI's own key map of each tiny model (no training) for the default suite's
tests/unit/lora/test_comfyui_key_table.py.
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
from lorastudio.settings import Settings
from lorastudio.training.events import StopRequest
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
    "qwen-image-edit": ("QwenImage", "identity"),  # the same model class (its edit inputs are not weights)
    "flux2": ("Flux2", "given"),
    "flux2-klein": ("Flux2", "given"),
    # a ComfyUI model since v0.2x (comfy/ldm/krea2; checked with v0.33.0, 2f35f4a0): v0.19.3 reports
    # it as skipped (no model_base.Krea2)
    "krea2": ("Krea2", "krea2"),
}
NOT_IN_COMFYUI: dict[str, str] = {}
RANK, ALPHA = 4, 8.0
# case -> TrainConfig settings over the defaults ("lora": the family's default layout, "lora-kohya"
# its kohya one). DoRA's ComfyUI file is lora_format "kohya" (the LyCORIS layout with
# .dora_scale); LoHa / LoKr files are always that layout. LoKr's factors
# (peft's factorization: w1 takes `lokr_factor` rows / columns, w2 the rest; w2 is low-rank when
# rank < max(w2 dims) / 2, w1 with lokr_decompose_both when rank < max(w1 dims) / 2): the default
# gives what a user gets (full w1; w2 full on the narrow tiny layers, low-rank on FLUX.2's),
# factor 64 full w1 and w2 (ComfyUI's scale-1 branch, alpha / rank folded into w1), factor 2 a
# low-rank w2, factor 16 + decompose_both a low-rank w1 (ComfyUI's alpha / rank branch).
CASES: dict[str, dict[str, Any]] = {
    "lora": {},
    "lora-kohya": {"lora_format": "kohya"},  # the kohya / ComfyUI layout where it is not the default
    "dora": {"adapter": "dora", "lora_format": "kohya"},
    "loha": {"adapter": "loha"},
    "lokr": {"adapter": "lokr"},
    "lokr-full": {"adapter": "lokr", "lokr_factor": 64},
    "lokr-lowrank-w2": {"adapter": "lokr", "lokr_factor": 2},
    "lokr-lowrank-w1": {"adapter": "lokr", "lokr_factor": 16, "lokr_decompose_both": True},
    "dora-bf16": {"adapter": "dora", "lora_format": "kohya", "save_dtype": "bf16"},
    "lora-bf16": {"save_dtype": "bf16"},
    "loha-bf16": {"adapter": "loha", "save_dtype": "bf16"},
    "lokr-bf16": {"adapter": "lokr", "save_dtype": "bf16"},
    "lora-fp16": {"save_dtype": "fp16"},
}
# SDXL's conv layers too (its ResNet conv1, 3x3 kernels: ComfyUI reshapes each product onto the
# 4-D weight, DoRA's scale is [out, 1, 1, 1]); the transformer families have no conv to target
CONV = ["to_q", "conv1"]
CASES |= {f"conv-{a}": {**CASES[a], "lora_targets": CONV} for a in ("lora", "dora", "loha", "lokr")}
CONV_FAMILIES = ("sdxl",)
# relative to the largest trained change of a layer (beyond the weight's fp32 rounding:
# comfyui_side.compare): fp32 files agree to rounding (measured <= 9e-7); a bf16 file rounds each
# factor to 8 significant bits (2^-9 relative; measured <= 4.7e-3 on DoRA, whose row scales the
# file keeps in fp32: lora.files.FP32_PARTS, 3.7e-3 LoRA, 4.2e-3 LoHa, 7.8e-3 LoKr), an fp16
# file to 11 (measured 5.8e-4 on LoRA)
TOLERANCE = {"fp32": 1e-4, "bf16": 2e-2, "fp16": 3e-3}


def trained_change(denoiser: Any) -> dict[str, torch.Tensor]:
    """{diffusers weight name: merged weight - base weight} of every adapted layer, by peft's own
    merge (LoRA, DoRA, LoHa, LoKr alike). Merges the adapter into `denoiser` (left merged)."""
    from peft.tuners.tuners_utils import BaseTunerLayer

    change: dict[str, torch.Tensor] = {}
    with torch.no_grad():
        for name, module in denoiser.named_modules():
            if not isinstance(module, BaseTunerLayer) or "default" not in module.active_adapters:
                continue
            before = module.get_base_layer().weight.detach().float().clone()
            module.merge(adapter_names=["default"])
            after = module.get_base_layer().weight.detach().float()
            change[f"{name}.weight"] = after - before  # [out, in] (or the conv shape)
    return change


def train_case(
    family: str,
    work: Path,
    case: str = "lora",
    lora_format: str | None = None,
    extra: dict[str, Any] | None = None,
    stop_at: int | None = None,
) -> tuple[Path, Path, dict[str, torch.Tensor]]:
    """(adapter file, tiny model folder, {diffusers weight name: trained change}) of a 3-step run
    with CASES[case]'s settings, `extra`'s over them and `lora_format` (None: the case's, else the
    family's default). `stop_at`: the run is first stopped (with a checkpoint) once step `stop_at`
    is done, then resumed from its run folder to the end; the file and change are the resumed
    run's."""
    from lorastudio.tiny import make_sample_dataset, save_tiny_model, tiny_model_dir
    from lorastudio.tiny.paired import make_paired_dataset

    spec = families.get(family).spec
    model = save_tiny_model(family, tiny_model_dir(family, work / "models"))
    if spec.edit_model:  # an edit family trains on pairs, its controls at the targets' size
        data, pairs = make_paired_dataset(work / "paired"), {"control_resolution": "target"}
    else:
        data, pairs = make_sample_dataset(work / "data" / "shapes"), {}
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
        "output_name": f"comfy-{family}-{case}",
        "seed": 0,
        **pairs,
        **CASES[case],
        **({"lora_format": lora_format} if lora_format else {}),
        **({"max_sequence_length": 16} if "max_sequence_length" in spec.supports else {}),
        **(extra or {}),
    }
    settings = Settings(home=work / "home" / f"{family}-{case}-{lora_format or 'default'}")
    config = TrainConfig.model_validate(raw)
    resume: Path | None = None
    if stop_at is not None:
        events: list[Any] = []

        def stop() -> StopRequest | None:
            done = [e for e in events if e.type == "progress"]
            return StopRequest(save=True) if done and done[-1].step >= stop_at else None

        stopped = train(config, events.append, stop, settings=settings, device="cpu")
        if not stopped.stopped:
            raise RuntimeError(f"{family} {case}: the run was not stopped at step {stop_at}")
        resume = settings.outputs_dir / raw["output_name"]
    result = train(config, [].append, settings=settings, device="cpu", return_denoiser=True, resume=resume)
    if stop_at is not None and not result.resumed_from:
        raise RuntimeError(f"{family} {case}: the second run did not resume ({result.resumed_from})")
    return result.lora_path, model, trained_change(result.denoiser)


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


def file_kinds(lora: Path) -> dict[str, int]:
    """{key suffix: count} of the file's per-module keys ("lokr_w2_a", "lora_up.weight", ...):
    which factors the file holds."""
    kinds: dict[str, int] = {}
    for key in load_file(str(lora)):
        parts = key.split(".")
        suffix = ".".join(parts[-2:]) if parts[-1] == "weight" else parts[-1]
        kinds[suffix] = kinds.get(suffix, 0) + 1
    return kinds


def write_case(family: str, work: Path, case: str = "lora", lora_format: str | None = None) -> Path:
    """Train, then write the case folder comfyui_side.py reads."""
    lora, model, change = train_case(family, work, case, lora_format)
    dtype = CASES[case].get("save_dtype", "fp32")
    return write_given(
        family,
        work / "cases" / f"{family}-{case}-{lora_format or 'default'}",
        case,
        lora,
        model,
        change,
        dtype,
    )


def write_given(
    family: str,
    folder: Path,
    case: str,
    lora: Path | None,
    model: Path,
    change: dict[str, torch.Tensor],
    dtype: str = "fp32",
) -> Path:
    """Write the case folder comfyui_side.py reads for the file `lora` on the tiny `model` whose
    denoiser it changes by `change` ({diffusers weight name: change}); `lora` None: the model
    alone (for `--key-map`)."""
    spec = families.get(family).spec
    base: dict[str, torch.Tensor] = {}
    for f in sorted((model / spec.denoiser).glob("*.safetensors")):
        base.update(load_file(str(f)))
    cls, kind = COMFY_MODEL[family]
    case_json: dict[str, Any] = {
        "family": family,
        "case": case,
        "model_class": cls,
        "native": kind,
        "lora": str(lora),
        "tolerance": TOLERANCE[dtype],
        "file_keys": file_kinds(lora) if lora is not None else {},
    }
    if kind == "unet":
        case_json["unet_config"] = sdxl_unet_config(model)
    if kind == "krea2":  # what ComfyUI's krea2_to_diffusers reads: the main blocks' count
        blocks = {k.split(".")[1] for k in base if k.startswith("transformer_blocks.")}
        case_json["unet_config"] = {"image_model": "krea2", "layers": len(blocks)}
    if kind == "given":
        full = {k: change.get(k, torch.zeros_like(v)) for k, v in base.items()}
        from bench.comfyui_native import flux2_native

        base, change = flux2_native(base), flux2_native(full)
        case_json["unet_config"] = {
            "depth": len({k.split(".")[1] for k in base if k.startswith("double_blocks.")}),
            "depth_single_blocks": len({k.split(".")[1] for k in base if k.startswith("single_blocks.")}),
            "hidden_size": base["img_in.weight"].shape[0] if "img_in.weight" in base else 0,
        }
    folder.mkdir(parents=True, exist_ok=True)
    save_file({k: v.contiguous() for k, v in base.items()}, str(folder / "base.safetensors"))
    save_file({k: v.contiguous() for k, v in change.items()}, str(folder / "expected.safetensors"))
    (folder / "case.json").write_text(json.dumps(case_json, indent=1))
    return folder


def check_family(
    family: str,
    comfyui: Path,
    work: Path,
    pythonpath: str | None,
    lora_format: str | None = None,
    case: str = "lora",
    strength: float = 1.0,
) -> dict[str, Any]:
    """Train, write and run one family's `case` (CASES) loaded at `strength`; returns
    comfyui_side.py's result. At a strength s the expected change is s x the trained one (every
    adapter kind: ComfyUI scales a DoRA's change to its decomposed weight by s too)."""
    if family in NOT_IN_COMFYUI:
        return {"family": family, "case": case, "ok": None, "skipped": NOT_IN_COMFYUI[family]}
    folder = write_case(family, work, case, lora_format)
    if strength != 1.0:
        expected = load_file(str(folder / "expected.safetensors"))
        save_file(
            {k: (v * strength).contiguous() for k, v in expected.items()},
            str(folder / "expected.safetensors"),
        )
        case_json = json.loads((folder / "case.json").read_text())
        (folder / "case.json").write_text(json.dumps(case_json | {"strength": strength}, indent=1))
    return run_side(folder, comfyui, pythonpath, family, case) | {"strength": strength}


def run_side(
    folder: Path,
    comfyui: Path,
    pythonpath: str | None,
    family: str,
    case: str,
    extra: list[str] | None = None,
) -> dict[str, Any]:
    """comfyui_side.py's result on the case `folder` (in a process of its own: the Python of
    LORASTUDIO_COMFYUI_PYTHON, a venv of ComfyUI's own, else this one with `pythonpath`)."""
    env = {k: v for k, v in os.environ.items() if k != "PYTHONPATH"}
    if pythonpath:
        env["PYTHONPATH"] = pythonpath
    python = os.environ.get("LORASTUDIO_COMFYUI_PYTHON") or sys.executable
    run = subprocess.run(
        [python, str(SIDE), "--comfyui", str(comfyui), *(extra or []), str(folder)],
        capture_output=True,
        text=True,
        env=env,
        timeout=600,
    )
    lines = [line for line in run.stdout.splitlines() if line.startswith("{")]
    if run.returncode != 0 or not lines:
        return {"family": family, "case": case, "ok": False, "error": (run.stderr or run.stdout)[-2000:]}
    return json.loads(lines[-1])


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--comfyui", type=Path, default=os.environ.get("LORASTUDIO_COMFYUI"), required=False)
    parser.add_argument("--pythonpath", default=os.environ.get("LORASTUDIO_COMFYUI_DEPS"))
    parser.add_argument("--work", type=Path, default=None, help="folder for models, runs and cases")
    parser.add_argument(
        "--lora-format", default=None, help="kohya or diffusers (default: the case's / family's)"
    )
    parser.add_argument("--case", action="append", choices=list(CASES), help="repeatable (default: lora)")
    parser.add_argument(
        "--key-table",
        type=Path,
        default=None,
        help="write ComfyUI's key map of each family's tiny model to this JSON (no training); needs --commit",
    )
    parser.add_argument("--commit", default=None, help="the ComfyUI commit of --comfyui (for --key-table)")
    parser.add_argument("families", nargs="*", default=[*COMFY_MODEL, *NOT_IN_COMFYUI])
    args = parser.parse_args()
    if args.comfyui is None or not (args.comfyui / "comfy" / "lora.py").is_file():
        raise SystemExit("give a ComfyUI checkout: --comfyui PATH (or LORASTUDIO_COMFYUI)")
    work = args.work or Path(tempfile.mkdtemp(prefix="comfyui-check-"))
    if args.key_table is not None:
        if not args.commit:
            raise SystemExit("--key-table needs --commit (the ComfyUI commit the table is of)")
        from bench.comfyui_key_table import write_key_table

        write_key_table(args.key_table, args.families, args.comfyui, work, args.pythonpath, args.commit)
        return
    results = []
    for family, case in [(f, c) for f in args.families for c in args.case or ["lora"]]:
        result = check_family(family, args.comfyui, work, args.pythonpath, args.lora_format, case)
        results.append(result)
        print(
            f"{family:13} {case:17} ok={result.get('ok')} keys={result.get('lora_keys')} "
            f"patched={result.get('patched_weights')}/{result.get('expected_weights')} "
            f"worst={result.get('worst_relative_error', float('nan')):.2e} "
            f"not_loaded={len(result.get('not_loaded', []))} errors={len(result.get('comfy_errors', []))} "
            f"{result.get('skipped') or result.get('error', '')[-300:] or '; '.join(result.get('errors', [])[:2])}",
            flush=True,
        )
    print(json.dumps(results))


if __name__ == "__main__":
    main()
