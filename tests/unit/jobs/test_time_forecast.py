"""The preflight's wall-time forecast (jobs/time_forecast.py, issue 31 item 5): a cold forecast
is a labelled guess; after a tiny CPU run, the next run of the same signature is forecast from
its measured phases (the record of a run being its wall time, timed from outside)."""

from __future__ import annotations

import os
import time
from collections.abc import Callable, Iterator
from pathlib import Path

import pytest
import torch

from lorastudio.jobs.hardware import HostInfo, precisions_for
from lorastudio.jobs.preflight import preflight_report
from lorastudio.jobs.validation import validate_run
from lorastudio.settings import Settings
from lorastudio.timings import PHASES, phase_seconds, read_records
from lorastudio.training.loop import train

# the cost model against its wall-clock records (conftest.wall_clock; the CPU clock: test_time_contention)
pytestmark = pytest.mark.usefixtures("wall_clock")

CPU = HostInfo("cpu", "cpu", None, precisions_for("cpu"))


def _raw(model: Path, name: str, **over: object) -> dict:
    return {
        "family": "flux",
        "base_model": str(model),
        "data_dir": "shapes",
        "resolution": 128,
        "steps": 12,
        "batch_size": 1,
        "sample_prompts": ["a red circle"],
        "sample_every": 6,
        "sample_steps": 2,
        "save_every": 6,
        "output_name": name,
        **over,
    }


def _forecast(settings: Settings, raw: dict) -> tuple[dict, object]:
    run = validate_run(raw, settings, live_output_names=set())
    return preflight_report(run, host=CPU, home=settings.home)["time"], run


def _train(settings: Settings, run: object) -> tuple[float, float]:
    """Train `run`; returns (its wall time by the test's clock, the span from its first event to
    its last before Complete by the same clock). The run's own clock starts after the first and
    ends before the second, and spans its events: its total lies between them whatever the
    host's load. The run's record is on disk when its Complete comes (the job service reports
    the run's end on it: the next preflight forecasts from the record, RELIABILITY 1860)."""
    seen: list[float] = []
    records_at_complete: list[int] = []

    def sink(event: object) -> None:
        seen.append(time.monotonic())
        if getattr(event, "type", None) == "complete":
            records_at_complete.append(len(read_records(settings.home)))

    t0 = time.monotonic()
    train(run.worker_config, sink, settings=settings, device="cpu")  # type: ignore[attr-defined]
    wall = time.monotonic() - t0
    assert records_at_complete == [1], records_at_complete  # written before Complete, not after
    return wall, seen[-2] - seen[0]


@pytest.fixture
def one_thread() -> Iterator[None]:
    """One intra-op thread: the machine's other work slows every run alike (the runs compared
    here are seconds long on a shared 2-core host)."""
    threads = torch.get_num_threads()
    torch.set_num_threads(1)
    yield
    torch.set_num_threads(threads)


