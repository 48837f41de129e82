"""Bad reference input is refused at validation, naming the file, before any work (issue 27):
an unreadable control, more controls than FLUX.2 klein takes, and sample prompts whose
reference images are missing, outside the dataset, unreadable, too many or given to a
text-to-image family."""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path

import pytest

from lorastudio.errors import ConfigError
from lorastudio.jobs.validation import validate_run
from lorastudio.settings import Settings
from lorastudio.tiny.paired import make_paired_dataset


def _cfg(model: Path, **over: object) -> dict:
    base = {
        "family": "flux2-klein",
        "base_model": str(model),
        "data_dir": "pairs",
        "resolution": 32,
        "steps": 2,
    }
    return {**base, **over}


def _problems(settings: Settings, raw: dict) -> list[tuple[str, str]]:
    with pytest.raises(ConfigError) as err:
        validate_run(raw, settings, live_output_names=set())
    return [(p.field, p.message) for p in err.value.problems]


def test_an_unreadable_control_and_too_many_controls_are_named(
    settings: Settings, tiny_model: Callable[[str], Path]
) -> None:
    pairs = make_paired_dataset(settings.datasets_dir / "pairs")
    (pairs / "control" / "shape_01.png").write_bytes(b"\x89PNG broken")
    for n in range(2, 6):  # shape_00 gets 5 controls: klein takes 4
        (pairs / f"control_{n}").mkdir()
        (pairs / f"control_{n}" / "shape_00.png").write_bytes(
            (pairs / "control" / "shape_00.png").read_bytes()
        )
    problems = _problems(settings, _cfg(tiny_model("flux2-klein")))
    messages = [m for f, m in problems if f == "data_dir"]
    assert any(m.startswith("control image control/shape_01.png:") for m in messages), messages
    assert "shape_00.png: 5 control images, flux2-klein takes at most 4" in messages


def test_sample_prompt_references_are_checked_with_the_dataset(
    settings: Settings, tiny_model: Callable[[str], Path], tmp_path: Path
) -> None:
    pairs = make_paired_dataset(settings.datasets_dir / "pairs")
    (pairs / "notes").mkdir()
    (pairs / "notes" / "bad.png").write_bytes(b"not a png")
    outside = tmp_path / "secret.png"
    outside.write_bytes((pairs / "shape_00.png").read_bytes())
    (pairs / "notes" / "link.png").symlink_to(outside)
    prompts = [
        {"prompt": "a", "controls": ["control/missing.png"]},
        {"prompt": "b", "controls": ["../escape.png"]},
        {"prompt": "c", "controls": ["notes/bad.png"]},
        {"prompt": "d", "controls": ["control/shape_00.png"] * 5},
        {"prompt": "e", "controls": ["notes/link.png"]},
        {"prompt": "f", "controls": ["control/shape_00.png", "control/shape_01.png"]},  # fine
    ]
    problems = _problems(settings, _cfg(tiny_model("flux2-klein"), sample_prompts=prompts))
    messages = [m for f, m in problems if f == "sample_prompts"]
    assert "sample prompt 0: control image control/missing.png not found in pairs/" in messages
    assert (
        "sample prompt 1: control '../escape.png' must be a path inside the dataset folder or a control_dirs folder"
        in messages
    )
    assert any(m.startswith("sample prompt 2: control bad.png:") for m in messages), messages
    assert "sample prompt 3: 5 control images, flux2-klein takes at most 4" in messages
    assert "sample prompt 4: control notes/link.png is a link out of the dataset folder" in messages
    assert not any(m.startswith("sample prompt 5") for m in messages)
    assert (
        "samples with references at resolution 32: flux2-klein takes reference images of at least 64 px a side: render at 64 px or more"
        in messages
    )

    flux = {"family": "flux", "base_model": str(tiny_model("flux")), "data_dir": "shapes", "resolution": 32}
    (settings.datasets_dir / "shapes").mkdir()
    for name in ("shape_00.png", "shape_00.txt"):
        (settings.datasets_dir / "shapes" / name).write_bytes((pairs / name).read_bytes())
    refs = [{"prompt": "x", "controls": ["shape_00.png"]}]
    messages = [m for f, m in _problems(settings, {**flux, "sample_prompts": refs}) if f == "sample_prompts"]
    assert messages == ["sample prompt 0: flux takes no reference images (a text-to-image family)"]


def test_single_image_edit_sample_prompts_need_their_reference(
    settings: Settings, tiny_model: Callable[[str], Path]
) -> None:
    """The single-image Qwen-Image-Edit renders only with a reference; Kontext (image=None:
    text-to-image) takes a sample prompt without one."""
    make_paired_dataset(settings.datasets_dir / "pairs")
    prompts = [{"prompt": "x", "controls": []}, "plain: the first pair's reference"]
    edit = _cfg(tiny_model("qwen-image-edit"), family="qwen-image-edit")
    messages = [
        m for f, m in _problems(settings, {**edit, "sample_prompts": prompts}) if f == "sample_prompts"
    ]
    assert messages == ["sample prompt 0: 0 control image(s), qwen-image-edit needs at least 1"]
    kontext = {**_cfg(tiny_model("flux-kontext"), family="flux-kontext"), "max_sequence_length": 16}
    run = validate_run({**kontext, "sample_prompts": prompts}, settings, live_output_names=set())
    assert run.config.family == "flux-kontext"


