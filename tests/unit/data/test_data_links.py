"""Dataset files are never read through symbolic links: links are dropped at discovery, an
open refuses a file or folder swapped for a link after it was listed, the training worker
refuses a dataset folder swapped for a link after validation, and `datasets import` skips
links (named)."""

from __future__ import annotations

import json
import os
import shutil
from pathlib import Path

import numpy as np
import pytest
from typer.testing import CliRunner

from lorastudio.data import load_crop, scan_dataset
from lorastudio.data.captions import read_metadata, read_sidecar
from lorastudio.data.images import probe_image
from lorastudio.data.safe_open import check_not_relinked, open_in_folder
from lorastudio.errors import DatasetError
from lorastudio.settings import Settings

SECRET = "the secret text outside the dataset"


def _scan(root: Path):
    return scan_dataset(root, resolution=64, multiple=16)


@pytest.fixture
def outside(tmp_path: Path, make_image) -> Path:
    folder = tmp_path / "outside"
    folder.mkdir()
    (folder / "secret.txt").write_text(SECRET)
    make_image(folder / "secret.png")
    (folder / "metadata.jsonl").write_text(json.dumps({"file_name": "a.png", "text": SECRET}))
    return folder


def test_links_in_a_dataset_are_dropped_not_read(tmp_path: Path, make_image, outside: Path) -> None:
    ds = tmp_path / "ds"
    ds.mkdir()
    make_image(ds / "a.png")
    (ds / "a.txt").symlink_to(outside / "secret.txt")
    (ds / "b.png").symlink_to(outside / "secret.png")
    (ds / "metadata.jsonl").symlink_to(outside / "metadata.jsonl")
    linked = [  # not read, and a.png not trained on the trigger word instead (RELIABILITY 1002)
        "a.txt: symbolic link (not followed); a.png has no caption of its own (copy the caption file itself "
        "into the folder, or delete the link to train without it)",
        "metadata.jsonl: symbolic link (not followed); 1 image(s) have no caption of their own (copy the file "
        "itself into the folder, or delete the link to train without it)",
    ]
    with pytest.raises(DatasetError) as err:
        _scan(ds)
    assert err.value.problems == [
        *linked,
        "a.png: no caption (add a.txt or a metadata.jsonl row, or set a trigger word or a default caption)",
    ]
    with pytest.raises(DatasetError) as err:
        scan_dataset(ds, resolution=64, multiple=16, trigger_word="sks")
    assert err.value.problems == linked
    (ds / "a.TXT").write_text("a's own caption")  # the links beside it: named, not refused
    scan = scan_dataset(ds, resolution=64, multiple=16, trigger_word="sks")
    assert [(i.path.name, i.caption) for i in scan.items] == [("a.png", "sks, a's own caption")]
    assert dict(scan.dropped) == {
        "a.txt": "symbolic link (not followed)",
        "b.png": "symbolic link (not followed)",
        "metadata.jsonl": "symbolic link (not followed)",
    }


def test_opens_refuse_links_put_in_place_after_listing(tmp_path: Path, make_image, outside: Path) -> None:
    ds = tmp_path / "ds"
    ds.mkdir()
    (ds / "a.txt").symlink_to(outside / "secret.txt")
    (ds / "a.png").symlink_to(outside / "secret.png")
    (ds / "metadata.jsonl").symlink_to(outside / "metadata.jsonl")
    (ds / "fifo.txt").unlink(missing_ok=True)
    os.mkfifo(ds / "fifo.txt")
    for call in (
        lambda: read_sidecar(ds / "a.txt"),
        lambda: probe_image(ds / "a.png", 10**8),
        lambda: read_metadata(ds / "metadata.jsonl"),
    ):
        with pytest.raises(DatasetError, match="is a symbolic link"):
            call()
    with pytest.raises(DatasetError, match="not a regular file"):  # and did not block
        read_sidecar(ds / "fifo.txt")
    linked_folder = tmp_path / "linked"
    linked_folder.symlink_to(outside, target_is_directory=True)
    with pytest.raises(DatasetError, match="is a symbolic link"):
        open_in_folder(linked_folder / "secret.txt")


def test_a_folder_swapped_for_a_link_after_the_scan_is_refused_by_the_decode(
    tmp_path: Path, make_image, outside: Path
) -> None:
    ds = tmp_path / "ds"
    ds.mkdir()
    make_image(ds / "secret.png")
    (ds / "secret.txt").write_text("mine")
    scan = _scan(ds)
    rng = np.random.default_rng(0)
    assert load_crop(scan.items[0], random_crop=False, flip=False, rng=rng).pixels.shape[0] == 3
    ds.rename(tmp_path / "moved")
    ds.symlink_to(outside, target_is_directory=True)  # same file names, other content
    with pytest.raises(DatasetError, match="is a symbolic link"):
        load_crop(scan.items[0], random_crop=False, flip=False, rng=rng)
    ds.unlink()
    shutil.copytree(outside, ds)  # a real folder again, but not the one that was scanned
    with pytest.raises(DatasetError, match="no longer the folder that was validated"):
        load_crop(scan.items[0], random_crop=False, flip=False, rng=rng)