def test_a_second_run_is_forecast_within_15_percent_from_the_first(
    settings: Settings, shapes: Path, tiny_model: Callable[[str], Path], one_thread: None
) -> None:
    model = tiny_model("flux")
    cold, run = _forecast(settings, _raw(model, "first"))
    assert cold["source"] == "model" and cold["confidence"] == "guess" and "guess" in cold["note"]
    assert [p["name"] for p in cold["phases"]] == list(PHASES) and cold["total_s"] > 0
    wall, events = _train(settings, run)
    (record,) = read_records(settings.home)
    assert record["steps"] == 12 and record["sample_rounds"] == 2 and record["checkpoints"] == 1
    assert record["signature"]["device_name"] == "cpu" and record["s_per_step"] > 0
    assert sum(record["phases"].values()) == pytest.approx(record["total_s"], rel=0.02)
    # this host's matmul probe at the run's one thread (RELIABILITY 1210), a round's part beyond its
    # renders (1212), no text tokens for FLUX.1 (its T5 pads to 512: 1211)
    assert record["cpu_rate"]["threads"] == 1 and record["cpu_rate"]["matmul_flops"] > 1e8
    assert 0 < record["sample_fixed_s"] < record["phases"]["sample_rounds"] / 2
    assert record["text_tokens"] is None
    # and each phase on the process's CPU clock (one thread: no more than the wall clock's)
    on_cpu = record["cpu"]
    assert sum(on_cpu["phases"].values()) == pytest.approx(on_cpu["total_s"], rel=0.02)
    assert 0 < on_cpu["total_s"] <= record["total_s"] * 1.1 and on_cpu["s_per_step"] > 0
    assert record["host_load"]["cores"] >= 1 and record["host_load"]["load_1min"] >= 0
    # the record is the run's wall time up to its Complete: the same run timed from outside, it
    # lies between the span of the run's events before Complete and train()'s call (outside the
    # run's own clock: train()'s checks before it, the record's write, Complete, the cache prune). Not within 5 % of the call: a load spike in those parts
    # alone moved a run of ~3 s by more on a shared 2-core host.
    assert events <= record["total_s"] + 0.0005 and record["total_s"] <= wall + 0.0005, (record, events, wall)

    # the next run of the same signature is forecast as the first one measured it, phase by phase
    # (compared with its record, not with a second run's wall time: on a shared host single runs
    # of a few seconds vary by up to ~40 % with the other processes' load, and "within ~15 %" is
    # promised when nothing else runs on the machine)
    warm, _ = _forecast(settings, _raw(model, "again"))
    assert warm["source"] == "history" and warm["confidence"] == "measured" and warm["runs"] == 1
    assert all("measured by" in p["basis"] and "this base and plan" in p["basis"] for p in warm["phases"])
    print(
        f"first run: {record['total_s']} s recorded, {wall:.2f} s by the test's clock; forecast {warm['total_s']} s"
    )
    for phase in warm["phases"]:
        assert phase["seconds"] == pytest.approx(record["phases"][phase["name"]], abs=0.01), phase["name"]
    assert warm["total_s"] == pytest.approx(record["total_s"], abs=0.15)  # each phase rounded

    # twice the steps: the steps phase doubles (the same base and plan, scaled by its work)
    longer, _ = _forecast(settings, _raw(model, "longer", steps=36))
    now = {p["name"]: p["seconds"] for p in longer["phases"]}
    assert longer["confidence"] == "measured"  # same pixels and batch: only the counts differ
    assert now["steps"] == pytest.approx(
        record["s_per_step"] * 35, abs=0.02
    )  # the median rate x the steps after the first


def _event(kind: str, **fields: object) -> dict:
    return {"type": kind, **fields}


def test_phases_from_stamped_events() -> None:
    # a run: loads, 4 texts, 2 images, probe, 6 steps of 1 s with a 3 s sample round after step 3
    # and a 2 s checkpoint after step 3 (save_every 3), a final round, export
    stamped = [
        (0.5, _event("model_load_started", component="text_encoders")),
        (2.5, _event("model_load_completed", component="text_encoders", seconds=2.0)),
        (3.5, _event("preparing", phase="conditioning", done=4, total=4)),
        (4.0, _event("model_load_completed", component="vae", seconds=0.4)),
        (5.0, _event("preparing", phase="latents", done=2, total=2)),
        (8.0, _event("model_load_completed", component="denoiser", seconds=3.0)),
        (8.0, _event("preparing", phase="denoiser", done=0, total=1)),
        (10.0, _event("preparing", phase="denoiser", done=1, total=1)),
        (20.0, _event("progress", step=1)),
        (21.0, _event("progress", step=2)),
        (22.0, _event("progress", step=3)),
        (25.0, _event("sample_ready", step=3)),
        (28.0, _event("progress", step=4)),  # 3 s round + 2 s checkpoint + the 1 s step
        (29.0, _event("progress", step=5)),
        (30.0, _event("progress", step=6)),
        (33.0, _event("sample_ready", step=6)),
        (34.0, _event("complete", lora_path="x", steps_run=6, stopped=False)),
    ]
    out = phase_seconds(stamped, save_every=3, end=34.5)
    ph = out["phases"]
    assert out["s_per_step"] == 1.0 and out["steps"] == 6 and out["texts"] == 4 and out["latents"] == 2
    assert (
        ph["weights_load"] == pytest.approx(5.4)
        and ph["caption_encoding"] == 1.0
        and ph["latent_cache"] == 1.0
    )
    assert ph["probe_plan"] == 2.0 and ph["first_step"] == 10.0 and ph["steps"] == 5.0
    assert ph["sample_rounds"] == 6.0 and out["sample_rounds"] == 2
    assert ph["checkpoints"] == pytest.approx(2.0) and out["checkpoints"] == 1
    assert ph["export"] == 1.5 and out["total_s"] == 34.5
    assert sum(ph.values()) == pytest.approx(34.5)
    assert out["to_first_read_s"] == 0.5 and out["to_first_step_s"] == 20.0
    later = phase_seconds(stamped, save_every=3, end=34.5, before=4.0)  # 4 s of process start
    assert later["to_first_read_s"] == 4.5 and later["to_first_step_s"] == 24.0


