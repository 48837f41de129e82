"""Multipart uploads that name one thing twice: every problem is reported once, and a file name
sent more than once in one upload is refused in every copy (which one is meant is not guessed,
as the mask upload already did). Before, a name sent three times kept the first copy silently
and listed "sent twice in one upload" twice; a bad name sent twice, a mask sent twice and two
broken references of one name were each listed twice; a text form field (`strict=true` in the
form instead of the query) was dropped without a word."""

from __future__ import annotations

import io
import os

from fastapi.testclient import TestClient
from PIL import Image

from lorastudio.errors import ConfigError, DatasetError, FieldProblem
from lorastudio.settings import Settings


def _png(color: str = "red") -> bytes:
    buf = io.BytesIO()
    Image.new("RGB", (32, 32), color).save(buf, format="PNG")
    return buf.getvalue()


def test_a_file_name_sent_three_times_is_refused_in_every_copy_once(
    client: TestClient, settings: Settings
) -> None:
    files = [
        ("files", ("a.png", _png("red"))),
        ("files", ("a.png", _png("blue"))),
        ("files", ("a.png", _png("red"))),
        ("files", ("a.txt", b"its caption")),
        ("files", ("b.png", _png())),
        ("files", ("x.exe", b"1")),
        ("files", ("x.exe", b"2")),
    ]
    resp = client.post("/api/datasets/rep/files", files=files)
    assert resp.status_code == 201, resp.text
    assert resp.json()["committed"] == ["b.png"]
    assert resp.json()["refused"] == [
        {"file": "a.png", "reason": "sent 3 times in one upload (which one?): send one"},
        {"file": "a.txt", "reason": "its image a.png was refused"},
        {"file": "x.exe", "reason": "not an image (png/jpg/jpeg/webp), a .txt caption or metadata.jsonl"},
    ]
    assert sorted(os.listdir(settings.datasets_dir / "rep")) == ["b.png"]


def test_a_strict_upload_with_a_repeated_name_lists_it_once_and_stores_nothing(
    client: TestClient, settings: Settings
) -> None:
    files = [("files", ("a.png", _png())), ("files", ("a.png", b"not an image"))]
    resp = client.post("/api/datasets/strict/files?strict=true", files=files)
    assert resp.status_code == 400, resp.text
    assert resp.json()["problems"] == ["a.png: sent 2 times in one upload (which one?): send one"]
    assert not (settings.datasets_dir / "strict").exists()


def test_a_mask_sent_twice_and_two_broken_references_of_one_name_are_listed_once(client: TestClient) -> None:
    assert client.post("/api/datasets/m/files", files=[("files", ("a.png", _png()))]).status_code == 201
    resp = client.post(
        "/api/datasets/m/files", files=[("mask", ("a.png", _png())), ("mask", ("a.png", _png()))]
    )
    assert resp.status_code == 400, resp.text
    assert resp.json()["problems"] == ["masks/a.png: sent 2 times in one upload (which one?): send one"]
    refs = [("f", ("r.png", b"junk")), ("f", ("r.png", b"junk"))]
    resp = client.post("/api/generate/references", files=refs)
    assert resp.status_code == 400, resp.text
    assert resp.json()["problems"] == [
        "r.png: corrupt or not a PNG/JPEG/WebP image (cannot identify image file)"
    ]


def test_a_text_form_field_is_refused_naming_it(client: TestClient, settings: Settings) -> None:
    """`strict` sent as a form field (twice) was dropped: the upload went through leniently."""
    resp = client.post(
        "/api/datasets/t/files",
        data={"strict": ["true", "true"]},
        files=[("files", ("a.png", _png())), ("files", ("b.exe", b"x"))],
    )
    assert resp.status_code == 400, resp.text
    assert resp.json()["problems"] == ["form field 'strict' is text, not a file"]
    assert "options go in the query" in resp.json()["detail"]
    assert not (settings.datasets_dir / "t").exists()
    resp = client.post("/api/generate/references", data={"slot": "1"}, files=[("f", ("r.png", _png()))])
    assert resp.status_code == 400, resp.text
    assert resp.json()["problems"] == ["form field 'slot' is text, not a file"]


def test_domain_errors_list_each_problem_once_in_order() -> None:
    err = DatasetError("refused", ["b: bad", "a: bad", "b: bad"])
    assert err.problems == ["b: bad", "a: bad"]
    assert str(err) == "refused\n  - b: bad\n  - a: bad"
    config = ConfigError(
        [FieldProblem("steps", "too many"), FieldProblem("rank", "no"), FieldProblem("steps", "too many")]
    )
    assert config.problems == [FieldProblem("steps", "too many"), FieldProblem("rank", "no")]
    assert "(2 problem(s))" in str(config)


def test_a_reference_upload_over_its_file_count_answers_in_the_error_shape(client: TestClient) -> None:
    """Starlette's own {"detail": "Too many files..."} (no error name, no problems list) before."""
    refs = [("f", (f"r{i}.png", _png())) for i in range(11)]
    resp = client.post("/api/generate/references", files=refs)
    assert resp.status_code == 400, resp.text
    assert resp.json() == {
        "error": "DatasetError",
        "detail": "malformed multipart upload\n  - Too many files. Maximum number of files is 10.",
        "problems": ["Too many files. Maximum number of files is 10."],
    }
