"""Dataset management for the API and CLI (no torch, no HTTP): upload validation and staging,
caption edits, image deletion, and dataset listings.

An upload is a batch of named files: images (PNG/JPEG/WebP), `<stem>.txt` captions and at most
one `metadata.jsonl`. `UploadBatch` writes them into a hidden staging folder under the datasets
root, checks every one (safe name, allowed kind, image header size limit + decode check, UTF-8
captions, metadata rows), and only then commits: a new dataset by renaming the whole staging
folder, an existing one file by file (each rename atomic; files of the same name are replaced;
metadata.jsonl rows are merged, the new row winning). A refused batch leaves nothing behind.
Commits into one dataset are serialised by `dataset_lock` (an flock on a hidden lock file per
dataset, so concurrent uploads, also from another process, never lose metadata.jsonl rows).
"""

from __future__ import annotations

import contextlib
import fcntl
import json
import os
import shutil
import threading
import uuid
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any, BinaryIO

from lorastudio.data.captions import MAX_CAPTION_BYTES, read_metadata, read_sidecar
from lorastudio.data.decode_slots import DEFAULT_DECODE_PIXELS
from lorastudio.data.discovery import CAPTION_EXTENSION, METADATA_FILE, discover, is_image_name
from lorastudio.data.images import probe_image
from lorastudio.data.paths import safe_component
from lorastudio.data.safe_open import open_folder
from lorastudio.errors import ConfigError, DatasetError, NoSpaceLeft, NotFound, PathOutsideRoot, is_no_space

STAGING_DIR = ".uploads"  # hidden folder under the datasets root (ignored by dataset listings)
LOCKS_DIR = ".locks"  # hidden folder under the datasets root: one lock file per dataset name
_COPY_CHUNK = 1 << 20


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
    raise DatasetError(
        f"cannot upload {name}",
        [f"{name}: not an image (png/jpg/jpeg/webp), a .txt caption or {METADATA_FILE}"],
    )


class UploadBatch:
    """Stage, check and commit one upload into `dataset_dir` (a folder under `datasets_root`).

    Use as `with UploadBatch(...) as batch: batch.add(name, stream); batch.commit()`; leaving
    the block without commit (or with an error) deletes the staging folder."""

    def __init__(
        self,
        datasets_root: Path,
        dataset_dir: Path,
        max_pixels: int,
        decode_pixels: int = DEFAULT_DECODE_PIXELS,
    ):
        self.dataset_dir = dataset_dir
        self.max_pixels = max_pixels
        self.decode_pixels = decode_pixels
        self.staging = datasets_root / STAGING_DIR / uuid.uuid4().hex
        self._names: dict[str, str] = {}  # file name -> kind
        self.problems: list[str] = []

    def __enter__(self) -> UploadBatch:
        while True:  # another batch's exit may remove the (empty) staging root meanwhile
            _make_dir(self.staging.parent)
            try:
                with self._no_space():
                    self.staging.mkdir()
                return self
            except FileNotFoundError:
                continue

    @contextmanager
    def _no_space(self) -> Iterator[None]:
        """Turn a full disk's OSError into NoSpaceLeft (HTTP 507) naming the dataset."""
        try:
            yield
        except OSError as err:
            if is_no_space(err):
                raise NoSpaceLeft(
                    f"the upload to {self.dataset_dir.name} could not be stored", self.dataset_dir
                ) from err
            raise

    def __exit__(self, *exc: object) -> None:
        shutil.rmtree(self.staging, ignore_errors=True)
        with contextlib.suppress(OSError):  # still holds another upload's staging folder
            self.staging.parent.rmdir()

    def add(self, name: str, stream: BinaryIO) -> None:
        """Stage one file. A bad name or kind is recorded as a problem (reported by commit)."""
        try:
            name = safe_component(name, field="file name")  # stored under its NFC form
            kind = upload_kind(name)
        except (DatasetError, ConfigError, PathOutsideRoot) as err:
            self.problems += _messages(err)
            return
        if name in self._names:
            self.problems.append(f"{name}: sent twice in one upload")
            return
        with self._no_space(), (self.staging / name).open("wb") as out:
            shutil.copyfileobj(stream, out, _COPY_CHUNK)
        self._names[name] = kind

    def commit(self) -> list[str]:
        """Check every staged file and move them into the dataset. Returns the committed names
        (sorted). Raises DatasetError listing every problem; nothing is committed then. The
        checks against the dataset, the metadata merge and the moves hold `dataset_lock`."""
        if not self._names and not self.problems:
            self.problems.append("no files in the upload")
        with dataset_lock(self.staging.parent.parent, self.dataset_dir.name):
            self._check_files()
            if self.problems:
                raise DatasetError(f"upload to {self.dataset_dir.name} refused", self.problems)
            with self._no_space():
                return self._move_in()

    def _move_in(self) -> list[str]:
        """Merge metadata.jsonl and move the staged files into the dataset (under the lock)."""
        if METADATA_FILE in self._names:
            self._merge_metadata()
        names = sorted(self._names)
        if not os.path.lexists(self.dataset_dir):
            try:
                os.rename(self.staging, self.dataset_dir)
                return names
            except OSError as err:  # created meanwhile outside the studio: merge file by file
                if is_no_space(err):
                    raise
                self.dataset_dir.mkdir(exist_ok=True)
        dir_fd = open_folder(self.dataset_dir)  # a dataset folder swapped for a link is refused
        try:
            for name in names:
                os.replace(self.staging / name, name, dst_dir_fd=dir_fd)
        finally:
            os.close(dir_fd)
        return names

    def _check_files(self) -> None:
        existing_stems = {p.stem for p in self.dataset_dir.iterdir()} if self.dataset_dir.is_dir() else set()
        image_stems = {Path(n).stem for n, k in self._names.items() if k == "image"} | existing_stems
        for name, kind in sorted(self._names.items()):
            path = self.staging / name
            if kind == "image":
                try:
                    probe_image(path, self.max_pixels, self.decode_pixels)
                except DatasetError as err:
                    self.problems += err.problems
            elif kind == "caption":
                self._check_caption(path, image_stems)
            else:
                try:
                    self.problems += read_metadata(path).problems
                except DatasetError as err:
                    self.problems += err.problems

    def _check_caption(self, path: Path, image_stems: set[str]) -> None:
        if path.stat().st_size > MAX_CAPTION_BYTES:
            self.problems.append(f"{path.name}: caption larger than {MAX_CAPTION_BYTES // 1024} KB")
            return
        if path.stem not in image_stems:
            self.problems.append(f"{path.name}: no image named {path.stem}.* in the upload or the dataset")
            return
        try:
            read_sidecar(path)
        except DatasetError as err:
            self.problems += err.problems

    def _merge_metadata(self) -> None:
        """Merge the existing metadata.jsonl rows under the uploaded ones (the upload wins)."""
        old = self.dataset_dir / METADATA_FILE
        if old.is_symlink() or not old.is_file():
            return
        new_path = self.staging / METADATA_FILE
        merged = read_metadata(old).captions
        merged.update(read_metadata(new_path).captions)
        lines = [
            json.dumps({"file_name": k, "text": v}, ensure_ascii=False) for k, v in sorted(merged.items())
        ]
        new_path.write_text("\n".join(lines) + "\n", encoding="utf-8")


