"""A cancel during a generation's pipeline load stops the load at the next component boundary
(each component diffusers loads: text encoders, tokenizers, VAE, denoiser, scheduler; then each
LoRA): the request answers GenerationCancelled within one component's load, what was loaded for
it is freed (nothing half-loaded stays resident) and the next request loads afresh and succeeds.
Was: the load ran to its end and the pipeline stayed resident (RELIABILITY "Known problems").
The tiny FLUX.1 model, in process (run_job) and in a real spawned worker whose component loads
are slowed (generation_hang_workers.slow_load_generation_worker)."""

from __future__ import annotations

import gc
import time
import weakref
from collections.abc import Callable
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path
from typing import Any

import pytest
import torch

from generation_hang_workers import LOAD_PAUSE_S, LOADS_FILE_ENV, slow_load_generation_worker
from lorastudio.errors import GenerationCancelled
from lorastudio.jobs.generation import GenerationService
from lorastudio.jobs.generation_inputs import GenerationRequest
from lorastudio.jobs.generation_worker import GenerationJob, Resident, run_job
from lorastudio.jobs.gpu import GpuArbiter
from lorastudio.settings import Settings

FLUX_COMPONENTS = 7  # scheduler, 2 text encoders, 2 tokenizers, transformer, vae


def _job(model: Path, out: Path, loras: tuple[tuple[str, float], ...] = ()) -> GenerationJob:
    return GenerationJob(
        source=str(model), family="flux", revision=None, prompt="a red circle", seed=1, steps=2,
        width=32, height=32, guidance=None, loras=loras, out_path=str(out),
        png_meta='{"prompt": "a red circle", "seed": 1}',
    )  # fmt: skip


