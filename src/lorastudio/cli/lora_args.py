"""A LoRA named on the command line (`generate --lora PATH[:SCALE]`, `lora merge FILE:WEIGHT`):
its path and number read apart, and a path or a run's name resolved to its file. No torch."""

from __future__ import annotations

import math
from pathlib import Path

from lorastudio.errors import ConfigError, FieldProblem, NotFound
from lorastudio.user_paths import is_file, missing_file


def parse_lora_arg(
    value: str, field: str = "--lora", number: str = "scale", outputs: Path | None = None
) -> tuple[Path, float]:
    """'PATH' -> (PATH, 1.0); 'PATH:SCALE' -> (PATH, SCALE) when what follows the last ':' is a
    number (so paths containing ':' still work). Raises ConfigError for an empty path or a scale
    that is not finite (nan, inf: every pixel of the image would be NaN), naming `field` and
    the number as `number` (`lora merge`: its LORAS argument's weight); and for a tail that is
    no number where the whole value is no file but the part before the last ':' is one (or,
    with `outputs`, a run's name with a LoRA: `generate --lora`), naming the tail."""
    path, sep, tail = value.rpartition(":")
    if sep:
        try:
            scale = float(tail)
        except ValueError:
            if path and _names_a_lora(path, outputs) and not _names_a_lora(value, outputs):
                why = f"{value!r}: the {number} {tail!r} after the last ':' is not a number"
                raise ConfigError([FieldProblem(field, why)]) from None
            path, scale = value, 1.0
    else:
        path, scale = value, 1.0
    if not path:
        raise ConfigError([FieldProblem(field, f"{value!r}: expected PATH or PATH:{number.upper()}")])
    if not math.isfinite(scale):
        raise ConfigError([FieldProblem(field, f"{value!r}: the {number} must be a finite number")])
    return Path(path).expanduser(), scale


def _names_a_lora(value: str, outputs: Path | None) -> bool:
    """Whether `value` is an existing file, or (with `outputs`) a run's name with a LoRA."""
    if outputs is None:
        return is_file(Path(value).expanduser())
    try:
        resolve_lora_arg(Path(value).expanduser(), outputs)
    except NotFound:
        return False
    return True


def resolve_lora_arg(path: Path, outputs: Path) -> Path:
    """A --lora value as a file: an existing path as it is, else a run's name (its LoRA
    outputs/NAME/NAME.safetensors, as the UI and API name a LoRA). Raises NotFound naming both."""
    if is_file(path):  # user_paths: never raises (a path over the file system's limits)
        return path
    name = str(path)
    if "/" not in name and path.suffix != ".safetensors":
        from lorastudio.data import safe_component
        from lorastudio.errors import PathOutsideRoot

        try:
            safe_component(name, field="--lora")
            candidate = outputs / name / f"{name}.safetensors"
        except (ConfigError, PathOutsideRoot):
            candidate = None
        if candidate is not None and candidate.is_file():
            return candidate
        raise NotFound(f"{name}: no such file, and no run named {name!r} with a LoRA in {outputs}")
    raise NotFound(missing_file(path))
