"""A run's default output name is `<family>-<local date-time>` to the second (config_resolve):
two runs begun in one second, the hour repeated when daylight saving time ends, or a clock set
back to a time a run was named at, must not refuse the run for a name its user never chose
(session 32 clock audit)."""

from __future__ import annotations

import datetime
import types
from collections.abc import Callable
from pathlib import Path

import pytest

from lorastudio import config_resolve
from lorastudio.jobs.validation import validate_run
from lorastudio.settings import Settings


class _Clock(datetime.datetime):  # 01:30 local, twice: the hour that daylight saving time's end repeats
    @classmethod
    def now(cls, tz: datetime.tzinfo | None = None) -> datetime.datetime:  # type: ignore[override]
        return datetime.datetime(2026, 11, 1, 1, 30, 0)


def test_a_default_name_taken_on_disk_or_by_a_queued_job_gets_the_next_free_suffix(
    settings: Settings, shapes: Path, tiny_model: Callable[[str], Path], monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr(config_resolve, "datetime", types.SimpleNamespace(datetime=_Clock))
    raw = {"family": "flux", "base_model": str(tiny_model("flux")), "data_dir": "shapes", "resolution": 32}
    first = validate_run(raw, settings, live_output_names=set())
    name = first.config.output_name
    assert name == "flux-20261101-013000"
    (settings.outputs_dir / name).mkdir()  # that run's folder; a second run is queued as name-2
    again = validate_run(raw, settings, live_output_names={f"{name}-2"})
    assert again.config.output_name == again.worker_config.output_name == f"{name}-3"
    assert (
        first.default_name == again.default_name == name
    )  # the service's re-pick under its lock starts there
    chosen = validate_run({**raw, "output_name": "mine"}, settings, live_output_names=set())
    assert chosen.default_name is None and chosen.config.output_name == "mine"


def test_the_cli_names_its_run_and_a_launchs_ranks_past_a_taken_default(
    settings: Settings, monkeypatch: pytest.MonkeyPatch
) -> None:
    from lorastudio.cli import train_cmd
    from lorastudio.config import parse_train_config

    monkeypatch.setattr(config_resolve, "datetime", types.SimpleNamespace(datetime=_Clock))
    (settings.outputs_dir / "flux-20261101-013000").mkdir()
    cfg = parse_train_config({"family": "flux", "base_model": "acme/base", "data_dir": "shapes"})
    assert _name(train_cmd._default_named(cfg)) == "flux-20261101-013000-2"


def _name(named: object) -> str:
    """The name `_default_named` gave (a (config, reservation) pair; the config alone before
    fix 1094)."""
    cfg = named[0] if isinstance(named, tuple) else named
    return str(cfg.output_name)  # type: ignore[attr-defined]


def test_cli_runs_named_in_the_same_second_get_a_name_each(
    settings: Settings, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Eight namers race (threads: a reservation's lock is per open file, as between processes);
    each gets its own name while the others hold theirs, and a released name is free again
    (RELIABILITY 1094: the old code gave every one the same name, and all but one run was
    refused "already exists" by its folder's claim)."""
    import threading

    from lorastudio.cli import train_cmd
    from lorastudio.config import parse_train_config

    monkeypatch.setattr(config_resolve, "datetime", types.SimpleNamespace(datetime=_Clock))
    cfg = parse_train_config({"family": "flux", "base_model": "acme/base", "data_dir": "shapes"})
    start, named = threading.Barrier(8), []

    def name_one() -> None:
        start.wait()
        named.append(train_cmd._default_named(cfg))

    threads = [threading.Thread(target=name_one) for _ in range(8)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join()
    base = "flux-20261101-013000"
    assert sorted(_name(n) for n in named) == sorted([base, *(f"{base}-{n}" for n in range(2, 9))])
    for hold in named:
        hold[1].release()
    assert not [p.name for p in settings.outputs_dir.iterdir()]  # no reservation file stays
    assert _name(train_cmd._default_named(cfg)) == base


def test_the_service_names_past_a_cli_runs_reservation(settings: Settings) -> None:
    """A `lorastudio train` that reserved the default name (its folder not made yet) pushes the
    server's job of the same second to `-2`; the job's own reservation is given back when it
    ends (RELIABILITY 1094)."""
    from lorastudio.config import parse_train_config
    from lorastudio.jobs.gpu import GpuArbiter
    from lorastudio.jobs.service import JobService
    from lorastudio.jobs.store import RunStore
    from lorastudio.name_reserve import reservation_path, reserve_output_name

    cfg = parse_train_config({"family": "flux", "base_model": "acme/base", "data_dir": "shapes"})
    named = cfg.model_copy(update={"output_name": "flux-20261101-013000"})  # as validate_run names it
    run = types.SimpleNamespace(default_name="flux-20261101-013000", config=named, worker_config=named)
    cli = reserve_output_name("flux-20261101-013000", settings.outputs_dir)
    service = JobService(settings, RunStore.open(settings.db_path), GpuArbiter())
    config, worker_config, hold = service._free_default_name(run)  # type: ignore[arg-type]
    assert cli.name == "flux-20261101-013000"
    assert config.output_name == worker_config.output_name == hold.name == "flux-20261101-013000-2"
    assert reservation_path(settings.outputs_dir, hold.name).exists()
    hold.release()
    cli.release()
    assert not reservation_path(settings.outputs_dir, hold.name).exists()
