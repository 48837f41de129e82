"""Writing a trained LoRA: <run_dir>/<name>.safetensors (diffusers keys + adapter metadata, or
the kohya / ComfyUI layout: cfg.lora_format) and the sidecar <run_dir>/<name>.json.

Both are written into a hidden staging folder inside run_dir and then renamed into place (the
sidecar first, the LoRA last), so a reader that sees the .safetensors sees a complete pair.
"""

from __future__ import annotations

import datetime
import json
import shutil
from collections.abc import Mapping
from pathlib import Path
from typing import TYPE_CHECKING, Any

import torch

from lorastudio import __version__
from lorastudio.families.single_file import model_source
from lorastudio.lora.convert import PeftLora
from lorastudio.lora.files import ADAPTER_METADATA_KEY, cast_for_file, file_for_layout, write_lora_file
from lorastudio.lora.metadata import ARCHITECTURE_KEY, architecture, training_metadata
from lorastudio.lora.portability import check_diffusers_lokr, check_loaders
from lorastudio.lora.snapshots import LORAS, snapshot_name
from lorastudio.lora.text_encoders import (
    file_clip_shapes,
    to_diffusers_tensors,
    to_kohya_tensors,
    with_adapter_metadata,
)
from lorastudio.training.adapters.assistant import assistant_sidecar
from lorastudio.training.adapters.lora import adapter_alpha, adapter_metadata, lora_state_dict, module_scales
from lorastudio.training.adapters.lycoris_export import a1111_forge_verdict, lycoris_file
from lorastudio.training.resume.folder_guard import check_folder, replace_in_run
from lorastudio.training.resume.fresh_mark import settle
from lorastudio.training.resume.run_files import CHECKPOINTS, checkpoint_name, ema_step_name, staging_path
from lorastudio.training.validation_file import validation_summary

if TYPE_CHECKING:
    from peft import LoraConfig

    from lorastudio.config import TrainConfig
    from lorastudio.families.base import FamilySpec
    from lorastudio.training.adapters.text_encoders import TextEncoderLora
    from lorastudio.training.optimize import RunState
    from lorastudio.training.preflight import PreparedRun

SIDECAR_FORMAT = "lorastudio.lora/1"


def build_sidecar(
    cfg: TrainConfig,
    *,
    steps_run: int,
    total_steps: int,
    stopped: bool,
    dataset_root: Path,
    dataset_fingerprint: str,
    num_images: int,
    lora_file: str,
    variant: str | None = None,
    extensions: list[dict[str, Any]] | None = None,
    dataset_entries: list[dict[str, Any]] | None = None,
    masked_images: int = 0,
    validation_images: int = 0,
    init_lora: Mapping[str, str] | None = None,
) -> dict[str, Any]:
    """The sidecar JSON of a run (cfg must be resolved): what was trained, on what, how far;
    `variant`: the base model's flavour (FamilySpec.variants) when the family has them;
    "extensions": each time the run was trained longer (training/resume/extend.py); the dataset's
    images with a loss mask (data/masks.py) and held out for validation (data/holdout.py);
    "init_lora": the LoRA file the run started from, {"file", "sha256"} (training/adapters/init_lora.py),
    only for such a run."""
    return {
        "format": SIDECAR_FORMAT,
        "lora_file": lora_file,
        "family": cfg.family,
        "base_model": cfg.base_model,
        "variant": variant,
        "revision": cfg.revision,
        "rank": cfg.lora_rank,
        "alpha": cfg.lora_alpha,
        "steps": steps_run,
        "total_steps": total_steps,
        "stopped": stopped,
        "extensions": list(extensions or []),
        "resolution": cfg.resolution,
        "trigger_word": cfg.trigger_word,
        "dataset": {
            "path": str(dataset_root),
            "fingerprint": dataset_fingerprint,  # over every entry (data/entries.py)
            "images": num_images,
            "entries": list(dataset_entries or []),
            "masked_images": masked_images,
            "validation_images": validation_images,
        },
        "config": cfg.model_dump(mode="json"),
        "created_at": datetime.datetime.now(datetime.UTC).isoformat(timespec="seconds"),
        "lorastudio_version": __version__,
        **assistant_sidecar(cfg),  # a distilled base's assistant LoRA: merged for training, not in this file
        **({"init_lora": dict(init_lora)} if init_lora else {}),
    }


