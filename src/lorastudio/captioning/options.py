"""CaptionOptions: what a caption job does, one strict model for the CLI, the API and the worker."""

from __future__ import annotations

from typing import Literal

from pydantic import BaseModel, ConfigDict, Field, field_validator

from lorastudio.text_rules import one_line

DEFAULT_PROMPT = "Describe this image in one sentence for a training caption"
FLORENCE_DEFAULT_TASK = "<CAPTION>"  # Florence-2 takes a task token, not free text
MAX_TOKENS_LIMIT = 512


class CaptionOptions(BaseModel):
    """model: a catalogue id (`lorastudio models list`: a fetched captioner's owner--name), a hub
    id (owner/name; lorastudio's fetched copy, the hub cache, `revision`, the studio's hub token)
    or a model folder (absolute, or a name under the models folder). prompt: None takes the model's
    default (DEFAULT_PROMPT; Florence-2: FLORENCE_DEFAULT_TASK). prefix: put before every new
    caption ("<prefix>, <caption>", e.g. a trigger word; not doubled; one line: a control,
    invisible or text-direction character in it is refused, naming it). overwrite: caption every
    image, not only those without a caption. max_tokens: new tokens per caption (greedy).
    device: "auto" (the GPU when there is one), "cpu" or "cuda"."""

    model_config = ConfigDict(extra="forbid", frozen=True)
    model: str = Field(min_length=1, max_length=1000)
    revision: str | None = Field(default=None, max_length=200)
    prompt: str | None = Field(default=None, max_length=2000)
    prefix: str | None = Field(default=None, max_length=200)
    overwrite: bool = False
    max_tokens: int = Field(default=60, ge=1, le=MAX_TOKENS_LIMIT)
    device: Literal["auto", "cpu", "cuda"] = "auto"

    @field_validator("prefix")
    @classmethod
    def _one_line_prefix(cls, value: str | None) -> str | None:
        """The prefix is written into every new caption as given: a line break, NUL or bidi
        control in it would give a caption of several lines or one that reads backwards."""
        return one_line(value)
