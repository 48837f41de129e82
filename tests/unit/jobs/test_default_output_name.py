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
    assert train_cmd._default_named(cfg).output_name == "flux-20261101-013000-2"
