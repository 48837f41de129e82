"""The base of TrainConfig's field groups (config_fields_*.py): strict, and every float finite.

`_finite` lives here, on the common base, so that it runs before each group's own validators
(pydantic runs a base class's validators first), whatever group a field is in.
"""

from __future__ import annotations

import math
from typing import Any

from pydantic import BaseModel, ConfigDict, field_validator


class StrictFields(BaseModel):
    """A group of TrainConfig fields: unknown keys are errors, assignments are validated."""

    model_config = ConfigDict(extra="forbid", validate_assignment=True, allow_inf_nan=False)

    @field_validator("*", mode="after")
    @classmethod
    def _finite(cls, v: Any) -> Any:
        if isinstance(v, float) and not math.isfinite(v):
            raise ValueError("must be a finite number")
        return v
