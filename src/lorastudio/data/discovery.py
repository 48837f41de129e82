"""Find the images of a dataset folder and the files that go with them.

A dataset is one folder (not recursive). Images are files whose extension is one of
IMAGE_EXTENSIONS (any case). Hidden entries (names starting with ".") are ignored entirely.
`<stem>.txt` files are caption sidecars and `metadata.jsonl` is the caption table; everything
else is listed as dropped so the preflight report can show what was not used (a kohya
`<stem>.caption` as such: not read, and whether a .txt is used instead). A kohya `N_words`
folder read in place (`discover(kohya=True)`, TrainConfig.kohya_folders) lists its `.txt` and
`.caption` files (any case) as the image's caption files instead, every one of them
(data/kohya_captions.py reads and compares them), and a metadata.jsonl as not read. Symbolic links
are never followed: a link is dropped ("symbolic link (not followed)") whatever it points to,
and the files are later opened without following links (`data.safe_open`).
"""

from __future__ import annotations

import itertools
import os
import stat
import threading
import time
from dataclasses import dataclass, field
from pathlib import Path

from lorastudio.data.kohya_captions import is_kohya_caption_name, other_caption_reason
from lorastudio.data.peer_files import foreign_file_reason
from lorastudio.errors import DatasetError
from lorastudio.user_paths import not_utf8

IMAGE_EXTENSIONS = (".png", ".jpg", ".jpeg", ".webp")
CAPTION_EXTENSION = ".txt"
KOHYA_CAPTION_EXTENSION = "caption"  # kohya's other sidecar extension: not read, named as such
METADATA_FILE = "metadata.jsonl"


@dataclass(frozen=True)
class DatasetFiles:
    """What a dataset folder holds, each list sorted by file name.

    images: image files; sidecars: caption stem -> .txt path (stems compared exactly; a kohya
    folder's: the first of its caption files); caption_files: stem -> every caption file of an
    image's stem, sorted by name (a plain folder: each .txt in any case, the first is its sidecar,
    read, the others dropped as second caption files; a kohya folder: each .txt / .caption, all
    read and compared). An edit of an image's caption writes the first (data/image_edits.py);
    metadata: the metadata.jsonl path if present; dropped: (file name, reason) for every other
    visible entry (sub-folders, other file types, captions without an image).
    """

    images: list[Path]
    sidecars: dict[str, Path]
    metadata: Path | None
    dropped: list[tuple[str, str]]
    caption_files: dict[str, tuple[Path, ...]] = field(default_factory=dict)


def is_image_name(name: str) -> bool:
    """True if `name` has an image extension (case-insensitive) and is not hidden."""
    return not name.startswith(".") and name.lower().endswith(IMAGE_EXTENSIONS)


def unused_images(root: Path, dropped: list[tuple[str, str]], most: int = 10) -> list[str]:
    """The problems naming the image-named entries of `root` that `discover` dropped (`dropped`:
    its (name, reason) list), for a folder found with no images: a folder of symbolic links to
    the images (links are never followed) was "no png/jpg/jpeg/webp files", its images unnamed.
    At most `most` named, the rest counted."""
    names = [(name, why) for name, why in dropped if is_image_name(name)]
    out = [
        f"{root / name}: {why}"
        + ("; copy the image itself into the folder" if why.startswith("symbolic") else "")
        for name, why in names[:most]
    ]
    if len(names) > most:
        out.append(f"{root}: {len(names) - most} more image name(s) not used, for the same reasons")
    return out


def require_folder(root: Path) -> None:
    """Raise DatasetError unless `root` exists and is a folder (not a symbolic link); one that
    cannot be looked at (a name over the file system's limit, a folder on the way the server may
    not search) names the reason."""
    try:
        mode = os.lstat(root).st_mode
    except FileNotFoundError:
        raise DatasetError(f"dataset folder not found: {root}", [f"{root}: does not exist"]) from None
    except (OSError, ValueError) as err:
        reason = getattr(err, "strerror", None) or str(err)
        raise DatasetError(f"dataset folder {root} cannot be read", [f"{root}: {reason}"]) from None
    if stat.S_ISLNK(mode):
        raise DatasetError(
            f"dataset folder {root} is a symbolic link",
            [f"{root}: is a symbolic link (links are not followed out of the datasets folder)"],
        )
    if not stat.S_ISDIR(mode):
        raise DatasetError(f"dataset path is not a folder: {root}", [f"{root}: is a file, not a folder"])


