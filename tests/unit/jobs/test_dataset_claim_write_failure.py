"""A dataset claim whose holder record cannot be written (session 28 chaos audit): the file-size
limit (a real RLIMIT_FSIZE below the record's size), a full disk or a read-only claims folder.
`_take_one` had locked the dataset's claim file and then lost the descriptor when the record's
write raised: the lock stayed held by the process, so in a server every later upload, caption
edit or run of that dataset was refused as busy (by nobody: no record names a holder) until the
server restarted, and the staged record stayed. Now the failed take closes its lock and removes
its staging, and the failure names the claim (WriteFailed / NoSpaceLeft)."""

from __future__ import annotations

import errno
import os
from pathlib import Path
from typing import Any

import pytest

from file_limit import file_size_limit
from lorastudio.errors import WRITE_ADVICE, NoSpaceLeft, WriteFailed
from lorastudio.jobs.dataset_claims import CLAIMS_DIR, WRITE, DatasetClaim
from lorastudio.settings import Settings


def test_a_claim_whose_record_cannot_be_written_holds_nothing(tmp_path: Path) -> None:
    home = tmp_path / "home"
    datasets = home / "datasets"
    (datasets / "pets").mkdir(parents=True)
    with file_size_limit(10), pytest.raises((WriteFailed, OSError)) as failed:  # noqa: PT012
        DatasetClaim.take(home, datasets, [datasets / "pets"], WRITE, "an upload", brief=True)
    assert str(failed.value).startswith("write failed: the claim on dataset pets could not be recorded (")
    assert str(failed.value).endswith(f"): File too large; {WRITE_ADVICE[errno.EFBIG]}")
    assert [p.name for p in (home / CLAIMS_DIR).rglob("*.tmp")] == []
    again = DatasetClaim.take(
        home, datasets, [datasets / "pets"], WRITE, "the upload again", brief=True, wait_s=0.5
    )
    again.release()  # taken: the failed take held nothing


def test_a_caption_job_whose_claim_cannot_be_written_is_withdrawn(
    settings: Settings, shapes: Path, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The server's caption job took its claim after registering itself (and its GPU resident);
    only a busy dataset withdrew it, so a claim whose record could not be written left a job that
    never ran registered: the next caption job of the dataset was refused as a second one. Now
    any failed take withdraws it, and the same request then starts."""
    from caption_fake_workers import waiting_fake_captioner

    from lorastudio.captioning.options import CaptionOptions
    from lorastudio.jobs.captioning import CaptionJobs
    from lorastudio.jobs.gpu import GpuArbiter

    vlm = tmp_path / "vlm"
    vlm.mkdir()
    (vlm / "config.json").write_text('{"model_type": "qwen2_5_vl"}', encoding="utf-8")
    jobs = CaptionJobs(settings, GpuArbiter(), target=waiting_fake_captioner, host_device=lambda: "cpu")
    real = Path.write_text

    def full(self: Path, *args: Any, **kwargs: Any) -> int:
        if ".holder." in self.name and self.name.endswith(
            ".tmp"
        ):  # the claim's record: the disk is full there
            raise OSError(errno.ENOSPC, os.strerror(errno.ENOSPC), str(self))
        return real(self, *args, **kwargs)

    try:
        monkeypatch.setattr(Path, "write_text", full)
        with pytest.raises(NoSpaceLeft, match="the claim on dataset shapes"):
            jobs.start("shapes", CaptionOptions(model=str(vlm)))
        monkeypatch.setattr(Path, "write_text", real)
        job = jobs.start("shapes", CaptionOptions(model=str(vlm), overwrite=True))  # not refused
        jobs.cancel(job["id"])
        jobs.wait(job["id"], 60)
    finally:
        jobs.shutdown()
