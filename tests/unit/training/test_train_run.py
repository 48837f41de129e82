"""Real short runs on the tiny FLUX.1 model: stopping, schedule, epochs, buckets, numerics."""

from __future__ import annotations

import json
import math

import pytest
import torch
from diffusers.optimization import get_scheduler

from lorastudio import families
from lorastudio.data import BucketBatchSampler, scan_dataset
from lorastudio.settings import get_settings
from lorastudio.training.events import Complete, StopRequest
from lorastudio.training.loop import train


def _progress(events: list) -> list:
    return [e for e in events if e.type == "progress"]


def _stop_after_steps(events: list, steps: int, save: bool):
    return lambda: StopRequest(save=save) if len(_progress(events)) >= steps else None


def test_stop_with_save_writes_the_lora_of_the_steps_run(make_config):
    events: list = []
    result = train(make_config(steps=5), events.append, _stop_after_steps(events, 2, True), device="cpu")
    assert result.stopped and result.steps_run == 2 and len(result.losses) == 2
    assert result.lora_path is not None and result.lora_path.is_file()
    assert events[-1] == Complete(lora_path=str(result.lora_path), steps_run=2, stopped=True)
    sidecar = json.loads(result.lora_path.with_suffix(".json").read_text())
    assert sidecar["steps"] == 2 and sidecar["total_steps"] == 5 and sidecar["stopped"] is True
    # stop-and-save also writes a checkpoint (resumable) and, with it, the step's LoRA snapshot
    assert sorted(p.name for p in result.lora_path.parent.iterdir()) == [
        "checkpoints",
        "loras",
        "losses.bin",  # the per-step losses the checkpoint names (training/resume/loss_record.py)
        "run.json",
        "run.safetensors",
    ]


def test_stop_without_save_writes_nothing(make_config):
    events: list = []
    result = train(make_config(steps=5), events.append, _stop_after_steps(events, 1, False), device="cpu")
    assert (result.stopped, result.steps_run, result.lora_path) == (True, 1, None)
    assert events[-1] == Complete(lora_path=None, steps_run=1, stopped=True)
    assert not (get_settings().outputs_dir / "run").exists()


def test_stop_while_caching_latents_stops_before_the_denoiser(make_config):
    events: list = []

    def stop_after_two_cached_images():
        cached = [e for e in events if e.type == "preparing" and e.phase == "latents"]
        return StopRequest(save=True) if cached and cached[-1].done >= 2 else None

    result = train(make_config(), events.append, stop_after_two_cached_images, device="cpu")
    assert (result.stopped, result.steps_run, result.lora_path) == (True, 0, None)
    latents = [e for e in events if e.type == "preparing" and e.phase == "latents"]
    assert latents[-1].done == 2 < latents[-1].total
    assert not any(e.type == "model_load_started" and e.component == "denoiser" for e in events)
    assert not (get_settings().outputs_dir / "run").exists()


def test_reported_lr_is_the_schedule(make_config):
    cfg = make_config(steps=6, lr_scheduler="cosine", lr_warmup_steps=2, learning_rate=1e-3)
    events: list = []
    train(cfg, events.append, device="cpu")
    opt = torch.optim.SGD([torch.nn.Parameter(torch.zeros(1))], lr=1e-3)
    sched = get_scheduler("cosine", optimizer=opt, num_warmup_steps=2, num_training_steps=6)
    expected = []
    for _ in range(6):
        expected.append(sched.get_last_lr()[0])
        opt.step()
        sched.step()
    reported = [e.lr for e in _progress(events)]
    assert reported == pytest.approx(expected)
    assert reported[0] == 0.0 and reported[2] == pytest.approx(1e-3) and reported[-1] < reported[2]


@pytest.mark.parametrize(
    ("settings", "option"),
    [
        ({"lr_scheduler": "cosine_with_restarts", "lr_cycles": 2}, {"num_cycles": 2}),
        ({"lr_scheduler": "polynomial", "lr_power": 2.0}, {"power": 2.0}),
    ],
)
def test_a_schedulers_own_option_shapes_the_lr(make_config, settings, option):
    """cosine_with_restarts restarts lr_cycles times and polynomial decays at lr_power: each run's
    LRs are diffusers' schedule with that option, not the cosine / linear schedule they were
    before the options existed (restarts with diffusers' default of one cycle is the cosine)."""
    events: list = []
    train(make_config(steps=6, learning_rate=1e-3, **settings), events.append, device="cpu")
    reported = [e.lr for e in _progress(events)]

    def lrs(name: str, **kwargs) -> list[float]:
        opt = torch.optim.SGD([torch.nn.Parameter(torch.zeros(1))], lr=1e-3)
        sched = get_scheduler(name, optimizer=opt, num_warmup_steps=0, num_training_steps=6, **kwargs)
        out = []
        for _ in range(6):
            out.append(sched.get_last_lr()[0])
            opt.step()
            sched.step()
        return out

    assert reported == pytest.approx(lrs(settings["lr_scheduler"], **option))
    plain = lrs("cosine" if "num_cycles" in option else "linear")
    assert reported != pytest.approx(plain, rel=1e-3)
    if "num_cycles" in option:  # the second cycle starts again at the peak
        assert reported[3] == pytest.approx(1e-3) and reported[2] < reported[3]


