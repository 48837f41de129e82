"""`lorastudio datasets import --kohya`: kohya's `N_name` folders (and a `--reg` folder) become
datasets, one per folder, and the `datasets` entries that train them with their repeats are
printed; split from cli/datasets_cmd.py. Also `say`, the printer of lines that name the user's
files."""

from __future__ import annotations

import json
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import typer


def say(line: str) -> None:
    """Print a line naming files of the user's folder with their control, invisible and
    non-UTF-8 characters escaped (data.paths.shown_name)."""
    from lorastudio.data.paths import shown_name

    typer.echo(shown_name(line))


def _check_new(path: Path) -> None:
    """Refuse an --entries `path` that cannot be written as a new file (it exists, or its folder
    does not), before anything is imported: the import's datasets were made first and the
    command then failed on the file (exit 2), and a rerun with another file was refused because
    those datasets now existed. Raises DatasetError."""
    import os

    from lorastudio.errors import DatasetError

    if os.path.lexists(path):
        raise DatasetError(f"{path} already exists", [f"{path}: choose another --entries file"])
    if not path.parent.is_dir():
        raise DatasetError(
            f"{path.parent} is not a folder", [f"{path}: choose an --entries file in a folder"]
        )


def _write_new(path: Path, text: str) -> None:
    """Write `text` to the new file `path` (staged, then renamed; an existing file is refused)."""
    import os

    from lorastudio.errors import writing

    _check_new(path)  # again: one made since the import began is not replaced
    staged = path.with_name(f".{path.name}.part")
    try:
        with writing(f"the datasets entries {path.name} could not be written", path):
            staged.write_text(text, encoding="utf-8")
            os.replace(staged, path)
    finally:
        staged.unlink(missing_ok=True)  # a failed write leaves nothing beside it


def import_kohya(
    source: Path, target: Path, strict: bool, entries_file: Path | None, reg_source: Path | None = None
) -> None:
    """`datasets import --kohya`: each of DIR's kohya folders becomes the dataset
    `<name>-<N_words>` (its images, and a metadata.jsonl row each: the .txt / .caption caption, else the
    folder's words), and the run's `datasets` entries that train them with their repeats are
    printed (TOML, to paste into a config), and written to `entries_file` when given. With
    `reg_source` (kohya's reg folder, e.g. `reg/1_person`), its folders become `<name>-reg-<N_words>`
    and their entries are marked `regularisation = true` (no trigger word)."""
    from lorastudio.data.kohya import kohya_entries_toml

    if reg_source is not None and _overlap(reg_source.resolve(), source):
        raise typer.BadParameter(
            f"--reg {reg_source} is the image folder, inside it or holds it: give kohya's separate reg folder"
        )
    if entries_file is not None:
        _check_new(entries_file)  # before any dataset is made
    # every folder planned and checked (a --strict refusal) before anything is written; then all
    # written at once (_write_all): a reg folder is no longer imported after, and apart from, the images
    parts = [_prepare(source, target.parent, target.name, strict)]
    if reg_source is not None:
        parts.append(_prepare(reg_source.resolve(), target.parent, f"{target.name}-reg", strict))
    written = _write_all(parts, target.parent, strict)
    imported = written[0]
    toml = kohya_entries_toml(imported)
    if reg_source is not None:
        toml += "\n" + kohya_entries_toml(written[1], regularisation=True)
        imported = imported + written[1]
    typer.echo(f"imported {len(imported)} kohya folder(s); train them with these entries:")
    typer.echo(toml)
    if entries_file is not None:
        _write_new(entries_file, toml)
        typer.echo(f"entries written to {entries_file}")


def _overlap(a: Path, b: Path) -> bool:
    """Whether resolved folders `a` and `b` are one, or one lies inside the other."""
    return a == b or a in b.parents or b in a.parents


