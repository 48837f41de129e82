"""The wall-time forecast's scaling by work (jobs/time_work.py, jobs/time_fit.py, issue 31 item
5): one record of a signature forecasts another size as its fixed part plus its work part scaled
by the cost model's work ratio, and records at two sizes forecast a third as a fixed part plus a
part fitted against that work, where the proportional rule took a tiny model's fixed costs as
work (bench/RESULTS note 36: the tiny SDXL at 1024 px forecast 184 s from its 256 px run, 48 s
measured)."""

from __future__ import annotations

from collections.abc import Callable, Iterator
from pathlib import Path

import pytest
import torch

from lorastudio.jobs.hardware import HostInfo, precisions_for
from lorastudio.jobs.preflight import preflight_report
from lorastudio.jobs.time_fit import fit_line
from lorastudio.jobs.validation import ValidatedRun, validate_run
from lorastudio.settings import Settings
from lorastudio.timings import read_records, write_record
from lorastudio.training.loop import train

# the cost model against its wall-clock records (conftest.wall_clock; the CPU clock: test_time_contention)
pytestmark = pytest.mark.usefixtures("wall_clock")

CPU = HostInfo("cpu", "cpu", None, precisions_for("cpu"))

FP32_PLAN = {
    "base_precision": "fp32",
    "gradient_checkpointing": "off",
    "offload_blocks": 0,
    "micro_batch_size": 1,
}


@pytest.fixture
def one_thread() -> Iterator[None]:
    """One intra-op thread: the machine's other work slows every run alike."""
    threads = torch.get_num_threads()
    torch.set_num_threads(1)
    yield
    torch.set_num_threads(threads)


# Rounds of the three sizes at most. Load only adds time, so each size's fastest run is its least
# disturbed measure; a quiet host passes in the first round (3 runs), a loaded one gets more tries.
ROUNDS = 3


def _validated(settings: Settings, model: Path, resolution: int, name: str) -> ValidatedRun:
    """A tiny FLUX.1 CPU run of 10 steps at `resolution`, validated."""
    raw = {"family": "flux", "base_model": str(model), "data_dir": "shapes", "resolution": resolution}
    raw |= {"steps": 10, "batch_size": 1, "output_name": name}
    return validate_run(raw, settings, live_output_names=set())


def _run(settings: Settings, model: Path, resolution: int, round_: int) -> tuple[dict, dict]:
    """The preflight's time forecast of a tiny FLUX.1 CPU run at `resolution`, then the run's record."""
    run = _validated(settings, model, resolution, f"fit{resolution}-{round_}")
    forecast = preflight_report(run, host=CPU, home=settings.home)["time"]
    train(run.worker_config, [].append, settings=settings, device="cpu")
    return forecast, read_records(settings.home)[0]


def _phase(forecast: dict, name: str) -> dict:
    return next(p for p in forecast["phases"] if p["name"] == name)


def _forecast_from(
    settings: Settings, model: Path, home: Path, records: list[dict], resolution: int, name: str
) -> dict:
    """The preflight's steps phase of a `resolution` run from a history of `records` only."""
    for i, record in enumerate(records):
        write_record(home, f"{name}-{i}", record)
    run = _validated(settings, model, resolution, name)
    return _phase(preflight_report(run, host=CPU, home=home)["time"], "steps")


