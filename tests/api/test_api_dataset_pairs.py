"""Paired uploads: control images sent in fields named after their control folder land there,
the dataset detail shows each target beside its controls (and serves their thumbnails), and a
control with no target (or a refused one) is refused by name, leaving nothing behind."""

from __future__ import annotations

import io
import json
from pathlib import Path

from fastapi.testclient import TestClient
from PIL import Image

from lorastudio.settings import Settings


def _png(color: str = "red") -> bytes:
    buf = io.BytesIO()
    Image.new("RGB", (24, 16), color).save(buf, format="PNG")
    return buf.getvalue()


def _tree(root: Path) -> set[str]:
    return {p.relative_to(root).as_posix() for p in root.rglob("*")} if root.exists() else set()


def test_pairs_upload_into_control_folders_and_show_beside_their_targets(
    client: TestClient, settings: Settings
) -> None:
    files = [
        ("files", ("a.png", _png())),
        ("files", ("a.txt", b"make it blue")),
        ("files", ("b.png", _png("green"))),
        ("control", ("a.png", _png("blue"))),
        ("control_2", ("a.jpg", _png("white"))),
        ("control", ("b.png", _png("black"))),
    ]
    up = client.post("/api/datasets/edits/files", files=files)
    assert up.status_code == 201, up.text
    assert up.json()["committed"] == [
        "a.png",
        "a.txt",
        "b.png",
        "control/a.png",
        "control/b.png",
        "control_2/a.jpg",
    ]
    root = settings.datasets_dir / "edits"
    assert (root / "control" / "a.png").is_file() and (root / "control_2" / "a.jpg").is_file()

    # a second upload adds a pair to the existing dataset (its control folder exists already)
    more = [("files", ("c.png", _png())), ("control", ("c.png", _png("blue")))]
    assert client.post("/api/datasets/edits/files", files=more).status_code == 201

    detail = client.get("/api/datasets/edits").json()
    rows = {f["file"]: f["controls"] for f in detail["files"]}
    assert rows == {
        "a.png": ["control/a.png", "control_2/a.jpg"],
        "b.png": ["control/b.png"],
        "c.png": ["control/c.png"],
    }
    assert detail["dropped"] == []  # the control folders are read, not "sub-folders not scanned"
    thumb = client.get("/api/datasets/edits/thumbnails/a.jpg?control=control_2&size=32")
    assert thumb.status_code == 200 and thumb.headers["content-type"] == "image/jpeg"
    assert client.get("/api/datasets/edits/thumbnails/a.png?control=..").status_code == 404

    # deleting a target takes its controls along (left behind, they would be orphans)
    gone = client.delete("/api/datasets/edits/images/a.png")
    assert gone.status_code == 200 and gone.json()["deleted"] == [
        "a.png",
        "a.txt",
        "control/a.png",
        "control_2/a.jpg",
    ]
    assert (root / "control" / "b.png").is_file() and not (root / "control_2" / "a.jpg").exists()


def test_controls_without_a_target_are_refused_by_name_and_nothing_is_half_written(
    client: TestClient, settings: Settings
) -> None:
    files = [
        ("files", ("a.png", _png())),
        ("files", ("bad.png", b"not an image")),
        ("control", ("zzz.png", _png())),  # no target named zzz
        ("control", ("bad.png", _png())),  # its target is refused
        ("control", ("a.txt", b"text")),  # a control must be an image
    ]
    up = client.post("/api/datasets/edits/files", files=files)
    assert up.status_code == 201, up.text
    refused = {(r["file"], r["reason"]) for r in up.json()["refused"]}
    assert (
        "control/zzz.png",
        "no target image named zzz.* in the upload or the dataset (controls pair by name)",
    ) in refused
    assert ("control/bad.png", "its target bad.png was refused") in refused
    assert any(f == "control/a.txt" and "must be PNG, JPEG or WebP" in r for f, r in refused)
    assert up.json()["committed"] == ["a.png"]
    assert _tree(settings.datasets_dir / "edits") == {"a.png"}  # no empty control folder either

    strict = client.post(
        "/api/datasets/edits/files?strict=true",
        files=[("files", ("b.png", _png())), ("control", ("nomatch.png", _png()))],
    )
    assert strict.status_code == 400 and "control/nomatch.png" in strict.text
    assert _tree(settings.datasets_dir / "edits") == {"a.png"}
    assert _tree(settings.datasets_dir / ".uploads") == set()  # no staging left

    # a control put there by hand with no target is listed as not used, naming it
    (settings.datasets_dir / "edits" / "control").mkdir()
    (settings.datasets_dir / "edits" / "control" / "orphan.png").write_bytes(_png())
    detail = client.get("/api/datasets/edits").json()
    assert detail["dropped"] == [
        {"file": "control/orphan.png", "reason": "control image with no target of the same name"}
    ]