def _make_dir(folder: Path) -> None:
    """Create `folder` if missing. A hidden working folder that another thread removes when it
    empties can vanish again at any moment: callers retry their own step on FileNotFoundError
    (Path.mkdir(exist_ok=True) raises FileExistsError when it vanishes between its two checks)."""
    with contextlib.suppress(FileExistsError):
        folder.mkdir(parents=True)


@contextmanager
def dataset_lock(datasets_root: Path, name: str) -> Iterator[None]:
    """Hold the exclusive lock of dataset `name` (a safe component) for the block.

    The lock is an flock on `<datasets_root>/.locks/<name>.lock`: it excludes other threads
    (each open is its own lock holder) and other processes (a CLI import beside the server),
    and the kernel drops it when its holder dies. The holder removes the file (and the folder
    when empty) before it unlocks; a waiter that then gets the lock of a removed file retries.
    """
    folder = datasets_root / LOCKS_DIR
    path = folder / f"{name}.lock"
    while True:
        _make_dir(folder)
        try:
            fd = os.open(path, os.O_RDWR | os.O_CREAT | os.O_NOFOLLOW, 0o600)
        except FileNotFoundError:  # the folder was removed meanwhile
            continue
        fcntl.flock(fd, fcntl.LOCK_EX)
        held = os.fstat(fd)
        try:
            now = os.stat(path, follow_symlinks=False)
        except FileNotFoundError:
            now = None
        if now is not None and (now.st_dev, now.st_ino) == (held.st_dev, held.st_ino):
            break
        os.close(fd)  # locked a file its holder removed: take the new one
    try:
        yield
    finally:
        path.unlink(missing_ok=True)
        with contextlib.suppress(OSError):  # other locks live in it
            folder.rmdir()
        os.close(fd)


@contextmanager
def staged_write(target: Path) -> Iterator[Path]:
    """Yield a temporary path next to `target`; on success it replaces `target` atomically,
    on error it is removed."""
    tmp = target.with_name(f".{target.name}.{uuid.uuid4().hex}.tmp")
    try:
        yield tmp
        os.replace(tmp, target)
    finally:
        if tmp.exists():
            tmp.unlink()


