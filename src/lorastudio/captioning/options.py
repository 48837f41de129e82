"""CaptionOptions: what a caption job does, one strict model for the CLI, the API and the worker."""

from __future__ import annotations

import re
from typing import Literal

from pydantic import BaseModel, ConfigDict, Field, ValidationInfo, field_validator

from lorastudio.config_fields_source import local_revision_problem
from lorastudio.errors import ConfigError, FieldProblem
from lorastudio.text_rules import one_line

DEFAULT_PROMPT = "Describe this image in one sentence for a training caption"
FLORENCE_DEFAULT_TASK = "<CAPTION>"  # Florence-2 takes a task token, not free text
# the Florence-2 tasks whose answer is a caption (its others: boxes, regions, OCR with locations)
FLORENCE_CAPTION_TASKS = (FLORENCE_DEFAULT_TASK, "<DETAILED_CAPTION>", "<MORE_DETAILED_CAPTION>")
MAX_TOKENS_LIMIT = 512
# failures a summary event or a job snapshot lists by file (the count is whole): 5,000 broken
# images put 5,000 rows into the summary event and into every poll of the job (~0.5 MB a second)
MAX_LISTED_FAILURES = 100
QWEN_CONTROL_TOKEN = re.compile(r"<\|[A-Za-z0-9_]+\|>")  # <|im_start|>, <|image_pad|>, <|endoftext|>...


class CaptionOptions(BaseModel):
    """model: a catalogue id (`lorastudio models list`: a fetched captioner's owner--name), a hub
    id (owner/name; lorastudio's fetched copy, the hub cache, `revision`, the studio's hub token)
    or a model folder (absolute, or a name under the models folder). prompt: None takes the model's
    default (DEFAULT_PROMPT; Florence-2: FLORENCE_DEFAULT_TASK; a blank prompt is None; a
    Florence-2 model takes one of FLORENCE_CAPTION_TASKS only: `check_prompt`). prefix: put before every new
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

    @field_validator("revision")
    @classmethod
    def _revision_of_a_hub_id(cls, value: str | None, info: ValidationInfo) -> str | None:
        """A revision applies to a hub id; with a folder it is refused (the shared rule:
        config_fields_source.local_revision_problem), not ignored."""
        model = info.data.get("model")
        if isinstance(model, str) and (why := local_revision_problem(model, value, field="model")):
            raise ValueError(why)
        return value

    @field_validator("prompt")
    @classmethod
    def _blank_prompt_is_none(cls, value: str | None) -> str | None:
        """A prompt of blanks asks nothing: the model's default, as for no prompt."""
        return value if value is None or value.strip() else None

    @field_validator("prefix")
    @classmethod
    def _one_line_prefix(cls, value: str | None) -> str | None:
        """The prefix is written into every new caption as given: a line break, NUL or bidi
        control in it would give a caption of several lines or one that reads backwards."""
        return one_line(value)


def check_prompt(kind: str, options: CaptionOptions) -> None:
    """Refuse (ConfigError on `prompt`) a prompt captioner `kind` cannot honour: Florence-2 is
    asked by a task token (its processor passes free text or another task through, and the model
    answers it with text that is no caption: a detection task's labels, or noise); a Qwen-VL
    prompt is the text of one user message, so one holding the chat's control tokens
    (`<|im_end|>`, `<|image_pad|>`: QWEN_CONTROL_TOKEN) would end that message or add image slots
    (every image then failed: "The total number of <|image_pad|> tokens ...")."""
    prompt = options.prompt
    if kind != "florence2" and prompt is not None and (token := QWEN_CONTROL_TOKEN.search(prompt)):
        raise ConfigError(
            [
                FieldProblem(
                    "prompt",
                    f"holds the model's control token {token.group()!r}: the prompt is the text of one "
                    "user message (the chat template adds the image and the roles)",
                )
            ]
        )
    if kind == "florence2" and options.prompt is not None and options.prompt not in FLORENCE_CAPTION_TASKS:
        raise ConfigError(
            [
                FieldProblem(
                    "prompt",
                    f"a Florence-2 captioner takes one of {', '.join(FLORENCE_CAPTION_TASKS)} (a task, not "
                    f"free text), not {options.prompt[:80]!r}; leave it empty for {FLORENCE_DEFAULT_TASK}",
                )
            ]
        )
