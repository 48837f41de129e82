"""The peers' values in lorastudio's terms, shared by every peer module (no torch).

Each converter takes the peer's raw value (YAML reads `1e-4` as text: numbers may come as
strings) and returns ours, or raises `Skip` with the reason it is not carried. `family_of`
names the family of a model name or path by its words (hub ids, file names); it says None when
unsure, and the import then asks for `--family` rather than guessing (no silent fallback).
"""

from __future__ import annotations

import math
import re
from pathlib import PurePath
from typing import Any

from lorastudio.config_import.report import NOT_NEEDED, NOT_SUPPORTED


class Skip(Exception):  # noqa: N818 (a flow signal: the value is not carried, with its reason)
    """A peer value not carried; `str(self)` is the reason shown in the report."""


def number(value: Any) -> float:
    """A finite number (int, float, or its text). Raises Skip."""
    if isinstance(value, bool):
        raise Skip(f"{value!r} is not a number")
    if isinstance(value, str):
        try:
            value = float(value.strip())
        except ValueError:
            raise Skip(f"{value!r} is not a number") from None
    if isinstance(value, int | float) and math.isfinite(value):
        return value
    raise Skip(f"{value!r} is not a finite number")


def integer(value: Any) -> int:
    """A whole number (3, 3.0, "3"). Raises Skip."""
    got = number(value)
    if got != int(got):
        raise Skip(f"{value!r} is not a whole number")
    return int(got)


def flag(value: Any) -> bool:
    """A boolean (true/false, "true"/"false", "True"). Raises Skip."""
    if isinstance(value, bool):
        return value
    if isinstance(value, str) and value.strip().lower() in ("true", "false"):
        return value.strip().lower() == "true"
    raise Skip(f"{value!r} is not true or false")


def is_off(value: Any) -> bool:
    """Whether `value` is a peer's "off": false, 0, or their text ("0", "false")."""
    if isinstance(value, bool):
        return not value
    if isinstance(value, int | float):
        return value == 0
    return isinstance(value, str) and value.strip().lower() in ("0", "0.0", "false")


def text(value: Any) -> str:
    """Text as it is. Raises Skip for another value."""
    if isinstance(value, str):
        return value
    raise Skip(f"{value!r} is not text")


_OPTIMIZERS = {  # the peer's name, letters and digits only, lower case -> ours, how it differs
    "adamw": ("adamw", ""),
    "adamwtorch": ("adamw", ""),
    "adamwfused": ("adamw", ""),
    "adam": ("adamw", "Adam with decoupled weight decay (AdamW; weight_decay 0 for plain Adam)"),
    "adamwbf16": ("adamw", "torch's AdamW with fp32 state, not SimpleTuner's bf16 state"),
    "adamw8bit": ("adamw8bit", ""),
    "adamw8bitbnb": ("adamw8bit", ""),
    "bnbadamw8bit": ("adamw8bit", ""),
    "pagedadamw8bit": ("adamw8bit", "not paged (its state stays on the GPU)"),
    "lion8bit": ("lion8bit", ""),
    "pagedlion8bit": ("lion8bit", "not paged (its state stays on the GPU)"),
    "lion": ("lion8bit", "Lion with 8-bit state (bitsandbytes); 32-bit Lion is not offered"),
    "prodigy": ("prodigy", ""),
    "adafactor": ("adafactor", ""),
}


def optimizer(value: Any) -> tuple[str, str]:
    """(our optimizer, how it differs or ""). Raises Skip for one not offered here."""
    name = re.sub(r"[^a-z0-9]", "", text(value).lower()).removeprefix("torch")
    if name in _OPTIMIZERS:
        return _OPTIMIZERS[name]
    raise Skip(f"{NOT_SUPPORTED}: lorastudio offers adamw, adamw8bit, lion8bit, prodigy and adafactor")


_SCHEDULERS = {
    "constant": "constant",
    "constantwithwarmup": "constant_with_warmup",
    "linear": "linear",
    "cosine": "cosine",
    "cosinewithrestarts": "cosine_with_restarts",
    "cosinewithhardrestarts": "cosine_with_restarts",
    "polynomial": "polynomial",
}


