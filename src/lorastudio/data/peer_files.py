"""What the files other trainers and tools leave in a dataset folder are, named for the user (no
torch, no HTTP).

A folder brought from kohya sd-scripts, SimpleTuner, OneTrainer, ai-toolkit, a Hugging Face
`imagefolder` or a scraper holds files lorastudio does not read: their captions, their configs,
their caches, images of other formats. Each was listed as "not an image (supported: ...)", which
hid what it was and what to do with it (RELIABILITY 1001): `foreign_file_reason` names it and the
way to use what it holds. `image_subfolders` names the sub-folders holding images for a folder
that has none of its own (a Hugging Face `train/` split, OneTrainer's concept folders, kohya's
`N_words` folders).
"""

from __future__ import annotations

import os
import re
import unicodedata
from collections.abc import Callable
from pathlib import Path

from lorastudio.data.safe_open import FolderId

METADATA_CSV = "metadata.csv"  # Hugging Face imagefolder's other caption table
METADATA_FILE = "metadata.jsonl"  # discovery.METADATA_FILE (imported by it: not imported back)
_CONVERT = "convert it to PNG, JPEG or WebP"
_OTHER_IMAGES = {
    ".gif": "a GIF image: not read; " + _CONVERT,
    ".heic": "a HEIC image: not read; " + _CONVERT,
    ".heif": "a HEIF image: not read; " + _CONVERT,
    ".avif": "an AVIF image: not read; " + _CONVERT,
    ".jxl": "a JPEG XL image: not read; " + _CONVERT,
    ".tif": "a TIFF image: not read; " + _CONVERT,
    ".tiff": "a TIFF image: not read; " + _CONVERT,
    ".bmp": "a BMP image: not read; " + _CONVERT,
    ".dib": "a BMP image: not read; " + _CONVERT,
}
OTHER_IMAGE_EXTENSIONS = frozenset(_OTHER_IMAGES)  # images of formats lorastudio does not read
_ENTRIES = "each of its image folders is a `[[datasets]]` entry of the run's config (path, repeats)"
_CONFIGS = {
    "multidatabackend.json": f"SimpleTuner's dataset config: not read; {_ENTRIES}",
    "concepts.json": f"OneTrainer's concepts file: not read; {_ENTRIES}",
}
_AS_JSONL = 'save its captions as metadata.jsonl, one {"file_name", "text"} object per line'
_OTHER_TABLES = {  # other caption tables: each read by its own tool only
    "metadata.json": f"a caption table in one JSON document: not read ({_AS_JSONL})",
    "metadata.parquet": f"a Hugging Face parquet caption table: not read ({_AS_JSONL})",
    "meta_cap.json": f"kohya's fine-tuning caption metadata: not read ({_AS_JSONL})",
    "meta_cap_dd.json": f"kohya's fine-tuning caption metadata: not read ({_AS_JSONL})",
    "meta_lat.json": f"kohya's fine-tuning caption metadata: not read ({_AS_JSONL})",
}
_KOHYA_CACHE = re.compile(r"_\d+x\d+(_[a-z0-9]+)?\.npz$")  # kohya's cached latents: img_1024x1024_flux.npz


def foreign_file_reason(name: str, image_stems: set[str]) -> str | None:
    """Why the dataset file `name` (not an image lorastudio reads, a .txt caption nor a
    metadata.jsonl) is not used, when it is a file of another tool or an image of another format
    (`image_stems`: the stems of the folder's images); None for any other file."""
    lower = name.lower()
    stem, _, ext = name.rpartition(".")
    if not stem:
        return None
    ext = "." + ext.lower()
    if ext in _OTHER_IMAGES:
        return _OTHER_IMAGES[ext]
    if lower in _CONFIGS:
        return _CONFIGS[lower]
    if lower == METADATA_CSV:
        return metadata_csv_reason()
    if lower in _OTHER_TABLES:
        return _OTHER_TABLES[lower]
    if ext == ".json" and stem in image_stems:
        return f"a JSON caption sidecar: not read (save its caption as {stem}.txt or a metadata.jsonl row)"
    if ext == ".toml":
        return (
            "a config file: not read (a kohya dataset config's subsets are `[[datasets]]` entries of the run's "
            "config: image_dir -> path, num_repeats -> repeats, is_reg -> regularisation)"
        )
    if ext == ".npz" and (_KOHYA_CACHE.search(lower) or stem in image_stems):
        return "another trainer's cached latents: not read (lorastudio encodes the images itself)"
    return None


