"""Dataset uploads for the API and CLI (no torch, no HTTP): validation, staging and commit.
(Caption edits and image deletion: data/image_edits.py; listings: data/listing.py; the lock
and staged writes: data/writes.py.)

An upload is a batch of named files: images (PNG/JPEG/WebP), `<stem>.txt` captions and at most
one `metadata.jsonl`. `UploadBatch` writes them into a hidden staging folder under the datasets
root, checks every one (safe name, allowed kind, image header size limit + every pixel decoded, UTF-8
captions, metadata rows), and only then commits the files that passed (all or nothing with
`strict`): a new dataset by renaming the staging folder, an existing one file by file (each
rename atomic; files of the same name are replaced; metadata.jsonl rows are merged, the new row
winning). Control images of paired datasets come in form fields named after their control
folder and land in it (data/upload_pairs.py). Refused files (a caption whose image was refused
among them, a control whose target was) are listed with their reasons and never reach the
dataset; a batch with nothing to store leaves nothing behind. A file name sent more than once in
one upload is refused in every copy (which one is meant is not guessed), and every refusal is
reported once (two copies of one bad name are one problem).
Commits into one dataset are serialised by `dataset_lock` (data/writes.py: an flock on a hidden
lock file per dataset, so concurrent uploads, also from another process, never lose
metadata.jsonl rows).
"""

from __future__ import annotations

import contextlib
import os
import shutil
import uuid
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass, field
from pathlib import Path
from typing import BinaryIO

from lorastudio.data import decoded
from lorastudio.data.captions import MAX_CAPTION_BYTES, metadata_rows, read_metadata, read_sidecar
from lorastudio.data.cross_device import replace_into
from lorastudio.data.decode_slots import DEFAULT_DECODE_PIXELS
from lorastudio.data.decoded import (
    DecodedRecord,
    FileKey,
    file_key,
    same_contents_key,
    wait_out_racy,
)
from lorastudio.data.discovery import CAPTION_EXTENSION, IMAGE_EXTENSIONS, METADATA_FILE, is_image_name
from lorastudio.data.images import ImageInfo, probe_full
from lorastudio.data.kohya_listing import kohya_upload_refusal
from lorastudio.data.metadata_write import nfc_metadata, row_line
from lorastudio.data.paths import safe_component, stem_key
from lorastudio.data.peer_files import foreign_file_reason
from lorastudio.data.safe_open import folder_identity, open_folder
from lorastudio.data.staging_owner import STAGING_DIR, make_owned, release
from lorastudio.data.upload_pairs import (
    control_key,
    dataset_image_stems,
    make_control_folder,
    unmatched_controls,
)
from lorastudio.data.writes import copy_stream, dataset_lock, make_dir
from lorastudio.errors import ConfigError, DatasetError, PathOutsideRoot, is_no_space, writing

# Images refused with their own reason (the web picker's accept list leaves them out too).
REFUSED_IMAGE_EXTENSIONS = (".bmp", ".dib")


class UploadTooLarge(DatasetError):
    """The request body is larger than the server's upload cap (settings.max_upload_mb)."""

    def __init__(self, cap_bytes: int):
        self.cap_bytes = cap_bytes
        super().__init__(f"upload larger than the limit of {cap_bytes // 2**20} MB (settings.max_upload_mb)")


def upload_kind(name: str) -> str:
    """ "image", "caption" or "metadata" for an acceptable upload file name.
    Raises DatasetError (other file types), ConfigError / PathOutsideRoot (unsafe names)."""
    safe_component(name, field="file name")
    if is_image_name(name):
        return "image"
    if name == METADATA_FILE:
        return "metadata"
    if name.lower().endswith(CAPTION_EXTENSION):
        return "caption"
    if name.lower().endswith(REFUSED_IMAGE_EXTENSIONS):
        reason = "BMP images are not accepted: convert it to PNG, JPEG or WebP"
    elif name.lower().endswith(".caption"):  # kohya's caption_extension
        reason = f"a kohya .caption file: only .txt captions are read (rename it {Path(name).stem}.txt)"
    else:  # another tool's file or an image of another format, named for what it is (data/peer_files.py)
        reason = foreign_file_reason(name, set()) or (
            f"not an image ({'/'.join(e[1:] for e in IMAGE_EXTENSIONS)}), a .txt caption or {METADATA_FILE}"
        )
    raise DatasetError(f"cannot upload {name}", [f"{name}: {reason}"])


@dataclass(frozen=True)
class UploadResult:
    """What one upload stored and what it refused.

    `stored`: the committed file names (sorted); `refused`: (file name, reason) pairs, sorted
    by name, one per problem (a file may have several; a pair given twice is kept once)."""

    stored: list[str]
    refused: list[tuple[str, str]] = field(default_factory=list)

    def __post_init__(self) -> None:
        object.__setattr__(self, "refused", list(dict.fromkeys(self.refused)))


