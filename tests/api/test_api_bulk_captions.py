"""Bulk caption edit (issue 29 part 3): find / replace, prepend and append over every caption
of a dataset through the API and the CLI, .txt sidecars and metadata.jsonl rows alike (its other
fields kept), a dry run that writes nothing, all or nothing when a caption would end empty; the
CLI is refused while a server owns the studio home."""

from __future__ import annotations

import io
import json

import typer
from fastapi.testclient import TestClient
from PIL import Image
from typer.testing import CliRunner

from live_server import LOOPBACK
from lorastudio.api.app import create_app
from lorastudio.settings import Settings


def _png() -> bytes:
    buf = io.BytesIO()
    Image.new("RGB", (16, 16), "red").save(buf, format="PNG")
    return buf.getvalue()


def _dataset(client: TestClient) -> None:
    rows = [{"file_name": "c.png", "text": "a dog, sitting", "control_files": ["x.png"]}]
    files = [
        ("files", ("a.png", _png())), ("files", ("a.txt", b"a dog, running")),
        ("files", ("b.png", _png())), ("files", ("b.txt", b"a cat")),
        ("files", ("c.png", _png())), ("files", ("d.png", _png())),
        ("files", ("metadata.jsonl", "".join(json.dumps(r) + "\n" for r in rows).encode())),
    ]  # fmt: skip
    assert client.post("/api/datasets/pets/files", files=files).status_code == 201


def _captions(client: TestClient) -> dict[str, str | None]:
    return {i["file"]: i["caption"] for i in client.get("/api/datasets/pets").json()["files"]}


def test_find_replace_prepend_append_over_every_caption(client: TestClient, settings: Settings) -> None:
    _dataset(client)
    body = {"find": "dog", "replace": "sks dog", "prepend": "photo, ", "dry_run": True}
    dry = client.post("/api/datasets/pets/captions", json=body)
    assert dry.status_code == 200, dry.text
    assert dry.json()["changed"] == 3 and dry.json()["written"] is False and dry.json()["captions"] == 3
    assert _captions(client)["a.png"] == "a dog, running"  # nothing written
    done = client.post("/api/datasets/pets/captions", json={**body, "dry_run": False}).json()
    assert (done["changed"], done["files"], done["written"]) == (3, ["a.png", "b.png", "c.png"], True)
    assert _captions(client) == {
        "a.png": "photo, a sks dog, running",
        "b.png": "photo, a cat",
        "c.png": "photo, a sks dog, sitting",
        "d.png": None,  # no caption: none is made up
    }
    row = json.loads((settings.datasets_dir / "pets" / "metadata.jsonl").read_text())
    assert row["control_files"] == ["x.png"]  # the row's other fields kept
    appended = client.post("/api/datasets/pets/captions", json={"append": ", outdoors"}).json()
    assert appended["changed"] == 3 and _captions(client)["b.png"] == "photo, a cat, outdoors"
    assert not [
        p for p in (settings.datasets_dir / "pets").iterdir() if p.name.startswith(".")
    ]  # no leftovers


def test_an_edit_that_would_empty_a_caption_changes_nothing(client: TestClient) -> None:
    _dataset(client)
    refused = client.post("/api/datasets/pets/captions", json={"find": "a cat", "replace": ""})
    assert refused.status_code == 400 and "b.png: the edit would leave the caption empty" in refused.text
    assert _captions(client)["a.png"] == "a dog, running"
    assert client.post("/api/datasets/pets/captions", json={"replace": "x"}).status_code == 400  # no find


def test_the_cli_edits_captions_and_is_refused_while_a_server_owns_the_home(
    cli: typer.Typer, settings: Settings
) -> None:
    folder = settings.datasets_dir / "pets"
    folder.mkdir(parents=True)
    (folder / "b.png").write_bytes(_png())
    (folder / "b.txt").write_text("a cat")
    result = CliRunner().invoke(cli, ["datasets", "captions", "pets", "--find", "a ", "--replace", "one "])
    assert result.exit_code == 0, result.output
    assert "changed 1 of 1 caption(s) in pets" in result.output and "'a cat' -> 'one cat'" in result.output
    assert (folder / "b.txt").read_text() == "one cat\n"
    with TestClient(create_app(settings), base_url=LOOPBACK):
        busy = CliRunner().invoke(cli, ["datasets", "captions", "pets", "--append", "!"])
    assert busy.exit_code == 1 and "not edited" in busy.output
    assert (folder / "b.txt").read_text() == "one cat\n"