def metadata_csv_reason() -> str:
    """Why a Hugging Face imagefolder's metadata.csv is not read, and what to do."""
    return (
        "a Hugging Face imagefolder caption table: not read in a dataset (`lorastudio datasets import DIR` "
        "stores its rows as metadata.jsonl, which is read; or give each image a .txt caption)"
    )


def unread_caption_problems(
    root: Path, folder_id: FolderId, dropped: list[tuple[str, str]], untold: list[str], has_metadata: bool
) -> list[str]:
    """The problems naming the caption files a dataset holds in a form not read (a kohya
    `<stem>.caption` in a plain folder, a JSON sidecar `<stem>.json`, a Hugging Face
    `metadata.csv` without a metadata.jsonl, a `<stem>.txt` or `.caption` that is a symbolic
    link, a named pipe or a device, a metadata.jsonl that is a symbolic link, a metadata.jsonl
    row naming the image otherwise: `images/x.png`, `X.PNG`, `café.png` decomposed) where an
    image they caption has no caption of its own (`untold`: the names of the images that would train on the trigger word or default
    caption, or have no caption at all). `dropped`: the listing's (name, reason) pairs, whose
    reason says what to do. An image with a caption of its own keeps the rule of a file not used:
    named by the preflight, not refused; so does a blank `.caption` (no caption in it, as a blank
    .txt; read as `captions.read_sidecar` reads one, from `root` of identity `folder_id`). Each
    problem also says how to train without the file (delete it)."""

    if not untold:
        return []
    by_stem = {Path(name).stem: name for name in untold}
    by_name = {name_key(name): name for name in untold}
    out = []
    for name, why in dropped:
        stem, _, ext = name.rpartition(".")
        image = by_name.get(name_key(name.rpartition("/")[2]))
        one = by_stem.get(stem)  # the image this file would caption
        if why.startswith("listed in metadata.jsonl but not found") and image is not None:
            spelt = (  # the same letters composed and decomposed look alike: the code points tell them
                f" (the row's {ascii(name)} and the file's {ascii(image)} compose their accents differently)"
                if unicodedata.normalize("NFC", name) == unicodedata.normalize("NFC", image)
                else ""
            )
            out.append(  # HF's "images/x.png" beside a flat folder, another case or form of the name
                f"metadata.jsonl row {name!r}: no such file here; {image} has no caption of its own (a row's "
                f"file_name is the image's own name in this folder: {image}{spelt}; or delete the row {_WITHOUT})"
            )
        elif (name.lower() == METADATA_CSV or name.lower() in _OTHER_TABLES) and not has_metadata:
            out.append(
                f"{name}: {why}; {len(untold)} image(s) have no caption of their own (or delete it {_WITHOUT})"
            )
        elif name == "metadata.jsonl" and not has_metadata and why.startswith("symbolic link"):
            out.append(
                f"{name}: {why}; {len(untold)} image(s) have no caption of their own (copy the file itself into "
                f"the folder, or delete the link {_WITHOUT})"
            )
        elif one is not None and ext.lower() in _CAPTION_EXTS and why.startswith(_NOT_OPENED):
            # its caption is elsewhere (links are never followed out of a dataset) or in a named
            # pipe or device, never read: a kohya `.caption` link and a `.txt` pipe trained the
            # image on the folder's words or trigger word in silence (RELIABILITY 2100)
            fix = (
                "copy the caption file itself into the folder, or delete the link"
                if why.startswith("symbolic link")
                else f"save its caption as a plain file {name}, or delete it"
            )
            out.append(f"{name}: {why}; {one} has no caption of its own ({fix} {_WITHOUT})")
        elif one is not None and why.startswith(("a file of an image's name", "a .caption", "a JSON")):
            if ext.lower() == "caption" and _blank(root / name, folder_id):
                continue  # it holds no caption
            out.append(f"{name}: {why}; {one} has no caption of its own (or delete {name} {_WITHOUT})")
    return out


