"""Issue 29 part 6, the validation loss on the tiny FLUX.1 / SDXL: a seeded hold-out never trained
on, rounds every validate_every steps at fixed noise (identical for two runs with the same seed,
no effect on the training maths), the best / last LoRA marked and kept, an exact resume, and the
refusals."""

from __future__ import annotations

import json

import pytest
import torch
from PIL import Image, ImageOps
from safetensors.torch import load_file

import lorastudio.training.optimize as optimize_module
from lorastudio.config import parse_train_config
from lorastudio.errors import ConfigError
from lorastudio.settings import get_settings
from lorastudio.training.events import StopRequest
from lorastudio.training.loop import train
from lorastudio.training.preflight import preflight
from lorastudio.training.resume.checkpoint import find_checkpoint, read_checkpoint_info, resume_settings
from lorastudio.training.validation_file import read_validation
from stop_at import stop_at


def _rounds(events: list) -> list:
    return [e for e in events if e.type == "validation"]


def test_the_same_seed_gives_the_same_validation_series_and_training_is_unchanged(make_config):
    common = {"steps": 3, "validation_split": 0.25, "batch_size": 1}
    first: list = []
    a = train(make_config(output_name="a", validate_every=1, **common), first.append, device="cpu")
    second: list = []
    b = train(make_config(output_name="b", validate_every=1, **common), second.append, device="cpu")
    assert [(e.step, e.loss) for e in _rounds(first)] == [(e.step, e.loss) for e in _rounds(second)]
    assert [e.step for e in _rounds(first)] == [1, 2, 3]
    assert all(e.images == 1 for e in _rounds(first))  # 0.25 of 4 images
    assert len({e.loss for e in _rounds(first)}) == 3  # the LoRA changes, so does its loss
    # validating changes nothing of the training: same losses, same LoRA as a run that validates
    # only after its last step
    c = train(make_config(output_name="c", **common), [].append, device="cpu")
    assert a.losses == b.losses == c.losses
    wa, wc = load_file(str(a.lora_path)), load_file(str(c.lora_path))
    assert all(torch.equal(wa[k], wc[k]) for k in wa)


def test_held_out_images_are_never_trained_on(make_config, monkeypatch):
    cfg = make_config(output_name="held", steps=4, num_epochs=2, validation_split=0.5, batch_size=1)
    run = preflight(cfg, get_settings(), "cpu")
    held = {it.path.name for it in run.validation}
    assert len(held) == 2 and not held & {it.path.name for it in run.scan.items}
    seen: list[str] = []
    real = optimize_module._micro_step

    def recording(run, state, source, conds, picker, objective, indices, *rest):
        seen.extend(run.scan.items[i].path.name for i in indices)
        return real(run, state, source, conds, picker, objective, indices, *rest)

    monkeypatch.setattr(optimize_module, "_micro_step", recording)
    result = train(cfg, [].append, device="cpu")
    assert result.steps_run == 4  # 2 epochs of the 2 training images
    assert sorted(seen) == sorted(2 * [it.path.name for it in run.scan.items]) and not held & set(seen)
    # another seed holds out other images, the same seed the same ones
    again = preflight(cfg.model_copy(update={"output_name": "again"}), get_settings(), "cpu")
    assert {it.path.name for it in again.validation} == held


def test_a_validation_folder_is_held_out_and_the_whole_dataset_trains(make_config, small_dataset, tmp_path):
    held = tmp_path / "held"
    held.mkdir()
    first = sorted(small_dataset.glob("*.png"))[0]
    with Image.open(first) as img:  # another image (a byte copy of a training image is refused)
        other = ImageOps.mirror(img.convert("RGB"))
    other.putpixel((0, 0), (1, 2, 3))
    other.save(held / "other.png")
    (held / "other.txt").write_text("another image")
    cfg = make_config(output_name="folder", validation_split=str(held))
    run = preflight(cfg, get_settings(), "cpu")
    assert [it.path.name for it in run.validation] == ["other.png"] and len(run.scan.items) == 4
    events: list = []
    train(cfg, events.append, device="cpu")
    assert [(e.step, e.images) for e in _rounds(events)] == [(2, 1)]
    with pytest.raises(ConfigError, match="the dataset itself"):
        preflight(make_config(output_name="same", validation_split=str(small_dataset)), get_settings(), "cpu")


