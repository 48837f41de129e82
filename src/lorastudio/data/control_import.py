"""Control images brought by a folder import (`lorastudio datasets import DIR`, plain and
--kohya, the way masks/ comes along: data/mask_import.py): the source folder's control
sub-folders (`control/`, `control_2/` ...: data/pairs.py's layout), each regular file handed to
the import's UploadBatch with its slot (data/upload_pairs.py), which checks that it is an image
and that a target of that stem is in the upload or the dataset, and refuses it with the reason
otherwise. A control folder that is a link, and links and folders inside one, are never followed
(listed with the reason). No torch."""

from __future__ import annotations

from pathlib import Path

from lorastudio.data.pairs import CONTROL_FOLDER
from lorastudio.folder_entries import never_read

NOT_FOLLOWED = "a symbolic link or a folder (not followed)"


def control_files(source: Path) -> tuple[list[tuple[str, Path]], list[tuple[str, str]]]:
    """The control images of folder `source` to import: ([(slot, file)] in slot and name order,
    [(slot/name, why it is left out)]); ([], []) when it has no control sub-folder."""
    files: list[tuple[str, Path]] = []
    skipped: list[tuple[str, str]] = []
    slots = sorted(
        (int(m.group(1) or 1), p)
        for p in source.iterdir()
        if (m := CONTROL_FOLDER.match(p.name)) and (p.is_dir() or p.is_symlink())
    )
    for _, folder in slots:
        if folder.is_symlink():
            skipped.append((f"{folder.name}/", NOT_FOLLOWED))
            continue
        for path in sorted(p for p in folder.iterdir() if not p.name.startswith(".")):
            if (why := never_read(path)) is not None:  # a pipe was "a symbolic link or a folder"
                skipped.append((f"{folder.name}/{path.name}", why))
            else:
                files.append((folder.name, path))
    return files, skipped