def test_num_epochs_overrides_steps_with_buckets_and_accumulation(make_config, small_dataset):
    cfg = make_config(resolution=64, num_epochs=2, steps=99, batch_size=2, grad_accum=2)
    scan = scan_dataset(small_dataset, resolution=64, multiple=16)
    assert len({it.bucket for it in scan.items}) == 2  # the non-square image has its own bucket
    batches = len(BucketBatchSampler([it.bucket for it in scan.items], 2, seed=0))
    expected = 2 * math.ceil(batches / 2)
    events: list = []
    result = train(cfg, events.append, device="cpu")
    progress = _progress(events)
    assert result.steps_run == expected == len(progress)
    assert {e.total_steps for e in progress} == {expected}
    assert [e.epoch for e in progress] == [1] * (expected // 2) + [2] * (expected // 2)
    assert progress[0].samples_per_second is None and progress[-1].samples_per_second > 0
    assert all(e.grad_norm is not None and e.peak_memory_gb > 0 for e in progress)


def test_every_batch_comes_from_one_bucket(make_config, tiny_model, monkeypatch):
    flux = families.get("flux")
    seen: list[tuple] = []

    class RecordingFlux(type(flux)):
        def predict(self, denoiser, noisy, noise_level, cond, batch_info, cfg):
            seen.append((tuple(noisy.shape), batch_info["target_size"], len(batch_info["original_size"])))
            return super().predict(denoiser, noisy, noise_level, cond, batch_info, cfg)

    monkeypatch.setitem(families._loaded, "flux", RecordingFlux())
    cfg = make_config(base_model=str(tiny_model("flux")), resolution=64, batch_size=3, num_epochs=3)
    train(cfg, [].append, device="cpu")
    scale = flux.spec.vae_scale_factor
    sizes = set()
    for shape, (height, width), n in seen:
        assert shape[0] == n and shape[2:] == (height // scale, width // scale)
        sizes.add((height, width))
    assert sizes == {(64, 64), (48, 80)}  # both buckets trained, each batch of one size
    assert {shape[0] for shape, _, _ in seen} == {3, 1}


def test_same_seed_same_run_other_seed_other_run(make_config):
    a = train(make_config(steps=3), [].append, device="cpu").losses
    get_settings().outputs_dir.joinpath("run").rename(get_settings().outputs_dir / "first")
    b = train(make_config(steps=3), [].append, device="cpu").losses
    c = train(make_config(steps=3, seed=1, output_name="other"), [].append, device="cpu").losses
    assert a == b and a != c


@pytest.mark.parametrize("enable_tf32, during", [(True, "high"), (False, "highest")])
def test_matmul_precision_is_set_for_the_run_and_restored(make_config, enable_tf32, during):
    observed = []
    events: list = []

    def poll() -> None:  # the polls of the run's phases (the preflight's decode scan polls before them)
        if any(e.type == "model_load_started" for e in events):
            observed.append(torch.get_float32_matmul_precision())

    torch.set_float32_matmul_precision("medium")
    try:
        train(make_config(enable_tf32=enable_tf32), events.append, poll, device="cpu")
        assert observed and set(observed) == {during}
        assert torch.get_float32_matmul_precision() == "medium"
    finally:
        torch.set_float32_matmul_precision("highest")


def test_sidecar_describes_the_run(make_config, small_dataset):
    result = train(make_config(trigger_word="sks", lora_alpha=8.0), [].append, device="cpu")
    sidecar = json.loads(result.lora_path.with_suffix(".json").read_text())
    scan = scan_dataset(small_dataset, resolution=32, multiple=16, trigger_word="sks")
    assert sidecar["family"] == "flux" and sidecar["rank"] == 4 and sidecar["alpha"] == 8.0
    assert sidecar["steps"] == 2 and sidecar["stopped"] is False and sidecar["resolution"] == 32
    assert sidecar["trigger_word"] == "sks" and sidecar["dataset"]["fingerprint"] == scan.fingerprint
    assert sidecar["config"]["learning_rate"] == 5e-3 and sidecar["config"]["output_name"] == "run"
    assert (
        sidecar["lora_file"] == "run.safetensors" and sidecar["created_at"] and sidecar["lorastudio_version"]
    )


def test_caption_dropout_encodes_the_empty_caption(make_config, small_dataset):
    events: list = []
    train(make_config(caption_dropout=0.5), events.append, device="cpu")
    unique = len({p.read_text().strip() for p in small_dataset.glob("*.txt")})
    conditioning = [e for e in events if e.type == "preparing" and e.phase == "conditioning"]
    assert conditioning[-1].total == unique + 1
