"""Dataset entries together with main's run features: the one run scan (data/run_scan.py) attaches
each entry's own masks/, the validation hold-out (data/holdout.py) draws per entry and keeps an
image's copies at several resolutions on one side, a validation folder may not be an entry, and
the mixed sampler groups by bucket and control count."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pytest
from PIL import Image

from lorastudio import families
from lorastudio.config import TrainConfig
from lorastudio.config_resolve import resolve_train_config
from lorastudio.data.entries import epoch_bucket_counts, resolve_entries, run_sampler
from lorastudio.data.holdout import split_validation
from lorastudio.data.items import ImageItem
from lorastudio.data.masks import mask_section, mask_warning
from lorastudio.data.run_scan import scan_for_run
from lorastudio.data.upscaling import upscale_warning
from lorastudio.errors import ConfigError
from lorastudio.settings import Settings


def _folder(path: Path, count: int, masks: bool = False) -> Path:
    path.mkdir(parents=True)
    for i in range(count):
        Image.new("RGB", (64, 64), (30 * i, 90, 150)).save(path / f"{path.name}{i}.png")
        (path / f"{path.name}{i}.txt").write_text(f"{path.name} image {i}")
    if masks:
        (path / "masks").mkdir()
        for i in range(count):
            Image.new("L", (64, 64), 255).save(path / "masks" / f"{path.name}{i}.png")
    return path


def _run_scan(tmp_path: Path, **kw: object):
    a, b = _folder(tmp_path / "a", 4, masks=True), _folder(tmp_path / "b", 4)
    cfg = resolve_train_config(
        TrainConfig.model_validate(
            {
                "family": "flux",
                "base_model": "x",
                "datasets": [{"path": str(a), "repeats": 2}, {"path": str(b)}],
                **kw,
            }
        )
    )
    settings = Settings(home=tmp_path / "home")
    entries = resolve_entries(cfg, tmp_path, allow_outside_root=True)
    return cfg, settings, scan_for_run(entries, cfg, families.get("flux").spec, settings)


def test_each_entry_gets_its_own_masks_folder(tmp_path: Path) -> None:
    _, _, scan = _run_scan(tmp_path, unmasked_weight=0.0)
    masked = {it.path.name: it.mask is not None for it in scan.items}
    assert masked == {f"a{i}.png": True for i in range(4)} | {f"b{i}.png": False for i in range(4)}


def test_the_hold_out_draws_per_entry_and_keeps_an_image_s_copies_together(tmp_path: Path) -> None:
    cfg, settings, scan = _run_scan(tmp_path, resolution=[32, 64], validation_split=0.25)
    assert len(scan.items) == 16  # 8 images, each at 32 and 64
    holdout = split_validation(
        scan, 0.25, cfg.seed, resolve_folder=Path, scan_folder=lambda f: scan_for_run(f, cfg, None, settings)
    )
    held = {(it.entry, it.path.name) for it in holdout.validation}
    assert sorted(e for e, _ in held) == [0, 1]  # one image of each entry
    assert len(holdout.validation) == 4  # both copies of each held image
    assert sorted(it.resolution for it in holdout.validation) == [32, 32, 64, 64]
    assert not held & {(it.entry, it.path.name) for it in holdout.train.items}
    assert len(holdout.train.items) == 12 and len(holdout.names()) == 2
    again = split_validation(scan, 0.25, cfg.seed, resolve_folder=Path, scan_folder=lambda f: scan)
    assert again.validation == holdout.validation  # a function of the seed


def test_held_out_images_of_entries_with_the_same_file_names_are_each_counted_and_named(
    tmp_path: Path,
) -> None:
    a, b = _folder(tmp_path / "a" / "x", 4), _folder(tmp_path / "b" / "x", 4)  # same file names x0..x3
    cfg = resolve_train_config(
        TrainConfig.model_validate(
            {"family": "flux", "base_model": "x", "datasets": [{"path": str(a)}, {"path": str(b)}]}
        )
    )
    entries = resolve_entries(cfg, tmp_path, allow_outside_root=True)
    scan = scan_for_run(entries, cfg, families.get("flux").spec, Settings(home=tmp_path / "home"))
    holdout = split_validation(scan, 0.25, cfg.seed, resolve_folder=Path, scan_folder=lambda f: scan)
    held = sorted((it.entry, it.path.name) for it in holdout.validation)
    assert [e for e, _ in held] == [0, 1]
    names = holdout.names()  # the preflight's count and list: one per held image, its entry named
    assert sorted(names) == sorted(f"{entries[e].label}/{n}" for e, n in held)
    # what each entry trains on (the preflight's and the sidecar's image count): 4 less the held one
    assert [e.images for e in scan.entries] == [4, 4] and [e.images for e in holdout.train.entries] == [3, 3]


def test_the_preflight_s_file_lists_count_each_image_once_and_name_its_entry(tmp_path: Path) -> None:
    """Two entries holding the same file names, at two resolutions: the upscale warning and the
    mask section and warning count each (entry, image) once and name its entry."""
    a, b = _folder(tmp_path / "a" / "x", 2, masks=True), _folder(tmp_path / "b" / "x", 2)  # x0, x1 each
    (a / "masks" / "x1.png").unlink()  # a/x1 trains unmasked
    cfg = resolve_train_config(
        TrainConfig.model_validate(
            {
                "family": "flux",
                "base_model": "x",
                "resolution": [32, 256],  # 64 px images: 4x upscaled at 256
                "datasets": [{"path": str(a)}, {"path": str(b)}],
            }
        )
    )
    entries = resolve_entries(cfg, tmp_path, allow_outside_root=True)
    scan = scan_for_run(entries, cfg, families.get("flux").spec, Settings(home=tmp_path / "home"))
    la, lb = (e.label for e in entries)
    warning = upscale_warning(scan.items, no_upscale=False, labels=scan.labels())
    assert warning is not None and warning.startswith("4 image(s) would be upscaled")
    assert all(f"{label}/x{i}.png (4.0x)" in warning for label in (la, lb) for i in range(2))
    section = mask_section(scan.items, False, labels=scan.labels())
    assert section is not None and section["images_with_mask"] == 1
    assert section["without_mask"] == sorted([f"{la}/x1.png", f"{lb}/x0.png", f"{lb}/x1.png"])
    assert mask_warning(scan.items, labels=scan.labels()) == (
        f"3 image(s) have no mask and train unmasked: {', '.join(section['without_mask'])}"
    )


def test_an_entry_too_small_to_split_trains_whole_and_none_at_all_is_refused(tmp_path: Path) -> None:
    cfg, _, scan = _run_scan(tmp_path)
    small = [it for it in scan.items if it.entry == 0 or it.path.name == "b0.png"]  # b: 1 image
    one = type(scan)(**{**scan.__dict__, "items": small})
    holdout = split_validation(one, 0.25, cfg.seed, resolve_folder=Path, scan_folder=lambda f: one)
    assert [it.entry for it in holdout.validation] == [0]
    assert "b0.png" in {it.path.name for it in holdout.train.items} and "too few images" in holdout.source
    with pytest.raises(ConfigError) as err:
        split_validation(scan, 0.9, cfg.seed, resolve_folder=Path, scan_folder=lambda f: scan)
    assert err.value.problems[0].field == "validation_split" and "each dataset entry" in str(err.value)


def test_regularisation_images_are_never_held_out(tmp_path: Path) -> None:
    """Class images are no part of what the validation loss measures (the subject): a fraction
    holds none of a regularisation entry's out, all of them train (kohya's sd-scripts skips its
    reg subsets in the validation split); a subject too small to split is refused, not replaced
    by class images."""
    a, b = _folder(tmp_path / "a", 4), _folder(tmp_path / "b", 8)
    for i in range(8):  # class images of their own content (not copies of the subject's)
        Image.new("RGB", (64, 64), (30 * i, 10, 220)).save(b / f"b{i}.png")
    cfg = resolve_train_config(
        TrainConfig.model_validate(
            {
                "family": "flux",
                "base_model": "x",
                "datasets": [{"path": str(a)}, {"path": str(b), "regularisation": True}],
            }
        )
    )
    entries = resolve_entries(cfg, tmp_path, allow_outside_root=True)
    scan = scan_for_run(entries, cfg, families.get("flux").spec, Settings(home=tmp_path / "home"))
    holdout = split_validation(scan, 0.25, cfg.seed, resolve_folder=Path, scan_folder=lambda f: scan)
    assert {it.entry for it in holdout.validation} == {0} and len(holdout.validation) == 1
    assert [e.images for e in holdout.train.entries] == [3, 8]  # every class image trains
    assert f"none of {entries[1].label} (regularisation)" in holdout.source
    one = type(scan)(
        **{**scan.__dict__, "items": [it for it in scan.items if it.entry == 1 or it.path.name == "a0.png"]}
    )
    with pytest.raises(ConfigError, match="leaves no training image"):  # the subject's 1 image: no split
        split_validation(one, 0.25, cfg.seed, resolve_folder=Path, scan_folder=lambda f: one)


def test_a_validation_folder_may_not_be_one_of_the_entries(tmp_path: Path) -> None:
    cfg, _, scan = _run_scan(tmp_path)
    with pytest.raises(ConfigError, match="is the dataset itself"):
        split_validation(scan, str(tmp_path / "b"), cfg.seed, resolve_folder=Path, scan_folder=lambda f: scan)


def test_the_mixed_sampler_never_batches_samples_with_different_control_counts(tmp_path: Path) -> None:
    _, _, scan = _run_scan(tmp_path, batch_size=4, resolution=64)
    ctrl = tmp_path / "a" / "a0.png"  # half of entry a's samples get a control (a mixed dataset)
    items = [
        ImageItem(**{**it.__dict__, "controls": (ctrl,) if it.entry == 0 and i % 2 else ()})
        for i, it in enumerate(scan.items)
    ]
    mixed = type(scan)(**{**scan.__dict__, "items": items})
    sampler = run_sampler(mixed, batch_size=4, seed=3)
    for epoch in range(3):
        for batch in sampler.epoch_batches(epoch):
            assert len({mixed.batch_keys()[i] for i in batch}) == 1
    counts = epoch_bucket_counts(mixed)  # entry a x2: 8 samples, 4 with a control
    assert counts == {"64x64+0": 8, "64x64+1": 4}
    assert np.sum(list(counts.values())) == sum(len(b) for b in sampler.epoch_batches(0))