def test_a_cancel_during_the_load_stops_it_between_components_and_frees_them(
    tiny_model: Callable[[str], Path], tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    from diffusers.pipelines import pipeline_utils

    import lorastudio.generate  # noqa: F401 - the engine, imported as the worker's job does

    real = pipeline_utils.load_sub_model
    loaded: list[weakref.ref[torch.nn.Module]] = []
    names: list[str] = []

    def recording(*a: Any, **kw: Any) -> Any:
        names.append(kw["name"])
        module = real(*a, **kw)
        if isinstance(module, torch.nn.Module):
            loaded.append(weakref.ref(module))
        return module

    monkeypatch.setattr(pipeline_utils, "load_sub_model", recording)
    resident = Resident()
    reports: list[Any] = []
    out = tmp_path / "cancelled.png"
    # the cancel comes once two torch modules loaded (diffusers' component order follows a set's,
    # which varies between processes: a count of names could fall on the scheduler and the two
    # tokenizers alone); the load stops before the next component
    begun_at_cancel: list[int] = []

    def cancelled() -> bool:
        if len(loaded) >= 2 and not begun_at_cancel:
            begun_at_cancel.append(len(names))
        return bool(begun_at_cancel)

    reply, fatal = run_job(resident, _job(tiny_model("flux"), out), reports.append, cancelled)
    assert reply[:2] == ("error", "GenerationCancelled"), reply
    assert "while its pipeline loaded" in reply[2], reply
    assert not fatal and reports == [] and not out.exists()
    assert begun_at_cancel == [len(names)], names  # no component began after the cancel
    assert len(names) < FLUX_COMPONENTS and len(loaded) == 2, names  # it stopped short
    assert resident.pipe is None and resident.key is None  # nothing half-loaded resident
    gc.collect()
    assert loaded and [r for r in loaded if r() is not None] == []  # freed, not only forgotten

    names.clear()
    reply, fatal = run_job(resident, _job(tiny_model("flux"), out), reports.append)
    assert reply[0] == "ok", reply
    assert len(names) == FLUX_COMPONENTS and out.is_file()
    # then each denoising step, for the asynchronous form's progress (RELIABILITY 1050)
    assert reports == [("loaded", True), ("step", 1, 2), ("step", 2, 2)]
    assert resident.key == _job(tiny_model("flux"), out).key


def _lines(path: Path) -> list[str]:
    return path.read_text(encoding="ascii").splitlines()


def test_a_cancelled_load_in_the_worker_answers_within_one_component_and_the_next_succeeds(
    studio_home: Path, tiny_model: Callable[[str], Path], tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    loads = tmp_path / "loads.txt"
    loads.touch()
    monkeypatch.setenv(LOADS_FILE_ENV, str(loads))
    settings = Settings(home=studio_home).ensure_dirs()
    service = GenerationService(settings, GpuArbiter(), slow_load_generation_worker)
    req = GenerationRequest(
        family="flux", base_model=str(tiny_model("flux")), prompt="x", steps=2, width=32, height=32
    )
    try:
        with ThreadPoolExecutor(1) as pool:
            pending = pool.submit(service.generate, req, "load-1")
            deadline = time.monotonic() + 120
            while len(_lines(loads)) < 2 and time.monotonic() < deadline and not pending.done():
                time.sleep(0.01)
            assert len(_lines(loads)) >= 2, "the load never began"
            pid = service.worker_pid
            t0 = time.monotonic()
            assert service.cancel("load-1") == "running"
            at_cancel = len(_lines(loads))
            with pytest.raises(GenerationCancelled, match="while its pipeline loaded"):
                pending.result(60)
            answered = time.monotonic() - t0
            at_answer = len(_lines(loads))  # components begun when the cancel was answered
        time.sleep(2 * LOAD_PAUSE_S)  # a load still going would name more components
        began = len(_lines(loads))
        # the component loading at the cancel ends, no other begins (one more: the cancel landed
        # between a boundary's check and its component's start)
        assert began <= at_cancel + 1 < FLUX_COMPONENTS, (at_cancel, _lines(loads))
        # answered within one component, counted, not timed (a loaded host stretches seconds):
        # the old code answered after the whole load, every component begun
        assert at_answer <= at_cancel + 1 < FLUX_COMPONENTS, (at_cancel, at_answer, answered)
        assert service.loaded is None and service.worker_pid == pid  # nothing resident, worker on
        assert [p.name for p in (settings.home / "gallery").iterdir()] == []

        loads.write_text("", encoding="ascii")
        after = service.generate(req, "load-2")
        assert Path(after["path"]).is_file() and len(_lines(loads)) == FLUX_COMPONENTS  # loaded afresh
        assert service.loaded == (str(tiny_model("flux")), "flux", None) and service.worker_pid == pid
    finally:
        service.shutdown()
    print(f"cancel during the load answered in {answered:.2f} s ({LOAD_PAUSE_S} s a component)")


def test_a_cancel_while_loras_are_applied_stops_before_the_next_and_leaves_none(
    tiny_model: Callable[[str], Path], flux_lora: Path
) -> None:
    from lorastudio.generate import apply_loras, load_pipeline
    from lorastudio.generate.load_cancel import missing_hooks

    assert missing_hooks() == []  # this diffusers loads through the functions the stops wrap
    pipe = load_pipeline(str(tiny_model("flux")), "flux", device="cpu")
    asked: list[bool] = []

    def cancelled() -> bool:  # the cancel comes while the first LoRA is applied
        asked.append(True)
        return len(asked) > 1

    with pytest.raises(GenerationCancelled, match=f"while its LoRAs were applied, before {flux_lora}"):
        apply_loras(pipe, [(flux_lora, 1.0), (flux_lora, 0.5)], cancelled)
    assert len(asked) == 2
    assert not any(pipe.get_list_adapters().values())  # the first one is off again
    apply_loras(pipe, [(flux_lora, 0.5)], lambda: False)  # the resident pipeline goes on
    assert [n for names in pipe.get_list_adapters().values() for n in names] == ["lorastudio_0"]


@pytest.mark.parametrize("family", ["sdxl", "flux"])
def test_a_single_file_load_stops_between_components_too(
    family: str, tiny_model: Callable[[str], Path], tmp_path: Path
) -> None:
    """A single-file base: SDXL's whole checkpoint goes through from_single_file (its own
    component loader), FLUX.1's transformer file through the denoiser's loader and the rest
    from its base config's folder."""
    from lorastudio.generate import load_pipeline
    from single_files import write_sdxl_file, write_transformer_file

    folder = tiny_model(family)
    write = write_sdxl_file if family == "sdxl" else write_transformer_file
    checkpoint = write(folder, tmp_path / f"{family}.safetensors")
    asked: list[bool] = []

    def cancelled() -> bool:  # asked at the start, then before each component: the third stops
        asked.append(True)
        return len(asked) >= 3

    with pytest.raises(GenerationCancelled, match="while its pipeline loaded, before its ") as info:
        load_pipeline(str(checkpoint), family, device="cpu", base_config=str(folder), cancelled=cancelled)
    assert "moving" not in str(info.value) and len(asked) == 3
    pipe = load_pipeline(
        str(checkpoint), family, device="cpu", base_config=str(folder), cancelled=lambda: False
    )
    assert type(pipe).__name__.endswith("Pipeline")
