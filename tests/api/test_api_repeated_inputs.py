"""One value per single-valued input on every route (api/body_checks.py): a JSON body with a key
given twice, at any depth (an object in a list too), and a single-valued query parameter given
twice are refused with a 422 naming each repeat, before anything happens. Before, the last value
won silently (`"steps": 2, "steps": 2000` started a 2000-step run; `?strict=true&strict=false`
was a lenient upload). The CLI's config files and `--set` values refuse a repeated key the same
way (json_keys.py)."""

from __future__ import annotations

import io
import json
from pathlib import Path

import pytest
from fastapi.testclient import TestClient
from PIL import Image

from lorastudio.cli.config_file import apply_overrides, load_config_file
from lorastudio.errors import ConfigError
from lorastudio.json_keys import DuplicateKeys, loads_unique
from lorastudio.settings import Settings

JSON = {"content-type": "application/json"}


def _png() -> bytes:
    buf = io.BytesIO()
    Image.new("RGB", (32, 32), "red").save(buf, format="PNG")
    return buf.getvalue()


def _repeats(resp) -> list[tuple[list, str]]:  # type: ignore[no-untyped-def]
    assert resp.status_code == 422, resp.text
    return [(e["loc"], e["msg"]) for e in resp.json()["detail"]]


# (method, url, body text with repeats, the repeats' locations)
CASES = {
    "train-start-top": (
        "POST",
        "/api/train/start",
        '{"config": {"family": "flux"}, "queue": true, "queue": false}',
        [["body", "queue"]],
    ),
    "train-start-nested": (
        "POST",
        "/api/train/start",
        '{"config": {"family": "flux", "steps": 2, "steps": 2000}}',
        [["body", "config", "steps"]],
    ),
    "preflight-in-a-list-and-nested": (
        "POST",
        "/api/train/preflight",
        '{"config": {"datasets": [{"path": "a"}, {"path": "a", "repeats": 1, "repeats": 9}],'
        ' "preservation": {"class_word": "dog", "class_word": "cat"}}}',
        [["body", "config", "datasets", 1, "repeats"], ["body", "config", "preservation", "class_word"]],
    ),
    "generate": (
        "POST",
        "/api/generate",
        '{"family": "flux", "base_model": "m", "prompt": "a", "prompt": "b", "prompt": "c"}',
        [["body", "prompt"]],
    ),
    "generate-lora-list": (
        "POST",
        "/api/generate",
        '{"family": "flux", "base_model": "m", "prompt": "a", "loras": [{"name": "x", "scale": 1, "scale": 9}]}',
        [["body", "loras", 0, "scale"]],
    ),
    "caption-edit": (
        "PUT",
        "/api/datasets/set/captions/a.png",
        '{"caption": "kept", "caption": "replaced"}',
        [["body", "caption"]],
    ),
    "bulk-captions": (
        "POST",
        "/api/datasets/set/captions",
        '{"append": ", one", "dry_run": true, "dry_run": false}',
        [["body", "dry_run"]],
    ),
    "resume-settings": (
        "POST",
        "/api/runs/some-run/resume",
        '{"settings": {"steps": 10, "steps": 20}}',
        [["body", "settings", "steps"]],
    ),
    "model-fetch": (
        "POST",
        "/api/models/fetch",
        '{"repo_id": "a/b", "repo_id": "c/d"}',
        [["body", "repo_id"]],
    ),
}


@pytest.mark.parametrize("case", sorted(CASES))
def test_a_json_key_given_twice_is_refused_on_every_route(
    client: TestClient, settings: Settings, case: str
) -> None:
    method, url, text, locations = CASES[case]
    made = client.post("/api/datasets/set/files", files=[("files", ("a.png", _png()))])
    assert made.status_code == 201, made.text
    resp = client.request(method, url, content=text, headers=JSON)
    found = _repeats(resp)
    assert [loc for loc, _ in found] == locations
    assert all("is given twice in one object: give it once" in msg for _, msg in found)
    assert {e["type"] for e in resp.json()["detail"]} == {"repeated_key"}
    # nothing happened: no job, no caption written
    assert client.get("/api/train/status").json()["job"] is None
    assert not (settings.datasets_dir / "set" / "a.txt").exists()
    # the same bodies with each key once go past this check (answered by the route itself)
    once = client.request(method, url, content=json.dumps(json.loads(text)), headers=JSON)
    assert all(e.get("type") != "repeated_key" for e in once.json().get("detail", []) if isinstance(e, dict))


