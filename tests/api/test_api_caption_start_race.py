"""A dataset renamed or deleted while a caption job on it starts (RELIABILITY 775): the start is
refused (404 naming the dataset, nothing registered, no claim left) instead of answered 202 with
a job that then failed ("dataset folder not found"). The change is forced between the start's
check of the folder and its claim (while the captioning model is resolved)."""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest
from fastapi.testclient import TestClient
from PIL import Image

from lorastudio.jobs import captioning as captioning_module
from lorastudio.settings import Settings


@pytest.fixture(scope="module")
def tiny_vlm(tmp_path_factory: pytest.TempPathFactory) -> Path:
    from lorastudio.tiny.vlm import save_tiny_vlm

    return save_tiny_vlm(tmp_path_factory.mktemp("vlm") / "tiny-vlm")


@pytest.mark.parametrize(
    "change",
    [
        lambda client: client.post("/api/datasets/cards/rename", json={"to": "cards2"}),
        lambda client: client.delete("/api/datasets/cards"),
    ],
    ids=["renamed", "deleted"],
)
def test_a_dataset_changed_as_a_caption_job_starts_refuses_the_start(
    client: TestClient,
    settings: Settings,
    tiny_vlm: Path,
    monkeypatch: pytest.MonkeyPatch,
    change: Callable[[TestClient], Any],
) -> None:
    folder = settings.ensure_dirs().datasets_dir / "cards"
    folder.mkdir()
    Image.new("RGB", (48, 40), "red").save(folder / "a.png")
    changed: list[Any] = []
    resolve = captioning_module.resolve_captioner  # after the folder's check, before the claim

    def change_meanwhile(*args: Any, **kwargs: Any) -> Any:
        changed.append(change(client))
        return resolve(*args, **kwargs)

    monkeypatch.setattr(captioning_module, "resolve_captioner", change_meanwhile)

    start = client.post("/api/datasets/cards/caption", json={"model": str(tiny_vlm)})

    assert changed[0].status_code == 200, changed[0].text
    assert start.status_code == 404, start.text
    assert (
        start.json()["detail"]
        == "no dataset named 'cards': it was renamed or deleted as the caption job started"
    )
    assert client.get("/api/captions").json() == []
    claims = settings.home / "claims"
    assert not claims.is_dir() or not list(claims.glob("*.holder"))
