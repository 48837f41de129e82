"""A studio home moved (or renamed) between two runs of a resumable run whose base is a folder
under its models/ and its dataset one under datasets/: a run records each by its absolute path,
gone after the move. The resume says so and how to go on; given them where they are now (CLI
`--set base_model=NAME --set data_dir=NAME`, the API's settings), it resumes when the content is the checkpoint's (the
parts FLUX.1 lacks are a fixed marker since fingerprint rule 3; a rule-2 checkpoint's, by the
base's name, are set aside: test_fingerprint_rule3.py) and is refused on another one."""

from __future__ import annotations

import json
import shutil
from pathlib import Path

import pytest

from cli_runner import run_cli
from lorastudio.errors import ConfigError
from lorastudio.settings import get_settings


@pytest.fixture
def moved_home(tiny_model, small_dataset, run_settings, tmp_path, capsys, monkeypatch) -> Path:
    """A run "moved" (2 steps, a checkpoint at 1) of the tiny FLUX.1 as models/tiny, trained in one
    home then moved to another (the new LORASTUDIO_HOME). Returns the new home."""
    old, new = tmp_path / "old home", tmp_path / "new home"
    shutil.copytree(tiny_model("flux"), old / "models" / "tiny")
    shutil.copytree(small_dataset, old / "datasets" / "small")
    data = old / "datasets" / "small"  # by its path, as the job service records a dataset name
    settings = run_settings("flux", "tiny", data, {"save_every": 1, "output_name": "moved"})
    config = tmp_path / "run.toml"
    config.write_text("".join(f"{k} = {json.dumps(v)}\n" for k, v in settings.items()))
    monkeypatch.setenv("LORASTUDIO_HOME", str(old))
    get_settings.cache_clear()
    code, out = run_cli(capsys, monkeypatch, "train", str(config), "--device", "cpu")
    assert code == 0, out
    old.rename(new)
    monkeypatch.setenv("LORASTUDIO_HOME", str(new))
    get_settings.cache_clear()
    return new


def test_a_run_resumes_on_its_base_after_the_home_moved(moved_home: Path, capsys, monkeypatch) -> None:
    from lorastudio.jobs.resume import validate_resume

    code, out = run_cli(
        capsys, monkeypatch, "train", "--resume", "moved", "--set", "steps=3", "--device", "cpu"
    )
    assert code == 2, out
    assert "nothing at" in out and "models/tiny any more" in out and "--set base_model=" in out
    assert "datasets/small any more" in out and "--set data_dir=" in out

    run_dir = moved_home / "outputs" / "moved"
    with pytest.raises(ConfigError, match="models/tiny any more") as err:
        validate_resume(run_dir, None, {"steps": 3}, get_settings(), live_output_names=set())
    assert [p.field for p in err.value.problems] == ["base_model", "data_dir"]
    moved = {"steps": 3, "base_model": "tiny", "data_dir": "small"}
    ok = validate_resume(run_dir, None, moved, get_settings(), live_output_names=set())
    assert ok.config.base_model == str(moved_home / "models" / "tiny")  # stored as a run stores it

    other = moved_home / "models" / "other"
    shutil.copytree(moved_home / "models" / "tiny", other)
    vae = other / "vae" / "config.json"
    vae.write_text(json.dumps({**json.loads(vae.read_text()), "scaling_factor": 0.5}))
    with pytest.raises(ConfigError, match=r"weights differ .*\(vae changed\)"):
        validate_resume(
            run_dir, None, {**moved, "base_model": "other"}, get_settings(), live_output_names=set()
        )

    code, out = run_cli(
        capsys, monkeypatch, "train", "--resume", "moved", "--set", "steps=3", "--set", "base_model=tiny",
        "--set", "data_dir=small", "--device", "cpu",
    )  # fmt: skip
    assert code == 0, out
    assert "done: 3 step(s)" in out