def scheduler(value: Any) -> str:
    """Our lr_scheduler for the peer's name. Raises Skip."""
    name = re.sub(r"[^a-z0-9]", "", text(value).lower())
    if name in _SCHEDULERS:
        return _SCHEDULERS[name]
    raise Skip(
        f"{NOT_SUPPORTED}: lorastudio's schedules are constant, constant_with_warmup, linear, cosine,"
        " cosine_with_restarts and polynomial"
    )


def save_dtype(value: Any) -> str:
    """Our save_dtype for the peer's ("float16", "fp16", "bf16", "FLOAT_32", "float"). Raises Skip."""
    name = re.sub(r"[^a-z0-9]", "", text(value).lower())
    found = {"float16": "fp16", "fp16": "fp16", "half": "fp16", "bf16": "bf16", "bfloat16": "bf16",
             "float32": "fp32", "fp32": "fp32", "float": "fp32", "full": "fp32"}.get(name)  # fmt: skip
    if found is None:
        raise Skip(f"{NOT_SUPPORTED}: LoRA files are written in fp32, bf16 or fp16")
    return found


def compute_precision(value: Any) -> tuple[str | None, str]:
    """(our base_precision or None when auto does it, the note) for the peer's training dtype
    ("bf16", "fp16", "no", "float32"). Raises Skip."""
    name = re.sub(r"[^a-z0-9]", "", text(value).lower())
    if name in ("bf16", "bfloat16"):
        return None, f"{NOT_NEEDED}: base_precision auto computes in bf16 on a GPU that has it"
    if name in ("fp16", "float16", "half"):
        return "fp16", ""
    if name in ("no", "fp32", "float32", "float", "full"):
        return "fp32", ""
    raise Skip(f"{NOT_SUPPORTED}: {value!r}")


EIGHT_BIT = (
    "the frozen base in 8 bits: here int8 weights with bf16 compute (the same memory; lorastudio's fp8 is"
    " fp8 matmuls on bf16 weights, which saves no memory)"
)


def quantised(qtype: Any) -> tuple[str, str]:
    """(our base_precision, how it differs) for a peer's weight quantisation name ("qfloat8",
    "float8", "fp8", "qint8", "uint4", "nf4", "uint3|adapter"). Raises Skip."""
    name = text(qtype).split("|", 1)[0].strip().lower()
    if name in ("qint8", "int8", "uint8"):
        return "int8", ""
    if name in ("qfloat8", "float8", "fp8", "float8_e4m3fn", "fp8_e4m3fn", "qfloat8_e4m3fn"):
        return "int8", EIGHT_BIT
    if name == "nf4":
        return "nf4", ""
    if name in ("qint4", "uint4", "int4", "uint3", "uint2", "4bit"):
        return "nf4", "the frozen base as 4-bit NormalFloat weights with bf16 compute (QLoRA)"
    raise Skip(f"{NOT_SUPPORTED}: the base is bf16 / fp16 / fp32, fp8 compute, int8 or nf4 here")


_FAMILY_WORDS = [  # (pattern over the lower-cased name, family): first match wins
    (r"kontext", "flux-kontext"),
    (r"flux[._-]?1[._-]?krea|flux[._-]?krea", "flux"),
    (r"klein", "flux2-klein"),
    (r"flux[._-]?2", "flux2"),
    (r"chroma", "chroma"),
    (r"krea[._-]?2", "krea2"),
    (r"qwen[._-]?image[._-]?edit", "qwen-image-edit"),
    (r"qwen[._-]?image", "qwen-image"),
    (r"z[._-]?image", "z-image"),
    (r"flux", "flux"),
    (
        r"sd[._-]?xl|stable[._-]diffusion[._-]xl|xl[._-]base|illustrious|pony|noobai|animagine|juggernaut[._-]?xl",
        "sdxl",
    ),
]


def family_of(name: Any) -> str | None:
    """The lorastudio family a model name or path names by its words, or None when none does."""
    if not isinstance(name, str):
        return None
    low = PurePath(name.replace("\\", "/")).as_posix().lower()
    for pattern, family in _FAMILY_WORDS:
        if re.search(pattern, low):
            return family
    return None


def is_windows_path(value: str) -> bool:
    """Whether `value` is a Windows path ("C:\\x", "C:/x", "a\\b"): another machine's, here."""
    return bool(re.match(r"^[A-Za-z]:[\\/]", value)) or "\\" in value


def has_dotdot(value: str) -> bool:
    """Whether the path `value` (either slash) has a '..' part."""
    return ".." in re.split(r"[\\/]", value)
