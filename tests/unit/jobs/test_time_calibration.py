"""What the wall-time forecast measures on the host that runs rather than assumes (issue 31 item
5, bench/RESULTS note 46): the CPU's rate from the runs' own matmul probe (RELIABILITY 1210), the
text tokens a non-padding family's captions give its denoiser (1211), a sample round's fixed
part as a run measured it (1212). Each test is in-process and tiny; the real runs' comparison is
the matrix (bench/forecast_matrix.py) and the slow fit test."""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path

import pytest
import torch

from lorastudio import families
from lorastudio.config import TrainConfig
from lorastudio.jobs.hardware import HostInfo, precisions_for
from lorastudio.jobs.preflight import preflight_report
from lorastudio.jobs.time_forecast import time_forecast
from lorastudio.jobs.time_rate import CPU_WORK_RATE, CPU_WORK_SHARE, device_rate
from lorastudio.jobs.time_work import scaled, seen_text_tokens, step_work
from lorastudio.jobs.validation import validate_run
from lorastudio.settings import Settings
from lorastudio.timings import PHASES, run_signature, write_record
from lorastudio.training.planning.cpu_rate import probe_cpu_rate
from lorastudio.training.planning.run_timings import conditioning_tokens

CPU = HostInfo("cpu", "cpu", None, precisions_for("cpu"))
PLAN = {"base_precision": "fp32", "gradient_checkpointing": "off", "offload_blocks": 0, "micro_batch_size": 1}


def _signature(family: str, base: Path, side: int, denoiser: str = "transformer") -> dict:
    return run_signature(
        family=family, base_model=str(base), denoiser=denoiser, device_name="cpu", plan=PLAN,
        compiled=False, attention_backend="auto", buckets={f"{side}x{side}": 1}, batch_size=1,
        grad_accum=1, lora_rank=4,
    )  # fmt: skip


def _record(family: str, base: Path, side: int, step: float, **extra: object) -> dict:
    phases = dict.fromkeys(PHASES, 1.0) | {"steps": step * 10, "first_step": step, "sample_rounds": 0.0}
    record = {"signature": _signature(family, base, side), "phases": phases, "s_per_step": step, "steps": 11}
    return record | {"texts": 1, "latents_encoded": 1, "sample_rounds": 0} | extra


def _phase(forecast: dict, name: str) -> dict:
    return next(p for p in forecast["phases"] if p["name"] == name)


def test_the_cpu_rate_is_this_hosts_probe_not_the_2_core_hosts_constant(
    tiny_model: Callable[[str], Path], tmp_path: Path
) -> None:
    """Records that carry their run's matmul probe split into fixed and work parts at
    CPU_WORK_SHARE x the probes' median; before, every CPU was the 2-core host (12 GFLOP/s), so a
    CPU 4x faster kept 4x too much of a record as work and scaled it."""
    probe = probe_cpu_rate()  # the engine's probe, as a CPU run writes it
    assert probe["matmul_flops"] > 1e8 and probe["threads"] == torch.get_num_threads()
    assert probe["torch"] == torch.__version__
    rates = [{"matmul_flops": f, "threads": 1, "torch": torch.__version__} for f in (1.6e11, 2e11, 4e11)]
    records = [{"signature": {"family": "flux"}, "s_per_step": 1.0, "cpu_rate": r} for r in rates]
    rate, words = device_rate(records, "cpu", ("family",))
    assert rate == pytest.approx(CPU_WORK_SHARE * 2e11) and "probed by 3 runs" in words
    assert device_rate([{"signature": {}, "s_per_step": 1.0}], "cpu", ("family",))[0] == CPU_WORK_RATE

    # one record of the tiny FLUX.1 at 256 px, its step 0.5 s, forecasts 1024 px at this rate
    base = tiny_model("flux")
    write_record(tmp_path, "r256", _record("flux", base, 256, 0.5, cpu_rate=rates[1]))
    common = {"family": "flux", "base_model": str(base), "data_dir": "d", "steps": 11, "lora_rank": 4}
    work = {"steps": 11, "texts": 1, "images": 1, "buckets": {"1024x1024": 1}}
    forecast = time_forecast(TrainConfig(**common, resolution=1024), base, CPU, PLAN, False, work, tmp_path)
    then, now = (step_work("flux", str(base), side * side, 1) for side in (256, 1024))
    expected = scaled(0.5, then, now, CPU_WORK_SHARE * 2e11) * 10
    assert _phase(forecast, "steps")["seconds"] == pytest.approx(expected, abs=0.01)
    assert abs(expected - scaled(0.5, then, now, CPU_WORK_RATE) * 10) > 0.1  # the constant's forecast
    assert "matmul rate, probed by 1 run" in _phase(forecast, "steps")["basis"]


