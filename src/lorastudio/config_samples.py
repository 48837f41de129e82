"""Sample prompts of TrainConfig: a plain prompt (text), or a SamplePrompt object that also sets
its own size, seed and guidance, and the reference (control) images an edit family renders it with.
Each setting an object leaves unset takes the run's (resolution, sample_seed, the family's default
guidance, the run's default references). Part of the one config schema (config.py); no torch.

    "sample_prompts": ["a red circle",
                       {"prompt": "a dog", "width": 768, "height": 512, "seed": 3, "guidance": 4.0},
                       {"prompt": "make it blue", "controls": ["control/shape_00.png"]}]

In TOML: sample_prompts = ["a cat", { prompt = "a dog", width = 768, height = 512, seed = 3 }].

`controls` are paths relative to the dataset folder (data_dir; with `datasets`, the first entry's
folder), inside it, or files of the run's control_dirs folders (named by the folder as control_dirs
names it, "aitk-controls/a.png", or by their full path), in slot order; they are checked with the
dataset (data/sample_refs.py), and nothing outside those folders is read. Left
out (null): a paired run renders the prompt as an edit of the first paired dataset image's
controls, a text-to-image run without references; [] asks for none (text-to-image, for a family
that also trains it: FLUX.2)."""

from __future__ import annotations

from typing import TYPE_CHECKING

from pydantic import ConfigDict, Field

from lorastudio.config_fields_base import NumbersNotBooleans

if TYPE_CHECKING:
    from lorastudio.config import TrainConfig

MAX_SAMPLE_PROMPTS = 8  # sample prompts per run
MAX_SAMPLE_PROMPT_CHARS = 1000  # characters per sample prompt
MAX_SAMPLE_SIDE = 2048  # pixels per side of one sample preview
MAX_SAMPLE_CONTROLS = 10  # references per sample prompt (the most any family takes: FLUX.2 dev)


class SamplePrompt(NumbersNotBooleans):
    """One sample prompt, the settings it renders with instead of the run's, and its references."""

    model_config = ConfigDict(extra="forbid", allow_inf_nan=False)

    prompt: str = Field(
        min_length=1, max_length=MAX_SAMPLE_PROMPT_CHARS, description="the prompt (the edit instruction)"
    )
    controls: list[str] | None = Field(
        default=None,
        max_length=MAX_SAMPLE_CONTROLS,
        description="reference images, paths relative to the dataset folder, or inside a control_dirs "
        "folder (that folder as control_dirs names it, then the file; or its full path) (null: the first "
        "paired image's controls on a paired dataset, none otherwise; []: none)",
    )
    width: int | None = Field(
        default=None, ge=16, le=MAX_SAMPLE_SIDE, description="pixels (null: the training resolution)"
    )
    height: int | None = Field(
        default=None, ge=16, le=MAX_SAMPLE_SIDE, description="pixels (null: the training resolution)"
    )
    seed: int | None = Field(default=None, ge=0, le=2**32 - 1, description="noise seed (null: sample_seed)")
    guidance: float | None = Field(
        default=None, ge=0, le=100, allow_inf_nan=False, description="guidance scale (null: the family's)"
    )


def prompt_text(entry: str | SamplePrompt) -> str:
    """The prompt of a sample_prompts entry."""
    return entry if isinstance(entry, str) else entry.prompt


def prompt_controls(entry: str | SamplePrompt) -> list[str] | None:
    """The reference images asked for by a sample_prompts entry (None: the run's default)."""
    return None if isinstance(entry, str) else entry.controls


def unapplied_sample_guidance_warning(cfg: TrainConfig) -> str | None:
    """The warning for sample prompts whose own `guidance` a true-CFG family's previews do not
    apply (Qwen-Image, Qwen-Image-Edit: spec.guidance "true_cfg"), else None. Their pipelines run
    the guidance pass only with a negative prompt (diffusers' `do_true_cfg`), and previews have
    none, so a scale above 1 renders the image of no guidance (RELIABILITY 1560: the previews are
    listed at guidance 1). A fresh run's such prompt is refused (training/guidance_rules.
    sample_guidance_problems, RELIABILITY 1683: Generate's rule, generation_rules.
    unused_guidance_problems); a run recorded before that rule resumes as it did, with this
    warning. No torch."""
    from lorastudio import families
    from lorastudio.errors import UnknownFamily

    try:
        spec = families.get(cfg.family).spec
    except UnknownFamily:
        return None
    if spec.guidance != "true_cfg":
        return None
    given = [
        f"{i} ({entry.guidance:g})"
        for i, entry in enumerate(cfg.sample_prompts or [], start=1)
        if isinstance(entry, SamplePrompt) and entry.guidance is not None and entry.guidance > 1
    ]
    if not given:
        return None
    return (
        f"sample prompt{'s' if len(given) > 1 else ''} {', '.join(given)}: guidance not applied to the preview: the {spec.title} "
        "pipeline applies its true CFG scale only with a negative prompt and previews have none, so "
        'each renders (and is listed) at guidance 1; Generate with a negative prompt (" " for nothing '
        "in particular) renders with the scale"
    )
