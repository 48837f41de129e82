"""A studio home (or LORASTUDIO_CACHE_DIR) whose path is not UTF-8 text (a folder named in Latin-1
bytes: Python holds them as lone surrogates) is refused at the start of every command and
`serve`, naming the setting and the byte (RELIABILITY 1032). Before, `paths`, `runs list` and
`datasets import` worked there and `train` died in a pydantic traceback."""

from __future__ import annotations

import os
from pathlib import Path

import pytest
from tests.settings_refusal import refused_setting

from lorastudio.settings import Settings


@pytest.mark.parametrize("variable", ["LORASTUDIO_HOME", "LORASTUDIO_CACHE_DIR"])
def test_a_home_whose_path_is_not_utf8_is_refused_naming_the_byte(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, variable: str
) -> None:
    latin1 = Path(os.fsdecode(os.fsencode(str(tmp_path)) + b"/caf\xe9"))
    assert Settings(home=tmp_path / "café").home == tmp_path / "café"  # UTF-8, any script: kept
    problem = refused_setting(monkeypatch, variable, str(latin1))
    assert problem.field == variable
    assert problem.message.startswith(f"{tmp_path}/caf\\xe9 is not UTF-8 text (byte 0xe9 at "), problem
    assert "rename it" in problem.message
