"""A run's dataset entries (data/entries.py): each folder resolved and scanned with its own
captions and resolution, kohya N_name folders read as entries, every entry's problems at once,
and a fingerprint that covers every entry (a single plain folder keeps its own)."""

from __future__ import annotations

import shutil
from pathlib import Path

import pytest
from PIL import Image

from lorastudio.config import TrainConfig
from lorastudio.data import scan_dataset
from lorastudio.data.entries import entry_report, resolve_entries, scan_entries
from lorastudio.errors import ConfigError, DatasetError


def _folder(path: Path, names: dict[str, str | None], size: tuple[int, int] = (64, 64)) -> Path:
    path.mkdir(parents=True)
    for i, (stem, caption) in enumerate(names.items()):
        Image.new("RGB", size, (40 * i, 80, 120)).save(path / f"{stem}.png")
        if caption is not None:
            (path / f"{stem}.txt").write_text(caption)
    return path


def _cfg(**kw: object) -> TrainConfig:
    return TrainConfig.model_validate({"family": "flux", "base_model": "x", "resolution": 64, **kw})


def test_entries_get_their_own_captions_resolution_and_index(tmp_path: Path) -> None:
    a = _folder(tmp_path / "a", {"a1": "a red thing", "a2": None})
    b = _folder(tmp_path / "b", {"b1": "blue"}, size=(128, 64))
    cfg = _cfg(
        trigger_word="run",
        default_caption="fallback",
        datasets=[
            {"path": str(a), "repeats": 3},
            {"path": str(b), "trigger_word": "sks", "resolution": 32, "loss_weight": 2.0},
        ],
    )
    entries = resolve_entries(cfg, tmp_path, allow_outside_root=True)
    scan = scan_entries(entries, multiple=16)
    assert [(it.path.name, it.caption, it.entry) for it in scan.items] == [
        ("a1.png", "run, a red thing", 0),
        ("a2.png", "run, fallback", 0),
        ("b1.png", "sks, blue", 1),
    ]
    assert scan.items[2].bucket[0] * scan.items[2].bucket[1] <= 32 * 32  # entry b trains at 32
    assert scan.items[0].bucket == (64, 64)
    report = entry_report(scan)
    assert [(r["images"], r["samples_per_epoch"], r["share"], r["loss_weight"]) for r in report] == [
        (2, 6, 0.8571, 1.0),
        (1, 1, 0.1429, 2.0),
    ]


def test_a_single_plain_folder_keeps_its_fingerprint_and_more_entries_change_it(tmp_path: Path) -> None:
    a = _folder(tmp_path / "a", {"a1": "x", "a2": "y"})
    b = _folder(tmp_path / "b", {"b1": "z"})
    plain = scan_entries(
        resolve_entries(_cfg(data_dir=str(a)), tmp_path, allow_outside_root=True), multiple=16
    )
    assert plain.fingerprint == scan_dataset(a, resolution=64, multiple=16).fingerprint
    both = [{"path": str(a)}, {"path": str(b)}]
    two = scan_entries(resolve_entries(_cfg(datasets=both), tmp_path, allow_outside_root=True), multiple=16)
    assert two.fingerprint != plain.fingerprint
    weighted = [{"path": str(a), "repeats": 2}, {"path": str(b)}]
    more = scan_entries(
        resolve_entries(_cfg(datasets=weighted), tmp_path, allow_outside_root=True), multiple=16
    )
    assert more.fingerprint != two.fingerprint  # the sampling is part of it
    (b / "b1.txt").write_text("changed")
    changed = scan_entries(
        resolve_entries(_cfg(datasets=both), tmp_path, allow_outside_root=True), multiple=16
    )
    assert changed.fingerprint != two.fingerprint  # any entry's content


