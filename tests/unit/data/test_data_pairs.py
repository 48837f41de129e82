"""Paired datasets (data/pairs.py through scan_dataset): the three layouts pair targets with
their controls, every bad pairing is refused naming the files, and a control is cropped and
flipped exactly like its target."""

from __future__ import annotations

import json
from dataclasses import replace
from pathlib import Path

import numpy as np
import pytest
from tests.unit.data.conftest import write_image

from lorastudio.data import load_crop, scan_dataset
from lorastudio.data.crop import resized_size
from lorastudio.data.pairs import load_control_crop
from lorastudio.errors import DatasetError

KONTEXT = (1, 1)


def _targets(root: Path, stems: list[str]) -> None:
    root.mkdir(parents=True, exist_ok=True)
    for i, stem in enumerate(stems):
        write_image(root / f"{stem}.png", seed=i)
        (root / f"{stem}.txt").write_text(f"edit {stem}")


def _scan(root: Path, allowed: tuple[int, int] = KONTEXT, **kw):
    return scan_dataset(root, resolution=64, multiple=16, control_images=allowed, family="edit-fam", **kw)


def test_control_subfolders_pair_by_stem_in_slot_order(tmp_path):
    _targets(tmp_path, ["a", "b"])
    for folder in ("control", "control_2"):
        (tmp_path / folder).mkdir()
        for stem in ("a", "b"):
            write_image(tmp_path / folder / f"{stem}.jpg", seed=7)
    scan = _scan(tmp_path, allowed=(1, 3))
    assert [it.controls for it in scan.items] == [
        (tmp_path / "control" / "a.jpg", tmp_path / "control_2" / "a.jpg"),
        (tmp_path / "control" / "b.jpg", tmp_path / "control_2" / "b.jpg"),
    ]
    assert scan.controls_per_image() == 2 and scan.control_sources == ("control/", "control_2/")
    assert scan.dropped == []  # the control folders are not "sub-folders not scanned"


def test_metadata_controls_and_parallel_control_dirs(tmp_path):
    root = tmp_path / "data"
    _targets(root, ["a", "b"])
    (root / "refs").mkdir()
    write_image(root / "refs" / "ra.png")
    write_image(root / "refs" / "rb.png")
    rows = [
        {"file_name": "a.png", "text": "x", "control_file_name": "refs/ra.png"},
        {"file_name": "b.png", "text": "y", "control_files": ["refs/rb.png"]},
    ]
    (root / "metadata.jsonl").write_text("\n".join(json.dumps(r) for r in rows))
    scan = _scan(root)
    assert [it.controls for it in scan.items] == [(root / "refs/ra.png",), (root / "refs/rb.png",)]

    other = tmp_path / "other"
    _targets(other, ["a"])
    parallel = tmp_path / "ctrl"
    parallel.mkdir()
    write_image(parallel / "a.webp")
    scan = _scan(other, control_dirs=[parallel])
    assert scan.items[0].controls == (parallel / "a.webp",)
    before = scan.fingerprint
    write_image(parallel / "a.webp", seed=3)  # a changed control changes the fingerprint
    assert _scan(other, control_dirs=[parallel]).fingerprint != before


def test_every_bad_pairing_is_reported_at_once_by_name(tmp_path):
    _targets(tmp_path, ["a", "b", "c"])
    (tmp_path / "control").mkdir()
    write_image(tmp_path / "control" / "a.png")
    (tmp_path / "control" / "zzz.png").write_bytes(b"not an image")  # orphan (and unreadable)
    rows = [{"file_name": "b.png", "text": "t", "control_files": ["missing.png", "../escape.png"]}]
    (tmp_path / "metadata.jsonl").write_text(json.dumps(rows[0]))
    with pytest.raises(DatasetError) as err:
        _scan(tmp_path)
    text = "\n".join(err.value.problems)
    assert "control/zzz.png: control image with no target" in text
    assert "b.png: control image missing.png not found" in text
    assert "b.png: control '../escape.png' must be a relative path inside the dataset" in text
    assert "c.png: no control image (edit-fam takes 1-1" in text