def run_sidecar(
    run: PreparedRun,
    *,
    steps_run: int,
    total_steps: int,
    stopped: bool,
    lora_file: str,
    extensions: list[dict[str, Any]] | None = None,
) -> dict[str, Any]:
    """build_sidecar for a prepared run (its resolved config and scanned dataset; the base
    model's flavour when the family has them)."""
    flavour = run.family.source_variant(model_source(run.cfg), run.cfg.revision)
    return build_sidecar(
        run.cfg,
        variant=getattr(flavour, "title", None),
        steps_run=steps_run,
        total_steps=total_steps,
        stopped=stopped,
        dataset_root=run.scan.root,
        dataset_fingerprint=run.scan.fingerprint,
        num_images=len(run.scan.images()),  # each image once, whatever its resolutions
        dataset_entries=[
            {
                "label": e.label,
                "path": str(e.root),
                "images": e.images,
                "fingerprint": e.fingerprint,
                **e.settings(),
            }
            for e in run.scan.entries
        ],
        lora_file=lora_file,
        extensions=extensions,
        masked_images=sum(1 for it in run.scan.images() if it.mask is not None),
        validation_images=len({(it.entry, it.path) for it in run.validation}),
        init_lora=run.init_record,
    )


def save_lora_snapshot(
    run: PreparedRun,
    denoiser: Any,
    lora_config: LoraConfig,
    *,
    step: int,
    total_steps: int,
    extensions: list[dict[str, Any]] | None = None,
    validation: dict[str, Any] | None = None,
    text_encoders: TextEncoderLora | None = None,
) -> Path | None:
    """Write the LoRA snapshot of step `step` (lorastudio.lora.snapshots: loras/<name>-step-N),
    in the run's layout with its sidecar ("snapshot": true; "validation": {step, loss} when the
    step was validated, training/validate.py; with EMA "ema": {..., "weights": "raw"}: `denoiser`
    holds the raw weights), checked like the final file.
    Returns the .safetensors path, or None when that step's snapshot is already on disk (a
    step re-run by a resume: the run's history is not rewritten)."""
    name = snapshot_name(str(run.cfg.output_name), step)
    if (run.run_dir / LORAS / f"{name}.safetensors").is_file():
        return None
    sidecar = run_sidecar(
        run,
        steps_run=step,
        total_steps=total_steps,
        stopped=False,
        lora_file=f"{LORAS}/{name}.safetensors",
        extensions=extensions,
    )
    sidecar["snapshot"] = True
    if run.cfg.ema_decay is not None:  # a snapshot holds the raw weights (lora/snapshots.py)
        sidecar["ema"] = {
            "decay": run.cfg.ema_decay,
            "update_every": run.cfg.ema_update_every,
            "weights": "raw",
        }
    if validation is not None:
        sidecar["validation"] = validation
    return save_lora(
        run.run_dir / LORAS, name, run.family.spec, denoiser, lora_config, sidecar, text_encoders
    )


def save_ema_step_lora(run: PreparedRun, state: RunState, folder: Path, kept_in: str | None = None) -> Path:
    """With EMA: the EMA weights of the step just done (state.steps_run) as a LoRA file in the
    checkpoint (staging) `folder` of that step (`kept_in`: else the run folder's sub-folder it is
    written to, training/ema_preview.py), <name>-step-N.ema.safetensors + sidecar
    (run_files.ema_step_name): the run's layout, header and sidecar as the final file's, with
    "steps" the step, "snapshot": true and "ema": {"decay", "update_every", "weights": "ema",
    "updates"}, and "created_at" (modelspec.date) its own write time, as every snapshot's; checked
    like it. Returns its path (in `folder`)."""
    if state.ema is None:
        raise ValueError("save_ema_step_lora is for a run with EMA weights")
    cfg, step = run.cfg, state.steps_run
    stem = ema_step_name(str(cfg.output_name), step)
    sidecar = run_sidecar(
        run,
        steps_run=step,
        total_steps=state.total_steps,
        stopped=False,
        lora_file=f"{kept_in or f'{CHECKPOINTS}/{checkpoint_name(step)}'}/{stem}.safetensors",
        extensions=state.extensions,
    )
    sidecar["snapshot"] = True
    sidecar["ema"] = {
        "decay": cfg.ema_decay,
        "update_every": cfg.ema_update_every,
        "weights": "ema",
        "updates": state.ema.updates,
    }
    with state.ema.swapped_in():  # the raw weights are put back after, bitwise
        return save_lora(
            folder, stem, run.family.spec, state.denoiser, state.lora_config, sidecar, state.text_encoders
        )


