"""Which registered family a local pipeline folder is (generate/pipeline.py, `lorastudio generate`)."""

from __future__ import annotations

from pathlib import Path

from lorastudio import json_read
from lorastudio.user_paths import is_file


def detect_family(base_model: str) -> str | None:
    """The registered family whose accepted pipelines include the `_class_name` of a local
    pipeline folder's model_index.json; None for a hub id or an unknown class."""
    from lorastudio import families

    index = Path(base_model).expanduser() / "model_index.json"
    if not is_file(index):  # user_paths: never raises (a path over the file system's limits)
        return None
    try:
        class_name = json_read.loads(index.read_text(encoding="utf-8")).get("_class_name")
    except (OSError, ValueError):
        return None
    for family in families.all_families():
        if class_name in family.spec.accepted_pipelines:
            return family.spec.name
    return None
