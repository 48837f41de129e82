"""The enqueue-time check that what a validated run reads is still there.

`refuse_if_gone` runs under the job service's locks, after jobs/validation.py's checks passed: a
model, dataset folder, assistant_lora or init_lora file deleted or renamed between those checks
and the enqueue is a ConfigError naming the setting, so nothing is queued to fail at its worker's
start. It only reads (stat calls), no torch.
"""

from __future__ import annotations

import os
from pathlib import Path

from lorastudio.config import TrainConfig
from lorastudio.errors import ConfigError, FieldProblem, NotFound, PathOutsideRoot
from lorastudio.settings import Settings
from lorastudio.training.adapters.init_lora_rules import init_lora_path


def refuse_if_gone(
    config: TrainConfig, folders: list[tuple[str, Path]], settings: Settings | None = None
) -> None:
    """Raise ConfigError when the local base model (or a single file's base_config folder), a
    folder of `folders` (the run's read folders with the setting naming each:
    config_datasets.read_folder_fields), a local assistant_lora file or, given the `settings` (a
    fresh run: a resume reads its checkpoint instead), the init_lora file that `config` was
    validated with is gone: a model delete, a dataset's rename or delete, or a run's delete,
    landed after the run's checks.
    JobService._enqueue calls this under the locks those take (enqueues_held; the datasets'
    read claim, just taken), so nothing is queued to fail at its worker's start."""
    for field in ("base_model", "base_config"):
        value = getattr(config, field, None)
        if isinstance(value, str) and os.path.isabs(value) and not os.path.lexists(value):
            raise ConfigError(
                [FieldProblem(field, f"{value} is gone: the model was deleted after the run's checks")]
            )
    helper = config.assistant_lora  # a local file (else a hub file's name): read by every session
    if helper is not None and os.path.isabs(helper) and not os.path.isfile(helper):
        raise ConfigError(
            [
                FieldProblem(
                    "assistant_lora", f"{helper} is gone: it was deleted or moved after the run's checks"
                )
            ]
        )
    if settings is not None and config.init_lora is not None:
        try:
            init_lora_path(config.init_lora, settings)
        except (NotFound, ConfigError, PathOutsideRoot) as err:
            raise ConfigError(
                [FieldProblem("init_lora", f"{err}: it was deleted or moved after the run's checks")]
            ) from err
    for field, folder in folders:
        if not folder.is_dir():
            raise ConfigError(
                [
                    FieldProblem(
                        field,
                        f"dataset folder {folder} is gone: it was renamed or deleted after the run's checks",
                    )
                ]
            )