def save_lora(
    run_dir: Path,
    name: str,
    spec: FamilySpec,
    denoiser: Any,
    lora_config: LoraConfig,
    sidecar: dict[str, Any],
    text_encoders: TextEncoderLora | None = None,
) -> Path:
    """Write <run_dir>/<name>.safetensors and <run_dir>/<name>.json; returns the LoRA path.
    With `text_encoders` (SDXL's train_text_encoder) their LoRA joins the file in the same
    layout (lora/text_encoders.py) and the loader check covers it.

    The layout is the run's `lora_format` (sidecar["config"]), the tensors in its `save_dtype`
    (fp32 / bf16 / fp16; lora.files.cast_for_file): "diffusers" is what
    `<spec.pipeline_class>.load_lora_weights(path)` loads (keys prefixed with the denoiser name,
    the adapter config under `lora_adapter_metadata`); "kohya" is the family's kohya / ComfyUI
    layout (see lorastudio.lora.convert) with kohya's `ss_*` header keys. Both carry the training
    facts as `lorastudio.*` header strings. The sidecar gains "lora_format" and "loaders": the
    save-time check against ComfyUI, diffusers and A1111/Forge (lorastudio.lora.portability).
    On any failure the staging folder is removed and nothing is left in run_dir.
    Raises ConfigError when a trained layer has no name in the kohya layout.
    """
    layout = sidecar.get("config", {}).get("lora_format", "diffusers")
    adapter = sidecar.get("config", {}).get("adapter", "lora")
    save_dtype = sidecar.get("config", {}).get("save_dtype", "fp32")
    info = training_metadata(sidecar)
    # the model spec's architecture id, from the trained denoiser's config (FLUX.1 dev / schnell)
    info[ARCHITECTURE_KEY] = architecture(spec.name, getattr(denoiser, "config", None))
    if adapter != "lora" and layout == "kohya":  # DoRA / LoHa / LoKr: the LyCORIS layout ComfyUI reads
        shapes = base_weight_shapes(denoiser)
        tensors, header, check = lycoris_file(denoiser, spec.name, adapter, info, shapes)
        tensors = cast_for_file(tensors, save_dtype)
        no_reader = {"checked": False, "reason": f"diffusers has no loader for LyCORIS {adapter} files"}
        loaders = {
            "comfyui": check,
            # diffusers reads FLUX.2's LyCORIS LoKr files (RELIABILITY 1501)
            "diffusers": check_diffusers_lokr(tensors, spec.name, shapes, spec.pipeline_class)
            if adapter == "lokr"
            else no_reader,
            "a1111_forge": a1111_forge_verdict(tensors, spec.name, adapter),
        }
    else:
        lora = PeftLora(lora_state_dict(denoiser), int(lora_config.r), adapter_alpha(lora_config))
        if layout == "diffusers" and (
            getattr(lora_config, "rank_pattern", None) or getattr(lora_config, "alpha_pattern", None)
        ):
            lora = fold_module_strengths(lora, module_scales(denoiser))
        tensors, header = file_for_layout(lora, spec.name, layout, info, adapter_metadata(lora_config))
        clip = None
        if text_encoders is not None:
            tensors, header = _with_text_encoders(tensors, header, layout, text_encoders, lora)
            clip = file_clip_shapes(text_encoders.module_shapes())
        tensors = cast_for_file(tensors, save_dtype)  # the loader check below reads the file's tensors
        unet_config = getattr(denoiser, "config", None) if spec.name == "sdxl" else None
        loaders = check_loaders(
            tensors, header, spec.name, base_weight_shapes(denoiser), spec.pipeline_class, unet_config, clip
        )
    sidecar = {**sidecar, "lora_format": layout, "adapter": adapter, "loaders": loaders}
    return write_lora_pair(run_dir, name, tensors, header, sidecar)


def _with_text_encoders(
    tensors: dict[str, Any],
    header: dict[str, str],
    layout: str,
    text_encoders: TextEncoderLora,
    lora: PeftLora,
) -> tuple[dict[str, Any], dict[str, str]]:
    """The file's tensors and header with the text encoders' LoRA (same rank and alpha as the
    denoiser's) in `layout`: kohya lora_te1_ / lora_te2_ keys with .alpha, or diffusers
    text_encoder. / text_encoder_2. keys with alpha / rank folded in and their adapter metadata."""
    state = text_encoders.state_dict()
    if layout == "kohya":
        return {**tensors, **to_kohya_tensors(state, lora.alpha)}, header
    config = adapter_metadata(text_encoders.lora_config)
    header = with_adapter_metadata(header, config, lora.rank, ADAPTER_METADATA_KEY)
    return {**tensors, **to_diffusers_tensors(state, lora.rank, lora.alpha)}, header


def fold_module_strengths(lora: PeftLora, scales: dict[str, tuple[int, float]]) -> PeftLora:
    """`lora` with each module's own alpha/rank (rank / alpha patterns: `scales` =
    training.adapters.lora.module_scales) folded into its lora_B and alpha = rank, so that a loader applying
    scale 1 per module (ComfyUI without `.alpha`; diffusers with alpha_pattern = rank_pattern, as
    lora.files.file_for_layout records) applies the trained weight."""
    tensors = {}
    for key, value in lora.tensors.items():
        module = key.removesuffix(".lora_B.weight")
        if module != key and module in scales:
            rank, alpha = scales[module]
            value = value * (alpha / rank)
        tensors[key] = value
    return PeftLora(tensors, lora.rank, float(lora.rank))


