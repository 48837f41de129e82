"""TrainConfig: the one strict training configuration shared by the CLI, the API and the jobs.

Rules:
- unknown keys are errors, and every problem is reported at once (`parse_train_config`);
- a field left at None means "the family's default" and is filled by `resolve_train_config`;
- a family-specific field (see `FAMILY_SPECIFIC_FIELDS`) that the user sets explicitly for a
  family that cannot honour it is refused, never silently ignored.
This module assembles the schema from its field groups (config_fields_*.py, each group's validators
beside its fields); parsing and resolving are in config_resolve.py (importable from here).
"""

from __future__ import annotations

from typing import Any

from pydantic import ConfigDict

from lorastudio.config_fields_data import DataFields, LatentCacheMode
from lorastudio.config_fields_objective import HuberSchedule, LossName, ObjectiveFields, TimestepSampling
from lorastudio.config_fields_runtime import (
    AttentionBackend,
    BasePrecision,
    CheckpointingMode,
    CompileMode,
    FuseProjections,
    LoraFormat,
    RuntimeFields,
    SaveDtype,
)
from lorastudio.config_fields_source import (
    REVISION,
    SourceFields,
    local_revision_message,
    local_revision_problem,
    revision_problem,
)
from lorastudio.config_fields_training import AdapterName, LrScheduler, OptimizerName, TrainingFields
from lorastudio.config_samples import MAX_SAMPLE_PROMPT_CHARS, MAX_SAMPLE_PROMPTS

__all__ = [
    "FAMILY_SPECIFIC_FIELDS",
    "MAX_SAMPLE_PROMPTS",
    "MAX_SAMPLE_PROMPT_CHARS",
    "REVISION",
    "AdapterName",
    "AttentionBackend",
    "BasePrecision",
    "CheckpointingMode",
    "CompileMode",
    "FuseProjections",
    "HuberSchedule",
    "LatentCacheMode",
    "LoraFormat",
    "LossName",
    "LrScheduler",
    "OptimizerName",
    "SaveDtype",
    "TimestepSampling",
    "TrainConfig",
    "revision_problem",
    "local_revision_message",
    "local_revision_problem",
]

# Fields that only some families honour. A family lists the ones it supports in
# FamilySpec.supports; setting one explicitly for another family is a ConfigError.
FAMILY_SPECIFIC_FIELDS: tuple[str, ...] = (
    "snr_gamma",
    "noise_offset",
    "timestep_sampling",
    "logit_mean",
    "logit_std",
    "flow_shift",
    "guidance",
    "max_sequence_length",
    "train_text_encoder",
    "text_encoder_lr",
    "v_prediction",
)


# pydantic orders the fields of a class with several bases from the LAST base to the first (it
# walks the MRO backwards), so the groups are listed here in reverse: the fields come out source,
# data, training, runtime, objective, the order of the form, the schema and the CLI help.
class TrainConfig(ObjectiveFields, RuntimeFields, TrainingFields, DataFields, SourceFields):
    """Everything that defines one training run. See the field descriptions for units/defaults."""

    model_config = ConfigDict(extra="forbid", validate_assignment=True, allow_inf_nan=False)


# The parse / resolve functions live in config_resolve.py (this module is the schema); callers
# import them from here: they are looked up there on first use (PEP 562), which keeps the import
# order free of cycles (config_resolve imports TrainConfig from here).
_RESOLVE_NAMES = frozenset({"family_problems", "parse_train_config", "resolve_train_config"})


def __getattr__(name: str) -> Any:
    if name in _RESOLVE_NAMES:
        from lorastudio import config_resolve

        return getattr(config_resolve, name)
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
