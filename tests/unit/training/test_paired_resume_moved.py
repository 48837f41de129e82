"""Dataset fingerprint rule 2 (training/resume/identity_dataset.py, RELIABILITY 2040): a paired run's
controls are keyed by their path under the dataset folder, so its resume is accepted once the
folder moved (the job service's resume with data_dir named anew, the run's own resume); a control
whose content changed is still refused naming its target. A checkpoint of rule 1 (its controls by
their absolute paths) is compared under that rule, its paths taken under the folder it recorded:
it resumes at its old place and at the new one."""

from __future__ import annotations

import json
import shutil
from pathlib import Path

import pytest
from PIL import Image

from lorastudio.errors import ConfigError
from lorastudio.settings import get_settings
from lorastudio.training.loop import train
from lorastudio.training.resume.checkpoint import find_checkpoint, read_checkpoint_info
from stop_at import stop_at


@pytest.fixture
def paired_run(make_config, small_pairs: Path):
    """A 3-step FLUX.1 Kontext run "run" on a copy of the paired dataset under datasets/pairs,
    stopped after its step-1 checkpoint. Returns (its config, its run folder, the dataset)."""
    data = get_settings().datasets_dir / "pairs"
    shutil.copytree(small_pairs, data)
    config = make_config("flux-kontext", data_dir=str(data), steps=3, save_every=1)
    events, stop = stop_at(1)
    train(config, events.append, stop, device="cpu")
    return config, get_settings().outputs_dir / "run", data


def _validate(run_dir: Path, overrides: dict):
    from lorastudio.jobs.resume import validate_resume

    return validate_resume(run_dir, None, overrides, get_settings(), live_output_names=set())


def _edit_control(data: Path) -> str:
    """Change the first control's pixels (its target's bytes kept). Returns the target's name."""
    control = sorted((data / "control").glob("*.png"))[0]
    with Image.open(control) as img:
        img.convert("RGB").rotate(90).save(control)
    return control.name


def test_a_paired_run_resumes_after_its_dataset_moved(paired_run) -> None:
    config, run_dir, data = paired_run
    saved = read_checkpoint_info(find_checkpoint(run_dir))["identity"]
    assert saved["dataset_rule"] == 2
    moved = data.with_name("moved")
    data.rename(moved)

    ok = _validate(run_dir, {"data_dir": "moved"})  # the API's resume with the new place
    assert ok.step == 1

    kept = (moved / "control").joinpath(sorted(p.name for p in (moved / "control").glob("*.png"))[0])
    before = kept.read_bytes()
    name = _edit_control(moved)
    with pytest.raises(ConfigError, match=rf"control images changed \(their targets\): {name}"):
        _validate(run_dir, {"data_dir": "moved"})
    kept.write_bytes(before)

    again = config.model_copy(update={"data_dir": str(moved)})
    assert train(again, [].append, device="cpu", resume=run_dir).resumed_from == 1
    assert read_checkpoint_info(find_checkpoint(run_dir))["identity"]["dataset_rule"] == 2


def test_a_rule_1_checkpoint_resumes_at_its_old_place_and_moved(paired_run) -> None:
    """The checkpoint rewritten as the code before rule 2 wrote it (no dataset_rule; the
    fingerprint of its controls by their absolute paths at the recorded folder)."""
    from lorastudio import families
    from lorastudio.config import resolve_train_config
    from lorastudio.data.run_scan import scan_for_run

    config, run_dir, data = paired_run
    file = find_checkpoint(run_dir) / "identity.json"
    info = json.loads(file.read_text())
    resolved = resolve_train_config(config)
    from lorastudio.data.entries import resolve_entries

    entries = resolve_entries(resolved, get_settings().datasets_dir, allow_outside_root=True)
    spec = families.get("flux-kontext").spec
    old = scan_for_run(entries, resolved, spec, get_settings(), controls_then={}).fingerprint
    assert old != info["identity"]["dataset_fingerprint"]  # the controls' keys differ
    del info["identity"]["dataset_rule"]
    info["identity"]["dataset_fingerprint"] = old
    file.write_text(json.dumps(info))

    assert _validate(run_dir, {}).step == 1  # where it was
    moved = data.with_name("moved")
    data.rename(moved)
    assert _validate(run_dir, {"data_dir": "moved"}).step == 1  # compared at its recorded folder
    name = _edit_control(moved)
    with pytest.raises(ConfigError, match=rf"control images changed \(their targets\): {name}"):
        _validate(run_dir, {"data_dir": "moved"})


def test_a_folder_named_through_a_link_is_not_taken_as_moved(tmp_path) -> None:
    """controls_then follows the recorded folder's links as the run's own (RELIABILITY 2143): a
    data_dir given through a link, or a name under a datasets folder that is one, is where it
    was; the old code mapped the real folder onto the link's path, which rule 1 never keyed."""
    from lorastudio.config import TrainConfig
    from lorastudio.training.resume.identity_dataset import controls_then

    def make_config(family: str, data_dir: str) -> TrainConfig:
        return TrainConfig.model_validate({"family": family, "base_model": "x", "data_dir": data_dir})

    real = tmp_path / "real"
    (real / "pairs").mkdir(parents=True)
    link = tmp_path / "via-link"
    link.symlink_to(real, target_is_directory=True)
    given = make_config("flux-kontext", data_dir=str(link / "pairs"))
    assert controls_then(given, {"data_dir": str(link / "pairs")}, real) == {}
    named = make_config("flux-kontext", data_dir="pairs")
    assert controls_then(named, {"data_dir": "pairs"}, link) == {}
    moved = make_config("flux-kontext", data_dir="moved")  # a real move is still one
    assert controls_then(moved, {"data_dir": "pairs"}, link) == {real / "moved": real / "pairs"}


@pytest.mark.slow  # ~18 s (a 1-step paired run); test_a_folder_named_through_a_link_is_not_taken_as_moved covers the rule by default
def test_a_rule_1_checkpoint_named_through_a_link_resumes_where_it_was(
    make_config, small_pairs, tmp_path
) -> None:
    """A run whose data_dir was given through a symbolic link (a home or a datasets folder under
    one: macOS's /tmp, a mounted disk): rule 1 keyed its controls by their real paths, as the scan
    found them, so the recorded folder is compared once its links are followed too; it was taken
    as written, another folder than now's, and a checkpoint where nothing moved was refused as
    changed controls (RELIABILITY 2143)."""
    from lorastudio import families
    from lorastudio.config import resolve_train_config
    from lorastudio.data.entries import resolve_entries
    from lorastudio.data.run_scan import scan_for_run

    data = get_settings().datasets_dir / "pairs"
    shutil.copytree(small_pairs, data)
    link = tmp_path / "via-link"
    link.symlink_to(data.parent, target_is_directory=True)
    config = make_config("flux-kontext", data_dir=str(link / "pairs"), steps=3, save_every=1)
    events, stop = stop_at(1)
    train(config, events.append, stop, device="cpu")
    run_dir = get_settings().outputs_dir / "run"
    file = find_checkpoint(run_dir) / "identity.json"
    info = json.loads(file.read_text())
    resolved = resolve_train_config(config)
    entries = resolve_entries(resolved, get_settings().datasets_dir, allow_outside_root=True)
    spec = families.get("flux-kontext").spec
    del info["identity"]["dataset_rule"]  # as the code before rule 2 wrote it
    info["identity"]["dataset_fingerprint"] = scan_for_run(
        entries, resolved, spec, get_settings(), controls_then={}
    ).fingerprint
    file.write_text(json.dumps(info))

    assert _validate(run_dir, {}).step == 1
