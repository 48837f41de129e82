"""Two clients stopping one run (two tabs, two people; RELIABILITY 771): a second stop that asks
the other way (Stop and save after Stop and discard, or the reverse) is refused (409 JobActive
naming what was asked first) instead of answered 200 and then honoured or not depending on
whether the worker had read the first. The same stop again is answered as before."""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path

import jobs_fake_workers as fakes
import pytest

from lorastudio.errors import JobActive
from lorastudio.jobs.gpu import GpuArbiter
from lorastudio.jobs.service import JobService, Timeouts
from lorastudio.jobs.store import RunStore
from lorastudio.settings import Settings
from polling import until


@pytest.mark.parametrize("first", [True, False], ids=["save-first", "discard-first"])
def test_a_second_stop_asking_the_other_way_is_refused_naming_the_first(
    settings: Settings, tiny_model: Callable[[str], Path], shapes: Path, first: bool
) -> None:
    service = JobService(
        settings,
        RunStore.open(settings.db_path),
        GpuArbiter(),
        worker_target=fakes.hang_ignoring_stop,  # the stop stays pending: the race's window held open
        timeouts=Timeouts(stop_grace_s=0.5, kill_grace_s=0.5),
    ).start()
    try:
        config = {"family": "flux", "base_model": str(tiny_model("flux")), "data_dir": "shapes",
                  "resolution": 32, "steps": 3, "output_name": "run"}  # fmt: skip
        job = service.submit(config)
        until(lambda: service.job(job["id"])["status"] == "preparing", 30, "an active job")

        assert service.stop(save=first)["stop_requested"] == {"save": first}
        with pytest.raises(JobActive) as refused:
            service.stop(save=not first)
        again = service.stop(save=first)  # the same request again (a double click): answered

        asked = "a stop-and-save" if first else "a stop without saving"
        assert f"{asked} of run {job['id']} was already asked for" in str(refused.value)
        assert ("ends with a LoRA" if first else "ends without a LoRA") in str(refused.value)
        assert again["stop_requested"] == {"save": first}
        until(lambda: service.job(job["id"])["status"] == "stopped", 30, "the stopped run")
        assert service.job(job["id"])["stop_requested"] == {"save": first}
    finally:
        service.shutdown()