def discover(root: Path, kohya: bool = False) -> DatasetFiles:
    """List the dataset folder `root` (not recursive; hidden entries ignored); `kohya`: a kohya
    `N_words` folder read in place, whose `.txt` and `.caption` files (any case) are all caption
    files of their image (data/kohya_captions.py).

    Returns: DatasetFiles with images sorted by name. An empty `images` list is not an error
    here (scan_dataset reports it). Remembered per folder version and rule (`_listings`).
    Raises: DatasetError if `root` is missing, not a folder, or cannot be listed.
    """
    require_folder(root)
    try:
        st = os.stat(root, follow_symlinks=False)
    except OSError as err:
        raise DatasetError(f"cannot list dataset folder {root}", [f"{root}: {err}"]) from None
    key = (str(root), st.st_dev, st.st_ino, st.st_mtime_ns, st.st_ctime_ns, kohya)
    with _listings_lock:
        known = _listings.get(key)
    if known is not None:
        return _copy(known)
    files = _discover(root, kohya)
    if time.time_ns() - max(st.st_mtime_ns, st.st_ctime_ns) > _SETTLED_NS:  # see _listings
        with _listings_lock:
            if len(_listings) >= _LISTINGS_MAX:
                _listings.pop(next(iter(_listings)))
            _listings[key] = _copy(files)
    return files


# Listings remembered by the folder's (path, device, inode, mtime_ns, ctime_ns): an entry added,
# removed or renamed changes its folder's mtime, so a large dataset is listed once per change, not
# on every request (/api/info, /api/datasets, a dataset's detail, a preflight). A folder changed
# within the last _SETTLED_NS is not remembered: its time stamp's granularity (a clock tick) could
# hide a second change in the same tick, as git's index does for "racy" files.
_LISTINGS_MAX = 64
_SETTLED_NS = 2_000_000_000
_listings: dict[tuple[str, int, int, int, int, bool], DatasetFiles] = {}
_listings_lock = threading.Lock()


def _copy(files: DatasetFiles) -> DatasetFiles:
    """A copy whose lists and dict the caller may change without touching the remembered one."""
    return DatasetFiles(
        list(files.images),
        dict(files.sidecars),
        files.metadata,
        list(files.dropped),
        dict(files.caption_files),
    )


