"""The caption of an image in a kohya `N_words` folder: ONE rule for `datasets import --kohya`
(data/kohya.plan_kohya_import) and a run reading such folders in place (TrainConfig.kohya_folders:
data/discovery.discover(kohya=True) and data/scan.scan_dataset). No torch, no HTTP.

kohya's sd-scripts read `<image><caption_extension>`: ".caption" by default, ".txt" in most
guides and GUIs. A kohya folder's image is captioned by the text of its `<stem>.txt` and
`<stem>.caption` files, any case (`a.TXT` too; stems compared exactly, as the dataset scan does);
blank ones count as none; two that hold different text are refused naming both (kohya would read
only the one its caption_extension names, and which one that was is not known here). No caption
file: the folder's words (its default caption), applied by the caller.
A plain (non-kohya) dataset keeps its own rule: `<stem>.txt` only (data/discovery.py).
Hand-written: the rule is sd-scripts' caption_extension convention, no library reads it.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path

from lorastudio.data.captions import read_sidecar
from lorastudio.data.safe_open import FolderId
from lorastudio.errors import DatasetError

# kohya's two caption extensions (sd-scripts' --caption_extension: ".caption" by default)
KOHYA_CAPTION_SUFFIXES = (".txt", ".caption")


def is_kohya_caption_name(name: str) -> bool:
    """Whether file `name` is a caption file in a kohya folder: visible, and ending in .txt or
    .caption in any case."""
    return not name.startswith(".") and Path(name).suffix.lower() in KOHYA_CAPTION_SUFFIXES


# files of an image's name that hold no caption: kohya's own latent cache (<stem>.npz, written
# beside the image by --cache_latents_to_disk)
_NOT_CAPTIONS = (".npz",)


def other_caption_reason(name: str, image_stems: set[str] | frozenset[str]) -> str | None:
    """Why the file `name` of a kohya folder, named as one of its images (`image_stems`) but
    neither an image nor a .txt / .caption, is not read: kohya's `--caption_extension` takes any
    extension (".tags", ".cap" ...), and such a file is that image's caption, which lorastudio
    does not read (RELIABILITY 1005); None for any other file. The caller refuses (a run) or
    skips (the import) such an image when it has no caption of its own, never training it on the
    folder's words in silence."""
    path = Path(name)
    suffix = path.suffix.lower()
    if not suffix or path.stem not in image_stems or is_kohya_caption_name(name) or suffix in _NOT_CAPTIONS:
        return None
    from lorastudio.data.discovery import IMAGE_EXTENSIONS

    if suffix in IMAGE_EXTENSIONS:
        return None
    return (
        f"a file of an image's name, not read: if it holds {path.stem}'s caption (kohya's caption_extension "
        f"{suffix}), rename it {path.stem}.txt (captions: <image>.txt or .caption)"
    )


@dataclass(frozen=True)
class KohyaCaption:
    """An image's caption in a kohya folder: `text` (None: no caption file holds any) and `path`,
    the file it was read from (the first by name of those holding it; None with no text)."""

    text: str | None
    path: Path | None


def kohya_caption(files: Sequence[Path], folder_id: FolderId | None = None) -> KohyaCaption:
    """The caption of one image of a kohya folder from its caption `files` (every `<stem>.txt` /
    `<stem>.caption` of its stem, any case; read as captions.read_sidecar reads one, opened
    in `folder_id` when given).

    Raises: DatasetError naming a caption file that cannot be read (read_sidecar's problem), or
    the files when two hold different text: "b.caption and b.txt disagree (...): delete the other".
    """
    texts: dict[str, str] = {}
    first: Path | None = None
    for sidecar in sorted(files, key=lambda p: p.name):
        text = read_sidecar(sidecar, folder_id)  # raises DatasetError naming a bad caption
        if text:
            texts[sidecar.name] = text
            first = first or sidecar
    if len(set(texts.values())) > 1:
        raise DatasetError(
            "an image's caption files disagree",
            [
                f"{' and '.join(sorted(texts))} disagree (kohya reads only the one its caption_extension"
                " names): delete the other"
            ],
        )
    return KohyaCaption(next(iter(texts.values()), None), first)