@dataclass
class _Planned:
    """One kohya folder of folders, planned and checked: `names` (folder -> dataset name), its
    folders' `masks` and `controls`, and what is `skipped` (path, reason) so far."""

    source: Path
    plan: Any
    names: dict[str, str]
    masks: dict[str, Any]
    controls: dict[str, Any]
    skipped: list[tuple[str, str]]

    @property
    def folders(self) -> list[str]:
        return sorted(self.names)


def _prepare(source: Path, root: Path, prefix: str, strict: bool) -> _Planned:
    """Plan the import of each kohya folder of `source` as the dataset `<prefix>-<folder>` under
    `root` (see import_kohya): images, captions, masks and controls checked, nothing written.
    Raises DatasetError (`strict`: listing every file that would be skipped)."""
    from lorastudio.data.control_import import control_files
    from lorastudio.data.kohya import plan_kohya_import
    from lorastudio.data.mask_import import plan_masks
    from lorastudio.data.masks import MASKS_DIR
    from lorastudio.errors import DatasetError
    from lorastudio.settings import get_settings

    settings = get_settings()
    plan = plan_kohya_import(source, flat=False)  # one dataset per folder: names may repeat across them
    _drop_bad_images(plan, settings.max_image_pixels, settings.max_decode_pixels)  # no row without its image
    names, unnamed = _kohya_dataset_names(prefix, sorted({str(r["kohya_folder"]) for r in plan.rows}))
    plan.skipped += unnamed
    masks = {  # each folder's masks/ (data/mask_import.py), checked against its images
        folder: plan_masks(
            source / folder,
            {Path(name).stem: path for path, name in plan.images if path.parent.name == folder},
            root / names[folder],
            settings.max_image_pixels,
        )
        for folder in names
    }
    controls = {folder: control_files(source / folder) for folder in names}  # data/control_import.py
    in_rows = {f"{r['kohya_folder']}/{MASKS_DIR}" for r in plan.rows} | {
        f"{folder}/{slot}" for folder, (files, _) in controls.items() for slot, _ in files
    }  # imported (or skipped with their folder)
    skipped = [(n, why) for n, why in plan.skipped if n not in in_rows]
    skipped += [(f"{folder}/{n}", why) for folder, (_, skips) in controls.items() for n, why in skips]
    skipped += [(f"{folder}/{n}", why) for folder, m in masks.items() for n, why in m.refused]
    if strict and skipped:
        raise DatasetError(f"import of {source} refused", [f"{n}: {why}" for n, why in skipped])
    return _Planned(source, plan, names, masks, controls, skipped)


