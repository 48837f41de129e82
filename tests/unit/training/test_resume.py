"""Exact resume on the tiny models: a run stopped at step k and resumed gives the same per-step
losses and the same final LoRA as an uninterrupted run, bitwise on CPU, for every family and
across two successive resumes; a resume whose identity differs is refused naming each field."""

from __future__ import annotations

import json

import pytest
import torch
from safetensors.torch import load_file

from lorastudio import families
from lorastudio.config import TrainConfig, parse_train_config
from lorastudio.config_resolve import spec_rule_problems
from lorastudio.errors import ConfigError, NotFound
from lorastudio.settings import get_settings
from lorastudio.training.loop import TrainResult, train
from lorastudio.training.resume.checkpoint import (
    find_checkpoint,
    list_checkpoints,
    read_checkpoint_info,
    resume_settings,
)
from stop_at import stop_at

# every random stream of the loop matters: crops/flips/caption dropout (numpy), variants/noise/
# timesteps (torch generator), LoRA dropout (torch global)
AUGMENTED = {
    "steps": 6,
    "random_flip": True,
    "random_crop": True,
    "cache_variants": 2,
    "caption_dropout": 0.3,
    "lora_dropout": 0.1,
    "lr_scheduler": "cosine",
}


def _weights(result: TrainResult) -> dict[str, torch.Tensor]:
    assert result.lora_path is not None
    return load_file(str(result.lora_path))


def _assert_same_lora(a: dict[str, torch.Tensor], b: dict[str, torch.Tensor]) -> None:
    assert a.keys() == b.keys() and a
    assert all(torch.equal(a[k], b[k]) for k in a)


def _progress_losses(events: list) -> list[float]:
    return [e.loss for e in events if e.type == "progress"]


def _augmented(family: str, make_config) -> dict:
    """AUGMENTED less the settings the family refuses (its hooks' Family.config_problems and its
    FamilySpec's declarative refusals, e.g. Qwen-Image-Edit's random_flip)."""
    cfg, fam = make_config(family, **AUGMENTED), families.get(family)
    problems = fam.config_problems(cfg) + spec_rule_problems(cfg, fam.spec)
    refused = {p.field for p in problems}
    return {k: v for k, v in AUGMENTED.items() if k not in refused}


@pytest.mark.parametrize("family", families.names())
def test_stop_and_resume_is_bitwise_the_uninterrupted_run(family, make_config):
    augmented = _augmented(family, make_config)
    full = train(make_config(family, output_name="full", **augmented), [].append, device="cpu")
    events, stop = stop_at(2)
    first = train(make_config(family, output_name="part", **augmented), events.append, stop, device="cpu")
    assert first.stopped and first.steps_run == 2 and first.losses == full.losses[:2]
    run_dir = get_settings().outputs_dir / "part"
    assert [p.name for p in list_checkpoints(run_dir)] == ["step-000002"]

    resumed_events: list = []
    cfg = make_config(family, output_name="part", **augmented)
    resumed = train(cfg, resumed_events.append, device="cpu", resume=run_dir)
    assert resumed.resumed_from == 2 and not resumed.stopped and resumed.steps_run == 6
    assert _progress_losses(resumed_events) == full.losses[2:]
    assert [e.step for e in resumed_events if e.type == "progress"] == [3, 4, 5, 6]
    assert resumed.losses == full.losses
    _assert_same_lora(_weights(full), _weights(resumed))
    assert resumed.lora_path is not None and resumed.lora_path.parent == run_dir
    sidecar = json.loads(resumed.lora_path.with_suffix(".json").read_text())
    assert sidecar["steps"] == 6 and sidecar["stopped"] is False