def test_a_resumes_sample_prompt_references_are_checked_before_it_is_queued(
    settings: Settings, tiny_model: Callable[[str], Path]
) -> None:
    """A resume (`POST /api/runs/ID/resume`, settings.sample_prompts) whose sample prompt named a
    missing or surplus reference was queued, started its worker and failed there ("the sample
    prompts' reference images cannot be used"), where a fresh start refuses it with a 400. The
    resume's check now reads them against the dataset too, with its other problems."""
    from lorastudio.jobs.resume import validate_resume
    from lorastudio.training.loop import train

    make_paired_dataset(settings.datasets_dir / "pairs")
    run = validate_run(
        _cfg(tiny_model("flux2-klein"), steps=2, save_every=1, output_name="r", resolution=64),
        settings,
        live_output_names=set(),
    )
    train(run.worker_config, lambda event: None, settings=settings, device="cpu")
    prompts = [
        {"prompt": "a", "controls": ["control/missing.png"]},
        {"prompt": "b", "controls": ["control/shape_00.png"] * 5},
        {"prompt": "c", "controls": ["control/shape_01.png"]},  # fine
    ]
    over = {"steps": 3, "sample_prompts": prompts}
    with pytest.raises(ConfigError) as err:
        validate_resume(settings.outputs_dir / "r", None, over, settings, live_output_names=set())
    messages = [p.message for p in err.value.problems if p.field == "sample_prompts"]
    assert messages == [
        "sample prompt 0: control image control/missing.png not found in pairs/",
        "sample prompt 1: 5 control images, flux2-klein takes at most 4",
    ], err.value.problems
    fine = validate_resume(
        settings.outputs_dir / "r",
        None,
        {**over, "sample_prompts": prompts[2:]},
        settings,
        live_output_names=set(),
    )
    assert fine.total_steps == 3
    # the engine's own preflight (a CLI `train --resume --set sample_prompts=...` meets only it)
    # refuses them before any load: it did so after loading the text encoders
    from lorastudio.config import parse_train_config
    from lorastudio.errors import DatasetError
    from lorastudio.training.preflight import preflight

    cfg = parse_train_config({**_cfg(tiny_model("flux2-klein"), resolution=64), "sample_prompts": prompts})
    with pytest.raises(DatasetError) as refused:
        preflight(cfg, settings, "cpu")
    assert "sample prompt 0: control image control/missing.png not found in pairs/" in refused.value.problems


def test_sample_prompt_references_may_name_a_control_dirs_folders_files(
    settings: Settings, tiny_model: Callable[[str], Path], tmp_path: Path
) -> None:
    """A run whose controls are in a control_dirs folder (ai-toolkit's layout) names one for a
    preview (RELIABILITY 1491): by the folder as control_dirs names it, or by its full path; a
    ".." out of it, a link out of it and a file of a folder the run does not declare are refused."""
    pairs = make_paired_dataset(settings.datasets_dir / "pairs")
    aitk = settings.datasets_dir / "aitk"
    (pairs / "control").rename(aitk)
    outside = tmp_path / "secret.png"
    outside.write_bytes((aitk / "shape_00.png").read_bytes())
    (aitk / "refs").mkdir()  # a sub-folder: not paired (a link at the top would be an orphan control)
    (aitk / "refs" / "link.png").symlink_to(outside)
    (settings.datasets_dir / "other").mkdir()
    (settings.datasets_dir / "other" / "x.png").write_bytes(outside.read_bytes())
    fine = [
        {"prompt": "a", "controls": ["aitk/shape_01.png"]},
        {"prompt": "b", "controls": [str(aitk / "shape_02.png")]},
    ]
    raw = _cfg(tiny_model("flux2-klein"), resolution=64, control_dirs=["aitk"])
    assert validate_run(
        {**raw, "sample_prompts": fine}, settings, live_output_names=set()
    ).config.sample_prompts
    bad = [
        {"prompt": "c", "controls": ["aitk/../other/x.png"]},
        {"prompt": "d", "controls": ["aitk/refs/link.png"]},
        {"prompt": "e", "controls": [str(settings.datasets_dir / "other" / "x.png")]},
        {"prompt": "f", "controls": ["aitk/missing.png"]},
    ]
    messages = [m for f, m in _problems(settings, {**raw, "sample_prompts": bad}) if f == "sample_prompts"]
    inside = "must be a path inside the dataset folder or a control_dirs folder"
    assert messages == [
        f"sample prompt 0: control 'aitk/../other/x.png' {inside}",
        f"sample prompt 1: control aitk/refs/link.png is a link out of the control_dirs folder {aitk}",
        f"sample prompt 2: control '{settings.datasets_dir / 'other' / 'x.png'}' {inside}",
        f"sample prompt 3: control image aitk/missing.png not found in {aitk}",
    ]
