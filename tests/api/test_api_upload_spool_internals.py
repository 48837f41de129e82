"""The upload parser leans on starlette's private parser state (api/upload_spool.py): the suite
names what an upgrade took away, and the server then falls back to starlette's own parser rather
than failing every upload (or its start)."""

from __future__ import annotations

import logging
from pathlib import Path

import pytest
from fastapi.testclient import TestClient
from starlette.formparsers import MultiPartParser

from lorastudio.api import upload_spool


def test_this_starlette_has_what_the_upload_parser_reads() -> None:
    """Fails, naming the internal and the version, after a starlette upgrade that renamed one:
    then update ParkingMultiPartParser (or the pin in pyproject.toml)."""
    assert upload_spool.INTERNALS_PROBLEM is None, upload_spool.INTERNALS_PROBLEM
    assert upload_spool.parser_class() is upload_spool.ParkingMultiPartParser


class _RenamedState(MultiPartParser):
    """A starlette whose parser keeps its files to close under another name."""

    def __init__(self, *args: object, **kwargs: object) -> None:
        super().__init__(*args, **kwargs)  # type: ignore[arg-type]
        self._spools_to_close = self.__dict__.pop("_files_to_close_on_error")


def test_an_upgrade_without_them_falls_back_to_starlettes_parser(
    client: TestClient,
    monkeypatch: pytest.MonkeyPatch,
    caplog: pytest.LogCaptureFixture,
    sample_dataset: Path,
) -> None:
    problem = upload_spool.internals_problem(_RenamedState)
    assert problem is not None and "_files_to_close_on_error" in problem and "starlette 1." in problem
    monkeypatch.setattr(upload_spool, "INTERNALS_PROBLEM", problem)
    monkeypatch.setattr(upload_spool, "_warned", [])
    assert upload_spool.parser_class() is MultiPartParser
    image = sorted(sample_dataset.glob("*.png"))[0]
    with caplog.at_level(logging.WARNING, logger="lorastudio.api"):
        for name in ("one", "two"):
            answer = client.post(
                f"/api/datasets/{name}/files",
                files=[
                    ("files", (image.name, image.read_bytes())),
                    ("files", (f"{image.stem}.txt", b"a shape")),
                ],
            )
            assert answer.status_code == 201, answer.text
            assert set(answer.json()["committed"]) == {image.name, f"{image.stem}.txt"}
    warnings = [
        r.getMessage() for r in caplog.records if "starlette's own multipart parser" in r.getMessage()
    ]
    assert len(warnings) == 1 and "_files_to_close_on_error" in warnings[0]  # logged once
