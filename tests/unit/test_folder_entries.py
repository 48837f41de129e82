"""A run's folder taken aside by its delete while its samples, checkpoints or LoRAs are listed
(RELIABILITY 773): each listing reads the folder as empty, never raises (the API's 500). The
interleaving is forced: the folder goes right after the listing's check found it there."""

from __future__ import annotations

import shutil
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest
from fastapi.testclient import TestClient

from live_server import LOOPBACK
from lorastudio.api.app import create_app
from lorastudio.api.routes import loras as loras_route
from lorastudio.folder_entries import entries
from lorastudio.lora.snapshots import list_lora_snapshots
from lorastudio.settings import Settings
from lorastudio.training.resume.checkpoint import list_checkpoints
from lorastudio.training.sample_files import list_references, list_samples


def _vanishing(folder: Path) -> Path:
    """The parent of `folder` as a path whose `folder`'s is_dir() answers as the file system does,
    then removes it (a delete landing right after the caller's check)."""

    class Vanishing(type(Path())):  # type: ignore[misc]
        def is_dir(self, *args: Any, **kwargs: Any) -> bool:
            there = super().is_dir(*args, **kwargs)
            if there and Path(self) == folder:
                shutil.rmtree(folder)
            return there

    return Vanishing(folder.parent)


@pytest.mark.parametrize(
    ("sub", "names", "listing"),
    [
        ("samples", ["step-000001-0.png"], list_samples),
        ("samples", ["ref-0-0.png"], list_references),
        ("checkpoints", ["step-1/"], list_checkpoints),
        ("loras", ["run-step-000001.safetensors", "run-step-000001.json"], list_lora_snapshots),
    ],
    ids=["samples", "references", "checkpoints", "snapshots"],
)
def test_a_run_folder_gone_after_the_check_lists_empty(
    tmp_path: Path, sub: str, names: list[str], listing: Callable[[Path], Any]
) -> None:
    run_dir = tmp_path / "outputs" / "run"
    for name in names:
        path = run_dir / sub / name.rstrip("/")
        path.mkdir(parents=True) if name.endswith("/") else path.parent.mkdir(parents=True, exist_ok=True)
        if not name.endswith("/"):
            path.write_bytes(b"x")
    assert entries(run_dir / sub)  # there before the check

    found = listing(_vanishing(run_dir / sub))

    assert not (run_dir / sub).exists() and not found


def test_a_lora_whose_run_is_deleted_while_the_loras_are_listed_is_left_out(
    studio_home: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    settings = Settings(home=studio_home).ensure_dirs()
    for name in ("kept", "gone"):
        (settings.outputs_dir / name).mkdir()
        (settings.outputs_dir / name / f"{name}.safetensors").write_bytes(b"x" * 8)
    sidecar = loras_route.read_sidecar  # read after the scan found the LoRA, before its files

    def deleted_meanwhile(path: Path) -> Any:
        if path.parent.name == "gone":
            shutil.rmtree(path.parent)  # its run deleted (the folder taken aside) just then
        return sidecar(path)

    monkeypatch.setattr(loras_route, "read_sidecar", deleted_meanwhile)
    with TestClient(create_app(settings), base_url=LOOPBACK) as client:
        answer = client.get("/api/loras")

    assert answer.status_code == 200, answer.text
    assert [lora["name"] for lora in answer.json()["loras"]] == ["kept"]
