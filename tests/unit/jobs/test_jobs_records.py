"""Non-finite numbers become null; the metric history skips them and stays capped."""

from __future__ import annotations

import json
import math

import pytest

from lorastudio.jobs.records import MetricHistory, metric_point, sanitize


def test_sanitize_replaces_every_non_finite_float_nested() -> None:
    raw = {"loss": math.nan, "lr": math.inf, "x": [1.5, -math.inf, {"y": math.nan}], "n": 3, "s": "nan"}
    clean = sanitize(raw)
    assert clean == {"loss": None, "lr": None, "x": [1.5, None, {"y": None}], "n": 3, "s": "nan"}
    json.dumps(clean, allow_nan=False)  # strict JSON
    assert math.isnan(raw["loss"])  # the input is not modified


def _point(step: int, loss: float | None = 1.0) -> dict:
    return metric_point({"step": step, "loss": loss, "lr": 0.1})


def test_history_skips_points_without_a_finite_loss() -> None:
    history = MetricHistory(cap=10)
    assert history.add(_point(1)) is True
    assert history.add(_point(2, loss=None)) is False
    assert history.add(_point(3)) is True
    assert [p["step"] for p in history.points] == [1, 3]
    assert [p["step"] for p in history.since(1)] == [3]


def test_history_decimates_past_its_cap_and_spans_the_whole_run() -> None:
    history = MetricHistory(cap=100)
    for step in range(1, 10_001):
        history.add(_point(step))
    steps = [p["step"] for p in history.points]
    assert len(steps) <= 100
    assert steps[0] == 1 and steps[-1] > 9_800  # first and (nearly) latest kept
    gaps = {b - a for a, b in zip(steps, steps[1:], strict=False)}
    assert max(gaps) <= 2 * min(gaps)  # even-ish density
    assert steps == sorted(steps)


def test_history_cap_must_allow_two_points() -> None:
    with pytest.raises(ValueError):
        MetricHistory(cap=1)


def test_a_polled_snapshot_carries_the_validation_rounds_from_its_since_on() -> None:
    # session 35 long-run audit (RELIABILITY 1294): `since` cut the metric points only, so every
    # poll of a long run carried all its validation rounds (1,000 at validation every 100 steps
    # of 100,000); the web keeps the earlier ones (web/src/api/training.test.tsx)
    from lorastudio.config import parse_train_config
    from lorastudio.jobs.records import Job

    config = parse_train_config({"family": "flux", "base_model": "acme/base", "data_dir": "shapes"})
    job = Job(id="j", config=config, worker_config=config)
    job.validation = [{"step": s, "loss": 0.5} for s in range(100, 100_001, 100)]
    assert len(job.snapshot()["validation"]) == 1000
    polled = job.snapshot(since=99_900)
    assert [v["step"] for v in polled["validation"]] == [99_900, 100_000]  # old: all 1,000
    assert json.loads(json.dumps(polled))["validation"][-1] == {"step": 100_000, "loss": 0.5}
