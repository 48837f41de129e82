"""Shared pytest fixtures.

- torch runs single-threaded (OMP_NUM_THREADS=1 unless set);
- every test starts with the objects alive before it frozen out of the garbage collector
  (`gc.freeze`, autouse): the engine's `gc.collect()` after freeing each model, and Python's own
  full collections, would otherwise rescan every imported library and earlier test's objects
  (~0.2-0.4 s a collection in a process with torch, diffusers and transformers loaded);
- every test runs with LORASTUDIO_HOME set to its own empty temp folder (not created), the
  settings cache cleared, HF_HUB_OFFLINE=1 and LORASTUDIO_STANDBY_WORKER=0 (`studio_home`,
  autouse);
- the decoded-image record's file clock (data/decoded.file_clock_ns) a second ahead
  (`settled_files`, autouse): a file a test has just written counts as safely older than the
  file clock's tick, as a dataset's files are in use, so a check records what it decodes rather
  than leave it racy (git's case, RELIABILITY 212: tests/unit/data/test_data_decoded_racy.py
  fakes the tick itself; a worker process keeps the real clock);
- `tiny_model`: a session-wide factory, family -> folder of that family's tiny diffusers pipeline
  (built once per session, seed 0; once per run for all pytest-xdist workers);
- `sample_dataset`: a session-wide folder with the 8-image sample dataset (seed 0);
- a server route that reaches the GPU facts without awaiting them first (api/host_wait.HOST_KNOWN)
  fails (hardware.STRICT_PROBE_WAITS): on this CPU host the answer is always known, so only the
  strict check shows the route that would hold a request thread on a GPU host;
- the job service's workers (training, standby, generation, caption) that a test starts in this
  process are forked from a zygote that has imported what a standby worker imports
  (tests/zygote.py: still children of this process, with its environment now; a real spawn where
  the environment differs in what the imports read), unless the test is marked
  `spawned_workers` (`_preloaded_workers`, autouse);
- under `--dist loadfile` (scripts/test.sh) the files of one session-wide launch are one xdist
  unit (`pytest_xdist_make_scheduler`): each worker that ran one of them ran the whole launch.

The session folders are shared by every test: treat them as read-only (copy them to change them).
"""

from __future__ import annotations

import fcntl
import gc
import os
from collections.abc import Callable, Iterator
from pathlib import Path

import pytest

# Before anything imports huggingface_hub (it reads the variable once, at import time).
os.environ["HF_HUB_OFFLINE"] = "1"
# Before torch is imported: the tiny models' ops are far too small to gain from threads, and on a
# shared 2-core machine two spinning threads per process made a 2-step generation 10-50x slower.
os.environ.setdefault("OMP_NUM_THREADS", "1")

from lorastudio.jobs import hardware  # noqa: E402  (after the environment above; no torch)

hardware.STRICT_PROBE_WAITS = True

import endless_streams  # noqa: E402

endless_streams.guard()  # an event stream read through TestClient fails at once (RELIABILITY 1281)

import zygote  # noqa: E402  (its START_ENV: the environment above, before any test changes it)

# Test files that read one session-scoped process launch, by the start of their path: one xdist
# unit each, so a single worker runs them and their launch. The two gloo ranks of
# tests/ddp_launch.py's `launched` (test_ddp.py, test_ddp_stop.py, test_ddp_caches.py: ~6 CPU s
# of ranks a launch since they are forked from the zygote, ~37 as two fresh interpreters; run by
# each worker that received one of the files before; test_ddp_rules and test_ddp_timeout come
# along, a few seconds).
ONE_UNIT = ("tests/unit/training/test_ddp",)


@pytest.hookimpl(optionalhook=True)  # no such hook without pytest-xdist (-p no:xdist)
def pytest_xdist_make_scheduler(config: pytest.Config, log: object) -> object | None:
    """`--dist loadfile` with the ONE_UNIT files as one unit; any other mode as xdist makes it."""
    if config.getoption("dist") != "loadfile":
        return None
    from xdist.scheduler import LoadFileScheduling

    class OneUnitLoadFile(LoadFileScheduling):
        def _split_scope(self, nodeid: str) -> str:
            scope = super()._split_scope(nodeid)
            return next((unit for unit in ONE_UNIT if scope.startswith(unit)), scope)

    return OneUnitLoadFile(config, log)  # type: ignore[arg-type]