def test_counts_are_checked_against_the_family(tmp_path):
    _targets(tmp_path, ["a", "b"])
    for folder in ("control", "control_2"):
        (tmp_path / folder).mkdir()
        write_image(tmp_path / folder / "a.png")
    write_image(tmp_path / "control" / "b.png")
    with pytest.raises(DatasetError) as err:
        _scan(tmp_path)  # takes 1: a has 2
    assert any("a.png: 2 control images, edit-fam takes at most 1" in p for p in err.value.problems)
    assert [len(it.controls) for it in _scan(tmp_path, allowed=(1, 3)).items] == [2, 1]  # counts may differ
    with pytest.raises(DatasetError) as err:
        _scan(tmp_path, allowed=(2, 3))  # b has 1
    assert any("b.png: 1 control image(s), edit-fam takes at least 2" in p for p in err.value.problems)
    with pytest.raises(DatasetError) as err:
        _scan(tmp_path, allowed=(0, 0))  # a text-to-image family
    assert any("trains text-to-image only" in p for p in err.value.problems)


def test_a_text_to_image_dataset_is_unchanged(tmp_path):
    _targets(tmp_path, ["a"])
    scan = _scan(tmp_path, allowed=(0, 0))
    assert scan.items[0].controls == () and scan.controls_per_image() == 0


@pytest.mark.parametrize("flip", [False, True])
def test_a_control_of_the_target_shape_is_cropped_and_flipped_with_it(tmp_path, flip):
    pixels = np.random.default_rng(0).integers(0, 256, (48, 80, 3), dtype=np.uint8)  # [H, W, 3]
    _targets(tmp_path, [])
    write_image(tmp_path / "a.png", pixels=pixels)
    (tmp_path / "a.txt").write_text("t")
    (tmp_path / "control").mkdir()
    write_image(tmp_path / "control" / "a.png", pixels=pixels)  # the same picture as the target
    item = scan_dataset(
        tmp_path, resolution=32, multiple=16, aspect_buckets=False, control_images=KONTEXT
    ).items[0]
    crop = load_crop(item, random_crop=True, flip=flip, rng=np.random.default_rng(3))
    control = load_control_crop(
        item.controls[0], item.bucket, crop.crop_top_left, resized_size(80, 48, item.bucket), flip
    )
    np.testing.assert_array_equal(control, crop.pixels)  # [3, 32, 32] the same crop