def test_the_final_sample_round_starts_when_the_lora_is_saved() -> None:
    """The engine writes the run's LoRA before the final sample round (training/loop_end.finish_run):
    the round is timed from that save (the PhaseClock's FINAL_LORA_SAVED mark), the save counts
    as export, so each round's time stays one round's."""
    stamped = [
        (10.0, _event("preparing", phase="denoiser", done=1, total=1)),
        (20.0, _event("progress", step=1)),
        (21.0, _event("progress", step=2)),
        (24.0, _event("sample_ready", step=2)),  # sample_every 2: a 3 s round
        (25.0, _event("progress", step=3)),
        (26.0, _event("progress", step=4)),
        (30.5, _event("sample_ready", step=4)),  # the 1.5 s save, then a 3 s round
        (31.0, _event("complete", lora_path="x", steps_run=4, stopped=False)),
    ]
    out = phase_seconds(stamped, save_every=None, end=31.5, lora_saved=27.5)
    ph = out["phases"]
    assert ph["sample_rounds"] == 6.0 and out["sample_rounds"] == 2
    assert ph["export"] == 2.5  # the save (1.5 s) and the end after the round (1.0 s)
    assert sum(ph.values()) == pytest.approx(31.5)
    unmarked = phase_seconds(stamped, save_every=None, end=31.5)  # a save after the samples
    assert unmarked["phases"]["sample_rounds"] == 7.5 and unmarked["phases"]["export"] == 1.0


def test_runs_of_another_base_on_this_machine_scale_by_size_pixels_and_samples(tmp_path: Path) -> None:
    from lorastudio.config import TrainConfig
    from lorastudio.jobs.time_forecast import time_forecast
    from lorastudio.timings import write_record

    base = tmp_path / "base"
    (base / "transformer").mkdir(parents=True)
    os.truncate(_touch(base / "transformer" / "model.safetensors"), 2_000_000)
    plan = {
        "base_precision": "fp32",
        "gradient_checkpointing": "off",
        "offload_blocks": 0,
        "micro_batch_size": 1,
    }
    signature = {"family": "flux", "base_model": "another", "denoiser_bytes": 1_000_000, "device_name": "cpu"}
    signature |= {"plan": plan, "compiled": False, "attention_backend": "auto", "pixels": 256 * 256}
    signature |= {"batch_size": 1, "grad_accum": 1, "lora_rank": 16}
    phases = dict.fromkeys(PHASES, 1.0) | {"steps": 9.0}
    write_record(
        tmp_path, "other", {"signature": signature, "phases": phases, "s_per_step": 1.0, "steps": 10}
    )
    cfg = TrainConfig(
        family="flux", base_model=str(base), data_dir="d", resolution=512, steps=11, batch_size=2
    )
    work = {"steps": 11, "texts": 1, "images": 1, "buckets": {"512x512": 1}}
    forecast = time_forecast(cfg, base, CPU, plan | {"micro_batch_size": 2}, False, work, tmp_path)
    assert forecast["source"] == "machine" and forecast["confidence"] == "scaled"
    steps = {p["name"]: p["seconds"] for p in forecast["phases"]}["steps"]
    assert steps == pytest.approx(1.0 * 2 * 4 * 2 * 10)  # s/step x size x pixels x samples x 10 steps
    assert "other bases" in forecast["phases"][0]["basis"]


def _touch(path: Path) -> Path:
    path.write_bytes(b"")
    return path