def test_two_successive_resumes_with_epochs_and_accumulation(make_config):
    settings = {"num_epochs": 3, "batch_size": 1, "grad_accum": 3, "resolution": 64, **AUGMENTED}
    full = train(make_config(output_name="full", **settings), [].append, device="cpu")
    assert full.steps_run == 6  # 3 epochs x ceil(4 batches / 3)
    events, stop = stop_at(1)
    train(make_config(output_name="run", **settings), events.append, stop, device="cpu")
    run_dir = get_settings().outputs_dir / "run"
    first_state = run_dir / "checkpoints" / "step-000001" / "state.pt"
    state = torch.load(first_state, weights_only=True)
    assert state["device_name"] == "cpu" and state["dtype_path"].startswith("float32 compute, fp32 matmul ")
    torch.save({**state, "device_name": "NVIDIA H100 80GB HBM3"}, first_state)  # as if written there (1873)
    events, stop = stop_at(4)  # the step numbers continue across the resume
    second = train(
        make_config(output_name="run", **settings), events.append, stop, device="cpu", resume=run_dir
    )
    assert (second.resumed_from, second.steps_run, second.stopped) == (1, 4, True)
    (elsewhere,) = [e.message for e in events if e.type == "warning" and "device kind" in e.message]
    assert elsewhere.startswith("this resume runs on cpu, step-000001 was written on NVIDIA H100 80GB HBM3")
    third_events: list = []
    third = train(
        make_config(output_name="run", **settings), third_events.append, device="cpu", resume=run_dir
    )
    assert third.resumed_from == 4 and third.losses == full.losses
    assert not [e for e in third_events if e.type == "warning" and "thread" in e.message]  # the same count
    assert not [e for e in third_events if e.type == "warning" and "this resume" in e.message]  # and machine
    state = torch.load(run_dir / "checkpoints" / "step-000004" / "state.pt", weights_only=True)
    assert state["cpu_threads"] == torch.get_num_threads() == 1  # what a resume compares (1791)
    assert [e.epoch for e in third_events if e.type == "progress"] == [3, 3]
    _assert_same_lora(_weights(full), _weights(third))


def test_resume_with_per_step_encoding_and_the_settings_of_the_checkpoint(make_config):
    settings = {**AUGMENTED, "latent_cache": "off", "steps": 4}  # crops drawn every step: nothing cached
    del settings["cache_variants"]  # (refused with "off": config_cache.latent_cache_problems)
    full = train(make_config(output_name="full", **settings), [].append, device="cpu")
    events, stop = stop_at(2)
    train(make_config(output_name="run", **settings), events.append, stop, device="cpu")
    checkpoint = find_checkpoint(get_settings().outputs_dir / "run")
    raw = resume_settings(read_checkpoint_info(checkpoint), {"save_every": 1, "keep_last": 5})
    resumed = train(parse_train_config(raw), [].append, device="cpu", resume=checkpoint)
    assert resumed.losses == full.losses
    _assert_same_lora(_weights(full), _weights(resumed))
    steps = [int(p.name.split("-")[1]) for p in list_checkpoints(checkpoint.parent.parent)]
    assert steps == [2, 3]  # save_every changed on resume; no checkpoint at the final step


def test_a_resume_whose_identity_differs_names_every_field(make_config):
    events, stop = stop_at(1)
    train(make_config(steps=4), events.append, stop, device="cpu")
    run_dir = get_settings().outputs_dir / "run"
    before = sorted(p.name for p in run_dir.rglob("*"))
    with pytest.raises(ConfigError) as err:
        train(make_config(steps=4, learning_rate=1e-3, lora_rank=8), [].append, device="cpu", resume=run_dir)
    assert {p.field for p in err.value.problems} == {
        "learning_rate",
        "lora_rank",
        "lora_alpha",
    }  # alpha = rank
    assert "checkpoint: 0.005, this run: 0.001" in str(err.value)
    with pytest.raises(ConfigError, match="steps"):  # fewer steps (more: training longer, test_extend.py)
        train(make_config(steps=3), [].append, device="cpu", resume=run_dir)
    assert sorted(p.name for p in run_dir.rglob("*")) == before  # a refused resume changes nothing