def test_best_and_last_marked_and_the_best_snapshot_kept(make_config, monkeypatch):
    # a scripted series (the real one is the measured one: these marks are about bookkeeping)
    losses = iter([0.5, 0.2, 0.4, 0.3])
    monkeypatch.setattr("lorastudio.training.validate.validation_loss", lambda *a, **k: next(losses))
    events: list = []
    cfg = make_config(output_name="marks", steps=4, validation_split=0.25, validate_every=1, keep_loras=1)
    result = train(cfg, events.append, device="cpu")
    assert [(e.step, e.best_step) for e in _rounds(events)] == [(1, 1), (2, 2), (3, 2), (4, 2)]
    run_dir = result.lora_path.parent
    kept = sorted(p.name for p in (run_dir / "loras").glob("*.safetensors"))
    assert kept == ["marks-step-000002.safetensors", "marks-step-000003.safetensors"]  # best kept
    snap = json.loads((run_dir / "loras" / "marks-step-000002.json").read_text())
    assert snap["validation"] == {"step": 2, "loss": 0.2}
    sidecar = json.loads(result.lora_path.with_suffix(".json").read_text())["validation"]
    assert sidecar["best"] == {"step": 2, "loss": 0.2, "lora": "loras/marks-step-000002.safetensors"}
    assert sidecar["last"] == {"step": 4, "loss": 0.3, "lora": "marks.safetensors"}
    assert [p["step"] for p in sidecar["series"]] == [1, 2, 3, 4] and len(sidecar["images"]) == 1
    assert read_validation(run_dir)["best"] == {"step": 2, "loss": 0.2}
    from typer.testing import CliRunner

    from lorastudio.cli.app import _register, app

    if not app.registered_commands:
        _register()
    listed = CliRunner().invoke(app, ["lora", "list", str(run_dir)]).output.strip().splitlines()[1:]
    assert [line.split("  (")[-1] for line in listed] == [
        "val 0.2, best)",
        "val 0.4)",
        "final, val 0.3, last)",
    ]


def test_a_resume_keeps_the_best_rounds_snapshot_from_keep_loras(make_config):
    """Session 36 resume audit: the best round's step was protected from keep_loras only once a
    round of the session ran, so a resumed run that saved before its own first round removed the
    best snapshot of the checkpoint's rounds (and its sidecar's best named a deleted file): its
    folder differed from the uninterrupted run's. The checkpoint's best is protected from the
    resume's start."""
    settings = {
        "steps": 6,
        "validation_split": 0.25,
        "validate_every": 2,
        "save_lora_every": 1,
        "keep_loras": 1,
    }
    events, stop = stop_at(3)
    train(make_config(output_name="whole", **settings), events.append, stop, device="cpu")
    events, stop = stop_at(2)
    assert train(make_config(output_name="parted", **settings), events.append, stop, device="cpu").stopped
    run_dir = get_settings().outputs_dir / "parted"
    events, stop = stop_at(3)  # stopped with save before the resume's first round
    resumed = train(
        make_config(output_name="parted", **settings), events.append, stop, device="cpu", resume=run_dir
    )

    def kept(name: str) -> list[str]:
        folder = get_settings().outputs_dir / name / "loras"
        return sorted(p.name.replace(name, "RUN") for p in folder.glob("*.safetensors"))

    assert kept("parted") == kept("whole") == ["RUN-step-000002.safetensors", "RUN-step-000003.safetensors"]
    best = json.loads(resumed.lora_path.with_suffix(".json").read_text())["validation"]["best"]
    assert best["step"] == 2 and (run_dir / best["lora"]).is_file()