class UploadBatch:
    """Stage, check and commit one upload into `dataset_dir` (a folder under `datasets_root`).

    Use as `with UploadBatch(...) as batch: batch.add(name, stream); batch.commit()`; leaving
    the block without commit (or with an error) deletes the staging folder. By default the good
    files are stored and the bad ones refused with their reasons (a caption whose image was
    refused is refused too); `strict=True` refuses the whole batch when any file is bad.
    `shown`: the dataset's path as a failure names it where `dataset_dir` is a staging folder (a
    kohya import stages whole datasets: cli/kohya_import.py); `dataset_dir` when None."""

    def __init__(
        self,
        datasets_root: Path,
        dataset_dir: Path,
        max_pixels: int,
        decode_pixels: int = DEFAULT_DECODE_PIXELS,
        strict: bool = False,
        decoded_dir: Path | None = None,
        shown: Path | None = None,
    ):
        self.dataset_dir = dataset_dir
        self.shown = dataset_dir if shown is None else shown
        self.decoded_dir = decoded_dir
        self._decoded: dict[
            str, tuple[FileKey | None, ImageInfo]
        ] = {}  # staged image or control -> (file_key, probe)
        self.max_pixels = max_pixels
        self.decode_pixels = decode_pixels
        self.strict = strict
        self.staging = datasets_root / STAGING_DIR / uuid.uuid4().hex  # its own name made on entry
        self._owner: int | None = None  # the staging's owner lock (data/staging_owner.py)
        self._names: dict[str, str] = {}  # file name -> kind
        self._by_name: dict[
            str, str
        ] = {}  # stem -> an image refused by its name (.bmp): its caption goes too
        self.refused: list[tuple[str, str]] = []  # (file name, reason), each pair once
        self._refused_seen: set[tuple[str, str]] = set()  # self.refused as a set: a linear dedupe
        self._copies: dict[str, int] = {}  # a name sent more than once -> how many times

    def __enter__(self) -> UploadBatch:
        while True:  # another batch's exit may remove the (empty) staging root meanwhile
            make_dir(self.staging.parent)
            try:
                with self._no_space():  # owned while this batch lives: a killed one's is stale
                    self.staging, self._owner = make_owned(self.staging.parent)
                return self
            except FileNotFoundError:
                continue

    @contextmanager
    def _no_space(self, name: str | None = None) -> Iterator[None]:
        """Turn a failed write (a full disk: NoSpaceLeft, 507; the file-size limit, a read-only
        folder: WriteFailed, 500) into the domain error naming the dataset and the file `name`
        being stored (errors.writing), never the staging folder (issue 30)."""
        what = f"{name} of " if name else ""
        with writing(
            f"{what}the upload to {self.shown.name} could not be stored",
            self.shown,
            show_file=False,
        ):
            yield

    def __exit__(self, *exc: object) -> None:
        shutil.rmtree(self.staging, ignore_errors=True)
        release(self.staging, self._owner)
        with contextlib.suppress(OSError):  # still holds another upload's staging folder
            self.staging.parent.rmdir()

    @property
    def problems(self) -> list[str]:
        """The refusals as "<file>: <reason>" strings (the DatasetError problem format)."""
        return [f"{name}: {reason}" if name else reason for name, reason in self.refused]

    def _refuse(self, name: str, err_or_reason: Exception | str) -> None:
        reasons = [err_or_reason] if isinstance(err_or_reason, str) else _messages(err_or_reason)
        for reason in reasons:  # a control's reason names it without its slot ("a.txt: ...")
            bare = reason.removeprefix(f"{name}: ").removeprefix(f"{Path(name).name}: ")
            pair = (name, bare if name else reason)
            if pair not in self._refused_seen:  # two copies of one bad name: one problem
                self._refused_seen.add(pair)
                self.refused.append(pair)

    def refuse(self, name: str, reason: str) -> None:
        """Record the file `name` as refused for `reason` without staging it (reported by commit)."""
        self._refuse(name, reason)

    def add(self, name: str, stream: BinaryIO, slot: str | None = None, source: Path | None = None) -> None:
        """Stage one file; `slot`: the control folder of a control image ("control", "control_2"
        ...: data/upload_pairs.py), None for a dataset file; `source`: the file `stream` reads (an
        import's), None for an upload's. A bad name or kind is recorded as refused (reported by
        commit). A read of `stream` that fails is ReadFailed naming the source file (or the
        uploaded file `name`), a write that fails WriteFailed / NoSpaceLeft naming the dataset."""
        try:
            name = safe_component(name, field="file name")  # stored under its NFC form
            kind = upload_kind(name)
            if slot is not None:
                name, kind = control_key(slot, name), "control"
        except (DatasetError, ConfigError, PathOutsideRoot) as err:
            self._refuse(f"{slot}/{name}" if slot else name, err)
            if (
                slot is None
                and isinstance(err, DatasetError)
                and name.lower().endswith(REFUSED_IMAGE_EXTENSIONS)
            ):
                self._by_name[Path(name).stem] = name
            return
        if name in self._names:  # which copy is meant? none is guessed (as the mask upload)
            self._copies[name] = self._copies.get(name, 1) + 1
            return
        if slot is not None:
            (self.staging / slot).mkdir(exist_ok=True)
        with self._no_space(name), (self.staging / name).open("wb") as out:
            copy_stream(stream, out, f"the source file {source}" if source else f"the uploaded file {name}")
        self._names[name] = kind

    def commit(self) -> UploadResult:
        """Check every staged file and move the good ones into the dataset. Returns the stored
        names and the refused files with their reasons. Raises DatasetError listing every
        problem when nothing can be stored, or (strict) when any file is refused; nothing is
        committed then. The checks against the dataset, the metadata merge and the moves hold
        `dataset_lock`."""
        if not self._names and not self.refused:
            self._refuse("", "no files in the upload")
        with dataset_lock(self.staging.parent.parent, self.dataset_dir.name):
            self._check_files()
            self.refused.sort(key=lambda r: r[0])
            if not self._names or (self.strict and self.refused):
                raise DatasetError(f"upload to {self.dataset_dir.name} refused", self.problems)
            with self._no_space():
                stored = self._move_in()
            self._record_decoded(stored)
            return UploadResult(stored, list(self.refused))

    def _record_decoded(self, stored: list[str]) -> None:
        """Record the stored images and controls (every pixel decoded by the check) in the dataset's record of
        decoded files (data/decoded.py), so that its next preflight does not decode them again."""
        if self.decoded_dir is None:
            return
        try:
            record = DecodedRecord.load(self.decoded_dir, self.dataset_dir, folder_identity(self.dataset_dir))
        except DatasetError:
            return  # the folder went away meanwhile: nothing to remember
        wait_out_racy(self.dataset_dir / name for name in stored if name in self._decoded)  # the moves' tick
        for name in stored:
            if name in self._decoded:
                staged, info = self._decoded[name]
                path = self.dataset_dir / name
                keyed_ns = decoded.file_clock_ns()  # by the module: a test fakes its tick
                moved = file_key(path)  # the move changed its ctime (decoded.file_key), not the rest
                if same_contents_key(staged, moved):  # else: changed since its decode, decoded again
                    record.add(path, moved, info, keyed_ns=keyed_ns)
        record.save()

    def _unchanged_since_check(self, names: list[str]) -> None:
        """Forget the full decode of each staged file of `names` that changed since its check (its
        file_key another: rewritten in place, even to the same size and mtime), right before the
        move: `_record_decoded` then leaves it to the next check."""
        for name in names:
            if name in self._decoded and file_key(self.staging / name) != self._decoded[name][0]:
                del self._decoded[name]

    def _move_in(self) -> list[str]:
        """Merge metadata.jsonl and move the staged files into the dataset (under the lock). Into
        a new dataset in one rename; into an existing one file by file, the target images last
        (after their captions, metadata.jsonl and control images): a kill -9 between two moves
        leaves each image it moved with what the upload sent with it, never an image uncaptioned
        or unpaired that the upload captioned or paired (captions or controls ahead of their
        image are left out of a scan until it comes)."""
        if METADATA_FILE in self._names:
            self._merge_metadata()
        names = sorted(self._names)
        self._unchanged_since_check(names)
        if not os.path.lexists(self.dataset_dir):
            for leftover in {p.name for p in self.staging.iterdir()} - {n.split("/")[0] for n in names}:
                (self.staging / leftover).unlink()  # a refused file never reaches the dataset
            try:
                os.rename(self.staging, self.dataset_dir)
                return names
            except OSError as err:  # created meanwhile outside the studio: merge file by file
                if is_no_space(err):
                    raise
                self.dataset_dir.mkdir(exist_ok=True)
        dir_fd = open_folder(self.dataset_dir)  # a dataset folder swapped for a link is refused
        try:
            for slot in sorted({n.split("/")[0] for n in names if "/" in n}):
                make_control_folder(dir_fd, slot, self.dataset_dir.name)
            for name in sorted(names, key=lambda n: (self._names[n] == "image", n)):  # images last
                with self._no_space(name):  # a dataset on another disk: a copy, which names its file
                    replace_into(self.staging / name, name, dir_fd)
        finally:
            os.close(dir_fd)
        return names

    def _check_files(self) -> None:
        """Check the staged files; drop each bad one from the batch (recorded in `refused`).
        Images first, so that a caption whose image was refused is refused too. Every file of an
        upload into a kohya layout read in place is refused (kohya_listing.kohya_upload_refusal)."""
        if (why := kohya_upload_refusal(self.dataset_dir)) is not None:  # RELIABILITY 2203
            for name in sorted(self._names):
                self._refuse(name, why)
            self._names.clear()
            return
        bad: set[str] = set()
        for name, copies in sorted(self._copies.items()):
            self._refuse(name, f"sent {copies} times in one upload (which one?): send one")
            bad.add(name)
        for name, kind in sorted(self._names.items()):
            path = self.staging / name
            if name in bad:
                continue
            try:
                if kind in ("image", "control"):
                    key = file_key(path)
                    info, decided = probe_full(path, self.max_pixels, self.decode_pixels)
                    if decided:  # a WebP above the decode budget is left to the run's own scan
                        self._decoded[name] = (
                            key,
                            info,
                        )  # a control keyed control/<name>: decoded.record_key
                elif kind == "metadata":  # its names as the files are stored: NFC (RELIABILITY 2102)
                    table_problems = read_metadata(path).problems or nfc_metadata(path)
                    if table_problems:
                        raise DatasetError("bad metadata.jsonl", table_problems)
            except DatasetError as err:
                self._refuse(name, err)
                bad.add(name)
        refused_images = self._by_name | {Path(n).stem: n for n in bad if self._names[n] == "image"}
        good_stems = {Path(n).stem for n, k in self._names.items() if k == "image" and n not in bad}
        captions = sorted(n for n, k in self._names.items() if k == "caption")
        # the dataset's own listing only when a caption's image is not in the upload: a batch of
        # images with their captions (the web's batches) costs what it holds, not the dataset's
        # size (a listing per batch made uploading N images O(N^2): RELIABILITY 2111); once, as
        # a union per caption was O(n^2) (RELIABILITY 152)
        captioned = good_stems
        if any(Path(n).stem not in good_stems for n in captions) and self.dataset_dir.is_dir():
            captioned = good_stems | {p.stem for p in self.dataset_dir.iterdir()}
        for name in captions:
            path = self.staging / name
            stem = Path(name).stem
            if stem in refused_images and stem not in good_stems:
                self._refuse(name, f"its image {refused_images[stem]} was refused")
                bad.add(name)
            elif not self._caption_ok(path, captioned):
                bad.add(name)
        controls = [n for n, k in self._names.items() if k == "control" and n not in bad]
        targets = good_stems  # likewise: listed only for a control whose target is not in the upload
        if any(stem_key(n) not in good_stems for n in controls):
            targets = good_stems | dataset_image_stems(self.dataset_dir)
        for name, reason in unmatched_controls(controls, targets, refused_images).items():
            self._refuse(name, reason)
            bad.add(name)
        for name in bad:
            del self._names[name]
            (self.staging / name).unlink(missing_ok=True)  # a refused file never reaches the dataset
        for folder in self.staging.iterdir():
            if folder.is_dir() and not any(folder.iterdir()):
                folder.rmdir()  # a control folder whose every file was refused

    def _caption_ok(self, path: Path, image_stems: set[str]) -> bool:
        """Check one staged caption (size, a matching image, UTF-8); record why it is refused."""
        if path.stat().st_size > MAX_CAPTION_BYTES:
            self._refuse(path.name, f"caption larger than {MAX_CAPTION_BYTES // 1024} KB")
            return False
        if path.stem not in image_stems:
            self._refuse(path.name, f"no image named {path.stem}.* in the upload or the dataset")
            return False
        try:
            read_sidecar(path)
        except DatasetError as err:
            self._refuse(path.name, err)
            return False
        return True

    def _merge_metadata(self) -> None:
        """Merge the existing metadata.jsonl rows under the uploaded ones (the upload wins)."""
        old = self.dataset_dir / METADATA_FILE
        if old.is_symlink() or not old.is_file():
            return
        new_path = self.staging / METADATA_FILE
        merged = metadata_rows(old)  # whole rows: a paired row's control keys stay with it
        merged.update(metadata_rows(new_path))
        new_path.write_bytes(b"".join(row_line(row) + b"\n" for _, row in sorted(merged.items())))


def _messages(err: Exception) -> list[str]:
    if isinstance(err, ConfigError):
        return [str(p) for p in err.problems]
    if isinstance(err, DatasetError) and err.problems:
        return list(err.problems)
    return [str(err)]
