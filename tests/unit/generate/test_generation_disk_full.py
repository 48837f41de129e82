"""A full disk while a generation saves its image (session 25 generation audit). Before: the
worker's PNG write failing with ENOSPC was a 500 "generation failed: OSError: [Errno 28] ...",
and the server's sidecar write failing a plain-text 500 with a traceback. Now both are
NoSpaceLeft (HTTP 507) naming the gallery, and nothing of the image is left there (no PNG,
sidecar or staging file). Found on a real gallery tmpfs of 64 KB; here the disk's answer is
raised where the kernel gives it (the write)."""

from __future__ import annotations

import errno
import os
from pathlib import Path
from typing import Any

import pytest
from PIL import Image

from generation_fakes import InProcessGeneration
from lorastudio.api.errors import status_code_of
from lorastudio.errors import WRITE_ADVICE, NoSpaceLeft
from lorastudio.jobs.generation_inputs import GenerationRequest
from lorastudio.jobs.generation_process import rebuild_error
from lorastudio.jobs.generation_worker import GenerationJob, Resident, run_job
from lorastudio.jobs.gpu import GpuArbiter
from lorastudio.settings import Settings


def _full(*_: Any, **__: Any) -> None:
    raise OSError(errno.ENOSPC, os.strerror(errno.ENOSPC))


def test_a_full_disk_while_the_sidecar_is_written_is_a_507_and_leaves_nothing(
    studio_home: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    settings = Settings(home=studio_home)
    service = InProcessGeneration(settings, GpuArbiter())
    real_write = Path.write_text

    def half_then_full(self: Path, text: str, *a: Any, **kw: Any) -> int:
        real_write(self, text[:10], *a, **kw)  # part of it reached the disk
        _full()
        return 0

    monkeypatch.setattr(Path, "write_text", half_then_full)
    request = GenerationRequest(family="flux", base_model="tiny", prompt="x", steps=1, width=32, height=32)
    with pytest.raises(NoSpaceLeft, match="no space left on device: the image's settings") as err:
        service.generate(request, "r-1")
    assert status_code_of(err.value) == 507 and str(settings.home / "gallery") in str(err.value)
    assert list((settings.home / "gallery").iterdir()) == []
    monkeypatch.setattr(Path, "write_text", real_write)
    kept = service.generate(request, "r-2")  # room again: the service goes on
    assert sorted(p.name for p in (settings.home / "gallery").iterdir()) == sorted(
        [kept["file"], Path(kept["file"]).stem + ".json"]
    )


def test_a_full_disk_while_the_worker_writes_the_png_is_no_space_left(
    tiny_model, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr(Image.Image, "save", _full)
    out = tmp_path / "gallery" / ".img.png.partial"
    out.parent.mkdir()
    job = GenerationJob(
        source=str(tiny_model("flux")), family="flux", revision=None, prompt="x", seed=1, steps=1,
        width=32, height=32, guidance=None, loras=(), out_path=str(out), png_meta='{"prompt": "x", "seed": 1}',
    )  # fmt: skip
    reply, fatal = run_job(Resident(), job)
    assert reply[:2] == ("error", "NoSpaceLeft") and not fatal, reply
    err = rebuild_error(*reply[1:])  # as the server rebuilds the worker's report
    assert isinstance(err, NoSpaceLeft) and status_code_of(err) == 507
    assert str(err).startswith("no space left on device: the image could not be written to the gallery")
    assert str(out.parent) in str(err)


def test_a_png_write_past_the_file_size_limit_is_write_failed_naming_the_gallery(
    tiny_model, tmp_path: Path
) -> None:
    """A real RLIMIT_FSIZE (`prlimit --fsize`) below the PNG's size (session 28 chaos audit): it
    was a 500 "generation failed: OSError: [Errno 27] File too large", naming nothing. Now
    WriteFailed (500) naming the gallery, rebuilt as such by the server."""
    from file_limit import file_size_limit
    from lorastudio.errors import WriteFailed

    out = tmp_path / "gallery" / ".img.png.partial"
    out.parent.mkdir()
    job = GenerationJob(
        source=str(tiny_model("flux")), family="flux", revision=None, prompt="x", seed=1, steps=1,
        width=64, height=64, guidance=None, loras=(), out_path=str(out), png_meta='{"prompt": "x", "seed": 1}',
    )  # fmt: skip
    resident = Resident()
    assert run_job(resident, job)[0][0] == "ok"  # the model loaded, the PNG written: its size known
    size = out.stat().st_size
    out.unlink()
    with file_size_limit(size // 2):
        reply, fatal = run_job(resident, job)
    assert reply[:2] == ("error", "WriteFailed") and not fatal, reply
    err = rebuild_error(*reply[1:])
    assert isinstance(err, WriteFailed) and status_code_of(err) == 500
    assert (
        str(err)
        == f"write failed: the image could not be written to the gallery ({out.parent}): File too large; {WRITE_ADVICE[errno.EFBIG]}"
    )