def test_a_resume_refuses_a_changed_dataset(make_config, small_dataset, tmp_path):
    import shutil

    data = tmp_path / "data"
    shutil.copytree(small_dataset, data)
    events, stop = stop_at(1)
    train(make_config(steps=4, data_dir=str(data)), events.append, stop, device="cpu")
    sorted(data.glob("*.txt"))[0].write_text("another caption")
    with pytest.raises(ConfigError, match="dataset_fingerprint"):
        train(
            make_config(steps=4, data_dir=str(data)),
            [].append,
            device="cpu",
            resume=get_settings().outputs_dir / "run",
        )


def test_a_resume_refuses_a_base_replaced_in_place(make_config, tiny_model, tmp_path):
    """The base folder's path was the only trace of the base in the identity: a folder whose
    weights were replaced (another checkpoint saved over it, a re-fetched snapshot) resumed
    silently on the new weights, a LoRA of neither base. Its content fingerprint is now compared;
    a checkpoint from before it was recorded still resumes."""
    import shutil

    from lorastudio.tiny import save_tiny_model

    base = tmp_path / "base"
    shutil.copytree(tiny_model("flux"), base)
    events, stop = stop_at(1)
    train(make_config(steps=3, base_model=str(base)), events.append, stop, device="cpu")
    run_dir = get_settings().outputs_dir / "run"
    checkpoint = find_checkpoint(run_dir)
    info = read_checkpoint_info(checkpoint)
    assert info["identity"]["base_fingerprint"]
    shutil.rmtree(base)
    save_tiny_model("flux", base, seed=1)  # the same folder, other weights
    before = sorted(p.name for p in run_dir.rglob("*"))
    with pytest.raises(ConfigError) as err:
        train(make_config(steps=3, base_model=str(base)), [].append, device="cpu", resume=run_dir)
    assert [p.field for p in err.value.problems] == ["base_model"]
    assert "the base model's weights differ from those the checkpoint was trained on" in str(err.value)
    assert sorted(p.name for p in run_dir.rglob("*")) == before
    # a checkpoint written before the fingerprint was recorded: resumed, not compared
    identity_file = checkpoint / "identity.json"
    saved = json.loads(identity_file.read_text())
    del saved["identity"]["base_fingerprint"]
    identity_file.write_text(json.dumps(saved))
    result = train(make_config(steps=3, base_model=str(base)), [].append, device="cpu", resume=run_dir)
    assert result.steps_run == 3


def test_overrides_that_change_the_maths_are_refused(make_config):
    events, stop = stop_at(1)
    train(make_config(steps=3), events.append, stop, device="cpu")
    info = read_checkpoint_info(find_checkpoint(get_settings().outputs_dir / "run"))
    assert info["step"] == 1 and info["total_steps"] == 3 and info["identity"]["dataset_fingerprint"]
    with pytest.raises(ConfigError) as err:
        resume_settings(info, {"seed": 1, "batch_size": 1, "save_every": 2})
    assert [p.field for p in err.value.problems] == ["batch_size", "seed"]
    assert resume_settings(info, {"save_every": 2})["save_every"] == 2


def test_nothing_to_resume(make_config, tmp_path):
    with pytest.raises(NotFound, match="no checkpoint"):
        train(make_config(), [].append, device="cpu", resume=tmp_path)
    assert TrainConfig.model_fields["save_every"].default is None
    result = train(make_config(steps=2), [].append, device="cpu")  # no save_every: no checkpoint
    assert list_checkpoints(result.lora_path.parent) == []