def _cpu_base(tmp_path: Path) -> tuple[Path, dict]:
    """A 1 MB stand-in base (its transformer's file size is what the forecast scales by) and the
    fp32 CPU plan of a tiny run."""
    base = tmp_path / "base"
    (base / "transformer").mkdir(parents=True)
    os.truncate(_touch(base / "transformer" / "model.safetensors"), 1_000_000)
    plan = {
        "base_precision": "fp32",
        "gradient_checkpointing": "off",
        "offload_blocks": 0,
        "micro_batch_size": 1,
    }
    return base, plan


def _cpu_signature(base: Path, plan: dict, buckets: dict, lora_rank: int) -> dict:
    """The run signature of a FLUX.1 run of `base` on the CPU (timings.run_signature)."""
    from lorastudio.timings import run_signature

    return run_signature(
        family="flux",
        base_model=str(base),
        denoiser="transformer",
        device_name="cpu",
        plan=plan,
        compiled=False,
        attention_backend="auto",
        buckets=buckets,
        batch_size=1,
        grad_accum=1,
        lora_rank=lora_rank,
    )


def test_sample_rounds_never_measured_come_from_the_step_time_and_lower_the_confidence(
    tmp_path: Path,
) -> None:
    from lorastudio.config import TrainConfig
    from lorastudio.jobs.time_forecast import SAMPLE_STEP_SHARE, time_forecast
    from lorastudio.timings import write_record

    base, plan = _cpu_base(tmp_path)
    common = {"family": "flux", "base_model": str(base), "data_dir": "d", "resolution": 256, "steps": 10}
    buckets = {"256x256": 1}
    signature = _cpu_signature(base, plan, buckets, TrainConfig(**common).lora_rank)
    phases = dict.fromkeys(PHASES, 1.0) | {"sample_rounds": 0.0, "steps": 9.0}
    record = {"signature": signature, "phases": phases, "s_per_step": 1.0, "steps": 10, "sample_rounds": 0}
    write_record(tmp_path, "plain", record)
    work = {"steps": 10, "texts": 1, "images": 1, "buckets": buckets}
    same = time_forecast(TrainConfig(**common), base, CPU, plan, False, work, tmp_path)
    assert same["confidence"] == "measured" and same["total_s"] == pytest.approx(18.0)  # 9 x 1 s + 9 s
    cfg = TrainConfig(**common, sample_prompts=["a", "b"], sample_steps=5, sample_every=5)
    forecast = time_forecast(cfg, base, CPU, plan, False, work, tmp_path)
    rounds = {p["name"]: p for p in forecast["phases"]}["sample_rounds"]
    assert rounds["seconds"] == pytest.approx(
        2 * (2 * 5) * SAMPLE_STEP_SHARE
    )  # 2 rounds of 2 prompts x 5 steps
    assert "no sample round" in rounds["basis"] and forecast["confidence"] == "scaled"


def test_records_that_cannot_be_read_or_scaled_are_skipped(tmp_path: Path) -> None:
    from lorastudio.config import TrainConfig
    from lorastudio.jobs.time_forecast import time_forecast
    from lorastudio.timings import HISTORY_DIR, write_record

    base = tmp_path / "base"
    (base / "transformer").mkdir(parents=True)
    os.truncate(_touch(base / "transformer" / "model.safetensors"), 1_000_000)
    write_record(tmp_path, "partial", {"signature": {"device_name": "cpu"}, "phases": {}, "s_per_step": 1.0})
    (tmp_path / HISTORY_DIR / "99999999T-broken.json").write_text("{not json")
    cfg = TrainConfig(family="flux", base_model=str(base), data_dir="d", resolution=256, steps=3)
    plan = {
        "base_precision": "fp32",
        "gradient_checkpointing": "off",
        "offload_blocks": 0,
        "micro_batch_size": 1,
    }
    work = {"steps": 3, "texts": 1, "images": 1, "buckets": {"256x256": 1}}
    forecast = time_forecast(cfg, base, CPU, plan, False, work, tmp_path)
    assert forecast["source"] == "model" and forecast["runs"] == 0