def _discover(root: Path, kohya: bool = False) -> DatasetFiles:
    """`discover` without the remembered listings."""
    try:
        with os.scandir(root) as it:
            entries = sorted((e for e in it if not e.name.startswith(".")), key=lambda e: e.name)
    except OSError as err:
        raise DatasetError(f"cannot list dataset folder {root}", [f"{root}: {err}"]) from None
    images: list[Path] = []
    captions: list[Path] = []
    metadata: Path | None = None
    dropped: list[tuple[str, str]] = []
    for entry in entries:
        name = entry.name
        path = root / name
        if entry.is_symlink():
            dropped.append((name, "symbolic link (not followed)"))
        elif entry.is_dir(follow_symlinks=False):
            dropped.append((name, "sub-folder (datasets are not scanned recursively)"))
        elif not entry.is_file(follow_symlinks=False):
            dropped.append((name, "not a regular file"))
        elif why := not_utf8(name):  # a run records its files' names as text (RELIABILITY 2222)
            byte = why.rpartition(" is not UTF-8 text ")[2]  # "(byte 0xe9 at 3)"
            dropped.append((name, f"the name is not UTF-8 text {byte}: rename it to use the file"))
        elif is_image_name(name):
            images.append(path)
        elif name.lower().endswith(CAPTION_EXTENSION) or (kohya and is_kohya_caption_name(name)):
            captions.append(path)
        elif name == METADATA_FILE:
            metadata = path
        else:
            dropped.append((name, f"not an image (supported: {', '.join(IMAGE_EXTENSIONS)})"))
    image_stems = {p.stem for p in images}
    dropped = [  # another tool's file, an image of another format: named for what it is
        (name, foreign_file_reason(name, image_stems) or why)
        if why.startswith("not an image")
        else (name, why)
        for name, why in dropped
    ]
    if kohya:  # a caption file of another extension (kohya's caption_extension): named as one
        dropped = [(name, other_caption_reason(name, image_stems) or why) for name, why in dropped]
        return _kohya_files(images, captions, metadata, dropped, image_stems)
    first_caption: dict[str, str] = {}  # stem -> its first .txt caption's name (sorted order)
    for cap in captions:
        first_caption.setdefault(cap.stem, cap.name)
    named: list[tuple[str, str]] = []
    for name, why in dropped:  # kohya's caption_extension: named, not "not an image"
        stem, dot, ext = name.rpartition(".")
        if not (dot and ext.lower() == KOHYA_CAPTION_EXTENSION):
            named.append((name, why))
        elif stem not in image_stems:
            named.append((name, "caption file with no image of the same name"))
        elif stem in first_caption:
            used = first_caption[stem]
            named.append(
                (
                    name,
                    f"a .caption file: only <image name>{CAPTION_EXTENSION} captions are read; {used} is used",
                )
            )
        else:
            named.append(
                (
                    name,
                    f"a .caption file: only <image name>{CAPTION_EXTENSION} captions are read "
                    f"(rename it {stem}{CAPTION_EXTENSION} to use it)",
                )
            )
    dropped = named
    sidecars: dict[str, Path] = {}
    for cap in captions:
        if cap.stem in sidecars:
            dropped.append(
                (cap.name, f"second caption file for one image; {sidecars[cap.stem].name} is used")
            )
        elif cap.stem in image_stems:
            sidecars[cap.stem] = cap
        else:
            dropped.append((cap.name, "caption file with no image of the same name"))
    dropped.sort()
    return DatasetFiles(
        images=images,
        sidecars=sidecars,
        metadata=metadata,
        dropped=dropped,
        caption_files=_by_stem([c for c in captions if c.stem in image_stems]),
    )


def caption_files_of(image: Path) -> tuple[Path, ...]:
    """The caption files a plain folder's listing gives `image`'s stem (DatasetFiles.caption_files:
    each regular `<stem>.txt` in any case, sorted by name; the first is the one read), found
    without listing the folder: an lstat of each case of ".txt" (a caption job's write in a folder
    of 50,000 images costs 8 lstats, not a listing). On a case-insensitive file system the
    spellings of one file count once."""
    found: dict[tuple[int, int], Path] = {}
    for letters in itertools.product("tT", "xX", "tT"):
        path = image.with_name(f"{image.stem}.{''.join(letters)}")
        try:
            st = os.lstat(path)
        except OSError:
            continue
        if stat.S_ISREG(st.st_mode):
            found.setdefault((st.st_dev, st.st_ino), path)
    return tuple(sorted(found.values(), key=lambda p: p.name))


def _by_stem(captions: list[Path]) -> dict[str, tuple[Path, ...]]:
    """stem -> its caption files, in the order given (sorted by name)."""
    out: dict[str, tuple[Path, ...]] = {}
    for cap in captions:
        out[cap.stem] = (*out.get(cap.stem, ()), cap)
    return out


def _kohya_files(
    images: list[Path],
    captions: list[Path],
    metadata: Path | None,
    dropped: list[tuple[str, str]],
    image_stems: set[str],
) -> DatasetFiles:
    """A kohya folder's listing: every .txt / .caption file of an image's stem is one of its
    caption files (data/kohya_captions.kohya_caption reads and compares them), one without an
    image is dropped, and so is a metadata.jsonl (not a kohya caption source: the import
    skips it as well, so both read the same captions)."""
    caption_files = _by_stem([c for c in captions if c.stem in image_stems])
    if metadata is not None:  # kohya reads none; `datasets import --kohya` skips it too
        dropped.append((metadata.name, "not read in a kohya folder (its captions: <image>.txt / .caption)"))
    dropped += [
        (c.name, "caption file with no image of the same name") for c in captions if c.stem not in image_stems
    ]
    dropped.sort()
    return DatasetFiles(
        images=images,
        sidecars={stem: paths[0] for stem, paths in caption_files.items()},
        metadata=None,
        dropped=dropped,
        caption_files=caption_files,
    )
