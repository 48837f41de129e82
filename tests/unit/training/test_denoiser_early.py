"""The denoiser's load beside phases 1-2 (training/speed/denoiser_early.py), forced on for the CPU here
(its test seam `_ON_CPU`: the ring to the "device" or a host buffer, unpinned): the run trains
bit-identically to the sequential path, an error of the load or of its thread ends the run as the sequential path's
would, a stop in phase 1 leaves no thread behind, and a host without the RAM for both keeps the
sequential path."""

from __future__ import annotations

import logging
import shutil
import threading
from collections.abc import Iterator

import pytest
import torch
from safetensors.torch import load_file

from lorastudio.jobs import host_memory
from lorastudio.settings import get_settings
from lorastudio.timings import phase_seconds
from lorastudio.training.events import StopRequest
from lorastudio.training.loop import TrainResult, train
from lorastudio.training.speed import denoiser_early, weight_copy


@pytest.fixture(autouse=True)
def _settings_again(monkeypatch: pytest.MonkeyPatch) -> Iterator[None]:
    """The process's cached settings read again after a test that turned the overlap on."""
    yield
    monkeypatch.delenv("LORASTUDIO_EARLY_DENOISER", raising=False)
    get_settings.cache_clear()


def _turn_on(monkeypatch: pytest.MonkeyPatch) -> None:
    """LORASTUDIO_EARLY_DENOISER=1 (the default; a test may have turned it off)."""
    monkeypatch.setenv("LORASTUDIO_EARLY_DENOISER", "1")
    get_settings.cache_clear()


@pytest.fixture
def early(monkeypatch: pytest.MonkeyPatch) -> None:
    _turn_on(monkeypatch)
    monkeypatch.setattr(denoiser_early, "_ON_CPU", "device")


def _weights(result: TrainResult) -> dict[str, torch.Tensor]:
    assert result.lora_path is not None
    return load_file(str(result.lora_path))


def _loads(events: list) -> list[tuple[str, str, float | None]]:
    """(type, component, waited_s) of the run's model_load_* events, in order."""
    return [
        (e.type, e.component, getattr(e, "waited_s", None)) for e in events if e.type.startswith("model_load")
    ]


def _threads() -> list[threading.Thread]:
    return [t for t in threading.enumerate() if t.name == "denoiser-early"]


@pytest.mark.parametrize(
    ("family", "copy"),
    [("flux", "device"), pytest.param("sdxl", "host", marks=pytest.mark.slow)],  # SDXL's two runs: ~24 s
)
def test_the_overlapped_load_trains_bitwise_like_the_sequential_one(family, copy, make_config, monkeypatch):
    settings = {"steps": 2, "caption_dropout": 0.3, "random_flip": True}
    plain_events: list = []
    plain = train(make_config(family, output_name="plain", **settings), plain_events.append, device="cpu")
    _turn_on(monkeypatch)
    monkeypatch.setattr(denoiser_early, "_ON_CPU", copy)  # the ring to the device, or a host buffer
    events: list = []
    over = train(make_config(family, output_name="over", **settings), events.append, device="cpu")
    assert over.losses == plain.losses and _weights(over).keys() == _weights(plain).keys()
    assert all(torch.equal(_weights(over)[k], _weights(plain)[k]) for k in _weights(plain))
    # the sequential run loads the denoiser after phases 1-2; the overlapped one starts it first
    # and reports the part it waited for
    assert _loads(plain_events)[-2:] == [
        ("model_load_started", "denoiser", None),
        ("model_load_completed", "denoiser", None),
    ]
    loads = _loads(events)
    assert loads[0] == ("model_load_started", "denoiser", None)
    assert loads[-1][:2] == ("model_load_completed", "denoiser") and loads[-1][2] is not None
    done = next(e for e in events if e.type == "model_load_completed" and e.component == "denoiser")
    assert done.waited_s > 0 and done.seconds > 0
    assert not _threads()


def test_an_error_of_the_thread_ends_the_run_with_that_error_and_no_thread(make_config, early, monkeypatch):
    def broken(self):
        raise OSError("the host buffer could not be read")

    monkeypatch.setattr(denoiser_early.EarlyDenoiser, "_tensors", broken)
    with pytest.raises(OSError, match="the host buffer could not be read"):
        train(make_config(output_name="broken"), [].append, device="cpu")
    assert not _threads()


def test_a_bad_denoiser_file_is_reported_as_the_sequential_path_reports_it(
    make_config, tmp_path, monkeypatch
):
    base = tmp_path / "base"
    shutil.copytree(make_config().base_model, base)
    (weights,) = (base / "transformer").glob("*.safetensors")
    weights.write_bytes(weights.read_bytes()[:200])  # the header cut short
    _turn_on(monkeypatch)  # None: refused on the CPU; "device": the overlap
    errors = []
    for forced in (None, "device"):
        monkeypatch.setattr(denoiser_early, "_ON_CPU", forced)
        with pytest.raises(Exception) as caught:  # noqa: PT011 - compared below, type and message
            train(make_config(base_model=str(base), output_name=f"bad{forced}"), [].append, device="cpu")
        errors.append((type(caught.value), str(caught.value)))
    assert errors[0] == errors[1] and "transformer" in errors[0][1]
    assert not _threads()