def test_a_preservation_run_is_not_forecast_from_plain_runs_steps(tmp_path: Path) -> None:
    """Differential output preservation is in the signature: its step (x PRESERVATION_STEP a plain
    one) is scaled from plain runs' records, never taken as measured from them."""
    from lorastudio.config import TrainConfig
    from lorastudio.jobs.time_forecast import PRESERVATION_STEP, time_forecast
    from lorastudio.timings import write_record

    base, plan = _cpu_base(tmp_path)
    common = {"family": "flux", "base_model": str(base), "data_dir": "d", "resolution": 256, "steps": 11}
    buckets = {"256x256": 1}
    work = {"steps": 11, "texts": 1, "images": 1, "buckets": buckets}
    signature = _cpu_signature(base, plan, buckets, TrainConfig(**common).lora_rank)
    del signature["preservation"]  # a record written before the key: a plain run
    phases = dict.fromkeys(PHASES, 1.0) | {"steps": 10.0}
    write_record(
        tmp_path, "plain", {"signature": signature, "phases": phases, "s_per_step": 1.0, "steps": 11}
    )
    plain = time_forecast(TrainConfig(**common), base, CPU, plan, False, work, tmp_path)
    assert plain["source"] == "history" and plain["confidence"] == "measured"
    keep = TrainConfig(**common, trigger_word="sks", preservation={"class_word": "shape"})
    dop = time_forecast(keep, base, CPU, plan, False, work, tmp_path)
    steps = {p["name"]: p for p in dop["phases"]}["steps"]
    assert dop["source"] == "machine" and steps["seconds"] == pytest.approx(10 * PRESERVATION_STEP, abs=0.01)
    assert "differential output preservation" in steps["basis"]


def test_the_held_out_captions_count_in_the_caption_encoding_forecast(
    settings: Settings, shapes: Path, tiny_model: Callable[[str], Path]
) -> None:
    """Phase 1 encodes the validation images' captions too: the forecast of a run with
    validation_split counted only the training captions and the sample prompts, so the same
    config, forecast from its own measured run, came out below what that run measured."""
    raw = _raw(tiny_model("flux"), "held", resolution=64, steps=2, save_every=None, sample_every=None)
    raw["validation_split"] = 0.25
    _, run = _forecast(settings, raw)
    _train(settings, run)
    (record,) = read_records(settings.home)
    assert record["texts"] == 6 + 2 + 1  # the training captions, the held-out ones, the prompt
    again, _ = _forecast(settings, {**raw, "output_name": "held2"})
    got = {p["name"]: p["seconds"] for p in again["phases"]}
    assert got["caption_encoding"] == pytest.approx(record["phases"]["caption_encoding"], abs=0.006)


def test_the_preservation_captions_count_in_the_caption_encoding_forecast(
    settings: Settings, shapes: Path, tiny_model: Callable[[str], Path]
) -> None:
    """Phase 1 encodes the captions of differential output preservation too (the captions with
    the trigger word replaced by the class word, or its prompts): the forecast counted only the
    training captions and the sample prompts, so a preservation run's own config, forecast from
    its measured run, came out below what that run measured."""
    raw = _raw(tiny_model("flux"), "dop", resolution=64, steps=2, save_every=None, sample_every=None)
    raw |= {"trigger_word": "sks", "preservation": {"class_word": "shape"}}
    _, run = _forecast(settings, raw)
    _train(settings, run)
    (record,) = read_records(settings.home)
    assert record["texts"] == 8 + 1 + 9  # the captions, the prompt, "shape, <caption>" x 8 and ""
    again, _ = _forecast(settings, {**raw, "output_name": "dop2"})
    got = {p["name"]: p["seconds"] for p in again["phases"]}
    assert got["caption_encoding"] == pytest.approx(record["phases"]["caption_encoding"], abs=0.006)
    prompts = {**raw, "output_name": "dop3", "preservation": {"class_word": "shape", "prompts": ["a", "b"]}}
    fewer, _ = _forecast(settings, prompts)  # its two prompts instead of the 9 class-word captions
    got = {p["name"]: p["seconds"] for p in fewer["phases"]}
    assert got["caption_encoding"] == pytest.approx(record["phases"]["caption_encoding"] * 11 / 18, abs=0.006)
