"""No `assert` statement in src/: `python -O` strips them, so an assert that guards control flow
(a None that "cannot" be) silently stops guarding. Each such guarantee is a type (an argument
that is not Optional) or a specific exception."""

from __future__ import annotations

import ast
from pathlib import Path

import lorastudio

SRC = Path(lorastudio.__file__).parent


def test_no_assert_statements_in_src() -> None:
    found = []
    for path in sorted(SRC.rglob("*.py")):
        tree = ast.parse(path.read_text(encoding="utf-8"), filename=str(path))
        found += [
            f"{path.relative_to(SRC)}:{node.lineno}"
            for node in ast.walk(tree)
            if isinstance(node, ast.Assert)
        ]
    assert found == [], found