def test_every_entry_problem_is_reported_at_once(tmp_path: Path) -> None:
    a = _folder(tmp_path / "a", {"a1": None})  # no caption, no trigger word
    b = tmp_path / "empty"
    b.mkdir()
    cfg = _cfg(datasets=[{"path": str(a)}, {"path": str(b)}])
    with pytest.raises(DatasetError) as err:
        scan_entries(resolve_entries(cfg, tmp_path, allow_outside_root=True), multiple=16)
    assert len(err.value.problems) == 2
    assert err.value.problems[0].startswith(f"{a}: a1.png: no caption")
    assert err.value.problems[1].startswith(f"{b}: ") and "no png" in err.value.problems[1]
    outside = _cfg(datasets=[{"path": "/etc"}, {"path": "../x"}])
    with pytest.raises(ConfigError) as bad:
        resolve_entries(outside, tmp_path / "root", allow_outside_root=False)
    assert [p.field for p in bad.value.problems] == ["datasets.0.path", "datasets.1.path"]


def test_kohya_folders_become_entries_with_repeats_and_trigger(tmp_path: Path) -> None:
    img = tmp_path / "img"
    _folder(img / "10_sks ball", {"a": "a red sks ball", "b": None})
    _folder(img / "2_ball", {"c": None})
    cfg = _cfg(data_dir=str(img), kohya_folders=True, caption_dropout=0.1)
    entries = resolve_entries(cfg, tmp_path, allow_outside_root=True)
    assert [(e.label, e.repeats, e.trigger_word, e.default_caption, e.caption_dropout) for e in entries] == [
        (f"{img}/10_sks ball", 10, "sks", "sks ball", 0.1),
        (f"{img}/2_ball", 2, "ball", "ball", 0.1),
    ]
    scan = scan_entries(entries, multiple=16)
    assert [it.caption for it in scan.items] == ["sks, a red sks ball", "sks ball", "ball"]
    assert [r["samples_per_epoch"] for r in entry_report(scan)] == [20, 2]
    (img / "notes").mkdir()
    with pytest.raises(DatasetError, match="not a folder of kohya") as err:
        resolve_entries(cfg, tmp_path, allow_outside_root=True)
    assert any("notes" in p for p in err.value.problems)


def _kohya_captioned(img: Path) -> None:
    """img/5_sks cat: a.caption (kohya's default extension), c.TXT, d.txt + d.caption alike,
    e.caption blank (none), f without a caption file."""
    _folder(img / "5_sks cat", dict.fromkeys("acdef"))
    folder = img / "5_sks cat"
    (folder / "a.caption").write_text("a from .caption")
    (folder / "c.TXT").write_text("c from .TXT")
    (folder / "d.txt").write_text("the same")
    (folder / "d.caption").write_text("the same\n")
    (folder / "e.caption").write_text("  \n")


def test_kohya_folders_read_caption_files_as_the_kohya_import_does(tmp_path: Path) -> None:
    """A run with kohya_folders = true read `<image>.txt` only: an image captioned with kohya's
    default `.caption` trained on the folder's words in place (and on its caption once imported
    with `datasets import --kohya`), the `.caption` named as not read. Both now follow one rule
    (data/kohya_captions.py): the scan's captions are the import's rows, trigger word applied."""
    from lorastudio.data.kohya import plan_kohya_import

    img = tmp_path / "img"
    _kohya_captioned(img)
    (img / "5_sks cat" / "metadata.jsonl").write_text('{"file_name": "f.png", "text": "not kohya\'s"}\n')
    cfg = _cfg(data_dir=str(img), kohya_folders=True)
    scan = scan_entries(resolve_entries(cfg, tmp_path, allow_outside_root=True), multiple=16)
    captions = {it.path.name: it.caption for it in scan.items}
    assert captions == {
        "a.png": "sks, a from .caption",
        "c.png": "sks, c from .TXT",
        "d.png": "sks, the same",
        "e.png": "sks cat",
        "f.png": "sks cat",
    }
    plan = plan_kohya_import(img)
    imported = {r["file_name"]: r["text"] for r in plan.rows}
    assert [name for name, _ in plan.skipped] == ["5_sks cat/metadata.jsonl"]  # nor read by the import
    assert {n: c.removeprefix("sks, ") for n, c in captions.items()} == imported
    assert dict(scan.dropped) == {
        "metadata.jsonl": "not read in a kohya folder (its captions: <image>.txt / .caption)"
    }
    # a plain folder keeps its rule: .txt only, the .caption named as not read; an image it would
    # leave to the default caption is refused (RELIABILITY 1002), a blank one (e) holds none
    with pytest.raises(DatasetError) as err:
        scan_dataset(img / "5_sks cat", resolution=64, multiple=16, default_caption="x")
    assert [p.split(":")[0] for p in err.value.problems] == ["a.caption"]
    (img / "5_sks cat" / "a.txt").write_text("a from .txt")
    plain = scan_dataset(img / "5_sks cat", resolution=64, multiple=16, default_caption="x")
    assert {it.path.name: it.caption for it in plain.items}["e.png"] == "x"
    assert dict(plain.dropped)["a.caption"].startswith("a .caption file: only <image name>.txt")


