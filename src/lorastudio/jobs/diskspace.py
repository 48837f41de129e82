"""A worker's failure on a full disk, told as such: "no space left on device", the folder and
what is free, instead of the library's wording (torch's zip writer says only "PytorchStreamWriter
failed writing file data/0: file write failed"; it drops the errno). No torch here.
"""

from __future__ import annotations

import re
import shutil
from pathlib import Path

NO_SPACE_TEXTS = ("No space left on device", "[Errno 28]", "[Errno 122]", "database or disk is full")
# torch.save's zip writer on a failed write() (the errno is lost on the way): "failed writing
# file", or, when a write came up short, its position check "unexpected pos 64 vs 0" (seen on a
# full tmpfs in CI); both from its enforce checks in inline_container.cc
ZIP_WRITER_TEXTS = (
    "PytorchStreamWriter failed writing file",
    "file write failed",
    "enforce fail at inline_container.cc",
)
# A zip writer failure with less free than this on the output's disk is taken as a full disk:
# its partial file is already removed again when this runs, so "free" is what did not suffice.
LOW_SPACE_BYTES = 1 << 30


def free_bytes(folder: Path) -> int | None:
    """Free bytes on the file system holding `folder` (or its nearest existing parent)."""
    path = folder
    while not path.exists() and path != path.parent:
        path = path.parent
    try:
        return shutil.disk_usage(path).free
    except OSError:
        return None


def explain_write_failure(message: str, folder: Path) -> str:
    """`message` of a worker's Error event, rewritten when it is a full disk's: it then starts
    with "no space left on device" and names `folder` (the run's output folder) and the space
    free there; the original text follows. A message the studio worded itself (errors.writing:
    "no space left on device: the checkpoint ... could not be written (PATH) ...") gets the space
    free on PATH's disk appended. Other messages come back unchanged."""
    if message.startswith("no space left on device"):  # the studio's own words (errors.writing)
        if "MB free" in message or "free space unknown" in message:
            return message
        return f"{message} ({_free_text(_named_elsewhere(message, folder) or folder)})"
    full = any(text in message for text in NO_SPACE_TEXTS)
    if not full and any(text in message for text in ZIP_WRITER_TEXTS):
        free = free_bytes(folder)
        full = free is not None and free < LOW_SPACE_BYTES
    if not full:
        return message
    elsewhere = _named_elsewhere(message, folder)
    shown = _free_text(elsewhere or folder)
    what = f"in {elsewhere}" if elsewhere is not None else f"the run's files in {folder}"
    text = (
        f"no space left on device while writing {what} ({shown}); free some "
        "space, then resume the run from its last checkpoint or start it again"
    )
    if any(t in message for t in ZIP_WRITER_TEXTS):
        return text  # torch's words name no cause and no folder: nothing to add
    return f"{text} ({message})"


def _free_text(folder: Path) -> str:
    """What is free on `folder`'s disk, as the messages say it."""
    free = free_bytes(folder)
    return f"{free / 2**20:.1f} MB free" if free is not None else "free space unknown"


_PATH = re.compile(r"(/[^\s'\"]+)")  # an absolute path in a message ("... device: '/x/a.pt'")


def _named_elsewhere(message: str, folder: Path) -> Path | None:
    """The folder of the first absolute path `message` names when it is not in the run's folder
    `folder` (the encode cache, the run store, the log: another disk may be the full one, and the
    run folder's free space would mislead); None when it names none or one in `folder`."""
    found = _PATH.search(message)
    if found is None:
        return None
    path = Path(found.group(1).rstrip(":;,.)"))
    if path == folder or folder in path.parents:
        return None
    return path.parent


def output_folder(outputs_dir: Path, output_name: str | None) -> Path:
    """The run's output folder (the outputs root when the name is not known)."""
    return outputs_dir / output_name if output_name else outputs_dir
