"""The page-cache prefetch of a run's weight files (jobs/prefetch.py, basemodels/run_files.py) on
the tiny pipelines: which files, in which order, within which memory, and that it follows and
ends with the run."""

from __future__ import annotations

import os
import shutil
import threading
from collections.abc import Callable
from pathlib import Path

import pytest

from lorastudio.basemodels.run_files import LOAD_ORDER, WeightFile, run_weight_files
from lorastudio.jobs import prefetch as prefetch_module
from lorastudio.jobs.prefetch import WeightPrefetch, read_through, start_prefetch
from lorastudio.settings import Settings, get_settings
from lorastudio.training.events import Complete, ModelLoadCompleted, ModelLoadStarted

GB = 10**9


def _names(files: list[WeightFile]) -> list[tuple[str, str]]:
    return [(f"{f.path.parent.name}/{f.path.name}", f.part) for f in files]


def _flux_files() -> list[tuple[str, str]]:
    return [
        ("text_encoder/model.safetensors", "text_encoders"),
        ("text_encoder_2/model.safetensors", "text_encoders"),
        ("vae/diffusion_pytorch_model.safetensors", "vae"),
        ("transformer/diffusion_pytorch_model.safetensors", "denoiser"),
    ]


class Counting:
    """A reader that records each path it is asked to read and reads it for real."""

    def __init__(self) -> None:
        self.paths: list[Path] = []

    def __call__(self, path: Path, stop: Callable[[], bool]) -> int:
        self.paths.append(path)
        return read_through(path, stop)


def _wait(prefetch: WeightPrefetch) -> WeightPrefetch:
    prefetch.start()
    prefetch._thread.join(30)
    assert not prefetch.running
    return prefetch


def test_a_folder_s_files_in_the_order_the_engine_loads_them(tiny_model: Callable[[str], Path]) -> None:
    settings = get_settings()
    flux = run_weight_files(str(tiny_model("flux")), settings)
    assert _names(flux) == _flux_files()
    assert all(f.size == f.path.stat().st_size > 0 for f in flux)
    sdxl = run_weight_files(str(tiny_model("sdxl")), settings)
    assert [part for _, part in _names(sdxl)] == ["text_encoders", "text_encoders", "vae", "denoiser"]
    assert _names(sdxl)[-1][0].startswith("unet/")  # the U-Net is SDXL's denoiser


def test_variants_are_left_out_and_a_name_under_models_resolves(
    tiny_model: Callable[[str], Path], tmp_path: Path
) -> None:
    settings = Settings(home=tmp_path / "home").ensure_dirs()
    folder = Path(shutil.copytree(tiny_model("flux"), settings.models_dir / "my-flux"))
    shutil.copy(
        folder / "vae" / "diffusion_pytorch_model.safetensors",
        folder / "vae" / "diffusion_pytorch_model.fp16.safetensors",
    )  # a variant: not what the loader reads
    assert _names(run_weight_files("my-flux", settings)) == _flux_files()
    assert run_weight_files("no-such-model", settings) == []
    assert run_weight_files(str(tmp_path / "absent"), settings) == []


def test_a_single_file_is_read_with_the_first_part_that_loads_it(
    tiny_model: Callable[[str], Path], tmp_path: Path
) -> None:
    from single_files import write_sdxl_file, write_transformer_file

    settings = get_settings()
    flux_file = write_transformer_file(tiny_model("flux"), tmp_path / "flux.safetensors")
    files = run_weight_files(str(flux_file), settings, base_config=str(tiny_model("flux")))
    assert _names(files) == [*_flux_files()[:3], (f"{tmp_path.name}/flux.safetensors", "denoiser")]
    sdxl_file = write_sdxl_file(tiny_model("sdxl"), tmp_path / "sdxl.safetensors")
    files = run_weight_files(str(sdxl_file), settings, base_config=str(tiny_model("sdxl")))
    assert [(f.path, f.part) for f in files] == [(sdxl_file, "text_encoders")]  # it holds every part