def test_moved_dataset_entries_are_named_and_may_be_given_again(tmp_path: Path) -> None:
    """A run of several datasets entries records each entry's path; after a move each gone one is
    named, and `datasets` may be given again on resume (the identity compares the entries'
    settings, their paths apart: only where they are may change)."""
    from lorastudio.training.resume.identity import override_problems
    from lorastudio.training.resume.relocation import moved_problems

    here = tmp_path / "here"
    here.mkdir()
    config = {"datasets": [{"path": str(here)}, {"path": str(tmp_path / "gone"), "repeats": 2}]}
    problems = moved_problems(config)
    assert [p.field for p in problems] == ["datasets.1.path"]
    assert f"nothing at {tmp_path / 'gone'} any more" in problems[0].message
    assert "datasets.1.path set to where it is now" in problems[0].message
    assert override_problems({"datasets": config["datasets"], "base_model": "x", "base_config": "y"}) == []
    assert [p.field for p in override_problems({"lora_rank": 8})] == ["lora_rank"]


def test_a_moved_entry_of_a_multi_dataset_run_is_named_alone(
    tiny_model, small_dataset, run_settings, tmp_path, capsys, monkeypatch
) -> None:
    """The job service's resume takes `datasets.N.path` (what the web UI's Resume sends for a
    moved entry, RELIABILITY 870): the run's recorded list with that path replaced, its other
    settings as they were; an entry it does not have, or `datasets` given whole too, is refused."""
    from lorastudio.jobs.resume import validate_resume

    home = tmp_path / "home"
    shutil.copytree(tiny_model("flux"), home / "models" / "tiny")
    for name in ("a", "b"):
        shutil.copytree(small_dataset, home / "datasets" / name)
    entries = [{"path": str(home / "datasets" / "a")}, {"path": str(home / "datasets" / "b"), "repeats": 2}]
    settings = run_settings(
        "flux", home / "models" / "tiny", home / "datasets" / "a", {"save_every": 1, "output_name": "mix"}
    )
    del settings["data_dir"]
    config = tmp_path / "run.json"
    config.write_text(json.dumps({**settings, "datasets": entries}))
    monkeypatch.setenv("LORASTUDIO_HOME", str(home))
    get_settings.cache_clear()
    code, out = run_cli(capsys, monkeypatch, "train", str(config), "--device", "cpu")
    assert code == 0, out
    (home / "datasets" / "b").rename(home / "datasets" / "b2")  # the second entry moved
    run_dir = home / "outputs" / "mix"

    def resume(overrides: dict):
        return validate_resume(
            run_dir, None, {"steps": 3, **overrides}, get_settings(), live_output_names=set()
        )

    with pytest.raises(ConfigError) as err:
        resume({})
    assert [p.field for p in err.value.problems] == ["datasets.1.path"]
    assert '{"settings": {"datasets.1.path": ...}}' in err.value.problems[0].message
    ok = resume({"datasets.1.path": "b2"})
    assert [(Path(e.path).name, e.repeats) for e in ok.config.datasets] == [("a", None), ("b2", 2)]
    assert ok.worker_config.datasets[1].repeats == 2  # the other settings as recorded
    with pytest.raises(ConfigError) as err:
        resume({"datasets.2.path": "b2", "datasets.1.path": "b2"})
    assert [p.field for p in err.value.problems] == ["datasets.2.path"]
    assert "the run has 2 datasets entries" in err.value.problems[0].message
    with pytest.raises(ConfigError) as err:
        resume({"datasets.1.path": "b2", "datasets": entries})
    assert "not with datasets given whole" in err.value.problems[0].message

    # the CLI's --resume takes the same form (RELIABILITY 911): refused naming it, then resumed
    # with the entry alone, an entry the run lacks refused as the API does
    code, out = run_cli(
        capsys, monkeypatch, "train", "--resume", "mix", "--set", "steps=3", "--device", "cpu"
    )
    assert code == 2 and "--set datasets.1.path=..." in out, out
    code, out = run_cli(
        capsys, monkeypatch, "train", "--resume", "mix", "--set", "steps=3", "--set", "datasets.2.path=b2"
    )
    assert code == 2 and "the run has 2 datasets entries" in out, out
    code, out = run_cli(
        capsys, monkeypatch, "train", "--resume", "mix", "--set", "steps=3",
        "--set", f"datasets.1.path={home / 'datasets' / 'b2'}", "--device", "cpu",
    )  # fmt: skip
    assert code == 0, out
    assert "resumed from step 1" in out and "done: 3 step(s)" in out, out
    assert "datasets/b2/shape_06.png" in out  # its crop warning: the moved entry trained on