class _ZygoteMultiprocessing:
    """lorastudio.processes's `mp` in this process: its spawn context is tests/zygote.py's."""

    def get_context(self, method: str | None = None) -> object:
        import multiprocessing

        return zygote.ZygoteContext() if method == "spawn" else multiprocessing.get_context(method)


def pytest_unconfigure(config: pytest.Config) -> None:
    """The zygote ended and reaped here: its CPU counts in this process's children (the time
    of a run, tests/cpu_costs.py's sums do not see it: it is no test's)."""
    zygote.ZYGOTE.stop()


@pytest.fixture(autouse=True)
def _preloaded_workers(request: pytest.FixtureRequest, monkeypatch: pytest.MonkeyPatch) -> None:
    """Workers forked from the zygote (module docstring), but in a test marked spawned_workers."""
    if request.node.get_closest_marker("spawned_workers") is None:
        from lorastudio import processes

        monkeypatch.setattr(processes, "mp", _ZygoteMultiprocessing())


@pytest.fixture(autouse=True)
def _frozen_gc_generation() -> None:
    """Objects alive before this test are not rescanned by its garbage collections."""
    gc.freeze()


@pytest.fixture(autouse=True)
def settled_files(monkeypatch: pytest.MonkeyPatch) -> None:
    """The decoded record's file clock a second ahead (see the module docstring)."""
    import time

    from lorastudio.data import decoded

    monkeypatch.setattr(decoded, "file_clock_ns", lambda: time.time_ns() + 1_000_000_000)


@pytest.fixture(autouse=True)
def studio_home(tmp_path_factory: pytest.TempPathFactory, monkeypatch: pytest.MonkeyPatch) -> Iterator[Path]:
    """A fresh studio home per test (the path only; `Settings.ensure_dirs()` creates it)."""
    from lorastudio.settings import get_settings

    home = tmp_path_factory.mktemp("home") / "lorastudio"
    monkeypatch.setenv("LORASTUDIO_HOME", str(home))
    monkeypatch.setenv("HF_HUB_OFFLINE", "1")
    # No standby training worker (jobs/standby.py) unless a test asks for one: each app of the
    # suite would otherwise import torch, diffusers and peft in one more process on a busy host.
    monkeypatch.setenv("LORASTUDIO_STANDBY_WORKER", "0")
    get_settings.cache_clear()
    yield home
    get_settings.cache_clear()


def _run_wide_folder(tmp_path_factory: pytest.TempPathFactory, name: str) -> Path:
    """A folder shared by every pytest-xdist worker of this run (the parent of the workers' own
    temp roots), or a fresh temp folder of this process without xdist."""
    if os.environ.get("PYTEST_XDIST_WORKER"):
        folder = tmp_path_factory.getbasetemp().parent / name
        folder.mkdir(exist_ok=True)
        return folder
    return tmp_path_factory.mktemp(name)


@pytest.fixture(scope="session")
def tiny_model(tmp_path_factory: pytest.TempPathFactory) -> Callable[[str], Path]:
    """Factory: `tiny_model("flux")` -> folder of the tiny FLUX.1 pipeline, built on first use.

    Under pytest-xdist the workers share one folder per family: the first to ask builds it while
    holding that family's lock file, the others wait and find it complete (save_tiny_model is
    atomic and idempotent, so even without the lock no worker could see it half-written)."""
    from lorastudio.tiny import save_tiny_model, tiny_model_dir

    root = _run_wide_folder(tmp_path_factory, "tiny-models")
    built: dict[str, Path] = {}

    def get(family: str) -> Path:
        if family not in built:
            with (root / f".{family}.lock").open("w") as lock:
                fcntl.flock(lock, fcntl.LOCK_EX)  # released when the file is closed
                built[family] = save_tiny_model(family, tiny_model_dir(family, root))
        return built[family]

    return get


@pytest.fixture(scope="session")
def sample_dataset(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """Folder of the sample dataset: 8 PNG images of coloured shapes + 8 .txt captions."""
    from lorastudio.tiny import SAMPLE_DATASET_NAME, make_sample_dataset

    return make_sample_dataset(tmp_path_factory.mktemp("datasets") / SAMPLE_DATASET_NAME)
