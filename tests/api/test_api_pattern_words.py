"""A value refused by a field's pattern is answered in words, never the regex (RELIABILITY 2270):
the Train form showed "String should match pattern '^[A-Za-z0-9][A-Za-z0-9._-]*$'" beside
Output name, and the push form the same beside the hub repo."""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any

import pytest
from fastapi.testclient import TestClient

from live_server import LOOPBACK
from lorastudio.api.app import create_app
from lorastudio.config import TrainConfig, parse_train_config
from lorastudio.errors import ConfigError
from lorastudio.pattern_words import PATTERN_WORDS
from lorastudio.settings import Settings


def _patterns(node: Any) -> Iterator[str]:
    """Every `pattern` string of a JSON schema, however deep."""
    if isinstance(node, dict):
        for key, value in node.items():
            if key == "pattern" and isinstance(value, str):
                yield value
            else:
                yield from _patterns(value)
    elif isinstance(node, list):
        for value in node:
            yield from _patterns(value)


def test_every_pattern_of_the_api_and_the_config_has_words(settings: Settings) -> None:
    schema = create_app(settings).openapi()
    found = set(_patterns(schema)) | set(_patterns(TrainConfig.model_json_schema()))
    assert r"^[A-Za-z0-9][A-Za-z0-9._-]*$" in found and r"^[0-9a-f]{64}$" in found  # the walk reaches both
    assert sorted(found - set(PATTERN_WORDS)) == []


def test_a_refused_name_or_repo_is_told_in_words(settings: Settings) -> None:
    config = {"family": "flux", "base_model": "tiny", "data_dir": "d", "output_name": "../x"}
    config["preservation"] = {"class_word": "  "}
    with pytest.raises(ConfigError) as refused:  # what the Train form's Check and Start are answered
        parse_train_config(config)
    problems = {p.field: p.message for p in refused.value.problems}
    assert problems["output_name"] == PATTERN_WORDS[r"^[A-Za-z0-9][A-Za-z0-9._-]*$"], problems
    assert problems["preservation.class_word"] == "must not be blank", problems
    with TestClient(create_app(settings), base_url=LOOPBACK) as client:
        pushed = client.post("/api/loras/any/push", json={"repo": "my repo"})
    assert pushed.status_code == 422, pushed.text
    (item,) = pushed.json()["detail"]
    assert item["loc"] == ["body", "repo"] and item["msg"].startswith("a hub repo id, owner/name"), item
    assert item["ctx"]["pattern"] == r"^[A-Za-z0-9][\w.-]*/[\w.-]+$"  # the regex still there for a program
    assert "should match pattern" not in str(problems) + pushed.text