def test_real_records_of_two_sizes_take_the_preflight_to_the_fit_through_them(
    settings: Settings, shapes: Path, tiny_model: Callable[[str], Path], one_thread: None, tmp_path: Path
) -> None:
    """Two real runs of the tiny FLUX.1 (64 and 256 px): the 64 px record forecasts 256 px by the
    cost model's work (its fixed part kept), and the two forecast 128 px on the line through their
    steps against that work, as the preflight reports it. How close that line comes to a measured
    128 px run depends on the host's CPU: that bound is the slow measurement below."""
    from lorastudio.jobs.time_work import record_step_work

    model = tiny_model("flux")
    _, low = _run(settings, model, 64, 0)
    one, high = _run(settings, model, 256, 0)
    assert (
        one["source"] == "history"
        and "scaled by the work of each model's shapes" in _phase(one, "steps")["basis"]
    )
    assert "the fixed part kept" in _phase(one, "steps")["basis"]
    forecast = _validated(settings, model, 128, "between")
    report = preflight_report(forecast, host=CPU, home=settings.home)["time"]
    steps = _phase(report, "steps")
    assert (
        report["source"] == "history" and report["confidence"] == "scaled" and "fixed part" in report["note"]
    )
    assert "fitted on 2 of 2 earlier runs" in steps["basis"] and "at 2 sizes" in steps["basis"]
    # the line through the two records' (work, s per step), read at 128 px's work, x the 9 steps after the first
    (w_low, s_low), (w_high, s_high) = ((record_step_work(r), r["s_per_step"]) for r in (low, high))
    w_mid = record_step_work(dict(low, signature=dict(low["signature"], pixels=128 * 128)))
    assert w_low < w_mid < w_high
    fixed, rate = fit_line([(w_low, s_low), (w_high, s_high)])
    assert steps["seconds"] == pytest.approx((fixed + rate * w_mid) * 9, abs=0.01)
    assert min(s_low, s_high) * 9 - 0.01 <= steps["seconds"] <= max(s_low, s_high) * 9 + 0.01


@pytest.mark.slow
def test_the_fit_forecasts_a_measured_third_size_within_40_percent(
    settings: Settings, shapes: Path, tiny_model: Callable[[str], Path], one_thread: None, tmp_path: Path
) -> None:
    """A measurement on this host's CPU, not a contract of the code: the fit through the fastest 64
    and 256 px runs forecasts the fastest 128 px run within 40 %, and one 64 px record the 256 px
    run. On the 2-core hosts here it holds (0.21 s forecast, 0.208 s measured); a CI host measured
    128 px at 0.182 s against 0.26 forecast (+43 %): there its fastest 64 px step (~0.027 s, read
    back from the fit) was slower than its 128 px one (0.020 s), which no line in work can follow
    (the work grows 1.17x from 64 to 128 px), so the bound is not in the default suite."""
    model = tiny_model("flux")
    records: dict[int, list[dict]] = {64: [], 256: [], 128: []}
    tries, ones = [], []
    for round_ in range(ROUNDS):
        records[64].append(_run(settings, model, 64, round_)[1])
        one, record = _run(settings, model, 256, round_)
        records[256].append(record)
        fitted, record = _run(settings, model, 128, round_)
        records[128].append(record)
        if round_ == 0:  # the preflight's path: one record of another size, then two sizes
            assert one["source"] == "history"
            assert "scaled by the work of each model's shapes" in _phase(one, "steps")["basis"]
            steps = _phase(fitted, "steps")
            assert fitted["source"] == "history" and fitted["confidence"] == "scaled"
            assert "fitted on 2 of 2 earlier runs" in steps["basis"] and "at 2 sizes" in steps["basis"]
            assert "fixed part" in fitted["note"]
        # The bound. The tiny model's step is mostly a fixed cost (on the 2-core host: ~14 ms at 64 px,
        # ~18 at 128, ~20 at 256), so the proportional rule forecast 128 px as the median of the 64 px
        # record x 4 and the 256 px one / 4: ~2x the step it measures (+76 % on an idle host). The
        # fit interpolates between the two records. Compared on the steps phase, the median of the
        # step-to-step intervals (a load spike moves single intervals, not the median), not on the
        # wall time. A load lasting a whole run (~1 s) moves its median too (a CI run: 128 px
        # measured 0.331 s against 0.15 forecast): so the forecast is the preflight's from the
        # fastest 64 and 256 px records so far, against the fastest 128 px one, each size's least
        # disturbed. 40 % holds the drift left and fails the old rule's ~2x in every round.
        best = {side: min(rs, key=lambda r: r["s_per_step"]) for side, rs in records.items()}
        # One record: the 64 px one forecasts 256 px. The step's work (jobs/time_work.py) at 64 px
        # is mostly the 512 text tokens' (16 image tokens), so it grows 1.9x to 256 px, not 16x:
        # the proportional rule forecast 16x the 64 px step (~+600 %); the cost model keeps the
        # record's fixed part and scales its work part (-24 % on the idle host at the CPU rate).
        one = _forecast_from(settings, model, tmp_path / f"one-{round_}", [best[64]], 256, f"one-{round_}")
        ones.append((one["seconds"], best[256]["phases"]["steps"], one["basis"]))
        # Two records: the 64 and 256 px ones forecast 128 px by the fit against work.
        home = tmp_path / f"fit-{round_}"
        forecast = _forecast_from(settings, model, home, [best[64], best[256]], 128, f"fit-{round_}")
        got = best[128]["phases"]["steps"]
        tries.append((forecast["seconds"], got, forecast["basis"]))
        print(f"round {round_}: steps at 128 px: forecast {forecast['seconds']} s, measured {got} s")
        print(f"round {round_}: steps at 256 px from 64: forecast {ones[-1][0]} s, measured {ones[-1][1]} s")
        if forecast["seconds"] == pytest.approx(got, rel=0.4) and ones[-1][0] == pytest.approx(
            ones[-1][1], rel=0.4
        ):
            break
    assert "fitted on 2 of 2 earlier runs" in tries[-1][2], tries
    assert "the fixed part kept" in ones[-1][2], ones
    assert tries[-1][0] == pytest.approx(tries[-1][1], rel=0.4), tries
    assert ones[-1][0] == pytest.approx(ones[-1][1], rel=0.4), ones


