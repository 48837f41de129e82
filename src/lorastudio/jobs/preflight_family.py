"""The preflight report's sections on the base model and the conditioning (jobs/preflight.py):
the base's flavour and single-file facts, and whether captions are encoded once or in every step."""

from __future__ import annotations

from pathlib import Path
from typing import Any

from lorastudio import families
from lorastudio.config import TrainConfig
from lorastudio.config_rules import adapter_file_note


def conditioning_section(cfg: TrainConfig) -> dict[str, Any]:
    """How captions become conditioning: encoded once before training (the caption cache), or in
    every step (SDXL's train_text_encoder: the encoders train, so no embedding stays fixed)."""
    if cfg.train_text_encoder:
        note = (
            "train_text_encoder: both CLIP text encoders stay loaded and train with a LoRA, so captions "
            "are encoded in every step (no caption cache): more memory and time per step"
        )
        return {"per_step": True, "note": note}
    return {"per_step": False, "note": "each unique caption is encoded once before training (caption cache)"}


def family_section(cfg: TrainConfig, model_dir: Path | None) -> dict[str, Any]:
    """The base model's flavour (a row of FamilySpec.variants, read from the local folder's
    configs) and what training it means: {"name", "variant": title or None (no variants, a hub
    id: read when the run loads it, or no row matched), "notes": [...]}."""
    fam = families.get(cfg.family)
    row = fam.folder_variant(model_dir) if model_dir is not None else None
    file_note = adapter_file_note(cfg.adapter, cfg.lora_format or "diffusers", cfg.family)  # resolved
    return {
        "name": fam.spec.name,
        "variant": row.title if row else None,
        "notes": [n for n in (row.note if row else None, file_note) if n],
        "single_file": single_file_text(cfg),
    }


def single_file_text(cfg: TrainConfig) -> str | None:
    """'<file> (<layout>) with the configs of <base config>; <prediction>' for a resolved
    single-file run; None for a folder or hub id."""
    if cfg.base_config is None or not Path(cfg.base_model).is_file():
        return None
    from lorastudio.basemodels.single_file import read_file_facts

    facts = read_file_facts(Path(cfg.base_model))
    if cfg.v_prediction is None:
        pred = "prediction type: the base config's scheduler" if cfg.family == "sdxl" else None
    else:
        told = "the file says so" if facts.v_prediction is not None else "v_prediction setting"
        pred = f"{'v-prediction' if cfg.v_prediction else 'epsilon'} ({told})"
    text = f"{cfg.base_model} ({facts.layout.title}) with the configs of {cfg.base_config}"
    return f"{text}; {pred}" if pred else text