# the other way out of each refusal: the image trains on the trigger word or default caption, as
# before the rule, which a run started on such a folder needs to resume with the same captions
_WITHOUT = "to train without it"
# a caption file's extensions (a plain folder's `.caption` is named by discovery as not read
# before this sees it) and the reasons discovery gives an entry it never opens
_CAPTION_EXTS = ("txt", "caption")
_NOT_OPENED = ("symbolic link", "not a regular file")


def name_key(name: str) -> str:
    """A file name as a row may spell it otherwise: any case, accents composed or decomposed (NFC:
    a folder copied from macOS holds NFD names, a row written elsewhere NFC; RELIABILITY 2105)."""
    return unicodedata.normalize("NFC", name).lower()


def _blank(path: Path, folder_id: FolderId) -> bool:
    """Whether the caption file at `path` holds no caption (blank, as captions.read_sidecar reads
    it); an unreadable one is not blank (named all the same)."""
    from lorastudio.data.captions import read_sidecar
    from lorastudio.errors import DatasetError

    try:
        return read_sidecar(path, folder_id) is None
    except DatasetError:
        return False


def subfolder_hints(root: Path) -> list[str]:
    """The problems naming the sub-folders of `root` that hold images, for a folder found with
    none of its own, each with how to train them: kohya `N_words` folders through
    `kohya_folders = true`, any other as a data_dir or `[[datasets]]` entry."""
    from lorastudio.data.discovery import is_image_name
    from lorastudio.data.kohya import is_kohya_folder

    tables = [t for t in (METADATA_FILE, METADATA_CSV) if os.path.lexists(root / t)]
    table = (  # HF's `images/x.png` rows: the table is read from the images' own folder only
        f" ({' and '.join(tables)} here is read from the images' own folder only: `lorastudio datasets import "
        f"{root}` stores the images its rows name with their captions)"
        if tables
        else ""
    )
    out = []
    for name, count in image_subfolders(root, is_image_name):
        if is_kohya_folder(name):
            how = "a kohya N_words folder: set kohya_folders = true to train these folders as entries"
        else:
            how = f"give this folder as data_dir, or each such folder as a [[datasets]] entry{table}"
        out.append(f"{root / name}: {count} image(s) in a sub-folder; {how}")
    return out


_MOST_FOLDERS = 1000  # sub-folders looked into
_MOST_ENTRIES = 100_000  # entries of one sub-folder counted


def image_subfolders(root: Path, is_image: Callable[[str], bool], most: int = 10) -> list[tuple[str, int]]:
    """(name, images directly in it) of each sub-folder of `root` (not a link, not hidden) that
    holds images, sorted by name; `is_image`: the name test (discovery.is_image_name). Reads one
    level: the first _MOST_FOLDERS sub-folders, the first _MOST_ENTRIES entries of each; a
    sub-folder that cannot be listed is left out. At most `most` listed."""
    found: list[tuple[str, int]] = []
    try:
        with os.scandir(root) as it:
            folders = sorted(
                e.name for e in it if not e.name.startswith(".") and e.is_dir(follow_symlinks=False)
            )
    except OSError:
        return []
    for name in folders[:_MOST_FOLDERS]:  # an error path: bounded however the folder is filled
        try:
            with os.scandir(root / name) as it:
                count = sum(
                    1
                    for e, _ in zip(it, range(_MOST_ENTRIES), strict=False)
                    if e.is_file(follow_symlinks=False) and is_image(e.name)
                )
        except OSError:
            continue
        if count:
            found.append((name, count))
            if len(found) >= most:
                break
    return found
