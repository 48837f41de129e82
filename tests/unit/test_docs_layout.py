"""CONTRIBUTING.md's layout names every module of src/lorastudio, and no module that is gone
(read, never run).

A module is named by its stem as a word of the layout (`capped_read.py`, `cache_io`,
`schemas_{runs,files}` spelt with braces counts for each name inside them): the layout is prose,
so the check is that a reader finds the name, with the description beside it. A name the layout
spells as a file (`durable.py`, `jobs/caption_gpu.py`) must be a module there is.
"""

from __future__ import annotations

import re
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
PACKAGE = ROOT / "src" / "lorastudio"


def _layout() -> str:
    text = (ROOT / "CONTRIBUTING.md").read_text(encoding="utf-8")
    body = text.split("## Layout (the architecture)", 1)[1].split("\n## ", 1)[0]
    # `config_fields_{source,data}.py` names config_fields_source and config_fields_data
    return re.sub(
        r"(\w+)\{([\w,]+)\}",
        lambda m: " ".join(m.group(1) + part for part in m.group(2).split(",")),
        body,
    )


def _modules() -> list[Path]:
    return sorted(
        path
        for path in PACKAGE.rglob("*.py")
        if path.stem != "__init__" and "web_dist" not in path.relative_to(PACKAGE).parts
    )


def test_the_layout_names_every_module():
    words = set(re.findall(r"\w+", _layout()))
    unnamed = [str(path.relative_to(PACKAGE)) for path in _modules() if path.stem not in words]
    assert not unnamed, f"CONTRIBUTING.md's layout does not name (add a one-line description): {unnamed}"


def test_every_module_file_the_layout_names_exists():
    layout = _layout()
    stems = {path.stem for path in _modules()}
    named = set(re.findall(r"(?<![\w/.-])(\w+)\.py\b", layout))
    # a file of the repository outside the package (lorastudio_build.py, old_home*.py's tests)
    outside = {path.stem for path in ROOT.glob("*/**/*.py") if "node_modules" not in path.parts}
    gone = sorted(name for name in named if name not in stems and name not in outside)
    assert not gone, f"CONTRIBUTING.md's layout names modules that are not there: {gone}"
    assert len(named) > 20  # the pattern finds the layout's names
