"""`lorastudio datasets list|import DIR [--name N] [--strict] [--kohya]|captions NAME|delete NAME|rename NAME TO`:
the studio's dataset folders. A new dataset's name must not start with '-' (data/paths.py
new_name); one named so before (or by hand) is given after '--': `datasets delete --yes -- -x`.
The commands that change a dataset in place (`delete`, `rename`, `captions`) are in
cli/dataset_edit_cmd.py, `datasets caption` in cli/caption_cmd.py."""

from __future__ import annotations

import io
import os
from pathlib import Path

import typer

from lorastudio.cli.kohya_import import import_kohya, say
from lorastudio.cli.tables import print_table
from lorastudio.cli.user_path_args import existing_folder, user_path

datasets_app = typer.Typer(
    help="Dataset folders under the studio home.", no_args_is_help=True, rich_markup_mode=None
)


def register(app: typer.Typer) -> None:
    app.add_typer(datasets_app, name="datasets")


@datasets_app.callback()
def _before_each() -> None:
    """Before every `datasets` command: remove the staging that killed imports and uploads left
    in datasets/.uploads (data/staging_owner.py: only what no live process owns)."""
    remove_killed_staging()


def remove_killed_staging() -> None:
    """Remove what killed imports and uploads left in datasets/.uploads/ (their owner lock free:
    data/staging_owner.py; a live server's, import's or upload's is held, so kept), each removed
    entry printed on stderr. A home whose settings cannot be read is left to the command."""
    from lorastudio.data.staging_owner import remove_stale_staging
    from lorastudio.errors import ConfigError
    from lorastudio.settings import get_settings

    try:
        datasets_dir = get_settings().datasets_dir
    except ConfigError:
        return
    for entry in remove_stale_staging(datasets_dir):
        typer.echo(f"removed what a killed import or upload left: {entry}", err=True)


@datasets_app.command("list")
def list_cmd() -> None:
    """List the dataset folders with their image and caption counts."""
    from lorastudio.data.listing import list_datasets
    from lorastudio.data.paths import shown_name
    from lorastudio.settings import get_settings

    settings = get_settings()
    found = list_datasets(settings.datasets_dir)
    if not found:
        typer.echo(f"no datasets in {settings.datasets_dir}")
        return
    rows = [[d["name"], str(d["images"]), str(d["captions"]), d["path"]] for d in found]
    print_table(("name", "images", "captions", "path"), rows, keep=("name",))
    for d in found:
        if not d["usable"]:  # a folder made by hand under a name the studio cannot use, a link
            fix = "" if Path(d["path"]).is_symlink() else " (`lorastudio datasets rename -- OLD NEW`)"
            typer.echo(f"unusable: {shown_name(d['name'])!r}: {shown_name(d['problem'])}{fix}")
        elif d["markup_captions"]:  # RELIABILITY 1862: a fresh run refuses the dataset until they are edited
            typer.echo(
                f"markup: {shown_name(d['name'])!r}: {d['markup_captions']} caption(s) hold a {{trigger}}-like "
                "placeholder or kohya's |||, which a fresh run refuses (its preflight names each)"
            )
        if d["usable"] and not d["markup_counted"]:  # RELIABILITY 2072: not a silent 0
            typer.echo(
                f"markup: {shown_name(d['name'])!r}: the rows of its metadata.jsonl (over 8 MB) are not "
                "counted here; `lorastudio train --check` names each caption a fresh run refuses"
            )