def _write_all(parts: list[_Planned], root: Path, strict: bool) -> list[list[tuple[str, str]]]:
    """Write every planned dataset of `parts` under `root`, then list what each one stored and
    skipped. Returns (dataset name, folder) per folder, per part.

    Written like a plain import: every new dataset claimed for writing (jobs/dataset_claims.py)
    from the check that it is free to the last rename, so a delete, an upload, a caption job or
    another import of the same names is refused (DatasetBusy) instead of racing the writes. Every
    dataset is first made whole (images, controls, metadata.jsonl, masks) in one hidden folder
    under the uploads' staging (datasets/.uploads/kohya-<id>/, owned by this process: a killed
    import's is removed by the next `datasets` command, `train` or server start:
    data/staging_owner.py), and only then renamed into place, all together: a kill or an error
    part-way leaves no dataset under its final name, so the same import can simply be run again."""
    import os
    import shutil

    from lorastudio.data.listing import dataset_summary
    from lorastudio.data.mask_import import copy_masks, dataset_images
    from lorastudio.data.staging_owner import release
    from lorastudio.errors import DatasetError
    from lorastudio.jobs.dataset_claims import WRITE, DatasetClaim
    from lorastudio.settings import get_settings

    settings = get_settings()
    every = sorted(n for part in parts for n in part.names.values())
    holder = f"`lorastudio datasets import --kohya` into {', '.join(every)}"
    with DatasetClaim.take(settings.home, settings.datasets_dir, [root / n for n in every], WRITE, holder):
        taken = [n for n in every if os.path.lexists(root / n)]
        if taken:
            raise DatasetError(
                f"dataset {taken[0]} already exists",
                [f"{n}: a kohya import makes new datasets; choose another --name" for n in taken],
            )
        staged_root, owner = _staging_folder(settings.datasets_dir)
        try:
            lines: list[str] = []
            for part in parts:
                refused: list[tuple[str, str]] = []
                for folder in part.folders:
                    staged = staged_root / part.names[folder]
                    refused += _stage_folder(
                        settings, part.plan, folder, part.controls[folder], staged, strict, root / staged.name
                    )
                    stems = set(dataset_images(staged))
                    copied = copy_masks(
                        part.masks[folder], staged, settings.datasets_dir, stems, shown=root / staged.name
                    )
                    summary = dataset_summary(staged)
                    lines.append(
                        f"dataset {summary['name']}: {summary['images']} image(s), {summary['captions']} captioned"
                        + (f", {len(copied)} mask(s)" if copied else "")
                    )
                part.skipped += refused
            taken = [n for n in every if os.path.lexists(root / n)]  # made meanwhile, outside the studio
            if taken:
                raise DatasetError(
                    f"dataset {taken[0]} already exists",
                    [f"{root / n}: made during the import" for n in taken],
                )
            for name in every:  # every dataset is whole: now under their names
                _move_into_place(staged_root / name, root / name, settings.decoded_record_dir)
        finally:
            shutil.rmtree(staged_root, ignore_errors=True)
            release(staged_root, owner)
    for line in lines:
        typer.echo(line)
    for part in parts:
        for file, reason in part.skipped:
            say(f"skipped {file}: {reason}")
    return [[(part.names[f], f) for f in part.folders] for part in parts]


def _staging_folder(datasets_dir: Path) -> tuple[Path, int | None]:
    """A new hidden folder for an import's datasets under the uploads' staging folder
    (data/uploads.py STAGING_DIR), owned by this process while it lives (data/staging_owner.py:
    a killed import's is removed by the next CLI command that touches datasets, or a server
    start; a live one's never). Returns it and its owner lock (release it after the folder)."""
    from lorastudio.data.staging_owner import STAGING_DIR, make_owned
    from lorastudio.data.writes import make_dir

    while True:  # an upload's exit removes the (empty) staging root when it can
        make_dir(datasets_dir / STAGING_DIR)
        try:
            return make_owned(datasets_dir / STAGING_DIR, "kohya-")
        except FileNotFoundError:
            continue


def _stage_folder(
    settings: Any, plan: Any, folder: str, controls: Any, staged: Path, strict: bool, dataset: Path
) -> list[tuple[str, str]]:
    """Check and store kohya `folder`'s images, controls and metadata.jsonl as the dataset folder
    `staged` (an upload's checks: data/uploads.py); returns the refused files, with their reasons.
    A failure names `dataset`, the folder `staged` becomes, and a failed read the source file."""
    import io

    from lorastudio.data.safe_open import open_in_folder
    from lorastudio.data.uploads import UploadBatch

    rows = [r for r in plan.rows if r["kohya_folder"] == folder]
    with UploadBatch(
        settings.datasets_dir, staged, settings.max_image_pixels, settings.max_decode_pixels,
        strict=strict, decoded_dir=settings.decoded_record_dir, shown=dataset,
    ) as batch:  # fmt: skip
        for path, name in plan.images:
            if path.parent.name == folder:
                with open_in_folder(path) as fh:  # refuses a file swapped for a link meanwhile
                    batch.add(name, fh, source=path)
        for slot, path in controls[0]:  # checked as an upload's controls
            with open_in_folder(path) as fh:
                batch.add(path.name, fh, slot=slot, source=path)
        table = "".join(json.dumps({"file_name": r["file_name"], "text": r["text"]}) + "\n" for r in rows)
        batch.add("metadata.jsonl", io.BytesIO(table.encode("utf-8")))
        return [(f"{folder}/{f}", why) for f, why in batch.commit().refused]


