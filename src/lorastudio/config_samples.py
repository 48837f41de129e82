"""Sample prompts of TrainConfig: a plain prompt, or a prompt with the reference (control)
images an edit family renders it with.

    "sample_prompts": ["a red circle",
                       {"prompt": "make it blue", "controls": ["control/shape_00.png"]}]

`controls` are paths relative to the dataset folder (data_dir; with `datasets`, the first entry's
folder), inside it, in slot order; they are checked with the dataset (data/sample_refs.py). Left
out (null): a paired run renders the prompt as an edit of the first paired dataset image's
controls, a text-to-image run without references; [] asks for none (text-to-image, for a family
that also trains it: FLUX.2)."""

from __future__ import annotations

from pydantic import BaseModel, ConfigDict, Field

MAX_SAMPLE_CONTROLS = 10  # references per sample prompt (the most any family takes: FLUX.2 dev)


class SamplePrompt(BaseModel):
    """One sample prompt with its reference images."""

    model_config = ConfigDict(extra="forbid")

    prompt: str = Field(description="the prompt (the edit instruction)")
    controls: list[str] | None = Field(
        default=None,
        max_length=MAX_SAMPLE_CONTROLS,
        description="reference images, paths relative to the dataset folder (null: the first paired "
        "image's controls on a paired dataset, none otherwise; []: none)",
    )


def prompt_text(entry: str | SamplePrompt) -> str:
    """The prompt of a sample_prompts entry."""
    return entry if isinstance(entry, str) else entry.prompt


def prompt_controls(entry: str | SamplePrompt) -> list[str] | None:
    """The reference images asked for by a sample_prompts entry (None: the run's default)."""
    return None if isinstance(entry, str) else entry.controls
