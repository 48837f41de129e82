"""A generation's unexpected failure leaves its traceback on the server's console, once
(RELIABILITY 1901). The generation worker caught it and replied its message alone ("failed",
the API's 500 GenerationFailed); the server logs no LorastudioError it answers, so nothing
anywhere held the traceback a bug report needs: only the access log's "POST ... 500"."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest

from lorastudio.jobs.generation_worker import GenerationJob, Resident, run_job


def test_an_unexpected_failure_prints_its_traceback_once_without_credentials(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    import lorastudio.generate as gen

    def broken(*args: Any, **kwargs: Any) -> None:
        raise RuntimeError("a broken pipeline at https://user:s3cret@proxy.example/x")

    monkeypatch.setattr(gen, "load_pipeline", broken)
    job = GenerationJob(
        source=str(tmp_path / "base"), family="flux", revision=None, prompt="x", seed=1, steps=1,
        width=32, height=32, guidance=None, loras=(), out_path=str(tmp_path / "img.png"),
    )  # fmt: skip
    reply, fatal = run_job(Resident(), job)
    assert reply[0] == "failed" and "a broken pipeline" in reply[1] and not fatal
    err = capsys.readouterr().err
    assert err.count("Traceback (most recent call last)") == 1, err
    assert (
        "ERROR:    lorastudio.jobs: a generation failed in its worker: RuntimeError: a broken pipeline" in err
    )
    assert "in broken" in err  # the frame that raised
    assert "s3cret" not in err  # a URL's credentials hidden, as in a run's log
