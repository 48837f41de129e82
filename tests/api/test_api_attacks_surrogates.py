"""Lone surrogates (JSON's "\\udcff", which Python decodes to a str no UTF-8 encoder takes):
every answer is a 4xx with a JSON body, never a 500. FastAPI's 422 echoed the input and
Starlette's UTF-8 encode of it raised; safe_component encoded a name before checking it."""

from __future__ import annotations

import json

import pytest
from fastapi.testclient import TestClient

from lorastudio.data.paths import safe_component
from lorastudio.errors import ConfigError

JSON = {"content-type": "application/json"}


@pytest.mark.parametrize(
    ("method", "path", "body"),
    [
        ("post", "/api/train/preflight", b'{"family": "flux", "data_dir": "a\\udcff"}'),
        (
            "post",
            "/api/train/preflight",
            b'{"config": {"family": "flux", "datasets": [{"path": "\\ud800"}]}}',
        ),
        ("put", "/api/datasets/x/captions/a.png", b'{"text": "a\\udcff"}'),
        ("post", "/api/datasets/x/captions", b'{"find": "\\udfff", "zzz": 1}'),
    ],
)
def test_lone_surrogates_get_a_4xx_with_a_json_body(
    client: TestClient, method: str, path: str, body: bytes
) -> None:
    answer = client.request(method.upper(), path, content=body, headers=JSON)
    assert 400 <= answer.status_code < 500, answer.text
    assert json.loads(answer.content)  # valid JSON: the surrogate is an escape


def test_safe_component_refuses_a_lone_surrogate_by_field() -> None:
    with pytest.raises(ConfigError) as err:
        safe_component("a\udcff", field="output_name")
    assert err.value.problems[0].field == "output_name" and "UTF-8" in err.value.problems[0].message
