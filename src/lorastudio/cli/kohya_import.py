"""`lorastudio datasets import --kohya`: kohya's `N_name` folders (and a `--reg` folder) become
datasets, one per folder, and the `datasets` entries that train them with their repeats are
printed; split from cli/datasets_cmd.py. Also `say`, the printer of lines that name the user's
files."""

from __future__ import annotations

import json
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

    _check_new(path)  # again: one made since the import began is not replaced
    staged = path.with_name(f".{path.name}.part")
    staged.write_text(text, encoding="utf-8")
    os.replace(staged, path)


def import_kohya(
    source: Path, target: Path, strict: bool, entries_file: Path | None, reg_source: Path | None = None
) -> None:
    """`datasets import --kohya`: each of DIR's kohya folders becomes the dataset
    `<name>-<N_words>` (its images, and a metadata.jsonl row each: the .txt caption, else the
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
    _check_names_free(
        [(source, target.name), *([(reg_source.resolve(), f"{target.name}-reg")] if reg_source else [])],
        target.parent,
    )
    imported = _import_kohya_folders(source, target.parent, target.name, strict)
    toml = kohya_entries_toml(imported)
    if reg_source is not None:
        reg = _import_kohya_folders(reg_source.resolve(), target.parent, f"{target.name}-reg", strict)
        toml += "\n" + kohya_entries_toml(reg, regularisation=True)
        imported += reg
    typer.echo(f"imported {len(imported)} kohya folder(s); train them with these entries:")
    typer.echo(toml)
    if entries_file is not None:
        _write_new(entries_file, toml)
        typer.echo(f"entries written to {entries_file}")


def _check_names_free(sources: list[tuple[Path, str]], root: Path) -> None:
    """Refuse the import before any dataset is made when a dataset it would make exists already,
    the `--reg` folder's included: the image folders' datasets were made first and a taken
    `<name>-reg-<folder>` then refused the command (exit 2), and a rerun was refused because
    those datasets now existed. Each (source, prefix) is planned as _import_kohya_folders plans
    it; that function checks again under its claim. Raises DatasetError."""
    import os

    from lorastudio.data.kohya import plan_kohya_import
    from lorastudio.errors import DatasetError

    taken = []
    for source, prefix in sources:
        plan = plan_kohya_import(source, flat=False)
        names, _ = _kohya_dataset_names(prefix, sorted({str(r["kohya_folder"]) for r in plan.rows}))
        taken += [n for n in names.values() if os.path.lexists(root / n)]
    if taken:
        raise DatasetError(
            f"dataset {taken[0]} already exists",
            [f"{n}: a kohya import makes new datasets; choose another --name" for n in taken],
        )


def _overlap(a: Path, b: Path) -> bool:
    """Whether resolved folders `a` and `b` are one, or one lies inside the other."""
    return a == b or a in b.parents or b in a.parents


def _import_kohya_folders(source: Path, root: Path, prefix: str, strict: bool) -> list[tuple[str, str]]:
    """Import each kohya folder of `source` as the dataset `<prefix>-<folder>` under `root`
    (see import_kohya); lists what was skipped. Returns (dataset name, folder) per folder."""
    import io
    import os

    from lorastudio.data.control_import import control_files
    from lorastudio.data.kohya import plan_kohya_import
    from lorastudio.data.listing import dataset_summary
    from lorastudio.data.mask_import import copy_masks, dataset_images, plan_masks
    from lorastudio.data.masks import MASKS_DIR
    from lorastudio.data.safe_open import open_in_folder
    from lorastudio.data.uploads import UploadBatch
    from lorastudio.errors import DatasetError
    from lorastudio.jobs.dataset_claims import WRITE, DatasetClaim
    from lorastudio.settings import get_settings

    settings = get_settings()
    plan = plan_kohya_import(source, flat=False)  # one dataset per folder: names may repeat across them
    _drop_bad_images(plan, settings.max_image_pixels, settings.max_decode_pixels)  # no row without its image
    names, unnamed = _kohya_dataset_names(prefix, sorted({str(r["kohya_folder"]) for r in plan.rows}))
    plan.skipped += unnamed
    folders = sorted(names)
    masks = {  # each folder's masks/ (data/mask_import.py), checked against its images
        folder: plan_masks(
            source / folder,
            {Path(name).stem: path for path, name in plan.images if path.parent.name == folder},
            root / names[folder],
            settings.max_image_pixels,
        )
        for folder in folders
    }
    controls = {folder: control_files(source / folder) for folder in folders}  # data/control_import.py
    in_rows = {f"{r['kohya_folder']}/{MASKS_DIR}" for r in plan.rows} | {
        f"{folder}/{slot}" for folder, (files, _) in controls.items() for slot, _ in files
    }  # imported (or skipped with their folder)
    plan.skipped = [(n, why) for n, why in plan.skipped if n not in in_rows]
    plan.skipped += [(f"{folder}/{n}", why) for folder, (_, skips) in controls.items() for n, why in skips]
    bad_masks = [(f"{folder}/{n}", why) for folder, m in masks.items() for n, why in m.refused]
    if strict and (plan.skipped or bad_masks):
        raise DatasetError(
            f"import of {source} refused", [f"{n}: {why}" for n, why in plan.skipped + bad_masks]
        )
    # written like a plain import: every new dataset claimed for writing (jobs/dataset_claims.py) from
    # the check that it is free to the last mask, so a delete, an upload, a caption job or another
    # import of the same names is refused (DatasetBusy) instead of racing the writes
    holder = f"`lorastudio datasets import --kohya` into {', '.join(sorted(names.values()))}"
    with DatasetClaim.take(
        settings.home, settings.datasets_dir, [root / n for n in names.values()], WRITE, holder
    ):
        taken = [n for n in names.values() if os.path.lexists(root / n)]
        if taken:
            raise DatasetError(
                f"dataset {taken[0]} already exists",
                [f"{n}: a kohya import makes new datasets; choose another --name" for n in taken],
            )
        refused: list[tuple[str, str]] = []
        for folder in folders:
            rows = [r for r in plan.rows if r["kohya_folder"] == folder]
            with UploadBatch(
                settings.datasets_dir, root / names[folder], settings.max_image_pixels, settings.max_decode_pixels,
                strict=strict, decoded_dir=settings.decoded_record_dir,
            ) as batch:  # fmt: skip
                for path, name in plan.images:
                    if path.parent.name == folder:
                        with open_in_folder(path) as fh:  # refuses a file swapped for a link meanwhile
                            batch.add(name, fh)
                for slot, path in controls[folder][0]:  # checked as an upload's controls
                    with open_in_folder(path) as fh:
                        batch.add(path.name, fh, slot=slot)
                table = "".join(
                    json.dumps({"file_name": r["file_name"], "text": r["text"]}) + "\n" for r in rows
                )
                batch.add("metadata.jsonl", io.BytesIO(table.encode("utf-8")))
                refused += [(f"{folder}/{f}", why) for f, why in batch.commit().refused]
            target = root / names[folder]
            copied = copy_masks(masks[folder], target, settings.datasets_dir, set(dataset_images(target)))
            summary = dataset_summary(target)
            typer.echo(
                f"dataset {summary['name']}: {summary['images']} image(s), {summary['captions']} captioned"
                + (f", {len(copied)} mask(s)" if copied else "")
            )
    for file, reason in plan.skipped + bad_masks + refused:
        say(f"skipped {file}: {reason}")
    return [(names[f], f) for f in folders]


def _kohya_dataset_names(prefix: str, folders: list[str]) -> tuple[dict[str, str], list[tuple[str, str]]]:
    """The dataset name `<prefix>-<folder>` of each kohya folder, when it is a valid name for a
    new dataset (data.paths.new_name: length, characters, no leading '-'); the others as
    (folder, why) to skip."""
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
    return names, unnamed


def _drop_bad_images(plan: Any, max_pixels: int, decode_pixels: int) -> None:
    """Move the images that an upload would refuse (corrupt, oversized) from `plan` to its
    skipped list, with their metadata rows."""
    from lorastudio.data.images import probe_image
    from lorastudio.errors import DatasetError

    bad = set()
    for path, name in plan.images:
        try:
            probe_image(path, max_pixels, decode_pixels)
        except DatasetError as err:
            plan.skipped.append((f"{path.parent.name}/{path.name}", err.problems[0].split(": ", 1)[-1]))
            bad.add((path.parent.name, name))
    plan.images = [(p, n) for p, n in plan.images if (p.parent.name, n) not in bad]
    plan.rows = [r for r in plan.rows if (r["kohya_folder"], r["file_name"]) not in bad]