def test_the_worker_refuses_a_validated_dataset_folder_now_behind_a_link(
    tmp_path: Path, outside: Path
) -> None:
    root = tmp_path / "home" / "datasets"
    (root / "people").mkdir(parents=True)
    validated = str(root.resolve() / "people" / "anna")
    check_not_relinked(validated, Path(validated), root)  # a real folder: fine
    (root / "people" / "anna").symlink_to(outside, target_is_directory=True)
    with pytest.raises(DatasetError, match="resolves to .*outside through a symbolic link"):
        check_not_relinked(validated, Path(validated).resolve(), root)
    (root / "people" / "anna").unlink()
    (root / "people").rename(root / "real")
    (root / "people").symlink_to(root / "real", target_is_directory=True)  # a link above it
    with pytest.raises(DatasetError, match="through a symbolic link"):
        check_not_relinked(validated, Path(validated).resolve(), root)
    check_not_relinked(str(outside), outside, root)  # a CLI run on a folder outside: not concerned


def test_import_skips_links_with_their_names(tmp_path: Path, make_image, outside: Path) -> None:
    source = tmp_path / "src"
    source.mkdir()
    make_image(source / "a.png")
    (source / "a.txt").symlink_to(outside / "secret.txt")
    (source / "b.png").symlink_to(outside / "secret.png")
    (source / "metadata.jsonl").symlink_to(outside / "metadata.jsonl")
    from lorastudio.cli.app import _register
    from lorastudio.cli.app import app as cli

    if not cli.registered_commands:
        _register()
    named = tmp_path / "named"
    named.symlink_to(source, target_is_directory=True)  # the folder given may itself be a link
    result = CliRunner().invoke(cli, ["datasets", "import", str(named), "--name", "imp"])
    assert result.exit_code == 0, result.output
    for name in ("a.txt", "b.png", "metadata.jsonl"):
        assert f"skipped {name} (a symbolic link: links are not followed)" in result.output
    target = Settings().datasets_dir / "imp"
    assert sorted(p.name for p in target.iterdir()) == ["a.png"]
    assert SECRET not in "".join(p.read_text(errors="replace") for p in target.iterdir())


def test_an_upload_never_writes_through_a_dataset_folder_swapped_for_a_link(
    tmp_path: Path, make_image, outside: Path
) -> None:
    import io

    from lorastudio.data.uploads import UploadBatch

    root = tmp_path / "datasets"
    (root / "ds").mkdir(parents=True)
    image = make_image(tmp_path / "new.png").read_bytes()
    before = sorted(p.name for p in outside.iterdir())
    with UploadBatch(root, root / "ds", 10**6) as batch:
        batch.add("new.png", io.BytesIO(image))
        (root / "ds").rmdir()  # checked by the route; swapped for a link before the commit
        (root / "ds").symlink_to(outside, target_is_directory=True)
        with pytest.raises(DatasetError, match="is a symbolic link"):
            batch.commit()
    assert sorted(p.name for p in outside.iterdir()) == before


def test_a_folder_of_image_links_names_each_link_it_did_not_follow(tmp_path: Path, make_image) -> None:
    """A dataset made of links to the images (`ln -s ~/photos/*.png`) was refused as "no
    png/jpg/jpeg/webp files", its images unnamed: each link is now named with the reason."""
    photos, ds = tmp_path / "photos", tmp_path / "ds"
    photos.mkdir()
    ds.mkdir()
    for n in range(12):
        make_image(photos / f"p{n:02d}.png")
        (ds / f"p{n:02d}.png").symlink_to(photos / f"p{n:02d}.png")
    (ds / "notes.md").write_text("x")
    with pytest.raises(DatasetError) as err:
        _scan(ds)
    problems = err.value.problems
    assert problems[0] == f"{ds}: no png/jpg/jpeg/webp files (sub-folders are not scanned)"
    assert (
        problems[1]
        == f"{ds / 'p00.png'}: symbolic link (not followed); copy the image itself into the folder"
    )
    assert (
        len(problems) == 12 and problems[-1] == f"{ds}: 2 more image name(s) not used, for the same reasons"
    )
    assert not any("notes.md" in p for p in problems)
