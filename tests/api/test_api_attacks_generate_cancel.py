"""Attacks on generation cancel (POST /api/generate/{request_id}/cancel, the client leaving):
a cancel that lands while the finished image is being saved, and a duplicate request of a
running id whose client leaves. The worker is replaced by an in-process stand-in that writes a
real PNG (what is under test is the service's bookkeeping, not the render)."""

from __future__ import annotations

import contextlib
from collections.abc import Iterator
from pathlib import Path
from types import SimpleNamespace
from typing import Any

import pytest
from PIL import Image

from lorastudio.errors import GenerationCancelled, NotFound
from lorastudio.jobs import generation
from lorastudio.jobs.generation import GenerationRequest, GenerationService
from lorastudio.jobs.generation_worker import GenerationJob
from lorastudio.jobs.gpu import GpuArbiter
from lorastudio.settings import Settings


class _InProcess(GenerationService):
    """The service with no worker process: the request is always valid, the job writes a PNG."""

    def check(self, req: GenerationRequest) -> Any:
        return SimpleNamespace(source=req.base_model, config=None), []

    def _run_locked(self, job: GenerationJob, rid: str) -> dict[str, Any]:
        Image.new("RGB", (job.width, job.height), (200, 10, 10)).save(job.out_path, format="PNG")
        return {"width": job.width, "height": job.height, "seconds": 0.01}


def _request() -> GenerationRequest:
    return GenerationRequest(family="flux", base_model="tiny", prompt="x", steps=1, width=32, height=32)


def test_a_cancel_landing_while_the_image_is_saved_never_keeps_a_cancelled_image(
    settings: Settings, monkeypatch: pytest.MonkeyPatch
) -> None:
    service = _InProcess(settings, GpuArbiter())
    answers: list[str | Exception] = []
    real_write = generation.staged_write

    @contextlib.contextmanager
    def cancel_then_write(path: Path) -> Iterator[Path]:
        try:  # the cancel route, called while the finished image's sidecar is written
            answers.append(service.cancel("r-1"))
        except NotFound as err:
            answers.append(err)
        with real_write(path) as tmp:
            yield tmp

    monkeypatch.setattr(generation, "staged_write", cancel_then_write)
    try:
        result: dict[str, Any] | Exception = service.generate(_request(), "r-1")
    except GenerationCancelled as err:
        result = err
    kept = sorted(p.name for p in (settings.home / "gallery").iterdir())
    # either the cancel came too late (404: it ended) and the image is kept whole, or it won
    # and nothing is; never a cancel answered as done with the image kept
    if isinstance(answers[0], NotFound):
        assert isinstance(result, dict) and kept == sorted(
            [result["file"], Path(result["file"]).stem + ".json"]
        )
    else:
        assert isinstance(result, GenerationCancelled), (answers, result, kept)
        assert kept == [], kept
    assert service.in_flight == 0
    monkeypatch.setattr(generation, "staged_write", real_write)
    again = service.generate(_request(), "r-1")  # the id is free again, the service usable
    assert (settings.home / "gallery" / again["file"]).is_file()