def test_a_non_padding_familys_step_counts_its_captions_tokens(
    settings: Settings, shapes: Path, tiny_model: Callable[[str], Path]
) -> None:
    """Z-Image and Qwen-Image cut their captions' embeddings to the caption's tokens (Z-Image's
    transformer pads them to 32): the preflight counts the run's captions (the count child of
    dataset.caption_tokens) and the engine's record keeps its embeddings' lengths, and a step's
    work is counted at those, where it was counted at max_sequence_length (512) on both sides."""
    z_image, qwen, flux = (families.get(f).spec for f in ("z-image", "qwen-image", "flux"))
    assert seen_text_tokens(z_image, [20, 40], 512) == 48.0  # 32 and 64: the transformer's multiple
    assert seen_text_tokens(qwen, [20, 40, 900], 512) == pytest.approx((20 + 40 + 512) / 3)
    assert seen_text_tokens(flux, [20], 512) is None  # T5's 512 padded tokens are what it sees
    assert seen_text_tokens(families.get("qwen-image-edit").spec, [20], None) is None  # not counted
    conds = {"a": {"cap_feats": torch.zeros(20, 8)}, "b": {"cap_feats": torch.zeros(40, 8)}}  # [L, D]
    assert conditioning_tokens(z_image, conds, ["a", "b", "a"]) == 48.0
    assert conditioning_tokens(flux, {"a": {"prompt_embeds": torch.zeros(512, 8)}}, ["a"]) is None

    model = tiny_model("z-image")
    assert step_work("z-image", str(model), 65536, 1, 32) < step_work("z-image", str(model), 65536, 1)
    # a record at 256 px whose captions gave 32 tokens; the preflight of the 512 px run counts its own
    write_record(settings.home, "r256", _record("z-image", model, 256, 0.5, text_tokens=32.0))
    raw = {"family": "z-image", "base_model": str(model), "data_dir": "shapes", "resolution": 512}
    run = validate_run(
        raw | {"steps": 11, "lora_rank": 4, "output_name": "z"}, settings, live_output_names=set()
    )
    report = preflight_report(run, host=CPU, home=settings.home)
    assert report["dataset"]["caption_tokens"]["counted"]
    then = step_work("z-image", str(model), 256 * 256, 1, 32.0)
    now = step_work("z-image", str(model), 512 * 512, 1, 32.0)  # the shapes' captions: < 32 tokens each
    assert _phase(report["time"], "steps")["seconds"] == pytest.approx(
        scaled(0.5, then, now, CPU_WORK_RATE) * 10, abs=0.01
    )