def test_a_run_with_validation_resumes_exactly(make_config):
    common = {"steps": 4, "validation_split": 0.25, "validate_every": 1, "batch_size": 1, "save_every": 2}
    whole: list = []
    train(make_config(output_name="whole", **common), whole.append, device="cpu")
    events: list = []

    def stop():
        return StopRequest(save=True) if sum(e.type == "progress" for e in events) >= 2 else None

    cfg = make_config(output_name="parted", **common)
    first = train(cfg, events.append, stop, device="cpu")
    assert first.stopped and first.steps_run == 2
    checkpoint = find_checkpoint(get_settings().outputs_dir / "parted")
    assert [p["step"] for p in read_checkpoint_info(checkpoint)["validation"]] == [1, 2]
    again = parse_train_config(resume_settings(read_checkpoint_info(checkpoint), {}))
    record = get_settings().outputs_dir / "parted" / "validation.json"
    found = record.read_bytes()
    dropped: list = []

    def discard():
        return StopRequest(save=False) if any(e.type == "validation" for e in dropped) else None

    assert train(again, dropped.append, discard, device="cpu", resume=checkpoint).stopped
    assert [e.step for e in _rounds(dropped)] == [3] and record.read_bytes() == found  # as it was found
    rest: list = []
    train(again, rest.append, device="cpu", resume=checkpoint)
    assert [(e.step, e.loss) for e in _rounds(events) + _rounds(rest)] == [
        (e.step, e.loss) for e in _rounds(whole)
    ]
    record = read_validation(get_settings().outputs_dir / "parted")
    assert [p["step"] for p in record["series"]] == [1, 2, 3, 4]


def test_an_edit_family_validates_with_the_held_out_controls(make_config):
    events: list = []
    train(make_config("flux-kontext", output_name="edit", validation_split=0.25), events.append, device="cpu")
    rounds = _rounds(events)
    assert [(e.step, e.images) for e in rounds] == [(2, 1)] and rounds[0].loss > 0


def test_sdxl_validates_at_fixed_timesteps(make_config):
    events: list = []
    train(make_config("sdxl", output_name="sd", validation_split=0.25), events.append, device="cpu")
    rounds = _rounds(events)
    assert [e.step for e in rounds] == [2] and rounds[0].loss > 0  # only after the last step


@pytest.mark.parametrize(
    ("overrides", "field", "text"),
    [
        ({"validation_split": 0.9}, "validation_split", "leaves no training image"),
        ({"validate_every": 2}, "validate_every", "needs validation_split"),
        ({"validation_seed": 3}, "validation_seed", "needs validation_split"),
    ],
)
def test_refusals(make_config, overrides, field, text):
    with pytest.raises(ConfigError) as err:
        train(make_config(output_name="refused", **overrides), [].append, device="cpu")
    assert any(p.field == field and text in p.message for p in err.value.problems)


def test_a_fraction_out_of_range_is_refused_by_the_schema():
    raw = {"family": "flux", "base_model": "a/b", "data_dir": "d", "validation_split": 1.5}
    with pytest.raises(ConfigError) as err:
        parse_train_config(raw)
    assert [p.field for p in err.value.problems] == ["validation_split"]


def test_a_round_runs_the_adapter_in_eval_mode_and_restores_the_mode(make_config, monkeypatch):
    from lorastudio.training import validate

    captured: dict = {}
    real = optimize_module.validation_round

    def capturing(run, state, objective, step, emit):
        captured.update(run=run, objective=objective, held=state.held_out, conds=state.held_out_conds)
        return real(run, state, objective, step, emit)

    monkeypatch.setattr(optimize_module, "validation_round", capturing)
    cfg = make_config(output_name="modes", validation_split=0.25, lora_dropout=0.5)
    result = train(cfg, [].append, device="cpu", return_denoiser=True)
    denoiser, run = result.denoiser, captured["run"]
    denoiser.train()  # as the loop holds it: LoRA dropout active

    def measure() -> float:
        return validate.validation_loss(
            run.family, denoiser, captured["objective"], captured["held"], captured["conds"], run.cfg,
            dtype=run.dtype, device=run.device,
        )  # fmt: skip

    assert measure() == measure()  # dropout off in eval mode: the same value twice
    assert denoiser.training  # the mode is put back
    assert all(p.grad is None for p in denoiser.parameters())  # no gradient
