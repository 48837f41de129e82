"""The one problem the process's settings give for an environment variable's value: the variable
set, the cached settings read again (and cleared after, so no other test sees them)."""

from __future__ import annotations

import pytest

from lorastudio.errors import ConfigError, FieldProblem
from lorastudio.settings import get_settings


def refused_setting(monkeypatch: pytest.MonkeyPatch, variable: str, value: str) -> FieldProblem:
    """The single FieldProblem of get_settings() with `variable` set to `value`; fails the test
    unless ConfigError is raised with exactly one problem."""
    monkeypatch.setenv(variable, value)
    get_settings.cache_clear()
    try:
        with pytest.raises(ConfigError) as refused:
            get_settings()
    finally:
        get_settings.cache_clear()
    (problem,) = refused.value.problems
    return problem