def test_cli_resume_from_a_run_folder(make_config, tmp_path):
    from typer.testing import CliRunner

    from lorastudio.cli.app import _register, app

    if not app.registered_commands:
        _register()
    events, stop = stop_at(2)
    full = train(make_config(steps=4, output_name="full"), [].append, device="cpu")
    train(make_config(steps=4), events.append, stop, device="cpu")
    run_dir = get_settings().outputs_dir / "run"
    refused = CliRunner().invoke(app, ["train", "--resume", str(run_dir), "--set", "seed=3"])
    assert refused.exit_code == 2 and "seed" in refused.output and "cannot change on resume" in refused.output
    assert CliRunner().invoke(app, ["train"]).exit_code == 2
    result = CliRunner().invoke(
        app, ["train", "--resume", str(run_dir), "--set", "keep_last=1", "--device", "cpu"]
    )
    assert result.exit_code == 0, result.output
    assert "resumed from step 2" in result.output and "done: 4 step(s)" in result.output
    _assert_same_lora(load_file(str(full.lora_path)), load_file(str(run_dir / "run.safetensors")))


def test_another_cpu_thread_count_than_the_checkpoints_is_said(tmp_path):
    """RELIABILITY 1791 without a run (the slow test below runs one): a CPU resume at another
    count than state.pt's names both and the fix; the same count, an accelerator or an older
    checkpoint without the count say nothing."""
    from lorastudio.training.resume.snapshot import thread_note

    here = torch.get_num_threads()
    said = thread_note(tmp_path / "step-000003", here + 1, "cpu")
    assert said is not None and f"runs at {here} CPU thread(s), step-000003 was written at {here + 1}" in said
    assert f"OMP_NUM_THREADS={here + 1}" in said
    assert thread_note(tmp_path, here, "cpu") is thread_note(tmp_path, here + 1, "cuda") is None
    assert thread_note(tmp_path, None, "cpu") is None


def test_another_device_kind_or_dtype_path_than_the_checkpoints_is_said(tmp_path):
    """RELIABILITY 1873 without a run (test_two_successive_resumes_... resumes one): a resume on
    another device kind or dtype path than state.pt's names both; the same, or a checkpoint
    written before the keys, says nothing."""
    from lorastudio.training.resume.machine_record import dtype_path, machine_notes

    here = dtype_path(torch.float32)
    recorded = {"device_name": "NVIDIA H200", "dtype_path": "bfloat16 compute, fp32 matmul high"}
    device, path = machine_notes(tmp_path / "step-000003", recorded, "NVIDIA H100 80GB HBM3", here)
    assert device.startswith(
        "this resume runs on NVIDIA H100 80GB HBM3, step-000003 was written on NVIDIA H200"
    )
    assert "resume on NVIDIA H200" in device
    assert f"computes in {here}, step-000003 was written computing in bfloat16 compute" in path
    assert machine_notes(tmp_path, recorded, "NVIDIA H200", recorded["dtype_path"]) == []
    assert machine_notes(tmp_path, {"step": 3}, "cpu", here) == []  # written before 1873


@pytest.mark.slow
def test_a_cpu_resume_at_another_thread_count_says_it_is_not_bitwise(make_config):
    """A CPU run's sums round otherwise at another torch thread count (1 vs 2 threads: the first
    loss differs in its 8th digit, RELIABILITY "Session 38 reproducibility audit"), so a resume
    there is not the uninterrupted run: since RELIABILITY 1791 state.pt records the count and
    such a resume says so (was: nothing, though README promises a bitwise resume)."""
    events, stop = stop_at(1)
    cfg = make_config(steps=2, batch_size=1)
    train(cfg, events.append, stop, device="cpu")
    run_dir = get_settings().outputs_dir / "run"
    state = torch.load(run_dir / "checkpoints" / "step-000001" / "state.pt", weights_only=True)
    assert state["cpu_threads"] == torch.get_num_threads() == 1
    previous = torch.get_num_threads()
    torch.set_num_threads(2)
    try:
        resumed: list = []
        train(cfg, resumed.append, device="cpu", resume=run_dir)
    finally:
        torch.set_num_threads(previous)
    (said,) = [e.message for e in resumed if e.type == "warning" and "thread" in e.message]
    assert "runs at 2 CPU thread(s), step-000001 was written at 1" in said
    assert "OMP_NUM_THREADS=1" in said