def test_the_fit_is_bounded_at_zero_each_part() -> None:
    assert fit_line([(1.0, 3.0), (1.0, 5.0)]) is None  # one size: not determined
    assert fit_line([(1.0, 2.0), (3.0, 4.0)]) == pytest.approx((1.0, 1.0))  # 1 s fixed + 1 s per unit
    assert fit_line([(1.0, 4.0), (3.0, 2.0)]) == pytest.approx((3.0, 0.0))  # faster when larger: the mean
    fixed, rate = fit_line([(1.0, 1.0), (2.0, 4.0)])  # a negative fixed part: through the origin
    assert fixed == 0.0 and rate == pytest.approx((1 * 1 + 2 * 4) / (1 + 4))


def test_records_of_two_sizes_give_the_line_and_a_record_of_this_size_is_measured(tmp_path: Path) -> None:
    """Two records whose step is 1 s fixed + 1 s per 65,536 pixels (256 px: 2 s, 512 px: 5 s)
    forecast 384 px at 1 + 2.25 = 3.25 s a step (the proportional rule: the median of 2 x 2.25 and
    5 x 0.5625, 3.66 s); a run of one recorded size is forecast as that record measured it."""
    from lorastudio.config import TrainConfig
    from lorastudio.jobs.time_forecast import time_forecast
    from lorastudio.timings import PHASES, run_signature, write_record

    base = tmp_path / "base"
    (base / "transformer").mkdir(parents=True)
    (base / "transformer" / "model.safetensors").write_bytes(b"\0" * 1000)
    plan = dict(FP32_PLAN)
    common = {"family": "flux", "base_model": str(base), "data_dir": "d", "steps": 11}

    def signature(side: int) -> dict:
        return run_signature(
            family="flux", base_model=str(base), denoiser="transformer", device_name="cpu", plan=plan,
            compiled=False, attention_backend="auto", buckets={f"{side}x{side}": 1}, batch_size=1,
            grad_accum=1, lora_rank=TrainConfig(**common, resolution=side).lora_rank,
        )  # fmt: skip

    for side, step in ((256, 2.0), (512, 5.0)):
        phases = dict.fromkeys(PHASES, 1.0) | {"steps": step * 10, "first_step": step}
        record = {"signature": signature(side), "phases": phases, "s_per_step": step, "steps": 11}
        write_record(tmp_path, f"r{side}", record | {"texts": 1, "latents_encoded": 1})

    def forecast(side: int) -> dict:
        work = {"steps": 11, "texts": 1, "images": 1, "buckets": {f"{side}x{side}": 1}}
        cfg = TrainConfig(**common, resolution=side)
        return time_forecast(cfg, base, CPU, plan, False, work, tmp_path)

    between = forecast(384)
    assert _phase(between, "steps")["seconds"] == pytest.approx(3.25 * 10)
    assert _phase(between, "first_step")["seconds"] == pytest.approx(3.25)
    assert "fitted on 2 of 2" in _phase(between, "steps")["basis"]
    # latent cache: 1 s at both sizes, a rate of 0: the mean, not 2.25x the 256 px one
    assert _phase(between, "latent_cache")["seconds"] == pytest.approx(1.0)
    exact = forecast(512)  # before: both records, scaled, their median (the 256 one x 4 = 8 s a step)
    assert exact["confidence"] == "measured" and _phase(exact, "steps")["seconds"] == pytest.approx(50.0)


