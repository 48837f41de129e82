"""Resuming a run whose folders moved (a studio home moved or renamed, a dataset or model put on
another disk). A run records its base and its datasets as it read them: a name under models/ or
datasets/ as its absolute path (the job service's canonical form). A resume may name them anew
(base_model / base_config: identity_base.RELOCATABLE, their content compared; data_dir and the
datasets entries' paths: never part of the identity, the dataset's content is); a recorded path
with nothing there any more is refused up front, saying so. No torch.
"""

from __future__ import annotations

import os
import re
from collections.abc import Mapping
from typing import Any

from lorastudio.errors import ConfigError, FieldProblem

_HOW = 'CLI: --set {key}=...; API: {{"settings": {{"{key}": ...}}}}'
_ENTRY_PATH = re.compile(r"^datasets\.(\d+)\.path$")


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
                    f"datasets.{n}.path set to where it is now, a dataset name or a path",
                )
            )
    return problems


def _gone(where: object) -> bool:
    return isinstance(where, str) and os.path.isabs(where) and not os.path.lexists(where)


def with_entry_paths(recorded: Mapping[str, Any], overrides: Mapping[str, Any]) -> dict[str, Any]:
    """`overrides` of a resume with each "datasets.N.path" key (where a multi-dataset run's entry N
    is now: the refusal above names it so) folded into a `datasets` list: the run's recorded one
    (`recorded`: the checkpoint's config) with those paths replaced, its other settings as they
    were. Raises ConfigError naming each such key that cannot be taken (the run has no entry N,
    not a path, or `datasets` given whole too)."""
    keyed = {k: v for k, v in overrides.items() if _ENTRY_PATH.match(k)}
    if not keyed:
        return dict(overrides)
    entries = recorded.get("datasets")
    count = len(entries) if isinstance(entries, list) else 0
    problems = []
    for key, value in sorted(keyed.items()):
        index = int(_ENTRY_PATH.match(key).group(1))  # type: ignore[union-attr]
        if "datasets" in overrides:
            problems.append(
                FieldProblem(key, "not with datasets given whole: name each entry's path in one of them")
            )
        elif not count:
            problems.append(
                FieldProblem(key, "the run has no datasets list: name its dataset's folder as data_dir")
            )
        elif index >= count:
            problems.append(
                FieldProblem(
                    key, f"the run has {count} datasets entries (datasets.0 to datasets.{count - 1})"
                )
            )
        elif not isinstance(value, str) or not value.strip():
            problems.append(FieldProblem(key, "a dataset name or a folder path (text)"))
    if problems:
        raise ConfigError(problems)
    listed = [dict(e) if isinstance(e, Mapping) else e for e in entries]  # type: ignore[union-attr]
    for key, value in keyed.items():
        listed[int(_ENTRY_PATH.match(key).group(1))]["path"] = value.strip()  # type: ignore[union-attr,index]
    rest = {k: v for k, v in overrides.items() if k not in keyed}
    return {**rest, "datasets": listed}


def _problem(
    field: str, where: str, fix: str, key: str | None = None, how: str | None = None
) -> FieldProblem:
    how = how or _HOW.format(key=key or field)
    return FieldProblem(
        field,
        f"nothing at {where} any more (no folder or file there); if it moved (or the studio home was "
        f"moved or renamed), resume with {fix} ({how}): its content is compared with the checkpoint's",
    )