def test_a_sample_rounds_fixed_part_is_kept_as_measured(
    tiny_model: Callable[[str], Path], tmp_path: Path
) -> None:
    """A round's fixed part (the VAE, the pipeline's assembly, the PNGs: SamplePreviews.fixed_s,
    the record's sample_fixed_s) is kept, not scaled, and stands in where this signature's runs
    sampled nothing; before, such a round was its forward passes and decodes alone
    (flux-256-sample, bench/RESULTS note 42: 0.3 s forecast, 0.7-1.5 measured)."""
    base = tiny_model("flux")
    common = {"family": "flux", "base_model": str(base), "data_dir": "d", "steps": 11, "lora_rank": 4}
    sampled = {"sample_prompts": ["a red circle"], "sample_steps": 2}
    work = {"steps": 11, "texts": 1, "images": 1, "buckets": {"256x256": 1}}
    # this signature never sampled; a 1024 px run on this host did, its round 0.8 s beyond its renders
    other = _record("flux", base, 1024, 1.0, sample_rounds=1, sample_work=2, sample_images=1)
    other["phases"]["sample_rounds"] = 3.0
    write_record(
        tmp_path,
        "sampled",
        other | {"sample_fixed_s": 0.8, "signature": _signature("flux", base, 1024) | {"lora_rank": 8}},
    )
    write_record(tmp_path, "plain", _record("flux", base, 256, 0.5))
    cfg = TrainConfig(**common, **sampled, resolution=256)
    rounds = _phase(time_forecast(cfg, base, CPU, PLAN, False, work, tmp_path), "sample_rounds")
    assert "a round's fixed part, 0.8 s as earlier flux runs here measured it" in rounds["basis"]
    without = tmp_path / "without"
    write_record(without, "plain", _record("flux", base, 256, 0.5))
    bare = _phase(time_forecast(cfg, base, CPU, PLAN, False, work, without), "sample_rounds")
    assert rounds["seconds"] == pytest.approx(bare["seconds"] + 0.8, abs=0.01)

    # one record with a round: its fixed part kept, the rest scaled by the round's work
    one = tmp_path / "one"
    mine = _record(
        "flux", base, 1024, 1.0, sample_rounds=1, sample_work=2, sample_images=1, sample_fixed_s=0.8
    )
    mine["phases"]["sample_rounds"] = 3.0
    write_record(one, "r1024", mine)
    small = _phase(time_forecast(cfg, base, CPU, PLAN, False, work, one), "sample_rounds")
    from lorastudio.jobs.time_forecast import FORWARD_RATE
    from lorastudio.jobs.time_work import round_work

    then, now = (round_work("flux", str(base), s * s, 2, 1) for s in (1024, 256))
    assert small["seconds"] == pytest.approx(
        0.8 + scaled(2.2, then, now, FORWARD_RATE * CPU_WORK_RATE), abs=0.01
    )


def test_each_phase_is_kept_on_the_cpu_clock_beside_the_wall_clock() -> None:
    """A run's record keeps its phases on the process's CPU clock too (PhaseClock.cpu_stamped):
    what its work cost whatever else the shared host ran, so a forecast's cost model can be
    checked against CPU seconds where the host's load moves wall time 2-6x (RESULTS note 46). A
    load's CPU seconds come from its start's and end's stamps (its event's `seconds` are wall)."""
    from types import SimpleNamespace

    from lorastudio.timings import PhaseClock, phase_seconds

    wall, cpu = iter([0.0, 1.0, 5.0, 9.0, 10.0]), iter([0.0, 0.5, 1.5, 2.5, 3.0])
    clock = PhaseClock(clock=lambda: next(wall), cpu_clock=lambda: next(cpu))
    events = [
        {"type": "model_load_started", "component": "vae"},
        {"type": "model_load_completed", "component": "vae", "seconds": 4.0, "waited_s": None},
        {"type": "complete", "lora_path": "x", "steps_run": 0, "stopped": False},
    ]
    seen: list[object] = []
    emit = clock.wrap(seen.append)
    for event in events:
        emit(SimpleNamespace(model_dump=lambda mode, e=event: e))
    assert [t for t, _ in clock.stamped] == [1.0, 5.0, 9.0] and len(seen) == 3
    assert [t for t, _ in clock.cpu_stamped] == [0.5, 1.5, 2.5]
    assert clock.cpu_elapsed() == 3.0
    on_cpu = phase_seconds(clock.cpu_stamped, None, end=3.0, loads_by_stamps=True)
    assert on_cpu["phases"]["weights_load"] == pytest.approx(1.0)  # 1.5 - 0.5, not the 4 wall seconds
    assert on_cpu["total_s"] == 3.0 and sum(on_cpu["phases"].values()) == pytest.approx(3.0)
    assert phase_seconds(clock.stamped, None, end=10.0)["phases"]["weights_load"] == 4.0