def test_a_sample_round_is_fitted_against_its_forward_passes_and_decodes(
    tiny_model: Callable[[str], Path], tmp_path: Path
) -> None:
    """Records at 256 and 1024 px of the tiny FLUX.1 whose sample round (1 prompt x 2 sample steps:
    two forward passes and one decode by the VAE) takes 0.1 s per 1e9 of that work forecast 2048
    px's round by it. Before, the fit ran a line through prompts x sample steps x pixels (4x from
    1024 px, where the forward passes grow 13x and the decode 6.2x), and the decode, most of a
    tiny model's round (flux-1024-sample, bench/RESULTS note 42: 10.9 s a round where its two
    forward passes take ~1 s), was in no count."""
    from lorastudio.config import TrainConfig
    from lorastudio.jobs.time_forecast import FORWARD_RATE, time_forecast
    from lorastudio.jobs.time_rate import CPU_WORK_RATE
    from lorastudio.jobs.time_work import step_work, vae_work
    from lorastudio.timings import PHASES, run_signature

    base = tiny_model("flux")
    plan = dict(FP32_PLAN)
    common = {"family": "flux", "base_model": str(base), "data_dir": "d", "steps": 11}
    common |= {"sample_prompts": ["a red circle"], "sample_steps": 2, "lora_rank": 4}

    def signature(side: int) -> dict:
        return run_signature(
            family="flux", base_model=str(base), denoiser="transformer", device_name="cpu", plan=plan,
            compiled=False, attention_backend="auto", buckets={f"{side}x{side}": 1}, batch_size=1,
            grad_accum=1, lora_rank=4,
        )  # fmt: skip

    def one_round(side: int) -> float:  # 2 forward passes + 1 decode at a round's CPU rate
        forward = step_work("flux", str(base), side * side, 1)
        return (2 * forward + vae_work("flux", str(base), side * side, "decoder")) / (
            FORWARD_RATE * CPU_WORK_RATE
        )

    # the decoder's work: its convolutions and mid attention from the latent's level up
    decode = {side: vae_work("flux", str(base), side * side, "decoder") for side in (1024, 2048)}
    assert 4 < decode[2048] / decode[1024] < 8
    for side in (256, 1024):
        step = 0.3 * step_work("flux", str(base), side * side, 1) / 1e9
        phases = dict.fromkeys(PHASES, 1.0) | {"steps": step * 10, "first_step": step}
        phases["sample_rounds"] = one_round(side)
        record = {"signature": signature(side), "phases": phases, "s_per_step": step, "steps": 11}
        extra = {"texts": 1, "latents_encoded": 1, "sample_rounds": 1, "sample_work": 2, "sample_images": 1}
        write_record(tmp_path, f"r{side}", record | extra)
    work = {"steps": 11, "texts": 1, "images": 1, "buckets": {"2048x2048": 1}}
    cfg = TrainConfig(**common, resolution=2048)
    forecast = time_forecast(cfg, base, CPU, plan, False, work, tmp_path)
    rounds = _phase(forecast, "sample_rounds")
    assert rounds["seconds"] == pytest.approx(one_round(2048), rel=0.01)
    assert "fitted on 2 of 2" in rounds["basis"] and "a sample round, its work" in rounds["basis"]
    assert _phase(forecast, "steps")["seconds"] == pytest.approx(
        10 * 0.3 * step_work("flux", str(base), 2048 * 2048, 1) / 1e9, rel=0.01
    )
    # one record (the 1024 px one alone, at 2048 px): its round's work part (all of it at this
    # rate) scaled by the same work
    (tmp_path / "one").mkdir()
    (one,) = [r for r in read_records(tmp_path) if r["signature"]["pixels"] == 1024 * 1024]
    write_record(tmp_path / "one", "r1024", one)
    alone = _phase(time_forecast(cfg, base, CPU, plan, False, work, tmp_path / "one"), "sample_rounds")
    assert alone["seconds"] == pytest.approx(one_round(2048), rel=0.05)
