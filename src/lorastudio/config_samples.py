"""Sample prompts with their own settings: a TrainConfig.sample_prompts entry is a prompt (text)
or a SamplePrompt object that also sets its own size, seed and guidance; each setting it leaves
unset takes the run's (resolution, sample_seed, the family's default guidance). Part of the one
config schema (config.py); no torch.

In TOML: sample_prompts = ["a cat", { prompt = "a dog", width = 768, height = 512, seed = 3 }].
"""

from __future__ import annotations

from pydantic import BaseModel, ConfigDict, Field

MAX_SAMPLE_PROMPTS = 8  # sample prompts per run
MAX_SAMPLE_PROMPT_CHARS = 1000  # characters per sample prompt
MAX_SAMPLE_SIDE = 2048  # pixels per side of one sample preview


class SamplePrompt(BaseModel):
    """One sample prompt and the settings it renders with instead of the run's."""

    model_config = ConfigDict(extra="forbid")

    prompt: str = Field(min_length=1, max_length=MAX_SAMPLE_PROMPT_CHARS)
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
    """The text of a sample_prompts entry."""
    return entry if isinstance(entry, str) else entry.prompt
