"""The browser tests' modules import without the playwright package: there (scripts/check_deps.sh's
venvs, an install without the dev extra's playwright) their tests skip, as tests/e2e/conftest.py
says, and the default suite has no collection error."""

from __future__ import annotations

import importlib
import sys
from pathlib import Path

import pytest

E2E = Path(__file__).resolve().parents[1] / "e2e"


def test_every_browser_test_module_imports_without_playwright(monkeypatch: pytest.MonkeyPatch) -> None:
    """Before: tests/e2e/test_ui_a11y.py imported playwright's TimeoutError at its top, so the whole
    default suite at the dependency floors (no playwright) ended in "ERROR collecting
    tests/e2e/test_ui_a11y.py: No module named 'playwright'" (RELIABILITY 1402)."""
    for name in [n for n in sys.modules if n == "playwright" or n.startswith("playwright.")]:
        monkeypatch.setitem(sys.modules, name, None)  # an import of it raises ImportError
    monkeypatch.setitem(sys.modules, "playwright", None)
    for folder in (E2E.parent, E2E):  # as pytest puts them on the path (`from ui_uploads import ...`)
        monkeypatch.syspath_prepend(str(folder))
    modules = sorted(p.stem for p in E2E.glob("*.py") if p.stem not in ("__init__", "conftest"))
    assert "test_ui_a11y" in modules
    for stem in modules:
        name = f"tests.e2e.{stem}"
        monkeypatch.delitem(sys.modules, name, raising=False)  # imported afresh, restored after
        importlib.import_module(name)