def test_a_hub_id_is_read_from_the_hub_cache_only(
    tiny_model: Callable[[str], Path], tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    cache = tmp_path / "hf-cache"
    monkeypatch.setenv("HF_HUB_CACHE", str(cache))
    settings = get_settings()
    assert run_weight_files("acme/flux", settings) == []  # not on disk: nothing, no network
    prefetch = start_prefetch({"base_model": "acme/flux"}, settings)
    assert prefetch is not None
    prefetch._thread.join(30)
    assert prefetch.report.read == [] and prefetch.report.bytes_read == 0
    commit = "0123456789abcdef0123456789abcdef01234567"
    storage = cache / "models--acme--flux"
    shutil.copytree(tiny_model("flux"), storage / "snapshots" / commit)
    (storage / "refs").mkdir()
    (storage / "refs" / "main").write_text(commit)
    files = run_weight_files("acme/flux", settings)
    assert _names(files) == _flux_files()
    assert all(f.path.is_relative_to(storage / "snapshots" / commit) for f in files)
    assert run_weight_files("acme/flux", settings, revision="v2") == []  # that revision is not cached


def test_the_thread_reads_every_file_of_the_run_in_order(tiny_model: Callable[[str], Path]) -> None:
    files = run_weight_files(str(tiny_model("flux")), get_settings())
    reader = Counting()
    prefetch = _wait(WeightPrefetch(lambda: files, available=lambda: 64 * GB, reader=reader))
    assert reader.paths == prefetch.report.read == [f.path for f in files]
    assert prefetch.report.bytes_read == sum(f.size for f in files)
    assert prefetch.report.skipped == []


def test_files_that_do_not_fit_the_available_memory_are_skipped(tmp_path: Path) -> None:
    sizes = {"te.safetensors": 3000, "vae.safetensors": 500, "big.safetensors": 6000, "last.safetensors": 400}
    files = []
    for (name, size), part in zip(
        sizes.items(), ("text_encoders", "vae", "denoiser", "denoiser"), strict=True
    ):
        (tmp_path / name).write_bytes(b"\0" * size)
        files.append(WeightFile(tmp_path / name, size, part))
    reader = Counting()
    # 10,000 bytes available, 5,000 kept free: te (3,000) fits, vae fits in the 2,000 left, big
    # (6,000) does not, last (400) fits the 1,500 still left
    prefetch = _wait(WeightPrefetch(lambda: files, available=lambda: 10_000, headroom=5000, reader=reader))
    assert [p.name for p in reader.paths] == ["te.safetensors", "vae.safetensors", "last.safetensors"]
    assert [(p.name, why) for p, why in prefetch.report.skipped] == [
        ("big.safetensors", "0.00 GB does not fit the 0.00 GB left")
    ]
    assert prefetch.report.bytes_read == 3900
    unknown = _wait(WeightPrefetch(lambda: files, available=lambda: None, reader=Counting()))
    assert unknown.report.read == [] and len(unknown.report.skipped) == 4


def test_a_stop_ends_the_reads_and_the_run_s_loads_skip_what_they_passed(tmp_path: Path) -> None:
    names = ["te-1", "te-2", "te-3", "vae", "dit"]
    parts = ["text_encoders", "text_encoders", "text_encoders", "vae", "denoiser"]
    files = []
    for name, part in zip(names, parts, strict=True):
        (tmp_path / name).write_bytes(b"x" * 100)
        files.append(WeightFile(tmp_path / name, 100, part))
    began, go = threading.Event(), threading.Event()
    asked: list[str] = []

    def gated(path: Path, stop: Callable[[], bool]) -> int:
        asked.append(path.name)
        began.set()
        go.wait(10)  # a slow disk: each read waits for the test
        go.clear()
        return 0 if stop() else read_through(path, stop)

    def step() -> None:  # let the read in flight go on, wait for the next one to begin
        began.clear()
        go.set()
        assert began.wait(10)

    prefetch = WeightPrefetch(lambda: files, available=lambda: 64 * GB, reader=gated).start()
    assert began.wait(10)  # te-1 begins
    step()  # te-1 read whole, te-2 begins
    prefetch.observe(ModelLoadStarted(component="vae"))  # the run loads its VAE: te-2 and te-3 passed
    step()  # te-2 ends unfinished, te-3 is skipped, the VAE's file begins
    assert asked == ["te-1", "te-2", "vae"]
    prefetch.observe(Complete(lora_path=None, steps_run=0, stopped=False))
    go.set()
    prefetch._thread.join(10)
    assert not prefetch.running and asked == ["te-1", "te-2", "vae"]  # dit never read
    assert [p.name for p in prefetch.report.read] == ["te-1"]
    assert [(p.name, why) for p, why in prefetch.report.skipped] == [
        ("te-2", "the run loads past its text_encoders (partly read)"),
        ("te-3", "the run already loads past its text_encoders"),
    ]


def test_read_through_fills_the_page_cache_and_stops_between_chunks(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    from bench.prefetch_start import drop, resident_bytes

    path = tmp_path / "w.safetensors"
    with path.open("wb") as handle:
        handle.write(os.urandom(8 * 2**20))
        os.fsync(handle.fileno())  # written back: the drop can take the clean pages
    drop([path])
    if resident_bytes(path) > 2**20:
        pytest.skip("this file system keeps its pages (a tmpfs): the drop cannot be seen")
    stop = threading.Event()
    assert read_through(path, stop.is_set) == 8 * 2**20
    assert resident_bytes(path) == 8 * 2**20  # read by the kernel, into the cache
    with monkeypatch.context() as patched:
        patched.setattr(prefetch_module.sys, "platform", "darwin")  # the buffered read elsewhere
        assert read_through(path, stop.is_set) == 8 * 2**20
        stop.set()
        assert read_through(path, stop.is_set) == 0
    assert read_through(path, stop.is_set) == 0


def test_stop_waits_for_the_read_in_flight_and_ends_the_thread(tmp_path: Path) -> None:
    path = tmp_path / "w.safetensors"
    path.write_bytes(b"\1" * 1000)
    release = threading.Event()

    def blocked(p: Path, s: Callable[[], bool]) -> int:
        release.wait(10)
        return read_through(p, s)

    files = [WeightFile(path, 1000, "denoiser"), WeightFile(path, 1000, "denoiser")]
    prefetch = WeightPrefetch(lambda: files, available=lambda: 64 * GB, reader=blocked).start()
    threading.Timer(0.2, release.set).start()
    prefetch.stop()  # waits for the read in flight, then nothing more is read
    assert not prefetch.running and prefetch.report.bytes_read == 0


def test_the_denoiser_loaded_ends_it_and_the_setting_turns_it_off(tiny_model: Callable[[str], Path]) -> None:
    prefetch = WeightPrefetch(lambda: [], available=lambda: GB)
    prefetch.observe(ModelLoadCompleted(component="denoiser", seconds=1.0))
    assert prefetch._stop.is_set()
    off = get_settings().model_copy(update={"prefetch_weights": False})
    assert start_prefetch({"base_model": str(tiny_model("flux"))}, off) is None
    assert start_prefetch({"base_model": 3}, get_settings()) is None  # a config's raw value: not trusted


def test_an_unreadable_base_is_logged_not_raised(tmp_path: Path, caplog: pytest.LogCaptureFixture) -> None:
    bad = tmp_path / "model.gguf"
    bad.write_bytes(b"GGUF")
    with caplog.at_level("DEBUG", logger="lorastudio.prefetch"):
        for base in (str(bad), "/tmp/a\0b"):  # an inference-only file; a raw value no path holds
            prefetch = start_prefetch({"base_model": base}, get_settings())
            assert prefetch is not None
            prefetch._thread.join(10)
            assert prefetch.report.read == [] and not prefetch.running
    assert "no files read" in caplog.text and "GGUF" in caplog.text


def test_a_denoiser_load_started_before_the_text_encoders_skips_nothing() -> None:
    """The denoiser's load beside phases 1-2 (training/speed/denoiser_early.py) starts first: the text
    encoders' and the VAE's files are still read, and the denoiser's after them."""
    prefetch = WeightPrefetch(lambda: [], available=lambda: GB)
    prefetch.observe(ModelLoadStarted(component="denoiser"))
    assert prefetch._passed == -1
    prefetch.observe(ModelLoadStarted(component="text_encoders"))
    prefetch.observe(ModelLoadStarted(component="vae"))
    assert prefetch._passed == LOAD_ORDER.index("vae")  # the denoiser's files still read
    sequential = WeightPrefetch(lambda: [], available=lambda: GB)
    for part in LOAD_ORDER:
        sequential.observe(ModelLoadStarted(component=part))
    assert sequential._passed == LOAD_ORDER.index("denoiser")
