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


def test_folder_and_file_names_that_are_not_utf8_are_listed_not_a_500(client: TestClient, settings) -> None:
    """A dataset folder or image whose name is latin-1 bytes (an old archive copied in): Python
    names it with lone surrogates, which the response's UTF-8 encode refused (500). The image is
    listed among the files not used, with its byte: a run's scan raised UnicodeEncodeError on it
    (RELIABILITY 2222)."""
    import os

    from PIL import Image

    folder = settings.datasets_dir / "set"
    folder.mkdir(parents=True)
    Image.new("RGB", (32, 32)).save(folder / "a.png")
    Image.new("RGB", (32, 32)).save(os.fsdecode(os.fsencode(folder) + b"/caf\xe9.png"))
    os.mkdir(os.fsencode(settings.datasets_dir) + b"/d\xe9j\xe0")
    listed = client.get("/api/datasets")
    assert listed.status_code == 200 and len(json.loads(listed.content)["datasets"]) == 2
    detail = client.get("/api/datasets/set")
    assert detail.status_code == 200
    shown = json.loads(detail.content)
    assert [f["file"] for f in shown["files"]] == ["a.png"]  # no run can train the other: not used (2222)
    assert {
        "file": "caf\udce9.png",
        "reason": "the name is not UTF-8 text (byte 0xe9 at 3): rename it to use the file",
    } in shown["dropped"]


@pytest.mark.parametrize("number", [b"1e999", b"-1e999", b"NaN", b"Infinity"])
@pytest.mark.parametrize(
    ("method", "path", "body"),
    [
        ("post", "/api/generate", b'{"family": "flux", "base_model": "x", "prompt": "p", "guidance": %s}'),
        ("post", "/api/datasets/x/caption", b'{"model": "a/b", "max_tokens": %s}'),
        ("post", "/api/datasets/x/captions", b'{"find": %s}'),
        ("post", "/api/train/stop", b'{"save": %s}'),
    ],
)
def test_non_finite_numbers_get_a_4xx_with_a_json_body(
    client: TestClient, method: str, path: str, body: bytes, number: bytes
) -> None:
    """Python's JSON parser reads `1e999` as inf and takes `NaN`; the 422 echoing it could not
    be encoded (allow_nan=False raised): a 500."""
    answer = client.request(method.upper(), path, content=body % number, headers=JSON)
    assert 400 <= answer.status_code < 500, answer.text
    assert json.loads(answer.content)  # standard JSON: the number is written as a string