def _messages(err: Exception) -> list[str]:
    if isinstance(err, ConfigError):
        return [str(p) for p in err.problems]
    if isinstance(err, DatasetError) and err.problems:
        return list(err.problems)
    return [str(err)]


def write_caption(dataset_dir: Path, image_name: str, caption: str) -> Path | None:
    """Set the .txt caption of image `image_name` (staged, then renamed); an empty caption
    removes the .txt. Returns the caption path (None when removed). Raises NotFound when the
    image does not exist, ConfigError/PathOutsideRoot for a bad name, DatasetError if too long,
    NoSpaceLeft on a full disk."""
    image = existing_image(dataset_dir, image_name)
    target = image.with_suffix(CAPTION_EXTENSION)
    text = caption.strip()
    if not text:
        if target.is_file():
            target.unlink()
        return None
    if len(text.encode("utf-8")) > MAX_CAPTION_BYTES:
        raise DatasetError(
            "caption too long", [f"{image_name}: caption larger than {MAX_CAPTION_BYTES // 1024} KB"]
        )
    try:
        with staged_write(target) as tmp:
            tmp.write_text(text + "\n", encoding="utf-8")
    except OSError as err:
        if is_no_space(err):
            raise NoSpaceLeft(f"the caption of {image_name} could not be written", dataset_dir) from err
        raise
    return target


def delete_image(dataset_dir: Path, image_name: str) -> list[str]:
    """Delete image `image_name`, and its .txt caption unless another image of the same stem
    (a.jpg beside a.png) still uses it. Returns the deleted file names."""
    image = existing_image(dataset_dir, image_name)
    with dataset_lock(dataset_dir.parent, dataset_dir.name):
        deleted = [image.name]
        image.unlink()
        caption = image.with_suffix(CAPTION_EXTENSION)
        shared = any(
            p.stem == image.stem and is_image_name(p.name) and p.name != image.name
            for p in dataset_dir.iterdir()
        )
        if not shared and caption.is_file():
            caption.unlink()
            deleted.append(caption.name)
    return deleted


def existing_image(dataset_dir: Path, image_name: str) -> Path:
    """The path of image `image_name` directly in `dataset_dir` (not a symlink). Raises
    ConfigError/PathOutsideRoot for a bad name, NotFound if it is not an existing image."""
    image_name = safe_component(image_name, field="file name")  # NFC, as uploads store it
    path = dataset_dir / image_name
    if not is_image_name(image_name) or path.is_symlink() or not path.is_file():
        raise NotFound(f"no image {image_name!r} in dataset {dataset_dir.name}")
    return path


def dataset_summary(folder: Path) -> dict[str, Any]:
    """{"name", "path", "images", "captions"}: captions counts images with a .txt or a
    metadata.jsonl row. metadata.jsonl is read once per version of the file (`_metadata_names`);
    one that cannot be read counts no rows here (the dataset's detail and preflight say why)."""
    files = discover(folder)
    rows = _metadata_names(files.metadata) if files.metadata else frozenset()
    captioned = sum(1 for p in files.images if p.stem in files.sidecars or p.name in rows)
    return {"name": folder.name, "path": str(folder), "images": len(files.images), "captions": captioned}


_NAMES_CACHE: dict[tuple[str, int, int, int, int], frozenset[str]] = {}
_NAMES_CACHE_MAX = 64
_NAMES_LOCK = threading.Lock()


def _metadata_names(path: Path) -> frozenset[str]:
    """The file names metadata.jsonl gives a caption, cached by (path, device, inode, size,
    mtime): listings (/api/info, /api/datasets) do not re-read an unchanged file."""
    try:
        st = path.lstat()
    except OSError:
        return frozenset()
    key = (str(path), st.st_dev, st.st_ino, st.st_size, st.st_mtime_ns)
    with _NAMES_LOCK:
        names = _NAMES_CACHE.get(key)
    if names is None:
        try:
            names = frozenset(read_metadata(path).captions)
        except DatasetError:
            names = frozenset()
        with _NAMES_LOCK:
            if len(_NAMES_CACHE) >= _NAMES_CACHE_MAX:
                _NAMES_CACHE.pop(next(iter(_NAMES_CACHE)))
            _NAMES_CACHE[key] = names
    return names


def list_datasets(root: Path) -> list[dict[str, Any]]:
    """Summaries of every visible dataset folder under `root`, by name (symbolic links are not
    followed, so a link to a folder elsewhere is not listed)."""
    if not root.is_dir():
        return []
    folders = sorted(
        p for p in root.iterdir() if not p.name.startswith(".") and not p.is_symlink() and p.is_dir()
    )
    out = []
    for folder in folders:
        try:
            out.append(dataset_summary(folder))
        except DatasetError:
            continue  # unreadable folder: not listed
    return out
