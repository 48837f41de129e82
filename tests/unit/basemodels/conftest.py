"""Fixtures of the base-model tests: settings on the per-test studio home, writable copies of the
tiny pipelines, and a fake hub on 127.0.0.1 that the real huggingface_hub client talks to."""

from __future__ import annotations

import shutil
from collections.abc import Callable, Iterator
from pathlib import Path

import pytest
from fake_hub import TOKEN, FakeHub, FakeHubServer, FakeRepo, flux_repo_files

from lorastudio.settings import Settings


@pytest.fixture
def settings(studio_home: Path) -> Settings:
    return Settings(home=studio_home).ensure_dirs()


@pytest.fixture
def copy_tiny(tiny_model: Callable[[str], Path], tmp_path: Path) -> Callable[..., Path]:
    """Factory: a writable copy of a tiny pipeline, without its tiny marker unless `marker`."""

    def copy(family: str, dest: Path | None = None, *, marker: bool = False) -> Path:
        out = Path(shutil.copytree(tiny_model(family), dest or tmp_path / f"copy-{family}"))
        if not marker:
            (out / "lorastudio_tiny.json").unlink()
        return out

    return copy


@pytest.fixture
def hub(
    tiny_model: Callable[[str], Path], monkeypatch: pytest.MonkeyPatch, tmp_path: Path
) -> Iterator[FakeHub]:
    """A fake hub serving acme/flux (public), acme/gated (gated), acme/private (private); the
    hub client online (HF_HUB_OFFLINE off), pointed at it, with an empty hub cache."""
    from huggingface_hub import constants

    fake = FakeHub(token=TOKEN)
    files = flux_repo_files(tiny_model("flux"))
    fake.repos["acme/flux"] = FakeRepo(dict(files))
    fake.repos["acme/gated"] = FakeRepo(dict(files), gated=True)
    fake.repos["acme/private"] = FakeRepo(dict(files), private=True)
    with FakeHubServer(fake):
        monkeypatch.setenv("HF_ENDPOINT", fake.url)
        monkeypatch.setenv("HF_HUB_CACHE", str(tmp_path / "hf-cache"))
        monkeypatch.delenv("HF_TOKEN", raising=False)
        monkeypatch.setattr(constants, "HF_HUB_OFFLINE", False)
        yield fake