def write_lora_pair(
    run_dir: Path, name: str, tensors: dict[str, Any], header: dict[str, str], sidecar: dict[str, Any]
) -> Path:
    """Write <run_dir>/<name>.safetensors and its sidecar <name>.json through a staging folder
    (the sidecar renamed into place first, the LoRA last). Returns the LoRA path."""
    weight_name = f"{name}.safetensors"
    check_folder(run_dir)  # a folder put at the run's path since it started takes nothing (folder_guard.py)
    run_dir.mkdir(parents=True, exist_ok=True)
    check_folder(run_dir)
    staging = staging_path(run_dir)
    staging.mkdir(parents=True)
    try:
        write_lora_file(staging / weight_name, tensors, header)
        (staging / f"{name}.json").write_text(json.dumps(sidecar, indent=2) + "\n", encoding="utf-8")
        check_folder(run_dir)  # the staging is in the run's folder: so are the renamed files
        replace_in_run(staging / f"{name}.json", run_dir / f"{name}.json")
        replace_in_run(staging / weight_name, run_dir / weight_name)
    finally:
        shutil.rmtree(staging, ignore_errors=True)
    return run_dir / weight_name


def base_weight_shapes(denoiser: Any) -> dict[str, tuple[int, ...]]:
    """{module name: weight shape} of the denoiser's own layers (a LoRA-wrapped layer under its
    plain name; the LoRA's own parameters left out). A linear layer reports its logical
    (out_features, in_features): a quantized base (nf4, int8) stores its weight packed. A member of
    a fused projection group (training/speed/fused_projections.FusedSlice: no weight parameter of its
    own, its weight a view into the group's holder) is reported by its own (out, in) too: the file
    names it, and the loader checks look its key up here. So is a linear layer that holds its
    weight other than as a `weight` parameter: an fp8 base's training/speed/fp8.Fp8FrozenLinear (two
    e4m3 copies and their scales; `weight` a property)."""
    modules = dict(denoiser.named_modules())
    shapes = {}
    for key, param in denoiser.named_parameters():
        if key.endswith(".weight") and ".lora_" not in key:
            name = key.removesuffix(".weight")
            module = modules.get(name)
            logical = (getattr(module, "out_features", None), getattr(module, "in_features", None))
            shape = logical if None not in logical else tuple(param.shape)
            shapes[name.replace(".base_layer", "")] = tuple(shape)
    for name, module in modules.items():
        weightless_linear = isinstance(module, torch.nn.Linear) and "weight" not in dict(
            module.named_parameters(recurse=False)
        )
        if (getattr(module, "fused_slice", False) or weightless_linear) and ".lora_" not in name:
            shapes[name.replace(".base_layer", "")] = (module.out_features, module.in_features)
    return shapes


def export_run(run: PreparedRun, state: RunState, stopped: bool) -> Path:
    """Write the run's LoRA (<output_name>.safetensors + sidecar) from the loop's state; with EMA,
    the raw weights first as <output_name>.raw.safetensors, then the EMA ones under the run's name
    (the sidecars say which is which). Returns the run's LoRA path."""
    cfg = run.cfg
    name = str(cfg.output_name)
    sidecar = run_sidecar(
        run,
        steps_run=state.steps_run,
        total_steps=state.total_steps,
        stopped=stopped,
        lora_file=f"{name}.safetensors",
        extensions=state.extensions,
    )
    if state.validation is not None and state.validation.series:
        sidecar["validation"] = validation_summary(state, state.validation, name)
    te = state.text_encoders
    if state.ema is None:
        lora = save_lora(run.run_dir, name, run.family.spec, state.denoiser, state.lora_config, sidecar, te)
        settle(run.run_dir)  # a fresh run's folder now holds its LoRA: a kill keeps it whole
        return lora
    raw, ema = f"{name}.raw", {"decay": cfg.ema_decay, "update_every": cfg.ema_update_every}
    raw_sidecar = {**sidecar, "lora_file": f"{raw}.safetensors"}
    raw_sidecar["ema"] = {**ema, "weights": "raw", "ema_file": f"{name}.safetensors"}
    save_lora(run.run_dir, raw, run.family.spec, state.denoiser, state.lora_config, raw_sidecar, te)
    sidecar["ema"] = {**ema, "weights": "ema", "updates": state.ema.updates, "raw_file": f"{raw}.safetensors"}
    with state.ema.swapped_in():  # the run's LoRA is the EMA one; written last, as the pair's marker
        lora = save_lora(run.run_dir, name, run.family.spec, state.denoiser, state.lora_config, sidecar, te)
    settle(run.run_dir)  # a fresh run's folder now holds its LoRA: a kill keeps it whole
    return lora