def _move_into_place(staged: Path, target: Path, decoded_dir: Path | None) -> None:
    """Rename the whole staged dataset `staged` to `target` (its record of decoded files with it:
    data/decoded_files.move_record). Raises DatasetError when `target` appeared meanwhile (made outside
    the studio: the claim keeps the studio's writers out)."""
    import os

    from lorastudio.data.decoded_files import move_record
    from lorastudio.data.safe_open import folder_identity
    from lorastudio.errors import DatasetError

    if os.path.lexists(target):  # rename would replace an empty folder without a word
        raise DatasetError(f"dataset {target.name} already exists", [f"{target}: made during the import"])
    os.rename(staged, target)
    if decoded_dir is not None:
        move_record(decoded_dir, staged, target, folder_identity(target))


def _kohya_dataset_names(prefix: str, folders: list[str]) -> tuple[dict[str, str], list[tuple[str, str]]]:
    """The dataset name `<prefix>-<folder>` of each kohya folder, when it is a valid name for a
    new dataset (data.paths.new_name: length, characters, no leading '-') that no other folder's
    name also is (new_name normalises to NFC: `10_café` typed twice, composed and decomposed, are
    two folders of one name, which were merged into one dataset, one's images replacing the
    other's); the others as (folder, why) to skip."""
    from lorastudio.data import new_name
    from lorastudio.errors import ConfigError, PathOutsideRoot

    names: dict[str, str] = {}
    unnamed: list[tuple[str, str]] = []
    for folder in folders:
        try:
            names[folder] = new_name(f"{prefix}-{folder}", field="dataset name")
        except ConfigError as err:
            unnamed.append((folder, f"{err.problems[0].field} {err.problems[0].message}"))
        except PathOutsideRoot as err:
            unnamed.append((folder, str(err)))
    by_name: dict[str, list[str]] = {}
    for folder, name in names.items():
        by_name.setdefault(name, []).append(folder)
    for name, twins in by_name.items():
        if len(twins) > 1:
            for folder in twins:
                others = ", ".join(ascii(f) for f in twins if f != folder)
                why = f"the folder {others} makes the same dataset name {name} (one name once normalised): rename one"
                unnamed.append((folder, why))
                del names[folder]
    return names, unnamed


def _drop_bad_images(plan: Any, max_pixels: int, decode_pixels: int) -> None:
    """Move the images that an upload would refuse (a name it refuses, corrupt, oversized) from
    `plan` to its skipped list, with their metadata rows: an image named with a control
    character was refused by the upload and its row stored all the same, naming no file
    (RELIABILITY 2101)."""
    from lorastudio.data.images import probe_image
    from lorastudio.data.uploads import upload_kind
    from lorastudio.errors import ConfigError, DatasetError, PathOutsideRoot

    bad = set()
    for path, name in plan.images:
        try:
            upload_kind(name)  # the upload's name rule (data.paths.safe_component)
            probe_image(path, max_pixels, decode_pixels)
        except (DatasetError, ConfigError, PathOutsideRoot) as err:
            if isinstance(err, DatasetError):  # "<path>: why"
                why = err.problems[0].split(": ", 1)[-1]
            else:  # "file name: why" (ConfigError), or the PathOutsideRoot's sentence
                why = str(err.problems[0]) if isinstance(err, ConfigError) else str(err)
            plan.skipped.append((f"{path.parent.name}/{path.name}", why))
            bad.add((path.parent.name, name))
    plan.images = [(p, n) for p, n in plan.images if (p.parent.name, n) not in bad]
    plan.rows = [r for r in plan.rows if (r["kohya_folder"], r["file_name"]) not in bad]
