"""The base of TrainConfig's field groups (config_fields_*.py): strict, and every float finite.

`_finite` lives here, on the common base, so that it runs before each group's own validators
(pydantic runs a base class's validators first), whatever group a field is in. NumbersNotBooleans
is the base of every config model (the groups, datasets entries, sample prompts, preservation).
"""

from __future__ import annotations

import math
from typing import Any, Literal, Union, get_args, get_origin

from pydantic import BaseModel, ConfigDict, ValidationInfo, field_validator


def _takes_bool(annotation: Any) -> bool:
    """Whether a field's type admits a boolean anywhere (bool, `bool | None`, Literal[True])."""
    if annotation is bool or annotation is Any:
        return True
    if get_origin(annotation) is Literal:
        return any(isinstance(arg, bool) for arg in get_args(annotation))
    if get_origin(annotation) is Union or get_args(annotation):
        return any(_takes_bool(arg) for arg in get_args(annotation))
    return False


class NumbersNotBooleans(BaseModel):
    """A boolean is refused where a setting takes no boolean: pydantic's lax mode read `steps =
    true` as 1 step and `learning_rate = true` as 1.0 (a TOML or JSON true, a `--set x=true`), in
    a list or a table too (`resolution = [true]`, `rank_pattern = {to_q = true}`). A string of
    digits is still a number ("5" from a form)."""

    @field_validator("*", mode="before")
    @classmethod
    def _not_a_boolean(cls, v: Any, info: ValidationInfo) -> Any:
        items = v if isinstance(v, list) else list(v.values()) if isinstance(v, dict) else [v]
        if any(isinstance(item, bool) for item in items):
            field = cls.model_fields.get(info.field_name or "")
            if field is not None and not _takes_bool(field.annotation):
                raise ValueError("takes no true/false here: give a number or text")
        return v


class StrictFields(NumbersNotBooleans):
    """A group of TrainConfig fields: unknown keys are errors, assignments are validated."""

    model_config = ConfigDict(extra="forbid", validate_assignment=True, allow_inf_nan=False)

    @field_validator("*", mode="after")
    @classmethod
    def _finite(cls, v: Any) -> Any:
        if isinstance(v, float) and not math.isfinite(v):
            raise ValueError("must be a finite number")
        return v
