"""The wall-time forecast's fixed + scaling fit (jobs/time_fit.py, issue 31 item 5): records of
one signature at two sizes forecast a third size's phases as a fixed part plus a part that scales
with their work, where the proportional rule took a tiny model's fixed costs as work (bench/RESULTS
note 36: the tiny SDXL at 1024 px forecast 184 s from its 256 px run, 48 s measured)."""

from __future__ import annotations

from collections.abc import Callable, Iterator
from pathlib import Path

import pytest
import torch

from lorastudio.jobs.hardware import HostInfo, precisions_for
from lorastudio.jobs.preflight import preflight_report
from lorastudio.jobs.time_fit import fit_line
from lorastudio.jobs.validation import validate_run
from lorastudio.settings import Settings
from lorastudio.timings import read_records
from lorastudio.training.loop import train

CPU = HostInfo("cpu", "cpu", None, precisions_for("cpu"))


@pytest.fixture
def one_thread() -> Iterator[None]:
    """One intra-op thread: the machine's other work slows every run alike."""
    threads = torch.get_num_threads()
    torch.set_num_threads(1)
    yield
    torch.set_num_threads(threads)


def _run(settings: Settings, model: Path, resolution: int) -> tuple[dict, dict]:
    """The preflight's time forecast of a tiny FLUX.1 CPU run at `resolution`, then the run's record."""
    raw = {"family": "flux", "base_model": str(model), "data_dir": "shapes", "resolution": resolution}
    raw |= {"steps": 10, "batch_size": 1, "output_name": f"fit{resolution}"}
    run = validate_run(raw, settings, live_output_names=set())
    forecast = preflight_report(run, host=CPU, home=settings.home)["time"]
    train(run.worker_config, [].append, settings=settings, device="cpu")
    return forecast, read_records(settings.home)[0]


def _phase(forecast: dict, name: str) -> dict:
    return next(p for p in forecast["phases"] if p["name"] == name)


def test_two_sizes_forecast_a_third_by_fixed_and_scaling_parts(
    settings: Settings, shapes: Path, tiny_model: Callable[[str], Path], one_thread: None
) -> None:
    model = tiny_model("flux")
    _run(settings, model, 64)
    one, _ = _run(settings, model, 256)  # one record, of another size: the proportional rule
    assert one["source"] == "history" and "scaled by pixels x samples" in _phase(one, "steps")["basis"]
    fitted, measured = _run(settings, model, 128)  # two sizes recorded: the fit
    steps = _phase(fitted, "steps")
    assert fitted["source"] == "history" and fitted["confidence"] == "scaled"
    assert "fitted on 2 of 2 earlier runs" in steps["basis"] and "at 2 sizes" in steps["basis"]
    assert "fixed part" in fitted["note"]
    # The bound. The tiny model's step is mostly a fixed cost (on the 2-core host: ~14 ms at 64 px,
    # ~18 at 128, ~20 at 256), so the proportional rule forecast 128 px as the median of the 64 px
    # record x 4 and the 256 px one / 4: ~2x the step it measures (+76 % on an idle host). The
    # fit interpolates between the two records. Compared phase by phase on the steps phase, the
    # median of the step-to-step intervals (a load spike moves single intervals, not the median),
    # not on the wall time (a run of ~1 s on a shared host varies with the others' load); 40 %
    # holds the three runs' drift under load and fails the old rule's ~2x.
    got = measured["phases"]["steps"]
    print(f"steps at 128 px: forecast {steps['seconds']} s, measured {got} s; basis: {steps['basis']}")
    assert steps["seconds"] == pytest.approx(got, rel=0.4), (steps, measured["phases"])


def test_the_fit_is_bounded_at_zero_each_part() -> None:
    assert fit_line([(1.0, 3.0), (1.0, 5.0)]) is None  # one size: not determined
    assert fit_line([(1.0, 2.0), (3.0, 4.0)]) == pytest.approx((1.0, 1.0))  # 1 s fixed + 1 s per unit
    assert fit_line([(1.0, 4.0), (3.0, 2.0)]) == pytest.approx((3.0, 0.0))  # faster when larger: the mean
    fixed, rate = fit_line([(1.0, 1.0), (2.0, 4.0)])  # a negative fixed part: through the origin
    assert fixed == 0.0 and rate == pytest.approx((1 * 1 + 2 * 4) / (1 + 4))
