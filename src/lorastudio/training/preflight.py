"""Everything a run checks before it loads a model: the config (resolved against the family),
the output folder, the precision on this host, the dataset
and the base model source. Nothing here writes a file.

Order of errors: ConfigError (every config problem at once), then DatasetError, then
ModelSourceError.
"""

from __future__ import annotations

import json
import re
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING

import torch

from lorastudio.config import TrainConfig, family_problems, resolve_train_config
from lorastudio.errors import ConfigError, FieldProblem, ModelSourceError
from lorastudio.training.precision import pick_device, pick_dtype, precision_problems

if TYPE_CHECKING:
    from lorastudio.data import DatasetScan
    from lorastudio.families.base import Family
    from lorastudio.settings import Settings

_HUB_ID = re.compile(r"^[A-Za-z0-9][A-Za-z0-9._-]*/[A-Za-z0-9][A-Za-z0-9._-]*$")


@dataclass(frozen=True)
class PreparedRun:
    """A run that passed every check: resolved config, family, scanned dataset, where it writes."""

    cfg: TrainConfig  # resolved: every family default filled
    family: Family
    scan: DatasetScan
    run_dir: Path  # outputs/<output_name> (does not exist yet)
    device: torch.device
    dtype: torch.dtype


def model_source_problems(base_model: str, revision: str | None, family: Family) -> None:
    """Check a local pipeline folder (model_index.json of an accepted pipeline class, every listed
    component folder present) or the shape of a hub id. Raises ModelSourceError or ConfigError."""
    path = Path(base_model).expanduser()
    if not path.exists():
        if _HUB_ID.match(base_model) and not base_model.startswith((".", "~")):
            return  # a hub id: the loaders fetch (or find it in the cache) and report failures
        raise ModelSourceError(
            f"base model {base_model!r} is neither an existing folder nor a hub id (owner/name)"
        )
    index = path / "model_index.json"
    if not index.is_file():
        raise ModelSourceError(f"{path} is not a diffusers pipeline folder (no model_index.json)")
    try:
        meta = json.loads(index.read_text(encoding="utf-8"))
    except (OSError, ValueError) as err:
        raise ModelSourceError(f"cannot read {index}: {err}") from err
    class_name = meta.get("_class_name")
    spec = family.spec
    if class_name not in spec.accepted_pipelines:
        raise ModelSourceError(
            f"{path} holds a {class_name} pipeline, not {spec.title} "
            f"(family {spec.name!r} trains {', '.join(spec.accepted_pipelines)})"
        )
    listed = [n for n, v in meta.items() if not n.startswith("_") and isinstance(v, list) and v and v[0]]
    missing = [name for name in listed if not (path / name).is_dir()]
    if missing:
        raise ModelSourceError(f"{path} is incomplete: missing component folder(s) {', '.join(missing)}")
    if revision is not None:
        raise ConfigError([FieldProblem("revision", "only applies to hub ids, not to a local folder")])


def preflight(cfg: TrainConfig, settings: Settings, device: str | None) -> PreparedRun:
    """Validate a run without loading or writing anything.

    Returns the PreparedRun. Raises ConfigError (config, output folder and precision
    problems, all at once), UnknownFamily via ConfigError, DatasetError, PathOutsideRoot,
    ModelSourceError.
    """
    from lorastudio import families
    from lorastudio.data import resolve_dataset_dir, scan_dataset

    problems = family_problems(cfg)  # every config problem, before any default is filled
    dev = pick_device(device)
    problems += precision_problems(cfg.base_precision, dev)
    if cfg.output_name is not None:
        taken = settings.outputs_dir / cfg.output_name
        if taken.exists() or taken.is_symlink():
            problems.append(
                FieldProblem("output_name", f"{taken} already exists; choose another output_name")
            )
    if problems:
        raise ConfigError(problems)
    resolved = resolve_train_config(cfg)
    family = families.get(resolved.family)
    run_dir = settings.outputs_dir / str(resolved.output_name)
    root = resolve_dataset_dir(resolved.data_dir, settings.datasets_dir, allow_outside_root=True)
    scan = scan_dataset(
        root,
        resolution=int(resolved.resolution),
        multiple=family.spec.resolution_multiple,
        aspect_buckets=resolved.aspect_buckets,
        trigger_word=resolved.trigger_word,
        default_caption=resolved.default_caption,
        max_pixels=settings.max_image_pixels,
    )
    model_source_problems(resolved.base_model, resolved.revision, family)
    return PreparedRun(resolved, family, scan, run_dir, dev, pick_dtype(resolved.base_precision, dev))
