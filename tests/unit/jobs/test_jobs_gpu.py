"""The GPU arbiter: training excludes generation; residents are released only when training starts."""

from __future__ import annotations

import threading
import time

import pytest

from lorastudio.errors import JobActive
from lorastudio.jobs.gpu import GpuArbiter


def test_generation_is_refused_while_training_and_allowed_after() -> None:
    arbiter = GpuArbiter()
    arbiter.begin_training("job1")
    with pytest.raises(JobActive, match="job1"), arbiter.generation():
        pass
    with pytest.raises(JobActive):
        arbiter.begin_training("job2")
    arbiter.end_training("job2")  # not the holder: no effect
    assert arbiter.training_job == "job1"
    arbiter.end_training("job1")
    with arbiter.generation():
        assert arbiter.training_job is None


def test_training_releases_residents_after_in_flight_generation_finishes() -> None:
    arbiter = GpuArbiter()
    order: list[str] = []
    arbiter.register_resident("gen", lambda: order.append("released"))
    started = threading.Event()

    def generate() -> None:
        with arbiter.generation():
            started.set()
            time.sleep(0.3)
            order.append("generated")

    thread = threading.Thread(target=generate)
    thread.start()
    started.wait(5)
    arbiter.begin_training("job")
    thread.join()
    assert order == ["generated", "released"]
    with pytest.raises(JobActive), arbiter.generation():
        pass


def test_a_generation_that_overstays_gives_the_gpu_back_untouched() -> None:
    arbiter = GpuArbiter()
    released: list[str] = []
    arbiter.register_resident("gen", lambda: released.append("x"))
    with arbiter.generation():
        with pytest.raises(JobActive, match="generation"):
            arbiter.begin_training("job", wait_s=0.1)
        assert arbiter.training_job is None
    assert released == []


@pytest.mark.parametrize("device, words", [("cpu", "the CPU"), ("cuda", "the GPU"), (None, "the GPU")])
def test_the_refusal_names_the_device_the_host_trains_on(
    device: str | None, words: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A CPU host does not say "using the GPU" (issue 30). The wording never asks for the GPU
    probe (RELIABILITY 190): while the facts are not known (None) it names the GPU."""
    from lorastudio.jobs import hardware

    host = (
        None if device is None else hardware.HostInfo(device, device, None, hardware.precisions_for(device))
    )
    monkeypatch.setattr(hardware, "known_host_info", lambda: host)
    monkeypatch.setattr(hardware, "host_info", lambda: pytest.fail("the refusal asked for the GPU probe"))
    arbiter = GpuArbiter()
    arbiter.begin_training("job1")
    with pytest.raises(JobActive, match=f"job1 is using {words}"), arbiter.generation():
        pass
    with pytest.raises(JobActive, match=f"is using {words}"):
        arbiter.begin_training("job2")