def test_records_that_sampled_nothing_leave_the_round_to_one_that_did(
    tiny_model: Callable[[str], Path], tmp_path: Path
) -> None:
    """Of a signature's newest runs one sampled (a 1.0 s round) and two did not: the round is that
    run's. Before, each run that sampled nothing added its guess from its step time to the median
    (flux-1024-sample, RESULTS note 46: 17.4 s forecast from two such guesses, 5.4 s measured)."""
    base = tiny_model("flux")
    common = {"family": "flux", "base_model": str(base), "data_dir": "d", "steps": 11, "lora_rank": 4}
    work = {"steps": 11, "texts": 1, "images": 1, "buckets": {"256x256": 1}}
    sampled = _record("flux", base, 256, 0.5, sample_rounds=1, sample_work=2, sample_images=1)
    sampled["phases"]["sample_rounds"] = 1.0
    write_record(tmp_path, "sampled", sampled)
    for name in ("plain-1", "plain-2"):  # newer, slower steps: their guesses would be ~4x the round
        write_record(tmp_path, name, _record("flux", base, 256, 3.0))
    cfg = TrainConfig(**common, resolution=256, sample_prompts=["a red circle"], sample_steps=2)
    rounds = _phase(time_forecast(cfg, base, CPU, PLAN, False, work, tmp_path), "sample_rounds")
    assert rounds["seconds"] == pytest.approx(1.0)
    # a run of this very size that sampled nothing beside one of another size that did (the
    # matrix's flux-1024-sample: flux-1024 measured, flux-256-sample sampled): the round is the
    # sampled run's, scaled by the round's work to this size
    other = tmp_path / "other"
    write_record(other, "sampled", sampled)
    write_record(other, "exact", _record("flux", base, 1024, 3.0))
    work_1024 = work | {"buckets": {"1024x1024": 1}}
    cfg_1024 = TrainConfig(**common, resolution=1024, sample_prompts=["a red circle"], sample_steps=2)
    forecast = time_forecast(cfg_1024, base, CPU, PLAN, False, work_1024, other)
    from lorastudio.jobs.time_forecast import _SAME, FORWARD_RATE
    from lorastudio.jobs.time_work import round_work
    from lorastudio.timings import read_records

    then, now = (round_work("flux", str(base), s * s, 2, 1) for s in (256, 1024))
    rate = device_rate(read_records(other), "cpu", _SAME)[0]  # the two sizes' slope
    expected = scaled(1.0, then, now, FORWARD_RATE * rate)
    assert _phase(forecast, "sample_rounds")["seconds"] == pytest.approx(expected, abs=0.01)
    assert "that sampled" in _phase(forecast, "sample_rounds")["basis"]


def test_the_cpu_probe_draws_nothing_from_the_global_rng() -> None:
    """RELIABILITY 1242: the probe, run as train() returns (a CPU run's timings), made its
    operands with torch.randn from the global RNG: the first run of a process moved its caller's
    stream (the next draw after train() differed from the same code run where the probe was
    cached or not run), against the engine's rule that nothing outside training draws from it."""
    from lorastudio.training.planning import cpu_rate

    cpu_rate._probe.cache_clear()
    torch.manual_seed(5)
    probe_cpu_rate()
    after_probe = torch.rand(4)
    torch.manual_seed(5)
    assert torch.equal(after_probe, torch.rand(4))