@datasets_app.command("import")
def import_cmd(
    source: Path = typer.Argument(..., callback=existing_folder, help="folder to import"),
    name: str | None = typer.Option(None, "--name", help="dataset name (default: the folder's name)"),
    strict: bool = typer.Option(False, "--strict", help="import nothing when any file is bad"),
    kohya: bool = typer.Option(
        False,
        "--kohya",
        help="DIR holds kohya <repeats>_<words> folders: one dataset each, and the datasets entries "
        "(repeats, trigger word) printed for the training config",
    ),
    entries: Path | None = typer.Option(
        None,
        "--entries",
        callback=user_path,
        help="with --kohya: also write the datasets entries to this new TOML file",
    ),
    reg: Path | None = typer.Option(
        None,
        "--reg",
        callback=existing_folder,
        help="with --kohya: kohya's regularisation folder (its N_class sub-folders): imported as NAME-reg-<folder>, "
        "their entries marked regularisation = true",
    ),
) -> None:
    """Copy a folder's images, .txt captions and metadata.jsonl into datasets/<name>. Every file
    is checked first; the good ones are imported and the bad ones listed with the reason (with
    --strict, nothing is written unless all pass); refused while a run reads the dataset or a
    caption job writes it (its write claim, jobs/dataset_claims.py). Other files, named pipes / sockets /
    devices and symbolic links (never followed) are skipped (listed), and so are sub-folders but masks/ (its loss masks are checked
    and imported, data/mask_import.py) and the control folders (control/, control_2/ ...: each control
    checked as an upload's, data/control_import.py), each with the reason (kohya
    `N_words` folders: use --kohya; a folder of kohya folders alone is refused saying so). With --kohya, each of DIR's `N_words` sub-folders becomes a
    new dataset NAME-N_words (its images, each captioned by its .txt or .caption, else the folder's words)
    and the `datasets` entries that train them with their repeats are printed (TOML)."""
    from lorastudio.cli.import_tables import kohya_captions_as_txt, table_rows, unnamed_files
    from lorastudio.data import new_name, resolve_dataset_dir, safe_component
    from lorastudio.data.control_import import control_files
    from lorastudio.data.discovery import METADATA_FILE, is_image_name
    from lorastudio.data.imagefolder import flatten_rows
    from lorastudio.data.kohya import is_kohya_folder, parse_kohya_folder
    from lorastudio.data.listing import dataset_summary
    from lorastudio.data.mask_import import copy_masks, dataset_images, plan_masks
    from lorastudio.data.metadata_csv import csv_as_jsonl
    from lorastudio.data.peer_files import METADATA_CSV, foreign_file_reason
    from lorastudio.data.safe_open import open_in_folder
    from lorastudio.data.upload_pairs import control_slot
    from lorastudio.data.uploads import REFUSED_IMAGE_EXTENSIONS, UploadBatch, UploadResult, upload_kind
    from lorastudio.errors import ConfigError, DatasetError, PathOutsideRoot
    from lorastudio.jobs.dataset_claims import WRITE, DatasetClaim
    from lorastudio.settings import get_settings

    settings = get_settings().ensure_dirs()
    field = "--name" if name else "--name (the folder's name when not given)"
    dataset = safe_component(name or source.resolve().name, field=field)
    target = resolve_dataset_dir(dataset, settings.datasets_dir, allow_outside_root=False)
    if kohya or not os.path.lexists(target):  # a new dataset (--kohya makes <name>-<folder> ones)
        new_name(dataset, field=field)
    source = source.resolve()  # the folder the user named may be a link; links inside it are not followed
    if kohya:
        import_kohya(source, target, strict, entries, reg)
        return
    if entries is not None or reg is not None:
        raise typer.BadParameter("--entries and --reg belong to a --kohya import; add --kohya")
    listing = sorted(p for p in source.iterdir() if not p.name.startswith("."))
    links = [p.name for p in listing if p.is_symlink()]
    files = [p for p in listing if not p.is_symlink() and p.is_file()]
    folders = [p.name for p in listing if not p.is_symlink() and p.is_dir()]
    special = [p.name for p in listing if not p.is_symlink() and not p.is_file() and not p.is_dir()]
    wanted, skipped = [], []
    kind_reasons: dict[str, str] = {}
    for path in files:
        try:
            upload_kind(path.name)
            wanted.append(path)
        except (ConfigError, PathOutsideRoot):
            wanted.append(
                path
            )  # an unsafe name (control characters, not UTF-8): the batch refuses it saying why
        except DatasetError as err:
            if path.name.lower().endswith(REFUSED_IMAGE_EXTENSIONS):
                wanted.append(
                    path
                )  # an image of a refused type: the batch refuses it (and its caption) saying why
            else:
                skipped.append(path.name)
                kind_reasons[path.name] = err.problems[0].split(": ", 1)[-1]  # upload_kind's: what it is
    # a Hugging Face imagefolder's metadata.csv: stored as the metadata.jsonl a dataset reads
    table = None
    if METADATA_CSV in skipped and not any(p.name == METADATA_FILE for p in wanted):
        skipped.remove(METADATA_CSV)
        table = csv_as_jsonl(source / METADATA_CSV)
    from_csv = table is not None
    captions_in = kohya_captions_as_txt(wanted, skipped, kind_reasons)
    # a Hugging Face imagefolder's rows naming images in its sub-folders (images/x.png): flattened
    nested: list[tuple[Path, str]] = []
    nested_skips: list[tuple[str, str]] = []
    rows = table_rows(source, wanted, table)
    if any("/" in name for name in rows):
        root_images = {p.name for p in wanted if is_image_name(p.name)}
        nested, nested_skips, flat = flatten_rows(source, rows, root_images)
        if flat is not None:
            wanted = [p for p in wanted if p.name != METADATA_FILE]
            table = flat
    kohya_folders = [f for f in folders if is_kohya_folder(f)]
    if kohya_folders and not any(is_image_name(p.name) for p in wanted):  # the img/10_sks ball/
        raise DatasetError(
            f"{source}: nothing to import",
            [
                f"{source} holds no images but kohya folder(s) {', '.join(kohya_folders)}: import them with "
                "--kohya (one dataset each, and the datasets entries with their repeats and trigger words)"
            ],
        )
    controls, control_skips = control_files(source)  # control/, control_2/ ... (data/control_import.py)
    holder = f"`lorastudio datasets import` into {dataset}"
    # written like an upload: refused (DatasetBusy) while a run reads the dataset or a caption job writes it
    with DatasetClaim.take(settings.home, settings.datasets_dir, [target], WRITE, holder):
        incoming = {p.stem: p for p in wanted if is_image_name(p.name)}
        masks = plan_masks(source, {**dataset_images(target), **incoming}, target, settings.max_image_pixels)
        if strict and masks.refused:
            raise DatasetError(
                f"import into {target.name} refused (--strict)", [f"{n}: {r}" for n, r in masks.refused]
            )
        if not wanted and not controls and (masks.good or masks.refused) and target.is_dir():
            result = UploadResult(stored=[])  # masks/ alone, for a dataset that has its images
        else:
            with UploadBatch(
                settings.datasets_dir,
                target,
                settings.max_image_pixels,
                settings.max_decode_pixels,
                strict=strict,
                decoded_dir=settings.decoded_record_dir,
            ) as batch:
                for path in wanted:
                    with open_in_folder(path) as fh:  # refuses a file swapped for a link meanwhile
                        batch.add(path.name, fh, source=path)
                if table is not None:
                    table_source = source / (METADATA_CSV if from_csv else METADATA_FILE)
                    batch.add(METADATA_FILE, io.BytesIO(table), source=table_source)
                for path, stored in nested:  # the table's sub-folder images, under their own names
                    with open_in_folder(path) as fh:
                        batch.add(stored, fh, source=path)
                for path, stored in captions_in:  # kohya's x.caption as the x.txt a dataset reads
                    with open_in_folder(path) as fh:
                        batch.add(stored, fh, source=path)
                for slot, path in controls:  # checked as an upload's controls: an image with a target
                    with open_in_folder(path) as fh:
                        batch.add(path.name, fh, slot=slot, source=path)
                result = batch.commit()
        stems = _image_stems(target)
        copied = copy_masks(masks, target, settings.datasets_dir, stems)
    summary = dataset_summary(target)
    typer.echo(f"imported {len(result.stored)} file(s) into {target}")
    for file, reason in result.refused:
        say(f"refused {file}: {reason}")
    if copied:
        typer.echo(f"imported {len(copied)} mask(s) into {target / 'masks'}")
    for file, reason in masks.refused + [(f"masks/{p.name}", "its image was refused") for p, n in masks.good
                                         if Path(n).stem not in stems]:  # fmt: skip
        say(f"refused {file}: {reason}")
    typer.echo(f"dataset {summary['name']}: {summary['images']} image(s), {summary['captions']} captioned")
    if from_csv:
        typer.echo(f"{METADATA_CSV}: its rows stored as {METADATA_FILE}")
    if nested:
        typer.echo(
            f"{len(nested)} image(s) the caption table names in sub-folders stored under their own names "
            "(their rows' file_name too)"
        )
    for name, why in nested_skips:
        say(f"skipped the row of {name} ({why})")
    nested_from = {path.relative_to(source).parts[0] for path, _ in nested}
    for path, stored in captions_in:
        if stored in result.stored:
            typer.echo(f"{path.name}: stored as {stored}")
    stems = {Path(p.name).stem for p in wanted if is_image_name(p.name)}
    for skip in skipped:
        why = "metadata.jsonl is imported" if skip == METADATA_CSV else foreign_file_reason(skip, stems)
        say(f"skipped {skip} ({why or kind_reasons[skip]})")
    for link in links:
        say(f"skipped {link} (a symbolic link: links are not followed)")
    for file, reason in control_skips:
        say(f"skipped {file} ({reason})")
    for name in special:  # a FIFO would block the copy; a socket or device is no image
        say(f"skipped {name} (not a regular file: a named pipe, socket or device is never read)")
    for folder in folders:
        if folder in nested_from:
            if left := unnamed_files(source / folder, {path for path, _ in nested}):
                say(f"skipped {left} other file(s) of {folder}/ (no caption table row names them)")
        elif folder != "masks" and control_slot(folder) is None:  # imported above
            say(f"skipped {folder}/ ({_folder_reason(folder)})")
    if is_kohya_folder(source.name):  # e.g. img/10_sks ball imported on its own
        own = parse_kohya_folder(source.name)
        typer.echo(
            f"note: the folder's name reads as kohya's N_words (repeats {own.repeats}, words {own.words!r}); "
            "import its parent with --kohya for them"
        )


def _image_stems(folder: Path) -> set[str]:
    """The stems of the images of dataset `folder` (none when it does not exist yet)."""
    from lorastudio.data.mask_import import dataset_images

    return set(dataset_images(folder))


def _folder_reason(folder: str) -> str:
    """Why a plain `datasets import` leaves the sub-folder `folder` out (it imports files, masks/
    and the control folders only)."""
    from lorastudio.data.kohya import is_kohya_folder
    from lorastudio.data.pairs import misnamed_control_folder

    if is_kohya_folder(folder):
        return "a kohya folder: import the parent with --kohya"
    if (misnamed := misnamed_control_folder(folder)) is not None:  # not a dataset of its own
        return misnamed
    return "a sub-folder: import it on its own"