def test_a_stop_in_phase_1_ends_the_run_and_its_thread(make_config, early, monkeypatch):
    events: list = []
    ended_by_stop: list[bool] = []

    def slow_copy(tensors, device, stop, pin, out):  # a copy still running when the stop comes
        ended_by_stop.append(stop.wait(10))
        raise weight_copy.Stopped

    monkeypatch.setattr(denoiser_early, "ring_to_device", slow_copy)

    def stop_once_encoders_loaded() -> StopRequest | None:
        loaded = any(e.type == "model_load_completed" and e.component == "text_encoders" for e in events)
        return StopRequest(save=False) if loaded else None

    result = train(make_config(output_name="stopped"), events.append, stop_once_encoders_loaded, device="cpu")
    assert result.stopped and result.steps_run == 0
    assert ("model_load_started", "denoiser", None) in _loads(events)
    assert not any(e.type == "model_load_completed" and e.component == "denoiser" for e in events)
    assert ended_by_stop == [True] and not _threads()  # the run's end stopped the copy and joined it


def test_a_host_without_room_for_both_keeps_the_sequential_path(make_config, early, monkeypatch, caplog):
    monkeypatch.setattr(host_memory, "available_host_bytes", lambda: denoiser_early.HOST_MARGIN // 2)
    events: list = []
    with caplog.at_level(logging.INFO, logger=denoiser_early.__name__):
        train(make_config(output_name="short"), events.append, device="cpu")
    assert _loads(events)[-2:] == [
        ("model_load_started", "denoiser", None),
        ("model_load_completed", "denoiser", None),
    ]
    assert "denoiser load after phases 1-2: the host has 2.0 GB available, the overlap needs" in caplog.text


def test_the_phases_count_an_overlapped_load_by_its_wait():
    stamped = [
        (0.0, {"type": "model_load_started", "component": "denoiser"}),
        (0.1, {"type": "model_load_started", "component": "text_encoders"}),
        (1.1, {"type": "model_load_completed", "component": "text_encoders", "seconds": 1.0}),
        (3.0, {"type": "preparing", "phase": "conditioning", "done": 1, "total": 1}),
        (3.5, {"type": "model_load_completed", "component": "denoiser", "seconds": 3.0, "waited_s": 0.6}),
    ]
    phases = phase_seconds(stamped, None)["phases"]
    assert phases["weights_load"] == pytest.approx(1.6)
    assert phases["caption_encoding"] == pytest.approx(1.9)


def test_the_copies_are_exact_across_ring_chunks_and_stop_at_the_next_tensor(monkeypatch):
    monkeypatch.setattr(weight_copy, "RING_BYTES", 96)  # a tensor spans chunks, chunks are reused
    tensors = [torch.randn(7, 5, dtype=torch.bfloat16), torch.arange(40), torch.ones(()), torch.rand(3) > 0.5]
    stop = threading.Event()
    copies = weight_copy.ring_to_device(tensors, torch.device("cpu"), stop, pin=False)
    host = weight_copy.HostBuffer()
    host.fill(tensors, stop, pin=False)
    for t in tensors:
        for copy in (copies[id(t)], host.views[id(t)]):
            assert copy.dtype == t.dtype and torch.equal(copy, t) and copy.data_ptr() != t.data_ptr()
    host.release()
    stop.set()
    with pytest.raises(weight_copy.Stopped):
        weight_copy.ring_to_device(tensors, torch.device("cpu"), stop, pin=False)
    with pytest.raises(weight_copy.Stopped):
        weight_copy.HostBuffer().fill(tensors, stop, pin=False)


def test_a_device_out_of_memory_in_the_thread_leaves_the_rest_to_the_join(make_config, monkeypatch, caplog):
    plain = train(make_config(output_name="plain_oom"), [].append, device="cpu")
    ring = denoiser_early.ring_to_device

    def short_of_memory(tensors, device, stop, pin, out):  # two tensors fit beside the encoders
        ring(tensors[:2], device, stop, pin, out)
        raise torch.OutOfMemoryError("CUDA out of memory (the test's)")

    _turn_on(monkeypatch)
    monkeypatch.setattr(denoiser_early, "_ON_CPU", "device")
    monkeypatch.setattr(denoiser_early, "ring_to_device", short_of_memory)
    with caplog.at_level(logging.WARNING, logger=denoiser_early.__name__):
        over = train(make_config(output_name="over_oom"), [].append, device="cpu")
    assert "ran out of memory beside the text encoders after 2 of its tensors" in caplog.text
    assert over.losses == plain.losses
    assert all(torch.equal(_weights(over)[k], v) for k, v in _weights(plain).items())
    assert not _threads()
