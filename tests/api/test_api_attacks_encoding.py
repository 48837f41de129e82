"""Path segments whose percent-escapes are not UTF-8 (`caf%E9` from a Latin-1 client, `%FF`,
the overlong `%C0%AE`): Starlette decoded each invalid byte to U+FFFD, so different names sent
met one folder, and `DELETE /api/datasets/caf%E8` deleted the dataset `caf\\ufffd` that
`caf%E9` had made (RELIABILITY 2230). api/path_guard.py answers them 404, naming the segment."""

from __future__ import annotations

from fastapi.testclient import TestClient

from lorastudio.settings import Settings


def test_a_segment_that_is_not_utf8_names_no_dataset(client: TestClient, settings: Settings) -> None:
    folder = settings.datasets_dir / "caf\ufffd"  # what Starlette made of caf%E9
    folder.mkdir(parents=True)
    (folder / "a.txt").write_text("kept")
    for path in ("/api/datasets/caf%E8", "/api/datasets/caf%C0%AE", "/api/datasets/caf%FF/files"):
        answer = client.request("DELETE" if path.count("/") == 3 else "POST", path)
        assert answer.status_code == 404, answer.text
        assert "is not UTF-8 text" in answer.json()["detail"], answer.text
    assert (folder / "a.txt").read_text() == "kept"  # nothing deleted through another byte
    listed = client.get("/api/datasets/caf%C3%A9")  # the UTF-8 spelling is a name like any other
    assert listed.status_code == 404 and "is not UTF-8" not in listed.text, listed.text