@pytest.mark.parametrize("flip", [False, True])
def test_a_half_size_control_is_cut_with_its_target_not_centred(tmp_path, flip):
    """RELIABILITY 550: a control of its target's shape but another size (a half-size copy) whose
    cover size rounds one pixel away from the target's was centre-cropped while the target was
    randomly cropped: the pair trained misaligned. It is cut with the target's crop now."""
    from PIL import Image

    from lorastudio.data.crop import same_shape

    ys, xs = np.mgrid[0:37, 0:60]
    pixels = np.stack([xs * 4, ys * 6, 255 - xs * 4], -1).astype(np.uint8)  # [37, 60, 3] gradients
    _targets(tmp_path, [])
    write_image(tmp_path / "a.png", pixels=pixels)
    (tmp_path / "a.txt").write_text("t")
    (tmp_path / "control").mkdir()
    half = np.asarray(
        Image.fromarray(pixels).resize((30, 18), Image.Resampling.LANCZOS)
    )  # 30x18: 60x37 halved
    write_image(tmp_path / "control" / "a.png", pixels=half)
    item = scan_dataset(
        tmp_path, resolution=32, multiple=16, aspect_buckets=False, control_images=KONTEXT
    ).items[0]
    resized = resized_size(60, 37, item.bucket)
    assert resized == (52, 32) and resized_size(30, 18, item.bucket) == (53, 32)  # one pixel apart
    assert same_shape((30, 18), resized) and not same_shape((32, 32), resized)
    crop = load_crop(item, random_crop=True, flip=flip, rng=np.random.default_rng(0))
    left = crop.crop_top_left[1] if not flip else resized[0] - crop.crop_top_left[1] - 32
    assert abs(left - (52 - 32) // 2) >= 5  # a crop well away from the centre
    control = load_control_crop(item.controls[0], item.bucket, crop.crop_top_left, resized, flip)
    assert np.abs(control - crop.pixels).mean() < 0.03  # [3, 32, 32] the same view, resampled
    from lorastudio.data.latent_keys import control_parts

    assert control_parts(item, "target")["controls_aligned"] == [0]  # its latents of the old cut not read
    same = replace(item, control_dims=((60, 37),))
    assert control_parts(same, "target") == {"control_rule": "target", "control_sizes": []}  # keys as before


def test_a_control_linking_outside_the_dataset_is_refused(tmp_path):
    root = tmp_path / "data"
    _targets(root, ["a"])
    outside = write_image(tmp_path / "secret.png")
    (root / "control").mkdir()
    (root / "control" / "a.png").symlink_to(outside)
    with pytest.raises(DatasetError) as err:
        _scan(root)
    assert any(
        "control a.png: a link to" in p and "outside the dataset folder" in p for p in err.value.problems
    )


def test_controls_are_opened_without_following_links_and_from_the_checked_folder(tmp_path):
    """Controls are opened as every dataset file (data.safe_open): a link, even one inside the
    dataset, is not followed; a control folder swapped after the scan is refused by the decode."""
    root = tmp_path / "data"
    _targets(root, ["a"])
    (root / "control").mkdir()
    write_image(root / "refs.png")
    (root / "control" / "a.png").symlink_to(root / "refs.png")
    with pytest.raises(DatasetError) as err:
        _scan(root)
    assert any("a.png" in p and "symbolic link" in p for p in err.value.problems)

    (root / "control" / "a.png").unlink()
    write_image(root / "control" / "a.png", seed=4)
    (root / "refs.png").unlink()
    item = _scan(root).items[0]
    assert len(item.control_folder_ids) == 1
    (root / "control").rename(root / "moved")
    (root / "control").mkdir()
    write_image(root / "control" / "a.png", seed=4)
    resized = resized_size(item.width, item.height, item.bucket)
    with pytest.raises(DatasetError, match="changed after it was checked"):
        load_control_crop(item.controls[0], item.bucket, (0, 0), resized, False, item.control_folder_ids[0])


def test_a_family_taking_0_to_k_controls_accepts_mixed_and_varying_counts(tmp_path):
    """FLUX.2 (0..K): unpaired targets beside paired ones, and 1 or 2 controls per target; the
    batches group samples by bucket and control count."""
    from lorastudio.data import BucketBatchSampler

    _targets(tmp_path, ["a", "b", "c", "d"])
    for folder, stems in (("control", ["a", "b"]), ("control_2", ["a"])):
        (tmp_path / folder).mkdir()
        for stem in stems:
            write_image(tmp_path / folder / f"{stem}.png")
    scan = _scan(tmp_path, allowed=(0, 4))
    assert [len(it.controls) for it in scan.items] == [2, 1, 0, 0] and scan.controls_per_image() == 2
    assert scan.batch_histogram() == {"80x48+0": 2, "80x48+1": 1, "80x48+2": 1}
    sampler = BucketBatchSampler(scan.batch_keys(), batch_size=2, seed=0)
    for batch in sampler.epoch_batches(0):
        assert len({len(scan.items[i].controls) for i in batch}) == 1  # one count per batch
    with pytest.raises(DatasetError) as err:
        _scan(tmp_path, allowed=(1, 4))  # a family needing controls names the unpaired targets
    assert any(p.startswith("c.png: no control image") for p in err.value.problems)
    assert any(p.startswith("d.png: no control image") for p in err.value.problems)


def test_two_controls_of_one_stem_in_a_folder_are_refused_naming_both(tmp_path):
    """control/a.png beside control/a.jpg: which one is a's control? Neither is picked silently;
    the pairing (and the dataset listing) names both, as masks/ does for two masks of one stem."""
    from lorastudio.data.pair_listing import listed_controls

    _targets(tmp_path, ["a", "b"])
    (tmp_path / "control").mkdir()
    write_image(tmp_path / "control" / "a.png", seed=1)
    write_image(tmp_path / "control" / "a.jpg", seed=2)
    write_image(tmp_path / "control" / "b.png", seed=3)
    write_image(tmp_path / "control" / "z.png", seed=4)  # two orphans of one stem: both named
    write_image(tmp_path / "control" / "z.webp", seed=5)
    with pytest.raises(DatasetError) as err:
        _scan(tmp_path)
    text = "\n".join(err.value.problems)
    assert "control/a.jpg, control/a.png: 2 control images for the image a.* in one folder" in text
    assert "control/z.png: control image with no target" in text
    assert "control/z.webp: control image with no target" in text
    assert "b.png" not in text
    found, orphans = listed_controls(tmp_path, [tmp_path / "a.png", tmp_path / "b.png"])
    assert found == {"a.png": ["control/a.jpg", "control/a.png"], "b.png": ["control/b.png"]}
    assert orphans == ["control/z.png", "control/z.webp"]


def test_controls_pair_by_stem_whatever_the_unicode_normalisation_of_the_names(tmp_path):
    """A target uploaded through the studio is stored under its NFC name ("café", é one code
    point); its control copied in from macOS keeps the NFD one (e + U+0301). The names look the
    same, so they pair, in the run's scan and in the dataset listing."""
    import unicodedata

    from lorastudio.data.pair_listing import listed_controls

    nfc, nfd = unicodedata.normalize("NFC", "café ü"), unicodedata.normalize("NFD", "café ü")
    assert nfc != nfd
    _targets(tmp_path, [nfc])
    (tmp_path / "control").mkdir()
    write_image(tmp_path / "control" / f"{nfd}.png")
    scan = _scan(tmp_path)
    assert scan.items[0].controls == (tmp_path / "control" / f"{nfd}.png",)
    found, orphans = listed_controls(tmp_path, [tmp_path / f"{nfc}.png"])
    assert found == {f"{nfc}.png": [f"control/{nfd}.png"]} and orphans == []


@pytest.mark.parametrize("folder", ["Control", "controls", "control_1", "control_11", "CONTROL_2"])
def test_a_misnamed_control_folder_is_named_as_one(tmp_path, folder):
    """A control folder misspelt (`controls/`, `Control/` from a case-blind file system,
    `control_1/`) made a 0..K family (FLUX.2, Kontext) train text-to-image with only "<folder> is not
    used: sub-folder (datasets are not scanned recursively)", and a family needing controls refused
    each target asking for control/ without naming the folder it had. Both now name it."""
    _targets(tmp_path, ["a", "b"])
    (tmp_path / folder).mkdir()
    for stem in ("a", "b"):
        write_image(tmp_path / folder / f"{stem}.png")
    hint = (
        f"{folder}: not read as a control folder (control images go in control/, control_2/ ... control_10/"
    )
    scan = _scan(tmp_path, allowed=(0, 4))
    assert [len(it.controls) for it in scan.items] == [0, 0]  # a guess is not paired
    assert any(f"{name}: {why}".startswith(hint) for name, why in scan.dropped), scan.dropped
    with pytest.raises(DatasetError) as err:
        _scan(tmp_path, allowed=(1, 1))
    assert any(p.startswith(hint) for p in err.value.problems), err.value.problems
    plain = scan_dataset(tmp_path, resolution=64, multiple=16)  # a text-to-image family: any sub-folder
    assert dict(plain.dropped)[folder] == "sub-folder (datasets are not scanned recursively)"


def test_metadata_rows_naming_only_controls_leave_the_captions_to_the_txt_files(tmp_path):
    """A metadata.jsonl listing each target's controls beside .txt captions (which win over the
    table) was refused line by line: 'missing "text" (or "caption") for a.png', a caption that
    would not have been used. A row with control keys and no text now gives no caption; an
    image left without any caption is still refused by name, and a row with neither a caption
    nor a control is still a bad line."""
    root = tmp_path / "data"
    _targets(root, ["a", "b"])
    (root / "refs").mkdir()
    write_image(root / "refs" / "ra.png")
    write_image(root / "refs" / "rb.png")
    rows = [
        {"file_name": "a.png", "control_file_name": "refs/ra.png"},
        {"file_name": "b.png", "control_files": ["refs/rb.png"]},
    ]
    (root / "metadata.jsonl").write_text("\n".join(json.dumps(r) for r in rows))
    scan = _scan(root)
    assert [(it.caption, it.controls) for it in scan.items] == [
        ("edit a", (root / "refs/ra.png",)),
        ("edit b", (root / "refs/rb.png",)),
    ]
    (root / "b.txt").unlink()
    with pytest.raises(DatasetError) as err:
        _scan(root)
    assert [p for p in err.value.problems if p.startswith("b.png")] == [
        "b.png: no caption (add b.txt or a metadata.jsonl row, or set a trigger word or a default caption)"
    ]
    (root / "metadata.jsonl").write_text(json.dumps({"file_name": "a.png"}) + "\n")
    with pytest.raises(DatasetError) as err:
        _scan(root)
    assert 'metadata.jsonl line 1: missing "text" (or "caption") for a.png' in err.value.problems


def test_the_folder_layout_takes_as_many_controls_as_the_widest_family(tmp_path):
    """FLUX.2 dev takes 10 references; the folder layout stopped at control_9/ and named a
    control_10/ as not read, so the 10th needed control_dirs or metadata.jsonl. Every slot up to
    the most any family takes now has its folder (MAX_CONTROL_SLOTS), and one past it is named."""
    from lorastudio import families
    from lorastudio.data.pairs import MAX_CONTROL_SLOTS

    widest = max(families.get(name).spec.control_images[1] for name in families.names())
    assert MAX_CONTROL_SLOTS == widest == 10
    _targets(tmp_path, ["a"])
    folders = ["control", *(f"control_{n}" for n in range(2, 11))]
    for folder in folders:
        (tmp_path / folder).mkdir()
        write_image(tmp_path / folder / "a.png")
    scan = _scan(tmp_path, allowed=(0, 10))
    assert scan.items[0].controls == tuple(tmp_path / f / "a.png" for f in folders)  # slot order: 10 last
    assert scan.dropped == []
    (tmp_path / "control_11").mkdir()
    write_image(tmp_path / "control_11" / "a.png")
    assert dict(_scan(tmp_path, allowed=(0, 10)).dropped)["control_11"].startswith(
        "not read as a control folder"
    )


def test_the_module_states_the_control_sizing_rule_of_the_default():
    """data/pairs.py said controls always take their target's bucket, stale since
    control_resolution (default "pipeline") sizes them as the family's edit pipeline does."""
    from lorastudio.config import TrainConfig
    from lorastudio.data import pairs

    default = TrainConfig.model_fields["control_resolution"].default
    doc = " ".join((pairs.__doc__ or "").split())
    assert f'"{default}" (the default)' in doc and "control_resolution" in doc
    assert "Controls are resized to cover the target's bucket" not in doc


def test_a_control_dir_outside_the_datasets_folder_is_named_as_one(tmp_path):
    """The refusal named "data_dir '/x' is outside the datasets folder" for a control_dirs value
    (found importing an ai-toolkit control_path): the user looked at the wrong setting."""
    from lorastudio.data.pairs import resolve_control_dirs
    from lorastudio.errors import PathOutsideRoot

    root = tmp_path / "datasets"
    root.mkdir()
    with pytest.raises(PathOutsideRoot, match=r"^control_dirs\[1\] '/elsewhere/sources' is outside"):
        resolve_control_dirs([str(root / "a"), "/elsewhere/sources"], root, allow_outside_root=False)