def test_kohya_folders_refuse_every_disagreeing_caption_pair_at_once(tmp_path: Path) -> None:
    """Two caption files of one image that disagree (kohya reads only the one its
    caption_extension names) are refused before any model loads, naming both files, every such
    image of every folder in one answer (the import skips such an image, naming both too)."""
    img = tmp_path / "img"
    _folder(img / "5_sks cat", {"b": "b from .txt", "ok": None})
    _folder(img / "2_dog", {"g": "g from .txt"})
    (img / "5_sks cat" / "b.caption").write_text("b from .caption")
    (img / "2_dog" / "g.CAPTION").write_text("g from .CAPTION")
    cfg = _cfg(data_dir=str(img), kohya_folders=True)
    with pytest.raises(DatasetError) as err:
        scan_entries(resolve_entries(cfg, tmp_path, allow_outside_root=True), multiple=16)
    assert sorted(err.value.problems) == [
        f"{img}/2_dog: g.CAPTION and g.txt disagree (kohya reads only the one its caption_extension names):"
        " delete the other",
        f"{img}/5_sks cat: b.caption and b.txt disagree (kohya reads only the one its caption_extension names):"
        " delete the other",
    ]


def test_a_changed_caption_file_changes_a_kohya_runs_fingerprint(tmp_path: Path) -> None:
    """The fingerprint (a resume's identity of the data) covers each final caption: a `.caption`
    edited between two runs of a kohya folder is a changed caption, as a .txt is."""
    img = tmp_path / "img"
    _kohya_captioned(img)
    cfg = _cfg(data_dir=str(img), kohya_folders=True)

    def fingerprint() -> str:
        return scan_entries(resolve_entries(cfg, tmp_path, allow_outside_root=True), multiple=16).fingerprint

    before = fingerprint()
    assert fingerprint() == before
    (img / "5_sks cat" / "a.caption").write_text("a changed")
    assert fingerprint() != before


def test_an_entry_that_is_another_entrys_masks_or_control_folder_is_refused(tmp_path: Path) -> None:
    """RELIABILITY 1730: p/masks (p's loss masks) or p/control (its control images) given as an
    entry beside p trained the masks / controls as images to learn, captioned by the trigger."""
    p = _folder(tmp_path / "p", {"a1": "one", "a2": "two"})
    _folder(p / "masks", {"a1": None, "a2": None})
    _folder(p / "control", {"a1": None, "a2": None})
    sub = _folder(p / "sub", {"s1": "sub one"})  # any other sub-folder is an entry like any
    entries = [{"path": str(p)}, {"path": str(p / "masks")}, {"path": str(sub)}, {"path": str(p / "control")}]
    with pytest.raises(ConfigError) as caught:
        resolve_entries(_cfg(datasets=entries, trigger_word="sks"), tmp_path, allow_outside_root=True)
    problems = [(pr.field, pr.message.split(":")[0]) for pr in caught.value.problems]
    assert problems == [
        ("datasets.1.path", f"{p / 'masks'} is the masks/ folder of datasets.0 ({p})"),
        ("datasets.3.path", f"{p / 'control'} is the control/ folder of datasets.0 ({p})"),
    ]
    assert "loss masks" in caught.value.problems[0].message
    alone = resolve_entries(_cfg(datasets=entries[:1] + entries[2:3]), tmp_path, allow_outside_root=True)
    assert [e.root for e in alone] == [p.resolve(), sub.resolve()]
    shutil.rmtree(p / "control")  # a text-to-image family refuses a dataset with controls
    dropped = dict(scan_entries(alone, multiple=16).dropped)
    assert dropped[f"{p}/sub"] == f"sub-folder: trained as an entry of its own ({sub})"