def test_a_caption_sent_with_each_key_once_is_written(client: TestClient, settings: Settings) -> None:
    """The check only refuses repeats: a body like the one refused above, each key once, works."""
    assert client.post("/api/datasets/set/files", files=[("files", ("a.png", _png()))]).status_code == 201
    resp = client.put("/api/datasets/set/captions/a.png", content='{"caption": "kept"}', headers=JSON)
    assert resp.status_code == 200, resp.text
    assert (settings.datasets_dir / "set" / "a.txt").read_text().strip() == "kept"


def test_a_json_body_declared_as_plus_json_is_checked_too(client: TestClient) -> None:
    """FastAPI parses `application/<x>+json` (and a charset parameter) as JSON: so does the check."""
    for content_type in ("application/vnd.api+json", "Application/JSON; charset=utf-8"):
        resp = client.post(
            "/api/train/preflight",
            content='{"config": {}, "config": {}}',
            headers={"content-type": content_type},
        )
        assert [loc for loc, _ in _repeats(resp)] == [["body", "config"]]


def test_a_single_valued_query_parameter_given_twice_is_refused(
    client: TestClient, settings: Settings
) -> None:
    """`strict` twice made a lenient upload (the last value won): now a 422, nothing stored."""
    files = [("files", ("a.png", _png())), ("files", ("b.exe", b"x"))]
    resp = client.post("/api/datasets/q/files?strict=true&strict=false", files=files)
    assert _repeats(resp) == [(["query", "strict"], "the parameter 'strict' takes one value: give it once")]
    assert not (settings.datasets_dir / "q").exists()
    resp = client.get("/api/train/status?since=1&since=2")
    assert [loc for loc, _ in _repeats(resp)] == [["query", "since"]]
    assert client.get("/api/train/status?since=1").status_code == 200


def test_loads_unique_names_every_repeat_however_deep() -> None:
    text = '{"a": [{"x": 1}, {"x": 1, "x": 2, "x": 3}], "b": {"c": {"d": 1, "d": 1}}, "b": {"c": {}}, "e": 1, "e": 2}'
    with pytest.raises(DuplicateKeys) as info:
        loads_unique(text)
    # the earlier "b" (holding a repeat of its own) is dropped: its repeat above it is named
    assert info.value.locations == [("b",), ("e",), ("a", 1, "x")]
    assert loads_unique('{"a": [{"x": 1}, {"x": 2}], "b": {"x": 3}}') == {
        "a": [{"x": 1}, {"x": 2}],
        "b": {"x": 3},
    }
    deep = "[" * 100_000 + "]" * 100_000
    with pytest.raises(RecursionError):
        loads_unique(deep)


def test_cli_config_and_set_values_refuse_a_repeat_naming_where(tmp_path: Path) -> None:
    nested = tmp_path / "nested.json"
    nested.write_text('{"datasets": [{"path": "a"}, {"path": "b", "repeats": 1, "repeats": 10}]}')
    with pytest.raises(ConfigError) as info:
        load_config_file(nested)
    assert "the key 'repeats' is given twice in one object (at datasets.1.repeats)" in str(info.value)
    with pytest.raises(ConfigError) as info:
        apply_overrides({}, ['datasets=[{"path": "a", "path": "b"}]', "steps=3"])
    assert [(p.field, p.message) for p in info.value.problems] == [
        ("--set datasets", "the key 'path' is given twice in one object (at 0.path)")
    ]
    deep = tmp_path / "deep.json"
    deep.write_text("[" * 100_000 + "]" * 100_000)
    with pytest.raises(ConfigError, match="cannot read"):  # was a RecursionError traceback
        load_config_file(deep)