def test_a_control_sent_in_a_misspelt_field_is_refused_and_replaces_no_target(
    client: TestClient, settings: Settings
) -> None:
    """A control image uploaded in a field spelt otherwise than `control`, `control_2` ...
    (`controls`, `Control`, `control_1`) was stored as a dataset image: one of its target's name
    silently replaced the target with the control. It is now refused naming the field, the target
    kept; the other files of the upload are stored as before."""
    root = settings.datasets_dir / "edits"
    first = [("files", ("a.png", _png())), ("files", ("a.txt", b"make it blue"))]
    assert client.post("/api/datasets/edits/files", files=first).status_code == 201
    target = (root / "a.png").read_bytes()
    for field in ("controls", "Control", "control_1"):
        files = [(field, ("a.png", _png("blue"))), ("files", ("b.png", _png("green")))]
        up = client.post("/api/datasets/edits/files", files=files)
        assert up.status_code == 201, up.text
        assert up.json()["committed"] == ["b.png"]
        assert up.json()["refused"] == [
            {
                "file": "a.png",
                "reason": f"sent in the field {field!r}, not a control field: control images go in "
                "fields named control, control_2 ... control_10 (spelt exactly so)",
            }
        ]
        assert (root / "a.png").read_bytes() == target
    assert _tree(root) == {"a.png", "a.txt", "b.png"}
    (root / "Control").mkdir()  # copied in by hand: the dataset screen names it as a control folder
    dropped = {d["file"]: d["reason"] for d in client.get("/api/datasets/edits").json()["dropped"]}
    assert dropped["Control"].startswith("not read as a control folder (control images go in control/")


def test_a_second_metadata_upload_keeps_each_rows_controls(client: TestClient, settings: Settings) -> None:
    """Uploading a metadata.jsonl into a dataset that has one merged the two as
    {"file_name", "text"} rows: every row's control_file_name / control_files was dropped (the
    pairs gone, unsaid), and a row naming only controls (its caption in a .txt) is now a row too.
    Each row is now kept whole, the uploaded one winning for its file."""
    root = settings.datasets_dir / "edits"
    rows = [
        {"file_name": "a.png", "text": "make it blue", "control_file_name": "refs/a.png"},
        {"file_name": "b.png", "control_files": ["refs/b.png"]},
    ]
    first = [
        ("files", ("a.png", _png())),
        ("files", ("b.png", _png("green"))),
        ("files", ("b.txt", b"make it red")),
        ("files", ("metadata.jsonl", "\n".join(json.dumps(r) for r in rows).encode())),
    ]
    up = client.post("/api/datasets/edits/files", files=first)
    assert up.status_code == 201, up.text
    more = {"file_name": "c.png", "text": "make it grey", "control_file_name": "refs/c.png"}
    second = [("files", ("c.png", _png("white"))), ("files", ("metadata.jsonl", json.dumps(more).encode()))]
    assert client.post("/api/datasets/edits/files", files=second).status_code == 201
    kept = [json.loads(line) for line in (root / "metadata.jsonl").read_text().splitlines()]
    assert kept == [*rows, more]


def test_a_tenth_control_uploads_into_control_10(client: TestClient, settings: Settings) -> None:
    """FLUX.2 dev takes 10 references: a control sent in the field `control_10` lands in
    control_10/ (it was refused as a misspelt control field), is listed 10th and has a thumbnail."""
    slots = ["control", *(f"control_{n}" for n in range(2, 11))]
    files = [("files", ("a.png", _png())), *((slot, ("a.png", _png("blue"))) for slot in slots)]
    up = client.post("/api/datasets/tens/files", files=files)
    assert up.status_code == 201, up.text
    assert up.json()["refused"] == []
    detail = client.get("/api/datasets/tens").json()
    assert detail["files"][0]["controls"] == [f"{slot}/a.png" for slot in slots]
    thumb = client.get("/api/datasets/tens/thumbnails/a.png?control=control_10&size=32")
    assert thumb.status_code == 200, thumb.text
    assert client.get("/api/datasets/tens/thumbnails/a.png?control=control_11").status_code == 404
