"""The controls of each image of a dataset folder, for listings (the dataset screen): the
pairing of data/pairs.py (control sub-folders by stem, metadata.jsonl control rows) without
opening any control image. Orphans (controls matching no image) are listed so a user sees them
before a run refuses them. No torch."""

from __future__ import annotations

from collections.abc import Sequence
from pathlib import Path

from lorastudio.data.discovery import METADATA_FILE
from lorastudio.data.pairs import _folder_images, control_subfolders, read_metadata_controls
from lorastudio.data.paths import stem_key
from lorastudio.data.row_names import image_keyed, spelt_file


def listed_controls(folder: Path, images: Sequence[Path]) -> tuple[dict[str, list[str]], list[str]]:
    """(image file name -> its controls as paths relative to `folder`, in slot order; orphan
    control paths). Images without controls are absent from the first."""
    subs = [(sub.name, _folder_images(sub)) for sub in control_subfolders(folder)]
    metadata = folder / METADATA_FILE
    rows, _ = read_metadata_controls(metadata) if metadata.is_file() else ({}, [])
    rows = {  # as the run's pairing reads them: a name spelt otherwise is its file's (2200)
        image: [_as_stored(folder, n) for n in names]
        for image, names in image_keyed(rows, [img.name for img in images]).items()
    }
    if not subs and not rows:  # not a paired dataset: nothing to look up per image
        return {}, []
    stems = {stem_key(img.name) for img in images}
    found: dict[str, list[str]] = {}
    for img in images:
        if img.name in rows:
            names = [n for n in rows[img.name] if (folder / n).is_file()]
        else:
            # several files of one stem in a folder (a clash the run refuses): all listed
            names = [f"{label}/{p.name}" for label, files in subs for p in files.get(stem_key(img.name), ())]
        if names:
            found[img.name] = names
    used = {n for names in rows.values() for n in names}
    orphans = [
        f"{label}/{path.name}"
        for label, files in subs
        for stem, paths in sorted(files.items())
        if stem not in stems
        for path in paths
        if f"{label}/{path.name}" not in used
    ]
    return found, orphans


def _as_stored(folder: Path, name: str) -> str:
    """A row's control path `name` as the file it names is stored in `folder` (its accents
    composed otherwise: row_names.spelt_file, as data/pairs.py pairs it), else as written."""
    path = folder / name
    if ".." in Path(name).parts or Path(name).is_absolute() or path.is_file():
        return name
    found = spelt_file(path)
    return found.relative_to(folder).as_posix() if found is not None else name
