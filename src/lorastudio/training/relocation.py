"""Resuming a run whose folders moved (a studio home moved or renamed, a dataset or model put on
another disk). A run records its base and its datasets as it read them: a name under models/ or
datasets/ as its absolute path (the job service's canonical form). A resume may name them anew
(base_model / base_config: identity_base.RELOCATABLE, their content compared; data_dir and the
datasets entries' paths: never part of the identity, the dataset's content is); a recorded path
with nothing there any more is refused up front, saying so. No torch.
"""

from __future__ import annotations

import os
from collections.abc import Mapping
from typing import Any

from lorastudio.errors import FieldProblem

_HOW = 'CLI: --set {key}=...; API: {{"settings": {{"{key}": ...}}}}'


def moved_problems(config: Mapping[str, Any]) -> list[FieldProblem]:
    """The problems of a resumed run's settings (`config`: the checkpoint's with the resume's)
    whose base (base_model, base_config) or dataset (data_dir, each datasets entry's path) is an
    absolute path with nothing there any more, each naming how to resume on it where it is now;
    [] otherwise (the resolutions' own answers stand)."""
    problems = []
    for key, what in (("base_model", "a name under models/"), ("base_config", "a name under models/")):
        if _gone(config.get(key)):
            problems.append(
                _problem(key, str(config[key]), f"{key} set to where it is now, {what} or a path")
            )
    if _gone(config.get("data_dir")):
        where = str(config["data_dir"])
        problems.append(
            _problem("data_dir", where, "data_dir set to where it is now, a dataset name or a path")
        )
    entries = config.get("datasets")
    for n, entry in enumerate(entries if isinstance(entries, list) else []):
        if isinstance(entry, Mapping) and _gone(entry.get("path")):
            problems.append(
                _problem(
                    f"datasets.{n}.path",
                    str(entry["path"]),
                    "datasets given again, each entry's path where it is now (its other settings as they were)",
                    key="datasets",
                )
            )
    return problems


def _gone(where: object) -> bool:
    return isinstance(where, str) and os.path.isabs(where) and not os.path.lexists(where)


def _problem(field: str, where: str, fix: str, key: str | None = None) -> FieldProblem:
    how = _HOW.format(key=key or field)
    return FieldProblem(
        field,
        f"nothing at {where} any more (no folder or file there); if it moved (or the studio home was "
        f"moved or renamed), resume with {fix} ({how}): its content is compared with the checkpoint's",
    )
